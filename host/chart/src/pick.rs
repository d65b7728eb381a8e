//! What a chart draws of the rows it is given: the largest groups by the charted metric,
//! within the chart's bounds ([`LIMITS`](crate::limits::LIMITS)), and the rest folded into one
//! "others" group when the metric adds up (a count or a sum: the others' value is the sum of
//! theirs), or left out, and said, when it does not (an average, a share, an extreme, a
//! change: no one value stands for several groups).
//!
//! The same rules as the view's (`pickGroups` and `pickPairs` in `host/mcp/ui/view.js`), so
//! that an image and a view of the same rows draw the same groups. The view may hold more than
//! the rows of the answer (it asks for the largest groups in calls of its own); this crate
//! draws the rows it is given, and says so when the answer did not hold every group.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde_json::Value;

use crate::limits::ALL_IN_TABLE;
use crate::summary::{Metric, Summary};
use crate::text::{cell_label, code_order, format_number};

/// The label of a group that stands for `n` others: `(1,811 others)`, in the style of
/// `(no value)`. The view writes the same.
pub(crate) fn others_label(n: usize) -> String {
    format!("({} others)", count(n))
}

fn count(n: usize) -> String {
    format_number(n as f64, 0)
}

/// The sum of several values, exact for integers (as the engine's sums are): nulls and
/// anything not a number add nothing; no number at all sums to null, as the engine's sum of
/// nothing is.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Sum {
    int: i128,
    float: f64,
    fractional: bool,
    numbers: usize,
}

impl Sum {
    pub fn add(&mut self, v: &Value) {
        let Value::Number(n) = v else { return };
        self.numbers += 1;
        match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => self.int += i128::from(i),
            (_, Some(u)) => self.int += i128::from(u),
            _ => {
                self.fractional = true;
                self.float += n.as_f64().unwrap_or(0.0);
            }
        }
    }

    /// The sum as a JSON value: an integer when every part was one (and it fits), else a
    /// float; null when nothing was a number.
    pub fn value(&self) -> Value {
        if self.numbers == 0 {
            return Value::Null;
        }
        if !self.fractional
            && let Ok(i) = i64::try_from(self.int)
        {
            return Value::from(i);
        }
        Value::from(self.int as f64 + self.float)
    }
}

/// The values of `v`'s groups folded into one.
fn sum<'v>(values: impl IntoIterator<Item = &'v Value>) -> Value {
    let mut s = Sum::default();
    for v in values {
        s.add(v);
    }
    s.value()
}

/// Rows ordered by `col`, largest first, nulls (and anything not a number) last; the order of
/// equal values is kept.
pub(crate) fn by_value_desc<'a>(rows: &[&'a [Value]], col: usize) -> Vec<&'a [Value]> {
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| desc(a[col].as_f64(), b[col].as_f64()));
    rows
}

/// Largest first, nothing (`None`) last.
fn desc(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Groups folded into one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Others {
    /// How many groups it stands for.
    pub groups: usize,
    /// The sum of their values (null when none had one).
    pub value: Value,
}

impl Others {
    pub fn label(&self) -> String {
        others_label(self.groups)
    }
}

/// What a chart of one grouping draws: the largest groups, and the rest folded or left out.
#[derive(Debug)]
pub(crate) struct Groups<'a> {
    /// The rows drawn apart, largest first (nulls last).
    pub rows: Vec<&'a [Value]>,
    /// The rest as one group, when the metric adds up.
    pub others: Option<Others>,
    /// How many rows were given.
    pub given: usize,
}

impl Groups<'_> {
    /// How many given rows are neither drawn nor folded.
    pub fn left_out(&self) -> usize {
        self.given - self.rows.len() - self.others.as_ref().map_or(0, |o| o.groups)
    }
}

