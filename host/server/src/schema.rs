//! `tally schema`: the JSON Schema of `dataset.yaml` on stdout, for editors (the YAML
//! language server of VS Code and others, JetBrains IDEs) to complete and check definitions
//! as they are written. The schema is generated from the reader's own key tables
//! (`tally_semantic::definition::json_schema`); the repository publishes the same text as
//! `schemas/dataset.schema.json`. Reads no datasets directory.

use std::io::Write;
use std::process::ExitCode;

use crate::exit;

/// Prints the schema.
pub fn run() -> ExitCode {
    match print(&mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tally schema: cannot write the schema: {e}");
            ExitCode::from(exit::FAILED)
        }
    }
}

fn print(out: &mut impl Write) -> std::io::Result<()> {
    out.write_all(tally_semantic::definition::schema_text().as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the command prints is the published file, byte for byte.
    #[test]
    fn tally_schema_prints_the_published_file() {
        let mut printed = Vec::new();
        print(&mut printed).expect("printed");
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(tally_semantic::definition::SCHEMA_FILE);
        let published = std::fs::read(&file).expect("the published schema");
        assert!(
            printed == published,
            "{} differs from `tally schema`: regenerate it with `cargo run -p tally -- schema > {}`",
            tally_semantic::definition::SCHEMA_FILE,
            tally_semantic::definition::SCHEMA_FILE
        );
    }
}
