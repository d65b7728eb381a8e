//! The origins (https, host and port) a fetch may talk to: the page's own and those allowed
//! with `--allow-host`, checked at every hop.

use url::Url;

use crate::error::IngestError;

/// An origin a fetch may talk to: a host and a port, the scheme being https. A redirect to
/// the page's own host on another port is another server (another origin, as a browser
/// would say), so the port is compared too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    host: String,
    port: u16,
}

impl Origin {
    pub(super) fn of(url: &Url) -> Option<Origin> {
        Some(Origin {
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
        })
    }

    /// An `--allow-host` entry: `host` (port 443, https's own), `host:port`, or an
    /// `https://host[:port]` URL whose path is its root.
    pub(super) fn allowed(entry: &str) -> Result<Origin, IngestError> {
        let entry = entry.trim();
        let bad = |why: &str| {
            IngestError::fetch(
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
pub(super) struct Hosts {
    pub(super) allowed: Vec<Origin>,
}

impl Hosts {
    pub(super) fn check(&self, url: &Url, what: &str) -> Result<(), IngestError> {
        if url.scheme() != "https" {
            return Err(IngestError::fetch(
                format!(
                    "refused {what} {url}: only https is fetched (a plain http connection can be altered on the way)"
                ),
                "ask the publisher for an https link, or download the file yourself and use tally add",
            ));
        }
        let Some(origin) = Origin::of(url) else {
            return Err(IngestError::fetch(
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
        Err(IngestError::fetch(
            message,
            format!(
                "if {} is the publisher's own file server, allow it with --allow-host {}",
                origin.text(),
                origin.flag()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
