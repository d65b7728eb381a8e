//! Reading a `summarize_records` envelope: the few parts a chart needs, checked once.
//!
//! The envelope is what the server validated against its output schema, so this does not
//! re-validate it; it refuses, with a message that says what it found, anything a chart could
//! not be drawn from (a different tool's result, rows of the wrong width).

use serde_json::{Map, Value};

use crate::error::ChartError;
use crate::kind::MetricKind;
use crate::text::{NO_VALUE, format_number, format_percent};

/// One metric column, with what the view needs to show its values.
#[derive(Debug, Clone)]
pub(crate) struct Metric {
    pub column: String,
    /// Index in `columns`.
    pub index: usize,
    pub kind: MetricKind,
    /// What a value is counted in (`metrics[].unit`), when the definition declares it.
    pub unit: Option<String>,
    pub description: String,
    /// `rounded_to_decimals`; the view shows at most 4 decimals when it is absent.
    pub decimals: Option<i64>,
}

impl Metric {
    /// The column with its unit, as titles show it: `sum:手数料 (円)`.
    pub fn label(&self) -> String {
        match &self.unit {
            Some(unit) => format!("{} ({unit})", self.column),
            None => self.column.clone(),
        }
    }

    /// Counts and sums add up to a whole; other metrics (averages, extremes, rates, ratios) do
    /// not.
    pub fn additive(&self) -> bool {
        self.kind.additive()
    }

    /// The value as the HTML view shows it: rates (shares, `"share": true`) as percentages,
    /// others, ratios included, with thousands separators and at most their rounding's
    /// decimals (4 when the metric says none).
    pub fn format(&self, v: &Value) -> String {
        match v {
            Value::Null => NO_VALUE.to_owned(),
            Value::Number(n) => match n.as_f64() {
                Some(x) => self.format_f64(x),
                None => n.to_string(),
            },
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    pub fn format_f64(&self, x: f64) -> String {
        if self.kind == MetricKind::Share {
            format_percent(x)
        } else {
            format_number(x, self.max_decimals())
        }
    }

    /// Axis ticks: the view shows at most 2 decimals there.
    pub fn format_tick(&self, x: f64) -> String {
        if self.kind == MetricKind::Share {
            format_percent(x)
        } else {
            format_number(x, 2)
        }
    }

    fn max_decimals(&self) -> usize {
        // Negative roundings (to tens, hundreds) show no decimals; more than 10 is noise.
        self.decimals.map_or(4, |d| d.clamp(0, 10) as usize)
    }
}

/// A grouping column.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub name: String,
    /// Index in `columns`.
    pub index: usize,
}

/// One source of the data, as the source line cites it.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub id: String,
    pub title: Option<String>,
    pub publisher: Option<String>,
    pub retrieved_at: Option<String>,
}

/// The parts of a summary a chart is drawn from.
#[derive(Debug)]
pub(crate) struct Summary<'a> {
    pub dataset_id: String,
    pub columns: Vec<String>,
    pub rows: Vec<&'a [Value]>,
    pub truncated: bool,
    pub returned: Option<u64>,
    pub total_group_count: Option<u64>,
    pub total_records: Option<u64>,
    pub metrics: Vec<Metric>,
    pub groups: Vec<Group>,
    pub exploded: bool,
    pub having: bool,
    pub source_refs: Vec<String>,
    pub sources: Vec<Source>,
    pub transformations: Vec<String>,
    pub warnings: Vec<String>,
}

