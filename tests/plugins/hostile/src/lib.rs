//! Misbehaves as its dataset's `config.mode` says, to show that the sandbox holds:
//! - `ok`: three well-formed rows (the control);
//! - `slow`: the same rows after working for `config.millis` (default 1000) ms;
//! - `loop`: never returns from `scan`;
//! - `memory`: allocates without end;
//! - `trap`: panics after pushing a row (the component traps);
//! - `oversize`: returns `config.megabytes` (default 80) MiB of text;
//! - `escape`: tries to read files outside its dataset folder and returns what it got;
//! - `describe-loop`: never returns from `describe`;
//! - `bad-row-source`: the `ok` rows, but the last names a source that does not exist (the
//!   guest helper never does this: the mode bypasses it, as a plugin without it could);
//! - `wrong-type`: the `ok` rows, but `n` comes back as text though described as an integer;
//! - `late-error`: the first row, then (when the host asks for fewer than all the columns it
//!   describes, as every read of a dataset declaring only some of them does, and the
//!   registration's probe read does not) 40 KiB of debug lines on stderr ending with its
//!   reason, and an error: a plugin that passes its probe and fails on other reads.
//! - `controls`: the first row, then (on a read of fewer than all its columns, or always with
//!   `config.at_probe: true`) ESC, BEL and CR and a forged log line written to stderr and an
//!   error holding control characters, a forged log line and a bidirectional override: a
//!   plugin that tries to act on the terminal of whoever reads its messages, and to write
//!   lines into the server's log (its description's summary holds an ESC too).

use tally_plugin_api::guest::{
    Cell, Column, Config, Description, Request, Rows, Source, SourcePlugin,
};

struct Hostile;

fn mode(config: &Config) -> String {
    config.str("mode").unwrap_or("ok").to_string()
}

impl SourcePlugin for Hostile {
    fn describe(config: &Config) -> Result<Description, String> {
        if mode(config) == "describe-loop" {
            spin();
        }
        let summary = if mode(config) == "controls" {
            "Misbehaves on purpose \u{1b}[5mblinking\u{1b}[0m"
        } else {
            "Misbehaves on purpose"
        };
        Ok(Description::new("hostile", "0.0.0", summary)
            .column(Column::text("name", "A name"))
            .column(Column::integer("n", "A number"))
            .column(Column::text("payload", "Whatever the mode produces")))
    }

    fn scan(request: &Request, rows: &mut Rows) -> Result<(), String> {
        let source = |i: usize| {
            let mut s = Source::new(format!("urn:tally:test:hostile/{i}"), "hostile", "document");
            s.locator = Some(format!("row {i}"));
            s
        };
        match mode(&request.config).as_str() {
            "ok" => {
                for (i, name) in ["alpha", "beta", "gamma"].into_iter().enumerate() {
                    rows.push(
                        vec![Cell::text(name), Cell::Integer(i as i64 + 1), Cell::Null],
                        Some(source(i)),
                    )?;
                }
                Ok(())
            }
            "slow" => {
                let millis = request.config.int("millis").unwrap_or(1000).max(0) as u64;
                let started = std::time::Instant::now();
                let mut x: u64 = 1;
                while started.elapsed() < std::time::Duration::from_millis(millis) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                for (i, name) in ["alpha", "beta", "gamma"].into_iter().enumerate() {
                    rows.push(
                        vec![
                            Cell::text(name),
                            Cell::Integer(i as i64 + 1),
                            Cell::text(format!("slow {x}")),
                        ],
                        Some(source(i)),
                    )?;
                }
                Ok(())
            }
            "loop" => spin(),
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    let mut chunk = vec![0u8; 1024 * 1024];
                    chunk[hoard.len() % 1024] = 1;
                    hoard.push(std::hint::black_box(chunk));
                }
            }
            "trap" => {
                rows.push(
                    vec![Cell::text("before"), Cell::Integer(1), Cell::Null],
                    Some(source(0)),
                )?;
                panic!("hostile plugin: trap in the middle of a scan");
            }
            "oversize" => {
                let megabytes = request.config.int("megabytes").unwrap_or(80) as usize;
                let block = "x".repeat(1024 * 1024);
                for i in 0..megabytes {
                    rows.push(
                        vec![
                            Cell::text("big"),
                            Cell::Integer(i as i64),
                            Cell::text(block.clone()),
                        ],
                        Some(source(i)),
                    )?;
                }
                Ok(())
            }
            "escape" => {
                let mut got = Vec::new();
                let mut refused = Vec::new();
                for path in [
                    "../outside.txt",
                    "/../outside.txt",
                    "/etc/passwd",
                    "../../../../etc/passwd",
                ] {
                    match std::fs::read_to_string(path) {
                        Ok(text) => got.push((path, text)),
                        Err(e) => refused.push(format!("{path}: {e}")),
                    }
                }
                if got.is_empty() {
                    return Err(format!(
                        "could not read outside the dataset folder ({})",
                        refused.join("; ")
                    ));
                }
                for (i, (path, text)) in got.into_iter().enumerate() {
                    rows.push(
                        vec![Cell::text(path), Cell::Integer(i as i64), Cell::text(text)],
                        Some(source(i)),
                    )?;
                }
                Ok(())
            }
            "late-error" => {
                rows.push(
                    vec![Cell::text("alpha"), Cell::Integer(1), Cell::Null],
                    Some(source(0)),
                )?;
                if !partial(request) {
                    return Ok(());
                }
                for i in 0..400 {
                    eprintln!(
                        "hostile plugin: debug line {i:03} of a long log {}",
                        "-".repeat(64)
                    );
                }
                eprintln!("hostile plugin: part 2 of 3 is unreadable (bad header at byte 17)");
                Err("could not read part 2 of 3 (what it wrote to stderr says why)".into())
            }
            "controls" => controls(request, rows, source(0)),
            other => Err(format!("unknown mode `{other}`")),
        }
    }
}

