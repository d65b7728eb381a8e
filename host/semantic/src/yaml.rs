//! A YAML document as a tree of nodes that remember where they were written.
//!
//! The dataset model is read from this tree by hand rather than through serde, because every
//! diagnostic must name the line and the key path of the offending value, including for checks
//! that only make sense after parsing (a duplicate field, a computed measure naming a missing
//! field). Scalars are resolved with the YAML 1.2 core schema, so `2025-07-24` stays a string
//! and `no` stays a string (unlike YAML 1.1 parsers).

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// Largest document accepted: dataset definitions are a few hundred lines; this bound keeps a
/// hostile file from costing much before it is refused.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;
/// Upper bound on nodes after alias expansion (defuses "billion laughs" documents).
const MAX_NODES: usize = 200_000;
/// Upper bound on the text (keys and scalars) after alias expansion. A node count alone does
/// not bound memory: one 3 MiB string referenced 300,000 times is 300,000 nodes but almost a
/// terabyte of text. Twice the largest document leaves room for ordinary anchors.
pub const MAX_EXPANDED_BYTES: usize = 2 * MAX_DOCUMENT_BYTES;
/// Upper bound on nesting depth.
const MAX_DEPTH: usize = 64;

/// A position in the source text: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    fn from_span(span: &Span) -> Pos {
        Pos {
            line: span.start.line(),
            column: span.start.col() + 1,
        }
    }
}

/// One YAML value and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys are kept in document order; keys are strings (other key types are refused).
    Map(Vec<(Key, Node)>),
}

/// A mapping key and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub pos: Pos,
    pub name: String,
}

impl Node {
    /// What kind of value this is, for messages ("expected a list, found a string").
    pub fn kind(&self) -> &'static str {
        match &self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The value converted to JSON (used for plugin `config` objects, handed on as they are).
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Seq(items) => {
                serde_json::Value::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.name.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// A document that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub pos: Pos,
    /// The key path being read when the error was found (`fields[3].codelist`).
    pub path: String,
    pub message: String,
}

/// Parses one YAML document. An empty document is `Null`; more than one document is refused.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(SyntaxError {
            pos: Pos { line: 1, column: 1 },
            path: String::new(),
            message: format!(
                "the file is {} bytes; a dataset definition may be at most {} bytes",
                text.len(),
                MAX_DOCUMENT_BYTES
            ),
        });
    }
    let mut builder = TreeBuilder::default();
    let mut parser = Parser::new_from_str(text);
    let mut documents = 0usize;
    for item in &mut parser {
        let (event, span) = item.map_err(|e| SyntaxError {
            pos: Pos {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            },
            path: builder.path(),
            message: e.info().to_string(),
        })?;
        if let Event::DocumentStart(_) = event {
            documents += 1;
            if documents > 1 {
                return Err(SyntaxError {
                    pos: Pos::from_span(&span),
                    path: String::new(),
                    message: "a second YAML document starts here; a dataset definition is one document (remove the `---` separator)".into(),
                });
            }
        }
        builder.event(event, span).map_err(|mut e| {
            e.path = builder.path();
            e
        })?;
    }
    Ok(builder.root.unwrap_or(Node {
        pos: Pos { line: 1, column: 1 },
        value: Value::Null,
    }))
}

enum Frame {
    Seq {
        pos: Pos,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        pos: Pos,
        anchor: usize,
        entries: Vec<(Key, Node)>,
        pending_key: Option<Key>,
    },
}

#[derive(Default)]
struct TreeBuilder {
    stack: Vec<Frame>,
    /// Each anchored node with its size (nodes, text bytes), so an alias is costed before it
    /// is copied.
    anchors: HashMap<usize, (Node, Size)>,
    root: Option<Node>,
    nodes: usize,
    bytes: usize,
}

/// What a node costs once expanded: its nodes and the bytes of its keys and scalars.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    nodes: usize,
    bytes: usize,
}

