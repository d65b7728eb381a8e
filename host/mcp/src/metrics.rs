//! `/metrics`: what an operator's Prometheus (or any OpenMetrics scraper) reads, as
//! OpenMetrics text 1.0.0. Counters are kept as calls happen; gauges are read from the server
//! at each scrape.
//!
//! Names follow Prometheus conventions: the `tally_` prefix, units in names (`_seconds`,
//! `_bytes`), `_total` counters. Label sets are bounded: the tool (six), the outcome (four),
//! an error code (the engine's vocabulary), an HTTP status class, a plugin fault's kind, a
//! task's state. No dataset value, no argument, no caller id is ever a label.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tally_engine::EngineError;
use tally_semantic::request::Tool;

/// The upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The content type of the text [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Clone, Default)]
struct Histogram {
    /// Per bucket (and +Inf last), not cumulative.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        let at = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[at] += 1;
        self.sum += seconds;
    }
}

/// How a call ended, as the `outcome` label says it.
fn outcome_of(result: &Result<Value, EngineError>) -> (&'static str, String) {
    match result {
        Ok(_) => ("answered", String::new()),
        Err(e) => {
            let code = e.to_json()["error"]["code"]
                .as_str()
                .unwrap_or("error")
                .to_string();
            let outcome = if e.is_past_deadline() {
                "past_deadline"
            } else {
                "refused"
            };
            (outcome, code)
        }
    }
}

/// What the server counts as it runs.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Tool calls by (tool, outcome, error code).
    calls: Mutex<BTreeMap<(&'static str, &'static str, String), u64>>,
    /// Tool call latency by tool.
    durations: Mutex<BTreeMap<&'static str, Histogram>>,
    /// HTTP responses by status class (`2xx` …) and path kind.
    responses: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// Bytes of HTTP response bodies sent.
    bytes_sent: AtomicU64,
}

/// What is read from the server at a scrape.
#[derive(Debug, Default)]
pub struct Scrape {
    pub requests_in_flight: usize,
    pub heavy_running: usize,
    pub heavy_queued: usize,
    pub memory_used_bytes: usize,
    pub memory_budget_bytes: usize,
    pub datasets_served: usize,
    pub datasets_broken: usize,
    pub datasets_pending: usize,
    pub reloads: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_bytes: u64,
    pub plugin_faults: Vec<(&'static str, u64)>,
    pub tasks: BTreeMap<String, usize>,
    pub sessions: usize,
    pub subscriptions: usize,
    pub draining: bool,
}

impl Metrics {
    /// A finished tool call.
    pub fn call(&self, tool: Tool, result: &Result<Value, EngineError>, elapsed: Duration) {
        let (outcome, code) = outcome_of(result);
        self.count(tool, outcome, code, elapsed);
    }

    /// A tool call its client cancelled.
    pub fn cancelled(&self, tool: Tool, elapsed: Duration) {
        self.count(tool, "cancelled", String::new(), elapsed);
    }

    fn count(&self, tool: Tool, outcome: &'static str, code: String, elapsed: Duration) {
        *self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((tool.name(), outcome, code))
            .or_default() += 1;
        self.durations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tool.name())
            .or_default()
            .observe(elapsed.as_secs_f64());
    }

    /// An HTTP response of `status` to a request of `path`.
    pub fn response(&self, path: &str, status: u16) {
        let class = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        let kind = match path {
            "/mcp" => "mcp",
            "/health" | "/ready" => "health",
            "/metrics" => "metrics",
            p if p.starts_with("/.well-known/") => "metadata",
            _ => "front",
        };
        *self
            .responses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((kind, class))
            .or_default() += 1;
    }

