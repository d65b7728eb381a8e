//! Asking the user instead of refusing: when a name in a call fits several fields equally
//! (`手続が行われるイベント` fits the individuals' and the businesses' one), a client that
//! declared form elicitation is asked to choose among them, each with its description, and the
//! call runs with the choice, which its answer discloses in `resolved_fields`
//! (`chosen_by: "the user"`). A client that cannot be asked, or a user who declines, gets
//! today's refusal with the candidates.
//!
//! How the question travels depends on the protocol era: a 2025 session is sent
//! `elicitation/create` while the call waits; a 2026-07-28 call is answered with an
//! `input_required` result whose `requestState` carries the choices made so far, sealed under
//! the server's key and bound to the caller, the tool, the arguments and a deadline, and the
//! client calls again with the answer (`inputResponses`); a call run as a task asks through
//! the task (`input_required`, answered with `tasks/update`).
//!
//! A question the server waits on (a 2025 session's call, a task) holds that call, and its
//! request slot or its task's place, until it is answered or given up after [`WAIT`]: one
//! caller has at most [`WAITING_PER_CALLER`] such questions at once and the server
//! [`WAITING_IN_ALL`] ([`Waiting`]). Past them the user is not asked, and the call is refused
//! as before, its refusal naming the bound and when the first waiting question is given up.
//! A 2026-07-28 question holds nothing on the server (its state travels with the client).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::ErrorData;
use rmcp::model::{ClientCapabilities, ElicitRequestParams, ElicitationSchema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tally_engine::EngineError;
use tally_semantic::resolve::Choice;
use tally_semantic::{Ambiguous, Tool};

/// Ambiguous names one call asks about at most; past them it is refused as before.
pub const MAX_QUESTIONS: usize = 4;
/// The key of the question in `inputRequests` and of its answer in `inputResponses`.
pub const KEY: &str = "choice";
/// How long a 2025 session's call, or a task, waits for its user's answer; past it, it is
/// refused as before. Two minutes: a person choosing among a few named fields answers in
/// seconds, and the wait holds a call and its slot (it was ten minutes, which let unanswered
/// questions hold a caller's slots for as long).
pub const WAIT: Duration = Duration::from_secs(120);
/// Questions of one caller the server waits on at once.
pub const WAITING_PER_CALLER: usize = 4;
/// Questions of all callers the server waits on at once.
pub const WAITING_IN_ALL: usize = 32;
/// How long a question's `requestState` is honoured.
const STATE_LIFETIME: Duration = Duration::from_secs(600);
/// What the state is sealed for (a cursor cannot be passed off as one, nor the reverse).
const PURPOSE: &str = "tally choice state v1";

/// Whether the client declared form elicitation (an empty `elicitation` capability means
/// form).
pub fn can_ask(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The ambiguity a refused call met, if that is why it was refused.
pub fn ambiguity(result: &Result<Value, EngineError>) -> Option<&Ambiguous> {
    match result {
        Err(EngineError::Request(r)) => r.ambiguous.as_deref(),
        _ => None,
    }
}

/// The first protocol version whose elicitation has titled choices (`oneOf` of `const` and
/// `title`); before it, a choice is `enum` with its titles in `enumNames`.
pub const TITLED_CHOICES_SINCE: &str = "2025-11-25";

/// The form of a choice a session's protocol version expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceForm {
    /// `oneOf: [{const, title}]` (2025-11-25 and later).
    Titled,
    /// `enum` with `enumNames` (2025-06-18 and earlier): a client of that version shows
    /// `oneOf` as a free-text box.
    EnumNames,
}

impl ChoiceForm {
    /// The form for a session that negotiated `version` (none known: the current form).
    pub fn of(version: Option<&str>) -> ChoiceForm {
        match version {
            Some(v) if v < TITLED_CHOICES_SINCE => ChoiceForm::EnumNames,
            _ => ChoiceForm::Titled,
        }
    }
}

/// The question for an ambiguity: one choice among the names it fits, each titled with its
/// description, in the current form.
pub fn question(tool: Tool, ambiguous: &Ambiguous) -> ElicitRequestParams {
    question_in(tool, ambiguous, ChoiceForm::Titled)
}

/// The question for an ambiguity in the form the session's protocol version expects.
pub fn question_in(tool: Tool, ambiguous: &Ambiguous, form: ChoiceForm) -> ElicitRequestParams {
    let titles: Vec<String> = ambiguous
        .choices
        .iter()
        .map(|c| match &c.description {
            Some(d) if !d.trim().is_empty() => format!("{} — {}", c.name, d.trim()),
            _ => c.name.clone(),
        })
        .collect();
    let mut name = json!({
        "type": "string",
        "title": capitalized(ambiguous.what),
        "description": format!("the {} meant by `{}`", ambiguous.what, ambiguous.input),
    });
    match form {
        ChoiceForm::Titled => {
            name["oneOf"] = ambiguous
                .choices
                .iter()
                .zip(&titles)
                .map(|(c, title)| json!({ "const": c.name, "title": title }))
                .collect();
        }
        ChoiceForm::EnumNames => {
            name["enum"] = ambiguous.choices.iter().map(|c| json!(c.name)).collect();
            name["enumNames"] = json!(titles);
        }
    }
    let schema = json!({
        "type": "object",
        "properties": { "name": name },
        "required": ["name"],
    });
    let requested_schema: ElicitationSchema = serde_json::from_value(schema)
        .unwrap_or_else(|_| ElicitationSchema::new(Default::default()));
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "`{}` in `{}` of {} fits {} {}s equally. Which one is meant?",
            ambiguous.input,
            ambiguous.parameter,
            tool.name(),
            ambiguous.choices.len(),
            ambiguous.what
        ),
        requested_schema,
    }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// What the user answered: `Ok(Some(choice))` for one of the names offered, `Ok(None)` when
