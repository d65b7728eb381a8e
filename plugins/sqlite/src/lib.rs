//! SQLite as a Tally source: one table of a database file in the dataset folder, served as a
//! DataFusion table provider through Tally's native plugin entry point.
//!
//! ```yaml
//! backend:
//!   kind: native
//!   library: libtally_plugin_sqlite.so
//!   config: { database: data.sqlite, table: procedures }
//! ```
//!
//! SQLite runs what it can: the projection, the conditions it can express exactly (`=`,
//! `<>`, `<`, `<=`, `>`, `>=` and `IN` between a column and literals, `IS [NOT] NULL`, joined
//! by `AND`/`OR`) and the limit. The query it ran shows in the plan (`SQLite: SELECT …`).
//! The database is opened read-only. Column types come from the declared types (`INT…` →
//! integer, `REAL`/`FLOA…`/`DOUB…`/`NUM…`/`DEC…` → float, anything else → text), rows in
//! `rowid` order.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Float64Builder, Int64Builder, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use tally_plugin_api::native::{Context, StreamExec};

/// One table of a SQLite database.
#[derive(Debug)]
pub struct SqliteTable {
    path: PathBuf,
    table: String,
    schema: SchemaRef,
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn open(path: &PathBuf) -> std::result::Result<Connection, String> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("could not open the database `{}`: {e}", path.display()))
}

impl SqliteTable {
    /// Opens the table named in the config (or the database's only table).
    pub fn open(context: &Context) -> std::result::Result<SqliteTable, String> {
        let path = context.file("database")?;
        if !path.is_file() {
            return Err(format!(
                "the database `{}` is not in the dataset folder",
                context
                    .config
                    .get("database")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
            ));
        }
        let conn = open(&path)?;
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .and_then(|mut s| s.query_map([], |r| r.get::<_, String>(0))?.collect())
            .map_err(|e| format!("`{}` is not a readable SQLite database: {e}", path.display()))?;
        let table = match context.config.get("table").and_then(|v| v.as_str()) {
            Some(t) if tables.iter().any(|x| x == t) => t.to_string(),
            Some(t) => {
                return Err(format!(
                    "the database has no table `{t}`; it has: {}",
                    tables.join(", ")
                ));
            }
            None if tables.len() == 1 => tables[0].clone(),
            None => {
                return Err(format!(
                    "backend.config needs `table`: the database has {} tables ({})",
                    tables.len(),
                    tables.join(", ")
                ));
            }
        };
        let mut stmt = conn
            .prepare(&format!("PRAGMA table_info({})", quote(&table)))
            .map_err(|e| e.to_string())?;
        let fields: Vec<Field> = stmt
            .query_map([], |r| Ok((r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(name, declared)| Field::new(name, column_type(&declared), true))
            .collect();
        Ok(SqliteTable {
            path,
            table,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// The SQL for a scan; `None` parts are left out.
    fn sql(&self, columns: &[String], conditions: &[String], limit: Option<usize>) -> String {
        let select = if columns.is_empty() {
            "1".to_string()
        } else {
            columns
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut sql = format!("SELECT {select} FROM {}", quote(&self.table));
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        sql.push_str(" ORDER BY rowid");
        if let Some(n) = limit {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        sql
    }

    fn read(&self, sql: &str, schema: &SchemaRef) -> std::result::Result<RecordBatch, String> {
        let conn = open(&self.path)?;
        let mut stmt = conn
            .prepare(sql)
            .map_err(|e| format!("SQLite refused `{sql}`: {e}"))?;
        enum B {
            I(Int64Builder),
            F(Float64Builder),
            S(StringBuilder),
        }
        let mut builders: Vec<B> = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Int64 => B::I(Int64Builder::new()),
                DataType::Float64 => B::F(Float64Builder::new()),
                _ => B::S(StringBuilder::new()),
            })
            .collect();
        let mut rows = stmt
            .query([])
            .map_err(|e| format!("SQLite failed on `{sql}`: {e}"))?;
        let mut n = 0usize;
        while let Some(row) = rows
            .next()
            .map_err(|e| format!("SQLite failed on `{sql}`: {e}"))?
        {
            n += 1;
            for (i, b) in builders.iter_mut().enumerate() {
                let v = row.get_ref(i).map_err(|e| e.to_string())?;
                let name = schema.field(i).name();
                match (b, v) {
                    (B::I(b), ValueRef::Null) => b.append_null(),
                    (B::I(b), ValueRef::Integer(x)) => b.append_value(x),
                    (B::I(b), ValueRef::Real(x)) if x.fract() == 0.0 => b.append_value(x as i64),
                    (B::F(b), ValueRef::Null) => b.append_null(),
                    (B::F(b), ValueRef::Integer(x)) => b.append_value(x as f64),
                    (B::F(b), ValueRef::Real(x)) => b.append_value(x),
                    (B::S(b), ValueRef::Null) => b.append_null(),
                    (B::S(b), ValueRef::Text(t)) => b.append_value(String::from_utf8_lossy(t)),
                    (B::S(b), ValueRef::Integer(x)) => b.append_value(x.to_string()),
                    (B::S(b), ValueRef::Real(x)) => b.append_value(x.to_string()),
                    (_, other) => {
                        return Err(format!(
                            "row {n} of `{}` holds {:?} in column `{name}`, which does not fit its declared type",
                            self.table,
                            other.data_type()
                        ));
                    }
                }
            }
        }
        let arrays: Vec<ArrayRef> = builders
            .into_iter()
            .map(|b| -> ArrayRef {
                match b {
                    B::I(mut b) => Arc::new(b.finish()),
                    B::F(mut b) => Arc::new(b.finish()),
                    B::S(mut b) => Arc::new(b.finish()),
                }
            })
            .collect();
        RecordBatch::try_new_with_options(
            Arc::clone(schema),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )
        .map_err(|e| e.to_string())
    }
}

fn column_type(declared: &str) -> DataType {
    let d = declared.to_ascii_uppercase();
    if d.contains("INT") {
        DataType::Int64
    } else if ["REAL", "FLOA", "DOUB", "NUM", "DEC"]
        .iter()
        .any(|k| d.contains(k))
    {
        DataType::Float64
    } else {
        DataType::Utf8
    }
}

/// A literal as SQL, for the types SQLite compares the same way DataFusion does.
fn literal(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(format!("'{}'", s.replace('\'', "''"))),
        ScalarValue::Int8(Some(x)) => Some(x.to_string()),
        ScalarValue::Int16(Some(x)) => Some(x.to_string()),
        ScalarValue::Int32(Some(x)) => Some(x.to_string()),
        ScalarValue::Int64(Some(x)) => Some(x.to_string()),
        ScalarValue::UInt8(Some(x)) => Some(x.to_string()),
        ScalarValue::UInt16(Some(x)) => Some(x.to_string()),
        ScalarValue::UInt32(Some(x)) => Some(x.to_string()),
        ScalarValue::UInt64(Some(x)) => Some(x.to_string()),
        ScalarValue::Float64(Some(x)) if x.is_finite() => Some(format!("{x:?}")),
        _ => None,
    }
}

/// A condition as SQL, when SQLite evaluates it exactly as DataFusion would.
fn condition(e: &Expr, schema: &SchemaRef) -> Option<String> {
    let column = |e: &Expr| match e {
        Expr::Column(c) if schema.field_with_name(&c.name).is_ok() => Some(quote(&c.name)),
        _ => None,
    };
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let sql_op = match op {
                Operator::Eq => "=",
                Operator::NotEq => "<>",
                Operator::Lt => "<",
                Operator::LtEq => "<=",
                Operator::Gt => ">",
                Operator::GtEq => ">=",
                Operator::And => {
                    return Some(format!(
                        "({} AND {})",
                        condition(left, schema)?,
                        condition(right, schema)?
                    ));
                }
                Operator::Or => {
                    return Some(format!(
                        "({} OR {})",
                        condition(left, schema)?,
                        condition(right, schema)?
                    ));
                }
                _ => return None,
            };
            match (left.as_ref(), right.as_ref()) {
                (l, Expr::Literal(v, _)) => {
                    Some(format!("{} {sql_op} {}", column(l)?, literal(v)?))
                }
                _ => None,
            }
        }
        Expr::InList(list) if !list.negated => {
            let values: Option<Vec<String>> = list
                .list
                .iter()
                .map(|v| match v {
                    Expr::Literal(v, _) => literal(v),
                    _ => None,
                })
                .collect();
            Some(format!(
                "{} IN ({})",
                column(&list.expr)?,
                values?.join(", ")
            ))
        }
        Expr::IsNull(inner) => Some(format!("{} IS NULL", column(inner)?)),
        Expr::IsNotNull(inner) => Some(format!("{} IS NOT NULL", column(inner)?)),
        _ => None,
    }
}

#[async_trait]
impl TableProvider for SqliteTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match condition(f, &self.schema) {
                Some(_) => TableProviderFilterPushDown::Exact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => Arc::clone(&self.schema),
        };
        let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let conditions: Vec<String> = filters
            .iter()
            .filter_map(|f| condition(f, &self.schema))
            .collect();
        let sql = self.sql(&columns, &conditions, limit);
        let batch = self
            .read(&sql, &schema)
            .map_err(|e| DataFusionError::External(e.into()))?;
        Ok(Arc::new(StreamExec::batches(
            format!("SQLite: {sql} ({} rows)", batch.num_rows()),
            schema,
            vec![batch],
        )))
    }
}