/// The largest of `rows` by the metric, at most `most` drawn in all: past it, `most - 1` and
/// the rest as one "others" group when the metric adds up, else `most` and the rest left out.
pub(crate) fn pick_groups<'a>(rows: &[&'a [Value]], metric: &Metric, most: usize) -> Groups<'a> {
    let mut rows = by_value_desc(rows, metric.index);
    let given = rows.len();
    if given <= most {
        return Groups {
            rows,
            others: None,
            given,
        };
    }
    if metric.additive() && most >= 1 {
        let rest = rows.split_off(most - 1);
        let others = Others {
            groups: rest.len(),
            value: sum(rest.iter().map(|r| &r[metric.index])),
        };
        return Groups {
            rows,
            others: Some(others),
            given,
        };
    }
    rows.truncate(most);
    Groups {
        rows,
        others: None,
        given,
    }
}

/// The sentence under a chart of one grouping that drew less than it was given, e.g. "The 99
/// largest of 10,000 groups are drawn, and the other 9,901 as one bar, “(9,901 others)”, their
/// sum; the result's table has them all." `mark` names what one group is drawn as.
pub(crate) fn groups_note(groups: &Groups<'_>, metric: &Metric, mark: &str) -> Option<String> {
    let drawn = groups.rows.len();
    let given = count(groups.given);
    if let Some(others) = &groups.others {
        return Some(format!(
            "The {drawn} largest of {given} groups are drawn, and the other {} as one {mark}, \
             “{}”, their sum; {ALL_IN_TABLE}",
            count(others.groups),
            others.label()
        ));
    }
    let left_out = groups.left_out();
    (left_out > 0).then(|| {
        format!(
            "The {drawn} largest of {given} groups by {} are drawn; the other {} are left out, \
             as {} does not add up across groups; {ALL_IN_TABLE}",
            metric.column,
            count(left_out),
            metric.column
        )
    })
}

/// The sentence that says a chart folded or cut only the groups the result holds, when it
/// does not hold them all (its `limit`, or its size budget): "others" sums those it holds.
pub(crate) fn partial_note(summary: &Summary<'_>, folded: bool) -> Option<String> {
    let total = summary.total_group_count? as usize;
    let held = summary.rows.len();
    (total > held).then(|| {
        format!(
            "The result holds {} of {} groups (its limit or its size budget); the chart is of \
             those{}.",
            count(held),
            count(total),
            if folded {
                ", and “others” sums the ones it holds"
            } else {
                ""
            }
        )
    })
}

/// One grouping's values in a chart of two: which are drawn apart, and how many were given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    /// The values drawn apart, in the order drawn (labels).
    pub values: Vec<String>,
    /// How many values were given.
    pub given: usize,
    /// How many are folded into one "others" value, drawn last.
    pub folded: usize,
}

impl Axis {
    /// The labels drawn, the "others" value last.
    pub fn labels(&self) -> Vec<String> {
        let mut labels = self.values.clone();
        if self.folded > 0 {
            labels.push(others_label(self.folded));
        }
        labels
    }

    /// How many given values are neither drawn apart nor folded.
    pub fn left_out(&self) -> usize {
        self.given - self.values.len() - self.folded
    }

    /// What of this grouping is drawn, for the note: None when all of it.
    fn said(&self, what: &str, metric: &Metric) -> Option<String> {
        let (n, given) = (self.values.len(), count(self.given));
        if self.folded > 0 {
            Some(format!(
                "the {n} largest of {given} {what} are drawn, and the other {} as one, “{}”, \
                 their sum",
                count(self.folded),
                others_label(self.folded)
            ))
        } else if self.left_out() > 0 {
            Some(format!(
                "the {n} largest of {given} {what} by {} are drawn and the other {} left out, as \
                 it does not add up across groups",
                metric.column,
                count(self.left_out())
            ))
        } else {
            None
        }
    }
}

/// What a chart of two groupings draws: the largest values of each grouping by their totals
/// (their largest value when the metric does not add up), the first grouping's largest first,
/// the second's in code order; past a bound the rest folded into one "others" row or column
/// (their cells summed) when the metric adds up, else left out.
#[derive(Debug)]
pub(crate) struct Grid {
    pub first: Axis,
    pub second: Axis,
    /// The cells drawn: (row, column, value), row by row as drawn. Rows and columns index
    /// [`Axis::labels`]: a folded cell is at the "others" row or column.
    pub cells: Vec<(usize, usize, Value)>,
}

