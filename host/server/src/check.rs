//! `tally check DIR`: validates the definitions of a datasets directory.

use std::path::Path;
use std::process::ExitCode;

use tally_semantic::definition::{Diagnostic, load_definition};

/// Exit code when a dataset cannot be served.
const EXIT_INVALID: u8 = 1;
/// Exit code when the directory itself cannot be read.
const EXIT_UNREADABLE: u8 = 2;

pub fn run(dir: &Path, allow_native: bool) -> ExitCode {
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
        let (valid, diagnostics): (bool, Vec<Diagnostic>) =
            match load_definition(&label, &folder_id, &text) {
                Ok(loaded) => (true, loaded.warnings),
                Err(err) => (false, err.diagnostics),
            };
        for d in &diagnostics {
            println!("{d}");
        }
        if !valid {
            broken += 1;
            continue;
        }
        // The definition must also fit its data: registration reads the data's metadata and
        // checks every declared field against it, exactly as the server does.
        match tally_engine::catalog::register(
            &folder,
            &folder_id,
            &label,
            &tally_engine::catalog::Options {
                allow_native,
                ..Default::default()
            },
        ) {
            Ok(_) => {
                ok += 1;
                println!("{label}: ok");
            }
            Err(refusal) => {
                broken += 1;
                for p in refusal.problems {
                    let line = p.line.map(|l| format!("{l}:")).unwrap_or_default();
                    let key = if p.key.is_empty() {
                        String::new()
                    } else {
                        format!(" at `{}`", p.key)
                    };
                    let fix = if p.fix.is_empty() {
                        String::new()
                    } else {
                        format!(" Fix: {}", p.fix)
                    };
                    println!("{label}:{line} error{key}: {}{fix}", p.reason);
                }
            }
        }
    }
    println!("{ok} dataset(s) valid, {broken} invalid");
    if broken > 0 {
        ExitCode::from(EXIT_INVALID)
    } else {
        ExitCode::SUCCESS
    }
}
