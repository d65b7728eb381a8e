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

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::Digest;
use url::Url;

use crate::add::{AddOptions, Progress, Summary};
use crate::error::IngestError;
use crate::folder::{
    DEFINITION_FILE, Staging, check_id, read_definition, remove_stale_staging, rename, write_synced,
};

/// The record of a fetch, beside the data.
pub use crate::folder::FETCH_RECORD;
/// Default cap on a download.
pub const DEFAULT_MAX_BYTES: u64 = 200 * 1000 * 1000;
/// Cap on the publisher's page.
const MAX_PAGE_BYTES: u64 = 8 * 1024 * 1024;
/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;

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

fn refused(message: impl Into<String>, hint: impl Into<String>) -> IngestError {
    IngestError::fetch(message, hint)
}

/// An origin a fetch may talk to: a host and a port, the scheme being https. A redirect to
/// the page's own host on another port is another server (another origin, as a browser
/// would say), so the port is compared too.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    host: String,
    port: u16,
}

impl Origin {
    fn of(url: &Url) -> Option<Origin> {
        Some(Origin {
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
        })
    }

    /// An `--allow-host` entry: `host` (port 443, https's own), `host:port`, or an
    /// `https://host[:port]` URL whose path is its root.
    fn allowed(entry: &str) -> Result<Origin, IngestError> {
        let entry = entry.trim();
        let bad = |why: &str| {
            refused(
                format!("--allow-host {entry:?}: {why}"),
                "give a host (cdn.example.go.jp, meaning port 443) or a host and port (cdn.example.go.jp:8443)",
            )
        };
        let url = if entry.contains("://") {
            Url::parse(entry).map_err(|e| bad(&e.to_string()))?
        } else if entry.contains(['/', '@', '?', '#']) || entry.is_empty() {
            return Err(bad("not a host name"));
        } else {
            Url::parse(&format!("https://{entry}/")).map_err(|e| bad(&e.to_string()))?
        };
        if url.scheme() != "https" {
            return Err(bad("only https is fetched"));
        }
        if url.path() != "/" || url.query().is_some() || !url.username().is_empty() {
            return Err(bad("a host allows every file on it; give no path"));
        }
        Origin::of(&url).ok_or_else(|| bad("not a host name"))
    }

    fn text(&self) -> String {
        if self.port == 443 {
            format!("https://{}", self.host)
        } else {
            format!("https://{}:{}", self.host, self.port)
        }
    }

