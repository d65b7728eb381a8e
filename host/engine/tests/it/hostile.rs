//! The hostile-input corpus, generated rather than listed: dataset definitions mutated the way
//! careless editors and attackers mutate them (YAML structure: lines dropped, duplicated,
//! re-indented, cut off; anchors and aliases; deep nesting; huge and invisible values), and
//! Parquet files with mutated footers and pages (flipped bytes, lying lengths and counts,
//! truncation). Every case must end as a served dataset or a refusal that says what is wrong
//! and how to fix it, and a served one must answer calls with results or clear errors: never
//! a panic, never the process taken down.
//!
//! Deterministic (a fixed seed), bounded in time: `TALLY_HOSTILE_SECONDS` (default 20) per
//! family, so CI runs it on every build; set it higher to search longer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tally_engine::{Engine, EngineError, Limits};
use tally_semantic::request::Tool;
use tally_storage::catalog::{Options, register};

use crate::fixture::datasets_dir;

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn budget() -> Duration {
    Duration::from_secs(
        std::env::var("TALLY_HOSTILE_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20),
    )
}

fn limits() -> Limits {
    Limits {
        memory_budget_bytes: 256 << 20,
        call_timeout: Duration::from_secs(10),
        ..Limits::default()
    }
}

/// One structural mutation of a YAML text.
#[expect(
    clippy::too_many_lines,
    reason = "one match arm per mutation, read as a list"
)]
fn mutate_yaml(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    // A text cut to nothing by an earlier mutation has no line to remove or repeat.
    if lines.is_empty() {
        lines.push(String::new());
    }
    let n = lines.len().max(1);
    match rng.below(14) {
        0 => {
            lines.remove(rng.below(n).min(lines.len().saturating_sub(1)));
        }
        1 => {
            let i = rng.below(n).min(lines.len().saturating_sub(1));
            let line = lines[i].clone();
            lines.insert(i, line);
        }
        2 => {
            let (a, b) = (rng.below(n), rng.below(n));
            if a < lines.len() && b < lines.len() {
                lines.swap(a, b);
            }
        }
        3 => {
            let joined = lines.join("\n");
            let mut cut = rng.below(joined.len().max(1));
            while !joined.is_char_boundary(cut) {
                cut -= 1;
            }
            return joined[..cut].to_string();
        }
        4 => {
            const SYNTAX: &[&str] = &[
                "{",
                "}",
                "[",
                "]",
                ":",
                ",",
                "&a",
                "*a",
                "!!str",
                "|",
                ">",
                "- ",
                "'",
                "\"",
                "#",
                "%YAML 1.1",
                "@",
                "`",
                "\t",
                "\n",
                "---",
                "...",
                "? ",
                "<<: *a",
            ];
            let i = rng.below(n).min(lines.len().saturating_sub(1));
            let at = rng.below(lines[i].len() + 1);
            let at = (0..=at)
                .rev()
                .find(|k| lines[i].is_char_boundary(*k))
                .unwrap_or(0);
            lines[i].insert_str(at, SYNTAX[rng.below(SYNTAX.len())]);
        }
        5 => {
            let i = rng.below(n).min(lines.len().saturating_sub(1));
            if rng.below(2) == 0 {
                lines[i] = format!("   {}", lines[i]);
            } else {
                lines[i] = lines[i].trim_start().to_string();
            }
        }
        6 => {
            let i = rng.below(n).min(lines.len().saturating_sub(1));
            let big = "長".repeat(1 + rng.below(200_000));
            if let Some((key, _)) = lines[i].split_once(':') {
                lines[i] = format!("{key}: \"{big}\"");
            }
        }
        7 => {
            // An alias ladder: each level references the one below ten times.
            let levels = 2 + rng.below(8);
            let mut doc = String::from("l0: &l0 [\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"]\n");
            for k in 1..=levels {
                let refs = vec![format!("*l{}", k - 1); 10].join(", ");
                doc.push_str(&format!("l{k}: &l{k} [{refs}]\n"));
            }
            lines.insert(0, doc);
        }
        8 => {
            let depth = 10 + rng.below(2000);
            lines.push(format!("deep: {}{}", "[".repeat(depth), "]".repeat(depth)));
        }
        9 => {
            const ODD: &[char] = &[
                '\u{0}', '\u{7}', '\u{202e}', '\u{200f}', '\u{feff}', '\u{fffd}', '\u{1b}',
            ];
            let i = rng.below(n).min(lines.len().saturating_sub(1));
            let c = ODD[rng.below(ODD.len())];
            lines[i].push(c);
        }
        10 => {
            const KEYS: &[&str] = &[
                "fields",
                "title",
                "computed_measures",
                "backend",
                "source",
                "id_field",
                "data_file",
            ];
            const VALUES: &[&str] = &[
                "3",
                "[]",
                "{}",
                "null",
                "~",
                "true",
                "-1",
                "1e309",
                "\"../../etc/passwd\"",
                "/abs/path",
            ];
            lines.push(format!(
                "{}: {}",
                KEYS[rng.below(KEYS.len())],
                VALUES[rng.below(VALUES.len())]
            ));
        }
        11 => {
            let count = 1 + rng.below(5000);
            let values: Vec<String> = (0..count).map(|k| format!("\"{k} 値\"")).collect();
            lines.push(format!("extra_codelist: [{}]", values.join(", ")));
        }
        12 => {
            lines.push(format!(
                "id: {}",
                ["procedures", "x", "../x", "a b", "ok-id"][rng.below(5)]
            ));
        }
        _ => {
            let i = rng.below(n).min(lines.len().saturating_sub(1));
            lines[i] = lines[i].replace(':', [": &a", ": *a", ":: ", " :"][rng.below(4)]);
        }
    }
    lines.join("\n")
}