impl Grid {
    pub fn new(
        summary: &Summary<'_>,
        metric: &Metric,
        max_first: usize,
        max_second: usize,
    ) -> Self {
        let (g1, g2) = (summary.groups[0].index, summary.groups[1].index);
        let col = metric.index;
        // Labels once per row; positions by hash, as a result can have 100,000 rows.
        let keys: Vec<(String, String)> = summary
            .rows
            .iter()
            .map(|r| (cell_label(&r[g1]), cell_label(&r[g2])))
            .collect();
        let additive = metric.additive();
        let first = Ranked::of(
            keys.iter().map(|k| k.0.as_str()),
            &summary.rows,
            col,
            additive,
        );
        let second = Ranked::of(
            keys.iter().map(|k| k.1.as_str()),
            &summary.rows,
            col,
            additive,
        );
        let (first_drawn, first_folded) = first.pick(max_first, additive);
        let (mut second_drawn, second_folded) = second.pick(max_second, additive);
        second_drawn.sort_by(|a, b| code_order(a, b));

        let first_at: HashMap<&str, usize> = first_drawn
            .iter()
            .enumerate()
            .map(|(i, a)| (*a, i))
            .collect();
        let second_at: HashMap<&str, usize> = second_drawn
            .iter()
            .enumerate()
            .map(|(i, b)| (*b, i))
            .collect();
        // The "others" row and column come after the values drawn apart.
        let first_others = (first_folded > 0).then_some(first_drawn.len());
        let second_others = (second_folded > 0).then_some(second_drawn.len());
        let mut cells: Vec<(usize, usize, Value)> = Vec::new();
        let mut folded: HashMap<(usize, usize), Sum> = HashMap::new();
        for (r, (a, b)) in summary.rows.iter().zip(&keys) {
            let row = first_at.get(a.as_str()).copied().or(first_others);
            let column = second_at.get(b.as_str()).copied().or(second_others);
            let (Some(row), Some(column)) = (row, column) else {
                continue;
            };
            if Some(row) == first_others || Some(column) == second_others {
                folded.entry((row, column)).or_default().add(&r[col]);
            } else {
                cells.push((row, column, r[col].clone()));
            }
        }
        cells.extend(folded.into_iter().map(|((a, b), s)| (a, b, s.value())));
        // Row by row as drawn, so that the marks read in the chart's order.
        cells.sort_by_key(|&(a, b, _)| (a, b));
        Grid {
            first: Axis {
                values: first_drawn.into_iter().map(str::to_owned).collect(),
                given: first.keys.len(),
                folded: first_folded,
            },
            second: Axis {
                values: second_drawn.into_iter().map(str::to_owned).collect(),
                given: second.keys.len(),
                folded: second_folded,
            },
            cells,
        }
    }

    /// The note that says what was drawn of what was given, if not everything: "The 59 largest
    /// of 500 rows are drawn, and the other 441 as one, “(441 others)”, their sum; the first
    /// …; the result's table has them all."
    pub fn note(&self, first_what: &str, second_what: &str, metric: &Metric) -> Option<String> {
        let parts: Vec<String> = [
            self.first.said(first_what, metric),
            self.second.said(second_what, metric),
        ]
        .into_iter()
        .flatten()
        .collect();
        if parts.is_empty() {
            return None;
        }
        let text = parts.join("; ");
        let mut chars = text.chars();
        let capital = chars
            .next()
            .map_or(String::new(), |c| c.to_uppercase().collect());
        Some(format!("{capital}{}; {ALL_IN_TABLE}", chars.as_str()))
    }

    /// Whether anything was folded into "others".
    pub fn folded(&self) -> bool {
        self.first.folded > 0 || self.second.folded > 0
    }
}

