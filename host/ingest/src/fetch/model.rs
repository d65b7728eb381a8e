//! What `tally fetch` is asked to do, the record it keeps beside the data (`.fetch.json`),
//! and what it says it did.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::add::{AddOptions, Summary};

#[derive(Debug, Clone)]
pub struct FetchOptions {
    pub dataset_id: String,
    pub datasets: PathBuf,
    /// Origins allowed besides the page's own (for files kept on a CDN): `host` (port 443),
    /// `host:port`, or `https://host[:port]`.
    pub allow_hosts: Vec<String>,
    pub max_bytes: u64,
    /// PEM files of certificate authorities to trust instead of the public ones.
    pub ca_certs: Vec<PathBuf>,
    /// Time one request (page or file) may take in all.
    pub timeout: Duration,
    /// How the downloaded file is converted.
    pub add: AddOptions,
    /// Download and convert even when the file is the one already served.
    pub force: bool,
}

/// `.fetch.json`: where the served data came from. `fetched_at` and `fetched_from` are the
/// keys the public administrative-procedures server writes; the rest say more.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FetchRecord {
    pub fetched_at: String,
    pub fetched_from: String,
    #[serde(rename = "retrievedAt")]
    pub retrieved_at: String,
    #[serde(rename = "pageUrl", skip_serializing_if = "Option::is_none")]
    pub page_url: Option<String>,
    #[serde(rename = "assetUrl")]
    pub asset_url: String,
    pub sha256: String,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(rename = "lastModified", skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    #[serde(rename = "contentType", skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(rename = "tallyVersion")]
    pub tally_version: String,
    /// SHA-256 of the `dataset.yaml` the file was converted with: an edited definition means
    /// converting again, even when the publisher's file is unchanged.
    #[serde(
        rename = "definitionSha256",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub definition_sha256: Option<String>,
}

/// What `tally fetch` did: printed as JSON on stdout.
#[derive(Debug, Clone, Serialize)]
pub struct FetchSummary {
    pub dataset_id: String,
    /// `updated`, or `unchanged` (the publisher answered 304, or sent the same bytes).
    pub status: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_url: Option<String>,
    pub asset_url: String,
    /// Links on the page that matched `asset_pattern`.
    pub candidates: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<FetchRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added: Option<Summary>,
}
