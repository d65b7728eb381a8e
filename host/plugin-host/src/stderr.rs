//! What a plugin writes to stderr: the last [`crate::PluginLimits::stderr_bytes`] of it kept
//! to explain a failure, whatever it writes.
//!
//! wasmtime-wasi's memory pipe refuses a write past its capacity, and Rust's `eprintln!`
//! panics when a write fails: a plugin that logs a lot would trap at its 16th KiB of debug
//! text. This sink accepts every write and keeps the end, where the explanation of a failure
//! is.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tally_storage::text::{Lines, escape_controls};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// How much one write may hand over at once.
const WRITE_BUDGET: usize = 64 * 1024;

/// How many characters of the end of a plugin's stderr an error message shows: enough for a
/// few lines of its own log, short enough for a message a model reads.
pub const STDERR_SHOWN: usize = 2000;

/// The end of a call's stderr: every write accepted, the last `capacity` bytes kept.
#[derive(Debug, Clone)]
pub struct StderrTail {
    capacity: usize,
    kept: Arc<Mutex<Tail>>,
}

#[derive(Debug, Default)]
struct Tail {
    bytes: VecDeque<u8>,
    /// Bytes written and no longer kept.
    dropped: usize,
}

impl StderrTail {
    pub fn new(capacity: usize) -> StderrTail {
        StderrTail {
            capacity,
            kept: Arc::default(),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let Ok(mut tail) = self.kept.lock() else {
            return;
        };
        let skip = bytes.len().saturating_sub(self.capacity);
        tail.dropped += skip;
        tail.bytes.extend(&bytes[skip..]);
        let over = tail.bytes.len().saturating_sub(self.capacity);
        tail.bytes.drain(..over);
        tail.dropped += over;
    }

    /// The bytes kept (the end of what was written), and how many before them were not.
    pub fn contents(&self) -> (Vec<u8>, usize) {
        match self.kept.lock() {
            Ok(tail) => (tail.bytes.iter().copied().collect(), tail.dropped),
            Err(_) => (Vec::new(), 0),
        }
    }
}

#[async_trait::async_trait]
impl OutputStream for StderrTail {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(WRITE_BUDGET)
    }
}

#[async_trait::async_trait]
impl Pollable for StderrTail {
    async fn ready(&mut self) {}
}

impl AsyncWrite for StderrTail {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

/// The end of what a plugin wrote (`bytes`, after `dropped` bytes no longer kept) as the end
/// of an error message: `"; {lead}: …"`, or `""` when it wrote nothing. Lines from the one
/// `skip` says is already in the message are left out, and so is Rust's advice to set
/// RUST_BACKTRACE (a plugin's process cannot be given it). Whole lines, at most
/// [`STDERR_SHOWN`] characters; the plugin's own line breaks kept, every other control
/// character written visibly.
pub fn shown(bytes: &[u8], dropped: usize, lead: &str, skip: fn(&str) -> bool) -> String {
    let whole = String::from_utf8_lossy(bytes);
    let text: String = whole
        .lines()
        .filter(|l| !l.contains("RUST_BACKTRACE"))
        .take_while(|l| !skip(l))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string();
    if text.is_empty() {
        return String::new();
    }
    let text = escape_controls(&text, Lines::Kept);
    let mut tail = last_chars(&text, STDERR_SHOWN);
    let earlier = dropped > 0 || tail.len() < text.len();
    // Whole lines: a line cut at its start reads as another message.
    if tail.len() < text.len()
        && let Some((_, rest)) = tail.split_once('\n')
        && !rest.is_empty()
    {
        tail = rest;
    }
    format!(
        "; {lead}{}: {tail}",
        if earlier { " (the end)" } else { "" }
    )
}

/// The last `n` characters of `text`.
pub fn last_chars(text: &str, n: usize) -> &str {
    let count = text.chars().count();
    if count <= n {
        return text;
    }
    let skip = text.char_indices().nth(count - n).map_or(0, |(i, _)| i);
    &text[skip..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_end_of_what_was_written() {
        let tail = StderrTail::new(8);
        tail.push(b"abc");
        assert_eq!(tail.contents(), (b"abc".to_vec(), 0));
        tail.push(b"defghij");
        assert_eq!(tail.contents(), (b"cdefghij".to_vec(), 2));
        tail.push(b"0123456789");
        assert_eq!(tail.contents(), (b"23456789".to_vec(), 12));
    }

    #[test]
    fn the_end_shown_is_whole_lines_without_advice_that_cannot_be_followed() {
        let never = |_: &str| false;
        assert_eq!(shown(b"", 0, "it wrote to stderr", never), "");
        assert_eq!(
            shown(
                b"one\ntwo\nnote: run with `RUST_BACKTRACE=1`\n",
                0,
                "it wrote to stderr",
                never
            ),
            "; it wrote to stderr: one\ntwo"
        );
        assert_eq!(
            shown(b"a\x1b[31m\n", 3, "it wrote", never),
            "; it wrote (the end): a\\u{1b}[31m"
        );
        let long = format!("{}\nlast line\n", "x".repeat(STDERR_SHOWN));
        assert_eq!(
            shown(long.as_bytes(), 0, "it wrote", never),
            "; it wrote (the end): last line"
        );
        assert_eq!(
            shown(b"mine\npanicked at\nafter\n", 0, "it wrote", |l| l
                .starts_with("panicked")),
            "; it wrote: mine"
        );
    }
}
