//! Conditions on partition columns: which files they leave, and how the rows read are said
//! when they left some unread.

use datafusion::arrow::datatypes::DataType;
use tally_semantic::names::fold;

use super::register::{ParquetBackend, Part};
use crate::backend::{Pushed, ServedFile, Test};

impl ParquetBackend {
    /// Whether a file's partition values can satisfy every condition on a partition column.
    pub(super) fn selected(&self, part: &Part, pushed: &[Pushed]) -> bool {
        pushed.iter().all(|p| {
            let Some(k) = self.keys.iter().position(|k| k.name == p.column) else {
                return true;
            };
            let Some(value) = &part.values[k] else {
                // A null partition value matches no equality and no range.
                return false;
            };
            match &p.test {
                Test::Range(bound) => match (&self.keys[k].data_type, value.parse::<f64>()) {
                    (DataType::Int64, Ok(v)) => bound.holds(v),
                    // Text partition values are not compared as numbers: nothing is pruned.
                    _ => true,
                },
                Test::Equals(values) => values.iter().any(|wanted| match self.keys[k].data_type {
                    DataType::Int64 => match (value.parse::<f64>(), wanted.parse::<f64>()) {
                        (Ok(a), Ok(b)) => a == b,
                        _ => true,
                    },
                    // The engine matches text equal under NFKC (and says so); fold both sides
                    // so no file it would match is left unread.
                    _ => fold(wanted) == fold(value),
                }),
            }
        })
    }

    /// How the rows were read when conditions left files unread: which files, and why.
    pub(super) fn pruned(&self, files: &[ServedFile], pushed: &[Pushed]) -> Option<String> {
        let skipped = self.parts.len() - files.len();
        (skipped > 0).then(|| {
            format!(
                "the Parquet backend from {} of the {} files of `{}` ({}; the other {skipped} were not read: their partition values do not satisfy {})",
                files.len(),
                self.parts.len(),
                self.data_file,
                files
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                pushed
                    .iter()
                    .filter(|p| self.keys.iter().any(|k| k.name == p.column))
                    .map(Pushed::describe)
                    .collect::<Vec<_>>()
                    .join(" and ")
            )
        })
    }
}
