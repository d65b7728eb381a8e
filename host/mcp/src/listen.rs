//! The HTTP accept loop: what holds before a request is even read.
//!
//! `axum::serve` accepts every connection and waits on it for as long as the client likes,
//! so 1,100 silent connections exhaust the process's file descriptors and lock every client
//! out. Here each connection has a place in a [`Registry`] bounded in total and per peer
//! address, a deadline for its request headers, and an idle timeout. When the registry is
//! full, the oldest connection that is not serving a request (silent, half-sent headers, or
//! idle between requests) is closed to make room, so a flood of silent connections cannot
//! keep a real client out. A connection is only refused outright when every place is busy
//! with a request.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt;

/// Bounds of the accept loop (see docs/security.md).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections in total.
    pub total: usize,
    /// Open connections from one peer address.
    pub per_peer: usize,
    /// Time a client has to send a request's headers (from connecting, or from the end of
    /// the previous response).
    pub header_read: Duration,
    /// Time a connection may pass without a byte read or written.
    pub idle: Duration,
}

/// One open connection.
#[derive(Debug)]
struct Place {
    peer: IpAddr,
    opened: Instant,
    /// Milliseconds after `opened` when a byte last moved (0: never).
    last: Arc<AtomicU64>,
    /// Requests being served on it (a response body still streaming counts).
    busy: Arc<AtomicUsize>,
    close: Arc<Notify>,
}

impl Place {
    /// When a byte last moved on it (or when it opened, if never).
    fn active(&self) -> Instant {
        self.opened + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// The open connections.
#[derive(Debug, Default)]
struct Registry {
    next: u64,
    places: HashMap<u64, Place>,
}

impl Registry {
    /// Takes a place for a connection from `peer`, closing the oldest idle connection (of the
    /// peer when it is the peer that is at its cap) if needed. `None`: every place is busy.
    fn admit(&mut self, peer: IpAddr, limits: &ConnectionLimits) -> Option<(u64, Place)> {
        let of_peer = self.places.values().filter(|p| p.peer == peer).count();
        if of_peer >= limits.per_peer && !self.evict(Some(peer)) {
            return None;
        }
        if self.places.len() >= limits.total && !self.evict(None) {
            return None;
        }
        self.next += 1;
        let place = Place {
            peer,
            opened: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
            busy: Arc::new(AtomicUsize::new(0)),
            close: Arc::new(Notify::new()),
        };
        let handle = Place {
            peer,
            opened: place.opened,
            last: Arc::clone(&place.last),
            busy: Arc::clone(&place.busy),
            close: Arc::clone(&place.close),
        };
        self.places.insert(self.next, place);
        Some((self.next, handle))
    }

    /// Closes the connection not serving a request that has been quiet longest (of `peer`,
    /// if given): one that never sent a byte goes first, a client that was just answered
    /// last.
    fn evict(&mut self, peer: Option<IpAddr>) -> bool {
        let victim = self
            .places
            .iter()
            .filter(|(_, p)| peer.is_none_or(|x| p.peer == x))
            .filter(|(_, p)| p.busy.load(Ordering::Acquire) == 0)
            .min_by_key(|(_, p)| (p.last.load(Ordering::Relaxed) != 0, p.active()))
            .map(|(k, _)| *k);
        match victim {
            Some(k) => {
                if let Some(p) = self.places.remove(&k) {
                    p.close.notify_one();
                }
                true
            }
            None => false,
        }
    }
}

/// A socket that remembers when it last moved a byte.
struct Watched<S> {
    inner: S,
    last: Arc<AtomicU64>,
    epoch: Instant,
}

impl<S> Watched<S> {
    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Marks a connection busy while a response (its body included) is in flight.
#[derive(Debug)]
struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The soft limit on open files, where the system says it.
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Connections kept below the open-file limit: datasets, plugins and logs need descriptors
/// too.
const RESERVED_FILES: usize = 128;

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = within_open_files(limits);
    let registry = Arc::new(Mutex::new(Registry::default()));
    // A watch channel, not a notification: a shutdown that comes while nobody waits is not
    // lost.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stopping.send(true);
    });
    let mut stopped = stop.clone();
    let accepting = Accepting {
        registry: Arc::clone(&registry),
        stop,
        limits,
    };
    loop {
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a transient error: wait a moment rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped_signal(&mut stopped) => break,
        };
        let admitted = registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .admit(peer.ip(), &limits);
        let Some((key, place)) = admitted else {
            // Every place is serving a request: answer at once rather than queue.
            tokio::spawn(refuse_busy(socket));
            continue;
        };
        accepting.open(socket, peer, key, place, &app);
    }
    // Connections finish what they are doing (each has five seconds once told to stop).
    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline
        && !registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .places
            .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The limits with the total number of connections lowered to fit the open-file limit.
