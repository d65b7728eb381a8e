//! SSE resumption (`Last-Event-ID`): every event the HTTP transport sends on a stream is kept
//! here for a while, so a client whose connection dropped reconnects and receives what it
//! missed — progress, notifications, and above all the answer to its call — then, for a call
//! still running, what follows until its answer.
//!
//! Bounded: at most [`Limits::per_stream`] events a stream (the oldest go first; the last, the
//! answer, stays), [`Limits::bytes`] in all (the oldest events of all streams go first), and
//! none older than [`Limits::age`]. An event id is `<stream>/<n>`: the stream of a request
//! is a random UUID sent only to its caller; a session's notification stream is
//! `<session id>:common`, and the HTTP guard lets only the session's owner resume it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStoreError, EventStream, ServerSseMessage,
};

/// How much is kept.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Events kept per stream.
    pub per_stream: usize,
    /// Bytes of kept events in all (their JSON), across streams.
    pub bytes: usize,
    /// How long an event is kept.
    pub age: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_stream: 256,
            bytes: 64 * 1024 * 1024,
            age: Duration::from_secs(300),
        }
    }
}

#[derive(Debug)]
struct Kept {
    n: u64,
    event: ServerSseMessage,
}

#[derive(Debug)]
struct Stream {
    events: VecDeque<Kept>,
    /// The number of the next event: kept after the events themselves are evicted, so that
    /// numbers never restart (a client's cursor must not match a later event).
    next: u64,
    /// The stream carried the answer of its request: nothing follows.
    finished: bool,
    /// When its last event was kept.
    last_at: Instant,
}

impl Stream {
    fn new(now: Instant) -> Stream {
        Stream {
            events: VecDeque::new(),
            next: 0,
            finished: false,
            last_at: now,
        }
    }
}

/// One kept event in the order of arrival, for evicting by age and size.
#[derive(Debug)]
struct Arrival {
    stream: Arc<str>,
    n: u64,
    bytes: usize,
    at: Instant,
}

#[derive(Debug, Default)]
struct State {
    streams: HashMap<Arc<str>, Stream>,
    arrivals: VecDeque<Arrival>,
    bytes: usize,
}

impl State {
    /// Drops the oldest arrivals while they are too old or too many bytes are kept.
    fn evict(&mut self, limits: &Limits, now: Instant) {
        while let Some(front) = self.arrivals.front() {
            let too_old = now.duration_since(front.at) > limits.age;
            if !too_old && self.bytes <= limits.bytes {
                break;
            }
            let Some(gone) = self.arrivals.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(gone.bytes);
            if let Some(stream) = self.streams.get_mut(&gone.stream)
                && let Some(i) = stream.events.iter().position(|k| k.n == gone.n)
            {
                stream.events.remove(i);
            }
        }
        // A stream with no event left is kept (its numbering) until it has been quiet for
        // twice the age, then forgotten: a cursor into it is then unknown, never reused.
        if self.streams.len() > self.arrivals.len() + 1024 {
            self.streams.retain(|_, s| {
                !s.events.is_empty() || now.duration_since(s.last_at) <= limits.age * 2
            });
        }
    }
}

/// The event store of one HTTP server.
#[derive(Debug)]
pub struct Events {
    state: Mutex<State>,
    limits: Limits,
    /// Bumped at every stored event: a replay waiting for what follows wakes on it.
    stored: tokio::sync::watch::Sender<u64>,
}