impl TreeBuilder {
    /// The key path of the innermost value being built, for error messages.
    fn path(&self) -> String {
        let mut out = String::new();
        for frame in &self.stack {
            match frame {
                Frame::Seq { items, .. } => out.push_str(&format!("[{}]", items.len())),
                Frame::Map {
                    pending_key,
                    entries,
                    ..
                } => {
                    let key = pending_key
                        .as_ref()
                        .map(|k| k.name.as_str())
                        .or_else(|| entries.last().map(|(k, _)| k.name.as_str()));
                    if let Some(key) = key {
                        if !out.is_empty() {
                            out.push('.');
                        }
                        out.push_str(key);
                    }
                }
            }
        }
        out
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), SyntaxError> {
        let pos = Pos::from_span(&span);
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let value = resolve_scalar(&text, style, tag.as_deref().map(|t| t.suffix.as_str()));
                self.push(Node { pos, value }, anchor, false)?;
            }
            Event::SequenceStart(anchor, _) => {
                self.enter(pos)?;
                self.stack.push(Frame::Seq {
                    pos,
                    anchor,
                    items: Vec::new(),
                });
            }
            Event::MappingStart(anchor, _) => {
                self.enter(pos)?;
                self.stack.push(Frame::Map {
                    pos,
                    anchor,
                    entries: Vec::new(),
                    pending_key: None,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { pos, anchor, items }) => (
                        Node {
                            pos,
                            value: Value::Seq(items),
                        },
                        anchor,
                    ),
                    Some(Frame::Map {
                        pos,
                        anchor,
                        entries,
                        ..
                    }) => (
                        Node {
                            pos,
                            value: Value::Map(entries),
                        },
                        anchor,
                    ),
                    None => return Ok(()),
                };
                self.push(node, anchor, false)?;
            }
            Event::Alias(id) => {
                let size = self
                    .anchors
                    .get(&id)
                    .map(|(_, s)| *s)
                    .ok_or_else(|| SyntaxError {
                        pos,
                        path: String::new(),
                        message: "this alias refers to an anchor that is not defined before it"
                            .into(),
                    })?;
                // Costed before the copy is made: the copy is what a bomb is made of.
                self.nodes = self.nodes.saturating_add(size.nodes);
                if self.nodes > MAX_NODES {
                    return Err(too_many_nodes(pos));
                }
                self.bytes = self.bytes.saturating_add(size.bytes);
                if self.bytes > MAX_EXPANDED_BYTES {
                    return Err(too_many_bytes(pos));
                }
                let node = self
                    .anchors
                    .get(&id)
                    .map(|(n, _)| n.clone())
                    .unwrap_or(Node {
                        pos,
                        value: Value::Null,
                    });
                self.push(Node { pos, ..node }, 0, true)?;
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => {}
        }
        Ok(())
    }

    fn enter(&mut self, pos: Pos) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(SyntaxError {
                pos,
                path: String::new(),
                message: format!("nesting deeper than {MAX_DEPTH} levels"),
            });
        }
        Ok(())
    }

    /// Adds a finished node to its parent; `counted`: its text was costed already (an alias).
    fn push(&mut self, node: Node, anchor: usize, counted: bool) -> Result<(), SyntaxError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(too_many_nodes(node.pos));
        }
        if let (Value::Str(s), false) = (&node.value, counted) {
            self.bytes = self.bytes.saturating_add(s.len());
            if self.bytes > MAX_EXPANDED_BYTES {
                return Err(too_many_bytes(node.pos));
            }
        }
        if anchor != 0 {
            let size = measure(&node);
            self.anchors.insert(anchor, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                pending_key,
                ..
            }) => {
                match pending_key.take() {
                    None => {
                        let name = match &node.value {
                            Value::Str(s) => s.clone(),
                            Value::Int(i) => i.to_string(),
                            Value::Float(f) => f.to_string(),
                            Value::Bool(b) => b.to_string(),
                            Value::Null => {
                                return Err(SyntaxError {
                                    pos: node.pos,
                                    path: String::new(),
                                    message: "a mapping key is empty (null)".into(),
                                });
                            }
                            Value::Seq(_) | Value::Map(_) => {
                                return Err(SyntaxError {
                                pos: node.pos,
                                path: String::new(),
                                message: "a mapping key must be a plain string, not a list or mapping".into(),
                            });
                            }
                        };
                        if let Some((first, _)) = entries.iter().find(|(k, _)| k.name == name) {
                            return Err(SyntaxError {
                                pos: node.pos,
                                path: String::new(),
                                message: format!(
                                    "duplicate key `{name}` (first written on line {}); keep one of them",
                                    first.pos.line
                                ),
                            });
                        }
                        *pending_key = Some(Key {
                            pos: node.pos,
                            name,
                        });
                    }
                    Some(key) => entries.push((key, node)),
                }
            }
        }
        Ok(())
    }
}

fn too_many_nodes(pos: Pos) -> SyntaxError {
    SyntaxError {
        pos,
        path: String::new(),
        message: format!(
            "the document expands to more than {MAX_NODES} values (aliases included); a dataset definition is far smaller"
        ),
    }
}

fn too_many_bytes(pos: Pos) -> SyntaxError {
    SyntaxError {
        pos,
        path: String::new(),
        message: format!(
            "the document expands to more than {MAX_EXPANDED_BYTES} bytes of text (aliases included); a dataset definition is far smaller (remove the aliases that repeat large values)"
        ),
    }
}

/// The nodes and text bytes of a node once expanded (keys included).
fn measure(node: &Node) -> Size {
    let mut size = Size { nodes: 1, bytes: 0 };
    match &node.value {
        Value::Str(s) => size.bytes = s.len(),
        Value::Seq(items) => {
            for item in items {
                let s = measure(item);
                size.nodes = size.nodes.saturating_add(s.nodes);
                size.bytes = size.bytes.saturating_add(s.bytes);
            }
        }
        Value::Map(entries) => {
            for (k, v) in entries {
                let s = measure(v);
                size.nodes = size.nodes.saturating_add(s.nodes);
                size.bytes = size
                    .bytes
                    .saturating_add(s.bytes)
                    .saturating_add(k.name.len());
            }
        }
        _ => {}
    }
    size
}

