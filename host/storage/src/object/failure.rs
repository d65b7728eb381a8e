//! Reading an object-store error: its kind, HTTP status and error code, kept only where they
//! look like what they claim to be, then said in Tally's words (never the store's).

use super::error::ObjectError;
use super::io::{MAX_RETRIES, RETRY_TIMEOUT};

impl ObjectError {
    /// Reads an object-store error, `what` naming the object or prefix asked for.
    pub(super) fn from_store(e: object_store::Error, what: &str) -> ObjectError {
        Failure::of(&e).reworded(what)
    }
}

/// Kinds of object-store failure, by who must act and whether trying later helps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Without the S3 client (the `s3` feature) no transport fails: `Unreachable` is its kind.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
enum FailureKind {
    Missing,
    NoBucket,
    Denied,
    Changed,
    Timeout,
    Unreachable,
    Throttled,
    Other,
}

/// What Tally keeps of an object-store error: its kind, the HTTP status and the store's error
/// code (S3's `<Code>`), if they can be read and look like what they claim to be. Nothing else
/// of the error is kept: the store's message and body may echo the request's headers (an
/// `Authorization` header names the access key id), and the transport's text names the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    kind: FailureKind,
    status: Option<u16>,
    code: Option<String>,
}

impl Failure {
    fn of(e: &object_store::Error) -> Failure {
        // Read without the request's URL: a key holding "status code: 200" says nothing.
        let text = without_urls(&error_chain(e));
        let status = status_of(&text);
        let code = code_of(&text);
        let transport = transport_of(e);
        let by_variant = match e {
            object_store::Error::NotFound { .. } => Some(FailureKind::Missing),
            object_store::Error::Precondition { .. } | object_store::Error::NotModified { .. } => {
                Some(FailureKind::Changed)
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Some(FailureKind::Denied),
            _ => None,
        };
        let kind = code
            .as_deref()
            .and_then(kind_of_code)
            // A 404 whose code says the bucket is missing is a missing bucket.
            .filter(|k| by_variant.is_none() || *k == FailureKind::NoBucket)
            .or(by_variant)
            .or_else(|| status.and_then(kind_of_status))
            .or(transport)
            .unwrap_or(FailureKind::Other);
        Failure { kind, status, code }
    }

    /// The error in Tally's words.
    fn reworded(&self, what: &str) -> ObjectError {
        let detail = self.detail();
        match self.kind {
            FailureKind::Missing => ObjectError::Missing(format!("{what} is not in the store")),
            FailureKind::NoBucket => {
                ObjectError::NoBucket(format!("the bucket of {what} does not exist"))
            }
            FailureKind::Changed => ObjectError::Changed(format!(
                "{what} changed after this version was registered (its ETag is another)"
            )),
            FailureKind::Denied => ObjectError::Denied(format!(
                "the object store refused access to {what}{detail}: the credentials were refused or do not allow reading it"
            )),
            FailureKind::Timeout => ObjectError::Timeout(format!(
                "the object store did not answer for {what} in time{detail} ({MAX_RETRIES} retries within {} s)",
                RETRY_TIMEOUT.as_secs()
            )),
            FailureKind::Unreachable => ObjectError::Unreachable(format!(
                "the object store did not answer for {what}: it could not be reached ({MAX_RETRIES} retries within {} s)",
                RETRY_TIMEOUT.as_secs()
            )),
            FailureKind::Throttled => ObjectError::Throttled(format!(
                "the object store is throttling requests for {what}{detail}"
            )),
            FailureKind::Other => {
                ObjectError::Other(format!("the object store failed for {what}{detail}"))
            }
        }
    }

    /// ` (HTTP 403, AccessDenied)`, or as much of it as is known.
    fn detail(&self) -> String {
        let mut parts = Vec::new();
        if let Some(s) = self.status {
            parts.push(format!("HTTP {s}"));
        }
        if let Some(c) = &self.code {
            parts.push(c.clone());
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        }
    }
}

/// The kind an S3 error code names, for the codes whose meaning is certain.
fn kind_of_code(code: &str) -> Option<FailureKind> {
    Some(match code {
        "NoSuchBucket" => FailureKind::NoBucket,
        "NoSuchKey" | "NotFound" => FailureKind::Missing,
        "AccessDenied"
        | "AllAccessDisabled"
        | "AccountProblem"
        | "ExpiredToken"
        | "InvalidAccessKeyId"
        | "InvalidSecurity"
        | "InvalidToken"
        | "RequestTimeTooSkewed"
        | "SignatureDoesNotMatch"
        | "TokenRefreshRequired" => FailureKind::Denied,
        "PreconditionFailed" => FailureKind::Changed,
        "RequestTimeout" => FailureKind::Timeout,
        "SlowDown"
        | "Throttling"
        | "ThrottlingException"
        | "TooManyRequests"
        | "RequestLimitExceeded" => FailureKind::Throttled,
        _ => return None,
    })
}

/// The kind an HTTP status names.
fn kind_of_status(status: u16) -> Option<FailureKind> {
    Some(match status {
        401 | 403 => FailureKind::Denied,
        404 => FailureKind::Missing,
        304 | 412 => FailureKind::Changed,
        408 | 504 => FailureKind::Timeout,
        // S3 answers 503 SlowDown when asked too fast; others answer 429.
        429 | 503 => FailureKind::Throttled,
        _ => return None,
    })
}

/// The transport's own kind of failure (no answer came), found among the error's sources.
#[cfg(feature = "s3")]
fn transport_of(e: &object_store::Error) -> Option<FailureKind> {
    use object_store::client::{HttpError, HttpErrorKind};
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(http) = s.downcast_ref::<HttpError>() {
            return Some(match http.kind() {
                HttpErrorKind::Timeout => FailureKind::Timeout,
                HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Interrupted => {
                    FailureKind::Unreachable
                }
                _ => FailureKind::Other,
            });
        }
        source = s.source();
    }
    None
}

