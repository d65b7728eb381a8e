//! The HTTP server served in-process on a loopback port, spoken to with a plain HTTP client:
//! the guard answers before any handler, and a scoped caller sees only its datasets.

use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use tally_mcp::serve::HttpOptions;

use crate::common::{self, ids_listed};

const ALICE: &str = "alice-0123456789abcdef0123456789abcdef0123456789";
const ROOT: &str = "root-0123456789abcdef0123456789abcdef0123456789ab";

/// A server on 127.0.0.1 over [`common::two_datasets`]; `alice` sees `procedures` only,
/// `root` every dataset.
struct Served {
    base: String,
    agent: ureq::Agent,
    /// Ends the server (it drains, closes its sessions and returns) when the test is done.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _datasets: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let stopped = thread.join();
            // The server's own end is checked too (unless the test failed already).
            if !std::thread::panicking() {
                assert!(stopped.is_ok(), "the server did not stop cleanly");
            }
        }
    }
}

impl Served {
    fn start(change: impl FnOnce(&mut HttpOptions)) -> Served {
        let datasets = common::two_datasets();
        let tokens = datasets.path().join("tokens.txt");
        std::fs::write(&tokens, format!("alice {ALICE} procedures\nroot {ROOT}\n"))
            .expect("token file");
        let mut options = HttpOptions {
            token_file: Some(tokens),
            drain_grace_ms: 2_000,
            ..HttpOptions::default()
        };
        change(&mut options);
        let engine = common::engine(datasets.path());
        let (bound, listening) = mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The server runs on a runtime of its own until the test drops it.
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            let served = runtime.block_on(tally_mcp::serve::http_until(
                engine,
                "127.0.0.1:0".parse().expect("address"),
                Vec::new(),
                options,
                None,
                move |addr| {
                    let _ = bound.send(addr);
                },
                async move {
                    let _ = stopped.await;
                },
            ));
            assert_eq!(served, Ok(()), "the server stopped cleanly");
        });
        let addr = listening
            .recv_timeout(Duration::from_secs(60))
            .expect("the server says where it listens");
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Loopback only, whatever proxy the environment names.
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Served {
            base: format!("http://{addr}"),
            agent,
            stop: Some(stop),
            thread: Some(thread),
            _datasets: datasets,
        }
    }

    /// POSTs one JSON-RPC message to `/mcp`: the status, the session id it gave, and the
    /// answer (the message with an id in the JSON or event-stream body), if any.
    fn post(
        &self,
        message: &Value,
        headers: &[(&str, &str)],
    ) -> (u16, Option<String>, Option<Value>, String) {
        let mut request = self
            .agent
            .post(format!("{}/mcp", self.base))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = request
            .send(message.to_string())
            .expect("the server answers");
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let challenge = response
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        (status, session, answer_in(&body), challenge)
    }

    /// An initialized session of the caller holding `token`; returns its headers.
    fn session(&self, token: &str) -> Vec<(String, String)> {
        let bearer = format!("Bearer {token}");
        let (status, session, answer, _) = self.post(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "in-process", "version": "0"}
            }}),
            &[("Authorization", &bearer)],
        );
        assert_eq!(status, 200, "initialize: {answer:?}");
        let session = session.expect("a session id");
        let headers = vec![
            ("Authorization".to_string(), bearer),
            ("Mcp-Session-Id".to_string(), session),
            ("MCP-Protocol-Version".to_string(), "2025-06-18".to_string()),
        ];
        let (status, ..) = self.post(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &borrowed(&headers),
        );
        assert_eq!(status, 202, "the initialized notification is accepted");
        headers
    }

    /// A tool call's result in the session `headers` name.
    fn call(&self, headers: &[(String, String)], tool: &str, arguments: Value) -> Value {
        let (status, _, answer, _) = self.post(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": tool, "arguments": arguments}}),
            &borrowed(headers),
        );
        assert_eq!(status, 200, "{tool}: {answer:?}");
        answer.expect("an answer")["result"].clone()
    }
}

