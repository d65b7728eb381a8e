//! Documents: a folder of Markdown files as a dataset, one row per section.
//!
//! A section is the text under a heading up to the next heading of any level; the text
//! before a document's first heading is a section of level 0. Each row cites its document
//! with a locator `path#heading`. Config (all optional):
//! - `folder`: the folder to read, relative to the dataset folder (default: the dataset
//!   folder itself; files directly in it and in subfolders, `dataset.yaml` aside);
//! - `base_url`: where the documents are published; a row's `uri` is `base_url` + path.
//!   Without it the `uri` is `urn:tally:document:<dataset>/<path>`;
//! - `publisher`: who publishes the documents.

use tally_plugin_api::guest::{
    Cell, Column, Config, Description, Request, Rows, Source, SourcePlugin,
};

pub mod markdown;

use markdown::Section;

/// The plugin.
#[derive(Debug)]
pub struct Documents;

impl SourcePlugin for Documents {
    fn describe(config: &Config) -> Result<Description, String> {
        folder(config)?;
        Ok(Description::new(
            "documents",
            env!("CARGO_PKG_VERSION"),
            "Markdown files, one row per section",
        )
        .column(Column::text(
            "path",
            "The Markdown file, relative to the documents folder",
        ))
        .column(Column::text(
            "document_title",
            "The document's title: its first level-1 heading, else its file name",
        ))
        .column(Column::text(
            "heading_path",
            "The headings from the document's top down to this section, joined with ' > '",
        ))
        .column(Column::text(
            "heading",
            "This section's heading (empty for the text before the first heading)",
        ))
        .column(Column::integer(
            "heading_level",
            "1-6 for a heading, 0 for the text before the first heading",
        ))
        .column(Column::text(
            "text",
            "The section's own text, without its subsections",
        ))
        .column(Column::integer(
            "section_index",
            "The section's position in its document, from 0",
        ))
        .filterable("path"))
    }

    fn scan(request: &Request, rows: &mut Rows) -> Result<(), String> {
        let root = folder(&request.config)?;
        let base_url = request.config.str("base_url");
        let publisher = request.config.str("publisher").map(str::to_string);
        let mut files = Vec::new();
        list_markdown(&root, "", &mut files)?;
        files.sort();
        for path in files {
            if rows.is_full() {
                break;
            }
            if !request.admits("path", &path) {
                continue;
            }
            let full = join(&root, &path);
            let bytes =
                std::fs::read(&full).map_err(|e| format!("could not read `{full}`: {e}"))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| format!("`{full}` is not UTF-8 text; convert it to UTF-8"))?;
            rows.read_file(&full);
            let doc = markdown::sections(&text);
            let title = doc.title.clone().unwrap_or_else(|| file_stem(&path));
            let uri = match base_url {
                Some(base) => format!("{}{}", base, path),
                None => format!("urn:tally:document:{}/{}", request.dataset, path),
            };
            for (
                index,
                Section {
                    heading_path,
                    heading,
                    level,
                    text,
                },
            ) in doc.sections.into_iter().enumerate()
            {
                let mut source = Source::new(uri.clone(), title.clone(), "document");
                source.publisher = publisher.clone();
                source.locator = Some(if heading.is_empty() {
                    path.clone()
                } else {
                    format!("{path}#{heading}")
                });
                source.file = Some(full.clone());
                rows.push(
                    vec![
                        Cell::text(path.clone()),
                        Cell::text(title.clone()),
                        Cell::text(heading_path.join(" > ")),
                        Cell::text(heading),
                        Cell::Integer(level as i64),
                        Cell::text(text),
                        Cell::Integer(index as i64),
                    ],
                    Some(source),
                )?;
            }
        }
        Ok(())
    }
}

/// The documents folder, relative to the dataset folder (`.` for the folder itself).
fn folder(config: &Config) -> Result<String, String> {
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
            "config `folder` is `{folder}`, which leaves the dataset folder; name a folder inside it, e.g. `docs`"
        ));
    }
    Ok(if folder.is_empty() {
        ".".to_string()
    } else {
        folder
    })
}

fn join(root: &str, path: &str) -> String {
    if root == "." {
        path.to_string()
    } else {
        format!("{root}/{path}")
    }
}

fn file_stem(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_suffix(".md")
        .or_else(|| name.strip_suffix(".markdown"))
        .unwrap_or(name)
        .to_string()
}

/// Markdown files under `root/relative`, as paths relative to `root`, hidden entries skipped.
fn list_markdown(root: &str, relative: &str, out: &mut Vec<String>) -> Result<(), String> {
    let dir = if relative.is_empty() {
        root.to_string()
    } else {
        join(root, relative)
    };
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("could not list the folder `{dir}`: {e}"))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("could not list the folder `{dir}`: {e}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = if relative.is_empty() {
            name.clone()
        } else {
            format!("{relative}/{name}")
        };
        let kind = entry
            .file_type()
            .map_err(|e| format!("could not read `{path}`: {e}"))?;
        if kind.is_dir() {
            list_markdown(root, &path, out)?;
        } else if kind.is_file() && (name.ends_with(".md") || name.ends_with(".markdown")) {
            out.push(path);
        }
    }
    Ok(())
}

tally_plugin_api::export_source_plugin!(Documents);
