//! How far this machine's calls have taken from their estimates ([`crate::estimate`]), per
//! kind of work: the factor later estimates are scaled by. Each call whose time was estimated
//! tells it how long it took; a call that waited for a heavy slot took that long to answer
//! too, so the calibration follows the machine's load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a call's time is mostly spent on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EstimateKind {
    /// Reading its data from the files (or the cluster).
    Files,
    /// Waiting for its table's first preparation, or reading the files meanwhile.
    Preparing,
}

/// Estimates smaller than this calibrate nothing: their time is mostly what any call costs.
const CALIBRATES_FROM: Duration = Duration::from_millis(200);
/// How far one measurement moves the correction (an exponential average of the log ratio).
const CALIBRATION_WEIGHT: f64 = 0.3;
/// The correction stays within these factors: one odd call (a machine paused, a cache that
/// was warm) cannot make every estimate absurd.
const CORRECTION_BOUNDS: (f64, f64) = (0.25, 8.0);

/// How far this machine's calls have taken from their estimates, per kind: the factor later
/// estimates are scaled by.
#[derive(Debug, Default)]
pub struct Calibration {
    files: Correction,
    preparing: Correction,
}

/// One kind's correction: the average log ratio (as f64 bits) and how many calls made it.
#[derive(Debug, Default)]
struct Correction {
    log_ratio: AtomicU64,
    samples: AtomicU64,
}

impl Correction {
    fn factor(&self) -> f64 {
        if self.samples.load(Ordering::Relaxed) == 0 {
            return 1.0;
        }
        f64::from_bits(self.log_ratio.load(Ordering::Relaxed)).exp()
    }

    fn observe(&self, estimated: Duration, took: Duration) {
        let ratio = (took.as_secs_f64() / estimated.as_secs_f64())
            .clamp(CORRECTION_BOUNDS.0, CORRECTION_BOUNDS.1)
            .ln();
        // Racing observers may drop one another's update: an estimate needs no more.
        let before = f64::from_bits(self.log_ratio.load(Ordering::Relaxed));
        let next = if self.samples.fetch_add(1, Ordering::Relaxed) == 0 {
            ratio
        } else {
            before + CALIBRATION_WEIGHT * (ratio - before)
        };
        self.log_ratio.store(next.to_bits(), Ordering::Relaxed);
    }
}

impl Calibration {
    fn of(&self, kind: EstimateKind) -> &Correction {
        match kind {
            EstimateKind::Files => &self.files,
            EstimateKind::Preparing => &self.preparing,
        }
    }

    /// The factor estimates of `kind` are scaled by (1 until a call has been measured).
    pub fn factor(&self, kind: EstimateKind) -> f64 {
        self.of(kind).factor()
    }

    /// How many calls of `kind` were measured.
    pub fn samples(&self, kind: EstimateKind) -> u64 {
        self.of(kind).samples.load(Ordering::Relaxed)
    }

    /// A call estimated (uncalibrated) at `estimated` took `took`.
    pub fn observe(&self, kind: EstimateKind, estimated: Duration, took: Duration) {
        if estimated >= CALIBRATES_FROM {
            self.of(kind).observe(estimated, took);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibration_follows_what_calls_took_within_bounds() {
        let c = Calibration::default();
        assert_eq!(c.factor(EstimateKind::Files), 1.0, "nothing measured yet");
        // Calls that took 1.5 times their estimate: the first sets the factor.
        c.observe(
            EstimateKind::Files,
            Duration::from_secs(4),
            Duration::from_secs(6),
        );
        assert!((c.factor(EstimateKind::Files) - 1.5).abs() < 1e-9);
        assert_eq!(c.factor(EstimateKind::Preparing), 1.0, "each kind its own");
        // Later ones move it part of the way.
        c.observe(
            EstimateKind::Files,
            Duration::from_secs(4),
            Duration::from_secs(4),
        );
        let f = c.factor(EstimateKind::Files);
        assert!(f > 1.0 && f < 1.5, "{f}");
        // Small estimates teach nothing; an absurd measure is bounded.
        c.observe(
            EstimateKind::Files,
            Duration::from_millis(10),
            Duration::from_secs(60),
        );
        assert_eq!(c.samples(EstimateKind::Files), 2);
        for _ in 0..50 {
            c.observe(
                EstimateKind::Files,
                Duration::from_secs(1),
                Duration::from_secs(1000),
            );
        }
        assert!((c.factor(EstimateKind::Files) - 8.0).abs() < 1e-6);
    }
}