/// A grouping's values in the order they first appear, with what ranks them: their total
/// (nulls add nothing) when the metric adds up, else their largest value.
struct Ranked<'k> {
    keys: Vec<&'k str>,
    rank: Vec<Option<f64>>,
}

impl<'k> Ranked<'k> {
    fn of(
        keys: impl Iterator<Item = &'k str>,
        rows: &[&[Value]],
        col: usize,
        additive: bool,
    ) -> Self {
        let mut at: HashMap<&str, usize> = HashMap::new();
        let mut ranked = Ranked {
            keys: Vec::new(),
            rank: Vec::new(),
        };
        for (key, r) in keys.zip(rows) {
            let i = *at.entry(key).or_insert_with(|| {
                ranked.keys.push(key);
                ranked.rank.push(additive.then_some(0.0));
                ranked.keys.len() - 1
            });
            if let Some(v) = r[col].as_f64() {
                ranked.rank[i] = Some(match ranked.rank[i] {
                    Some(x) if additive => x + v,
                    Some(x) => x.max(v),
                    None => v,
                });
            }
        }
        ranked
    }

    /// The values drawn apart, largest first, and how many are folded: at most `most` in all,
    /// one of them "others" when the metric adds up.
    fn pick(&self, most: usize, additive: bool) -> (Vec<&'k str>, usize) {
        let mut order: Vec<usize> = (0..self.keys.len()).collect();
        // Stable: equal ranks keep the order the rows give.
        order.sort_by(|&a, &b| desc(self.rank[a], self.rank[b]));
        let n = self.keys.len();
        let (drawn, folded) = if n <= most {
            (n, 0)
        } else if additive && most >= 1 {
            (most - 1, n - (most - 1))
        } else {
            (most, 0)
        };
        (
            order[..drawn].iter().map(|&i| self.keys[i]).collect(),
            folded,
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kind::MetricKind;
    use crate::summary::Group;

    fn metric(kind: MetricKind, index: usize) -> Metric {
        Metric {
            column: match kind {
                MetricKind::Count => "count".to_owned(),
                _ => format!("{}:x", kind.as_str()),
            },
            index,
            kind,
            unit: None,
            description: String::new(),
            decimals: None,
        }
    }

    fn rows(values: &[Value]) -> Vec<Vec<Value>> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| vec![json!(format!("g{}", i + 1)), v.clone()])
            .collect()
    }

    fn refs(rows: &[Vec<Value>]) -> Vec<&[Value]> {
        rows.iter().map(Vec::as_slice).collect()
    }

    fn labels(groups: &Groups<'_>) -> Vec<String> {
        groups.rows.iter().map(|r| cell_label(&r[0])).collect()
    }

    #[test]
    fn sums_are_exact_for_integers_and_null_for_nothing() {
        assert_eq!(
            sum(&[json!(9_007_199_254_740_993_i64), json!(2)]),
            json!(9_007_199_254_740_995_i64)
        );
        assert_eq!(sum(&[json!(1.5), json!(2), Value::Null]), json!(3.5));
        assert_eq!(sum(&[Value::Null, json!("x")]), Value::Null);
        assert_eq!(sum(&[]), Value::Null);
        assert_eq!(sum(&[json!(-3), json!(3)]), json!(0));
    }

    #[test]
    fn within_the_bound_every_group_is_drawn_largest_first() {
        let given = rows(&[json!(3), Value::Null, json!(7), json!(5)]);
        let picked = pick_groups(&refs(&given), &metric(MetricKind::Count, 1), 4);
        assert_eq!(labels(&picked), ["g3", "g4", "g1", "g2"]);
        assert_eq!(picked.others, None);
        assert_eq!(picked.left_out(), 0);
        assert_eq!(
            groups_note(&picked, &metric(MetricKind::Count, 1), "bar"),
            None
        );
    }

