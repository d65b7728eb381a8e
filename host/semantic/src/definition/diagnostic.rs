//! What the reader found: each problem with the file, the line, the key path and a fix.

use std::fmt;

use serde::Serialize;

use super::types::DatasetDef;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in a dataset definition, with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// The key path, e.g. `fields[12].codelist` (empty for the document itself).
    pub path: String,
    pub message: String,
    pub fix: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{}:{}:{}: {severity}", self.file, self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, " at `{}`", self.path)?;
        }
        write!(f, ": {}", self.message)?;
        if !self.fix.is_empty() {
            write!(f, " Fix: {}", self.fix)?;
        }
        Ok(())
    }
}

/// A definition that cannot be served, with every error found (and the warnings beside them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.diagnostics))]
pub struct DefinitionError {
    pub diagnostics: Vec<Diagnostic>,
    /// The text is not a YAML document at all (it does not parse, or is empty): a file cut
    /// off mid-write looks like this, so a watcher retries before reporting it.
    pub unparsed: bool,
}

impl DefinitionError {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }
}

pub(super) fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A definition that can be served, and the warnings found while reading it.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub dataset: DatasetDef,
    pub warnings: Vec<Diagnostic>,
}