fn construct(context: &Context) -> std::result::Result<Arc<dyn TableProvider>, String> {
    Ok(Arc::new(SqliteTable::open(context)?))
}

tally_plugin_api::export_native_plugin!("sqlite", construct);

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::{col, lit};

    #[test]
    fn conditions_sqlite_runs_exactly() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("grp", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let sql = |e: Expr| condition(&e, &schema);
        assert_eq!(
            sql(col("grp").eq(lit("a'b"))).as_deref(),
            Some("\"grp\" = 'a''b'")
        );
        assert_eq!(
            sql(col("grp").in_list(vec![lit("x"), lit("y")], false)).as_deref(),
            Some("\"grp\" IN ('x', 'y')")
        );
        assert_eq!(
            sql(col("n").gt_eq(lit(3i64))).as_deref(),
            Some("\"n\" >= 3")
        );
        assert_eq!(sql(col("n").is_null()).as_deref(), Some("\"n\" IS NULL"));
        assert_eq!(
            sql(col("n").gt(lit(1i64)).and(col("grp").eq(lit("a")))).as_deref(),
            Some("(\"n\" > 1 AND \"grp\" = 'a')")
        );
        assert_eq!(sql(col("grp").like(lit("a%"))), None);
        assert_eq!(sql(col("other").eq(lit(1i64))), None);
        assert_eq!(sql(col("grp").in_list(vec![lit("x")], true)), None);
    }
}
