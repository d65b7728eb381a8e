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
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};

/// How much one write may hand over at once.
const WRITE_BUDGET: usize = 64 * 1024;

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
}