/// The YAML 1.2 core schema for plain scalars; quoted scalars are always strings.
fn resolve_scalar(text: &str, style: ScalarStyle, tag: Option<&str>) -> Value {
    if style != ScalarStyle::Plain || tag == Some("str") {
        return Value::Str(text.to_string());
    }
    let t = text;
    match t {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && let Ok(i) = t.parse::<i64>()
    {
        return Value::Int(i);
    }
    if let Some(hex) = t.strip_prefix("0x")
        && let Ok(i) = i64::from_str_radix(hex, 16)
    {
        return Value::Int(i);
    }
    if let Some(oct) = t.strip_prefix("0o")
        && let Ok(i) = i64::from_str_radix(oct, 8)
    {
        return Value::Int(i);
    }
    if looks_like_float(digits)
        && let Ok(f) = t.parse::<f64>()
    {
        return Value::Float(f);
    }
    Value::Str(t.to_string())
}

/// `[-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?` without a regex.
fn looks_like_float(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut parts = mantissa.splitn(2, '.');
    let int = parts.next().unwrap_or("");
    let frac = parts.next();
    let int_ok = int.bytes().all(|b| b.is_ascii_digit());
    let frac_ok = frac.is_none_or(|f| f.bytes().all(|b| b.is_ascii_digit()));
    let has_digits = !int.is_empty() || frac.is_some_and(|f| !f.is_empty());
    let exp_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    });
    int_ok && frac_ok && has_digits && exp_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(text: &str) -> Value {
        parse(&format!("k: {text}\n"))
            .map(|n| match n.value {
                Value::Map(mut e) => e.remove(0).1.value,
                other => other,
            })
            .unwrap_or(Value::Null)
    }

    #[test]
    fn core_schema_scalars() {
        assert_eq!(scalar("2025-07-24"), Value::Str("2025-07-24".into()));
        assert_eq!(scalar("no"), Value::Str("no".into()));
        assert_eq!(scalar("'12'"), Value::Str("12".into()));
        assert_eq!(scalar("12"), Value::Int(12));
        assert_eq!(scalar("-3"), Value::Int(-3));
        assert_eq!(scalar("1.5"), Value::Float(1.5));
        assert_eq!(scalar("1e3"), Value::Float(1000.0));
        assert_eq!(scalar("~"), Value::Null);
        assert_eq!(scalar("true"), Value::Bool(true));
        assert_eq!(scalar("1 実施済"), Value::Str("1 実施済".into()));
        assert_eq!(scalar("."), Value::Str(".".into()));
    }

    #[test]
    fn positions_are_one_based() {
        let doc = parse("a: 1\nb:\n  - x\n  - y\n").expect("parses");
        let Value::Map(entries) = doc.value else {
            panic!("expected a map")
        };
        assert_eq!(entries[1].0.pos, Pos { line: 2, column: 1 });
        let Value::Seq(items) = &entries[1].1.value else {
            panic!("expected a list")
        };
        assert_eq!(items[1].pos, Pos { line: 4, column: 5 });
    }

    #[test]
    fn duplicate_keys_are_refused_with_both_lines() {
        let err = parse("a: 1\nb: 2\na: 3\n").expect_err("duplicate");
        assert_eq!(err.pos.line, 3);
        assert!(err.message.contains("line 1"), "{}", err.message);
    }

    #[test]
    fn alias_bombs_are_bounded() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let err = parse(&doc).expect_err("bounded");
        assert!(err.message.contains("more than"), "{}", err.message);
    }

    /// Regression (issue 14, "YAML alias bomb"): one large string referenced many times is
    /// few nodes but unbounded text; it is refused by its expanded size, before it is copied.
    #[test]
    fn yaml_alias_bomb_of_one_large_string_is_refused_by_bytes() {
        let big = "x".repeat(1024 * 1024);
        let mut doc = format!("a: &big \"{big}\"\nb: [");
        for _ in 0..300 {
            doc.push_str("*big, ");
        }
        doc.push_str("]\n");
        assert!(doc.len() < MAX_DOCUMENT_BYTES);
        let err = parse(&doc).expect_err("bounded by bytes");
        assert!(err.message.contains("bytes of text"), "{}", err.message);
        // A handful of aliases of a small value is ordinary YAML.
        let ok = "a: &v [1, 2]\nb: *v\nc: *v\n";
        assert!(parse(ok).is_ok());
    }

    #[test]
    fn syntax_errors_have_positions() {
        let err = parse("a: [1, 2\nb: 3\n").expect_err("unclosed");
        assert!(err.pos.line >= 1);
        assert!(!err.message.is_empty());
    }
}
