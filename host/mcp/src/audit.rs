//! The audit log: one JSON line per tool call, to a file (appended) or stderr.
//!
//! Fields (see docs/security.md):
//! - `time`: when the call finished, RFC 3339 UTC with milliseconds;
//! - `caller`: the token's id (never the token), `ip:<address>` without authentication, or
//!   `stdio`;
//! - `request`: an id of this call, which the server's log (`--log-format json`) gives too;
//! - `tool`; `dataset`: the `dataset_id` argument as sent (null for `list_datasets`);
//! - `arguments_sha256`: SHA-256 of the arguments as canonical JSON (keys sorted), so equal
//!   calls can be matched without the log holding what was asked;
//! - `outcome`: `ok`, the error code (`unknown_dataset`, `invalid_argument`, …), or
//!   `cancelled` when the client cancelled the call (`notifications/cancelled`);
//! - `duration_ms`; `rows`: rows (or datasets) returned, null on error.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tally_engine::EngineError;
use tally_semantic::Tool;

/// Where audit lines go.
#[derive(Clone)]
pub struct Audit {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Audit")
    }
}

fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = serde_json::Map::new();
            for k in keys {
                out.insert(k.clone(), canonical(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

impl Audit {
    /// `-` is stderr; anything else a file, appended to (created if missing).
    pub fn open(target: &Path) -> Result<Audit, String> {
        let out: Box<dyn Write + Send> = if target.as_os_str() == "-" {
            Box::new(std::io::stderr())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(target)
                    .map_err(|e| format!("cannot open the audit log {}: {e}", target.display()))?,
            )
        };
        Ok(Audit {
            out: Arc::new(Mutex::new(out)),
        })
    }

    /// A new request id: what the audit log and the server's log name one tool call by.
    pub fn request_id() -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }

    /// Writes the line of one call.
    pub fn record(
        &self,
        caller: &str,
        request: &str,
        tool: Tool,
        arguments: &Value,
        result: &Result<Value, EngineError>,
        elapsed: Duration,
    ) {
        let (outcome, rows) = match result {
            Ok(envelope) => {
                let data = &envelope["data"];
                let rows = data["rows"]
                    .as_array()
                    .or_else(|| data["datasets"].as_array())
                    .map(Vec::len);
                ("ok".to_string(), rows)
            }
            Err(e) => (
                e.to_json()["error"]["code"]
                    .as_str()
                    .unwrap_or("error")
                    .to_string(),
                None,
            ),
        };
        self.write(caller, request, tool, arguments, &outcome, rows, elapsed);
    }

    /// Writes the line of a call the client cancelled (outcome `cancelled`).
    pub fn record_cancelled(
        &self,
        caller: &str,
        request: &str,
        tool: Tool,
        arguments: &Value,
        elapsed: Duration,
    ) {
        self.write(caller, request, tool, arguments, "cancelled", None, elapsed);
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        caller: &str,
        request: &str,
        tool: Tool,
        arguments: &Value,
        outcome: &str,
        rows: Option<usize>,
        elapsed: Duration,
    ) {
        let digest = Sha256::digest(canonical(arguments).to_string().as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let line = json!({
            "time": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "caller": caller,
            "request": request,
            "tool": tool.name(),
            "dataset": arguments.get("dataset_id").and_then(Value::as_str),
            "arguments_sha256": hex,
            "outcome": outcome,
            "duration_ms": (elapsed.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
            "rows": rows,
        });
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
            tracing::error!("the audit log could not be written");
        }
    }
}