impl Events {
    pub fn new(limits: Limits) -> Arc<Events> {
        Arc::new(Events {
            state: Mutex::default(),
            limits,
            stored: tokio::sync::watch::channel(0).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keep(&self, stream_id: &str, event: &ServerSseMessage) -> String {
        let bytes = event
            .message
            .as_ref()
            .map(|m| serde_json::to_vec(m.as_ref()).map(|v| v.len()).unwrap_or(0))
            .unwrap_or(0)
            + 64;
        let finishes = matches!(
            event.message.as_deref(),
            Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
        );
        let now = Instant::now();
        let mut state = self.lock();
        let key: Arc<str> = match state.streams.get_key_value(stream_id) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(stream_id),
        };
        let stream = state
            .streams
            .entry(Arc::clone(&key))
            .or_insert_with(|| Stream::new(now));
        let n = stream.next;
        stream.next += 1;
        stream.last_at = now;
        stream.finished |= finishes;
        let mut kept = event.clone();
        let id = format!("{stream_id}/{n}");
        kept.event_id = Some(id.clone());
        stream.events.push_back(Kept { n, event: kept });
        // Past the per-stream bound the oldest events go (the answer is the newest).
        let mut dropped = Vec::new();
        while stream.events.len() > self.limits.per_stream {
            if let Some(old) = stream.events.pop_front() {
                dropped.push(old.n);
            }
        }
        state.arrivals.push_back(Arrival {
            stream: Arc::clone(&key),
            n,
            bytes,
            at: now,
        });
        state.bytes += bytes;
        if !dropped.is_empty() {
            let mut freed = 0;
            state.arrivals.retain(|a| {
                let gone = a.stream == key && dropped.contains(&a.n);
                if gone {
                    freed += a.bytes;
                }
                !gone
            });
            state.bytes = state.bytes.saturating_sub(freed);
        }
        state.evict(&self.limits, now);
        drop(state);
        self.stored.send_modify(|v| *v = v.wrapping_add(1));
        id
    }

    /// The events of `stream` after `n` still kept, and whether the stream is finished;
    /// `None` when the stream is not (or no longer) kept, or events after `n` were evicted.
    fn after(&self, stream: &str, n: Option<u64>) -> Option<(Vec<ServerSseMessage>, bool, u64)> {
        let state = self.lock();
        let s = state.streams.get(stream)?;
        let first_wanted = match n {
            None => 0,
            Some(n) => n.checked_add(1)?,
        };
        // A cursor past what was sent is not one this server gave.
        if first_wanted > s.next {
            return None;
        }
        // A gap: what the client missed is no longer all here.
        let oldest = s.events.front().map_or(s.next, |k| k.n);
        if oldest > first_wanted {
            return None;
        }
        let events: Vec<ServerSseMessage> = s
            .events
            .iter()
            .filter(|k| k.n >= first_wanted)
            .map(|k| k.event.clone())
            .collect();
        let last = s.next.saturating_sub(1);
        Some((events, s.finished, last))
    }
}

fn parse(id: &str) -> Option<(&str, u64)> {
    let (stream, n) = id.rsplit_once('/')?;
    Some((stream, n.parse().ok()?))
}

#[derive(Debug)]
struct UnknownEvent(String);

impl std::fmt::Display for UnknownEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no stream can be resumed after the event `{}`: it is not one this server sent, or what followed it is no longer kept",
            self.0
        )
    }
}

impl std::error::Error for UnknownEvent {}

/// The store handed to the transport.
#[derive(Debug, Clone)]
pub struct Store(pub Arc<Events>);

