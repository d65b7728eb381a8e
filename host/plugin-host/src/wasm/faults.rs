//! How a call that failed is told: refused by the plugin, or stopped by the sandbox (its
//! memory limit, its deadline, a panic or a Python exception read from its stderr, a trap),
//! each naming the plugin, the limit and what to do.

use std::time::Instant;

use wasmtime::Trap;

use tally_storage::text::{Lines, escape_controls};

use super::sandbox::PluginLimits;
use crate::error::PluginError;
use crate::stderr::{StderrTail, last_chars};

/// One plugin call, as its errors describe it.
pub(super) struct Call<'a> {
    pub(super) label: &'a str,
    /// What the plugin was asked to do, e.g. "scan".
    pub(super) what: &'a str,
    pub(super) limits: &'a PluginLimits,
    /// The end of what the plugin wrote to stderr (its last `limits.stderr_bytes`).
    pub(super) stderr: StderrTail,
    pub(super) started: Instant,
}

impl Call<'_> {
    /// The error of a call the plugin answered with an error `message`, with the end of what
    /// it wrote to stderr (its own account of what went wrong).
    pub(super) fn refused(&self, message: &str) -> PluginError {
        let Call { label, what, .. } = *self;
        PluginError::refused(
            format!("{label} could not {what}: {message}{}", self.stderr_text()),
            if message.starts_with(tally_plugin_api::PLUGIN_FAULT) {
                "this is a fault in the plugin: its author can reproduce it on this dataset folder with `tally plugin test`"
            } else {
                "fix the dataset's files or backend.config as the message says; if they are right, the plugin's author can reproduce it with `tally plugin test`"
            },
        )
    }

    /// The error of a call the sandbox stopped: past its memory limit (`asked` is what it
    /// asked for), past its deadline, or a trap or another failure `e`.
    pub(super) fn stopped(&self, asked: Option<usize>, e: &wasmtime::Error) -> PluginError {
        let Call {
            label,
            what,
            limits,
            ref stderr,
            started,
        } = *self;
        let kind = match (asked, e.downcast_ref::<Trap>()) {
            (Some(_), _) => tally_storage::faults::Fault::Memory,
            (None, Some(Trap::Interrupt)) => tally_storage::faults::Fault::Deadline,
            (None, Some(_)) if fault_of(&stderr.contents().0).is_some() => {
                tally_storage::faults::Fault::Panic
            }
            (None, Some(_)) => tally_storage::faults::Fault::Trap,
            (None, None) => tally_storage::faults::Fault::Other,
        };
        tally_storage::faults::count(kind);
        if let Some(asked) = asked {
            return PluginError::stopped(
                format!(
                    "{label} was stopped while trying to {what}: it exceeded its memory limit of {} (it asked for {})",
                    mib(limits.memory_bytes),
                    mib(asked)
                ),
                "the plugin needs less memory for this data, or the server a higher --plugin-memory-mb",
            );
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => PluginError::stopped(
                format!(
                    "{label} was stopped while trying to {what}: it did not finish within its deadline of {:.1} s (ran {:.1} s){}",
                    limits.deadline.as_secs_f64(),
                    started.elapsed().as_secs_f64(),
                    self.stderr_text()
                ),
                "the plugin must work faster on this data, or the server needs a longer --plugin-deadline-ms",
            ),
            Some(trap) => PluginError::stopped(
                match fault_of(&stderr.contents().0) {
                    // What the plugin wrote before the panic (or the whole traceback) is kept:
                    // it is often the author's own account of what went wrong.
                    Some(fault) => format!(
                        "{label} {} while trying to {what}: {}{}",
                        fault.verb,
                        fault.message,
                        self.stderr_text_without(fault.skip)
                    ),
                    None => format!(
                        "{label} failed while trying to {what}: it trapped ({trap}){}",
                        self.stderr_text()
                    ),
                },
                "this is a fault in the plugin (a panic or a trap): its author can reproduce it on this dataset folder with `tally plugin test`, which shows what the plugin wrote to stderr",
            ),
            None => PluginError::stopped(
                format!(
                    "{label} failed while trying to {what}: {}{}",
                    root_cause(e),
                    self.stderr_text()
                ),
                "this is a fault in the plugin or in what it was given",
            ),
        }
    }

    /// The end of what the plugin wrote to stderr, as the end of an error message ("" when
    /// nothing).
    fn stderr_text(&self) -> String {
        self.stderr_text_without(|_| false)
    }

    /// [`Call::stderr_text`] without the lines `skip` says are already in the message.
    fn stderr_text_without(&self, skip: fn(&str) -> bool) -> String {
        let (bytes, dropped) = self.stderr.contents();
        crate::stderr::shown(&bytes, dropped, "it wrote to stderr", skip)
    }
}

