//! How a server serves datasets and what it draws on, and how a call is routed while a
//! large table is being prepared: the files weighed against the preparation's time left.

use std::sync::Arc;

use datafusion::prelude::SessionContext;

/// What a dataset's preparation draws on, owned by the layer that serves calls (the engine):
/// the server-wide memory budget, the cache of prepared tables, the shared session, the slots
/// preparations take, and whether datasets are prepared or read at every call.
pub trait Resources: Send + Sync {
    fn budget(&self) -> &Arc<crate::memory::Budget>;
    fn cache(&self) -> Option<&Arc<crate::cache::Cache>>;
    fn context(&self) -> &SessionContext;
    fn preparations(&self) -> &Arc<tokio::sync::Semaphore>;
    fn serving(&self) -> Serving;
}

/// How a server serves datasets whose backend can read its files at every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Serving {
    /// Prepared when the table fits the memory budget (or the cache); read at every call when
    /// it does not, and while a large one is being prepared.
    #[default]
    Auto,
    /// Always prepared (a dataset over the budget is refused).
    Prepared,
    /// Always read from the files at every call.
    Streaming,
}

/// Records from which a dataset still being prepared is answered from its files meanwhile
/// (`--streaming auto`); a smaller one is prepared within a call's wait.
pub const STREAM_WHILE_PREPARING: u64 = 1_000_000;

/// What a call reads, for weighing its files against a preparation under way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    /// Fields whose every value the call reads (its conditions, groups, measures, order).
    pub fields: usize,
    /// Of those, the text fields searched for a substring (`q`, `$contains`): each value is
    /// also folded and scanned.
    pub searched: usize,
}

/// How a call was answered while its dataset's whole table was being prepared: the path
/// taken and the estimates that chose it (said in the answer's provenance).
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Read from the files, estimated sooner than the preparation's end; both estimates
    /// are unknown (`None`) until the preparation has prepared enough rows to time it.
    Files {
        estimate: Option<(std::time::Duration, std::time::Duration)>,
    },
    /// Waited for the preparation, estimated sooner than reading the files; answered from
    /// the prepared table.
    Waited {
        waited: std::time::Duration,
        /// The files' and the preparation's estimates, when the table was large enough
        /// to be read from its files meanwhile.
        estimate: Option<(std::time::Duration, std::time::Duration)>,
    },
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |d: &std::time::Duration| format!("{:.1} s", d.as_secs_f64());
        match self {
            Route::Files {
                estimate: Some((files, left)),
            } => write!(
                f,
                "while the table was being prepared: reading the files was estimated at {}, sooner than the {} the preparation had left",
                s(files),
                s(left)
            ),
            Route::Files { estimate: None } => write!(
                f,
                "while the table was being prepared (too early in the preparation to time it)"
            ),
            Route::Waited {
                waited,
                estimate: Some((files, left)),
            } => write!(
                f,
                "after waiting {} for the table's preparation, estimated at {} left, sooner than the {} estimated for reading the files",
                s(waited),
                s(left),
                s(files)
            ),
            Route::Waited {
                waited,
                estimate: None,
            } => write!(f, "after waiting {} for the table's preparation", s(waited)),
        }
    }
}

/// Weighing the files against a preparation under way, as shares of the time the
/// preparation takes per field value (measured on the preparation itself, so the estimate
/// follows the machine's load): a full read of one field from the files, a substring
/// search of one more (folding and scanning each value), and the preparation's last step
/// (dictionaries finished, the cache entry written) per record. Measured on the 7.5M-row
/// survey: preparing 38 fields 18 s, `q` over its 35 text fields from the file 11 s, a
/// summary reading two fields 0.3 s.
const FILE_READ_SHARE: f64 = 0.3;
const FILE_SEARCH_SHARE: f64 = 0.3;
const PREPARATION_TAIL: f64 = 0.1;

/// Rows a preparation has prepared before its rate is trusted.
pub(super) const TIMED_AFTER_ROWS: u64 = 50_000;

/// The time reading the files of `records` records of `fields` fields for `work` would take,
/// and the time a preparation that has prepared `rows` of them in `took` has left: both from
/// the preparation's own rate (see [`FILE_READ_SHARE`]).
pub(super) fn estimate(
    records: u64,
    fields: usize,
    rows: u64,
    took: std::time::Duration,
    work: Work,
) -> (std::time::Duration, std::time::Duration) {
    let per_record = took.as_secs_f64() / rows.max(1) as f64;
    let per_value = per_record / fields.max(1) as f64;
    let files = records as f64
        * per_value
        * (FILE_READ_SHARE * work.fields.max(1) as f64 + FILE_SEARCH_SHARE * work.searched as f64);
    let left = records.saturating_sub(rows) as f64 * per_record
        + PREPARATION_TAIL * records as f64 * per_record;
    (
        std::time::Duration::from_secs_f64(files),
        std::time::Duration::from_secs_f64(left),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_files_are_weighed_against_the_preparation_left() {
        use super::{Work, estimate};
        use std::time::Duration;
        let secs = |d: Duration| (d.as_secs_f64() * 100.0).round() / 100.0;
        // The 7.5M-row survey (38 fields) a quarter prepared in 4.5 s: 18 s in all.
        let (records, fields, rows, took) =
            (7_500_000, 38, 1_875_000, Duration::from_secs_f64(4.5));
        // Left: three quarters (13.5 s) and the last step (a tenth of the whole, 1.8 s).
        let count = Work {
            fields: 1,
            searched: 0,
        };
        let (files, left) = estimate(records, fields, rows, took, count);
        assert_eq!(secs(left), 15.3);
        // A count reads one field: 0.3 of a field's share of the 18 s.
        assert_eq!(
            secs(files),
            secs(Duration::from_secs_f64(18.0 * 0.3 / 38.0))
        );
        // `q` over the 35 text fields: read and searched, 0.6 of 35 shares: 9.95 s, sooner
        // than the preparation here, later once it is further along.
        let q = Work {
            fields: 35,
            searched: 35,
        };
        let (files, left) = estimate(records, fields, rows, took, q);
        assert_eq!(secs(files), 9.95);
        assert!(files < left);
        let (files, left) = estimate(records, fields, 6_000_000, Duration::from_secs_f64(14.4), q);
        assert_eq!(secs(left), 5.4);
        assert!(left < files);
        // Nothing prepared yet measured: no division by zero.
        let (files, left) = estimate(records, fields, 0, Duration::ZERO, q);
        assert_eq!((files, left), (Duration::ZERO, Duration::ZERO));
    }
}
