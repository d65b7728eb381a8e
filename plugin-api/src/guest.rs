//! The Rust side of a wasm source plugin: write rows and their sources, not IPC plumbing.
//!
//! A plugin implements [`SourcePlugin`] and exports it with [`export_source_plugin!`]; this
//! module turns the rows it pushes into one Arrow IPC stream, keeps the distinct sources
//! with a per-row index, projects and limits as the host asked, and answers the WIT calls.
//!
//! ```ignore
//! use tally_plugin_api::guest::{Cell, Column, Config, Description, Request, Rows, SourcePlugin};
//!
//! struct Hello;
//!
//! impl SourcePlugin for Hello {
//!     fn describe(_config: &Config) -> Result<Description, String> {
//!         Ok(Description::new("hello", "0.1.0", "One greeting.")
//!             .column(Column::text("greeting", "What the plugin says")))
//!     }
//!     fn scan(_request: &Request, rows: &mut Rows) -> Result<(), String> {
//!         rows.push(vec![Cell::text("hello")], None)
//!     }
//! }
//!
//! tally_plugin_api::export_source_plugin!(Hello);
//! ```
//!
//! The plugin runs in the sandbox described in the WIT file: its dataset folder is mounted
//! read-only at `/`, so `std::fs` with relative paths reads the dataset's own files and
//! nothing else.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

/// The bindings wit-bindgen generates for the `source-plugin` world.
#[allow(unsafe_code, missing_debug_implementations, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit/since_v0.1.0",
        world: "source-plugin",
        pub_export_macro: true,
        export_macro_name: "export_source",
        default_bindings_module: "tally_plugin_api::guest::bindings",
    });
}

pub use bindings::exports::tally::plugin::source::Guest;
pub use bindings::tally::plugin::types::{
    Column, ColumnType, Description, Filter, FilterCapability, FilterOp, ScanRequest, ScanResult,
    Source, Value,
};

/// A plugin's entry points, in terms of rows.
pub trait SourcePlugin {
    /// What the plugin produces for this dataset's config.
    fn describe(config: &Config) -> Result<Description, String>;
    /// Pushes the rows for this request into `rows`. Filters the plugin declared may be
    /// applied here ([`Request::admits`]); the host applies them again, so skipping one is
    /// slower, never wrong. Projection and limit are applied by [`Rows`].
    fn scan(request: &Request, rows: &mut Rows) -> Result<(), String>;
}

/// The dataset's `backend.config`, parsed.
#[derive(Debug, Clone, Default)]
pub struct Config(pub serde_json::Value);

impl Config {
    pub fn parse(text: &str) -> Result<Config, String> {
        if text.trim().is_empty() {
            return Ok(Config(serde_json::Value::Object(Default::default())));
        }
        serde_json::from_str(text)
            .map(Config)
            .map_err(|e| format!("the dataset's backend.config is not valid JSON: {e}"))
    }

    /// A text option.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    /// A boolean option.
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.0.get(key).and_then(serde_json::Value::as_bool)
    }

    /// An integer option.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.0.get(key).and_then(serde_json::Value::as_i64)
    }

    /// The raw value of an option.
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.0.get(key)
    }
}

impl Description {
    pub fn new(name: &str, version: &str, summary: &str) -> Description {
        Description {
            name: name.to_string(),
            version: version.to_string(),
            summary: summary.to_string(),
            columns: Vec::new(),
            filters: Vec::new(),
        }
    }

    /// Adds a column.
    pub fn column(mut self, column: Column) -> Description {
        self.columns.push(column);
        self
    }

    /// Declares that the plugin applies equality filters (`eq`, `in-list`) on a column.
    pub fn filterable(mut self, column: &str) -> Description {
        self.filters.push(FilterCapability {
            column: column.to_string(),
            ops: vec![FilterOp::Eq, FilterOp::InList],
        });
        self
    }
}

impl Column {
    fn new(name: &str, data_type: ColumnType, description: &str) -> Column {
        Column {
            name: name.to_string(),
            data_type,
            description: (!description.is_empty()).then(|| description.to_string()),
        }
    }
    pub fn text(name: &str, description: &str) -> Column {
        Column::new(name, ColumnType::Text, description)
    }
    pub fn integer(name: &str, description: &str) -> Column {
        Column::new(name, ColumnType::Integer, description)
    }
    pub fn number(name: &str, description: &str) -> Column {
        Column::new(name, ColumnType::Number, description)
    }
    pub fn boolean(name: &str, description: &str) -> Column {
        Column::new(name, ColumnType::Boolean, description)
    }
}