#[async_trait::async_trait]
impl EventStore for Store {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, EventStoreError> {
        Ok(self.0.keep(stream_id, event))
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let (stream, n) = parse(last_event_id)
            .ok_or_else(|| Box::new(UnknownEvent(last_event_id.to_string())) as EventStoreError)?;
        if self.0.after(stream, Some(n)).is_none() {
            return Err(Box::new(UnknownEvent(last_event_id.to_string())));
        }
        let events = Arc::clone(&self.0);
        let stream = stream.to_string();
        // What was kept after the event, then what follows as it comes, until the stream's
        // answer (a stream that never answers — a session's notifications — goes on while
        // the client listens).
        let replay = futures::stream::unfold(
            (events, stream, n, false),
            |(events, stream, mut cursor, done)| async move {
                if done {
                    return None;
                }
                let mut wake = events.stored.subscribe();
                loop {
                    let (batch, finished, last) = events.after(&stream, Some(cursor))?;
                    if !batch.is_empty() {
                        cursor = last;
                        let ended = finished;
                        return Some((
                            futures::stream::iter(batch),
                            (events, stream, cursor, ended),
                        ));
                    }
                    if finished {
                        return None;
                    }
                    wake.changed().await.ok()?;
                }
            },
        );
        Ok(Box::pin(futures::StreamExt::flatten(replay)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use rmcp::model::{ErrorData, JsonRpcMessage, RequestId};

    fn note() -> ServerSseMessage {
        ServerSseMessage::retry(Duration::from_secs(3))
    }

    fn answer() -> ServerSseMessage {
        ServerSseMessage::from_message(JsonRpcMessage::error(
            ErrorData::internal_error("x", None),
            Some(RequestId::Number(1)),
        ))
    }

    #[tokio::test]
    async fn a_stream_resumes_after_the_last_event_seen_until_its_answer() {
        let events = Store(Events::new(Limits::default()));
        let first = events.store_event("s", &note()).await.unwrap();
        let second = events.store_event("s", &note()).await.unwrap();
        assert_eq!((first.as_str(), second.as_str()), ("s/0", "s/1"));
        let mut replay = events.replay_events_after(&first).await.unwrap();
        let got = replay.next().await.unwrap();
        assert_eq!(got.event_id.as_deref(), Some("s/1"));
        // What follows comes as it is stored, the answer last.
        let waiting = tokio::spawn(async move {
            let mut ids = Vec::new();
            while let Some(e) = replay.next().await {
                ids.push(e.event_id.unwrap());
            }
            ids
        });
        events.store_event("s", &note()).await.unwrap();
        events.store_event("other", &note()).await.unwrap();
        events.store_event("s", &answer()).await.unwrap();
        assert_eq!(waiting.await.unwrap(), vec!["s/2", "s/3"]);
        assert!(events.replay_events_after("nope/0").await.is_err());
        assert!(events.replay_events_after("garbage").await.is_err());
        // Past what was sent, or a number that cannot follow: unknown, never a panic.
        assert!(events.replay_events_after("s/9").await.is_err());
        assert!(
            events
                .replay_events_after(&format!("s/{}", u64::MAX))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn numbers_go_on_after_a_streams_events_were_evicted() {
        let events = Store(Events::new(Limits {
            per_stream: 2,
            bytes: 1_000_000,
            age: Duration::from_secs(60),
        }));
        for _ in 0..5 {
            events.store_event("quiet", &note()).await.unwrap();
        }
        // Every event of the stream evicted by bytes: the next one is still numbered 5.
        events.0.lock().evict(
            &Limits {
                bytes: 0,
                ..events.0.limits
            },
            Instant::now(),
        );
        assert_eq!(
            events.store_event("quiet", &note()).await.unwrap(),
            "quiet/5"
        );
    }

    #[tokio::test]
    async fn what_is_kept_is_bounded() {
        let events = Store(Events::new(Limits {
            per_stream: 3,
            bytes: 10_000,
            age: Duration::from_secs(60),
        }));
        for _ in 0..10 {
            events.store_event("s", &note()).await.unwrap();
        }
        // The oldest went: resuming from before them is refused, from after works.
        assert!(events.replay_events_after("s/0").await.is_err());
        assert!(events.replay_events_after("s/6").await.is_ok());
        // Bytes across streams: the oldest streams go first.
        for i in 0..1000 {
            events
                .store_event(&format!("t{i}"), &answer())
                .await
                .unwrap();
        }
        let state = events.0.lock();
        assert!(state.bytes <= 10_000, "{}", state.bytes);
        assert!(state.streams["t0"].events.is_empty() && !state.streams["t999"].events.is_empty());
        assert_eq!(
            state.arrivals.len(),
            state
                .streams
                .values()
                .map(|s| s.events.len())
                .sum::<usize>()
        );
    }
}
