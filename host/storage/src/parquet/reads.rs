//! What one call has read of a dataset's objects, kept for the call's later scans.
//!
//! A call over objects read at every call may scan them several times: `inspect_dataset`
//! makes one pass for the fill rates and statistics, then one per field for its values, each
//! over every object. From a local file a scan again costs little; from an object store every
//! scan of every object is a round trip per row group. The first inspection of the survey's
//! 25-object Hive tree made 22 scans of its 72 row groups, 1,584 ranged requests one after
//! another (3.4× the time from local files, docs/benchmarks.md). The footers were never read
//! again (the registered ones serve every call): the column chunks were, once per field.
//!
//! So within one call, over objects that together fit what the call may keep ([`KEPT_BYTES`],
//! an eighth of its memory when less):
//!
//! - what a scan reads of an object (column chunks, page indexes) is kept, held from the
//!   call's memory, and the call's later scans take it from here;
//! - a scan that will read whole row groups (no condition to prune them, no limit) fetches the
//!   chunks of its columns of every object first, [`REQUESTS_AT_ONCE`] requests at once,
//!   instead of one object after another as the scan goes.
//!
//! Larger objects are read scan by scan, as local files are: a call would hold its share of
//! memory for bytes most calls read once.
//!
//! Every byte still comes from a ranged request naming the ETag registered (`If-Match`), and
//! still goes through the reader's checks (bounds, page headers, memory) when a scan takes it.
//! Nothing is kept past the call: the next call reads the store again, so an object replaced
//! is seen at the next call as before.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, MemoryReservation};
use futures::StreamExt;

use crate::object::{ObjectError, ObjectFile};

/// Bytes of objects one call keeps for its later scans, at most (an eighth of the call's
/// memory when that is less: the rest stays for its operators). The survey's 25 objects are
/// 5.2 MB in all.
pub const KEPT_BYTES: usize = 64 << 20;
/// Ranged requests a call's read-ahead makes at once: enough to hide a store's round trip,
/// few enough not to be throttled (S3 serves thousands a second per prefix).
pub const REQUESTS_AT_ONCE: usize = 8;

/// Which bytes: the object (its URL and the ETag registered) and the range.
type Key = (String, Option<String>, u64, u64);

fn key(object: &ObjectFile, range: &Range<u64>) -> Key {
    (
        object.url.clone(),
        object.etag.clone(),
        range.start,
        range.end,
    )
}

/// Bytes kept, or why the read-ahead could not fetch them (said once, by the scan that
/// asks for them: the error its own request would have met).
#[derive(Debug)]
enum Piece {
    Read(Bytes),
    Failed(ObjectError),
}

/// The object reads of one call (a DataFusion session extension the engine adds to every
/// call's context; a scan without it reads as before).
pub struct CallReads {
    pieces: Mutex<HashMap<Key, Piece>>,
    /// What the kept bytes hold of the call's memory.
    held: MemoryReservation,
    limit: usize,
}

impl std::fmt::Debug for CallReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallReads")
            .field("held", &self.held.size())
            .field("limit", &self.limit)
            .finish()
    }
}

impl CallReads {
    /// The reads of a call whose operators draw on `pool`, which may hold `call_memory`.
    pub fn new(pool: &Arc<dyn MemoryPool>, call_memory: usize) -> CallReads {
        CallReads {
            pieces: Mutex::new(HashMap::new()),
            held: MemoryConsumer::new("object reads kept for the call").register(pool),
            limit: KEPT_BYTES.min(call_memory / 8),
        }
    }

    /// Bytes kept now.
    pub fn held(&self) -> usize {
        self.held.size()
    }

    /// Bytes the call may keep.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `bytes` of the call's memory for pieces to keep, if they fit what it may keep.
    fn reserve(&self, bytes: usize) -> bool {
        self.held.size().saturating_add(bytes) <= self.limit && self.held.try_grow(bytes).is_ok()
    }

