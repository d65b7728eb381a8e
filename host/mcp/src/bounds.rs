//! The one input budget (docs/security.md, "One input budget"): every string, list and
//! per-session store a client can make the server hold or work on has a bound here, checked
//! before any work starts. A request reaches the catalog only through
//! [`crate::view::View::enter`], which first checks its parameters' [`Bounded`] impl: a
//! new surface cannot reach the data without saying what bounds its input.
//!
//! Tool arguments have their own bounds in `tally_semantic::request` (names, texts, lists,
//! conditions, cursors), checked by the parser every tool call goes through; they are
//! re-exported here so the whole budget reads in one place. The HTTP body (`--max-body-bytes`,
//! 1 MiB) and the stdio line (4 MiB) bound a message as a whole, and serde_json's recursion
//! limit (128) its nesting.

// SetLevelRequestParams: logging is deprecated in later protocols, still served to 2025 ones.
#![allow(deprecated)]

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CancelTaskParams, CompleteRequestParams, GetPromptRequestParams,
    GetTaskParams, PaginatedRequestParams, ReadResourceRequestParams, Reference,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    UpdateTaskParams,
};
use serde_json::json;

pub use tally_semantic::request::{MAX_CURSOR_CHARS, MAX_TEXT_CHARS};

/// A resource URI (read, subscribed, completed against). A dataset id is at most 64
/// characters and a field name at most `MAX_NAME_CHARS` (256); percent-encoded, a field name of
/// 256 kanji is 2,304 bytes, so 4 KiB holds every URI the server serves with room to spare.
pub const MAX_URI_BYTES: usize = 4096;
/// What a client typed into a completion. Completions complete names and codes, which are at
/// most `MAX_NAME_CHARS` (256) (names) or [`MAX_TEXT_CHARS`] (condition values) long.
pub const MAX_COMPLETION_CHARS: usize = MAX_TEXT_CHARS;
/// Typed text longer than this is matched by prefix and substring only, never scored for
/// close spellings: an edit distance costs the product of the two lengths, and a
/// misspelling of a long text is not what completion is for.
pub const MAX_FUZZY_CHARS: usize = 64;
/// A candidate longer than this is never scored for a close spelling either.
pub const MAX_FUZZY_CANDIDATE_CHARS: usize = 2 * MAX_FUZZY_CHARS;
/// The name of a tool, prompt, argument or completion argument.
pub const MAX_KEY_CHARS: usize = 128;
/// Arguments of a prompt, or already chosen arguments of a completion.
pub const MAX_ARGUMENTS: usize = 16;
/// Pagination cursors of the list methods (the server's lists come in one page; a cursor is
/// refused past this and otherwise ignored).
pub const MAX_LIST_CURSOR_CHARS: usize = MAX_CURSOR_CHARS;
/// Subscriptions one 2025-era session may hold, by count and by the bytes of their URIs.
pub const MAX_SUBSCRIPTIONS: usize = 1_000;
pub const MAX_SUBSCRIPTION_BYTES: usize = 256 * 1024;
/// The bytes of the subscribed URIs of all sessions together.
pub const MAX_SUBSCRIPTION_BYTES_TOTAL: usize = 16 * 1024 * 1024;
/// The bytes of the subscribed URIs of one caller's sessions together: an eighth of the
/// server's, so that one caller (with however many sessions) leaves room for the others.
pub const MAX_SUBSCRIPTION_BYTES_PER_CALLER: usize = MAX_SUBSCRIPTION_BYTES_TOTAL / 8;
/// A task id: the server's are UUIDs (36 characters).
pub const MAX_TASK_ID_CHARS: usize = 64;
/// Answers to what a call or a task asked the client (`inputResponses`): how many, and the
/// bytes of all of them as JSON. The server asks one question at a time.
pub const MAX_INPUT_RESPONSES: usize = 8;
pub const MAX_INPUT_RESPONSE_BYTES: usize = 64 * 1024;
/// The state a client echoes with its answers (`requestState`).
pub const MAX_REQUEST_STATE_CHARS: usize = 4096;
/// The `2026-07-28` `subscriptions/listen` stream honours at most this many URIs (and
/// [`MAX_SUBSCRIPTION_BYTES`] of them); the acknowledgement names those honoured.
pub const MAX_LISTEN_URIS: usize = MAX_SUBSCRIPTIONS;

