//! Law texts: e-Gov law XML (法令標準XML) as a dataset, one row per paragraph and one per
//! item, each citing its law and provision.
//!
//! Reads every `.xml` file of its folder, either a bare `<Law>` root (as e-Gov's bulk
//! download writes it, named `<LawId>_<YYYYMMDD>_<amending law id>.xml`) or the e-Gov API
//! v1 wrapper `DataRoot/ApplData/LawFullText/Law`. The law id comes from the XML
//! (`ApplData/LawId`) when it is there, else from the file name; the revision (its id
//! `<YYYYMMDD>_<amending law id>` and date) from the file name when it follows e-Gov's
//! pattern. The `law_id_from` column says which was used. `law_abbrev` holds the short
//! titles e-Gov gives the law (`LawTitle`'s `Abbrev`, e.g. 不正アクセス禁止法), and `law_num`
//! its law number: a definition declares them as `aliases` of `law_title`, so a call may name
//! a law by either (docs/laws.md).
//!
//! Several revisions of one law may sit side by side. Unless the host pushes down a
//! condition on `revision_id` or `revision_date` (or the config says `revisions: all`), only
//! the latest revision of each law is returned, so nothing is counted twice.
//!
//! Config (all optional): `folder` (relative to the dataset folder, default the folder
//! itself), `revisions` (`latest`, the default, or `all`).

use tally_plugin_api::guest::{
    Cell, Column, Config, Description, Request, Rows, Source, SourcePlugin,
};
use tally_plugin_api::locator;

pub mod xml;

/// The plugin.
#[derive(Debug)]
pub struct Laws;

const PUBLISHER: &str = "e-Gov法令検索 (デジタル庁)";

impl SourcePlugin for Laws {
    fn describe(config: &Config) -> Result<Description, String> {
        settings(config)?;
        Ok(Description::new(
            "law",
            env!("CARGO_PKG_VERSION"),
            "e-Gov law XML, one row per paragraph and per item",
        )
        .column(Column::text("unit", "paragraph or item"))
        .column(Column::text("law_id", "e-Gov law id, e.g. 405AC0000000088"))
        .column(Column::text(
            "law_num",
            "The law number, e.g. 平成五年法律第八十八号",
        ))
        .column(Column::text(
            "law_title",
            "The law's title, e.g. 行政手続法",
        ))
        .column(Column::text(
            "law_abbrev",
            "The law's short titles as e-Gov gives them (LawTitle's Abbrev), separated by commas, e.g. マイナンバー法,個人番号法,番号法; empty when the file gives none",
        ))
        .column(Column::text(
            "revision_id",
            "e-Gov revision id <YYYYMMDD>_<amending law id>, when known",
        ))
        .column(Column::text(
            "revision_date",
            "The revision's date (YYYY-MM-DD), when known",
        ))
        .column(Column::text(
            "law_id_from",
            "Where the law id was read: xml or file name",
        ))
        .column(Column::text("provision", "main or supplementary (附則)"))
        .column(Column::text(
            "chapter",
            "The chapter title, e.g. 第二章　申請に対する処分",
        ))
        .column(Column::text(
            "section",
            "The section (節) title, when there is one",
        ))
        .column(Column::text(
            "article",
            "The article, e.g. 第三十六条の二 (附則第三条 in a supplementary provision)",
        ))
        .column(Column::text(
            "article_caption",
            "The article's caption, e.g. （目的等）",
        ))
        .column(Column::integer("paragraph", "The paragraph number"))
        .column(Column::text("item", "The item, e.g. 第二号 (items only)"))
        .column(Column::text(
            "locator",
            "The provision, e.g. 第九条第一項第二号",
        ))
        .column(Column::text("text", "The text of the paragraph or item"))
        .column(Column::text(
            "file",
            "The XML file, relative to the law folder",
        ))
        .filterable("law_id")
        .filterable("law_title")
        .filterable("article")
        .filterable("revision_id")
        .filterable("revision_date"))
    }

