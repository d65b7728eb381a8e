//! The stdio framing in front of rmcp: every line a client sends gets an answer.
//!
//! rmcp drops lines that are not JSON (deliberately: answering garbage can start an error
//! storm between two programs) and answers messages it cannot read without their id. A
//! client that sent a request with a typo then waits forever. Here each line is read first:
//! a line that is not JSON is answered with −32700 (parse error), a JSON value that is not a
//! message MCP can read with −32600 (invalid request) carrying the request's id when it can
//! be read, and only well-formed messages reach rmcp. rmcp's output and these answers share
//! stdout through one writer, a whole line at a time.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest line read: requests are small (HTTP bodies are capped at 1 MiB by default);
/// a longer line is answered with an error and skipped.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The error answer to a line, if it needs one instead of reaching rmcp.
pub fn refusal(line: &[u8]) -> Option<Value> {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) if too_deep(&e) => {
            // Valid JSON, nested past what is read: the request is refused, and with its id
            // when one can be found without building the tree, so the client is not left
            // waiting for an answer that never comes.
            let message = format!(
                "Invalid Request: the message is nested deeper than {MAX_DEPTH} levels, the most this server reads"
            );
            return Some(match request_id(line) {
                Some(id) => error(id, -32600, message),
                None => {
                    if !DEEP_WITHOUT_ID_LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::warn!(
                            "a stdio line nested deeper than {MAX_DEPTH} levels had no id that could be read; it was answered with id null (said once)"
                        );
                    }
                    error(Value::Null, -32600, message)
                }
            });
        }
        Err(e) => {
            return Some(error(
                Value::Null,
                -32700,
                format!("Parse error: the line is not JSON ({e})"),
            ));
        }
    };
    if serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(value.clone()).is_ok() {
        return None;
    }
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_number())
        .cloned();
    let method = value.get("method").and_then(Value::as_str);
    // A notification is never answered (JSON-RPC), and rmcp ignores those it does not know.
    if id.is_none() && method.is_some() && value.get("id").is_none() {
        return None;
    }
    let why = match (&value, method) {
        (Value::Array(_), _) => {
            "a batch (JSON array) is not accepted; send one message per line".to_string()
        }
        (Value::Object(m), _) if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") => {
            "the message needs \"jsonrpc\": \"2.0\"".to_string()
        }
        (Value::Object(_), None)
            if value.get("result").is_none() && value.get("error").is_none() =>
        {
            "the message has no \"method\"".to_string()
        }
        (Value::Object(_), Some(m)) => {
            format!("the parameters of `{m}` do not have the form MCP defines for it")
        }
        (Value::Object(_), None) => {
            "the response does not have the form JSON-RPC defines".to_string()
        }
        _ => "a message is a JSON object".to_string(),
    };
    Some(error(
        id.unwrap_or(Value::Null),
        -32600,
        format!("Invalid Request: {why}"),
    ))
}

/// How deep a message may nest: serde_json's recursion limit, which it refuses past.
pub const MAX_DEPTH: usize = 128;

static DEEP_WITHOUT_ID_LOGGED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

fn too_deep(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("recursion limit exceeded")
}

/// The `id` member of the top-level object of `line` (a string or a number), found by
/// walking the bytes without building the tree, so any depth costs one pass.
pub fn request_id(line: &[u8]) -> Option<Value> {
    let mut at = skip_space(line, 0);
    if line.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    loop {
        at = skip_space(line, at);
        if line.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(line, at)?;
        let key: String = serde_json::from_slice(&line[at..key_end]).ok()?;
        at = skip_space(line, key_end);
        if line.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(line, at + 1);
        let value_end = value_end(line, at)?;
        if key == "id" {
            return serde_json::from_slice::<Value>(&line[at..value_end])
                .ok()
                .filter(|v| v.is_string() || v.is_number());
        }
        at = skip_space(line, value_end);
        match line.get(at) {
            Some(b',') => at += 1,
            _ => return None,
        }
    }
}

fn skip_space(line: &[u8], mut at: usize) -> usize {
    while line.get(at).is_some_and(|b| b.is_ascii_whitespace()) {
        at += 1;
    }
    at
}

