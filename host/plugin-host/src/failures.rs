//! Repeated failures of one dataset's reads, said in the log once per interval with a count:
//! a plugin failing every call must not write a warning per call (a client retrying four
//! times a second would fill the log with the same lines).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the failures of one dataset are said at most.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// The failures of one dataset's reads since the last one said.
#[derive(Debug, Default)]
pub struct FailureLog {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// When a failure was last said.
    said: Option<Instant>,
    /// Failures since then, not said one by one.
    unsaid: u64,
}

impl FailureLog {
    /// Whether the failure that just happened is to be said now (`Some(n)`, with `n` the
    /// failures since the last one said that were not), or only counted (`None`).
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match state.said {
            Some(said) if now.saturating_duration_since(said) < INTERVAL => {
                state.unsaid += 1;
                None
            }
            _ => {
                state.said = Some(now);
                Some(std::mem::take(&mut state.unsaid))
            }
        }
    }
}

/// How a failure said after others were only counted ends: `""` or `" (and 12 more failures
/// of its reads in the last 60 s, not logged one by one)"`.
pub fn unsaid(n: u64) -> String {
    match n {
        0 => String::new(),
        n => format!(
            " (and {n} more failure{} of its reads since the last one logged, within {} s, not logged one by one)",
            if n == 1 { "" } else { "s" },
            INTERVAL.as_secs()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_of_the_rest() {
        let log = FailureLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit_at(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(log.admit_at(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(
            log.admit_at(t0 + INTERVAL + Duration::from_secs(1)),
            Some(5)
        );
        assert_eq!(log.admit_at(t0 + INTERVAL + Duration::from_secs(2)), None);
        assert_eq!(unsaid(0), "");
        assert!(unsaid(5).contains("5 more failures"));
    }
}