/// An input past its bound: what, the bound, and what would work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub fix: String,
    pub bound: &'static str,
    pub limit: usize,
}

impl Refusal {
    fn new(message: String, fix: impl Into<String>, bound: &'static str, limit: usize) -> Refusal {
        Refusal {
            message,
            fix: fix.into(),
            bound,
            limit,
        }
    }

    /// A JSON-RPC invalid-params error: the request was malformed for this server.
    pub fn into_error(self) -> ErrorData {
        ErrorData::invalid_params(
            format!("{}; {}", self.message, self.fix),
            Some(json!({ "bound": self.bound, "limit": self.limit })),
        )
    }
}

/// Whether `text` has at most `max` characters, settled by its byte length where that
/// suffices and otherwise counted no further than the bound.
pub fn at_most_chars(text: &str, max: usize) -> bool {
    // A character is 1 to 4 bytes: few enough bytes settle it without counting.
    text.len() <= max || (text.len() <= 4 * max && text.chars().nth(max).is_none())
}

fn chars(what: &str, text: &str, max: usize, bound: &'static str) -> Result<(), Refusal> {
    if at_most_chars(text, max) {
        Ok(())
    } else {
        Err(Refusal::new(
            format!(
                "{what} is {} bytes long; at most {max} characters are accepted",
                text.len()
            ),
            "send a shorter value (names and codes are short; completions complete what was begun)",
            bound,
            max,
        ))
    }
}

pub fn uri(what: &str, uri: &str) -> Result<(), Refusal> {
    if uri.len() <= MAX_URI_BYTES {
        Ok(())
    } else {
        Err(Refusal::new(
            format!(
                "{what} is {} bytes long; a URI this server serves is at most {MAX_URI_BYTES} bytes",
                uri.len()
            ),
            "use a URI from resources/list or the templates (tally://datasets/<id>, tally://datasets/<id>/fields/<name>)",
            "MAX_URI_BYTES",
            MAX_URI_BYTES,
        ))
    }
}

fn arguments<'a>(
    what: &str,
    pairs: impl ExactSizeIterator<Item = (&'a str, Option<&'a str>)>,
    max_value: usize,
) -> Result<(), Refusal> {
    if pairs.len() > MAX_ARGUMENTS {
        return Err(Refusal::new(
            format!(
                "{what} has {} arguments; at most {MAX_ARGUMENTS} are accepted",
                pairs.len()
            ),
            "send only the arguments the prompt or completion names",
            "MAX_ARGUMENTS",
            MAX_ARGUMENTS,
        ));
    }
    for (key, value) in pairs {
        chars(
            &format!("an argument name of {what}"),
            key,
            MAX_KEY_CHARS,
            "MAX_KEY_CHARS",
        )?;
        if let Some(value) = value {
            chars(
                &format!("the argument `{key}` of {what}"),
                value,
                max_value,
                "MAX_TEXT_CHARS",
            )?;
        }
    }
    Ok(())
}

/// What a request carries, checked against its bounds before any work.
pub trait Bounded {
    fn check(&self) -> Result<(), Refusal>;
}

/// Requests without parameters.
impl Bounded for () {
    fn check(&self) -> Result<(), Refusal> {
        Ok(())
    }
}

impl<T: Bounded> Bounded for Option<T> {
    fn check(&self) -> Result<(), Refusal> {
        self.as_ref().map_or(Ok(()), Bounded::check)
    }
}

impl Bounded for PaginatedRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        match &self.cursor {
            Some(cursor) => chars(
                "the list cursor",
                cursor,
                MAX_LIST_CURSOR_CHARS,
                "MAX_LIST_CURSOR_CHARS",
            ),
            None => Ok(()),
        }
    }
}