fn within_open_files(limits: ConnectionLimits) -> ConnectionLimits {
    let mut limits = limits;
    if let Some(files) = open_file_limit() {
        let fit = files.saturating_sub(RESERVED_FILES).max(16);
        if fit < limits.total {
            tracing::warn!(
                open_file_limit = files,
                "--max-connections lowered from {} to {fit} to stay within the open-file limit",
                limits.total
            );
            limits.total = fit;
        }
    }
    limits
}

/// What the accept loop shares with every connection it opens.
struct Accepting {
    registry: Arc<Mutex<Registry>>,
    stop: tokio::sync::watch::Receiver<bool>,
    limits: ConnectionLimits,
}

impl Accepting {
    /// Serves one admitted connection in a task of its own until it ends, is closed to make
    /// room, falls idle or the server stops; then frees its place.
    fn open(
        &self,
        socket: tokio::net::TcpStream,
        peer: std::net::SocketAddr,
        key: u64,
        place: Place,
        app: &axum::Router,
    ) {
        let limits = self.limits;
        let _ = socket.set_nodelay(true);
        let epoch = place.opened;
        let last = Arc::clone(&place.last);
        let io = TokioIo::new(Watched {
            inner: socket,
            last: Arc::clone(&last),
            epoch,
        });
        let busy = Arc::clone(&place.busy);
        let router = app.clone();
        let service = hyper::service::service_fn(
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                busy.fetch_add(1, Ordering::AcqRel);
                let held = Busy(Arc::clone(&busy));
                let router = router.clone();
                async move {
                    let response = router
                        .oneshot(request.map(axum::body::Body::new))
                        .await
                        .unwrap_or_else(|never| match never {});
                    // The connection stays busy until the body (a stream, for SSE) is done.
                    let (parts, body) = response.into_parts();
                    let body = axum::body::Body::from_stream(futures::StreamExt::map(
                        body.into_data_stream(),
                        move |chunk| {
                            let _held = &held;
                            chunk
                        },
                    ));
                    Ok::<_, std::convert::Infallible>(hyper::Response::from_parts(parts, body))
                }
            },
        );
        let registry = Arc::clone(&self.registry);
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .keep_alive(true);
            let conn = builder.serve_connection(io, service).with_upgrades();
            let mut conn = std::pin::pin!(conn);
            // Quiet for the idle time, whatever it is doing: a request whose body stopped
            // arriving is as dead as a silent connection. (Calls end within their deadline,
            // which `serve` keeps below the idle time, and event streams send keep-alives.)
            let idle = async {
                loop {
                    tokio::time::sleep(limits.idle / 4).await;
                    let quiet = (epoch.elapsed().as_millis() as u64)
                        .saturating_sub(last.load(Ordering::Relaxed));
                    if quiet >= limits.idle.as_millis() as u64 {
                        break;
                    }
                }
            };
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = place.close.notified() => {}
                _ = idle => {}
                _ = stopped_signal(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn.as_mut()).await;
                }
            }
            registry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .places
                .remove(&key);
        });
    }
}

/// Resolves once the server is told to stop (at once if it already was).
async fn stopped_signal(stop: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Answers a connection that found every place busy: 503 with `Retry-After`, then closes.
async fn refuse_busy(mut socket: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = r#"{"error":{"message":"the server has no free connection: every one is serving a request","fix":"retry in a moment (Retry-After)"}}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        socket.write_all(response.as_bytes()),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            total: 3,
            per_peer: 2,
            header_read: Duration::from_secs(1),
            idle: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_full_registry_closes_the_oldest_idle_connection() {
        let mut r = Registry::default();
        let a: IpAddr = "127.0.0.1".parse().expect("ip");
        let b: IpAddr = "127.0.0.2".parse().expect("ip");
        let (k1, p1) = r.admit(a, &limits()).expect("first");
        let (_k2, p2) = r.admit(a, &limits()).expect("second");
        // The peer is at its cap: its oldest idle connection makes room.
        let (_k3, _) = r.admit(a, &limits()).expect("third, by eviction");
        assert!(!r.places.contains_key(&k1), "the oldest was closed");
        // Busy connections are never closed to make room.
        p2.busy.fetch_add(1, Ordering::AcqRel);
        let (_k4, _) = r.admit(b, &limits()).expect("another peer");
        assert_eq!(r.places.len(), 3);
        drop(p1);
    }

    #[test]
    fn every_place_busy_refuses() {
        let mut r = Registry::default();
        let a: IpAddr = "127.0.0.1".parse().expect("ip");
        let l = ConnectionLimits {
            total: 1,
            ..limits()
        };
        let (_, p) = r.admit(a, &l).expect("first");
        p.busy.fetch_add(1, Ordering::AcqRel);
        assert!(r.admit(a, &l).is_none());
    }
}
