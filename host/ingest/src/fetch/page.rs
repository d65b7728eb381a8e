//! The file found on the publisher's page: its links read, those matching
//! `source.asset_pattern` kept, and the newest of them chosen by the date in its name.

use std::io::Read;
use std::path::Path;

use url::Url;

use super::client::{get, header};
use super::model::{FetchRecord, FetchSummary};
use super::origins::Hosts;
use crate::add::Summary;
use crate::error::IngestError;

/// Cap on the publisher's page.
const MAX_PAGE_BYTES: u64 = 8 * 1024 * 1024;

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
                return Err(IngestError::fetch(
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
                _ => Err(IngestError::fetch(
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
    Err(IngestError::fetch(
        "no link matches source.asset_pattern",
        "update asset_pattern in dataset.yaml to the file's name on the publisher's page",
    ))
}

/// The file to download, and where it was found.
pub(super) struct Found {
    /// The page the file was found on (after redirects), when it was looked for on one.
    pub(super) page_url: Option<String>,
    pub(super) asset: Url,
    /// Links on the page that matched `asset_pattern` (the URL itself when none is given).
    pub(super) candidates: Vec<String>,
}

impl Found {
    /// What the fetch of this file did.
    pub(super) fn summary(
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
pub(super) fn find_on_page(
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
        return Err(IngestError::fetch(
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
        return Err(IngestError::fetch(
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
            IngestError::fetch(
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
