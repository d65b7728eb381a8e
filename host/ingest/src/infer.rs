//! What a column holds, gathered in one bounded pass, and what a skeleton `dataset.yaml`
//! should guess from it. Every guess a person must confirm carries the reason.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;

use tally_semantic::definition::Code;

use crate::input::{Cell, count_text};
use crate::values::{Kind, NULL_MARKER_CANDIDATES, Shape, shape};

/// Distinct values kept per column (for codelists and multi-value detection); past it the
/// column is high-cardinality text.
const MAX_DISTINCT: usize = 5_000;
/// Bytes of distinct values kept per column, each counted with [`DISTINCT_ENTRY`].
pub const MAX_DISTINCT_BYTES: usize = 2 << 20;
/// Bytes of distinct values kept for all columns together: each column gets an even share,
/// at most [`MAX_DISTINCT_BYTES`] (so up to 64 columns get the whole 2 MiB, 10,000 columns
/// about 13 KiB each — still room for a codelist of 100 short codes).
pub const DISTINCT_BUDGET: usize = 128 << 20;
/// A distinct value's cost beyond its text: its `String` and count in the table (with the
/// table's spare slots) and its heap block's rounding (measured: 80–100 bytes).
const DISTINCT_ENTRY: usize = 96;
/// Values whose uniqueness is checked (a 64-bit hash each, about 18 bytes in the set); past
/// it a column is not called unique. Only columns that could be the id keep a set: one with
/// an empty cell, a fraction, a date or a boolean drops it.
const MAX_UNIQUE_CHECKED: usize = 1_000_000;
/// Bytes of uniqueness sets for all columns together. Past it the set of the rightmost
/// column still holding one is dropped, and so on leftwards: the id is the first unique
/// column, so the sets on the right matter least.
pub const UNIQUE_BUDGET: usize = 128 << 20;
/// Characters of a value kept to be shown in a message (a cell may be megabytes long, in
/// every column).
const SHOWN_CHARS: usize = 200;
/// Separators of multi-value cells, in order of preference.
const SEPARATORS: &[&str] = &[";", "；", "、", "\n"];
/// A dim's codelist at most this long; more distinct values make an attr.
const MAX_DIM_VALUES: usize = 100;