/// they declined or dismissed the question, an error for an answer that is not one (a name
/// not offered, a malformed result).
pub fn answer(ambiguous: &Ambiguous, result: &Value) -> Result<Option<Choice>, ErrorData> {
    let malformed = |why: &str| {
        ErrorData::invalid_params(
            format!(
                "the answer to the question about `{}` is not one: {why}; answer with {{\"action\": \"accept\", \"content\": {{\"name\": <one of the names offered>}}}}, or decline",
                ambiguous.input
            ),
            None,
        )
    };
    let action = result
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("it has no `action`"))?;
    match action {
        "accept" => {}
        "decline" | "cancel" => return Ok(None),
        _ => return Err(malformed("its `action` is none of accept, decline, cancel")),
    }
    let name = result
        .get("content")
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("it has no `content.name`"))?;
    if !ambiguous.choices.iter().any(|c| c.name == name) {
        return Err(malformed("`content.name` is not one of the names offered"));
    }
    Ok(Some(Choice {
        parameter: ambiguous.parameter.clone(),
        input: ambiguous.input.clone(),
        name: name.to_string(),
    }))
}

/// The questions the server waits on, with the caller each was put to and when.
#[derive(Debug)]
pub struct Waiting {
    asked: Mutex<Asking>,
    per_caller: usize,
    in_all: usize,
}

#[derive(Debug, Default)]
struct Asking {
    next: u64,
    waits: BTreeMap<u64, (String, Instant)>,
}

/// One question waited on; dropping it (answered, given up, or the call gone) frees its place.
#[derive(Debug)]
pub struct Wait {
    waiting: Arc<Waiting>,
    id: u64,
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.waiting.lock().waits.remove(&self.id);
    }
}

impl Default for Waiting {
    fn default() -> Self {
        Waiting::new(WAITING_PER_CALLER, WAITING_IN_ALL)
    }
}