fn borrowed(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The JSON-RPC answer in a body: the body itself, or the `data:` of an event that has an id.
fn answer_in(body: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return Some(value);
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
}

#[test]
fn the_guard_answers_before_any_handler() {
    let served = Served::start(|options| options.max_body_bytes = 4096);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});

    let (status, _, _, challenge) = served.post(&ping, &[]);
    assert_eq!(status, 401, "no token");
    assert!(
        challenge.starts_with("Bearer"),
        "a challenge: {challenge:?}"
    );

    let (status, ..) = served.post(
        &ping,
        &[(
            "Authorization",
            "Bearer not-a-token-of-this-server-0123456789",
        )],
    );
    assert_eq!(status, 401, "a token the server does not know");

    let alice = format!("Bearer {ALICE}");
    let (status, ..) = served.post(
        &ping,
        &[("Authorization", &alice), ("Origin", "http://evil.example")],
    );
    assert_eq!(status, 403, "a page of another origin");

    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(8192)}});
    let (status, ..) = served.post(&big, &[("Authorization", &alice)]);
    assert_eq!(status, 413, "a body past --max-body-bytes");

    let (status, _, answer, _) =
        served.post(&json!({"not": "a message"}), &[("Authorization", &alice)]);
    assert_eq!(
        status, 400,
        "a body that is no JSON-RPC message: {answer:?}"
    );
    assert_eq!(
        answer.expect("a JSON-RPC error")["error"]["code"],
        json!(-32600),
        "the guard's answer, which says what a message needs"
    );
}

#[test]
fn a_scoped_caller_sees_only_its_datasets() {
    let served = Served::start(|_| {});
    let root = served.session(ROOT);
    let alice = served.session(ALICE);

    assert_eq!(
        ids_listed(&served.call(&root, "list_datasets", json!({}))),
        ["procedures", "secret"]
    );
    assert_eq!(
        ids_listed(&served.call(&alice, "list_datasets", json!({}))),
        ["procedures"]
    );

    // A dataset out of scope is refused exactly as one that does not exist: the answer names
    // neither it nor its nearest id.
    let hidden = served.call(&alice, "inspect_dataset", json!({"dataset_id": "secret"}));
    let missing = served.call(&alice, "inspect_dataset", json!({"dataset_id": "secreu"}));
    assert_eq!(hidden["isError"], json!(true), "{hidden}");
    assert_eq!(
        hidden.to_string().replace("secret", "<id>"),
        missing.to_string().replace("secreu", "<id>"),
        "a hidden dataset and a missing one are refused alike"
    );

    let inspected = served.call(&root, "inspect_dataset", json!({"dataset_id": "secret"}));
    assert_ne!(
        inspected["isError"],
        json!(true),
        "root sees it: {inspected}"
    );

    // Completions come from the same view.
    let complete = |headers: &[(String, String)]| {
        let (_, _, answer, _) = served.post(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "completion/complete", "params": {
                "ref": {"type": "ref/resource", "uri": "tally://datasets/{id}"},
                "argument": {"name": "id", "value": ""}
            }}),
            &borrowed(headers),
        );
        answer.expect("an answer")["result"]["completion"]["values"].clone()
    };
    assert_eq!(complete(&alice), json!(["procedures"]));
    assert_eq!(complete(&root), json!(["procedures", "secret"]));
}

#[test]
fn a_setup_that_cannot_be_used_is_refused_before_listening() {
    let datasets = common::two_datasets();
    let tokens = datasets.path().join("tokens.txt");
    std::fs::write(&tokens, "alice short\n").expect("token file");
    let options = HttpOptions {
        token_file: Some(tokens),
        ..HttpOptions::default()
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let listened = std::cell::Cell::new(false);
    let served = runtime.block_on(tally_mcp::serve::http(
        common::engine(datasets.path()),
        "127.0.0.1:0".parse().expect("address"),
        Vec::new(),
        options,
        None,
        |_| listened.set(true),
    ));
    let Err(tally_mcp::serve::ServeError::Setup(message)) = served else {
        panic!("a short token is a setup error: {served:?}");
    };
    assert!(message.contains("fewer than"), "{message}");
    assert!(!listened.get(), "nothing was served");
}
