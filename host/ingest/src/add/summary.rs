//! What `tally add` did, printed as JSON on stdout: the input as read, and each column
//! written with its type, role and empty cells.

use std::path::PathBuf;

use serde::Serialize;
use tally_semantic::DatasetDef;

use super::guess::Skeleton;
use crate::infer;
use crate::write::OutColumn;

/// What `tally add` did: printed as JSON on stdout.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub dataset_id: String,
    /// The Parquet file written.
    pub data_file: PathBuf,
    /// `kept` (the folder's definition was used), `updated` (used, with the answers this
    /// run gave recorded in it: `recorded`) or `written` (a skeleton).
    pub definition: &'static str,
    pub definition_file: PathBuf,
    /// What this run's answers changed in the definition (`--null-marker` given for a
    /// question the skeleton asked: the marker, the field's type and role, its TODO lines).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<String>,
    pub input: InputSummary,
    pub rows: u64,
    pub columns: Vec<ColumnSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_field: Option<String>,
    pub warnings: Vec<String>,
    /// Things only a person can answer (candidate null markers), also in the skeleton.
    pub questions: Vec<String>,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct InputSummary {
    pub file: String,
    pub format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding_detection: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sheet: Option<String>,
    pub header_rows: u32,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ColumnSummary {
    pub name: String,
    pub data_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// The input column it was read from (0-based), none when the file lacks it.
    pub from_column: Option<usize>,
    pub nulls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codes: Option<usize>,
}

/// Each column written, for the summary: its type and role (guessed or declared) and how
/// many of its cells are empty.
pub(super) fn column_summaries(
    columns: &[OutColumn],
    skeleton: Option<&Skeleton>,
    def: Option<&DatasetDef>,
    nulls: &[u64],
) -> Vec<ColumnSummary> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let guess = skeleton.map(|sk| &sk.guesses[i]);
            let declared = def.and_then(|d| d.field(&c.name));
            ColumnSummary {
                name: c.name.clone(),
                data_type: c.kind.data_type(),
                role: guess
                    .map(|g| g.role)
                    .or_else(|| declared.map(|f| f.role.as_str())),
                from_column: c.source,
                nulls: nulls[i],
                multi_value: guess
                    .and_then(|g| g.multi_value.clone())
                    .or_else(|| declared.and_then(|f| f.multi_value.clone())),
                codes: guess.and_then(|g| match &g.codelist {
                    Some(infer::Codelist::Static(c)) => Some(c.len()),
                    _ => None,
                }),
            }
        })
        .collect()
}