impl<'a> Summary<'a> {
    pub fn read(envelope: &'a Value) -> Result<Self, ChartError> {
        let data = summary_data(envelope)?;
        let columns: Vec<String> = strings(data, "columns")?;
        let rows = rows(data, &columns)?;
        let metrics = metrics(data, &columns)?;
        let groups = groups(data, &columns, &metrics)?;

        let params = data.get("parameters").and_then(Value::as_object);
        let listed = |key: &str| params.is_some_and(|p| !parameter_list(p.get(key)).is_empty());

        let provenance = envelope.get("provenance");
        let sources = provenance
            .and_then(|p| p.get("sources"))
            .and_then(Value::as_array)
            .map(|a| a.iter().map(source).collect())
            .unwrap_or_default();
        let transformations = provenance
            .and_then(|p| p.get("transformations"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.get("type").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let warnings = provenance
            .and_then(|p| p.get("warnings"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|w| w.as_str().map_or_else(|| w.to_string(), str::to_owned))
                    .collect()
            })
            .unwrap_or_default();

        Ok(Summary {
            dataset_id: data
                .get("dataset_id")
                .and_then(Value::as_str)
                .unwrap_or("(dataset)")
                .to_owned(),
            columns,
            rows,
            truncated: data
                .get("truncated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            returned: data.get("returned").and_then(Value::as_u64),
            total_group_count: data.get("total_group_count").and_then(Value::as_u64),
            total_records: data.get("total_records").and_then(Value::as_u64),
            metrics,
            groups,
            exploded: listed("explode"),
            having: listed("having"),
            source_refs: data
                .get("sourceRefs")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            sources,
            transformations,
            warnings,
        })
    }

    pub fn metric(&self, index: usize) -> Result<&Metric, ChartError> {
        self.metrics
            .get(index)
            .ok_or_else(|| ChartError::NoSuchMetric {
                index,
                available: self.metrics.iter().map(|m| m.column.clone()).collect(),
            })
    }

    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// The sources this result cites (all of them when it names none).
    pub fn cited_sources(&self) -> Vec<&Source> {
        self.sources
            .iter()
            .filter(|s| self.source_refs.is_empty() || self.source_refs.contains(&s.id))
            .collect()
    }

    /// The dataset's title: its source's title, else its id.
    pub fn title(&self) -> String {
        self.cited_sources()
            .iter()
            .find_map(|s| s.title.clone())
            .unwrap_or_else(|| self.dataset_id.clone())
    }
}

/// A parameter given as one value or a list, as the view reads it: absent, null and an empty
/// list all mean none.
fn parameter_list(v: Option<&Value>) -> Vec<&Value> {
    match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().collect(),
        Some(other) => vec![other],
    }
}

/// The envelope's `data`, checked to be a summary's: refuses anything else, saying what it is.
fn summary_data(envelope: &Value) -> Result<&Map<String, Value>, ChartError> {
    let top = envelope
        .as_object()
        .ok_or_else(|| not_a_summary(format!("got {}", describe(envelope))))?;
    let Some(data) = top.get("data") else {
        let problem = if top.contains_key("columns") && top.contains_key("metrics") {
            "this looks like the `data` part alone; pass the whole envelope, with its \
             `provenance`"
                .to_owned()
        } else {
            format!("got {} without `data`", describe(envelope))
        };
        return Err(not_a_summary(problem));
    };
    let data = data
        .as_object()
        .ok_or_else(|| not_a_summary(format!("`data` is {}", describe(data))))?;
    if !data.contains_key("metrics") {
        let problem = if data.contains_key("total") {
            "this is a query_records result (it has `total` and no `metrics`)".to_owned()
        } else {
            format!("`data` has no `metrics` (its keys: {})", keys(data))
        };
        return Err(not_a_summary(problem));
    }
    Ok(data)
}

/// The rows of `data`, each checked to have a cell per column.
fn rows<'a>(
    data: &'a Map<String, Value>,
    columns: &[String],
) -> Result<Vec<&'a [Value]>, ChartError> {
    array(data, "rows")?
        .iter()
        .enumerate()
        .map(|(i, r)| match r.as_array() {
            Some(cells) if cells.len() == columns.len() => Ok(cells.as_slice()),
            Some(cells) => Err(not_a_summary(format!(
                "row {i} has {} cells for {} columns",
                cells.len(),
                columns.len()
            ))),
            None => Err(not_a_summary(format!("row {i} is {}", describe(r)))),
        })
        .collect::<Result<Vec<_>, _>>()
}