impl Bounded for ReadResourceRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        uri("the resource URI", &self.uri)
    }
}

impl Bounded for SubscribeRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        uri("the subscribed URI", &self.uri)
    }
}

impl Bounded for UnsubscribeRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        uri("the unsubscribed URI", &self.uri)
    }
}

impl Bounded for SetLevelRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        Ok(())
    }
}

impl Bounded for GetPromptRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        chars(
            "the prompt name",
            &self.name,
            MAX_KEY_CHARS,
            "MAX_KEY_CHARS",
        )?;
        let Some(args) = &self.arguments else {
            return Ok(());
        };
        // A prompt's arguments are names and codes; any other JSON value is refused by the
        // prompt itself, but a long one is refused here before it is read.
        let too_big = args.iter().find(|(_, v)| !v.is_string() && !v.is_null());
        if let Some((key, _)) = too_big {
            return Err(Refusal::new(
                format!("the argument `{key}` of the prompt is not a string"),
                "prompt arguments are strings (a dataset id, a field name, a code)",
                "MAX_TEXT_CHARS",
                MAX_TEXT_CHARS,
            ));
        }
        arguments(
            "the prompt",
            args.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            MAX_TEXT_CHARS,
        )
    }
}

impl Bounded for CompleteRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        match &self.r#ref {
            Reference::Prompt(p) => chars(
                "the prompt named by the completion",
                &p.name,
                MAX_KEY_CHARS,
                "MAX_KEY_CHARS",
            )?,
            Reference::Resource(r) => uri("the resource template of the completion", &r.uri)?,
            // A kind of reference a later protocol adds: refused by the completion itself.
            _ => {}
        }
        chars(
            "the completed argument's name",
            &self.argument.name,
            MAX_KEY_CHARS,
            "MAX_KEY_CHARS",
        )?;
        chars(
            "the completed value",
            &self.argument.value,
            MAX_COMPLETION_CHARS,
            "MAX_COMPLETION_CHARS",
        )?;
        if let Some(chosen) = self.context.as_ref().and_then(|c| c.arguments.as_ref()) {
            arguments(
                "the completion's context",
                chosen.iter().map(|(k, v)| (k.as_str(), Some(v.as_str()))),
                MAX_TEXT_CHARS,
            )?;
        }
        Ok(())
    }
}

/// A tool call's name, and the answers and state it carries back to a question; its
/// arguments are bounded by the parser of the tool (`tally_semantic::request`), which every
/// call goes through.
impl Bounded for CallToolRequestParams {
    fn check(&self) -> Result<(), Refusal> {
        chars("the tool name", &self.name, MAX_KEY_CHARS, "MAX_KEY_CHARS")?;
        if let Some(state) = &self.request_state {
            chars(
                "`requestState`",
                state,
                MAX_REQUEST_STATE_CHARS,
                "MAX_REQUEST_STATE_CHARS",
            )?;
        }
        if let Some(responses) = &self.input_responses {
            input_responses(responses.iter())?;
        }
        Ok(())
    }
}

fn task_id(id: &str) -> Result<(), Refusal> {
    chars("the task id", id, MAX_TASK_ID_CHARS, "MAX_TASK_ID_CHARS")
}

/// Answers to questions: few, each key a short name, all of them small.
fn input_responses<'a>(
    responses: impl ExactSizeIterator<Item = (&'a String, &'a serde_json::Value)>,
) -> Result<(), Refusal> {
    if responses.len() > MAX_INPUT_RESPONSES {
        return Err(Refusal::new(
            format!(
                "{} answers were sent (`inputResponses`); at most {MAX_INPUT_RESPONSES} are accepted",
                responses.len()
            ),
            "answer only the questions asked (`inputRequests`)",
            "MAX_INPUT_RESPONSES",
            MAX_INPUT_RESPONSES,
        ));
    }
    let mut bytes = 0;
    for (key, value) in responses {
        chars(
            "an `inputResponses` key",
            key,
            MAX_KEY_CHARS,
            "MAX_KEY_CHARS",
        )?;
        bytes += key.len() + serde_json::to_vec(value).map_or(0, |v| v.len());
    }
    if bytes > MAX_INPUT_RESPONSE_BYTES {
        return Err(Refusal::new(
            format!(
                "the answers (`inputResponses`) are {bytes} bytes of JSON; at most {MAX_INPUT_RESPONSE_BYTES} are accepted"
            ),
            "answer with the choice asked for, not more",
            "MAX_INPUT_RESPONSE_BYTES",
            MAX_INPUT_RESPONSE_BYTES,
        ));
    }
    Ok(())
}

