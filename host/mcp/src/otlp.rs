//! Traces: OpenTelemetry spans of tool calls, sent over OTLP/HTTP (JSON) when an endpoint is
//! configured (`--otlp-endpoint`, or `OTEL_EXPORTER_OTLP_ENDPOINT`).
//!
//! A [`Layer`] of the server's `tracing` subscriber turns the spans of a tool call into
//! OpenTelemetry spans: the call's own span ([`REQUEST_SPAN`], opened by the MCP layer, whose
//! parent is the client's span when the request carries a W3C `traceparent`, in its HTTP
//! headers or its `_meta`), and the spans opened inside it by the engine (`resolve`, `plan`,
//! `scan`, `envelope`) and the plugin host (`plugin call`). Spans outside a tool call are
//! not sent.
//!
//! Only fields the server names are attributes: the MCP method, the tool, the outcome and
//! the error code. No argument's text, no value of the data, no caller is ever
//! an attribute. A finished span is put aside under a lock (no thread is woken for it); a
//! thread of their own sends what waits every second, 256 spans a request; a collector that
//! does not answer loses them (said in the log, as are spans dropped when 4,096 wait), and
//! never holds up a call.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The name of the span the MCP layer opens for each tool call.
pub const REQUEST_SPAN: &str = "mcp.request";
/// Fields recorded as attributes (by name); everything else a span carries is left out.
const ATTRIBUTES: &[&str] = &[
    "mcp.method.name",
    "gen_ai.tool.name",
    "gen_ai.operation.name",
    "tally.outcome",
    "error.type",
];
/// Spans kept waiting to be sent at most; past it new ones are dropped (and counted).
const QUEUE: usize = 4_096;
const BATCH: usize = 256;
const EVERY: Duration = Duration::from_secs(1);

/// A finished span, as it is sent: the open span with its end.
#[derive(Debug, Clone)]
struct Finished {
    span: Open,
    end: SystemTime,
    error: bool,
}

/// What the layer keeps of an open span.
#[derive(Debug, Clone)]
struct Open {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: String,
    server: bool,
    start: SystemTime,
    attributes: Vec<(String, Value)>,
}

/// Asks the exporter to send what waits now (and says when it has).
#[derive(Debug)]
struct Flush(std::sync::mpsc::Sender<()>);

/// Finished spans waiting for the exporter, which takes them all every second: a call adds
/// its spans under a lock and never wakes a thread.
static WAITING: Mutex<Vec<Finished>> = Mutex::new(Vec::new());

static SENDER: Mutex<Option<SyncSender<Flush>>> = Mutex::new(None);

/// The layer that sends tool calls' spans to `endpoint` (`http://host:4318`; the traces go to
/// `<endpoint>/v1/traces`).
#[derive(Debug)]
pub struct OtlpLayer {
    _private: (),
}

/// Starts the exporter thread and returns its layer.
pub fn layer(endpoint: &str) -> Result<OtlpLayer, String> {
    let lower = endpoint.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(format!(
            "--otlp-endpoint {endpoint}: give the collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318"
        ));
    }
    let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let (sender, receiver) = std::sync::mpsc::sync_channel(4);
    std::thread::Builder::new()
        .name("tally-otlp".into())
        .spawn(move || export(&url, &receiver))
        .map_err(|e| format!("cannot start the trace exporter: {e}"))?;
    *SENDER.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender);
    Ok(OtlpLayer { _private: () })
}

/// Sends what is waiting, waiting at most `within` (at the end of the process).
pub fn flush(within: Duration) {
    let sender = SENDER.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Some(sender) = sender {
        let (done, wait) = std::sync::mpsc::channel();
        if sender.send(Flush(done)).is_ok() {
            let _ = wait.recv_timeout(within);
        }
    }
}

/// A W3C `traceparent` (`00-<trace id>-<span id>-<flags>`): its trace id and span id.
pub fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8])> {
    let parts: Vec<&str> = value.trim().split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return None;
    };
    if version.len() != 2 || *version == "ff" || flags.len() != 2 {
        return None;
    }
    let trace: [u8; 16] = hex(trace)?.try_into().ok()?;
    let span: [u8; 8] = hex(span)?.try_into().ok()?;
    if trace == [0; 16] || span == [0; 8] {
        return None;
    }
    Some((trace, span))
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2)
        || !s
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Random ids for spans and traces: a xorshift generator per thread, seeded from the
/// standard library's random hasher keys (ids must be unique, not secret).
fn random_bytes<const N: usize>() -> [u8; N] {
    use std::cell::Cell;
    use std::hash::BuildHasher;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::collections::hash_map::RandomState::new().hash_one(std::thread::current().id()) | 1,
        );
    }
    let mut out = [0u8; N];
    for chunk in out.chunks_mut(8) {
        let next = STATE.with(|s| {
            let mut x = s.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.set(x);
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        });
        chunk.copy_from_slice(&next.to_le_bytes()[..chunk.len()]);
    }
    out
}