    /// The bytes of `range` of `object` if this call read them: the range itself, or the
    /// kept piece `within` (the column chunk the range lies in). A read-ahead that failed
    /// for the range is said once, as an error.
    pub(crate) fn get(
        &self,
        object: &ObjectFile,
        range: &Range<u64>,
        within: Option<Range<u64>>,
    ) -> Option<Result<Bytes, ObjectError>> {
        let mut pieces = self.pieces.lock().ok()?;
        let exact = key(object, range);
        match pieces.get(&exact) {
            Some(Piece::Read(bytes)) => return Some(Ok(bytes.clone())),
            Some(Piece::Failed(_)) => {
                return match pieces.remove(&exact) {
                    Some(Piece::Failed(e)) => Some(Err(e)),
                    _ => None,
                };
            }
            None => {}
        }
        let chunk = within.filter(|c| *c != *range)?;
        match pieces.get(&key(object, &chunk)) {
            Some(Piece::Read(bytes)) => {
                let from = usize::try_from(range.start - chunk.start).ok()?;
                let to = usize::try_from(range.end - chunk.start).ok()?;
                (to <= bytes.len()).then(|| Ok(bytes.slice(from..to)))
            }
            _ => None,
        }
    }

    /// Keeps `bytes`, read for `range` of `object`, if the call may keep that much more.
    pub(crate) fn keep(&self, object: &ObjectFile, range: &Range<u64>, bytes: &Bytes) {
        let Ok(mut pieces) = self.pieces.lock() else {
            return;
        };
        let k = key(object, range);
        if matches!(pieces.get(&k), Some(Piece::Read(_))) || !self.reserve(bytes.len()) {
            return;
        }
        pieces.insert(k, Piece::Read(bytes.clone()));
    }

    /// Whether the bytes of `range` of `object` are kept.
    fn holds(&self, object: &ObjectFile, range: &Range<u64>) -> bool {
        self.pieces
            .lock()
            .is_ok_and(|p| matches!(p.get(&key(object, range)), Some(Piece::Read(_))))
    }

    /// Fetches the ranges of `wanted` not kept yet (per object, the column chunks a scan will
    /// read), [`REQUESTS_AT_ONCE`] requests at once, and keeps them: as much as fits what the
    /// call may keep, in the order given (the rest is read by the scan as it goes). Ranges
    /// close to each other are fetched by one request, as a scan's own reads are.
    pub(crate) async fn read_ahead(
        self: Arc<Self>,
        wanted: Vec<(Arc<ObjectFile>, Vec<Range<u64>>)>,
    ) {
        let mut requests: Vec<(Arc<ObjectFile>, Vec<Range<u64>>, usize)> = Vec::new();
        'objects: for (object, ranges) in wanted {
            let missing: Vec<Range<u64>> = ranges
                .into_iter()
                .filter(|r| !self.holds(&object, r))
                .collect();
            for request in crate::object::coalesce(&missing) {
                let inside: Vec<Range<u64>> = missing
                    .iter()
                    .filter(|r| request.start <= r.start && r.end <= request.end)
                    .cloned()
                    .collect();
                let size = inside
                    .iter()
                    .map(|r| usize::try_from(r.end - r.start).unwrap_or(usize::MAX))
                    .fold(0usize, usize::saturating_add);
                if !self.reserve(size) {
                    break 'objects;
                }
                requests.push((Arc::clone(&object), inside, size));
            }
        }
        let this = &self;
        futures::stream::iter(requests)
            .map(|(object, inside, size)| async move {
                let got = object.ranges(inside.clone()).await;
                (object, inside, size, got)
            })
            .buffer_unordered(REQUESTS_AT_ONCE)
            .for_each(|(object, inside, size, got)| async move {
                let Ok(mut pieces) = this.pieces.lock() else {
                    this.held.shrink(size);
                    return;
                };
                match got {
                    Ok(bytes) => {
                        for (range, b) in inside.iter().zip(bytes) {
                            let whole = b.len() as u64 == range.end - range.start;
                            let k = key(&object, range);
                            if whole && !matches!(pieces.get(&k), Some(Piece::Read(_))) {
                                pieces.insert(k, Piece::Read(b));
                            } else {
                                // Short (the scan's own read says so) or kept meanwhile.
                                this.held.shrink(range_len(range));
                            }
                        }
                    }
                    Err(e) => {
                        this.held.shrink(size);
                        for range in &inside {
                            pieces.insert(key(&object, range), Piece::Failed(e.clone()));
                        }
                    }
                }
            })
            .await;
    }
}

fn range_len(range: &Range<u64>) -> usize {
    usize::try_from(range.end - range.start).unwrap_or(usize::MAX)
}