/// One mutation of a Parquet file's bytes, mostly in its footer (where lengths, counts and
/// offsets are), sometimes in its pages.
fn mutate_parquet(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let len = out.len();
    let footer_len =
        u32::from_le_bytes([out[len - 8], out[len - 7], out[len - 6], out[len - 5]]) as usize;
    let footer_start = len.saturating_sub(8usize.saturating_add(footer_len));
    let in_footer =
        |rng: &mut Rng| footer_start + rng.below(len.saturating_sub(footer_start).max(1));
    match rng.below(8) {
        0 => {
            let i = rng.below(len);
            out[i] ^= 1 << rng.below(8);
        }
        1 => {
            for _ in 0..1 + rng.below(4) {
                let i = in_footer(rng).min(len - 9);
                out[i] ^= 1 << rng.below(8);
            }
        }
        2 => out.truncate(rng.below(len)),
        3 => {
            let lie = [
                0u32,
                1,
                7,
                u32::MAX,
                (len as u32).wrapping_mul(2),
                rng.next() as u32,
            ][rng.below(6)];
            out[len - 8..len - 4].copy_from_slice(&lie.to_le_bytes());
        }
        4 => {
            // Thrift varints that claim huge values (row counts, sizes, offsets).
            let i = in_footer(rng).min(len.saturating_sub(16));
            for (k, b) in [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]
                .iter()
                .enumerate()
            {
                if i + k < len - 8 {
                    out[i + k] = *b;
                }
            }
        }
        5 | 6 => {
            // A run of bytes in the data pages (between the magic and the footer).
            let pages_end = footer_start.min(len).max(4);
            let start = (4 + rng.below(pages_end.saturating_sub(4).max(1))).min(pages_end);
            let end = (start + 1 + rng.below(64)).min(pages_end);
            let zero = rng.below(2) == 0;
            for b in &mut out[start..end] {
                *b = if zero { 0 } else { rng.next() as u8 };
            }
        }
        _ => {
            // The magic number itself.
            let i = [0, 1, 2, 3, len - 4, len - 3, len - 2, len - 1][rng.below(8)];
            out[i] = b'X';
        }
    }
    out
}