    /// As `--allow-host` takes it.
    fn flag(&self) -> String {
        if self.port == 443 {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The origins a fetch may talk to: the page's own, and each `--allow-host`.
#[derive(Debug)]
struct Hosts {
    allowed: Vec<Origin>,
}

impl Hosts {
    fn check(&self, url: &Url, what: &str) -> Result<(), IngestError> {
        if url.scheme() != "https" {
            return Err(refused(
                format!(
                    "refused {what} {url}: only https is fetched (a plain http connection can be altered on the way)"
                ),
                "ask the publisher for an https link, or download the file yourself and use tally add",
            ));
        }
        let Some(origin) = Origin::of(url) else {
            return Err(refused(
                format!("refused {what} {url}: it names no host"),
                "check source.url in dataset.yaml",
            ));
        };
        if self.allowed.contains(&origin) {
            return Ok(());
        }
        let allowed = self
            .allowed
            .iter()
            .map(Origin::text)
            .collect::<Vec<_>>()
            .join(", ");
        let message = if self.allowed.iter().any(|o| o.host == origin.host) {
            format!(
                "refused {what} {url}: {} is another server than the page's and those allowed ({allowed}): the same host on another port is another origin",
                origin.text()
            )
        } else {
            format!(
                "refused {what} {url}: the host {} is not the page's host, nor allowed with --allow-host ({allowed})",
                origin.host
            )
        };
        Err(refused(
            message,
            format!(
                "if {} is the publisher's own file server, allow it with --allow-host {}",
                origin.text(),
                origin.flag()
            ),
        ))
    }
}

fn agent(options: &FetchOptions) -> Result<ureq::Agent, IngestError> {
    let mut tls = ureq::tls::TlsConfig::builder();
    if !options.ca_certs.is_empty() {
        let mut certs = Vec::new();
        for path in &options.ca_certs {
            let pem = std::fs::read(path).map_err(|e| {
                IngestError::io(format!("cannot read --ca-cert {}", path.display()), e)
            })?;
            let mut found = 0;
            for item in ureq::tls::parse_pem(&pem) {
                match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => {
                        certs.push(c);
                        found += 1;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        return Err(refused(
                            format!("--ca-cert {}: not a PEM file ({e})", path.display()),
                            "give the certificate authority as PEM (-----BEGIN CERTIFICATE-----)",
                        ));
                    }
                }
            }
            if found == 0 {
                return Err(refused(
                    format!("--ca-cert {}: holds no certificate", path.display()),
                    "give the certificate authority as PEM (-----BEGIN CERTIFICATE-----)",
                ));
            }
        }
        tls = tls.root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)));
    }
    let config = ureq::Agent::config_builder()
        .tls_config(tls.build())
        .https_only(false)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_global(Some(options.timeout))
        .timeout_connect(Some(Duration::from_secs(20)))
        .user_agent(format!("tally/{} (tally fetch)", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(ureq::Agent::new_with_config(config))
}

/// What to do about a publisher's certificate that could not be verified.
const CERTIFICATE_HINT: &str = "the publisher's certificate could not be verified against the public certificate authorities: if it is signed by a private one, give that authority's certificate (PEM) with --ca-cert FILE";

/// Whether an I/O error is a TLS certificate that could not be verified (ureq reports the
/// handshake's errors as I/O errors carrying rustls's).
fn is_certificate(io: &std::io::Error) -> bool {
    let mut inner: Option<&(dyn std::error::Error + 'static)> = io
        .get_ref()
        .map(|e| e as &(dyn std::error::Error + 'static));
    while let Some(e) = inner {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            // A certificate for another host name is not a matter of trust: source.url names
            // a host the certificate is not for.
            return match tls {
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. },
                ) => false,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
                    true
                }
                _ => false,
            };
        }
        inner = e.source();
    }
    false
}

fn network(url: &Url, e: ureq::Error) -> IngestError {
    let hint = match &e {
        ureq::Error::Timeout(_) => {
            "the publisher did not answer in time: try again later, or raise --timeout"
        }
        ureq::Error::HostNotFound => "check source.url in dataset.yaml and the network",
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) => CERTIFICATE_HINT,
        ureq::Error::Io(io) if is_certificate(io) => CERTIFICATE_HINT,
        _ => "check source.url in dataset.yaml and try again",
    };
    refused(format!("fetching {url} failed: {e}"), hint)
}

/// GETs `url`, following redirects by hand so that each hop is checked.
fn get(
    agent: &ureq::Agent,
    hosts: &Hosts,
    url: &Url,
    what: &str,
    headers: &[(&str, String)],
) -> Result<(Url, ureq::http::Response<ureq::Body>), IngestError> {
    let mut current = url.clone();
    for _ in 0..=MAX_REDIRECTS {
        hosts.check(&current, what)?;
        let mut req = agent.get(current.as_str());
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = req.call().map_err(|e| network(&current, e))?;
        let status = resp.status().as_u16();
        if (300..400).contains(&status) && status != 304 {
            let Some(location) = resp.headers().get("location").and_then(|v| v.to_str().ok())
            else {
                return Err(refused(
                    format!("{current} answered {status} without a Location"),
                    "try again later",
                ));
            };
            let next = current.join(location).map_err(|e| {
                refused(
                    format!("{current} redirects to {location:?}, which is not a URL ({e})"),
                    "try again later",
                )
            })?;
            current = next;
            continue;
        }
        return Ok((current, resp));
    }
    Err(refused(
        format!("{url} redirects more than {MAX_REDIRECTS} times"),
        "check source.url in dataset.yaml",
    ))
}