    #[test]
    fn past_the_bound_an_additive_metric_folds_the_smallest_into_others() {
        let given = rows(&[
            json!(1),
            json!(10),
            json!(4),
            Value::Null,
            json!(6),
            json!(2),
        ]);
        let count = metric(MetricKind::Count, 1);
        let picked = pick_groups(&refs(&given), &count, 3);
        // The two largest apart, the other four (1 + 4 + 2 + null) as one: the bound is 3.
        assert_eq!(labels(&picked), ["g2", "g5"]);
        assert_eq!(
            picked.others,
            Some(Others {
                groups: 4,
                value: json!(7)
            })
        );
        assert_eq!(picked.left_out(), 0);
        assert_eq!(
            groups_note(&picked, &count, "bar").unwrap(),
            "The 2 largest of 6 groups are drawn, and the other 4 as one bar, “(4 others)”, \
             their sum; the result's table has them all."
        );
        let sums = pick_groups(&refs(&given), &metric(MetricKind::Sum, 1), 3);
        assert_eq!(sums.others.unwrap().value, json!(7));
    }

    #[test]
    fn past_the_bound_a_metric_that_does_not_add_up_is_cut_and_said() {
        let given = rows(&[json!(0.1), json!(0.9), json!(0.5), json!(0.7)]);
        let share = metric(MetricKind::Share, 1);
        let picked = pick_groups(&refs(&given), &share, 2);
        assert_eq!(labels(&picked), ["g2", "g4"]);
        assert_eq!(picked.others, None);
        assert_eq!(picked.left_out(), 2);
        assert_eq!(
            groups_note(&picked, &share, "bar").unwrap(),
            "The 2 largest of 4 groups by share:x are drawn; the other 2 are left out, as \
             share:x does not add up across groups; the result's table has them all."
        );
        for kind in [
            MetricKind::Average,
            MetricKind::Min,
            MetricKind::Max,
            MetricKind::Ratio,
            MetricKind::Change,
            MetricKind::PercentChange,
            MetricKind::Rank,
        ] {
            let picked = pick_groups(&refs(&given), &metric(kind, 1), 2);
            assert!(picked.others.is_none(), "{kind:?} is not folded");
        }
    }