/// A fault a guest reported on its stderr as it failed: a Rust panic or a Python exception.
pub(super) struct Fault {
    /// `panicked`, `raised an exception`.
    pub(super) verb: &'static str,
    /// What failed, where.
    pub(super) message: String,
    /// The first line of the fault's own report in stderr: what the plugin wrote before it
    /// is shown beside the message (a Python traceback is shown whole).
    pub(super) skip: fn(&str) -> bool,
}

/// The fault in what a guest wrote to stderr: a Rust panic, else a Python exception.
pub(super) fn fault_of(stderr: &[u8]) -> Option<Fault> {
    if let Some(message) = panic_message(stderr)
        // componentize-py's runtime panics when a Python function raises: the exception is
        // the fault, the runtime's panic only its consequence.
        && !message.contains("Python function threw")
    {
        return Some(Fault {
            verb: "panicked",
            message,
            skip: |l| l.contains(" panicked at "),
        });
    }
    python_exception(stderr).map(|message| Fault {
        verb: "raised an exception",
        message,
        skip: |l| l.contains(" panicked at "),
    })
}

/// The exception of the last Python traceback in what a guest wrote to stderr (`Traceback
/// (most recent call last):`, the frames, then `Kind: message`), with its innermost frame.
fn python_exception(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let (_, after) = text.rsplit_once("Traceback (most recent call last):")?;
    let lines: Vec<&str> = after
        .lines()
        .take_while(|l| !l.contains(" panicked at "))
        .collect();
    let exception = lines
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with(' '))?;
    let frame = lines
        .iter()
        .rev()
        .find_map(|l| l.trim_start().strip_prefix("File "))
        .map(|f| {
            // componentize-py puts the app's files under `/0/`, `/1/`…: the author knows them
            // by their own names.
            let f = f.trim();
            let bundled = f
                .strip_prefix("\"/")
                .and_then(|rest| rest.split_once('/'))
                .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .map(|(_, rest)| format!("\"{rest}"));
            let f = bundled.unwrap_or_else(|| f.to_string());
            format!(" (at {})", escape_controls(&f, Lines::Escaped))
        })
        .unwrap_or_default();
    Some(format!(
        "`{}`{frame}",
        escape_controls(last_chars(exception.trim(), 600), Lines::Escaped)
    ))
}

/// The message of a Rust panic in what a guest wrote to stderr (`thread '…' panicked at
/// FILE:LINE:COL:` then the message), with where it happened.
fn panic_message(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let (_, after) = text.split_once(" panicked at ")?;
    let (location, message) = after.split_once('\n').unwrap_or((after, ""));
    let message: Vec<&str> = message
        .lines()
        .filter(|l| !l.contains("RUST_BACKTRACE") && !l.trim().is_empty())
        .collect();
    let joined = message.join(" ");
    let message = escape_controls(last_chars(joined.trim(), 600), Lines::Escaped);
    Some(format!(
        "`{message}` (at {})",
        escape_controls(location.trim().trim_end_matches(':'), Lines::Escaped)
    ))
}

/// What wasmtime says of an error, escaped ([`escape_controls`]): it may quote the
/// component's own names (its exports, the functions of a trap's backtrace).
pub(super) fn root_cause(e: &wasmtime::Error) -> String {
    let mut text = e.to_string();
    let chain: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
    if !chain.is_empty() {
        text.push_str(": ");
        text.push_str(&chain.join(": "));
    }
    escape_controls(&text, Lines::Kept).into_owned()
}

pub(super) fn mib(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    } else {
        format!("{bytes} bytes")
    }
}