/// The index after the string starting at `at` (a `"`).
fn string_end(line: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while let Some(&b) = line.get(i) {
        match b {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The index after the value starting at `at`, nested values skipped by counting brackets.
fn value_end(line: &[u8], at: usize) -> Option<usize> {
    match *line.get(at)? {
        b'"' => string_end(line, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&b) = line.get(i) {
                match b {
                    b'"' => {
                        i = string_end(line, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = at;
            while line
                .get(i)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
            {
                i += 1;
            }
            Some(i)
        }
    }
}

fn error(id: Value, code: i64, message: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// Connects `input`/`output` (the process's stdin and stdout) to rmcp through checked lines.
/// Returns the pair rmcp serves on, and the task that writes stdout (await it after the
/// session ends, so the last answers are flushed).
pub fn framed<R, W>(
    input: R,
    output: W,
) -> (
    (
        tokio::io::ReadHalf<tokio::io::DuplexStream>,
        tokio::io::WriteHalf<tokio::io::DuplexStream>,
    ),
    tokio::task::JoinHandle<()>,
)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (rmcp_read, rmcp_write) = tokio::io::split(theirs);
    let (from_rmcp, mut to_rmcp) = tokio::io::split(ours);
    let (answers, mut answered) = mpsc::channel::<Vec<u8>>(64);
    let writer_answers = answers.clone();

    // stdin → checked → rmcp (or an answer).
    tokio::spawn(async move {
        let mut reader = BufReader::new(input);
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line(&mut reader, &mut line).await {
                Ok(Line::End) => break,
                Ok(Line::TooLong) => {
                    let answer = error(
                        Value::Null,
                        -32700,
                        format!(
                            "Parse error: the line is longer than {MAX_LINE_BYTES} bytes and was skipped"
                        ),
                    );
                    if answers.send(answer.to_string().into_bytes()).await.is_err() {
                        break;
                    }
                }
                Ok(Line::Full) => {
                    // A byte-order mark is allowed before JSON; rmcp gets the line without it.
                    let trimmed = line.trim_ascii();
                    let trimmed = trimmed.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(trimmed);
                    if trimmed.is_empty() {
                        continue;
                    }
                    match refusal(trimmed) {
                        Some(answer) => {
                            if answers.send(answer.to_string().into_bytes()).await.is_err() {
                                break;
                            }
                        }
                        None => {
                            if to_rmcp.write_all(trimmed).await.is_err()
                                || to_rmcp.write_all(b"\n").await.is_err()
                            {
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::error!("reading stdin failed: {e}");
                    break;
                }
            }
        }
        // End of input: rmcp sees it and ends the session.
        let _ = to_rmcp.shutdown().await;
    });

    // rmcp → lines → the one writer.
    tokio::spawn(async move {
        let mut reader = BufReader::new(from_rmcp);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let trimmed = line.trim_ascii_end().to_vec();
                    if writer_answers.send(trimmed).await.is_err() {
                        break;
                    }
                }
            }
        }
    });

    let output = Arc::new(tokio::sync::Mutex::new(output));
    let writer = tokio::spawn(async move {
        while let Some(message) = answered.recv().await {
            let mut out = output.lock().await;
            if out.write_all(&message).await.is_err()
                || out.write_all(b"\n").await.is_err()
                || out.flush().await.is_err()
            {
                break;
            }
        }
    });
    ((rmcp_read, rmcp_write), writer)
}

enum Line {
    Full,
    TooLong,
    End,
}

/// Reads one line into `line` (without reading more than [`MAX_LINE_BYTES`] into memory).
async fn read_line<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if line.is_empty() {
                Line::End
            } else {
                Line::Full
            });
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let used = chunk.len();
        if !too_long {
            if line.len() + used > MAX_LINE_BYTES {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        reader.consume(used);
        if done {
            return Ok(if too_long { Line::TooLong } else { Line::Full });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 14, "stdio requests that fail to parse get no answer"): each kind of
    /// bad line gets its JSON-RPC error, with the id when it can be read.
    #[test]
    fn malformed_stdio_requests_are_answered() {
        let e = refusal(b"this is not json").expect("answered");
        assert_eq!(e["error"]["code"], -32700);
        assert_eq!(e["id"], Value::Null);

        let e = refusal(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"oops"}"#)
            .expect("answered");
        assert_eq!(e["error"]["code"], -32600);
        assert_eq!(e["id"], 7);

        let e = refusal(br#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#).expect("answered");
        assert_eq!(e["error"]["code"], -32600);
        assert_eq!(e["id"], "a");

        let e = refusal(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).expect("answered");
        assert_eq!(e["error"]["code"], -32600);

        assert!(refusal(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_none());
        assert!(
            refusal(br#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#).is_none(),
            "notifications are never answered"
        );
    }

    /// Regression (issue 36, "a stdio line nested too deep gets −32700 with id null"): the
    /// client waited forever for its id. The id is found without building the tree.
    #[test]
    fn a_line_nested_too_deep_is_answered_with_its_id() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"x","arguments":{{"a":{}1{}}}}},"id":"deep-1"}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let e = refusal(deep.as_bytes()).expect("answered");
        assert_eq!(e["id"], "deep-1");
        assert_eq!(e["error"]["code"], -32600);
        assert!(e["error"]["message"].as_str().unwrap_or("").contains("128"));
        // The id first, a number, escapes in strings before it.
        let deep = format!(
            r#"{{"id": 42, "s": "a \" {{ [ b", "p": {}{}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        assert_eq!(refusal(deep.as_bytes()).expect("answered")["id"], 42);
        // No id to be found: null, and said once in the log.
        let deep = format!(r#"{{"params": {}{}}}"#, "[".repeat(300), "]".repeat(300));
        assert_eq!(
            refusal(deep.as_bytes()).expect("answered")["id"],
            Value::Null
        );
        assert_eq!(
            request_id(br#"{"a": {"id": 1}, "id": "top"}"#),
            Some(json!("top"))
        );
        assert_eq!(request_id(br#"{"id": {"x": 1}}"#), None);
        assert_eq!(request_id(b"[1,2]"), None);
    }
}
