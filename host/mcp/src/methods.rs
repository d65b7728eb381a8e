//! The MCP methods this server answers, each with the requests that probe what it may tell a
//! caller. It is the table the scoped walk (`tests/e2e/test_gate.py`) goes through with a
//! token that may not see one dataset, asserting that nothing of that dataset appears in any
//! answer or notification; the same test checks the table against every method of the
//! protocol the official SDK knows (a method answered but missing here, or listed here but
//! answered "method not found", fails it), so a new surface is walked as soon as it exists.
//!
//! Probes are JSON `params` in which `@DATASET@` stands for a dataset id, `@FIELD@` for one
//! of its fields, `@VALUE@` for one of that field's codes and `@PREFIX@` for the first
//! letters of the id. Plain data, public so the test suite can write it out (`to_json`).

/// One method: its name, the protocol revisions in which it is answered, and its probes.
#[derive(Debug, Clone, Copy)]
pub struct Method {
    pub name: &'static str,
    pub eras: &'static [&'static str],
    pub probes: &'static [&'static str],
}

pub const ERA_2025: &str = "2025-11-25";
pub const ERA_2026: &str = "2026-07-28";
const BOTH: &[&str] = &[ERA_2025, ERA_2026];

pub const METHODS: &[Method] = &[
    // The handshake of a 2025 session; the walk makes one for every session it opens.
    Method {
        name: "initialize",
        eras: &[ERA_2025],
        probes: &[],
    },
    Method {
        name: "server/discover",
        eras: &[ERA_2026],
        probes: &[r#"{}"#],
    },
    Method {
        name: "ping",
        eras: BOTH,
        probes: &[r#"{}"#],
    },
    Method {
        name: "tools/list",
        eras: BOTH,
        probes: &[r#"{}"#],
    },
    Method {
        name: "tools/call",
        eras: BOTH,
        probes: &[
            r#"{"name": "list_datasets", "arguments": {}}"#,
            r#"{"name": "list_datasets", "arguments": {"q": "@PREFIX@"}}"#,
            r#"{"name": "inspect_dataset", "arguments": {"dataset_id": "@DATASET@"}}"#,
            r#"{"name": "query_records", "arguments": {"dataset_id": "@DATASET@", "q": "@VALUE@"}}"#,
            r#"{"name": "query_records", "arguments": {"dataset_id": "@DATASET@", "where": {"@FIELD@": ["@VALUE@"]}}}"#,
            r#"{"name": "summarize_records", "arguments": {"dataset_id": "@DATASET@", "group_by": ["@FIELD@"]}, "_meta": {"progressToken": "walk"}}"#,
            r#"{"name": "cite_provisions", "arguments": {"dataset_id": "@DATASET@"}}"#,
            r#"{"name": "verify_answer", "arguments": {"envelope": {"data": {}, "provenance": {"generatedAt": "2026-01-01T00:00:00Z", "sources": [], "transformations": [], "warnings": [], "query": {"tool": "summarize_records", "arguments": {"dataset_id": "@DATASET@"}, "tallyVersion": "0.1.0"}}}}}"#,
        ],
    },
    Method {
        name: "resources/list",
        eras: BOTH,
        probes: &[r#"{}"#],
    },
    Method {
        name: "resources/templates/list",
        eras: BOTH,
        probes: &[r#"{}"#],
    },
    Method {
        name: "resources/read",
        eras: BOTH,
        probes: &[
            r#"{"uri": "tally://datasets/@DATASET@"}"#,
            r#"{"uri": "tally://datasets/@DATASET@/fields/@FIELD@"}"#,
        ],
    },
    Method {
        name: "resources/subscribe",
        eras: &[ERA_2025],
        probes: &[r#"{"uri": "tally://datasets/@DATASET@"}"#],
    },
    Method {
        name: "resources/unsubscribe",
        eras: &[ERA_2025],
        probes: &[r#"{"uri": "tally://datasets/@DATASET@/fields/@FIELD@"}"#],
    },
    Method {
        name: "prompts/list",
        eras: BOTH,
        probes: &[r#"{}"#],
    },
    Method {
        name: "prompts/get",
        eras: BOTH,
        probes: &[
            r#"{"name": "explore_dataset", "arguments": {"dataset_id": "@DATASET@"}}"#,
            r#"{"name": "compare_groups", "arguments": {"dataset_id": "@DATASET@", "group_by": "@FIELD@"}}"#,
            r#"{"name": "find_records", "arguments": {"dataset_id": "@DATASET@", "q": "@VALUE@"}}"#,
            r#"{"name": "find_legal_basis", "arguments": {"dataset_id": "@DATASET@", "where_field": "@FIELD@", "where_value": "@VALUE@"}}"#,
        ],
    },
    Method {
        name: "completion/complete",
        eras: BOTH,
        probes: &[
            r#"{"ref": {"type": "ref/prompt", "name": "explore_dataset"}, "argument": {"name": "dataset_id", "value": "@PREFIX@"}}"#,
            r#"{"ref": {"type": "ref/resource", "uri": "tally://datasets/{id}"}, "argument": {"name": "id", "value": ""}}"#,
            r#"{"ref": {"type": "ref/prompt", "name": "compare_groups"}, "argument": {"name": "group_by", "value": ""}, "context": {"arguments": {"dataset_id": "@DATASET@"}}}"#,
            r#"{"ref": {"type": "ref/prompt", "name": "compare_groups"}, "argument": {"name": "where_value", "value": ""}, "context": {"arguments": {"dataset_id": "@DATASET@", "where_field": "@FIELD@"}}}"#,
            r#"{"ref": {"type": "ref/resource", "uri": "tally://datasets/{id}/fields/{name}"}, "argument": {"name": "name", "value": ""}, "context": {"arguments": {"id": "@DATASET@"}}}"#,
        ],
    },
    // 2025 sessions that set a level are told of catalog changes they may see.
    Method {
        name: "logging/setLevel",
        eras: &[ERA_2025],
        probes: &[r#"{"level": "debug"}"#],
    },
    // Calls run as tasks (the tasks extension): a task is its caller's alone, so a task id
    // of another caller is answered as one that never existed.
    Method {
        name: "tasks/get",
        eras: BOTH,
        probes: &[r#"{"taskId": "@DATASET@"}"#],
    },
    Method {
        name: "tasks/update",
        eras: BOTH,
        probes: &[r#"{"taskId": "@DATASET@", "inputResponses": {}}"#],
    },
    Method {
        name: "tasks/cancel",
        eras: BOTH,
        probes: &[r#"{"taskId": "@DATASET@"}"#],
    },
    // A stream of change notifications; the walk holds one open while the catalog changes.
    Method {
        name: "subscriptions/listen",
        eras: &[ERA_2026],
        probes: &[],
    },
];

/// The table as JSON, for the test suite (`tests/e2e/test_gate.py` reads it as
/// `methods.json`).
pub fn to_json() -> String {
    let mut out = String::from("[");
    for (i, m) in METHODS.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let eras: Vec<String> = m.eras.iter().map(|e| format!("\"{e}\"")).collect();
        out.push_str(&format!(
            "{{\"name\":\"{}\",\"eras\":[{}],\"probes\":[{}]}}",
            m.name,
            eras.join(","),
            m.probes.join(",")
        ));
    }
    out.push(']');
    out
}
