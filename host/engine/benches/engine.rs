//! Per-call times of the engine on the default dataset (75,071 rows), in the release profile:
//!
//!     cargo bench --workspace --bench engine
//!
//! Prints, for each call, the median and 95th percentile over repeated runs after a warm-up
//! (the first call, which reads the Parquet file and prepares the in-memory table, is timed
//! apart). No assertion: figures go to docs/benchmarks.md.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tally_engine::Engine;
use tally_semantic::Tool;

const DEFAULT_RUNS: usize = 200;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    // TALLY_BENCH_RUNS and TALLY_BENCH_ONLY (a substring of a call's label) narrow a run, e.g.
    // to profile one call under callgrind.
    let runs: usize = std::env::var("TALLY_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_RUNS);
    let only = std::env::var("TALLY_BENCH_ONLY").ok();
    let dir = std::env::var_os("TALLY_BENCH_DATASETS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let started = Instant::now();
    let engine = Engine::open(&dir);
    let open = started.elapsed();
    let dataset = std::env::var("TALLY_BENCH_DATASET").unwrap_or_else(|_| "procedures".to_string());
    println!(
        "datasets: {} — open (footers only): {}",
        dir.display(),
        ms(open)
    );

    let calls: Vec<(&str, Tool, Value)> = vec![
        (
            "summarize by 所管府省庁: count + avg:オンライン率",
            Tool::SummarizeRecords,
            json!({ "dataset_id": dataset, "group_by": ["所管府省庁"], "metrics": ["count", "avg:オンライン率"] }),
        ),
        (
            "full-text q over all text fields (\"届出\")",
            Tool::QueryRecords,
            json!({ "dataset_id": dataset, "q": "届出", "limit": 20 }),
        ),
        (
            "filtered, ordered query",
            Tool::QueryRecords,
            json!({
                "dataset_id": dataset,
                "where": { "手続類型": ["1 申請等"], "総手続件数": { "$gte": 1000 } },
                "order_by": ["-総手続件数"],
                "select": ["手続ID", "手続名", "所管府省庁", "総手続件数"],
                "limit": 20,
            }),
        ),
        (
            "summarize exploded multi-value field (懸念点) with a filter",
            Tool::SummarizeRecords,
            json!({
                "dataset_id": dataset,
                "group_by": ["オンライン化の実施予定及び検討時の懸念点"],
                "where": { "所管府省庁": ["国土交通省", "厚生労働省"] },
            }),
        ),
        (
            "inspect (cached per version)",
            Tool::InspectDataset,
            json!({ "dataset_id": dataset }),
        ),
    ];

    // The fixed cost every data call pays: a session of its own (shared state, own memory pool).
    let mut contexts = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let ctx = call_context(&engine);
        contexts.push(t.elapsed());
        drop(ctx);
    }
    contexts.sort();
    println!(
        "per-call context: median {} · p95 {} ({runs} runs)",
        ms(percentile(&contexts, 0.5)),
        ms(percentile(&contexts, 0.95))
    );

    runtime.block_on(async {
        // What checking an envelope against its output schema costs (part of every call).
        let (_, tool, args) = &calls[0];
        if let Ok(envelope) = engine.call(*tool, args).await {
            let mut times = Vec::with_capacity(runs);
            for _ in 0..runs {
                let t = Instant::now();
                let _ = tally_engine::schema::validate(*tool, &envelope);
                times.push(t.elapsed());
            }
            times.sort();
            println!(
                "envelope validation (summarize result): median {} · p95 {} ({runs} runs)",
                ms(percentile(&times, 0.5)),
                ms(percentile(&times, 0.95))
            );
        }
        for (label, tool, args) in &calls {
            if only.as_deref().is_some_and(|o| !label.contains(o)) {
                continue;
            }
            let first = Instant::now();
            let out = engine.call(*tool, args).await;
            let first = first.elapsed();
            if let Err(e) = &out {
                println!("{label}: failed: {}", e.to_json());
                continue;
            }
            let mut times = Vec::with_capacity(runs);
            for _ in 0..runs {
                let t = Instant::now();
                let r = engine.call(*tool, args).await;
                times.push(t.elapsed());
                assert!(r.is_ok());
            }
            times.sort();
            println!(
                "{label}: first {} · median {} · p95 {} ({runs} runs)",
                ms(first),
                ms(percentile(&times, 0.5)),
                ms(percentile(&times, 0.95)),
            );
        }
    });
}

/// A fresh DataFusion context for one call, as every data call makes.
fn call_context(engine: &Engine) -> datafusion::prelude::SessionContext {
    let call = tally_engine::CallCtx::new(
        engine,
        tally_engine::Caller::everyone("bench"),
        std::time::Duration::from_secs(10),
        Vec::new(),
    );
    tally_engine::Cx {
        engine,
        call: &call,
    }
    .call_context(0)
    .expect("context")
}
