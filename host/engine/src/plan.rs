//! Resolved filters into DataFusion expressions, built with the Expr API (never SQL text).
//!
//! Semantics (docs/semantics.md, as the public administrative-procedures server has them):
//! - an array / `$in` / `$eq` match whole values exactly; on a multi-value field they match
//!   any trimmed part;
//! - a plain string / `$contains` is a case-insensitive substring where null counts as "";
//!   on a multi-value field it sees the raw cell;
//! - numeric comparisons (including `$ne` on a numeric field) never match null;
//! - `$ne` on a text field matches empty cells (they are not equal to the value);
//! - `$not_empty` treats null and blank alike.

use datafusion::arrow::datatypes::DataType;
use datafusion::functions::expr_fn::btrim;
use datafusion::functions_nested::expr_fn::{array_has, array_has_any, make_array};
use std::ops::Not;

use datafusion::logical_expr::{Expr, cast, lit};
use datafusion::prelude::ident;
use tally_semantic::definition::{DatasetDef, Field};
use tally_semantic::request::{Op, Scalar};
use tally_semantic::resolve::{FieldId, Filter};
use tally_semantic::{ErrorCode, RequestError};

use std::sync::Arc;

use tally_storage::dataset::{Prepared, ROW_COL};
use tally_storage::udf::Functions;

/// Builds expressions for one dataset.
#[derive(Debug)]
pub struct Planner<'a> {
    pub def: &'a DatasetDef,
    pub functions: &'a Functions,
    /// The data the call reads: a prepared table answers text conditions from its
    /// dictionaries (storage's `search`) instead of testing every record's text.
    pub data: Option<Arc<Prepared>>,
    /// The call's stop: a search through the dictionaries ends at it.
    pub stop: tally_storage::stop::Stop,
}

fn numeric_literal(field: &Field, value: &Scalar, op: &str) -> Result<Expr, RequestError> {
    match value.number() {
        Some(n) => Ok(lit(n)),
        None => Err(RequestError::invalid(
            format!("where.{}.{op}", field.name),
            format!("`{}` is numeric; `{}` is not a number", field.name, value.text()),
        )
        .hint("compare numeric fields with numbers, e.g. {\"$gte\": 100}; for text search use a plain string")),
    }
}

fn text_literal(value: &Scalar) -> Expr {
    lit(value.text())
}

