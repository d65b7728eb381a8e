//! The conditions of a call that a dataset's backend applies itself (DataFusion's
//! `TableProvider` takes its filters the same way): the engine turns the resolved request's
//! conditions into [`Pushed`] ones, so storage receives only columns, values and bounds and
//! knows nothing of the request model.

use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::Filter;
use tally_storage::backend::{BoundOp, Number, Pushed};
use tally_storage::dataset::Dataset;

/// The conditions of a call that the backend can apply itself: equality on a field it
/// declared, not multi-valued (a number as its number: `2024`, never `"2024.0"`), and
/// ranges on its numeric fields when it `Backend::prunes_ranges`.
pub fn pushdown(ds: &Dataset, filters: &[Filter]) -> Vec<Pushed> {
    let columns = ds.backend.pushdown_columns();
    if columns.is_empty() {
        return Vec::new();
    }
    let ranges = ds.backend.prunes_ranges();
    let mut out: Vec<Pushed> = filters
        .iter()
        .filter_map(|f| {
            let field = &ds.def.fields[f.field];
            if field.is_multi_value() || !columns.contains(&field.name) {
                return None;
            }
            pushed_of(&field.name, field.data_type.is_numeric(), ranges, &f.op)
        })
        .collect();
    out.sort();
    out
}

/// The condition `op` on `column` as its backend applies it, when it can be said so: an
/// equality (a value of a numeric field as its number, `2024`), or, when the backend
/// `ranges`, a range on a numeric field with its bound parsed here, once. A value that is
/// not a number on a numeric field is not pushed: it matches nothing the engine keeps
/// either, and the engine, which applies every condition again, says so.
fn pushed_of(column: &str, numeric: bool, ranges: bool, op: &Op) -> Option<Pushed> {
    let text = |v: &Scalar| {
        if numeric {
            v.number().map(|n| n.to_string())
        } else {
            Some(v.text())
        }
    };
    let range = |op: BoundOp, v: &Scalar| {
        (ranges && numeric)
            .then(|| v.number().and_then(Number::new))
            .flatten()
            .map(|value| Pushed::range(column, op, value))
    };
    match op {
        Op::Eq(v) => Pushed::equal(column, vec![text(v)?]),
        Op::In(vs) => Pushed::equal(column, vs.iter().map(text).collect::<Option<_>>()?),
        Op::Gt(v) => range(BoundOp::Gt, v),
        Op::Gte(v) => range(BoundOp::Gte, v),
        Op::Lt(v) => range(BoundOp::Lt, v),
        Op::Lte(v) => range(BoundOp::Lte, v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::pushed_of;
    use tally_semantic::request::{Op, Scalar};
    use tally_storage::backend::{BoundOp, Number, Pushed, Test};

    #[test]
    fn a_bound_that_is_not_a_number_is_not_pushed() {
        for op in [
            Op::Gt(Scalar::Str("abc".into())),
            Op::Lte(Scalar::Str("".into())),
            Op::Gte(Scalar::Bool(true)),
            Op::Lt(Scalar::Str("NaN".into())),
            Op::Gt(Scalar::Str("inf".into())),
        ] {
            assert_eq!(pushed_of("年度", true, true, &op), None, "{op:?}");
        }
    }

    #[test]
    fn a_bound_is_parsed_once_where_it_is_pushed() {
        let pushed = pushed_of("年度", true, true, &Op::Gte(Scalar::Str(" 2023.5 ".into())));
        assert_eq!(
            pushed,
            Some(Pushed::range(
                "年度",
                BoundOp::Gte,
                Number::new(2023.5).unwrap()
            ))
        );
        let Some(Pushed {
            test: Test::Range(bound),
            ..
        }) = pushed
        else {
            unreachable!()
        };
        assert_eq!(bound.value.get(), 2023.5);
        // Written as the number it is, whatever form it was asked in.
        let int = pushed_of("年度", true, true, &Op::Lt(Scalar::Int(2024)));
        assert_eq!(int.map(|p| p.describe()).as_deref(), Some("`年度` < 2024"));
    }

    #[test]
    fn a_bound_is_pushed_only_on_a_numeric_field_of_a_backend_that_prunes_ranges() {
        let gt = Op::Gt(Scalar::Int(1));
        assert!(pushed_of("n", true, true, &gt).is_some());
        assert_eq!(pushed_of("n", true, false, &gt), None);
        assert_eq!(pushed_of("name", false, true, &gt), None);
    }

    #[test]
    fn pushed_equality_is_text_with_numbers_as_their_numbers() {
        assert_eq!(
            pushed_of("年度", true, false, &Op::Eq(Scalar::Float(2024.0))),
            Pushed::equal("年度", vec!["2024".into()])
        );
        assert_eq!(
            pushed_of("年度", true, false, &Op::Eq(Scalar::Str("abc".into()))),
            None
        );
        assert_eq!(
            pushed_of(
                "code",
                false,
                false,
                &Op::In(vec![Scalar::Str("a".into()), Scalar::Int(7)])
            ),
            Pushed::equal("code", vec!["a".into(), "7".into()])
        );
        // No value: nothing to push (no row satisfies it, which the engine says).
        assert_eq!(pushed_of("code", false, false, &Op::In(Vec::new())), None);
    }
}
