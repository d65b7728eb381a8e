//! A served dataset: its definition, its backend, and the in-memory table queries run on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, RecordBatch, StringArray, StringBuilder, UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field as ArrowField, Schema, SchemaRef};
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, cast};
use datafusion::prelude::{SessionContext, ident};
use serde_json::Value;
use tally_semantic::definition::{DataType as FieldType, DatasetDef, DateValue, Diagnostic};
use tokio::sync::OnceCell;

use crate::backend::{Backend, Pushed, RowSources, ServedFile};
use crate::error::EngineError;

/// Hidden column: the record's position in file order (the default order).
pub const ROW_COL: &str = "__tally_row";
/// Hidden column: every text field of the record, lower-cased and joined, for `q`.
pub const SEARCH_COL: &str = "__tally_search";
/// Prefix reserved for hidden columns.
pub const RESERVED_PREFIX: &str = "__tally_";
/// Joins fields in the search column; `q` never contains it (control characters are removed).
pub const SEARCH_SEPARATOR: char = '\u{1f}';

/// Where the retrieval date of a dataset comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retrieved {
    /// `.fetch.json` beside the data (`fetched_at`).
    FetchRecord(DateValue),
    /// `retrieved_at` in dataset.yaml.
    Definition(DateValue),
    /// Neither: the data file's modification time (said in a warning).
    FileModified(String),
    Unknown,
}

impl Retrieved {
    pub fn value(&self) -> Option<&str> {
        match self {
            Retrieved::FetchRecord(d) | Retrieved::Definition(d) => Some(d.as_str()),
            Retrieved::FileModified(s) => Some(s),
            Retrieved::Unknown => None,
        }
    }
}

/// A dataset the catalog serves.
#[derive(Debug)]
pub struct Dataset {
    pub def: DatasetDef,
    pub folder: PathBuf,
    /// The definition file, as named in messages (`datasets/<folder>/dataset.yaml`).
    pub definition_file: String,
    pub warnings: Vec<Diagnostic>,
    pub backend: Arc<dyn Backend>,
    /// Columns of the data that the definition does not declare (not served).
    pub undeclared_columns: Vec<String>,
    pub retrieved: Retrieved,
    /// The URL `.fetch.json` says the data was fetched from, if any.
    pub fetched_from: Option<String>,
    /// Identifies this version of definition + data (changes when either changes).
    pub version: String,
    prepared: OnceCell<Arc<Prepared>>,
    /// Prepared subsets read with conditions the backend applied itself, by condition (a
    /// few, most recent last).
    subsets: std::sync::Mutex<Vec<(Vec<Pushed>, PreparedCell)>>,
    inspect: OnceCell<Value>,
}

/// A prepared table, built once by whichever call needs it first.
type PreparedCell = Arc<OnceCell<Arc<Prepared>>>;

/// How many pushed-down subsets a dataset version keeps.
const SUBSETS_KEPT: usize = 16;

/// Distinct values of a field with their record counts, most frequent first.
pub type ValueCounts = Arc<Vec<(String, usize)>>;

/// The data of a dataset in memory, with the hidden columns added.
#[derive(Debug)]
pub struct Prepared {
    pub table: Arc<MemTable>,
    /// The same data as the table (arrays are shared, not copied), for scans done in Rust.
    pub batches: Vec<RecordBatch>,
    pub files: Vec<ServedFile>,
    pub rows: usize,
    /// How the rows were read, when the backend says it in its own words (plugins).
    pub extract: Option<String>,
    /// Caveats from the backend, shown with every result.
    pub notes: Vec<String>,
    /// Per row (indexed by the row column), its own source, when the backend reports one.
    pub row_sources: Option<Arc<RowSources>>,
    /// The conditions the backend applied itself to give this table (empty: all the data).
    pub pushed: Vec<Pushed>,
    /// Distinct values (parts, for multi-value fields) with their record counts, per field,
    /// computed when first needed.
    values: std::sync::Mutex<std::collections::HashMap<usize, ValueCounts>>,
    /// Groupable single-valued text fields also have an integer code column
    /// ([`code_column`]); grouping on codes hashes integers instead of strings. Code 0 is
    /// null or "" (both shown as ""); the others index this list of values.
    pub codes: std::collections::HashMap<usize, Arc<Vec<String>>>,
    /// The `count_where` computed measures with a prepared 0/1 column ([`share_column`]).
    pub shares: Vec<usize>,
}

/// The hidden 0/1 column of a `count_where` computed measure (1.0 where the record counts).
pub fn share_column(measure: usize) -> String {
    format!("__tally_share_{measure}")
}

