//! What native plugins write to stderr (and, in `tally serve`, to stdout), kept to explain
//! their failures as a wasm plugin's stderr is (`crate::stderr`).
//!
//! A native plugin runs inside the server's process and writes to its file descriptors, not
//! to a stream the host hands it. So when native plugins are allowed, the process's stderr
//! (file descriptor 2) becomes the write end of a pipe before any of them is loaded; a
//! thread reads the pipe, keeps the last [`KEPT`] bytes and forwards every whole line to
//! the stderr the process was started with, so nothing written is lost. The server's own
//! log is written straight to that original stderr ([`log`]), apart from the pipe: what a
//! failed call shows is what was written during it, never the server's log lines.
//!
//! A call takes a [`Mark`] as it starts and reads [`Mark::said`] when it fails: the bytes the
//! pipe received in between. File descriptors carry no caller, so when another native call
//! ran at the same time its lines may be among them (another dataset's, which the caller
//! may not be allowed to see): the message then points to the server's log instead.
//! Native datasets register one at a time (`native::NativeBackend::register`), so what a
//! broken dataset's entry says is its own.
//!
//! In `tally serve`, stdout is redirected into the same pipe and the protocol is written to
//! a copy of the original stdout ([`install`]'s answer): a plugin's `println!` cannot corrupt
//! the stdio transport.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How much of the end of what was written is kept, for every call at once.
pub const KEPT: usize = 64 * 1024;

/// A line longer than this is forwarded before its end arrives.
const LONGEST_LINE: usize = 8 * 1024;

/// What one pass over the pipe reads at most.
const PASS_BYTES: usize = 256 * 1024;

/// How long the end of a line waits for the rest of it before it is forwarded alone.
const PARTIAL_WAIT: Duration = Duration::from_millis(100);

#[cfg(unix)]
struct Capture {
    /// The process's stderr as it was started: the server's log and everything forwarded.
    original: std::fs::File,
    /// The read end of the pipe file descriptors 2 (and 1) now write into; non-blocking.
    read: std::os::fd::OwnedFd,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    kept: VecDeque<u8>,
    /// Bytes received since the capture began.
    total: u64,
    /// The start of a line not yet forwarded.
    partial: Vec<u8>,
    /// When `partial` began to wait.
    partial_since: Option<Instant>,
}

impl State {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let skip = bytes.len().saturating_sub(KEPT);
        self.kept.extend(&bytes[skip..]);
        let over = self.kept.len().saturating_sub(KEPT);
        self.kept.drain(..over);
        if self.partial.is_empty() {
            self.partial_since = Some(Instant::now());
        }
        self.partial.extend_from_slice(bytes);
    }

    /// What is ready to forward at `now`: every whole line, and the rest when `all` or when
    /// it is too long or has waited long enough.
    fn ready(&mut self, all: bool, now: Instant) -> Vec<u8> {
        let waited = self
            .partial_since
            .is_some_and(|since| now >= since + PARTIAL_WAIT);
        let cut = if all || waited || self.partial.len() > LONGEST_LINE {
            self.partial.len()
        } else {
            self.partial
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1)
        };
        let out: Vec<u8> = self.partial.drain(..cut).collect();
        self.partial_since = if self.partial.is_empty() {
            None
        } else {
            Some(Instant::now())
        };
        out
    }

    /// What was received after `at` (a `total`), and how many bytes of it are no longer kept.
    fn since(&self, at: u64) -> (Vec<u8>, usize) {
        let new = usize::try_from(self.total.saturating_sub(at)).unwrap_or(usize::MAX);
        let kept = new.min(self.kept.len());
        let start = self.kept.len() - kept;
        (self.kept.range(start..).copied().collect(), new - kept)
    }
}

#[cfg(unix)]
static CAPTURE: OnceLock<Capture> = OnceLock::new();