impl Source {
    /// A source with the required parts; set the optional ones on the result.
    pub fn new(uri: impl Into<String>, title: impl Into<String>, source_type: &str) -> Source {
        Source {
            uri: uri.into(),
            title: title.into(),
            publisher: None,
            source_type: source_type.to_string(),
            locator: None,
            published_at: None,
            effective_at: None,
            file: None,
        }
    }
}

/// A call to `scan`, parsed.
#[derive(Debug, Clone)]
pub struct Request {
    pub dataset: String,
    pub config: Config,
    pub projection: Option<Vec<String>>,
    pub filters: Vec<Filter>,
    pub limit: Option<u64>,
}

impl Request {
    fn from_wit(r: ScanRequest) -> Result<Request, String> {
        Ok(Request {
            config: Config::parse(&r.config)?,
            dataset: r.dataset,
            projection: r.projection,
            filters: r.filters,
            limit: r.limit,
        })
    }

    /// Whether every pushed-down filter on `column` admits this text value (true when there
    /// is none).
    pub fn admits(&self, column: &str, value: &str) -> bool {
        self.filters.iter().filter(|f| f.column == column).all(|f| {
            f.values.iter().any(|v| match v {
                Value::Text(t) => t == value,
                Value::Integer(i) => value.parse::<i64>().ok() == Some(*i),
                Value::Number(n) => value.parse::<f64>().ok() == Some(*n),
                Value::Boolean(b) => value.parse::<bool>().ok() == Some(*b),
            })
        })
    }

    /// Whether any filter was pushed down on `column`.
    pub fn filters_on(&self, column: &str) -> bool {
        self.filters.iter().any(|f| f.column == column)
    }
}

/// One value of a row. `Null` is a missing value (not zero, not "").
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    Integer(i64),
    Number(f64),
    Boolean(bool),
}

impl Cell {
    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }
    /// `Null` when absent.
    pub fn opt_text(s: Option<impl Into<String>>) -> Cell {
        s.map_or(Cell::Null, |s| Cell::Text(s.into()))
    }
    pub fn opt_integer(i: Option<i64>) -> Cell {
        i.map_or(Cell::Null, Cell::Integer)
    }
}

enum Builder {
    Text(StringBuilder),
    Integer(Int64Builder),
    Number(Float64Builder),
    Boolean(BooleanBuilder),
}

/// The rows of one scan, projected and limited as the host asked.
pub struct Rows {
    columns: Vec<Column>,
    /// For each declared column, its position in the output (None: not projected).
    keep: Vec<Option<usize>>,
    builders: Vec<Builder>,
    limit: Option<u64>,
    rows: u64,
    sources: Vec<Source>,
    source_index: HashMap<String, u32>,
    row_sources: Vec<u32>,
    files: Vec<String>,
    notes: Vec<String>,
}

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rows")
            .field("columns", &self.columns.len())
            .field("rows", &self.rows)
            .field("sources", &self.sources.len())
            .finish()
    }
}

