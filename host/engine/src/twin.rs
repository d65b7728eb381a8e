//! A restricted caller's twin of a dataset: the dataset as a policy shows it, its hidden
//! fields left out of its definition and schema and its rows filtered by the policy's
//! conditions, registered as a backend of its own so that every tool computes over what the
//! caller may see.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::catalog::view::ViewTable;
use datafusion::common::DFSchema;
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder};
use datafusion::prelude::{SessionConfig, SessionContext, ident};
use serde_json::{Value, json};
use tally_semantic::definition::{BackendKind, load_definition_hiding};
use tally_semantic::request::{self, Request, Tool};
use tally_storage::Dataset;
use tally_storage::backend::ServedFile;
use tally_storage::backend::{Backend, BackendDescription, LoadedData, Pushed, RowSources};
use tally_storage::catalog::Catalog;
use tally_storage::error::StorageError;
use tally_storage::memory::Meter;

use crate::engine::Engine;
use crate::plan;
use crate::policy::{Policy, RESTRICTED_NOTE, Restriction, Scope};

impl Engine {
    /// The dataset `id` as a caller of `scope` sees it in `catalog`: `None` when it is not
    /// served or not theirs to see; the dataset itself when they see it whole, else its
    /// restricted twin. A twin that cannot be made (the policy names a field the dataset no
    /// longer has) hides the dataset, with a warning in the log.
    pub(crate) fn seen(&self, catalog: &Catalog, id: &str, scope: &Scope) -> Option<Arc<Dataset>> {
        if !scope.allows(id) {
            return None;
        }
        let ds = catalog.datasets.get(id)?;
        match scope.restriction(id) {
            None => Some(Arc::clone(ds)),
            Some(r) => match self.twin(ds, r) {
                Ok(twin) => Some(twin),
                Err(e) => {
                    tracing::warn!(
                        dataset = id,
                        "a policy's view of the dataset cannot be made, so it is hidden from its callers: {e}"
                    );
                    None
                }
            },
        }
    }

