//! `tally fetch`: the publisher's current file, found on its page, downloaded safely and
//! converted through [`add`](crate::add), with a record of where and when it came from.
//!
//! What is refused, and why: plain `http` anywhere (page, file, any redirect hop) — a
//! dataset's provenance is only as good as the connection it came over; origins (host and
//! port) other than the page's own and those allowed with `--allow-host`, checked at every
//! redirect hop; more
//! bytes than `--max-bytes`; a body shorter than its `Content-Length`; a file that is not
//! what its name says (an HTML error page served as `.xlsx`). Certificates are always
//! checked — `--ca-cert` adds trust for a private CA; nothing turns checking off. Nothing
//! served is touched until the download is complete, verified and converted.
//!
//! The phases, each in its module: the page read and the file chosen on it (`page`), over
//! connections to allowed origins only (`origins`, `client`), what is served now compared
//! (`served`), and the file downloaded, verified and converted (`download`).

mod client;
mod download;
mod model;
mod origins;
mod page;
mod served;

use std::path::PathBuf;

use url::Url;

use crate::add::Progress;
use crate::error::IngestError;
use crate::folder::{DEFINITION_FILE, Staging, check_id, read_definition, remove_stale_staging};
use client::{agent, get, header};
use download::{check_answer, convert_and_record, download_to, safe_file_name, verify_kind};
use origins::{Hosts, Origin};
use page::{Found, find_on_page};
use served::{Served, conditional_headers, served_now};

/// The record of a fetch, beside the data.
pub use crate::folder::FETCH_RECORD;
pub use model::{FetchOptions, FetchRecord, FetchSummary};
pub use page::{choose, date_in_name, file_name, links};

/// Default cap on a download.
pub const DEFAULT_MAX_BYTES: u64 = 200 * 1000 * 1000;

/// Fetches the dataset's current file from its publisher and converts it.
pub fn fetch(options: &FetchOptions, progress: &dyn Progress) -> Result<FetchSummary, IngestError> {
    let id = &options.dataset_id;
    let Setup {
        folder,
        def,
        page,
        hosts,
        agent,
    } = set_up(options)?;

    // The file: found on the page by its pattern, or the URL itself when no pattern is given.
    let found = match &def.source.asset_pattern {
        Some(pattern) => find_on_page(&agent, &hosts, &page, pattern, &def)?,
        None => Found {
            page_url: None,
            asset: page.clone(),
            candidates: vec![page.to_string()],
        },
    };
    let asset = found.asset.clone();

    // Download, conditionally when the data served was converted, with this definition, from
    // the same file fetched from the same link.
    let Served {
        definition_sha256,
        current,
        previous,
    } = served_now(options, &folder, &def, &asset);
    let conditional = conditional_headers(previous.as_ref());
    let (final_asset, mut resp) = get(&agent, &hosts, &asset, "the file", &conditional)?;
    let status = resp.status().as_u16();
    if status == 304 {
        let message = format!(
            "{} is unchanged since it was fetched at {} (HTTP 304); nothing was changed",
            file_name(&asset),
            previous
                .as_ref()
                .map(|p| p.retrieved_at.as_str())
                .unwrap_or("?")
        );
        return Ok(found.summary(id, "unchanged", message, previous, None));
    }
    let length = resp.body().content_length();
    check_answer(&final_asset, status, length, options.max_bytes)?;
    let etag = header(&resp, "etag");
    let last_modified = header(&resp, "last-modified");
    let content_type = header(&resp, "content-type");
    let name = file_name(&asset);
    let staging = Staging::new(&options.datasets, &format!("fetch-{id}"))?;
    let download = staging.dir.join(safe_file_name(&name));
    let (size, sha256) = download_to(
        &download,
        &mut resp,
        &final_asset,
        length,
        options.max_bytes,
        progress,
    )?;
    verify_kind(&download, &name, content_type.as_deref())?;
    let retrieved_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let record = FetchRecord {
        fetched_at: retrieved_at.clone(),
        fetched_from: asset.to_string(),
        retrieved_at,
        page_url: found.page_url.clone(),
        asset_url: asset.to_string(),
        sha256: sha256.clone(),
        size,
        etag,
        last_modified,
        content_type,
        tally_version: env!("CARGO_PKG_VERSION").to_string(),
        definition_sha256,
    };
    let unchanged_bytes = current.as_ref().is_some_and(|r| r.sha256 == sha256);
    if unchanged_bytes {
        let message =
            format!("{name} has the same bytes ({sha256}) as the data served; nothing was changed");
        return Ok(found.summary(id, "unchanged", message, current, None));
    }

    let added = convert_and_record(options, &staging, &download, &folder, &record, progress)?;
    drop(staging);
    let message = format!(
        "{name} ({size} bytes) downloaded, converted to {} rows, and recorded in {FETCH_RECORD}",
        added.rows
    );
    Ok(found.summary(id, "updated", message, Some(record), Some(added)))
}

/// What a fetch works from: the dataset's folder and definition, the publisher's page, and
/// how it may be reached.
struct Setup {
    folder: PathBuf,
    def: tally_semantic::DatasetDef,
    /// `source.url`.
    page: Url,
    hosts: Hosts,
    agent: ureq::Agent,
}

/// Reads the dataset's definition and its page, and sets up the origins that may be talked
/// to and the agent that talks to them.
fn set_up(options: &FetchOptions) -> Result<Setup, IngestError> {
    let id = &options.dataset_id;
    check_id(id)?;
    remove_stale_staging(&options.datasets);
    let folder = options.datasets.join(id);
    let def = read_definition(&folder, id)?.ok_or_else(|| {
        IngestError::dataset(
            format!("{} has no {DEFINITION_FILE}", folder.display()),
            "write one with source.url (the publisher's page) and source.asset_pattern (a regular expression for the file's name), or start with tally add on a downloaded copy",
        )
    })?;
    let Some(page_text) = def.source.url.clone() else {
        return Err(IngestError::dataset(
            format!("{id}/{DEFINITION_FILE} has no source.url to fetch from"),
            "add source.url (the publisher's page) and source.asset_pattern (a regular expression for the file's name)",
        ));
    };
    let page = Url::parse(&page_text).map_err(|e| {
        IngestError::dataset(
            format!("source.url {page_text:?} is not a URL ({e})"),
            "give the publisher's page as https://host/path",
        )
    })?;
    let mut allowed: Vec<Origin> = Origin::of(&page).into_iter().collect();
    for entry in &options.allow_hosts {
        allowed.push(Origin::allowed(entry)?);
    }
    let hosts = Hosts { allowed };
    let agent = agent(options)?;
    Ok(Setup {
        folder,
        def,
        page,
        hosts,
        agent,
    })
}