/// Links of an HTML page (`a`/`area` `href`, resolved against the page or its `<base>`).
pub fn links(html: &str, page: &Url) -> Vec<Url> {
    let mut base = page.clone();
    let mut out: Vec<Url> = Vec::new();
    for token in html5gum::Tokenizer::new(html) {
        let Ok(html5gum::Token::StartTag(tag)) = token else {
            continue;
        };
        let name = String::from_utf8_lossy(&tag.name).to_ascii_lowercase();
        let href = tag
            .attributes
            .iter()
            .find(|(k, _)| k.as_slice() == b"href")
            .map(|(_, v)| String::from_utf8_lossy(&v.value).trim().to_string());
        let Some(href) = href else { continue };
        match name.as_str() {
            "base" => {
                if let Ok(b) = page.join(&href) {
                    base = b;
                }
            }
            "a" | "area" => {
                if let Ok(u) = base.join(&href)
                    && matches!(u.scheme(), "http" | "https")
                    && !out.contains(&u)
                {
                    out.push(u);
                }
            }
            _ => {}
        }
    }
    out
}

/// The file name a URL ends in, percent-decoded.
pub fn file_name(url: &Url) -> String {
    let last = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or("");
    percent_encoding::percent_decode_str(last)
        .decode_utf8_lossy()
        .into_owned()
}

/// A date written in a file name (`20250729`, `2025-07-29`, `2025_07_29`), for choosing the
/// newest of several files.
pub fn date_in_name(name: &str) -> Option<(u32, u32, u32)> {
    let re = regex::Regex::new(
        r"(?:^|[^0-9])((?:19|20)[0-9]{2})[-_.]?([01][0-9])[-_.]?([0-3][0-9])(?:[^0-9]|$)",
    )
    .ok()?;
    let c = re.captures(name)?;
    let y = c[1].parse().ok()?;
    let m = c[2].parse().ok()?;
    let d = c[3].parse().ok()?;
    chrono::NaiveDate::from_ymd_opt(y as i32, m, d)?;
    Some((y, m, d))
}

/// The one link to download among those matching: the only one, else the newest by the date
/// in its name (ties: the format `csv_filename` names), else an error listing them.
pub fn choose(candidates: &[Url], hint_name: Option<&str>) -> Result<Url, IngestError> {
    match candidates {
        [] => unreachable_none(),
        [one] => Ok(one.clone()),
        many => {
            let dated: Vec<Option<(u32, u32, u32)>> =
                many.iter().map(|u| date_in_name(&file_name(u))).collect();
            let list = || {
                many.iter()
                    .map(|u| format!("  - {}", file_name(u)))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if dated.iter().any(Option::is_none) {
                return Err(refused(
                    format!(
                        "{} links match source.asset_pattern and not every name holds a date to pick the newest by:\n{}",
                        many.len(),
                        list()
                    ),
                    "make asset_pattern in dataset.yaml match only the file wanted",
                ));
            }
            let newest = dated.iter().flatten().max().copied();
            let mut best: Vec<&Url> = many
                .iter()
                .zip(&dated)
                .filter(|(_, d)| **d == newest)
                .map(|(u, _)| u)
                .collect();
            if best.len() > 1
                && let Some(ext) = hint_name
                    .and_then(|n| Path::new(n).extension())
                    .map(|e| e.to_string_lossy().to_ascii_lowercase())
            {
                let same: Vec<&Url> = best
                    .iter()
                    .copied()
                    .filter(|u| {
                        Path::new(&file_name(u))
                            .extension()
                            .is_some_and(|e| e.to_string_lossy().to_ascii_lowercase() == ext)
                    })
                    .collect();
                if !same.is_empty() {
                    best = same;
                }
            }
            match best.as_slice() {
                [one] => Ok((*one).clone()),
                _ => Err(refused(
                    format!(
                        "{} links match source.asset_pattern with the same newest date:\n{}",
                        best.len(),
                        best.iter()
                            .map(|u| format!("  - {}", file_name(u)))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ),
                    "make asset_pattern in dataset.yaml match only the file wanted (e.g. end it in \\.xlsx$)",
                )),
            }
        }
    }
}

fn unreachable_none() -> Result<Url, IngestError> {
    Err(refused(
        "no link matches source.asset_pattern",
        "update asset_pattern in dataset.yaml to the file's name on the publisher's page",
    ))
}

fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Checks that the downloaded bytes are what the file's name says.
fn verify_kind(path: &Path, name: &str, content_type: Option<&str>) -> Result<(), IngestError> {
    let mut head = [0u8; 512];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| IngestError::io("cannot read the downloaded file", e))?;
    let head = &head[..n];
    let html = crate::read::looks_like_html(head);
    let ext = Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let what = crate::read::describe_head(head);
    let ok = match ext.as_str() {
        // A compound file is an encrypted (or old) workbook: `add` says which.
        "xlsx" | "xlsm" => {
            head.starts_with(b"PK\x03\x04")
                || head.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1])
        }
        "parquet" => head.starts_with(b"PAR1"),
        _ => {
            !html && !content_type.is_some_and(|t| t.to_ascii_lowercase().starts_with("text/html"))
        }
    };
    if !ok {
        return Err(refused(
            format!(
                "the server sent {what}{} instead of the .{ext} file {name}; nothing was changed",
                content_type.map(|t| format!(" ({t})")).unwrap_or_default()
            ),
            "the publisher's link may be broken or need a login; open it in a browser, or download the file yourself and use tally add",
        ));
    }
    Ok(())
}