impl<'a> Planner<'a> {
    pub fn field(&self, id: FieldId) -> &'a Field {
        &self.def.fields[id]
    }

    /// The column of a field.
    pub fn column(&self, id: FieldId) -> Expr {
        ident(&self.def.fields[id].name)
    }

    fn as_f64(&self, id: FieldId) -> Expr {
        cast(self.column(id), DataType::Float64)
    }

    fn as_text(&self, id: FieldId) -> Expr {
        let f = self.field(id);
        if f.data_type.is_numeric() {
            cast(self.column(id), DataType::Utf8)
        } else {
            self.column(id)
        }
    }

    /// The parts of a multi-value field (trimmed, non-empty).
    pub fn parts(&self, id: FieldId, keep_empty: bool) -> Expr {
        let sep = self.field(id).multi_value.as_deref().unwrap_or(";");
        self.functions.parts(self.column(id), sep, keep_empty)
    }

    /// How many parts [`Planner::parts`] gives each record (0: none), without the list.
    pub fn part_count(&self, id: FieldId) -> Expr {
        let sep = self.field(id).multi_value.as_deref().unwrap_or(";");
        self.functions.part_count_of(self.column(id), sep)
    }

    /// The provision a law reference names, or one inside it: the locator itself, or the
    /// locator followed by a deeper level (`第五条` holds `第五条第一項`, not `第五条の二`).
    fn within(&self, id: FieldId, reference: &Scalar) -> Expr {
        let r = reference.text();
        self.column(id)
            .eq(lit(r.clone()))
            .or(datafusion::functions::expr_fn::starts_with(
                self.column(id),
                lit(format!("{r}第")),
            ))
    }

    /// Whether a provision is one of `references` or inside one: a balanced tree of `or`s,
    /// never a chain as deep as the list is long.
    fn within_any(&self, id: FieldId, references: &[Scalar]) -> Expr {
        balanced(
            references.iter().map(|v| self.within(id, v)).collect(),
            Expr::or,
        )
        .unwrap_or_else(|| lit(false))
    }

    /// `$not_empty` on any expression of text.
    fn not_empty(&self, text: Expr, numeric: bool) -> Expr {
        if numeric {
            text.is_not_null()
        } else {
            text.clone()
                .is_not_null()
                .and(btrim(vec![text]).not_eq(lit("")))
        }
    }

    pub fn filter(&self, filter: &Filter) -> Result<Expr, RequestError> {
        let f = self.field(filter.field);
        let id = filter.field;
        let numeric = f.data_type.is_numeric();
        let multi = f.is_multi_value();
        let law = f.locator == Some(tally_semantic::definition::LocatorKind::Law);
        Ok(match &filter.op {
            Op::Eq(v) if law => self.within(id, v),
            Op::In(values) if law => self.within_any(id, values),
            Op::Ne(v) if law => self.within(id, v).is_not_true(),
            Op::Nin(values) if law => self.within_any(id, values).is_not_true(),
            Op::In(values) if numeric => {
                let list = values
                    .iter()
                    .map(|v| numeric_literal(f, v, "$in"))
                    .collect::<Result<Vec<_>, _>>()?;
                self.as_f64(id).in_list(list, false)
            }
            Op::In(values) if multi => array_has_any(
                self.parts(id, false),
                make_array(values.iter().map(text_literal).collect()),
            ),
            Op::In(values) => self
                .column(id)
                .in_list(values.iter().map(text_literal).collect(), false),
            Op::Eq(v) if numeric => self.as_f64(id).eq(numeric_literal(f, v, "$eq")?),
            Op::Eq(v) if multi => array_has(self.parts(id, false), text_literal(v)),
            Op::Eq(v) => self.column(id).eq(text_literal(v)),
            Op::Ne(v) if numeric => self.as_f64(id).not_eq(numeric_literal(f, v, "$ne")?),
            Op::Ne(v) if multi => array_has(self.parts(id, false), text_literal(v)).not(),
            Op::Ne(v) => self
                .column(id)
                .is_null()
                .or(self.column(id).not_eq(text_literal(v))),
            // One set, whatever its size: as `$ne` of each value, ANDed (a number never
            // matches null; text matches a missing cell; a multi-value cell holds none of them).
            Op::Nin(values) if numeric => {
                let list = values
                    .iter()
                    .map(|v| numeric_literal(f, v, "$nin"))
                    .collect::<Result<Vec<_>, _>>()?;
                self.as_f64(id).in_list(list, true)
            }
            Op::Nin(values) if multi => array_has_any(
                self.parts(id, false),
                make_array(values.iter().map(text_literal).collect()),
            )
            .not(),
            Op::Nin(values) => self.column(id).is_null().or(self
                .column(id)
                .in_list(values.iter().map(text_literal).collect(), true)),
            Op::Contains(t) => self.contains(&[id], t),
            Op::NotContains(t) => self.contains(&[id], t).not(),
            Op::Gt(v) | Op::Gte(v) | Op::Lt(v) | Op::Lte(v) => {
                let (left, right) = if numeric {
                    (self.as_f64(id), numeric_literal(f, v, filter.op.name())?)
                } else {
                    (self.column(id), text_literal(v))
                };
                match &filter.op {
                    Op::Gt(_) => left.gt(right),
                    Op::Gte(_) => left.gt_eq(right),
                    Op::Lt(_) => left.lt(right),
                    _ => left.lt_eq(right),
                }
            }
            Op::NotEmpty(true) => self.not_empty(self.column(id), numeric),
            Op::NotEmpty(false) => self.not_empty(self.column(id), numeric).not(),
        })
    }

    /// A filter on an exploded part (a single text value per row).
    pub fn part_filter(&self, part: Expr, op: &Op) -> Expr {
        match op {
            Op::In(values) => part.in_list(values.iter().map(text_literal).collect(), false),
            Op::Eq(v) => part.eq(text_literal(v)),
            Op::Ne(v) => part.not_eq(text_literal(v)),
            Op::Nin(values) => part.in_list(values.iter().map(text_literal).collect(), true),
            Op::Contains(t) => self.functions.icontains(part, t),
            Op::NotContains(t) => self.functions.icontains(part, t).not(),
            Op::Gt(v) => part.gt(text_literal(v)),
            Op::Gte(v) => part.gt_eq(text_literal(v)),
            Op::Lt(v) => part.lt(text_literal(v)),
            Op::Lte(v) => part.lt_eq(text_literal(v)),
            // A key may be null (a missing value) or, for exploded parts, never empty.
            Op::NotEmpty(true) => part.clone().is_not_null().and(part.not_eq(lit(""))),
            Op::NotEmpty(false) => part.clone().is_null().or(part.eq(lit(""))),
        }
    }

    /// Free-text search: over every text field, or the given ones (a record matches when one
    /// of them contains the text). On a prepared table each field's dictionary is searched
    /// once and its records matched by code.
    pub fn search(&self, q: &str, fields: &[FieldId]) -> Expr {
        // Control characters cannot be typed into a cell meaningfully.
        let q: String = q.chars().filter(|c| !c.is_control()).collect();
        let all: Vec<FieldId>;
        let fields = if fields.is_empty() {
            all = searched_by_default(self.def);
            &all
        } else {
            fields
        };
        self.contains(fields, &q)
    }

    /// Whether one of `fields` contains `needle` (case and width folded; null counts as
    /// `""`). The text fields of a prepared table are searched through their dictionaries,
    /// once for all of them; others (and data read from files) record by record.
    fn contains(&self, fields: &[FieldId], needle: &str) -> Expr {
        let indexed: Vec<FieldId> = match &self.data {
            Some(data) => fields
                .iter()
                .copied()
                .filter(|f| data.layout.is_text(f.index()))
                .collect(),
            None => Vec::new(),
        };
        let folded = tally_semantic::names::fold(needle);
        let found = self
            .data
            .as_ref()
            .filter(|_| !indexed.is_empty())
            .and_then(|data| match data.text_search(&indexed, &folded, &self.stop)? {
                Ok(found) => Some(found),
                Err(e) => {
                    // The row-by-row test gives the same answer, slower.
                    tracing::warn!(dataset = %self.def.id, error = %e, "text search through the dictionaries failed; testing every record");
                    None
                }
            });
        let (by_rows, rest) = match &found {
            Some(found) => (
                Some(self.functions.rows_in(ident(ROW_COL), found)),
                fields
                    .iter()
                    .filter(|f| !indexed.contains(f))
                    .copied()
                    .collect(),
            ),
            None => (None, fields.to_vec()),
        };
        by_rows
            .into_iter()
            .chain(
                rest.iter()
                    .map(|id| self.functions.icontains(self.as_text(*id), needle)),
            )
            .reduce(Expr::or)
            .unwrap_or(lit(true))
    }
}

