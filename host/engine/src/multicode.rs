//! Fields declared with one value per cell whose cells hold several of their codes.
//!
//! A published definition may declare a coded field single-valued while some of its cells
//! list several codes (`1 撤廃・省略済; 3 撤廃・省略不可`): three fields of the real survey do.
//! Matched as declared, `["3 撤廃・省略不可"]` would silently leave those cells out. Tally sees
//! it in the data: such a cell is one whose `;`-separated, trimmed parts are each a code of the
//! field's codelist (at least two). Exact matches count it for each code it holds (see
//! `values::match_data`), and `inspect_dataset` and `tally check` say so, with how to declare
//! the field.

use tally_semantic::DatasetDef;
use tally_semantic::definition::{Codelist, FieldId};

use crate::error::EngineError;
use tally_storage::dataset::Prepared;

/// The separator such cells use (the default of `multi_value`).
pub const SEPARATOR: char = ';';

/// The cells of a field that hold several of its codes.
#[derive(Debug, Clone, Default)]
pub struct MultiCodeCells {
    /// Each cell as it is written, the records holding it, and its codes.
    pub cells: Vec<(String, usize, Vec<String>)>,
}

impl MultiCodeCells {
    pub fn records(&self) -> usize {
        self.cells.iter().map(|(_, n, _)| n).sum()
    }

    /// The cells that hold `code`.
    pub fn holding<'a>(
        &'a self,
        code: &'a str,
    ) -> impl Iterator<Item = &'a (String, usize, Vec<String>)> {
        self.cells
            .iter()
            .filter(move |(_, _, codes)| codes.iter().any(|c| c == code))
    }

    /// What to tell whoever reads the dataset: how many records, an example, and the fix.
    pub fn warning(&self, field: &str) -> String {
        let example = self
            .cells
            .first()
            .map(|(cell, _, _)| format!(" (e.g. `{cell}`)"))
            .unwrap_or_default();
        format!(
            "field `{field}` is declared with one value per cell, but {} records hold several of its codes in one cell{example}; exact matches count such a cell for each code it holds. Declare `multi_value: true` for `{field}` in dataset.yaml so each part is matched and grouped on its own",
            self.records()
        )
    }
}

/// The cells of `field` that hold several of its codes, if it is a single-valued field with a
/// static codelist and any such cell exists.
pub async fn find(
    ctx: &datafusion::prelude::SessionContext,
    prepared: &Prepared,
    def: &DatasetDef,
    field: FieldId,
) -> Result<Option<MultiCodeCells>, EngineError> {
    let f = &def.fields[field];
    if f.is_multi_value() || !matches!(f.codelist, Some(Codelist::Static(_))) {
        return Ok(None);
    }
    let codes = f.static_codes().unwrap_or(&[]);
    let is_code = |part: &str| codes.iter().any(|c| c.value == part);
    let mut found = MultiCodeCells::default();
    for (value, count) in prepared.distinct_values(ctx, def, field).await?.iter() {
        if !value.contains(SEPARATOR) || is_code(value) {
            continue;
        }
        let parts: Vec<String> = value
            .split(SEPARATOR)
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        if parts.len() >= 2 && parts.iter().all(|p| is_code(p)) {
            found.cells.push((value.clone(), *count, parts));
        }
    }
    Ok((!found.cells.is_empty()).then_some(found))
}
