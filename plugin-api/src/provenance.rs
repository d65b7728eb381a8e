//! Where a value came from: the kinds of source a result may cite.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The kind of a source, as it appears in `provenance.sources[].sourceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceType {
    /// Data served by an official API.
    OfficialApi,
    /// A file or page published on an official web site.
    OfficialPage,
    /// A law text (an article, paragraph or item).
    Law,
    /// A data set (the default for a dataset folder).
    Dataset,
    /// A document (a section of a report, a guideline).
    Document,
}

impl SourceType {
    pub const ALL: [SourceType; 5] = [
        SourceType::OfficialApi,
        SourceType::OfficialPage,
        SourceType::Law,
        SourceType::Dataset,
        SourceType::Document,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceType::OfficialApi => "official-api",
            SourceType::OfficialPage => "official-page",
            SourceType::Law => "law",
            SourceType::Dataset => "dataset",
            SourceType::Document => "document",
        }
    }

    pub fn parse(s: &str) -> Option<SourceType> {
        SourceType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for SourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