/// The fields `q` searches when the call names none: every text field of the data (a field
/// looked up through a relation or a roll-up is no column of it).
pub fn searched_by_default(def: &DatasetDef) -> Vec<FieldId> {
    (0..def.fields.len())
        .map(FieldId::at)
        .filter(|f| !def.fields[*f].data_type.is_numeric() && def.fields[*f].is_column())
        .collect()
}

/// ANDs expressions; `None` when there are none. The tree is balanced: its depth grows with
/// the logarithm of the number of conditions, so no list a request holds makes planning (or
/// dropping the plan) recurse in proportion to it.
pub fn conjunction(exprs: Vec<Expr>) -> Option<Expr> {
    balanced(exprs, Expr::and)
}

/// Joins expressions pairwise, level by level, into a tree of depth ⌈log2 n⌉ (in the order
/// given: `[a, b, c, d]` is `(a ∘ b) ∘ (c ∘ d)`); `None` when there are none.
pub fn balanced(mut exprs: Vec<Expr>, join: fn(Expr, Expr) -> Expr) -> Option<Expr> {
    while exprs.len() > 1 {
        let mut next = Vec::with_capacity(exprs.len().div_ceil(2));
        let mut items = exprs.into_iter();
        while let Some(left) = items.next() {
            next.push(match items.next() {
                Some(right) => join(left, right),
                None => left,
            });
        }
        exprs = next;
    }
    exprs.pop()
}

/// An error for a value that cannot be compared with a field.
pub fn bad_value(field: &Field, message: String) -> RequestError {
    RequestError::new(ErrorCode::InvalidArgument, message).at(format!("where.{}", field.name))
}