/// Whether the host asked for fewer than all the columns the plugin describes: every read of a
/// served dataset that declares only some of them, never the registration's probe read.
fn partial(request: &Request) -> bool {
    request.projection.as_ref().is_some_and(|p| p.len() < 3)
}

/// The `controls` mode: one row for the probe, then control characters on stderr and in the
/// error.
fn controls(request: &Request, rows: &mut Rows, source: Source) -> Result<(), String> {
    rows.push(
        vec![Cell::text("alpha"), Cell::Integer(1), Cell::Null],
        Some(source),
    )?;
    if !partial(request) && request.config.bool("at_probe") != Some(true) {
        return Ok(());
    }
    eprintln!("hostile plugin: \u{1b}[31mred\u{1b}[0m, a bell \u{7}, a return\rover");
    eprint!("\n2026-01-01T00:00:00Z ERROR forged from stderr\n");
    Err(
        "hostile plugin: \u{1b}]0;title\u{7}bad\r\n2026-01-01T00:00:00Z ERROR forged from the error \u{202e}desrever\u{9b}"
            .into(),
    )
}

fn spin() -> ! {
    let mut x: u64 = 1;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

// The helper's export, with two faults a plugin written without the helper could make.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod export {
    use super::Hostile;
    use tally_plugin_api::guest::{self, Description, Guest, ScanRequest, ScanResult};

    struct Export;

    impl Guest for Export {
        fn describe(config: String) -> Result<Description, String> {
            guest::describe::<Hostile>(config)
        }

        fn scan(request: ScanRequest) -> Result<ScanResult, String> {
            let config = tally_plugin_api::guest::Config::parse(&request.config)?;
            let mode = super::mode(&config);
            let faulty = matches!(mode.as_str(), "bad-row-source" | "wrong-type");
            let mut request = request;
            if faulty {
                request.config = r#"{"mode": "ok"}"#.to_string();
            }
            let mut result = guest::scan::<Hostile>(request)?;
            match mode.as_str() {
                "bad-row-source" => {
                    if let Some(last) = result.row_sources.last_mut() {
                        *last = 99;
                    }
                }
                "wrong-type" => {
                    // The rows again, with `n` as text.
                    let text = vec![guest::Column {
                        name: "n".into(),
                        data_type: guest::ColumnType::Text,
                        description: None,
                    }];
                    let mut rows = guest::Rows::new(&text, None, None)?;
                    for n in ["1", "2", "3"] {
                        rows.push(vec![guest::Cell::text(n)], None)?;
                    }
                    let mut wrong = rows.finish()?;
                    wrong.sources = result.sources;
                    wrong.row_sources = result.row_sources;
                    result = wrong;
                }
                _ => {}
            }
            Ok(result)
        }
    }

    tally_plugin_api::guest::bindings::export_source!(Export with_types_in tally_plugin_api::guest::bindings);
}

#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    let _ = tally_plugin_api::guest::describe::<Hostile>;
    let _ = tally_plugin_api::guest::scan::<Hostile>;
};
