//! With a definition: each declared field's column found in the header (by `csv_col_index`
//! or by name), and every difference between the file and the definition.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use tally_semantic::DatasetDef;

use super::header::Header;
use crate::error::{self, IngestError};
use crate::folder::DEFINITION_FILE;
use crate::input::Input;
use crate::values::Kind;
use crate::write::OutColumn;

/// With a definition: each declared field's column, found by `csv_col_index` or by name, and
/// every difference between the file and the definition.
pub(super) fn map_definition(
    input: &Input,
    header: &Header,
    def: &DatasetDef,
    accept_drift: bool,
    warnings: &mut Vec<String>,
) -> Result<Vec<OutColumn>, IngestError> {
    let names = &header.names;
    let index = HeaderIndex::new(input, names);
    let mut differences = Vec::new();
    let mut used = vec![false; names.len()];
    let mut columns = Vec::new();
    for f in &def.fields {
        let source = index.locate(f, &mut differences);
        if let Some(s) = source {
            used[s] = true;
            if names[s] != f.name {
                warnings.push(format!(
                    "{}: the file heads it {:?} (read as the same name)",
                    f.name, names[s]
                ));
            }
        } else if accept_drift {
            warnings.push(format!(
                "{}: not in the file; written as an empty column (--accept-drift)",
                f.name
            ));
        }
        columns.push(OutColumn {
            name: f.name.clone(),
            kind: Kind::from_definition(f.data_type),
            source,
            dictionary: f.role != tally_semantic::definition::Role::Id,
            bloom: def.id_field.as_deref() == Some(f.name.as_str()),
        });
    }
    index.add_undeclared(
        &used,
        accept_drift,
        &mut columns,
        &mut differences,
        warnings,
    );
    if !differences.is_empty() && !accept_drift {
        return Err(IngestError::Drift {
            file: input.path.clone(),
            definition: PathBuf::from(format!("{}/{DEFINITION_FILE}", def.id)),
            differences,
        });
    }
    Ok(columns)
}

/// The header's columns, looked up by name as written and as normalised, and placed as a
/// person finds them in the file.
struct HeaderIndex<'a> {
    input: &'a Input,
    names: &'a [String],
    /// Each column's name, normalised.
    normalized: Vec<String>,
    by_exact: HashMap<&'a str, Vec<usize>>,
    by_norm: HashMap<String, Vec<usize>>,
}

impl<'a> HeaderIndex<'a> {
    /// Indexes the header's names.
    fn new(input: &'a Input, names: &'a [String]) -> HeaderIndex<'a> {
        let norm = |s: &str| tally_semantic::names::normalize(s);
        // Every name's columns, as written and normalised, looked up once per field: a search
        // of the header for each of thousands of fields would be quadratic.
        let mut by_exact: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut by_norm: HashMap<String, Vec<usize>> = HashMap::new();
        let normalized: Vec<String> = names.iter().map(|n| norm(n)).collect();
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() {
                continue;
            }
            by_exact.entry(n.as_str()).or_default().push(i);
            by_norm.entry(normalized[i].clone()).or_default().push(i);
        }
        HeaderIndex {
            input,
            names,
            normalized,
            by_exact,
            by_norm,
        }
    }

    /// The columns named `name`: exactly so, else once normalised.
    fn find(&self, name: &str) -> Vec<usize> {
        if let Some(exact) = self.by_exact.get(name) {
            return exact.clone();
        }
        self.by_norm
            .get(&tally_semantic::names::normalize(name))
            .cloned()
            .unwrap_or_default()
    }

    /// A column as a person finds it: by letter in a sheet, by number otherwise.
    fn place(&self, i: usize) -> String {
        if self.input.format.is_sheet() {
            format!("column {}", error::column_letters(i))
        } else {
            format!("column {}", i + 1)
        }
    }

    /// The column a declared field is read from: at its `csv_col_index` when that column
    /// bears its name, else the one column of its name; a mismatch is noted in `differences`.
    fn locate(
        &self,
        f: &tally_semantic::definition::Field,
        differences: &mut Vec<String>,
    ) -> Option<usize> {
        let names = self.names;
        let by_name = self.find(&f.name);
        let field_norm = tally_semantic::names::normalize(&f.name);
        match f.csv_col_index.map(|i| i as usize) {
            Some(i)
                if i < names.len() && (names[i] == f.name || self.normalized[i] == field_norm) =>
            {
                Some(i)
            }
            Some(i) => {
                let at = if i < names.len() {
                    format!("{} is headed {:?}", self.place(i), names[i])
                } else {
                    format!("the file has only {} columns", names.len())
                };
                match by_name.as_slice() {
                    [k] => {
                        differences.push(format!(
                            "{}: declared at csv_col_index {i}, but {at}; {:?} is {} now",
                            f.name,
                            f.name,
                            self.place(*k)
                        ));
                        Some(*k)
                    }
                    _ => {
                        differences.push(format!(
                            "{}: declared at csv_col_index {i}, but {at}, and no column is named {:?}",
                            f.name, f.name
                        ));
                        None
                    }
                }
            }
            None => match by_name.as_slice() {
                [k] => Some(*k),
                [] => {
                    differences.push(format!(
                        "{}: a declared field, but no column of the file is named so",
                        f.name
                    ));
                    None
                }
                many => {
                    differences.push(format!(
                        "{}: {} columns are named so ({}); give the field a csv_col_index",
                        f.name,
                        many.len(),
                        many.iter()
                            .map(|k| self.place(*k))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    None
                }
            },
        }
    }

    /// Notes each named column no field was read from as a difference; with
    /// `--accept-drift`, keeps it in the data as text unless its name is taken.
    fn add_undeclared(
        &self,
        used: &[bool],
        accept_drift: bool,
        columns: &mut Vec<OutColumn>,
        differences: &mut Vec<String>,
        warnings: &mut Vec<String>,
    ) {
        let mut written: HashSet<String> = columns
            .iter()
            .map(|c| tally_semantic::names::normalize(&c.name))
            .collect();
        for (i, n) in self.names.iter().enumerate() {
            if used[i] || n.is_empty() {
                continue;
            }
            differences.push(format!(
                "{} {n:?} is in the file but not declared in dataset.yaml",
                self.place(i)
            ));
            let taken = !written.insert(self.normalized[i].clone());
            if accept_drift && taken {
                warnings.push(format!(
                    "{} {n:?}: not declared, and its name is taken by a column written; left out",
                    self.place(i)
                ));
            } else if accept_drift {
                warnings.push(format!(
                    "{n}: not declared; kept in the data as text (not served until it is declared)"
                ));
                columns.push(OutColumn {
                    name: n.clone(),
                    kind: Kind::Text,
                    source: Some(i),
                    dictionary: true,
                    bloom: false,
                });
            }
        }
    }
}