    /// A summary of two groupings over `rows` (first, second, value).
    fn pairs(rows: &[Vec<Value>]) -> Summary<'_> {
        Summary {
            dataset_id: "d".to_owned(),
            columns: vec!["a".to_owned(), "b".to_owned(), "count".to_owned()],
            rows: refs(rows),
            truncated: false,
            returned: None,
            total_group_count: None,
            total_records: None,
            metrics: vec![],
            groups: vec![
                Group {
                    name: "a".to_owned(),
                    index: 0,
                },
                Group {
                    name: "b".to_owned(),
                    index: 1,
                },
            ],
            exploded: false,
            having: false,
            source_refs: vec![],
            sources: vec![],
            transformations: vec![],
            warnings: vec![],
        }
    }

    fn cell(grid: &Grid, row: &str, column: &str) -> Option<Value> {
        let (rows, columns) = (grid.first.labels(), grid.second.labels());
        let a = rows.iter().position(|r| r == row)?;
        let b = columns.iter().position(|c| c == column)?;
        grid.cells
            .iter()
            .find(|c| c.0 == a && c.1 == b)
            .map(|c| c.2.clone())
    }

    /// 4 rows × 5 columns, the value of (i, j) = 10 i + j: rows r4 and columns c5 are the
    /// largest.
    fn four_by_five() -> Vec<Vec<Value>> {
        let mut rows = Vec::new();
        for i in 1..=4 {
            for j in 1..=5 {
                rows.push(vec![
                    json!(format!("r{i}")),
                    json!(format!("c{j}")),
                    json!(10 * i + j),
                ]);
            }
        }
        rows
    }

    #[test]
    fn two_groupings_keep_the_largest_of_each_and_fold_the_rest_exactly() {
        let given = four_by_five();
        let summary = pairs(&given);
        let count = metric(MetricKind::Count, 2);
        let grid = Grid::new(&summary, &count, 3, 3);
        assert_eq!(grid.first.values, ["r4", "r3"]);
        assert_eq!(grid.first.labels(), ["r4", "r3", "(2 others)"]);
        // The largest columns by total, drawn in code order.
        assert_eq!(grid.second.labels(), ["c4", "c5", "(3 others)"]);
        assert_eq!((grid.first.given, grid.second.given), (4, 5));
        assert_eq!(cell(&grid, "r4", "c5"), Some(json!(45)));
        // r4's others: c1 + c2 + c3.
        assert_eq!(cell(&grid, "r4", "(3 others)"), Some(json!(41 + 42 + 43)));
        // c4 of the other rows: r1 + r2.
        assert_eq!(cell(&grid, "(2 others)", "c4"), Some(json!(14 + 24)));
        assert_eq!(
            cell(&grid, "(2 others)", "(3 others)"),
            Some(json!(11 + 12 + 13 + 21 + 22 + 23))
        );
        // Every value given is in one cell drawn, once.
        let drawn: i64 = grid.cells.iter().map(|c| c.2.as_i64().unwrap()).sum();
        let given_total: i64 = given.iter().map(|r| r[2].as_i64().unwrap()).sum();
        assert_eq!(drawn, given_total);
        assert_eq!(grid.cells.len(), 9);
        assert_eq!(
            grid.note("rows", "columns", &count).unwrap(),
            "The 2 largest of 4 rows are drawn, and the other 2 as one, “(2 others)”, their \
             sum; the 2 largest of 5 columns are drawn, and the other 3 as one, “(3 others)”, \
             their sum; the result's table has them all."
        );
    }

    #[test]
    fn two_groupings_of_a_metric_that_does_not_add_up_are_cut_by_their_largest_value() {
        let mut given = four_by_five();
        // r1's largest value is the largest of all; c1 holds it.
        given[0][2] = json!(99);
        let summary = pairs(&given);
        let avg = metric(MetricKind::Average, 2);
        let grid = Grid::new(&summary, &avg, 2, 2);
        assert_eq!(grid.first.labels(), ["r1", "r4"]);
        assert_eq!(grid.second.labels(), ["c1", "c5"]);
        assert_eq!(grid.first.left_out(), 2);
        assert_eq!(grid.cells.len(), 4, "nothing folded");
        assert!(!grid.folded());
        assert_eq!(cell(&grid, "r1", "c1"), Some(json!(99)));
        assert_eq!(
            grid.note("rows", "columns", &avg).unwrap(),
            "The 2 largest of 4 rows by average:x are drawn and the other 2 left out, as it \
             does not add up across groups; the 2 largest of 5 columns by average:x are drawn \
             and the other 3 left out, as it does not add up across groups; the result's table \
             has them all."
        );
    }

    #[test]
    fn within_the_bounds_a_grid_draws_every_cell_and_says_nothing() {
        let given = four_by_five();
        let summary = pairs(&given);
        let count = metric(MetricKind::Count, 2);
        let grid = Grid::new(&summary, &count, 4, 5);
        assert_eq!(grid.first.labels(), ["r4", "r3", "r2", "r1"]);
        assert_eq!(grid.second.labels(), ["c1", "c2", "c3", "c4", "c5"]);
        assert_eq!(grid.cells.len(), 20);
        assert_eq!(grid.note("rows", "columns", &count), None);
    }

    /// A folded cell of nothing but nulls is null (no cell drawn), as the engine's sum is; an
    /// absent combination folds into nothing.
    #[test]
    fn folded_nulls_stay_null() {
        let given = vec![
            vec![json!("a"), json!("x"), json!(5)],
            vec![json!("a"), json!("y"), Value::Null],
            vec![json!("a"), json!("z"), Value::Null],
            vec![json!("b"), json!("x"), json!(1)],
        ];
        let summary = pairs(&given);
        let grid = Grid::new(&summary, &metric(MetricKind::Sum, 2), 2, 2);
        assert_eq!(grid.second.labels(), ["x", "(2 others)"]);
        assert_eq!(cell(&grid, "a", "(2 others)"), Some(Value::Null));
        assert_eq!(cell(&grid, "b", "(2 others)"), None);
    }
}
