//! One MCP session served in-process over an in-memory stream, spoken to line by line.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, ReadHalf, WriteHalf};

use crate::common;

/// The client's end of a session: JSON-RPC messages, one a line.
struct Client {
    to_server: WriteHalf<DuplexStream>,
    from_server: BufReader<ReadHalf<DuplexStream>>,
    next_id: u64,
    served: tokio::task::JoinHandle<Result<(), tally_mcp::serve::ServeError>>,
    _datasets: tempfile::TempDir,
}

impl Client {
    /// Serves a session over the two datasets of [`common::two_datasets`] and initializes it.
    async fn start() -> Client {
        let datasets = common::two_datasets();
        let engine = common::engine(datasets.path());
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (server_in, server_out) = tokio::io::split(theirs);
        let served = tokio::spawn(tally_mcp::serve::over(engine, None, server_in, server_out));
        let (from_server, to_server) = tokio::io::split(ours);
        let mut client = Client {
            to_server,
            from_server: BufReader::new(from_server),
            next_id: 0,
            served,
            _datasets: datasets,
        };
        let init = client
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "in-process", "version": "0"}
                }),
            )
            .await;
        assert!(
            init["result"]["capabilities"]["tools"].is_object(),
            "the server announces tools: {init}"
        );
        client
            .send_line(
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
            )
            .await;
        client
    }

    async fn send_line(&mut self, line: &str) {
        self.to_server
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to the session");
    }

    /// The next answer the server sends (notifications and its own requests passed over).
    async fn answer(&mut self) -> Value {
        loop {
            let mut line = String::new();
            let read = tokio::time::timeout(
                Duration::from_secs(60),
                self.from_server.read_line(&mut line),
            )
            .await
            .expect("the server answers within a minute")
            .expect("read from the session");
            assert!(read > 0, "the session ended before answering");
            let message: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                panic!("the server wrote a line that is not JSON ({e}): {line}")
            });
            // An answer has an id and no method (a request of the server's has both).
            if message.get("id").is_some() && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Sends a request and returns the server's answer to it (its result or its error).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        )
        .await;
        let answer = self.answer().await;
        assert_eq!(
            answer["id"],
            json!(id),
            "answers come in order here: {answer}"
        );
        answer
    }

    /// A tool call's result: its structured content, or the tool error's text.
    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        answer["result"].clone()
    }

    /// Closes the client's end; the session ends and `over` returns.
    async fn close(self) {
        let Client {
            mut to_server,
            served,
            ..
        } = self;
        to_server.shutdown().await.expect("close the stream");
        drop(to_server);
        let ended = tokio::time::timeout(Duration::from_secs(30), served)
            .await
            .expect("the session ends when its client closes the stream")
            .expect("the session task");
        assert_eq!(
            ended,
            Ok(()),
            "a session its client closed ends without error"
        );
    }
}

/// The bound a refusal names (`error.data.bound`), and its JSON-RPC code.
fn refused_by(answer: &Value) -> (i64, String) {
    let error = &answer["error"];
    assert!(error.is_object(), "refused: {answer}");
    (
        error["code"].as_i64().unwrap_or_default(),
        error["data"]["bound"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lists_the_six_tools_and_answers_from_the_data() {
    let mut client = Client::start().await;
    let tools = client.request("tools/list", json!({})).await;
    let mut names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "cite_provisions",
            "inspect_dataset",
            "list_datasets",
            "query_records",
            "summarize_records",
            "verify_answer"
        ]
    );

    let listed = client.call("list_datasets", json!({})).await;
    assert_eq!(
        common::ids_listed(&listed),
        ["procedures", "secret"],
        "a stream's owner sees every dataset"
    );

    // A number the engine computed, with its provenance.
    let counted = client
        .call(
            "summarize_records",
            json!({"dataset_id": "procedures", "metrics": ["count"]}),
        )
        .await;
    assert_ne!(counted["isError"], json!(true), "{counted:.300}");
    let envelope = common::envelope(&counted);
    assert_eq!(
        envelope["data"]["rows"][0][0],
        json!(75_071),
        "every record counted: {:.300}",
        envelope.to_string()
    );
    assert!(
        envelope["provenance"]["sources"][0]["contentHash"].is_string(),
        "an answer carries its provenance: {:.300}",
        envelope.to_string()
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_past_their_bounds_are_refused_before_any_work() {
    let mut client = Client::start().await;

    let long_uri = format!("tally://datasets/{}", "x".repeat(5000));
    let answer = client
        .request("resources/read", json!({"uri": long_uri}))
        .await;
    assert_eq!(
        refused_by(&answer),
        (-32602, "MAX_URI_BYTES".into()),
        "{answer}"
    );

    let long_value = "a".repeat(1001);
    let answer = client
        .request(
            "completion/complete",
            json!({
                "ref": {"type": "ref/resource", "uri": "tally://datasets/{id}"},
                "argument": {"name": "id", "value": long_value}
            }),
        )
        .await;
    assert_eq!(
        refused_by(&answer),
        (-32602, "MAX_COMPLETION_CHARS".into()),
        "{answer}"
    );

    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("a{i}"), json!("v"))).collect();
    let prompts = client.request("prompts/list", json!({})).await;
    let prompt = prompts["result"]["prompts"][0]["name"]
        .as_str()
        .expect("a prompt is served")
        .to_string();
    let answer = client
        .request("prompts/get", json!({"name": prompt, "arguments": many}))
        .await;
    assert_eq!(
        refused_by(&answer),
        (-32602, "MAX_ARGUMENTS".into()),
        "{answer}"
    );

    // The refusals cost the session nothing: it still answers.
    let pong = client.request("ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_gets_an_answer_even_one_that_is_not_json() {
    let mut client = Client::start().await;
    client.send_line("this is not JSON").await;
    let answer = client.answer().await;
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], json!(-32700), "{answer}");

    client
        .send_line(r#"{"jsonrpc": "2.0", "id": 41, "method": 7}"#)
        .await;
    let answer = client.answer().await;
    assert_eq!(
        answer["id"],
        json!(41),
        "the id is kept when it can be read: {answer}"
    );
    assert_eq!(answer["error"]["code"], json!(-32600), "{answer}");

    // An unknown dataset is a tool error that says what would work, not a protocol failure.
    let unknown = client
        .call("inspect_dataset", json!({"dataset_id": "no_such_dataset"}))
        .await;
    assert_eq!(unknown["isError"], json!(true), "{unknown:.300}");
    let text = unknown.to_string();
    assert!(
        text.contains("no_such_dataset") && text.contains("list_datasets"),
        "the error names the id and what would work: {text:.600}"
    );
    client.close().await;
}