impl Waiting {
    pub fn new(per_caller: usize, in_all: usize) -> Waiting {
        Waiting {
            asked: Mutex::default(),
            per_caller: per_caller.max(1),
            in_all: in_all.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Asking> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for one more question of `caller`, or why there is none: the bound it would
    /// pass and when the first question waited on is given up.
    pub fn ask(self: &Arc<Self>, caller: &str) -> Result<Wait, String> {
        let mut asking = self.lock();
        let now = Instant::now();
        let frees_in = |waits: &mut dyn Iterator<Item = &Instant>| {
            waits
                .map(|at| (*at + WAIT).saturating_duration_since(now).as_secs())
                .min()
                .unwrap_or(0)
        };
        let mine: Vec<&Instant> = asking
            .waits
            .values()
            .filter(|(c, _)| c == caller)
            .map(|(_, at)| at)
            .collect();
        if mine.len() >= self.per_caller {
            return Err(format!(
                "this caller already has {} questions waiting for its user's answer, the most one caller may have ({}, WAITING_PER_CALLER); the first of them is given up within {} s at the latest (a question waits {} s)",
                mine.len(),
                self.per_caller,
                frees_in(&mut mine.into_iter()),
                WAIT.as_secs()
            ));
        }
        if asking.waits.len() >= self.in_all {
            return Err(format!(
                "the server already waits for {} answers from users, the most it waits for at once ({}, WAITING_IN_ALL); the first of them is given up within {} s at the latest",
                asking.waits.len(),
                self.in_all,
                frees_in(&mut asking.waits.values().map(|(_, at)| at))
            ));
        }
        let id = asking.next;
        asking.next += 1;
        asking.waits.insert(id, (caller.to_string(), now));
        Ok(Wait {
            waiting: Arc::clone(self),
            id,
        })
    }
}

/// The refusal of an ambiguous call whose user was not asked, saying why (the bound on
/// questions waited on); any other result as it is.
pub fn not_asked(mut result: Result<Value, EngineError>, why: &str) -> Result<Value, EngineError> {
    if let Err(EngineError::Request(refusal)) = &mut result {
        refusal.message = format!(
            "{}; the user was not asked to choose: {why}",
            refusal.message
        );
        refusal.hint = Some(match refusal.hint.take() {
            Some(hint) => format!(
                "{hint}; or answer the questions already asked (or let them end) and call again"
            ),
            None => "name one of the candidates exactly, or answer the questions already asked (or let them end) and call again".into(),
        });
    }
    result
}

/// What a 2026-07-28 question carries to the client and back: the choices made so far, the
/// question asked, and what binds it to one call of one caller until a deadline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    caller: String,
    call: String,
    expires: u64,
    pub chosen: Vec<Choice>,
    asked: Asked,
}

/// The question a state was sealed with.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Asked {
    what: String,
    parameter: String,
    input: String,
    names: Vec<String>,
}

impl State {
    pub fn new(
        caller: &str,
        tool: Tool,
        arguments: &Value,
        chosen: Vec<Choice>,
        asked: &Ambiguous,
    ) -> State {
        State {
            caller: caller.to_string(),
            call: digest(tool, arguments),
            expires: now() + STATE_LIFETIME.as_secs(),
            chosen,
            asked: Asked {
                what: asked.what.to_string(),
                parameter: asked.parameter.clone(),
                input: asked.input.clone(),
                names: asked.choices.iter().map(|c| c.name.clone()).collect(),
            },
        }
    }

    pub fn seal(&self) -> String {
        tally_engine::cursor::seal(PURPOSE, &serde_json::to_vec(self).unwrap_or_default())
    }

    /// The state `sealed` as this server sealed it for this caller's same call, before its
    /// deadline; a JSON-RPC error otherwise (the specification: a tampered state is refused).
    pub fn open(
        sealed: &str,
        caller: &str,
        tool: Tool,
        arguments: &Value,
    ) -> Result<State, ErrorData> {
        let refused = |why: &str| {
            ErrorData::invalid_params(
                format!(
                    "`requestState` {why}; call again without `requestState` and `inputResponses` to be asked afresh"
                ),
                None,
            )
        };
        let body = tally_engine::cursor::open(PURPOSE, sealed)
            .ok_or_else(|| refused("is not one this server issued, or it was changed"))?;
        let state: State = serde_json::from_slice(&body)
            .map_err(|_| refused("is not one this server issued, or it was changed"))?;
        if state.caller != caller || state.call != digest(tool, arguments) {
            return Err(refused(
                "belongs to another call (its tool or arguments differ)",
            ));
        }
        if state.expires < now() {
            return Err(refused("has expired"));
        }
        Ok(state)
    }