    fn scan(request: &Request, rows: &mut Rows) -> Result<(), String> {
        let (folder, all_revisions) = settings(&request.config)?;
        let mut names: Vec<String> = std::fs::read_dir(&folder)
            .map_err(|e| format!("could not list the law folder `{folder}`: {e}"))?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".xml") && !n.starts_with('.'))
            .collect();
        names.sort();

        // Every file's identity first: which revisions exist decides which are read.
        let mut laws: Vec<(String, String, xml::Identity)> = Vec::new();
        for name in &names {
            let path = join(&folder, name);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("could not read `{path}`: {e}"))?;
            let identity = xml::identity(name, &text).map_err(|e| format!("`{name}`: {e}"))?;
            laws.push((name.clone(), path, identity));
        }
        let pick_revision = all_revisions
            || request.filters_on("revision_id")
            || request.filters_on("revision_date");
        for (name, path, id) in &laws {
            if !request.admits("law_id", &id.law_id) {
                continue;
            }
            let revision_ok = request
                .admits("revision_id", id.revision_id.as_deref().unwrap_or(""))
                && request.admits("revision_date", id.revision_date.as_deref().unwrap_or(""));
            if pick_revision && !revision_ok {
                continue;
            }
            if !pick_revision && !is_latest(id, laws.iter().map(|(_, _, i)| i)) {
                continue;
            }
            if rows.is_full() {
                break;
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("could not read `{path}`: {e}"))?;
            rows.read_file(path);
            let law = xml::parse(&text).map_err(|e| format!("`{name}`: {e}"))?;
            if !request.admits("law_title", &law.title) {
                continue;
            }
            if id.law_id_from == "file name" {
                rows.note(format!(
                    "the law id of `{name}` ({}) was read from its file name; the XML does not state it",
                    id.law_id
                ));
            }
            if id.revision_id.is_none() {
                rows.note(format!(
                    "`{name}` does not say which revision of {} it holds (its file name does not follow <LawId>_<YYYYMMDD>_<amending law id>.xml); its rows have no revision",
                    law.title
                ));
            }
            let uri = match &id.revision_id {
                Some(r) => format!("https://laws.e-gov.go.jp/law/{}/{r}", id.law_id),
                None => format!("https://laws.e-gov.go.jp/law/{}", id.law_id),
            };
            for unit in &law.units {
                if rows.is_full() {
                    break;
                }
                if !request.admits("article", unit.article.as_deref().unwrap_or("")) {
                    continue;
                }
                let mut source = Source::new(uri.clone(), law.title.clone(), "law");
                source.publisher = Some(PUBLISHER.to_string());
                source.locator = Some(unit.locator.clone());
                source.effective_at = id.revision_date.clone();
                source.published_at = law.promulgated.clone();
                source.file = Some(path.clone());
                rows.push(
                    vec![
                        Cell::text(unit.kind),
                        Cell::text(id.law_id.clone()),
                        Cell::opt_text(law.number.clone()),
                        Cell::text(law.title.clone()),
                        Cell::opt_text((!law.abbrevs.is_empty()).then(|| law.abbrevs.join(","))),
                        Cell::opt_text(id.revision_id.clone()),
                        Cell::opt_text(id.revision_date.clone()),
                        Cell::text(id.law_id_from),
                        Cell::text(if unit.supplementary {
                            "supplementary"
                        } else {
                            "main"
                        }),
                        Cell::opt_text(unit.chapter.clone()),
                        Cell::opt_text(unit.section.clone()),
                        Cell::opt_text(unit.article.clone()),
                        Cell::opt_text(unit.caption.clone()),
                        Cell::opt_integer(unit.paragraph.map(|p| p as i64)),
                        Cell::opt_text(unit.item.clone()),
                        Cell::text(unit.locator.clone()),
                        Cell::text(unit.text.clone()),
                        Cell::text(name.clone()),
                    ],
                    Some(source),
                )?;
            }
        }
        Ok(())
    }
}

/// Whether `id` is the latest revision of its law among `all` (an unknown date is older than
/// any known one; of equal dates the last file wins).
fn is_latest<'a>(id: &xml::Identity, all: impl Iterator<Item = &'a xml::Identity>) -> bool {
    let mut best: Option<&xml::Identity> = None;
    for other in all.filter(|o| o.law_id == id.law_id) {
        if best.is_none_or(|b| other.revision_date >= b.revision_date) {
            best = Some(other);
        }
    }
    best.is_some_and(|b| std::ptr::eq(b, id))
}

fn settings(config: &Config) -> Result<(String, bool), String> {
    let folder = match config.get("folder") {
        None => ".".to_string(),
        Some(v) => v
            .as_str()
            .ok_or_else(|| {
                format!(
                    "config `folder` must be a text (a folder inside the dataset folder), not {v}"
                )
            })?
            .trim_matches('/')
            .to_string(),
    };
    if folder.split('/').any(|p| p == "..") {
        return Err(format!(
            "config `folder` is `{folder}`, which leaves the dataset folder; name a folder inside it"
        ));
    }
    let all = match config.get("revisions") {
        None => false,
        Some(v) => match v.as_str() {
            Some("latest") => false,
            Some("all") => true,
            _ => {
                return Err(format!(
                    "config `revisions` is {v}; use \"latest\" (one revision per law, the default) or \"all\""
                ));
            }
        },
    };
    Ok((
        if folder.is_empty() {
            ".".to_string()
        } else {
            folder
        },
        all,
    ))
}

fn join(folder: &str, name: &str) -> String {
    if folder == "." {
        name.to_string()
    } else {
        format!("{folder}/{name}")
    }
}

/// Re-exported for the host's tests of locator forms.
pub use locator::normalize_references;

tally_plugin_api::export_source_plugin!(Laws);