/// A build without the S3 client has no transport whose failures could be read.
#[cfg(not(feature = "s3"))]
fn transport_of(_e: &object_store::Error) -> Option<FailureKind> {
    None
}

/// The HTTP status the store answered: the first `status code: NNN` of the error (the client
/// writes the status before the body, so a body cannot forge it).
fn status_of(text: &str) -> Option<u16> {
    let at = text.find("status code: ")? + "status code: ".len();
    let digits: String = text[at..].chars().take(3).collect();
    digits
        .parse::<u16>()
        .ok()
        .filter(|s| (100..600).contains(s))
}

/// The store's error code (`<Code>AccessDenied</Code>`), when it is a plain word of at most 64
/// letters that does not read like a key id (no run of four capitals, as in `AKIA…`): S3's
/// codes are CamelCase words. Anything else the store wrote is not kept.
fn code_of(text: &str) -> Option<String> {
    let from = text.find("<Code>")? + "<Code>".len();
    let to = text[from..].find("</Code>")? + from;
    let code = &text[from..to];
    let word =
        !code.is_empty() && code.len() <= 64 && code.chars().all(|c| c.is_ascii_alphabetic());
    let capitals_run = code
        .as_bytes()
        .windows(4)
        .any(|w| w.iter().all(u8::is_ascii_uppercase));
    (word && !capitals_run).then(|| code.to_string())
}