impl Rows {
    /// Rows with the described columns, keeping the projected ones (all when none is given).
    pub fn new(
        columns: &[Column],
        projection: Option<&[String]>,
        limit: Option<u64>,
    ) -> Result<Rows, String> {
        let selected: Vec<usize> = match projection {
            None => (0..columns.len()).collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    columns.iter().position(|c| &c.name == n).ok_or_else(|| {
                        format!(
                            "{}the host asked for column `{n}`, which this plugin does not produce (it produces: {})",
                            crate::PLUGIN_FAULT,
                            columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let mut keep = vec![None; columns.len()];
        for (out, &i) in selected.iter().enumerate() {
            keep[i] = Some(out);
        }
        let builders = selected
            .iter()
            .map(|&i| match columns[i].data_type {
                ColumnType::Text => Builder::Text(StringBuilder::new()),
                ColumnType::Integer => Builder::Integer(Int64Builder::new()),
                ColumnType::Number => Builder::Number(Float64Builder::new()),
                ColumnType::Boolean => Builder::Boolean(BooleanBuilder::new()),
            })
            .collect();
        Ok(Rows {
            columns: columns.to_vec(),
            keep,
            builders,
            limit,
            rows: 0,
            sources: Vec::new(),
            source_index: HashMap::new(),
            row_sources: Vec::new(),
            files: Vec::new(),
            notes: Vec::new(),
        })
    }

    /// Whether the limit is reached (further rows are dropped): stop reading early.
    pub fn is_full(&self) -> bool {
        self.limit.is_some_and(|l| self.rows >= l)
    }

    /// The number of rows pushed (up to the limit).
    pub fn len(&self) -> u64 {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Adds a row: one cell per described column, in order, and where the row comes from.
    /// Either every row has a source or none has.
    pub fn push(&mut self, cells: Vec<Cell>, source: Option<Source>) -> Result<(), String> {
        if self.is_full() {
            return Ok(());
        }
        if cells.len() != self.columns.len() {
            return Err(format!(
                "{}row {} has {} cells but the plugin describes {} columns",
                crate::PLUGIN_FAULT,
                self.rows + 1,
                cells.len(),
                self.columns.len()
            ));
        }
        match (&source, self.rows > 0 && self.row_sources.is_empty()) {
            (Some(_), true) => {
                return Err(format!(
                    "{}row {} has a source but earlier rows have none (either every row has a source or none has)",
                    crate::PLUGIN_FAULT,
                    self.rows + 1
                ));
            }
            (None, false) if !self.row_sources.is_empty() => {
                return Err(format!(
                    "{}row {} has no source but earlier rows have one (either every row has a source or none has)",
                    crate::PLUGIN_FAULT,
                    self.rows + 1
                ));
            }
            _ => {}
        }
        for (i, cell) in cells.into_iter().enumerate() {
            let Some(out) = self.keep[i] else { continue };
            let name = &self.columns[i].name;
            let row = self.rows + 1;
            let mismatch = |cell: &Cell| {
                format!(
                    "{}column `{name}` is described as {} but row {row} gives it {}",
                    crate::PLUGIN_FAULT,
                    type_name(self.columns[i].data_type),
                    cell_words(cell)
                )
            };
            match (&mut self.builders[out], cell) {
                (Builder::Text(b), Cell::Text(s)) => b.append_value(s),
                (Builder::Text(b), Cell::Null) => b.append_null(),
                (Builder::Integer(b), Cell::Integer(v)) => b.append_value(v),
                (Builder::Integer(b), Cell::Null) => b.append_null(),
                (Builder::Number(b), Cell::Number(v)) => b.append_value(v),
                (Builder::Number(b), Cell::Integer(v)) => b.append_value(v as f64),
                (Builder::Number(b), Cell::Null) => b.append_null(),
                (Builder::Boolean(b), Cell::Boolean(v)) => b.append_value(v),
                (Builder::Boolean(b), Cell::Null) => b.append_null(),
                (_, other) => return Err(mismatch(&other)),
            }
        }
        if let Some(s) = source {
            let key = source_key(&s);
            let next = self.sources.len() as u32;
            let index = *self.source_index.entry(key).or_insert(next);
            if index == next {
                self.sources.push(s);
            }
            self.row_sources.push(index);
        }
        self.rows += 1;
        Ok(())
    }

    /// Records that a file (relative to the dataset folder) was read; the host cites it with
    /// the SHA-256 of its bytes.
    pub fn read_file(&mut self, path: &str) {
        if !self.files.iter().any(|f| f == path) {
            self.files.push(path.to_string());
        }
    }

    /// A caveat for the caller, shown with the result.
    pub fn note(&mut self, note: impl Into<String>) {
        let n = note.into();
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// Writes the Arrow IPC stream and the source table.
    pub fn finish(self) -> Result<ScanResult, String> {
        let mut fields = Vec::with_capacity(self.builders.len());
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.builders.len());
        let mut order: Vec<(usize, usize)> = self
            .keep
            .iter()
            .enumerate()
            .filter_map(|(i, k)| k.map(|o| (o, i)))
            .collect();
        order.sort();
        let mut builders: Vec<Option<Builder>> = self.builders.into_iter().map(Some).collect();
        for (out, i) in order {
            let column = &self.columns[i];
            let (data_type, array): (DataType, ArrayRef) = match builders[out].take() {
                Some(Builder::Text(mut b)) => (DataType::Utf8, Arc::new(b.finish())),
                Some(Builder::Integer(mut b)) => (DataType::Int64, Arc::new(b.finish())),
                Some(Builder::Number(mut b)) => (DataType::Float64, Arc::new(b.finish())),
                Some(Builder::Boolean(mut b)) => (DataType::Boolean, Arc::new(b.finish())),
                None => return Err("internal: a column was written twice".to_string()),
            };
            fields.push(Field::new(&column.name, data_type, true));
            arrays.push(array);
        }
        let schema = Arc::new(Schema::new(fields));
        let batch = if arrays.is_empty() {
            RecordBatch::try_new_with_options(
                schema.clone(),
                arrays,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(self.rows as usize)),
            )
        } else {
            RecordBatch::try_new(schema.clone(), arrays)
        }
        .map_err(|e| format!("could not assemble the rows: {e}"))?;
        let mut ipc = Vec::new();
        {
            let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut ipc, &schema)
                .map_err(|e| format!("could not write the Arrow stream: {e}"))?;
            writer
                .write(&batch)
                .map_err(|e| format!("could not write the Arrow stream: {e}"))?;
            writer
                .finish()
                .map_err(|e| format!("could not write the Arrow stream: {e}"))?;
        }
        Ok(ScanResult {
            ipc,
            sources: self.sources,
            row_sources: self.row_sources,
            files: self.files,
            notes: self.notes,
        })
    }
}

fn type_name(t: ColumnType) -> &'static str {
    match t {
        ColumnType::Text => "text",
        ColumnType::Integer => "an integer",
        ColumnType::Number => "a number",
        ColumnType::Boolean => "a boolean",
    }
}

fn cell_words(cell: &Cell) -> String {
    let mut text = match cell {
        Cell::Text(s) => format!("the text `{s}`"),
        Cell::Integer(v) => format!("the integer {v}"),
        Cell::Number(v) => format!("the number {v}"),
        Cell::Boolean(v) => format!("the boolean {v}"),
        Cell::Null => "no value".to_string(),
    };
    if text.chars().count() > 80 {
        text = text.chars().take(80).collect::<String>() + "…";
    }
    text
}

fn source_key(s: &Source) -> String {
    let parts = [
        Some(s.uri.as_str()),
        Some(s.title.as_str()),
        s.publisher.as_deref(),
        Some(s.source_type.as_str()),
        s.locator.as_deref(),
        s.published_at.as_deref(),
        s.effective_at.as_deref(),
        s.file.as_deref(),
    ];
    let mut key = String::new();
    for p in parts {
        key.push_str(p.unwrap_or("\u{0}"));
        key.push('\u{1f}');
    }
    key
}

/// `describe`, for the export macro.
pub fn describe<P: SourcePlugin>(config: String) -> Result<Description, String> {
    P::describe(&Config::parse(&config)?)
}

/// `scan`, for the export macro.
pub fn scan<P: SourcePlugin>(request: ScanRequest) -> Result<ScanResult, String> {
    let request = Request::from_wit(request)?;
    let description = P::describe(&request.config)?;
    let mut rows = Rows::new(
        &description.columns,
        request.projection.as_deref(),
        request.limit,
    )?;
    P::scan(&request, &mut rows)?;
    rows.finish()
}

/// Exports a [`SourcePlugin`] as the component's `tally:plugin/source` interface.
#[macro_export]
macro_rules! export_source_plugin {
    ($plugin:ty) => {
        // The WIT glue is unsafe code by nature (raw pointers across the component ABI); it
        // is generated, and kept in a module of its own so the plugin's code stays checked.
        // Only a wasm build exports it: on the host the crate is a library for unit tests.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        mod __tally_source_export {
            #[allow(unused_imports)]
            use super::*;

            struct Export;

            impl $crate::guest::Guest for Export {
                fn describe(
                    config: ::std::string::String,
                ) -> ::std::result::Result<$crate::guest::Description, ::std::string::String>
                {
                    $crate::guest::describe::<$plugin>(config)
                }

                fn scan(
                    request: $crate::guest::ScanRequest,
                ) -> ::std::result::Result<$crate::guest::ScanResult, ::std::string::String>
                {
                    $crate::guest::scan::<$plugin>(request)
                }
            }

            $crate::guest::bindings::export_source!(Export with_types_in $crate::guest::bindings);
        }

        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            let _ = $crate::guest::describe::<$plugin>;
            let _ = $crate::guest::scan::<$plugin>;
        };
    };
}