/// Native calls started since the process began, and those running now.
static STARTED: AtomicU64 = AtomicU64::new(0);
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Routes the process's stderr (and stdout when `stdout`) through the pipe, once; later calls
/// change nothing. Returns a copy of the original stdout for the protocol when `stdout` was
/// asked for and this call redirected it. Call it before any native plugin is loaded and
/// before anything holds stdout.
#[cfg(unix)]
pub fn install(stdout: bool) -> Result<Option<std::fs::File>, String> {
    use std::os::fd::{FromRawFd, OwnedFd};
    if CAPTURE.get().is_some() {
        return Ok(None);
    }
    let cloexec_copy = |fd: libc::c_int, what: &str| -> Result<OwnedFd, String> {
        // SAFETY: fcntl on a descriptor number; a negative answer is an error, a
        // non-negative one a new descriptor this process owns.
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if copy < 0 {
            return Err(format!(
                "cannot copy the process's {what}: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: `copy` is a new descriptor owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(copy) })
    };
    let original = cloexec_copy(2, "stderr")?;
    let mut ends = [0 as libc::c_int; 2];
    // SAFETY: `ends` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(format!(
            "cannot make a pipe for native plugins' stderr: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: pipe2 succeeded: both are new descriptors owned by nothing else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    // Writers block when the pipe is full (as they would on a slow terminal); only the read
    // end is non-blocking, so the forwarding thread and `flush` can both drain it.
    {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor owned here.
        unsafe {
            let flags = libc::fcntl(write.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(write.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    let protocol = if stdout {
        Some(std::fs::File::from(cloexec_copy(1, "stdout")?))
    } else {
        None
    };
    {
        use std::os::fd::AsRawFd;
        for target in if stdout { &[1, 2][..] } else { &[2][..] } {
            // SAFETY: dup2 onto a standard descriptor: the pipe replaces it atomically, and the
            // standard descriptor is inherited by children (dup2 clears close-on-exec).
            if unsafe { libc::dup2(write.as_raw_fd(), *target) } < 0 {
                return Err(format!(
                    "cannot route descriptor {target} into the pipe: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    drop(write);
    let capture = Capture {
        original: std::fs::File::from(original),
        read,
        state: Mutex::new(State::default()),
    };
    if CAPTURE.set(capture).is_err() {
        return Ok(None);
    }
    std::thread::Builder::new()
        .name("tally-stderr".to_string())
        .spawn(forward)
        .map_err(|e| format!("cannot start the thread that forwards stderr: {e}"))?;
    Ok(protocol)
}

/// Without file descriptors to redirect, nothing is captured and calls say nothing of it.
#[cfg(not(unix))]
pub fn install(_stdout: bool) -> Result<Option<std::fs::File>, String> {
    Ok(None)
}

/// Reads the pipe for ever: keeps the end, forwards whole lines.
#[cfg(unix)]
fn forward() {
    use std::os::fd::AsRawFd;
    let Some(capture) = CAPTURE.get() else {
        return;
    };
    loop {
        let mut poll = libc::pollfd {
            fd: capture.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let wait = i32::try_from(PARTIAL_WAIT.as_millis()).unwrap_or(100);
        // SAFETY: one pollfd, valid for the call.
        unsafe { libc::poll(&mut poll, 1, wait) };
        capture.drain(&mut capture.lock(), false);
    }
}

#[cfg(unix)]
impl Capture {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads everything in the pipe now into `state`, and forwards what is ready.
    fn drain(&self, state: &mut State, all: bool) {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 16 * 1024];
        let mut read = 0;
        // A bounded pass: a plugin writing without pause cannot keep it (and the lock) for
        // ever; what is left is read by the next pass.
        while read < PASS_BYTES {
            // SAFETY: reads into a buffer of its length from a descriptor owned here.
            let n = unsafe {
                libc::read(
                    self.read.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            match usize::try_from(n) {
                Ok(0) => break,
                Ok(n) => {
                    read += n;
                    state.push(&buf[..n]);
                    // Forwarded as it comes: what waits for the end of its line is at most
                    // `LONGEST_LINE` and one read.
                    self.forward(state.ready(false, Instant::now()));
                }
                Err(_) => {
                    if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    break; // WouldBlock: the pipe is empty.
                }
            }
        }
        self.forward(state.ready(all, Instant::now()));
    }

    fn forward(&self, out: Vec<u8>) {
        if !out.is_empty() {
            // The original stderr may be gone (a closed terminal): what cannot be written is
            // dropped, as a write to it would have been.
            let _ = (&self.original).write_all(&out);
        }
    }
}

/// Reads what is in the pipe now: what was written before this call is kept (and forwarded
/// when `all`, the end of an unfinished line included). Waits for the lock at most a while,
/// so a panic hook never hangs on it.
fn drain(all: bool) {
    #[cfg(unix)]
    if let Some(capture) = CAPTURE.get() {
        let deadline = Instant::now() + Duration::from_millis(200);
        loop {
            match capture.state.try_lock() {
                Ok(mut state) => return capture.drain(&mut state, all),
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    return capture.drain(&mut p.into_inner(), all);
                }
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        }
    }
    #[cfg(not(unix))]
    let _ = all;
}

/// Forwards everything written so far, the end of an unfinished line included: before the
/// process ends, and after a panic's message (a panic that aborts would lose it otherwise).
pub fn flush() {
    drain(true);
}

/// Whether the process's stderr is captured.
pub fn installed() -> bool {
    #[cfg(unix)]
    return CAPTURE.get().is_some();
    #[cfg(not(unix))]
    false
}

/// The server's log writer: the process's original stderr, apart from the pipe.
pub fn log() -> Log {
    Log
}

/// See [`log`].
#[derive(Debug)]
pub struct Log;

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        #[cfg(unix)]
        if let Some(capture) = CAPTURE.get() {
            return (&capture.original).write(buf);
        }
        std::io::stderr().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        #[cfg(unix)]
        if CAPTURE.get().is_some() {
            return Ok(());
        }
        std::io::stderr().flush()
    }
}

/// Where a native call began in what the pipe received; it counts as running until dropped.
#[derive(Debug)]
pub struct Mark {
    at: u64,
    /// Its number among the calls started.
    number: u64,
    /// Whether another call was running when it began.
    overlapped: bool,
}

impl Mark {
    /// Marks the start of a native call.
    pub fn now() -> Mark {
        drain(false);
        #[cfg(unix)]
        let at = CAPTURE.get().map_or(0, |c| c.lock().total);
        #[cfg(not(unix))]
        let at = 0;
        let overlapped = RUNNING.fetch_add(1, Ordering::SeqCst) > 0;
        let number = STARTED.fetch_add(1, Ordering::SeqCst) + 1;
        Mark {
            at,
            number,
            overlapped,
        }
    }

    /// What the process wrote to its stderr (and stdout, when routed there) since the mark,
    /// as the end of an error message (`""` when nothing, or when nothing is captured).
    pub fn said(&self) -> String {
        #[cfg(unix)]
        if let Some(capture) = CAPTURE.get() {
            drain(false);
            // Lines of another call may be another dataset's, which this caller may not
            // see: when calls overlapped, the text stays in the server's log only.
            if self.overlapped || STARTED.load(Ordering::SeqCst) > self.number {
                return "; what it wrote to stderr is in the server's log (not shown here: other native calls ran at the same time)".to_string();
            }
            let (bytes, dropped) = capture.lock().since(self.at);
            return crate::stderr::shown(&bytes, dropped, "it wrote to stderr", |_| false);
        }
        String::new()
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_is_kept_and_whole_lines_are_forwarded() {
        let mut state = State::default();
        let now = Instant::now();
        state.push(b"one\ntw");
        assert_eq!(state.ready(false, now), b"one\n");
        assert_eq!(state.partial, b"tw");
        state.push(b"o\nthree");
        assert_eq!(state.ready(false, now), b"two\n");
        // The end of a line waits a while for the rest of it.
        assert_eq!(state.ready(false, now), b"");
        assert_eq!(state.ready(false, Instant::now() + PARTIAL_WAIT), b"three");
        assert_eq!(state.since(4), (b"two\nthree".to_vec(), 0));
        state.push(&vec![b'x'; KEPT]);
        let (kept, dropped) = state.since(0);
        assert_eq!((kept.len(), dropped), (KEPT, 13));
        // A long line is forwarded before it ends.
        assert_eq!(state.ready(false, now).len(), KEPT);
    }

    #[test]
    fn a_call_is_told_what_was_written_during_it_and_the_log_is_kept_apart() {
        install(false).expect("the capture installs");
        assert!(installed());
        let write = |text: &str| {
            // SAFETY: writes a buffer of its length to the process's stderr.
            unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
        };
        write("before the call\n");
        let mark = Mark::now();
        write("the plugin says why\n");
        writeln!(log(), "a line of the server's log").unwrap();
        // Other tests of this process may write to stderr too: only what must be there, and
        // what must not, is checked.
        let said = mark.said();
        assert!(said.starts_with("; it wrote to stderr: "), "{said}");
        assert!(said.contains("the plugin says why"), "{said}");
        assert!(
            !said.contains("before the call") && !said.contains("server's log"),
            "{said}"
        );
        // When another call starts before this one ends, neither shows the lines (they may
        // be the other's): the log has them.
        let other = Mark::now();
        write("another call's line\n");
        for said in [mark.said(), other.said()] {
            assert!(said.contains("is in the server's log"), "{said}");
            assert!(
                !said.contains("another call's line") && !said.contains("the plugin says why"),
                "{said}"
            );
        }
        drop(mark);
        drop(other);
        let alone = Mark::now();
        assert!(!alone.said().contains("the plugin says why"));
        flush();
    }
}