/// The metrics of `data`, each found among the columns.
fn metrics(data: &Map<String, Value>, columns: &[String]) -> Result<Vec<Metric>, ChartError> {
    let mut metrics = Vec::new();
    for (i, m) in array(data, "metrics")?.iter().enumerate() {
        let column = m
            .get("column")
            .and_then(Value::as_str)
            .ok_or_else(|| not_a_summary(format!("metrics[{i}] has no `column`")))?;
        let index = columns
            .iter()
            .position(|c| c == column)
            .ok_or_else(|| not_a_summary(format!("metric `{column}` is not one of the columns")))?;
        let kind = metric_kind(m, i, column)?;
        metrics.push(Metric {
            column: column.to_owned(),
            index,
            kind,
            unit: str_field(m, "unit"),
            description: str_field(m, "description").unwrap_or_default(),
            decimals: m.get("rounded_to_decimals").and_then(Value::as_i64),
        });
    }
    Ok(metrics)
}

/// `metrics[i].kind`: what the metric's value is, as the engine states it.
fn metric_kind(m: &Value, i: usize, column: &str) -> Result<MetricKind, ChartError> {
    let written = m
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| not_a_summary(format!("metrics[{i}] (`{column}`) has no `kind`")))?;
    MetricKind::parse(written).ok_or_else(|| {
        let known: Vec<&str> = MetricKind::ALL.map(MetricKind::as_str).to_vec();
        not_a_summary(format!(
            "metrics[{i}] (`{column}`) has kind `{written}`, not one of {}",
            known.join(", ")
        ))
    })
}

/// The grouping columns of `data`.
fn groups(
    data: &Map<String, Value>,
    columns: &[String],
    metrics: &[Metric],
) -> Result<Vec<Group>, ChartError> {
    // Group columns: named in field_metadata and not a metric (helpers such as
    // `x:null_excluded` are neither).
    let field_names: Vec<&str> = array(data, "field_metadata")?
        .iter()
        .filter_map(|f| f.get("name").and_then(Value::as_str))
        .collect();
    let groups = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            !metrics.iter().any(|m| &m.column == *c) && field_names.contains(&c.as_str())
        })
        .map(|(index, c)| Group {
            name: c.clone(),
            index,
        })
        .collect();
    Ok(groups)
}

fn source(v: &Value) -> Source {
    Source {
        id: str_field(v, "id").unwrap_or_default(),
        title: str_field(v, "title"),
        publisher: str_field(v, "publisher"),
        retrieved_at: str_field(v, "retrievedAt"),
    }
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn array<'a>(data: &'a Map<String, Value>, key: &str) -> Result<&'a Vec<Value>, ChartError> {
    match data.get(key) {
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(not_a_summary(format!(
            "`data.{key}` is {}, not a list",
            describe(other)
        ))),
        None => Err(not_a_summary(format!("`data` has no `{key}`"))),
    }
}

fn strings(data: &Map<String, Value>, key: &str) -> Result<Vec<String>, ChartError> {
    array(data, key)?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| not_a_summary(format!("`data.{key}` holds {}", describe(v))))
        })
        .collect()
}

fn not_a_summary(problem: String) -> ChartError {
    ChartError::NotASummary { problem }
}

fn keys(m: &Map<String, Value>) -> String {
    let mut k: Vec<&str> = m.keys().map(String::as_str).take(12).collect();
    if m.len() > 12 {
        k.push("…");
    }
    k.join(", ")
}

/// A short description of a JSON value for error messages.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "a boolean".to_owned(),
        Value::Number(_) => "a number".to_owned(),
        Value::String(_) => "a string".to_owned(),
        Value::Array(a) => format!("a list of {}", a.len()),
        Value::Object(m) => format!("an object with keys [{}]", keys(m)),
    }
}
