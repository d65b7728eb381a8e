//! MCP over stdio, measured from outside the process, in the release profile:
//!
//!     cargo bench --workspace --bench mcp
//!
//! Prints (1) the time from spawning `tally serve` to the first answered `tools/call`, in the
//! 2025-11-25 era (initialize handshake first) and the 2026-07-28 era (no handshake), and
//! (2) the round trip of the engine benchmark's calls through a running server. No assertion:
//! figures go to docs/benchmarks.md.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const STARTS: usize = 20;
const RUNS: usize = 100;

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    fn spawn() -> Server {
        let datasets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(["serve", "--datasets"])
            .arg(datasets)
            .env("TALLY_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("tally serve starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Server {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_string(message).expect("json");
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
    }

    /// Reads until the response with `id` arrives.
    fn response(&mut self, id: u64) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read");
            assert!(n > 0, "the server closed stdout");
            let v: Value = serde_json::from_str(&line).expect("a JSON-RPC message per line");
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "error: {v}");
                return v;
            }
        }
    }

    fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn initialize(id: u64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "bench", "version": "0" } } })
}

fn call(id: u64, name: &str, arguments: &Value, stateless: bool) -> Value {
    let mut params = json!({ "name": name, "arguments": arguments });
    if stateless {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": { "name": "bench", "version": "0" }
        });
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (p(0.5), p(0.95))
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    for (era, stateless) in [
        ("2025-11-25 (initialize, then tools/call)", false),
        ("2026-07-28 (tools/call, no handshake)", true),
    ] {
        let mut times = Vec::new();
        for _ in 0..STARTS {
            let t = Instant::now();
            let mut s = Server::spawn();
            if !stateless {
                s.send(&initialize(1));
                s.response(1);
                s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
            }
            s.send(&call(2, "list_datasets", &json!({}), stateless));
            s.response(2);
            times.push(t.elapsed());
            s.stop();
        }
        let (p50, p95) = median(times);
        println!(
            "process start → first answered tools/call (list_datasets), {era}: median {} · p95 {} ({STARTS} starts)",
            ms(p50),
            ms(p95)
        );
    }

    let calls: Vec<(&str, &str, Value)> = vec![
        (
            "summarize by 所管府省庁: count + avg:オンライン率",
            "summarize_records",
            json!({ "dataset_id": "procedures", "group_by": ["所管府省庁"], "metrics": ["count", "avg:オンライン率"] }),
        ),
        (
            "full-text q over all text fields (\"届出\")",
            "query_records",
            json!({ "dataset_id": "procedures", "q": "届出", "limit": 20 }),
        ),
        (
            "filtered, ordered query",
            "query_records",
            json!({
            "dataset_id": "procedures", "where": { "手続類型": ["1 申請等"], "総手続件数": { "$gte": 1000 } },
            "order_by": ["-総手続件数"], "select": ["手続ID", "手続名", "所管府省庁", "総手続件数"], "limit": 20 }),
        ),
        (
            "inspect (cached per version)",
            "inspect_dataset",
            json!({ "dataset_id": "procedures" }),
        ),
        ("list_datasets", "list_datasets", json!({})),
    ];
    let mut s = Server::spawn();
    s.send(&initialize(1));
    s.response(1);
    s.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let mut id = 10;
    for (label, tool, args) in &calls {
        id += 1;
        let first = Instant::now();
        s.send(&call(id, tool, args, false));
        s.response(id);
        let first = first.elapsed();
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            id += 1;
            let t = Instant::now();
            s.send(&call(id, tool, args, false));
            s.response(id);
            times.push(t.elapsed());
        }
        let (p50, p95) = median(times);
        println!(
            "stdio round trip, {label}: first {} · median {} · p95 {} ({RUNS} runs)",
            ms(first),
            ms(p50),
            ms(p95)
        );
    }
    s.stop();
}
