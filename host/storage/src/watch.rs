//! Watching the datasets directory: a dataset dropped in, edited or removed takes effect
//! without a restart.
//!
//! File events (notify, recursive) are debounced — a copy is many events — and then the
//! catalog is rescanned; a folder still being written is retried after writes settle. Where
//! events are not delivered (network file systems, some containers), polling rescans on a
//! fixed interval instead; it is also the fallback when the event watcher cannot start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

/// What a watcher reloads: the owner of the catalog (the engine), which rescans it.
pub trait Reload: Send + Sync + 'static {
    /// The datasets directory watched.
    fn dir(&self) -> &Path;
    /// Rescans the datasets directory; `true` when a folder still being written should be
    /// tried again once writes settle.
    fn rescan_folders(&self, settle: Duration) -> bool;
    /// Lists the objects of every object-store dataset again.
    fn rescan_objects(&self, settle: Duration);
}

/// How changes are noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchMode {
    /// File system events, with polling as the fallback.
    Events,
    /// Rescan on a fixed interval.
    Poll(Duration),
}

/// Timing of reloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    pub mode: WatchMode,
    /// Quiet time after the last event before rescanning.
    pub debounce: Duration,
    /// A half-written file younger than this is retried, not reported.
    pub settle: Duration,
    /// Interval of the polling fallback.
    pub poll_interval: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            mode: WatchMode::Events,
            debounce: Duration::from_millis(250),
            settle: Duration::from_secs(2),
            poll_interval: Duration::from_secs(2),
        }
    }
}

/// Keeps the watcher alive; dropping it stops watching.
#[derive(Debug)]
pub struct WatchHandle {
    _watcher: Option<notify::RecommendedWatcher>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching the engine's datasets directory (must be called within a tokio runtime).
pub fn spawn<R: Reload>(engine: Arc<R>, config: WatchConfig) -> WatchHandle {
    let dir: PathBuf = engine.dir().to_path_buf();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = match config.mode {
        WatchMode::Events => {
            let made = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if event.is_ok() {
                    let _ = tx.send(());
                }
            })
            .and_then(|mut w| w.watch(&dir, RecursiveMode::Recursive).map(|()| w));
            match made {
                Ok(w) => {
                    tracing::info!(dir = %dir.display(), "watching datasets with file system events");
                    Some(w)
                }
                Err(e) => {
                    tracing::warn!(
                        dir = %dir.display(),
                        "file system events are not available ({e}); polling every {} ms instead",
                        config.poll_interval.as_millis()
                    );
                    None
                }
            }
        }
        WatchMode::Poll(interval) => {
            tracing::info!(dir = %dir.display(), "watching datasets by polling every {} ms", interval.as_millis());
            None
        }
    };
    let poll = match (config.mode, &watcher) {
        (WatchMode::Poll(interval), _) => Some(interval),
        (WatchMode::Events, None) => Some(config.poll_interval),
        (WatchMode::Events, Some(_)) => None,
    };
    let task = tokio::spawn(async move {
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            let woke_by_event = match (poll, retry_at) {
                (Some(interval), _) => {
                    tokio::time::sleep(interval).await;
                    false
                }
                (None, Some(at)) => {
                    tokio::select! {
                        got = rx.recv() => { if got.is_none() { return; } true }
                        _ = tokio::time::sleep_until(at) => false,
                    }
                }
                (None, None) => {
                    if rx.recv().await.is_none() {
                        return;
                    }
                    true
                }
            };
            if woke_by_event {
                // A copy is a burst of events: wait until the burst is over, but never longer
                // than a few quiet periods, so a directory that keeps changing still reloads.
                let latest = tokio::time::Instant::now() + config.debounce * 4;
                loop {
                    let wait = config
                        .debounce
                        .min(latest.saturating_duration_since(tokio::time::Instant::now()));
                    if wait.is_zero() {
                        break;
                    }
                    match tokio::time::timeout(wait, rx.recv()).await {
                        Ok(Some(())) => continue,
                        Ok(None) => return,
                        Err(_) => break,
                    }
                }
            }
            let engine = Arc::clone(&engine);
            let settle = config.settle;
            let reloaded = tokio::task::spawn_blocking(move || engine.rescan_folders(settle)).await;
            retry_at = match reloaded {
                Ok(true) => Some(tokio::time::Instant::now() + config.settle.max(config.debounce)),
                Ok(false) => None,
                Err(e) => {
                    tracing::error!("a reload failed: {e}");
                    None
                }
            };
        }
    });
    WatchHandle {
        _watcher: watcher,
        task,
    }
}

/// Lists the objects of every object-store dataset every `interval` (and retries those that
/// could not be registered): a bucket sends no file events. A change is validated before it
/// replaces the version served, as for a folder. Dropping the handle stops it.
pub fn poll_objects<R: Reload>(engine: Arc<R>, interval: Duration, settle: Duration) -> PollHandle {
    tracing::info!(
        "listing object-store datasets every {} ms",
        interval.as_millis()
    );
    let task = tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let engine = Arc::clone(&engine);
            if let Err(e) = tokio::task::spawn_blocking(move || engine.rescan_objects(settle)).await
            {
                tracing::error!("listing object-store datasets failed: {e}");
            }
        }
    });
    PollHandle { task }
}

/// Keeps the object poll alive; dropping it stops it.
#[derive(Debug)]
pub struct PollHandle {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PollHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}
