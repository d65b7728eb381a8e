//! The local files `data_file` names (one file, a glob, or a folder of partitions), what is
//! said when they are missing or not Parquet, and the record `tally add` leaves in a footer.

use std::path::Path;

use tally_plugin_parquet::set::{self, FileSet};

use crate::problem::{Problem, Refusal};

pub(super) fn refusal(reason: String, fix: &str, maybe_incomplete: bool) -> Refusal {
    Refusal {
        problems: vec![Problem {
            line: None,
            key: "data_file".into(),
            reason,
            fix: fix.into(),
        }],
        maybe_incomplete,
        data_gone: false,
    }
}

/// The files `data_file` names: one file, or the set a pattern or folder names.
pub(super) fn files_of(folder: &Path, data_file: &str) -> Result<FileSet, Refusal> {
    if !set::is_pattern(data_file) && !folder.join(data_file).is_dir() {
        if !folder.join(data_file).is_file() {
            // The definition may have been copied before its data; a publisher's file beside
            // it is a file to convert.
            if let Some(other) = convertible_beside(folder) {
                return Err(refusal(
                    format!(
                        "the data file `{data_file}` is not in the dataset folder, which holds `{other}`"
                    ),
                    &format!(
                        "the built-in backend reads Parquet: convert `{other}` with `tally add {} <datasets>/{}/{other}`, which writes `{data_file}` and keeps this dataset.yaml",
                        folder_name(folder),
                        folder_name(folder)
                    ),
                    true,
                ));
            }
            return Err(refusal(
                format!("the data file `{data_file}` is not in the dataset folder"),
                "put the Parquet file there, or name it with `data_file:` (a file, a glob such as `data/*.parquet`, or a folder of partitions such as `data/`)",
                true,
            ));
        }
        if let Some(kind) = convertible_kind(Path::new(data_file))
            && !starts_with_parquet_magic(&folder.join(data_file))
        {
            return Err(refusal(
                format!("`{data_file}` is a {kind} file, not Parquet"),
                &format!(
                    "the built-in backend reads Parquet: convert it with `tally add {} <datasets>/{}/{data_file}`, which writes data.parquet and keeps this dataset.yaml, then set `data_file: data.parquet` (or remove data_file)",
                    folder_name(folder),
                    folder_name(folder)
                ),
                false,
            ));
        }
        return Ok(FileSet {
            keys: Vec::new(),
            parts: vec![set::Part {
                relative: data_file.to_string(),
                values: Vec::new(),
            }],
        });
    }
    set::expand(folder, data_file).map_err(|e| {
        let empty = matches!(e, set::SetError::Empty(_));
        refusal(
            e.to_string(),
            if empty {
                "put the Parquet files there, or fix the pattern (`*` matches within a name, `**` any folders)"
            } else {
                "name the files of one table: a narrower pattern, or one partition layout for all"
            },
            // Files may still be on their way.
            empty,
        )
    })
}

/// `converted by tally add 0.1.0 on … from 20250729_….xlsx (xlsx, sheet 手続一覧, 2 header
/// rows, sha256:…) into data.parquet`, from the record `tally add` leaves in the footer.
/// Anything that does not read as such a record says nothing (the file's writer is not
/// trusted to be Tally: the words are built only from the fields, each shown as text).
pub(super) fn ingest_origin(record: &str, relative: &str) -> Option<String> {
    if record.len() > 4096 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(record).ok()?;
    let text = |k: &str| {
        v.get(k).and_then(|x| x.as_str()).map(|s| {
            s.chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect::<String>()
        })
    };
    let file = text("file")?;
    let mut how = vec![text("format").unwrap_or_default()];
    if let Some(e) = text("encoding") {
        how.push(e);
    }
    if let Some(sheet) = text("sheet") {
        how.push(format!("sheet {sheet}"));
    }
    if let Some(n) = v.get("header_rows").and_then(|x| x.as_u64()) {
        how.push(format!("{n} header row{}", if n == 1 { "" } else { "s" }));
    }
    if let Some(h) = text("sha256") {
        how.push(h);
    }
    how.retain(|s| !s.is_empty());
    Some(format!(
        "`{relative}` was converted from {file} ({}) by tally add {}{}",
        how.join(", "),
        text("version").unwrap_or_default(),
        text("converted_at")
            .map(|t| format!(" at {t}"))
            .unwrap_or_default()
    ))
}

/// The kind of a file `tally add` converts, by its extension.
fn convertible_kind(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "csv" => "CSV",
        "tsv" | "tab" => "TSV",
        "txt" => "text",
        "xlsx" | "xlsm" => "Excel workbook",
        "xls" => "Excel 97-2003 workbook",
        "jsonl" | "ndjson" => "JSON Lines",
        "json" => "JSON",
        _ => return None,
    })
}

fn starts_with_parquet_magic(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"PAR1"
}

/// A file beside the definition that `tally add` would convert, if there is one.
fn convertible_beside(folder: &Path) -> Option<String> {
    let mut found: Vec<String> = std::fs::read_dir(folder)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && convertible_kind(Path::new(n)).is_some())
        .collect();
    found.sort();
    found.into_iter().next()
}

fn folder_name(folder: &Path) -> String {
    folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