    /// The restricted twin of `ds` under `r`, made once per version of the dataset.
    pub(crate) fn twin(&self, ds: &Arc<Dataset>, r: &Restriction) -> Result<Arc<Dataset>, String> {
        let key = (ds.version.clone(), r.key(self.twins.salt));
        if let Some(t) = self
            .twins
            .made
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(t));
        }
        let twin = Arc::new(make_twin(self, ds, r, &key.1)?);
        let mut made = self.twins.made.lock().unwrap_or_else(|p| p.into_inner());
        // Twins of versions no longer served go with them.
        if made.len() > 256 {
            let live: BTreeSet<String> = self
                .catalog
                .load()
                .datasets
                .values()
                .map(|d| d.version.clone())
                .collect();
            made.retain(|(version, _), _| live.contains(version));
        }
        Ok(Arc::clone(made.entry(key).or_insert(twin)))
    }

    /// Checks every restriction of `policy` against the datasets served now: the fields it
    /// hides exist, the definition reads without them, and its row conditions resolve.
    pub fn check_policy(&self, policy: &Policy) -> Result<(), String> {
        let catalog = self.catalog.load_full();
        let mut problems = Vec::new();
        for (id, r) in &policy.datasets {
            let Some(ds) = catalog.datasets.get(id) else {
                tracing::warn!(dataset = %id, policies = ?policy.names, "a policy names a dataset that is not served (now)");
                continue;
            };
            if r.is_whole() {
                continue;
            }
            if let Err(e) = make_twin(self, ds, r, "check") {
                problems.push(format!("dataset `{id}`: {e}"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }
}

fn make_twin(
    engine: &Engine,
    ds: &Arc<Dataset>,
    r: &Restriction,
    key: &str,
) -> Result<Dataset, String> {
    let def = &ds.def;
    for name in &r.hide {
        match def.field(name) {
            None => {
                return Err(format!(
                    "the policy hides `{name}`, which the dataset does not declare (its fields: {})",
                    def.fields
                        .iter()
                        .map(|f| format!("`{}`", f.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Some(f) if !f.is_column() => {
                return Err(format!(
                    "the policy hides `{name}`, a field looked up from another (a rollup level or a related dataset's); hide the field it is looked up by"
                ));
            }
            Some(_) => {}
        }
    }
    let hidden: Vec<String> = r.hide.iter().cloned().collect();
    let folder_id = ds
        .folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| def.id.clone());
    let loaded = load_definition_hiding(&ds.definition_file, &folder_id, &ds.definition_text, &hidden)
        .map_err(|e| {
            format!(
                "without the fields it hides the definition does not hold (hide what names them too): {}",
                e.errors().map(ToString::to_string).collect::<Vec<_>>().join("; ")
            )
        })?;
    let mut twin_def = loaded.dataset;
    twin_def.undeclared = def.undeclared.clone();
    twin_def.notes.push(RESTRICTED_NOTE.to_string());
    let predicate = match &r.rows {
        None => None,
        Some(conditions) => Some(row_predicate(engine, ds, conditions)?),
    };
    let schema = ds.backend.schema();
    let kept: Vec<_> = schema
        .fields()
        .iter()
        .filter(|f| !r.hide.contains(f.name()))
        .cloned()
        .collect();
    let needs = predicate
        .as_ref()
        .map(|p| {
            p.column_refs()
                .into_iter()
                .map(|c| c.name.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        })
        .unwrap_or_default();
    let backend = Arc::new(Restricted {
        inner: Arc::clone(&ds.backend),
        predicate,
        needs,
        schema: Arc::new(Schema::new(kept)),
    });
    Ok(Dataset::new(
        twin_def,
        ds.folder.clone(),
        ds.definition_file.clone(),
        loaded.warnings,
        backend,
        ds.undeclared_columns.clone(),
        ds.retrieved.clone(),
        ds.fetched_from.clone(),
        format!("{}~{key}", ds.version),
        Arc::clone(&ds.definition_text),
    ))
}

/// The condition rows must meet: the conditions resolved against the whole definition (a
/// hidden field may restrict rows), as the engine plans a `where`, any of them.
fn row_predicate(engine: &Engine, ds: &Dataset, conditions: &[Value]) -> Result<Expr, String> {
    let def = &ds.def;
    let mut any = Vec::new();
    for condition in conditions {
        let asked = json!({"dataset_id": def.id, "where": condition});
        let args = match request::parse(Tool::QueryRecords, &asked) {
            Ok(Request::QueryRecords(args)) => args,
            Ok(_) => return Err("the row condition is not a `where`".into()),
            Err(e) => {
                return Err(format!(
                    "the row condition {condition} is not a `where`: {}",
                    e.message
                ));
            }
        };
        let plan = tally_semantic::resolve::resolve_query(def, args).map_err(|e| {
            format!(
                "the row condition {condition} does not resolve: {}",
                e.message
            )
        })?;
        // A policy says exactly what it means: no name read as another, no period found in
        // the data, nothing the reading had to say about it.
        if let Some(r) = plan.resolved_fields.first() {
            return Err(format!(
                "the row condition {condition} names `{}`, which is read as `{}`; write it exactly so",
                r.input, r.canonical
            ));
        }
        if plan.latest.is_some() {
            return Err(format!(
                "the row condition {condition} asks for the latest period, which changes with the data; name the periods"
            ));
        }
        if let Some(n) = plan.notices.first() {
            return Err(format!(
                "the row condition {condition}: {} ({})",
                n.message, n.parameter
            ));
        }
        let planner = plan::Planner {
            def,
            functions: engine.functions(),
            data: None,
            stop: tally_storage::stop::Stop::new(),
        };
        let mut all = Vec::new();
        for filter in &plan.filters {
            if !def.fields[filter.field].is_column() {
                return Err(format!(
                    "the row condition {condition} is on `{}`, which is looked up from another field; restrict rows by columns of the data",
                    def.fields[filter.field].name
                ));
            }
            all.push(
                planner
                    .filter(filter)
                    .map_err(|e| format!("the row condition {condition}: {}", e.message))?,
            );
        }
        if all.is_empty() {
            return Err(format!(
                "the row condition {condition} names no condition; give one, e.g. {{\"field\": \"value\"}}, or leave `rows` out to show every row"
            ));
        }
        any.push(plan::conjunction(all).unwrap_or_else(|| datafusion::prelude::lit(true)));
    }
    plan::balanced(any, Expr::or).ok_or_else(|| "`rows` lists no condition".to_string())
}

/// A backend that reads only the rows a policy lets through and none of the fields it hides.
#[derive(Debug)]
struct Restricted {
    inner: Arc<dyn Backend>,
    predicate: Option<Expr>,
    /// The columns the predicate reads.
    needs: Vec<String>,
    /// The inner schema without the hidden fields.
    schema: SchemaRef,
}

#[async_trait]
impl Backend for Restricted {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
    fn row_count(&self) -> Option<u64> {
        match self.predicate {
            None => self.inner.row_count(),
            Some(_) => None,
        }
    }
    fn files(&self) -> Vec<ServedFile> {
        self.inner.files()
    }
    fn fingerprint(&self) -> Vec<u8> {
        self.inner.fingerprint()
    }
    async fn load(
        &self,
        columns: &[String],
        pushed: &[Pushed],
        meter: &Meter,
    ) -> Result<LoadedData, StorageError> {
        if let Some(hidden) = columns
            .iter()
            .find(|c| self.schema.field_with_name(c).is_err())
        {
            return Err(StorageError::internal(format!(
                "a read of a restricted dataset asked for `{hidden}`, which is not served to its caller"
            )));
        }
        let Some(predicate) = &self.predicate else {
            return self.inner.load(columns, pushed, meter).await;
        };
        let mut needed = columns.to_vec();
        for c in &self.needs {
            if !needed.contains(c) {
                needed.push(c.clone());
            }
        }
        let loaded = self.inner.load(&needed, pushed, meter).await?;
        let (provider, row_sources) = match &loaded.row_sources {
            None => (
                filtered_view(Arc::clone(&loaded.provider), predicate, columns)?,
                None,
            ),
            Some(sources) => {
                let (table, kept) =
                    filtered_copy(Arc::clone(&loaded.provider), predicate, columns, sources)
                        .await?;
                (table, Some(Arc::new(kept)))
            }
        };
        Ok(LoadedData {
            provider,
            row_sources,
            ..loaded
        })
    }
    fn pushdown_columns(&self) -> Vec<String> {
        self.inner.pushdown_columns()
    }
    fn prunes_ranges(&self) -> bool {
        self.inner.prunes_ranges()
    }
    fn subsets_of_whole(&self) -> bool {
        self.inner.subsets_of_whole()
    }
    fn content_hash(&self, files: &[ServedFile]) -> Option<(String, Option<String>)> {
        self.inner.content_hash(files)
    }
    fn origin(&self) -> Option<String> {
        self.inner.origin()
    }
    fn read_failure(&self) -> Option<String> {
        self.inner.read_failure()
    }
    fn describe(&self) -> BackendDescription {
        self.inner.describe()
    }
}

fn df_error(e: datafusion::error::DataFusionError) -> StorageError {
    StorageError::internal(format!("restricting rows by a policy: {e}"))
}

/// The rows of `provider` the predicate holds for, its `columns` only, read lazily (the
/// condition goes into every scan of it, where DataFusion pushes it as far down as it can).
fn filtered_view(
    provider: Arc<dyn TableProvider>,
    predicate: &Expr,
    columns: &[String],
) -> Result<Arc<dyn TableProvider>, StorageError> {
    let mut plan = LogicalPlanBuilder::scan("restricted", provider_as_source(provider), None)
        .and_then(|b| b.filter(predicate.clone()))
        .map_err(df_error)?;
    if !columns.is_empty() {
        plan = plan
            .project(columns.iter().map(|c| ident(c.as_str())))
            .map_err(df_error)?;
    }
    let plan = plan.build().map_err(df_error)?;
    Ok(Arc::new(ViewTable::new(plan, None)))
}

/// The rows the predicate holds for, copied, with where each comes from (a backend that
/// says where each row comes from reads its rows into memory anyway).
async fn filtered_copy(
    provider: Arc<dyn TableProvider>,
    predicate: &Expr,
    columns: &[String],
    sources: &RowSources,
) -> Result<(Arc<dyn TableProvider>, RowSources), StorageError> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    let schema = provider.schema();
    let df_schema = DFSchema::try_from(Arc::clone(&schema)).map_err(df_error)?;
    let test = ctx
        .create_physical_expr(predicate.clone(), &df_schema)
        .map_err(df_error)?;
    let batches = ctx
        .read_table(provider)
        .map_err(df_error)?
        .collect()
        .await
        .map_err(df_error)?;
    let projection: Vec<usize> = columns
        .iter()
        .map(|c| schema.index_of(c))
        .collect::<Result<_, _>>()
        .map_err(|e| StorageError::internal(e.to_string()))?;
    let mut index = Vec::new();
    let mut kept = Vec::new();
    let mut row = 0usize;
    for batch in batches {
        let n = batch.num_rows();
        let mask = test
            .evaluate(&batch)
            .and_then(|v| v.into_array(n))
            .map_err(df_error)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| {
                StorageError::internal("a policy's row condition is not true or false")
            })?;
        // Null is not true: the row is left out.
        let mask: BooleanArray = (0..n)
            .map(|i| Some(mask.is_valid(i) && mask.value(i)))
            .collect();
        for i in (0..n).filter(|&i| mask.value(i)) {
            index.push(*sources.index.get(row + i).ok_or_else(|| {
                StorageError::internal("a backend gave fewer row sources than rows")
            })?);
        }
        row += n;
        let filtered = filter_record_batch(&batch, &mask)
            .and_then(|b| b.project(&projection))
            .map_err(|e| StorageError::internal(e.to_string()))?;
        kept.push(filtered);
    }
    let out_schema = Arc::new(
        schema
            .project(&projection)
            .map_err(|e| StorageError::internal(e.to_string()))?,
    );
    let table = MemTable::try_new(out_schema, vec![kept]).map_err(df_error)?;
    Ok((
        Arc::new(table),
        RowSources {
            sources: sources.sources.clone(),
            index,
        },
    ))
}