/// The fields of a span the layer keeps: the attributes it names, `traceparent`, `otel.name`.
#[derive(Default)]
struct Fields {
    attributes: Vec<(String, Value)>,
    traceparent: Option<String>,
    name: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "traceparent" => self.traceparent = Some(value.to_string()),
            "otel.name" => self.name = Some(value.to_string()),
            name if ATTRIBUTES.contains(&name) => {
                self.attributes
                    .push((name.to_string(), json!({"stringValue": value})));
            }
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if ATTRIBUTES.contains(&field.name()) {
            self.attributes.push((
                field.name().to_string(),
                json!({"intValue": value.to_string()}),
            ));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if ATTRIBUTES.contains(&field.name()) {
            self.attributes.push((
                field.name().to_string(),
                json!({"intValue": value.to_string()}),
            ));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if ATTRIBUTES.contains(&field.name()) {
            self.attributes
                .push((field.name().to_string(), json!({"boolValue": value})));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // Only the fields named above, written as text: never a value of another kind.
        if ATTRIBUTES.contains(&field.name()) || matches!(field.name(), "traceparent" | "otel.name")
        {
            self.record_str(field, format!("{value:?}").trim_matches('"'));
        }
    }
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let name = attrs.metadata().name();
        let parent = span.parent().and_then(|p| {
            p.extensions()
                .get::<Open>()
                .map(|o| (o.trace_id, o.span_id))
        });
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let (trace_id, parent, server) = match parent {
            Some((trace, span)) => (trace, Some(span), false),
            None if name == REQUEST_SPAN => {
                match fields.traceparent.as_deref().and_then(parse_traceparent) {
                    Some((trace, span)) => (trace, Some(span), true),
                    None => (random_bytes::<16>(), None, true),
                }
            }
            // Not within a tool call: not sent.
            None => return,
        };
        span.extensions_mut().insert(Open {
            trace_id,
            span_id: random_bytes::<8>(),
            parent,
            name: fields.name.unwrap_or_else(|| name.to_string()),
            server,
            start: SystemTime::now(),
            attributes: fields.attributes,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        if let Some(open) = span.extensions_mut().get_mut::<Open>() {
            for (key, value) in fields.attributes {
                open.attributes.retain(|(k, _)| *k != key);
                open.attributes.push((key, value));
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let error = open.attributes.iter().any(|(k, _)| k == "error.type");
        let finished = Finished {
            span: open,
            end: SystemTime::now(),
            error,
        };
        let mut waiting = WAITING.lock().unwrap_or_else(|p| p.into_inner());
        if waiting.len() < QUEUE {
            waiting.push(finished);
        } else {
            DROPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn nanos(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
        .to_string()
}

/// The OTLP/JSON body of a batch of spans.
fn body(spans: &[Finished]) -> Value {
    let spans: Vec<Value> = spans
        .iter()
        .map(|f| {
            let s = &f.span;
            let mut span = json!({
                "traceId": to_hex(&s.trace_id),
                "spanId": to_hex(&s.span_id),
                "name": s.name,
                // SERVER for the call's own span, INTERNAL inside it.
                "kind": if s.server { 2 } else { 1 },
                "startTimeUnixNano": nanos(s.start),
                "endTimeUnixNano": nanos(f.end),
                "attributes": s.attributes.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>(),
                "status": {"code": if f.error { 2 } else { 1 }},
            });
            if let Some(parent) = s.parent {
                span["parentSpanId"] = json!(to_hex(&parent));
            }
            span
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "tally"}},
                {"key": "service.version", "value": {"stringValue": env!("CARGO_PKG_VERSION")}},
            ]},
            "scopeSpans": [{"scope": {"name": "tally", "version": env!("CARGO_PKG_VERSION")}, "spans": spans}],
        }]
    })
}

fn export(url: &str, flushes: &Receiver<Flush>) {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build(),
    );
    let mut warned = false;
    loop {
        let flush = match flushes.recv_timeout(EVERY) {
            Ok(flush) => Some(flush),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let dropped = DROPPED.swap(0, std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "spans were dropped: 4,096 were waiting (the collector is slower than the calls)"
            );
        }
        let spans = std::mem::take(&mut *WAITING.lock().unwrap_or_else(|p| p.into_inner()));
        for batch in spans.chunks(BATCH) {
            let sent = agent
                .post(url)
                .header("Content-Type", "application/json")
                .send(body(batch).to_string());
            match sent {
                Ok(r) if r.status().is_success() => warned = false,
                Ok(r) if !warned => {
                    tracing::warn!(
                        status = r.status().as_u16(),
                        spans = batch.len(),
                        "the trace collector refused a batch of spans"
                    );
                    warned = true;
                }
                Err(e) if !warned => {
                    tracing::warn!(
                        spans = batch.len(),
                        "the trace collector could not be reached: {e}"
                    );
                    warned = true;
                }
                _ => {}
            }
        }
        if let Some(Flush(done)) = flush {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_as_w3c_writes_it() {
        let (trace, span) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(to_hex(&trace), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(to_hex(&span), "00f067aa0ba902b7");
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }
}