    /// The question this state was sealed with.
    pub fn asked(&self) -> Ambiguous {
        let what = ["field", "measure", "dataset", "code"]
            .into_iter()
            .find(|w| *w == self.asked.what)
            .unwrap_or("name");
        Ambiguous {
            what,
            parameter: self.asked.parameter.clone(),
            input: self.asked.input.clone(),
            choices: self
                .asked
                .names
                .iter()
                .map(|n| tally_semantic::Candidate::new(n.clone()))
                .collect(),
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A digest of one call: its tool and arguments (as sent, keys in order).
fn digest(tool: Tool, arguments: &Value) -> String {
    let hash = Sha256::new()
        .chain_update(tool.name())
        .chain_update(b"\0")
        .chain_update(serde_json::to_vec(arguments).unwrap_or_default())
        .finalize();
    hash.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2025-06-18 client is asked with `enum` and `enumNames` (its form of a titled
    /// choice; it shows `oneOf` as a free-text box), a 2025-11-25 or later one with `oneOf`;
    /// both survive rmcp's schema type as sent.
    #[test]
    fn each_protocol_version_is_asked_in_its_form_of_a_choice() {
        let ambiguous = Ambiguous {
            what: "field",
            parameter: "group_by".to_string(),
            input: "イベント".to_string(),
            choices: vec![
                tally_semantic::Candidate {
                    name: "個人イベント".to_string(),
                    description: Some("the individuals' event".to_string()),
                },
                tally_semantic::Candidate::new("法人イベント"),
            ],
        };
        let schema_of = |form| {
            let ElicitRequestParams::FormElicitationParams {
                requested_schema, ..
            } = question_in(Tool::SummarizeRecords, &ambiguous, form)
            else {
                panic!("a form question");
            };
            serde_json::to_value(requested_schema).unwrap()["properties"]["name"].clone()
        };
        assert_eq!(ChoiceForm::of(Some("2025-06-18")), ChoiceForm::EnumNames);
        assert_eq!(ChoiceForm::of(Some("2025-03-26")), ChoiceForm::EnumNames);
        assert_eq!(ChoiceForm::of(Some("2025-11-25")), ChoiceForm::Titled);
        assert_eq!(ChoiceForm::of(Some("2026-07-28")), ChoiceForm::Titled);
        assert_eq!(ChoiceForm::of(None), ChoiceForm::Titled);
        let old = schema_of(ChoiceForm::EnumNames);
        assert_eq!(
            old["enum"],
            json!(["個人イベント", "法人イベント"]),
            "{old}"
        );
        assert_eq!(
            old["enumNames"],
            json!(["個人イベント — the individuals' event", "法人イベント"]),
            "{old}"
        );
        assert!(old.get("oneOf").is_none(), "{old}");
        let new = schema_of(ChoiceForm::Titled);
        assert_eq!(
            new["oneOf"],
            json!([
                {"const": "個人イベント", "title": "個人イベント — the individuals' event"},
                {"const": "法人イベント", "title": "法人イベント"},
            ]),
            "{new}"
        );
        assert!(
            new.get("enum").is_none() && new.get("enumNames").is_none(),
            "{new}"
        );
    }

    #[test]
    fn questions_waited_on_are_bounded_per_caller_and_in_all() {
        let waiting = Arc::new(Waiting::new(2, 3));
        let a1 = waiting.ask("a").expect("room");
        let _a2 = waiting.ask("a").expect("room");
        let refused = waiting.ask("a").unwrap_err();
        assert!(
            refused.contains("2 questions waiting")
                && refused.contains("WAITING_PER_CALLER")
                && refused.contains("given up within 1"),
            "{refused}"
        );
        let _b1 = waiting.ask("b").expect("b has its own share");
        let refused = waiting.ask("c").unwrap_err();
        assert!(
            refused.contains("WAITING_IN_ALL") && refused.contains("3 answers"),
            "{refused}"
        );
        // An answered question frees its place.
        drop(a1);
        waiting.ask("c").expect("room again");
    }

    #[test]
    fn a_call_not_asked_says_why_beside_its_candidates() {
        let refusal = tally_semantic::RequestError::new(
            tally_semantic::ErrorCode::UnknownField,
            "`x` is ambiguous",
        );
        let said = not_asked(Err(EngineError::Request(refusal)), "WAITING_PER_CALLER")
            .unwrap_err()
            .to_json();
        let message = said["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "`x` is ambiguous; the user was not asked to choose: WAITING_PER_CALLER"
            ),
            "{message}"
        );
        assert!(
            said["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("answer the questions")
        );
        assert!(not_asked(Ok(Value::Null), "why").is_ok());
    }
}