/// The SHA-256 of the file `tally add` converted the served data from (its footer record).
fn served_source_hash(data: &Path) -> Option<String> {
    let file = std::fs::File::open(data).ok()?;
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).ok()?;
    let kv = builder.metadata().file_metadata().key_value_metadata()?;
    let record = kv
        .iter()
        .find(|k| k.key == "tally.ingest")?
        .value
        .as_deref()?;
    let v: serde_json::Value = serde_json::from_str(record).ok()?;
    v.get("sha256")?.as_str().map(str::to_string)
}

fn sha256_text(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

fn read_record(folder: &Path) -> Option<FetchRecord> {
    // A fetch record is a few hundred bytes; the server reads it with the same cap.
    let text = tally_semantic::files::read_small(&folder.join(FETCH_RECORD), 64 * 1024).ok()?;
    serde_json::from_str(&text).ok()
}

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

/// The file to download, and where it was found.
struct Found {
    /// The page the file was found on (after redirects), when it was looked for on one.
    page_url: Option<String>,
    asset: Url,
    /// Links on the page that matched `asset_pattern` (the URL itself when none is given).
    candidates: Vec<String>,
}

impl Found {
    /// What the fetch of this file did.
    fn summary(
        self,
        id: &str,
        status: &'static str,
        message: String,
        record: Option<FetchRecord>,
        added: Option<Summary>,
    ) -> FetchSummary {
        FetchSummary {
            dataset_id: id.to_string(),
            status,
            message,
            page_url: self.page_url,
            asset_url: self.asset.to_string(),
            candidates: self.candidates,
            record,
            added,
        }
    }
}

/// Finds the file on the publisher's page: the links whose name (or URL) matches
/// `pattern`, and of those the one [`choose`] picks.
fn find_on_page(
    agent: &ureq::Agent,
    hosts: &Hosts,
    page: &Url,
    pattern: &str,
    def: &tally_semantic::DatasetDef,
) -> Result<Found, IngestError> {
    let re = regex::Regex::new(pattern).map_err(|e| {
        IngestError::dataset(
            format!("source.asset_pattern {pattern:?} is not a regular expression: {e}"),
            "write a regular expression for the file's name, e.g. _outline_02\\.(xlsx|csv)$",
        )
    })?;
    let (final_page, html) = read_page(agent, hosts, page)?;
    let all = links(&html, &final_page);
    let matching: Vec<Url> = all
        .iter()
        .filter(|u| re.is_match(&file_name(u)) || re.is_match(u.as_str()))
        .cloned()
        .collect();
    if matching.is_empty() {
        let shown: Vec<String> = all
            .iter()
            .take(15)
            .map(|u| format!("  - {}", file_name(u)))
            .collect();
        return Err(refused(
            format!(
                "no link on {final_page} matches source.asset_pattern {pattern:?}; the page links {} files{}\n{}",
                all.len(),
                if all.len() > 15 {
                    ", the first 15:"
                } else {
                    ":"
                },
                shown.join("\n")
            ),
            "the publisher may have renamed the file: update asset_pattern in dataset.yaml",
        ));
    }
    let chosen = choose(&matching, def.source.csv_filename.as_deref())?;
    Ok(Found {
        page_url: Some(final_page.to_string()),
        asset: chosen,
        candidates: matching.iter().map(Url::to_string).collect(),
    })
}

/// GETs the publisher's page and decodes it (in the charset its `Content-Type` names, else
/// UTF-8); returns where it was found after redirects, and its text.
fn read_page(agent: &ureq::Agent, hosts: &Hosts, page: &Url) -> Result<(Url, String), IngestError> {
    let (final_page, mut resp) = get(agent, hosts, page, "the page", &[])?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(refused(
            format!("the page {final_page} answered HTTP {status}"),
            "check source.url in dataset.yaml, or try again later",
        ));
    }
    let charset = header(&resp, "content-type").and_then(|t| {
        t.split("charset=")
            .nth(1)
            .map(|c| c.trim_matches(['"', ' ', ';']).to_string())
    });
    let mut body = Vec::new();
    resp.body_mut()
        .with_config()
        .limit(MAX_PAGE_BYTES)
        .reader()
        .read_to_end(&mut body)
        .map_err(|e| {
            refused(
                format!("reading the page {final_page} failed: {e}"),
                "try again later",
            )
        })?;
    let enc = charset
        .and_then(|c| encoding_rs::Encoding::for_label(c.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (html, _, _) = enc.decode(&body);
    let html = html.into_owned();
    Ok((final_page, html))
}

/// The data served now and where it came from.
struct Served {
    /// The SHA-256 of the folder's `dataset.yaml`.
    definition_sha256: Option<String>,
    /// The folder's fetch record, when the data served was converted from the file it
    /// records, with this definition (and `--force` is not given).
    current: Option<FetchRecord>,
    /// That record, when it is of the same link.
    previous: Option<FetchRecord>,
}

/// What is served now: the fetch record that still describes the data, if any.
fn served_now(
    options: &FetchOptions,
    folder: &Path,
    def: &tally_semantic::DatasetDef,
    asset: &Url,
) -> Served {
    let definition_sha256 = std::fs::read(folder.join(DEFINITION_FILE))
        .ok()
        .map(|b| sha256_text(&b));
    let served = served_source_hash(&folder.join(&def.data_file));
    let current = read_record(folder).filter(|r| {
        !options.force
            && served.as_deref() == Some(r.sha256.as_str())
            && r.definition_sha256 == definition_sha256
    });
    let previous = current.clone().filter(|r| r.asset_url == asset.as_str());
    Served {
        definition_sha256,
        current,
        previous,
    }
}

/// The headers that make the download conditional on the file having changed since the
/// previous fetch.
fn conditional_headers(previous: Option<&FetchRecord>) -> Vec<(&'static str, String)> {
    let mut conditional: Vec<(&str, String)> = Vec::new();
    if let Some(p) = previous {
        if let Some(e) = &p.etag {
            conditional.push(("If-None-Match", e.clone()));
        }
        if let Some(m) = &p.last_modified {
            conditional.push(("If-Modified-Since", m.clone()));
        }
    }
    conditional
}

/// Refuses an answer other than 200, and a file whose `Content-Length` is past `--max-bytes`.
fn check_answer(
    final_asset: &Url,
    status: u16,
    length: Option<u64>,
    max_bytes: u64,
) -> Result<(), IngestError> {
    if status != 200 {
        return Err(refused(
            format!("{final_asset} answered HTTP {status}; nothing was changed"),
            "try again later, or check the link on the publisher's page",
        ));
    }
    if let Some(n) = length
        && n > max_bytes
    {
        return Err(IngestError::limit(
            format!(
                "{final_asset} is {n} bytes, more than --max-bytes {max_bytes}; nothing was downloaded"
            ),
            "raise --max-bytes if the file is expected to be this large",
        ));
    }
    Ok(())
}

/// The file's name as it may be written in the staging folder: no separators or control
/// characters, and not hidden.
fn safe_file_name(name: &str) -> String {
    let safe_name: String = name
        .chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect();
    if safe_name.is_empty() || safe_name.starts_with('.') {
        format!("download{safe_name}")
    } else {
        safe_name
    }
}

/// Writes the body of `resp` to `download` (synced), stopping past `max_bytes`; refuses a
/// body shorter than its `Content-Length`. Returns its size and SHA-256.
fn download_to(
    download: &Path,
    resp: &mut ureq::http::Response<ureq::Body>,
    final_asset: &Url,
    length: Option<u64>,
    max_bytes: u64,
    progress: &dyn Progress,
) -> Result<(u64, String), IngestError> {
    let mut file = std::fs::File::create(download)
        .map_err(|e| IngestError::io(format!("cannot write {}", download.display()), e))?;
    let mut hasher = sha2::Sha256::new();
    let mut size: u64 = 0;
    progress.begin("downloading", length.unwrap_or(0));
    {
        let mut reader = resp
            .body_mut()
            .with_config()
            .limit(max_bytes.saturating_add(1))
            .reader();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = reader.read(&mut buf).map_err(|e| {
                let text = e.to_string();
                if text.contains("limit") || text.contains("exceeds") {
                    IngestError::limit(
                        format!("{final_asset} sends more than --max-bytes {max_bytes}; the download was stopped and nothing was changed"),
                        "raise --max-bytes if the file is expected to be this large",
                    )
                } else {
                    refused(
                        format!("the download of {final_asset} broke off after {size} bytes ({text}); nothing was changed"),
                        "try again later",
                    )
                }
            })?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > max_bytes {
                return Err(IngestError::limit(
                    format!(
                        "{final_asset} sends more than --max-bytes {max_bytes}; the download was stopped and nothing was changed"
                    ),
                    "raise --max-bytes if the file is expected to be this large",
                ));
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(|e| IngestError::io(format!("cannot write {}", download.display()), e))?;
            progress.update(0, size);
        }
    }
    progress.end();
    file.sync_all()
        .map_err(|e| IngestError::io(format!("cannot write {}", download.display()), e))?;
    drop(file);
    if let Some(n) = length
        && n != size
    {
        return Err(refused(
            format!(
                "the download of {final_asset} is truncated: {size} of {n} bytes arrived; nothing was changed"
            ),
            "try again later",
        ));
    }
    Ok((size, format!("sha256:{:x}", hasher.finalize())))
}

/// Converts the downloaded file through [`add`](crate::add), then writes the fetch record
/// beside the data.
fn convert_and_record(
    options: &FetchOptions,
    staging: &Staging,
    download: &Path,
    folder: &Path,
    record: &FetchRecord,
    progress: &dyn Progress,
) -> Result<Summary, IngestError> {
    // Convert, then record: the data is in place before the record that describes it.
    let mut add = options.add.clone();
    add.dataset_id = options.dataset_id.clone();
    add.datasets = options.datasets.clone();
    add.file = download.to_path_buf();
    add.keep_fetch_record = true;
    let added = crate::add::add(&add, progress)?;
    let text = serde_json::to_string_pretty(record)
        .map_err(|e| IngestError::io("cannot write the fetch record", std::io::Error::other(e)))?;
    let staged = staging.dir.join(FETCH_RECORD);
    write_synced(&staged, &format!("{text}\n"))?;
    rename(&staged, &folder.join(FETCH_RECORD))?;
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_resolve_relative_hrefs_and_base() {
        let page = Url::parse("https://www.example.go.jp/resources/survey/").unwrap();
        let html = r#"<html><body>
            <a href="/assets/20240701_survey_outline_02.xlsx">old</a>
            <a href='files/20250729_survey_outline_02.xlsx'>new</a>
            <A HREF="https://www.example.go.jp/a%20b.csv">x</A>
            <a href="mailto:x@example.org">mail</a>
            <a>no href</a>
        </body></html>"#;
        let found: Vec<String> = links(html, &page).iter().map(Url::to_string).collect();
        assert_eq!(
            found,
            vec![
                "https://www.example.go.jp/assets/20240701_survey_outline_02.xlsx",
                "https://www.example.go.jp/resources/survey/files/20250729_survey_outline_02.xlsx",
                "https://www.example.go.jp/a%20b.csv",
            ]
        );
        let based = links(
            r#"<base href="https://cdn.example.org/x/"><a href="f.csv">f</a>"#,
            &page,
        );
        assert_eq!(based[0].as_str(), "https://cdn.example.org/x/f.csv");
        assert_eq!(
            file_name(&Url::parse("https://h/a%E6%89%8B.csv").unwrap()),
            "a手.csv"
        );
    }

    #[test]
    fn a_redirect_to_another_port_of_the_page_host_is_another_origin() {
        let page = Url::parse("https://pub.example/data/").unwrap();
        let hosts = Hosts {
            allowed: Origin::of(&page).into_iter().collect(),
        };
        let u = |s: &str| Url::parse(s).unwrap();
        hosts
            .check(&u("https://pub.example/files/a.csv"), "the file")
            .expect("the page's own origin");
        hosts
            .check(&u("https://PUB.example:443/a.csv"), "the file")
            .expect("443 is https's own port, written or not");
        let e = hosts
            .check(&u("https://pub.example:8443/a.csv"), "the file")
            .unwrap_err();
        let text = format!("{e} | {}", e.hint().unwrap_or(""));
        assert!(
            text.contains("https://pub.example:8443 is another server than the page's")
                && text.contains("--allow-host pub.example:8443"),
            "{text}"
        );
        let with = Hosts {
            allowed: vec![
                Origin::of(&page).unwrap(),
                Origin::allowed("pub.example:8443").unwrap(),
                Origin::allowed("cdn.example").unwrap(),
            ],
        };
        with.check(&u("https://pub.example:8443/a.csv"), "the file")
            .expect("allowed by host and port");
        with.check(&u("https://cdn.example/a.csv"), "the file")
            .expect("a host without a port is port 443");
        assert!(
            with.check(&u("https://cdn.example:444/a.csv"), "the file")
                .is_err(),
            "an entry without a port allows port 443 only"
        );
        assert!(Origin::allowed("https://cdn.example:8443").is_ok());
        for bad in [
            "http://cdn.example",
            "cdn.example/path",
            "user@cdn.example",
            "",
        ] {
            assert!(Origin::allowed(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_newest_file_is_chosen_by_the_date_in_its_name() {
        let u = |s: &str| Url::parse(&format!("https://h/{s}")).unwrap();
        let c = vec![
            u("20240701_x_02.xlsx"),
            u("20250729_x_02.xlsx"),
            u("2023-01-05_x_02.xlsx"),
        ];
        assert_eq!(file_name(&choose(&c, None).unwrap()), "20250729_x_02.xlsx");
        let both = vec![u("20250729_x_02.xlsx"), u("20250729_x_02.csv")];
        assert!(choose(&both, None).is_err());
        assert_eq!(
            file_name(&choose(&both, Some("20240101_x_02.xlsx")).unwrap()),
            "20250729_x_02.xlsx"
        );
        let undated = vec![u("a.xlsx"), u("b.xlsx")];
        let e = choose(&undated, None).unwrap_err().to_string();
        assert!(e.contains("a.xlsx") && e.contains("b.xlsx"), "{e}");
    }
}