impl Bounded for GetTaskParams {
    fn check(&self) -> Result<(), Refusal> {
        task_id(&self.task_id)
    }
}

impl Bounded for CancelTaskParams {
    fn check(&self) -> Result<(), Refusal> {
        task_id(&self.task_id)
    }
}

impl Bounded for UpdateTaskParams {
    fn check(&self) -> Result<(), Refusal> {
        task_id(&self.task_id)?;
        input_responses(self.input_responses.iter())
    }
}

/// The URIs of a `subscriptions/listen` request this server honours: in order, each within
/// [`MAX_URI_BYTES`], at most [`MAX_LISTEN_URIS`] and [`MAX_SUBSCRIPTION_BYTES`] in all. The
/// acknowledgement names them, so a client learns which were left out.
pub fn honoured(filter: &SubscriptionFilter) -> SubscriptionFilter {
    let mut honoured = filter.clone();
    if let Some(uris) = &filter.resource_subscriptions {
        let mut bytes = 0usize;
        let kept: Vec<String> = uris
            .iter()
            .filter(|u| u.len() <= MAX_URI_BYTES)
            .take_while(|u| {
                bytes += u.len();
                bytes <= MAX_SUBSCRIPTION_BYTES
            })
            .take(MAX_LISTEN_URIS)
            .cloned()
            .collect();
        honoured.resource_subscriptions = Some(kept);
    }
    honoured
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ArgumentInfo;

    #[test]
    fn counting_characters_stops_at_the_bound() {
        assert!(at_most_chars("abc", 3));
        assert!(!at_most_chars("abcd", 3));
        assert!(at_most_chars("日本語", 3), "three characters of nine bytes");
        assert!(!at_most_chars("日本語x", 3));
        assert!(!at_most_chars(&"x".repeat(300_000), 1000));
    }

    /// Regression (issue 36, "completions cost unbounded CPU"): a 300,000-character value is
    /// refused before any candidate is scored.
    #[test]
    fn a_long_completion_value_is_refused_before_work() {
        let params = CompleteRequestParams::new(
            Reference::for_prompt("compare_groups"),
            ArgumentInfo::new("where_value", "x".repeat(300_000)),
        );
        let refused = params.check().unwrap_err();
        assert_eq!(refused.bound, "MAX_COMPLETION_CHARS");
        assert!(
            refused.message.contains("300000 bytes"),
            "{}",
            refused.message
        );
        let fine = CompleteRequestParams::new(
            Reference::for_prompt("compare_groups"),
            ArgumentInfo::new("where_value", "デジタル"),
        );
        assert!(fine.check().is_ok());
    }

    #[test]
    fn long_uris_are_refused_and_listens_honour_a_bounded_part() {
        let long = format!("tally://datasets/{}", "x".repeat(500_000));
        assert!(SubscribeRequestParams::new(long.clone()).check().is_err());
        assert!(
            ReadResourceRequestParams::new(long.clone())
                .check()
                .is_err()
        );
        let mut filter = SubscriptionFilter::default();
        let mut uris = vec![long];
        uris.extend((0..2000).map(|i| format!("tally://datasets/d{i}")));
        filter.resource_subscriptions = Some(uris);
        let honoured = honoured(&filter);
        let kept = honoured.resource_subscriptions.unwrap_or_default();
        assert_eq!(kept.len(), MAX_LISTEN_URIS);
        assert_eq!(kept[0], "tally://datasets/d0");
    }
}