/// The hidden code column of a field.
pub fn code_column(field: usize) -> String {
    format!("__tally_code_{field}")
}

impl Prepared {
    /// Whether a declared field has any null value.
    pub fn has_nulls(&self, field: usize) -> bool {
        self.batches
            .iter()
            .any(|b| b.column(field).null_count() > 0)
    }

    /// The distinct non-empty values of a text field with how many records have each, most
    /// frequent first (for multi-value fields: the trimmed parts).
    pub fn distinct_values(&self, def: &DatasetDef, field: usize) -> ValueCounts {
        if let Ok(cache) = self.values.lock()
            && let Some(v) = cache.get(&field)
        {
            return Arc::clone(v);
        }
        let separator = def.fields[field].multi_value.clone();
        let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for batch in &self.batches {
            let Some(col) = batch.column(field).as_any().downcast_ref::<StringArray>() else {
                continue;
            };
            for i in 0..col.len() {
                if !col.is_valid(i) {
                    continue;
                }
                let v = col.value(i);
                match &separator {
                    Some(sep) => {
                        let mut seen = std::collections::HashSet::new();
                        for part in v
                            .split(sep.as_str())
                            .map(str::trim)
                            .filter(|p| !p.is_empty())
                        {
                            if seen.insert(part) {
                                *counts.entry(part.to_string()).or_default() += 1;
                            }
                        }
                    }
                    None => {
                        if !v.trim().is_empty() {
                            *counts.entry(v.to_string()).or_default() += 1;
                        }
                    }
                }
            }
        }
        let mut values: Vec<(String, usize)> = counts.into_iter().collect();
        values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let values = Arc::new(values);
        if let Ok(mut cache) = self.values.lock() {
            cache.insert(field, Arc::clone(&values));
        }
        values
    }
}

/// The type a declared field has in the prepared table.
pub fn canonical_type(field_type: FieldType, source: &DataType) -> Result<DataType, String> {
    use DataType::*;
    if field_type.is_numeric() {
        return match source {
            Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => Ok(Int64),
            Float16
            | Float32
            | Float64
            | Decimal32(_, _)
            | Decimal64(_, _)
            | Decimal128(_, _)
            | Decimal256(_, _) => Ok(Float64),
            Null => Ok(Int64),
            other => Err(format!(
                "is declared {} but the data column has type {other}",
                field_type.as_str()
            )),
        };
    }
    match source {
        List(_)
        | LargeList(_)
        | FixedSizeList(_, _)
        | Struct(_)
        | Map(_, _)
        | Union(_, _)
        | Binary
        | LargeBinary
        | FixedSizeBinary(_)
        | BinaryView
        | ListView(_)
        | LargeListView(_) => Err(format!(
            "has type {source} in the data, which cannot be served as text"
        )),
        _ => Ok(Utf8),
    }
}

