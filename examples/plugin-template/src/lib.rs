//! A Tally wasm source plugin to copy from: every `.txt` file of the dataset folder, one row
//! per non-empty line, each row citing its file and line.
//!
//! `tally plugin new NAME` writes a project from this file; then `tally plugin build` makes
//! the component (`NAME.wasm`, release, wasm32-wasip2) and `tally plugin test . --dataset
//! example` runs it through the sandbox on the example folder, checked. Copy the `.wasm`
//! into a dataset folder and point its dataset.yaml at it:
//!
//! ```yaml
//! backend:
//!   kind: wasm
//!   component: NAME.wasm
//!   config: { publisher: "Example Org" }
//! fields:
//!   - { name: path, role: dim, desc: "The file" }
//!   - { name: line, role: attr, data_type: integer, desc: "The line number, from 1" }
//!   - { name: text, role: attr, desc: "The line" }
//! ```
//!
//! The project's README.md is the guide: the contract, the sandbox and its limits, provenance.
//!
//! The plugin sees only its dataset folder (read-only, at `/`); it has no network and no
//! environment. What it writes to stderr is shown when it fails.

use tally_plugin_api::guest::{
    Cell, Column, Config, Description, Request, Rows, Source, SourcePlugin,
};

struct Lines;

impl SourcePlugin for Lines {
    fn describe(_config: &Config) -> Result<Description, String> {
        Ok(Description::new(
            "template",
            env!("CARGO_PKG_VERSION"),
            "Text files, one row per line",
        )
        .column(Column::text(
            "path",
            "The file, relative to the dataset folder",
        ))
        .column(Column::integer("line", "The line number, from 1"))
        .column(Column::text("text", "The line, trimmed"))
        // The plugin skips files itself when the host asks for some paths only.
        .filterable("path"))
    }

    fn scan(request: &Request, rows: &mut Rows) -> Result<(), String> {
        let publisher = request.config.str("publisher").map(str::to_string);
        let mut names: Vec<String> = std::fs::read_dir(".")
            .map_err(|e| format!("could not list the dataset folder: {e}"))?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".txt"))
            .collect();
        names.sort();
        for name in names {
            if !request.admits("path", &name) {
                continue;
            }
            let text = std::fs::read_to_string(&name)
                .map_err(|e| format!("could not read `{name}`: {e}"))?;
            rows.read_file(&name);
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                if rows.is_full() {
                    return Ok(());
                }
                let mut source = Source::new(
                    format!("urn:tally:document:{}/{name}", request.dataset),
                    name.clone(),
                    "document",
                );
                source.publisher = publisher.clone();
                source.locator = Some(format!("{name}:{}", i + 1));
                source.file = Some(name.clone());
                rows.push(
                    vec![
                        Cell::text(name.clone()),
                        Cell::Integer(i as i64 + 1),
                        Cell::text(line),
                    ],
                    Some(source),
                )?;
            }
        }
        Ok(())
    }
}

tally_plugin_api::export_source_plugin!(Lines);
