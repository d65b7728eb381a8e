//! `tally check DIR`: validates the definitions of a datasets directory.

use std::path::Path;
use std::process::ExitCode;

use tally_semantic::definition::{Diagnostic, Severity, load_definition};

/// Exit code when a dataset cannot be served.
const EXIT_INVALID: u8 = 1;
/// Exit code when the directory itself cannot be read.
const EXIT_UNREADABLE: u8 = 2;

pub fn run(dir: &Path) -> ExitCode {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            eprintln!("tally check: cannot read {}: {e}", dir.display());
            return ExitCode::from(EXIT_UNREADABLE);
        }
    };
    let mut folders: Vec<_> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    folders.sort();
    let (mut ok, mut broken) = (0usize, 0usize);
    for folder in folders {
        let folder_id = folder
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let yaml = folder.join("dataset.yaml");
        let label = format!("{}/{folder_id}/dataset.yaml", dir.display());
        let text = match std::fs::read_to_string(&yaml) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                println!("{label}: error: cannot read the file: {e}");
                broken += 1;
                continue;
            }
        };
        let diagnostics: Vec<Diagnostic> = match load_definition(&label, &folder_id, &text) {
            Ok(loaded) => {
                ok += 1;
                loaded.warnings
            }
            Err(err) => {
                broken += 1;
                err.diagnostics
            }
        };
        for d in &diagnostics {
            println!("{d}");
        }
        if diagnostics.iter().all(|d| d.severity != Severity::Error) {
            println!("{label}: ok");
        }
    }
    println!("{ok} dataset(s) valid, {broken} invalid");
    if broken > 0 {
        ExitCode::from(EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    }
}
