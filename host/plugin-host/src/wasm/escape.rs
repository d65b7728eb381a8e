//! What a plugin returns, escaped as it enters the host: every text a description or a scan
//! carries, not the rows themselves.

use std::borrow::Cow;

use tally_storage::text::{Lines, escape_controls};

use super::bindings::{Column, Description, FilterCapability, ScanResult, Source};

/// What a plugin call returns, with every text in it escaped ([`escape_controls`]) as it
/// enters the host: names, descriptions, notes, sources and the files it reports. The rows
/// themselves (the Arrow stream) are data, served as the plugin read them, like a Parquet
/// file's cells.
pub(super) trait FromPlugin {
    fn escaped(self) -> Self;
}

fn escaped(text: String) -> String {
    match escape_controls(&text, Lines::Escaped) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

impl FromPlugin for Description {
    fn escaped(self) -> Description {
        Description {
            name: escaped(self.name),
            version: escaped(self.version),
            summary: escaped(self.summary),
            columns: self
                .columns
                .into_iter()
                .map(|c| Column {
                    name: escaped(c.name),
                    data_type: c.data_type,
                    description: c.description.map(escaped),
                })
                .collect(),
            filters: self
                .filters
                .into_iter()
                .map(|f| FilterCapability {
                    column: escaped(f.column),
                    ops: f.ops,
                })
                .collect(),
        }
    }
}

impl FromPlugin for ScanResult {
    fn escaped(self) -> ScanResult {
        ScanResult {
            ipc: self.ipc,
            sources: self
                .sources
                .into_iter()
                .map(|s| Source {
                    uri: escaped(s.uri),
                    title: escaped(s.title),
                    publisher: s.publisher.map(escaped),
                    source_type: escaped(s.source_type),
                    locator: s.locator.map(escaped),
                    published_at: s.published_at.map(escaped),
                    effective_at: s.effective_at.map(escaped),
                    file: s.file.map(escaped),
                })
                .collect(),
            row_sources: self.row_sources,
            files: self.files.into_iter().map(escaped).collect(),
            notes: self.notes.into_iter().map(escaped).collect(),
        }
    }
}