/// A served dataset must answer the tools with results or errors that say what went wrong;
/// a panic or an internal error is a bug.
async fn exercise(engine: &Arc<Engine>, id: &str) -> Result<(), String> {
    for (tool, args) in [
        (Tool::InspectDataset, json!({ "dataset_id": id })),
        (Tool::SummarizeRecords, json!({ "dataset_id": id })),
        (Tool::QueryRecords, json!({ "dataset_id": id, "limit": 5 })),
    ] {
        match crate::fixture::answer(engine, tool, args.clone()).await {
            Ok(_) => {}
            Err(
                EngineError::Internal(m)
                | EngineError::Storage(tally_storage::StorageError::Internal(m)),
            ) => {
                return Err(format!("{tool:?} {args}: internal error: {m}"));
            }
            Err(_) => {}
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_dataset_definitions_generated() {
    let src = datasets_dir().join("fixture");
    let base = std::fs::read_to_string(src.join("dataset.yaml")).expect("fixture yaml");
    let mut rng = Rng(0x7a11_7a11_0000_0001);
    let started = Instant::now();
    let (mut served, mut refused, mut cases) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    while started.elapsed() < budget() && cases < 2000 {
        cases += 1;
        let mut text = base.clone();
        for _ in 0..1 + rng.below(3) {
            text = mutate_yaml(&text, &mut rng);
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let folder = dir.path().join("case");
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("dataset.yaml"), &text).expect("yaml");
        std::fs::copy(src.join("data.parquet"), folder.join("data.parquet")).expect("data");
        let options = Options {
            memory_budget: 256 << 20,
            ..Options::default()
        };
        // The factories are shared, immutable registrations: nothing a panic could leave
        // half-changed.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            register(&folder, "case", "case/dataset.yaml", &options)
        }));
        match outcome {
            Err(_) => failures.push(format!(
                "case {cases}: registration panicked on:\n{text:.2000}"
            )),
            Ok(Err(refusal)) => {
                refused += 1;
                for p in &refusal.problems {
                    if p.reason.trim().is_empty() {
                        failures.push(format!("case {cases}: a problem without a reason: {p:?}"));
                    }
                }
            }
            Ok(Ok(None)) => refused += 1,
            Ok(Ok(Some(_))) => {
                served += 1;
                let engine = Arc::new(Engine::open_with(dir.path(), limits()));
                if let Err(e) = exercise(&engine, "case").await {
                    failures.push(format!("case {cases}: {e}\n{text:.2000}"));
                }
            }
        }
    }
    println!(
        "hostile definitions: {cases} generated in {:.1} s, {served} served, {refused} refused, {} failures",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        served > 0 && refused > 0,
        "the mutations should both keep and break definitions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_parquet_files_generated() {
    let src = datasets_dir().join("fixture");
    let yaml = std::fs::read_to_string(src.join("dataset.yaml")).expect("fixture yaml");
    let base = std::fs::read(src.join("data.parquet")).expect("fixture data");
    let mut rng = Rng(0x7a11_7a11_0000_0002);
    let started = Instant::now();
    let (mut served, mut refused, mut cases) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    while started.elapsed() < budget() && cases < 2000 {
        cases += 1;
        let mut bytes = base.clone();
        for _ in 0..1 + rng.below(2) {
            if bytes.len() > 16 {
                bytes = mutate_parquet(&bytes, &mut rng);
            }
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let folder = dir.path().join("case");
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(folder.join("dataset.yaml"), &yaml).expect("yaml");
        std::fs::write(folder.join("data.parquet"), &bytes).expect("data");
        let engine = Arc::new(Engine::open_with(dir.path(), limits()));
        let view = engine.view(tally_engine::Caller::everyone("tests"));
        if view.dataset("case").is_some() {
            served += 1;
            if let Err(e) = exercise(&engine, "case").await {
                failures.push(format!("case {cases}: {e}"));
            }
            // Read from the file at every call, through DataFusion's Parquet scan and our
            // reader: the same file is an answer or an error that says why, never a crash.
            let streaming = Arc::new(Engine::open_with(
                dir.path(),
                Limits {
                    serving: tally_storage::dataset::Serving::Streaming,
                    ..limits()
                },
            ));
            if let Err(e) = exercise(&streaming, "case").await {
                failures.push(format!("case {cases}, read at every call: {e}"));
            }
        } else {
            refused += 1;
            let explained = view.broken().any(|b| {
                b.folder == "case" && b.problems.iter().all(|p| !p.reason.trim().is_empty())
            }) || view.pending().any(|p| p == "case");
            if !explained {
                failures.push(format!("case {cases}: refused without a reason"));
            }
        }
    }
    println!(
        "hostile Parquet files: {cases} generated in {:.1} s, {served} served, {refused} refused, {} failures",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        served > 0 && refused > 0,
        "the mutations should both keep and break files"
    );
}