/// Statistics of one column over the whole file.
#[derive(Debug)]
pub struct ColumnStats {
    pub non_null: u64,
    pub nulls: u64,
    shapes: [u64; 7],
    /// The first value (and its row) that is not an integer / not a number.
    first_non_int: Option<(u64, String)>,
    first_non_number: Option<(u64, String)>,
    /// Distinct values and their counts, while few enough.
    distinct: Option<HashMap<String, u64>>,
    distinct_bytes: usize,
    /// This column's share of [`DISTINCT_BUDGET`].
    distinct_cap: usize,
    /// Hashes of the values seen, while no two were equal.
    unique: Option<HashSet<u64>>,
    /// Candidate null markers and whitespace-only values, with their counts.
    pub markers: BTreeMap<String, u64>,
    integers: Option<(i64, i64)>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for ColumnStats {
    fn default() -> Self {
        ColumnStats {
            non_null: 0,
            nulls: 0,
            shapes: [0; 7],
            first_non_int: None,
            first_non_number: None,
            distinct: Some(HashMap::new()),
            distinct_bytes: 0,
            distinct_cap: MAX_DISTINCT_BYTES,
            unique: Some(HashSet::new()),
            markers: BTreeMap::new(),
            integers: None,
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

fn shape_index(s: Shape) -> usize {
    match s {
        Shape::Int => 0,
        Shape::LooseInt => 1,
        Shape::Float => 2,
        Shape::Bool => 3,
        Shape::Date => 4,
        Shape::LeadingZero => 5,
        Shape::Text => 6,
    }
}

/// A value as a message shows it: its first [`SHOWN_CHARS`] characters.
fn shown(text: &str) -> String {
    text.chars().take(SHOWN_CHARS).collect()
}

/// What a hash set of `capacity` 64-bit hashes allocates: its buckets (a power of two, 8/7
/// of the capacity) of 8 bytes and a control byte each.
fn set_bytes(capacity: usize) -> usize {
    (capacity + capacity / 7) * 9
}

impl ColumnStats {
    /// Bytes its uniqueness set holds now.
    fn unique_bytes(&self) -> usize {
        self.unique.as_ref().map_or(0, |s| set_bytes(s.capacity()))
    }

    pub fn add(&mut self, row: u64, cell: &Cell) {
        let Some(text) = cell.as_text() else {
            self.nulls += 1;
            self.unique = None;
            return;
        };
        self.non_null += 1;
        let trimmed = text.trim();
        if trimmed.is_empty() {
            *self.markers.entry("(blank)".to_string()).or_default() += 1;
        } else if NULL_MARKER_CANDIDATES.contains(&trimmed) {
            *self.markers.entry(trimmed.to_string()).or_default() += 1;
        }
        let s = shape(cell);
        self.shapes[shape_index(s)] += 1;
        let is_marker = trimmed.is_empty() || NULL_MARKER_CANDIDATES.contains(&trimmed);
        if !is_marker {
            if !matches!(s, Shape::Int | Shape::LooseInt) && self.first_non_int.is_none() {
                self.first_non_int = Some((row, shown(&text)));
            }
            if !matches!(s, Shape::Int | Shape::LooseInt | Shape::Float)
                && self.first_non_number.is_none()
            {
                self.first_non_number = Some((row, shown(&text)));
            }
            if let (Shape::Int, Ok(crate::values::Value::Int(i))) =
                (s, crate::values::convert(cell, Kind::Int))
            {
                self.integers = Some(match self.integers {
                    Some((lo, hi)) => (lo.min(i), hi.max(i)),
                    None => (i, i),
                });
            }
        }
        if matches!(s, Shape::Float | Shape::Bool | Shape::Date) {
            self.unique = None;
        }
        if let Some(set) = &mut self.unique {
            let hash = self.hasher.hash_one(text.as_ref());
            if !set.insert(hash) || set.len() > MAX_UNIQUE_CHECKED {
                self.unique = None;
            }
        }
        if let Some(map) = &mut self.distinct {
            if let Some(n) = map.get_mut(text.as_ref()) {
                *n += 1;
            } else {
                self.distinct_bytes += text.len() + DISTINCT_ENTRY;
                if map.len() >= MAX_DISTINCT || self.distinct_bytes > self.distinct_cap {
                    self.distinct = None;
                } else {
                    map.insert(text.into_owned(), 1);
                }
            }
        }
    }

    fn count(&self, s: Shape) -> u64 {
        self.shapes[shape_index(s)]
    }

    fn markers_total(&self) -> u64 {
        self.markers.values().sum()
    }
}

/// The statistics of every column of a file, their memory bounded in all whatever the number
/// of columns: distinct values by an even share of [`DISTINCT_BUDGET`] each, uniqueness sets
/// by [`UNIQUE_BUDGET`] together.
#[derive(Debug)]
pub struct Statistics {
    pub columns: Vec<ColumnStats>,
    unique_bytes: usize,
    /// Columns at and past this one hold no uniqueness set any more.
    unique_end: usize,
}

impl Statistics {
    pub fn new(columns: usize) -> Statistics {
        let share = (DISTINCT_BUDGET / columns.max(1)).min(MAX_DISTINCT_BYTES);
        Statistics {
            columns: (0..columns)
                .map(|_| ColumnStats {
                    distinct_cap: share,
                    ..ColumnStats::default()
                })
                .collect(),
            unique_bytes: 0,
            unique_end: columns,
        }
    }

    /// Adds column `k`'s cell of a row.
    pub fn add(&mut self, k: usize, row: u64, cell: &Cell) {
        let Some(c) = self.columns.get_mut(k) else {
            return;
        };
        let before = c.unique_bytes();
        c.add(row, cell);
        self.unique_bytes = (self.unique_bytes + c.unique_bytes()).saturating_sub(before);
    }

    /// After each row: past the budget, the rightmost sets go.
    pub fn end_row(&mut self) {
        while self.unique_bytes > UNIQUE_BUDGET && self.unique_end > 0 {
            self.unique_end -= 1;
            let c = &mut self.columns[self.unique_end];
            self.unique_bytes = self.unique_bytes.saturating_sub(c.unique_bytes());
            c.unique = None;
        }
    }
}

/// What the skeleton says of one column.
#[derive(Debug, Clone)]
pub struct Guess {
    pub kind: Kind,
    pub role: &'static str,
    /// The period of the time field (`year`, `fiscal_year`, `date`), when this is it.
    pub grain: Option<&'static str>,
    /// A static codelist, `auto` or `auto_split`.
    pub codelist: Option<Codelist>,
    pub multi_value: Option<String>,
    /// Comments for the person: what to confirm and why.
    pub todos: Vec<String>,
    /// Null-marker questions.
    pub questions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Codelist {
    Static(Vec<String>),
    Auto,
    AutoSplit,
}

/// Guesses every column's type and role. `rows` is the number of data rows; the first
/// unique, never-empty text or integer column becomes the id.
pub fn guess(names: &[String], stats: &[ColumnStats], rows: u64) -> (Vec<Guess>, Option<usize>) {
    let mut guesses: Vec<Guess> = names
        .iter()
        .zip(stats)
        .map(|(name, s)| guess_column(name, s, rows))
        .collect();
    let mut id = None;
    for (i, (g, s)) in guesses.iter_mut().zip(stats).enumerate() {
        let unique = s.unique.is_some() && s.nulls == 0 && s.non_null == rows && rows > 1;
        if !unique || !matches!(g.kind, Kind::Text | Kind::Int) || g.multi_value.is_some() {
            continue;
        }
        if g.kind == Kind::Int && i != 0 {
            // A unique count is likely a coincidence of a small table; an id column comes
            // first.
            continue;
        }
        if id.is_none() {
            id = Some(i);
            g.role = "id";
            g.codelist = None;
            g.todos.retain(|t| !t.starts_with("empty"));
            g.todos.push(format!(
                "unique and never empty in all {} rows: taken as the record id (id_field); confirm it identifies a record",
                count_text(rows)
            ));
        } else if g.kind == Kind::Text && g.role == "attr" {
            g.todos.push(format!(
                "also unique in all {} rows; if it identifies records too, say so in desc",
                count_text(rows)
            ));
        }
    }
    time_and_aggregation(names, &mut guesses, id);
    (guesses, id)
}

/// Whether a column's name says it holds periods (`年度`, `年`, `year`, `date`, `時点`).
fn time_like(name: &str) -> bool {
    let n = name.to_lowercase();
    [
        "年度",
        "年次",
        "調査年",
        "西暦",
        "時点",
        "年月",
        "年月日",
        "日付",
    ]
    .iter()
    .any(|w| n.contains(w))
        || n == "年"
        || n.ends_with("年")
        || ["year", "fiscal", "date", "period", "month"]
            .iter()
            .any(|w| n.contains(w))
}

/// Whether a measure's name says it is a rate or an average, which is never summed.
fn rate_like(name: &str) -> bool {
    let n = name.to_lowercase();
    [
        "率",
        "割合",
        "平均",
        "当たり",
        "あたり",
        "密度",
        "指数",
        "気温",
        "比率",
    ]
    .iter()
    .any(|w| n.contains(w))
        || [
            "rate", "ratio", "share", "per ", "per_", "average", "mean", "percent", "index",
        ]
        .iter()
        .any(|w| n.contains(w))
}

/// The first column of years or dates whose name says it holds periods becomes the time field
/// (`role: time` with its grain); then every measure is asked how it adds up over periods
/// (flow, stock or rate), and without a time field those whose names say they are rates.
fn time_and_aggregation(names: &[String], guesses: &mut [Guess], id: Option<usize>) {
    let time = names
        .iter()
        .zip(guesses.iter())
        .enumerate()
        .position(|(i, (name, g))| {
            Some(i) != id
                && time_like(name)
                && ((g.kind == Kind::Int && g.role == "dim") || g.kind == Kind::Date)
        });
    if let Some(t) = time {
        let g = &mut guesses[t];
        let fiscal = names[t].contains("年度") || names[t].to_lowercase().contains("fiscal");
        g.grain = Some(match g.kind {
            Kind::Date => "date",
            _ if fiscal => "fiscal_year",
            _ => "year",
        });
        g.role = "time";
        g.codelist = None;
        g.todos
            .retain(|t| !t.starts_with("whole numbers between 1900"));
        g.todos.push(format!(
            "the period of each record: taken as the time field (grain: {}); a summary that neither filters nor groups by it is read at the latest period",
            g.grain.unwrap_or("year")
        ));
    }
    for (name, g) in names.iter().zip(guesses.iter_mut()) {
        if g.role != "measure" {
            continue;
        }
        if rate_like(name) {
            g.todos.push(
                "its name says it is a rate or an average: declare `aggregation: rate` (never summed), and `weight: <the measure it is of>` if it may be averaged".to_string(),
            );
        } else if time.is_some() {
            g.todos.push(
                "how does it add up over periods? declare `aggregation: flow` (counted over a period: births), `stock` (a level at a point in time: population, never summed over periods) or `rate` (never summed)".to_string(),
            );
        }
    }
}

fn guess_column(name: &str, s: &ColumnStats, rows: u64) -> Guess {
    let mut g = Guess {
        kind: Kind::Text,
        role: "attr",
        grain: None,
        codelist: None,
        multi_value: None,
        todos: Vec::new(),
        questions: Vec::new(),
    };
    let markers = s.markers_total();
    let values = s.non_null - markers;
    if !s.markers.is_empty() {
        let held: Vec<String> = s
            .markers
            .iter()
            .map(|(marker, n)| {
                if marker == "(blank)" {
                    format!("only spaces ({})", count_text(*n))
                } else {
                    format!("`{marker}` ({})", count_text(*n))
                }
            })
            .collect();
        g.questions.push(format!(
            "{name}: cells hold {}. Does that mean \"no value\"? If so, list it in source.null_markers (or pass --null-marker) and run tally add again to store such cells as empty; they are kept as written until then",
            held.join(", ")
        ));
    }
    if s.non_null == 0 {
        g.todos.push(format!(
            "empty in all {} rows: say what it would hold, or remove the field",
            count_text(rows)
        ));
        return g;
    }
    // Types over the values that are not null markers; markers keep the column text.
    let ints = s.count(Shape::Int) + s.count(Shape::LooseInt);
    let numbers = ints + s.count(Shape::Float);
    if values > 0 && ints == values {
        g.kind = Kind::Int;
    } else if values > 0 && numbers == values {
        g.kind = Kind::Float;
    } else if values > 0 && s.count(Shape::Bool) == values {
        g.kind = Kind::Bool;
    } else if values > 0 && s.count(Shape::Date) == values {
        g.kind = Kind::Date;
    }
    if markers > 0 && g.kind != Kind::Text {
        g.todos.push(format!(
            "its values are {} except the cells asked about below: kept as text until they are answered",
            match g.kind {
                Kind::Int => "integers",
                Kind::Float => "numbers",
                Kind::Bool => "true/false",
                _ => "dates",
            }
        ));
        g.kind = Kind::Text;
    } else if g.kind == Kind::Text
        && numbers * 10 >= values * 9
        && values >= 10
        && let Some((row, v)) = s.first_non_number.as_ref()
    {
        g.todos.push(format!(
            "mostly numbers, but some are not (first at row {row}: {v:?}): kept as text; if those are mistakes, correct them and declare data_type: number"
        ));
    }
    if s.count(Shape::LooseInt) > 0 && g.kind == Kind::Int {
        g.todos.push(format!(
            "{} values are written with thousands separators or full-width digits; they were read as integers",
            count_text(s.count(Shape::LooseInt))
        ));
    }
    if s.count(Shape::LeadingZero) > 0
        && g.kind == Kind::Text
        && values == s.count(Shape::LeadingZero) + s.count(Shape::Int)
    {
        g.todos.push(
            "digits with leading zeros (codes such as 007): kept as text so the zeros stay"
                .to_string(),
        );
    }
    match g.kind {
        Kind::Int | Kind::Float => {
            let few = s
                .distinct
                .as_ref()
                .is_some_and(|d| d.len() <= 20 && rows >= 100);
            let years = g.kind == Kind::Int
                && s.integers.is_some_and(|(lo, hi)| lo >= 1900 && hi <= 2100)
                && s.distinct.as_ref().is_some_and(|d| d.len() <= 60);
            if years {
                g.role = "dim";
                g.todos.push(
                    "whole numbers between 1900 and 2100: taken as years to group by; if they are amounts, make it a measure".to_string(),
                );
            } else {
                g.role = "measure";
                if few {
                    g.todos.push(format!(
                        "only {} distinct values: if these are codes rather than amounts, make it a dim",
                        s.distinct.as_ref().map_or(0, HashMap::len)
                    ));
                }
            }
        }
        Kind::Bool => g.role = "dim",
        Kind::Date => g.role = "attr",
        Kind::Text => text_role(&mut g, s, values),
    }
    if s.nulls > 0 {
        g.todos.push(format!(
            "empty in {} of {} rows: say in notes what an empty value means (unknown, not applicable, zero?)",
            count_text(s.nulls),
            count_text(rows)
        ));
    }
    g
}

fn text_role(g: &mut Guess, s: &ColumnStats, values: u64) {
    let Some(distinct) = &s.distinct else {
        return;
    };
    let values_list: Vec<&String> = distinct
        .keys()
        .filter(|v| !NULL_MARKER_CANDIDATES.contains(&v.trim()) && !v.trim().is_empty())
        .collect();
    if values_list.is_empty() {
        return;
    }
    // Several values to a cell first: `1 実施済;2 未実施` is two codes, not one.
    if let Some((sep, parts)) = multi_value(distinct) {
        g.multi_value = Some(sep.to_string());
        let shown = if sep == "\n" { "a line break" } else { sep };
        g.todos.push(format!(
            "several values in one cell, separated by {shown} (parts recur across cells): declared multi_value"
        ));
        if parts.len() <= MAX_DIM_VALUES * 2 {
            if parts.iter().all(|p| numbered(p)) {
                g.codelist = Some(Codelist::Static(sorted_codes(
                    parts.iter().map(String::as_str),
                )));
            } else {
                g.codelist = Some(Codelist::AutoSplit);
            }
        }
        return;
    }
    // Numbered codes (`1 実施済`, `2-1 …`): a static codelist.
    if values_list.len() <= MAX_DIM_VALUES && values_list.iter().all(|v| numbered(v)) {
        g.role = "dim";
        g.codelist = Some(Codelist::Static(sorted_codes(
            values_list.iter().map(|v| v.as_str()),
        )));
        g.todos.push(format!(
            "{} numbered codes: a static codelist; add each code's description",
            values_list.len()
        ));
        return;
    }
    if values_list.len() <= MAX_DIM_VALUES
        && values >= 10
        && (values_list.len() as u64) * 5 <= values
    {
        g.role = "dim";
        g.codelist = Some(Codelist::Auto);
        g.todos.push(format!(
            "{} distinct values in {} cells: a dim to group by, its codelist read from the data",
            values_list.len(),
            count_text(values)
        ));
    }
}

/// `1 実施済`, `2-1 申請等に基づく処分通知等`: a code the semantic layer reads with or without
/// its number.
fn numbered(v: &str) -> bool {
    Code {
        value: v.to_string(),
        description: None,
    }
    .label()
    .is_some()
}

/// Codes in the order of their numbers (`2` before `10`, `2-1` before `2-2`).
fn sorted_codes<'a>(values: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut codes: Vec<String> = values.map(str::to_string).collect();
    let key = |v: &String| -> (Vec<u64>, String) {
        let prefix = v.split([' ', '\u{3000}']).next().unwrap_or("");
        (
            prefix
                .split(['-', '.'])
                .map(|p| p.parse::<u64>().unwrap_or(u64::MAX))
                .collect(),
            v.clone(),
        )
    };
    codes.sort_by_key(key);
    codes.dedup();
    codes
}

/// The separator of a multi-value column: the one most cells hold whose parts recur — a part
/// that appears in at least two different cells (as a part or as a whole value). A name
/// that merely contains a comma has parts found nowhere else.
fn multi_value(distinct: &HashMap<String, u64>) -> Option<(&'static str, Vec<String>)> {
    let mut best: Option<(&'static str, f64, Vec<String>)> = None;
    let total_cells: u64 = distinct.values().sum();
    for sep in SEPARATORS {
        let with: Vec<&String> = distinct.keys().filter(|v| v.contains(sep)).collect();
        let cells: u64 = with.iter().map(|v| distinct[*v]).sum();
        if with.len() < 2 || cells * 100 < total_cells || cells < 5 {
            continue;
        }
        // In how many distinct values each part occurs.
        let mut occurs: HashMap<&str, u32> = HashMap::new();
        for v in distinct.keys() {
            let mut seen: HashSet<&str> = HashSet::new();
            for p in v.split(sep).map(str::trim).filter(|p| !p.is_empty()) {
                if seen.insert(p) {
                    *occurs.entry(p).or_default() += 1;
                }
            }
        }
        let parts_of_multi: HashSet<&str> = with
            .iter()
            .flat_map(|v| v.split(sep).map(str::trim).filter(|p| !p.is_empty()))
            .collect();
        if parts_of_multi.is_empty() {
            continue;
        }
        let recurring = parts_of_multi
            .iter()
            .filter(|p| occurs.get(*p).copied().unwrap_or(0) >= 2)
            .count();
        let score = recurring as f64 / parts_of_multi.len() as f64;
        if score >= 0.5 && best.as_ref().is_none_or(|b| score > b.1) {
            let mut parts: Vec<String> = occurs.keys().map(|p| p.to_string()).collect();
            parts.sort();
            best = Some((sep, score, parts));
        }
    }
    best.map(|(sep, _, parts)| (sep, parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(values: &[&str]) -> ColumnStats {
        let mut s = ColumnStats::default();
        for (i, v) in values.iter().enumerate() {
            let cell = if v.is_empty() {
                Cell::Empty
            } else {
                Cell::Text(v.to_string())
            };
            s.add(i as u64 + 2, &cell);
        }
        s
    }

    #[test]
    fn a_list_of_recurring_parts_is_multi_value_but_a_code_with_a_comma_is_not() {
        let list = [
            "弁護士;司法書士",
            "司法書士",
            "弁護士",
            "行政書士;司法書士",
            "税理士",
            "弁護士;税理士",
            "行政書士",
            "司法書士;税理士",
            "弁護士",
            "行政書士;弁護士",
        ];
        let g = guess_column("士業", &stats(&list), list.len() as u64);
        assert_eq!(g.multi_value.as_deref(), Some(";"));
        assert_eq!(g.codelist, Some(Codelist::AutoSplit));

        let mut codes = Vec::new();
        for _ in 0..20 {
            codes.extend(["5 国民等", "6 民間事業者等", "7 国民等、民間事業者等"]);
        }
        let g = guess_column("手続主体", &stats(&codes), codes.len() as u64);
        assert_eq!(g.multi_value, None);
        assert_eq!(g.role, "dim");
        assert_eq!(
            g.codelist,
            Some(Codelist::Static(vec![
                "5 国民等".into(),
                "6 民間事業者等".into(),
                "7 国民等、民間事業者等".into()
            ]))
        );
    }

    #[test]
    fn several_numbered_codes_in_a_cell_are_multi_value_with_static_codes() {
        let mut cells = Vec::new();
        for _ in 0..5 {
            cells.extend(["1 電子", "2 紙", "1 電子;2 紙", "3 その他", "2 紙;3 その他"]);
        }
        let g = guess_column("提出方法", &stats(&cells), cells.len() as u64);
        assert_eq!(g.multi_value.as_deref(), Some(";"));
        assert_eq!(
            g.codelist,
            Some(Codelist::Static(vec![
                "1 電子".into(),
                "2 紙".into(),
                "3 その他".into()
            ]))
        );
    }

    #[test]
    fn null_markers_are_questions_and_keep_the_column_text() {
        let values = [
            "1", "2", "-", "4", "5", "6", "7", "8", "9", "10", "11", "12",
        ];
        let g = guess_column("件数", &stats(&values), values.len() as u64);
        assert_eq!(g.kind, Kind::Text);
        assert_eq!(g.questions.len(), 1);
        assert!(g.questions[0].contains("`-` (1)"), "{:?}", g.questions);
        let clean = [
            "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12",
        ];
        let g = guess_column("件数", &stats(&clean), clean.len() as u64);
        assert_eq!((g.kind, g.role), (Kind::Int, "measure"));
    }

    #[test]
    fn codes_sort_by_their_numbers() {
        assert_eq!(
            sorted_codes(["10 十", "2-1 二の一", "2 二", "1 一"].into_iter()),
            vec!["1 一", "2 二", "2-1 二の一", "10 十"]
        );
    }

    #[test]
    fn a_column_of_years_named_as_periods_is_the_time_field_and_measures_are_asked_how_they_add_up()
    {
        let names: Vec<String> = ["年度", "都道府県", "総人口", "合計特殊出生率"]
            .map(String::from)
            .to_vec();
        let years: Vec<String> = (0..120).map(|i| (2009 + i % 12).to_string()).collect();
        let areas: Vec<String> = (0..120).map(|i| format!("県{}", i / 12)).collect();
        let people: Vec<String> = (0..120).map(|i| (100_000 + i * 37).to_string()).collect();
        let rates: Vec<String> = (0..120).map(|i| format!("1.{}", i % 9 + 1)).collect();
        let column = |v: &[String]| stats(&v.iter().map(String::as_str).collect::<Vec<_>>());
        let s = vec![
            column(&years),
            column(&areas),
            column(&people),
            column(&rates),
        ];
        let (g, _) = guess(&names, &s, 120);
        assert_eq!((g[0].role, g[0].grain), ("time", Some("fiscal_year")));
        assert!(
            g[0].todos.iter().any(|t| t.contains("time field")),
            "{:?}",
            g[0].todos
        );
        assert_eq!(g[2].role, "measure");
        assert!(
            g[2].todos.iter().any(|t| t.contains("aggregation: flow")),
            "{:?}",
            g[2].todos
        );
        assert!(
            g[3].todos.iter().any(|t| t.contains("aggregation: rate")),
            "{:?}",
            g[3].todos
        );
        // Years under a name that says nothing of time stay a dim to group by.
        let (g, _) = guess(&["code".to_string()], &[column(&years)], 120);
        assert_eq!((g[0].role, g[0].grain), ("dim", None));
    }

    #[test]
    fn the_first_unique_column_is_the_id() {
        let names = vec!["id".to_string(), "name".to_string(), "n".to_string()];
        let ids: Vec<String> = (1..=30).map(|i| i.to_string()).collect();
        let names_col: Vec<String> = (1..=30).map(|i| format!("手続{i}")).collect();
        let counts: Vec<String> = (1..=30).map(|i| (i * 7).to_string()).collect();
        let s = vec![
            stats(&ids.iter().map(String::as_str).collect::<Vec<_>>()),
            stats(&names_col.iter().map(String::as_str).collect::<Vec<_>>()),
            stats(&counts.iter().map(String::as_str).collect::<Vec<_>>()),
        ];
        let (g, id) = guess(&names, &s, 30);
        assert_eq!(id, Some(0));
        assert_eq!(g[0].role, "id");
        assert_eq!(g[1].role, "attr");
        assert_eq!(g[2].role, "measure");
    }
}