    /// Bytes of a response body, as they are sent.
    pub fn sent(&self, bytes: usize) {
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The metrics as OpenMetrics text, with the gauges of `now`.
    pub fn render(&self, now: &Scrape) -> String {
        let mut out = String::new();
        self.write_calls(&mut out);
        self.write_durations(&mut out);
        self.write_http(&mut out);
        write_gauges(&mut out, now);
        out.push_str("# EOF\n");
        out
    }

    fn write_calls(&self, out: &mut String) {
        family(
            out,
            "tally_tool_calls",
            "counter",
            "Tool calls by tool and how they ended (answered, refused with an error code, past_deadline, cancelled).",
        );
        for ((tool, outcome, code), n) in
            self.calls.lock().unwrap_or_else(|p| p.into_inner()).iter()
        {
            // The error code only where there is one (a refusal).
            let code = if code.is_empty() {
                String::new()
            } else {
                format!(",code=\"{}\"", label(code))
            };
            let _ = writeln!(
                out,
                "tally_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"{code}}} {n}"
            );
        }
    }

    fn write_durations(&self, out: &mut String) {
        family(
            out,
            "tally_tool_call_duration_seconds",
            "histogram",
            "How long tool calls took, by tool.",
        );
        let _ = writeln!(out, "# UNIT tally_tool_call_duration_seconds seconds");
        for (tool, h) in self
            .durations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let mut cumulative = 0;
            for (i, bound) in BUCKETS.iter().enumerate() {
                cumulative += h.counts[i];
                let _ = writeln!(
                    out,
                    "tally_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            cumulative += h.counts[BUCKETS.len()];
            let _ = writeln!(
                out,
                "tally_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "tally_tool_call_duration_seconds_count{{tool=\"{tool}\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "tally_tool_call_duration_seconds_sum{{tool=\"{tool}\"}} {}",
                h.sum
            );
        }
    }

    fn write_http(&self, out: &mut String) {
        family(
            out,
            "tally_http_responses",
            "counter",
            "HTTP responses by kind of path (mcp, health, metrics, metadata, front) and status class.",
        );
        for ((kind, class), n) in self
            .responses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "tally_http_responses_total{{path=\"{kind}\",status=\"{class}\"}} {n}"
            );
        }
        family(
            out,
            "tally_http_response_bytes",
            "counter",
            "Bytes of HTTP response bodies sent.",
        );
        let _ = writeln!(out, "# UNIT tally_http_response_bytes bytes");
        let _ = writeln!(
            out,
            "tally_http_response_bytes_total {}",
            self.bytes_sent.load(Ordering::Relaxed)
        );
    }
}

fn write_gauges(out: &mut String, now: &Scrape) {
    gauge(
        out,
        "tally_requests_in_flight",
        "HTTP requests to /mcp being answered now.",
        now.requests_in_flight,
    );
    gauge(
        out,
        "tally_heavy_calls_running",
        "Heavy calls running on the heavy runtime now.",
        now.heavy_running,
    );
    gauge(
        out,
        "tally_heavy_calls_queued",
        "Heavy calls waiting for a slot now.",
        now.heavy_queued,
    );
    gauge(
        out,
        "tally_memory_used_bytes",
        "Memory held from the server's budget now (prepared data, files being read, calls' operators).",
        now.memory_used_bytes,
    );
    gauge(
        out,
        "tally_memory_budget_bytes",
        "The server's memory budget (--memory-budget).",
        now.memory_budget_bytes,
    );
    family(
        out,
        "tally_datasets",
        "gauge",
        "Datasets by state: served, broken (refused), pending (files being written).",
    );
    let _ = writeln!(
        out,
        "tally_datasets{{state=\"served\"}} {}",
        now.datasets_served
    );
    let _ = writeln!(
        out,
        "tally_datasets{{state=\"broken\"}} {}",
        now.datasets_broken
    );
    let _ = writeln!(
        out,
        "tally_datasets{{state=\"pending\"}} {}",
        now.datasets_pending
    );
    family(
        out,
        "tally_catalog_reloads",
        "counter",
        "Times a change of the datasets directory (or object store) was served.",
    );
    let _ = writeln!(out, "tally_catalog_reloads_total {}", now.reloads);
    family(
        out,
        "tally_prepared_cache_hits",
        "counter",
        "Prepared tables mapped from the cache instead of prepared anew.",
    );
    let _ = writeln!(out, "tally_prepared_cache_hits_total {}", now.cache_hits);
    family(
        out,
        "tally_prepared_cache_misses",
        "counter",
        "Prepared tables looked for in the cache and not found, or not usable.",
    );
    let _ = writeln!(
        out,
        "tally_prepared_cache_misses_total {}",
        now.cache_misses
    );
    gauge(
        out,
        "tally_prepared_cache_bytes",
        "Bytes of the entries in the prepared-data cache.",
        now.cache_bytes,
    );
    family(
        out,
        "tally_plugin_faults",
        "counter",
        "Plugin calls the sandbox stopped, by kind (memory, deadline, panic, trap, other).",
    );
    for (kind, n) in &now.plugin_faults {
        let _ = writeln!(out, "tally_plugin_faults_total{{kind=\"{kind}\"}} {n}");
    }
    family(out, "tally_tasks", "gauge", "MCP tasks kept now, by state.");
    for (state, n) in &now.tasks {
        let _ = writeln!(out, "tally_tasks{{state=\"{}\"}} {n}", label(state));
    }
    gauge(
        out,
        "tally_sessions",
        "Live MCP sessions over HTTP.",
        now.sessions,
    );
    gauge(
        out,
        "tally_subscriptions",
        "Resource subscriptions of all sessions.",
        now.subscriptions,
    );
    gauge(
        out,
        "tally_draining",
        "1 while the server is draining after a signal to stop.",
        usize::from(now.draining),
    );
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "# HELP {name} {help}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    family(out, name, "gauge", help);
    let _ = writeln!(out, "{name} {value}");
}

/// A label value as OpenMetrics writes it (backslash, quote and line feed escaped).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_observation_once() {
        let m = Metrics::default();
        m.call(
            Tool::ListDatasets,
            &Ok(Value::Null),
            Duration::from_millis(3),
        );
        m.call(
            Tool::ListDatasets,
            &Ok(Value::Null),
            Duration::from_secs(20),
        );
        let text = m.render(&Scrape::default());
        assert!(
            text.contains(
                "tally_tool_call_duration_seconds_bucket{tool=\"list_datasets\",le=\"0.005\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "tally_tool_call_duration_seconds_bucket{tool=\"list_datasets\",le=\"10\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "tally_tool_call_duration_seconds_bucket{tool=\"list_datasets\",le=\"+Inf\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("tally_tool_calls_total{tool=\"list_datasets\",outcome=\"answered\"} 2"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_call_stopped_at_its_deadline_is_told_from_a_refusal() {
        let m = Metrics::default();
        let late = EngineError::Limit {
            message: "summarize_records took longer than its time budget of 10 ms and was stopped"
                .into(),
            hint: String::new(),
        };
        let capped = EngineError::Limit {
            message: "the summary would build more than 10 groups".into(),
            hint: String::new(),
        };
        m.call(
            Tool::SummarizeRecords,
            &Err(late),
            Duration::from_millis(10),
        );
        m.call(
            Tool::SummarizeRecords,
            &Err(capped),
            Duration::from_millis(1),
        );
        m.cancelled(Tool::SummarizeRecords, Duration::from_millis(1));
        let text = m.render(&Scrape::default());
        assert!(
            text.contains("outcome=\"past_deadline\",code=\"limit_exceeded\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("outcome=\"refused\",code=\"limit_exceeded\"} 1"),
            "{text}"
        );
        assert!(text.contains("outcome=\"cancelled\"} 1"), "{text}");
    }
}