/// Text with its `http://…` and `https://…` words taken out.
fn without_urls(text: &str) -> String {
    text.split(' ')
        .filter(|w| !w.starts_with("http://") && !w.starts_with("https://"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An error and its sources, as one line (read for its status and code, never shown).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_read_without_the_request_url() {
        assert_eq!(
            without_urls("Error performing GET http://h/b/Timeout-2024/k in 3ms - 400 Bad Request"),
            "Error performing GET in 3ms - 400 Bad Request"
        );
    }

    /// A store's error as the S3 client gives it: the request line, then the status and body.
    #[derive(Debug)]
    struct Said(String);
    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for Said {}

    const KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
    const LETTERS_KEY_ID: &str = "AKIAQWERTYUIOPASDFGH";

    fn said(status: &str, body: &str) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(Said(format!(
            "Error performing GET http://store.invalid/b/k?X-Amz-Credential={KEY_ID} in 3ms - Server returned non-2xx status code: {status}: {body}"
        )))
    }

    /// What must never reach a caller or a log line: the key ids, the headers a store echoes,
    /// the store's own message.
    fn assert_clean(e: &ObjectError) {
        let text = format!("{e} {}", e.fix());
        for secret in [
            KEY_ID,
            LETTERS_KEY_ID,
            "Authorization",
            "Credential",
            "x-amz",
            "Signature=",
            "StringToSign",
            "secret-ish",
            "store.invalid",
            "echoed",
        ] {
            assert!(
                !text.contains(secret),
                "`{secret}` reached the error: {text}"
            );
        }
    }

    /// Regression (object-store errors passed through): a store that echoes the request's
    /// headers in its error, or puts a key id in its message or code, must not have any of it
    /// reach the caller; the error is classified by kind and said in Tally's words, with at most
    /// the HTTP status and a plain error code.
    #[test]
    #[expect(
        clippy::too_many_lines,
        reason = "one table of store errors, each with the words the caller gets"
    )]
    fn store_error_text_never_reaches_the_caller() {
        let echo = format!(
            "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code><Message>echoed Authorization: AWS4-HMAC-SHA256 Credential={KEY_ID}/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc</Message><StringToSign>secret-ish</StringToSign><RequestId>1</RequestId></Error>"
        );
        let what = "s3://b/k.parquet";
        /// A store's error, the kind it must be read as, and words the error must say.
        type Case = (object_store::Error, fn(&ObjectError) -> bool, &'static str);
        let cases: Vec<Case> = vec![
            (
                object_store::Error::PermissionDenied {
                    path: "k".into(),
                    source: said("403 Forbidden", &echo),
                },
                |e| matches!(e, ObjectError::Denied(_)),
                "(HTTP 403, AccessDenied)",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "400 Bad Request",
                        &format!(
                            "<Error><Code>InvalidAccessKeyId</Code><Message>The key {KEY_ID} is unknown</Message><AWSAccessKeyId>{KEY_ID}</AWSAccessKeyId></Error>"
                        ),
                    ),
                },
                |e| matches!(e, ObjectError::Denied(_)),
                "(HTTP 400, InvalidAccessKeyId)",
            ),
            (
                // A code that is itself a key id (letters only) is not said.
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "403 Forbidden",
                        &format!(
                            "<Error><Code>{LETTERS_KEY_ID}</Code><Message>echoed</Message></Error>"
                        ),
                    ),
                },
                |e| matches!(e, ObjectError::Denied(_)),
                "(HTTP 403)",
            ),
            (
                object_store::Error::NotFound {
                    path: "k".into(),
                    source: said(
                        "404 Not Found",
                        &format!(
                            "<Error><Code>NoSuchBucket</Code><Message>echoed {KEY_ID}</Message></Error>"
                        ),
                    ),
                },
                |e| matches!(e, ObjectError::NoBucket(_)),
                "the bucket of s3://b/k.parquet does not exist",
            ),
            (
                object_store::Error::NotFound {
                    path: "k".into(),
                    source: said("404 Not Found", &echo.replace("AccessDenied", "NoSuchKey")),
                },
                |e| matches!(e, ObjectError::Missing(_)),
                "s3://b/k.parquet is not in the store",
            ),
            (
                object_store::Error::Precondition {
                    path: "k".into(),
                    source: said(
                        "412 Precondition Failed",
                        &echo.replace("AccessDenied", "PreconditionFailed"),
                    ),
                },
                |e| matches!(e, ObjectError::Changed(_)),
                "changed after this version was registered",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "503 Service Unavailable",
                        &echo.replace("AccessDenied", "SlowDown"),
                    ),
                },
                |e| matches!(e, ObjectError::Throttled(_)),
                "(HTTP 503, SlowDown)",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said("429 Too Many Requests", &format!("echoed {KEY_ID}")),
                },
                |e| matches!(e, ObjectError::Throttled(_)),
                "(HTTP 429)",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said("504 Gateway Timeout", &format!("echoed {KEY_ID}")),
                },
                |e| matches!(e, ObjectError::Timeout(_)),
                "did not answer",
            ),
            (
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "500 Internal Server Error",
                        &echo.replace("AccessDenied", "InternalError"),
                    ),
                },
                |e| matches!(e, ObjectError::Other(_)),
                "the object store failed for s3://b/k.parquet (HTTP 500, InternalError)",
            ),
            (
                // No status at all, only text: kept out entirely.
                object_store::Error::Generic {
                    store: "S3",
                    source: Box::new(Said(format!(
                        "echoed x-amz-security-token: {KEY_ID} Authorization: AWS4-HMAC-SHA256 Credential={KEY_ID}"
                    ))),
                },
                |e| matches!(e, ObjectError::Other(_)),
                "the object store failed for s3://b/k.parquet",
            ),
            (
                // A body cannot forge the status: the first one is the client's.
                object_store::Error::Generic {
                    store: "S3",
                    source: said(
                        "500 Internal Server Error",
                        "status code: 403 Forbidden, echoed",
                    ),
                },
                |e| matches!(e, ObjectError::Other(_)),
                "HTTP 500",
            ),
        ];
        for (error, kind, words) in cases {
            let shown = format!("{error}");
            let e = ObjectError::from_store(error, what);
            assert!(kind(&e), "{shown}\n→ {e:?}");
            assert!(e.to_string().contains(words), "{shown}\n→ {e}");
            assert_clean(&e);
        }
    }

    #[test]
    fn transport_failures_are_timeouts_or_an_unreachable_store() {
        use object_store::client::{HttpError, HttpErrorKind};
        for (kind, expected) in [
            (HttpErrorKind::Timeout, "in time"),
            (HttpErrorKind::Connect, "could not be reached"),
            (HttpErrorKind::Request, "could not be reached"),
        ] {
            let error = object_store::Error::Generic {
                store: "S3",
                source: Box::new(HttpError::new(
                    kind,
                    Said(format!(
                        "error sending request for url (http://store.invalid/?Credential={KEY_ID}): echoed"
                    )),
                )),
            };
            let e = ObjectError::from_store(error, "s3://b/k.parquet");
            assert!(e.is_transient(), "{e:?}");
            assert!(e.to_string().contains("did not answer"), "{e}");
            assert!(e.to_string().contains(expected), "{e}");
            assert_clean(&e);
        }
    }
}
