//! Talking to the publisher: the HTTPS agent (certificates always checked, `--ca-cert` adding
//! trust), GETs whose every redirect hop is checked, and network failures told apart.

use std::sync::Arc;
use std::time::Duration;

use url::Url;

use super::model::FetchOptions;
use super::origins::Hosts;
use crate::error::IngestError;

/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;

pub(super) fn agent(options: &FetchOptions) -> Result<ureq::Agent, IngestError> {
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
                        return Err(IngestError::fetch(
                            format!("--ca-cert {}: not a PEM file ({e})", path.display()),
                            "give the certificate authority as PEM (-----BEGIN CERTIFICATE-----)",
                        ));
                    }
                }
            }
            if found == 0 {
                return Err(IngestError::fetch(
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
    IngestError::fetch(format!("fetching {url} failed: {e}"), hint)
}

/// GETs `url`, following redirects by hand so that each hop is checked.
pub(super) fn get(
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
                return Err(IngestError::fetch(
                    format!("{current} answered {status} without a Location"),
                    "try again later",
                ));
            };
            let next = current.join(location).map_err(|e| {
                IngestError::fetch(
                    format!("{current} redirects to {location:?}, which is not a URL ({e})"),
                    "try again later",
                )
            })?;
            current = next;
            continue;
        }
        return Ok((current, resp));
    }
    Err(IngestError::fetch(
        format!("{url} redirects more than {MAX_REDIRECTS} times"),
        "check source.url in dataset.yaml",
    ))
}

pub(super) fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}