impl Dataset {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        def: DatasetDef,
        folder: PathBuf,
        definition_file: String,
        warnings: Vec<Diagnostic>,
        backend: Arc<dyn Backend>,
        undeclared_columns: Vec<String>,
        retrieved: Retrieved,
        fetched_from: Option<String>,
        version: String,
    ) -> Dataset {
        Dataset {
            def,
            folder,
            definition_file,
            warnings,
            backend,
            undeclared_columns,
            retrieved,
            fetched_from,
            version,
            prepared: OnceCell::new(),
            subsets: std::sync::Mutex::new(Vec::new()),
            inspect: OnceCell::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.def.id
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The number of records: from the metadata (Parquet), else once the data has been read
    /// (plugins); `None` until then.
    pub fn record_count(&self) -> Option<u64> {
        self.backend
            .row_count()
            .or_else(|| self.prepared.get().map(|p| p.rows as u64))
    }

    /// The prepared table, built on first use and kept for this dataset version.
    pub async fn prepared(&self, ctx: &SessionContext) -> Result<Arc<Prepared>, EngineError> {
        self.prepared
            .get_or_try_init(|| async { self.prepare(ctx, &[]).await.map(Arc::new) })
            .await
            .cloned()
    }

    /// The conditions of a call that the backend can apply itself: equality on a text field
    /// it declared, not multi-valued.
    pub fn pushdown(&self, filters: &[tally_semantic::resolve::Filter]) -> Vec<Pushed> {
        use tally_semantic::request::Op;
        let columns = self.backend.pushdown_columns();
        if columns.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<Pushed> = Vec::new();
        for f in filters {
            let field = &self.def.fields[f.field];
            if field.data_type.is_numeric()
                || field.is_multi_value()
                || !columns.contains(&field.name)
            {
                continue;
            }
            let values: Vec<String> = match &f.op {
                Op::Eq(v) => vec![v.text()],
                Op::In(vs) if !vs.is_empty() => vs.iter().map(|v| v.text()).collect(),
                _ => continue,
            };
            out.push(Pushed {
                column: field.name.clone(),
                values,
            });
        }
        out.sort_by(|a, b| a.column.cmp(&b.column).then(a.values.cmp(&b.values)));
        out
    }

    /// The prepared table for a call: the whole data, or, when the backend applies some of
    /// the call's conditions itself, the subset it returned for them (kept for later calls).
    pub async fn prepared_for(
        &self,
        ctx: &SessionContext,
        pushed: &[Pushed],
    ) -> Result<Arc<Prepared>, EngineError> {
        if pushed.is_empty() {
            return self.prepared(ctx).await;
        }
        let cell = {
            let mut subsets = self
                .subsets
                .lock()
                .map_err(|_| EngineError::internal("the subset cache lock is poisoned"))?;
            match subsets.iter().position(|(k, _)| k.as_slice() == pushed) {
                Some(i) => {
                    let entry = subsets.remove(i);
                    let cell = Arc::clone(&entry.1);
                    subsets.push(entry);
                    cell
                }
                None => {
                    if subsets.len() >= SUBSETS_KEPT {
                        subsets.remove(0);
                    }
                    let cell = Arc::new(OnceCell::new());
                    subsets.push((pushed.to_vec(), Arc::clone(&cell)));
                    cell
                }
            }
        };
        cell.get_or_try_init(|| async { self.prepare(ctx, pushed).await.map(Arc::new) })
            .await
            .cloned()
    }

    /// The cached `inspect_dataset` body, computed once per version.
    pub async fn inspect_cached<F, Fut>(&self, compute: F) -> Result<Value, EngineError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Value, EngineError>>,
    {
        self.inspect.get_or_try_init(compute).await.cloned()
    }

    async fn prepare(
        &self,
        ctx: &SessionContext,
        pushed: &[Pushed],
    ) -> Result<Prepared, EngineError> {
        let def = &self.def;
        let id = def.id.as_str();
        let names: Vec<String> = def.fields.iter().map(|f| f.name.clone()).collect();
        let loaded = self.backend.load(&names, pushed).await?;
        let source = loaded.provider.schema();
        let mut exprs: Vec<Expr> = Vec::with_capacity(def.fields.len());
        for f in &def.fields {
            let source_type = source
                .field_with_name(&f.name)
                .map_err(|_| {
                    EngineError::backend(id, format!("column `{}` vanished from the data", f.name))
                })?
                .data_type()
                .clone();
            let target = canonical_type(f.data_type, &source_type)
                .map_err(|m| EngineError::backend(id, format!("`{}` {m}", f.name)))?;
            exprs.push(cast(ident(&f.name), target).alias(&f.name));
        }
        let batches = ctx
            .read_table(loaded.provider.clone())?
            .select(exprs)?
            .collect()
            .await
            .map_err(|e| EngineError::backend(id, e))?;

        let text_fields: Vec<usize> = def
            .fields
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.data_type.is_numeric())
            .map(|(i, _)| i)
            .collect();
        let base_schema: SchemaRef = match batches.first() {
            Some(b) => b.schema(),
            None => {
                let fields: Vec<ArrowField> = def
                    .fields
                    .iter()
                    .map(|f| {
                        let t = if f.data_type.is_numeric() {
                            if f.data_type == FieldType::Integer {
                                DataType::Int64
                            } else {
                                DataType::Float64
                            }
                        } else {
                            DataType::Utf8
                        };
                        ArrowField::new(&f.name, t, true)
                    })
                    .collect();
                Arc::new(Schema::new(fields))
            }
        };
        let mut fields: Vec<ArrowField> = base_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(ArrowField::new(ROW_COL, DataType::UInt64, false));
        fields.push(ArrowField::new(SEARCH_COL, DataType::Utf8, false));
        let coded: Vec<usize> = def
            .fields
            .iter()
            .enumerate()
            // Dimensions and coded attributes are what summaries group by; free text (names,
            // notes) is not worth a second copy.
            .filter(|(_, f)| {
                f.groupable
                    && !f.data_type.is_numeric()
                    && !f.is_multi_value()
                    && (f.role == tally_semantic::definition::Role::Dim || f.codelist.is_some())
            })
            .map(|(i, _)| i)
            .collect();
        for &i in &coded {
            fields.push(ArrowField::new(code_column(i), DataType::UInt32, false));
        }
        // `count_where` measures: whether each record counts, decided once per version.
        let shares: Vec<(usize, usize, Option<String>, Vec<String>)> = def
            .computed_measures
            .iter()
            .enumerate()
            .filter_map(|(k, m)| match &m.formula {
                tally_semantic::definition::Formula::CountWhere {
                    condition_field,
                    condition_values,
                } => def.field_index(condition_field).map(|f| {
                    (
                        k,
                        f,
                        def.fields[f].multi_value.clone(),
                        condition_values.clone(),
                    )
                }),
                _ => None,
            })
            .filter(|(_, f, _, _)| !def.fields[*f].data_type.is_numeric())
            .collect();
        for (k, _, _, _) in &shares {
            fields.push(ArrowField::new(share_column(*k), DataType::Float64, false));
        }
        let schema = Arc::new(Schema::new(fields));
        let mut dictionaries: Vec<(std::collections::HashMap<String, u32>, Vec<String>)> = coded
            .iter()
            .map(|_| (Default::default(), vec![String::new()]))
            .collect();

        let mut out = Vec::with_capacity(batches.len());
        let mut row = 0u64;
        for batch in batches {
            let n = batch.num_rows();
            let rows: ArrayRef = Arc::new(UInt64Array::from_iter_values(row..row + n as u64));
            row += n as u64;
            let texts: Vec<&StringArray> = text_fields
                .iter()
                .filter_map(|i| batch.column(*i).as_any().downcast_ref::<StringArray>())
                .collect();
            let mut search = StringBuilder::with_capacity(n, n * 64);
            let mut buf = String::new();
            for r in 0..n {
                buf.clear();
                for (k, col) in texts.iter().enumerate() {
                    if k > 0 {
                        buf.push(SEARCH_SEPARATOR);
                    }
                    if col.is_valid(r) {
                        buf.push_str(col.value(r));
                    }
                }
                search.append_value(buf.to_lowercase());
            }
            let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
            columns.push(rows);
            columns.push(Arc::new(search.finish()));
            let mut share_columns: Vec<ArrayRef> = Vec::with_capacity(shares.len());
            for (_, f, separator, values) in &shares {
                let col = batch.column(*f).as_any().downcast_ref::<StringArray>();
                let counts = |v: &str| match separator {
                    Some(sep) => v
                        .split(sep.as_str())
                        .any(|p| values.iter().any(|c| c == p.trim())),
                    None => values.iter().any(|c| c == v),
                };
                let share: datafusion::arrow::array::Float64Array = (0..n)
                    .map(|r| match col {
                        Some(c) if c.is_valid(r) && counts(c.value(r)) => 1.0,
                        _ => 0.0,
                    })
                    .collect();
                share_columns.push(Arc::new(share));
            }
            for (k, &i) in coded.iter().enumerate() {
                let (lookup, values) = &mut dictionaries[k];
                let col = batch.column(i).as_any().downcast_ref::<StringArray>();
                let codes: UInt32Array = (0..n)
                    .map(|r| match col {
                        Some(c) if c.is_valid(r) && !c.value(r).is_empty() => {
                            let v = c.value(r);
                            *lookup.entry(v.to_string()).or_insert_with(|| {
                                values.push(v.to_string());
                                (values.len() - 1) as u32
                            })
                        }
                        _ => 0,
                    })
                    .collect();
                columns.push(Arc::new(codes));
            }
            columns.extend(share_columns);
            out.push(
                RecordBatch::try_new(schema.clone(), columns)
                    .map_err(|e| EngineError::backend(id, e))?,
            );
        }
        let rows = row as usize;
        if let Some(r) = &loaded.row_sources
            && r.index.len() != rows
        {
            return Err(EngineError::backend(
                id,
                format!(
                    "the backend gave {} row sources for {rows} rows",
                    r.index.len()
                ),
            ));
        }
        let table = MemTable::try_new(schema, vec![out.clone()])
            .map_err(|e| EngineError::backend(id, e))?;
        Ok(Prepared {
            table: Arc::new(table),
            batches: out,
            files: loaded.files,
            rows,
            extract: loaded.extract,
            notes: loaded.notes,
            pushed: pushed.to_vec(),
            row_sources: loaded.row_sources,
            values: Default::default(),
            shares: shares.iter().map(|(k, _, _, _)| *k).collect(),
            codes: coded
                .iter()
                .zip(dictionaries)
                .map(|(&i, (_, values))| (i, Arc::new(values)))
                .collect(),
        })
    }
}

use datafusion::arrow::array::Array as _;
