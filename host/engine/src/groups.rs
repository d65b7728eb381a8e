//! The cap on groups and on rows after exploding, checked while a summary aggregates.
//!
//! Every summary counts the records of each group (`__tally_rows`). That count is computed by
//! [`capped_count`], DataFusion's `count` wrapped so that its group accumulator, which is told
//! how many groups the hash table holds after every batch, stops the aggregation as soon as
//! the table passes the cap, or as soon as more rows than the explode cap have flowed in.
//! The call then ends early with an error that says what to narrow, instead of building
//! millions of groups and answering long after its deadline.
//!
//! A call over a large table aggregates in several partitions: each partition's partial
//! accumulator sees some of the rows, and each final accumulator the groups of one hash
//! partition. The accumulators of one summary share their counts ([`Counts`]), so the caps
//! hold for the whole summary: the rows every partial accumulator read (or passed on
//! unaggregated), and the groups all final accumulators hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature,
};

/// The name of the capped count in plans.
pub use tally_storage::coded::CAPPED_COUNT;

/// Why an aggregation was stopped; carried inside a DataFusion error and turned into a
/// `limit_exceeded` answer by the engine.
#[derive(Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The groups passed the cap.
    Groups { cap: usize, seen: usize, rows: u64 },
    /// More rows than the cap came out of exploding multi-value fields.
    Rows { cap: u64 },
}

impl Stopped {
    /// What the caller is told.
    pub fn message(&self) -> String {
        match self {
            Stopped::Groups { cap, seen, rows } => format!(
                "the summary would produce more than {cap} groups (it had {seen} after reading {rows} rows, and was stopped there)"
            ),
            Stopped::Rows { cap } => format!(
                "exploding the multi-value fields would produce more than {cap} rows beyond one per record (every combination of a record's parts is one row), so the summary was stopped"
            ),
        }
    }

    /// The stop as a tag of fixed form, which its error text carries out of another process
    /// (a cluster's executor, whose errors reach the server as text) and
    /// [`Stopped::from_message`] reads back: written and read here only, so no other code
    /// depends on the wording of [`Stopped::message`].
    fn tag(&self) -> String {
        match self {
            Stopped::Groups { cap, seen, rows } => {
                format!("{TAG}groups:{cap}:{seen}:{rows}]")
            }
            Stopped::Rows { cap } => format!("{TAG}rows:{cap}]"),
        }
    }
}

/// How the tag of a stop begins.
const TAG: &str = "[tally:stopped:";

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.message(), self.tag())
    }
}

/// As its message and tag: a cluster's executor sends a failed task's error as the `Debug`
/// form of its chain, which must carry the tag [`Stopped::from_message`] reads back.
impl std::fmt::Debug for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Stopped {}

/// The caps of one summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caps {
    pub groups: usize,
    pub rows: u64,
}

/// `count(x)` that stops the aggregation past the caps (one per summary: its accumulators
/// share their counts).
pub fn capped_count(caps: Caps) -> AggregateUDF {
    AggregateUDF::from(CappedCount {
        inner: count_udaf(),
        caps,
        counts: Arc::default(),
    })
}

/// The caps of a capped count, when `udaf` is one (what a cluster's executors rebuild it from:
/// there, the accumulators of each task share their counts, and the server checks the
/// groups of the whole answer again).
pub fn caps_of(udaf: &AggregateUDF) -> Option<Caps> {
    udaf.inner()
        .as_ref()
        .downcast_ref::<CappedCount>()
        .map(|c| c.caps)
}

impl Stopped {
    /// The stop whose tag is inside `text`, as an error from another process (a cluster's
    /// executor) carries it: only its text crosses, and the tag is read, never the words.
    pub fn from_message(text: &str) -> Option<Stopped> {
        let at = text.find(TAG)? + TAG.len();
        let tag = &text[at..at + text[at..].find(']')?];
        let mut parts = tag.split(':');
        let kind = parts.next()?;
        let mut number = || parts.next()?.parse::<u64>().ok();
        match kind {
            "groups" => Some(Stopped::Groups {
                cap: usize::try_from(number()?).ok()?,
                seen: usize::try_from(number()?).ok()?,
                rows: number()?,
            }),
            "rows" => Some(Stopped::Rows { cap: number()? }),
            _ => None,
        }
    }
}

/// What the accumulators of one summary have counted together.
#[derive(Debug, Default)]
struct Counts {
    /// Rows read by the partial (or only) accumulators.
    rows: AtomicU64,
    /// Groups held by the final accumulators (each holds the groups of its hash partition).
    final_groups: AtomicUsize,
}

#[derive(Debug)]
struct CappedCount {
    inner: Arc<AggregateUDF>,
    caps: Caps,
    counts: Arc<Counts>,
}

impl PartialEq for CappedCount {
    fn eq(&self, other: &Self) -> bool {
        self.caps == other.caps
    }
}

impl Eq for CappedCount {}

impl std::hash::Hash for CappedCount {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.caps.hash(state);
    }
}

impl AggregateUDFImpl for CappedCount {
    fn name(&self) -> &str {
        CAPPED_COUNT
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn accumulator(&self, acc_args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.inner.accumulator(acc_args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        self.inner.groups_accumulator_supported(args)
    }

    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(Capped {
            inner: self.inner.create_groups_accumulator(args)?,
            caps: self.caps,
            counts: Arc::clone(&self.counts),
            final_groups: 0,
        }))
    }

    fn default_value(&self, data_type: &DataType) -> Result<datafusion::common::ScalarValue> {
        self.inner.default_value(data_type)
    }
}

struct Capped {
    inner: Box<dyn GroupsAccumulator>,
    caps: Caps,
    counts: Arc<Counts>,
    /// The groups this accumulator last added to [`Counts::final_groups`].
    final_groups: usize,
}

impl std::fmt::Debug for Capped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capped")
            .field("caps", &self.caps)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Capped {
    /// `rows` more read; this accumulator holds `groups` (all the groups when it is the only
    /// one, those of its partition's rows when it is partial: a lower bound of the total).
    fn check(&mut self, rows: usize, groups: usize) -> Result<()> {
        let read = self.read(rows)?;
        if groups > self.caps.groups {
            return Err(self.too_many_groups(groups, read));
        }
        Ok(())
    }

    /// Counts `rows` more read by the summary; past the rows cap, the error.
    fn read(&self, rows: usize) -> Result<u64> {
        let read = self
            .counts
            .rows
            .fetch_add(rows as u64, Ordering::Relaxed)
            .saturating_add(rows as u64);
        if read > self.caps.rows {
            return Err(DataFusionError::External(Box::new(Stopped::Rows {
                cap: self.caps.rows,
            })));
        }
        Ok(read)
    }

    fn too_many_groups(&self, seen: usize, rows: u64) -> DataFusionError {
        DataFusionError::External(Box::new(Stopped::Groups {
            cap: self.caps.groups,
            seen,
            rows,
        }))
    }
}

impl GroupsAccumulator for Capped {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.check(group_indices.len(), total_num_groups)?;
        self.inner
            .update_batch(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.inner.evaluate(emit_to)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        // Merged partial states are groups, not rows: only the group cap applies, to the
        // groups of every final accumulator (their hash partitions do not overlap).
        let added = total_num_groups.saturating_sub(self.final_groups);
        self.final_groups = self.final_groups.max(total_num_groups);
        let held = self
            .counts
            .final_groups
            .fetch_add(added, Ordering::Relaxed)
            .saturating_add(added);
        if held > self.caps.groups {
            return Err(self.too_many_groups(held, self.counts.rows.load(Ordering::Relaxed)));
        }
        self.inner
            .merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        // A partial aggregation that stopped aggregating passes its rows on as states: they
        // are read all the same.
        self.read(values.first().map_or(0, |v| v.len()))?;
        self.inner.convert_to_state(values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}

/// The [`Stopped`] inside a DataFusion error, if that is why it failed.
pub fn stopped(e: &DataFusionError) -> Option<Stopped> {
    let mut current: &dyn std::error::Error = e;
    loop {
        if let Some(s) = current.downcast_ref::<Stopped>() {
            return Some(s.clone());
        }
        if let Some(DataFusionError::External(inner)) = current.downcast_ref::<DataFusionError>()
            && let Some(s) = inner.downcast_ref::<Stopped>()
        {
            return Some(s.clone());
        }
        current = current.source()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_read_back_from_its_message() {
        for stop in [
            Stopped::Groups {
                cap: 100_000,
                seen: 100_001,
                rows: 7_500_000,
            },
            Stopped::Rows { cap: 1_000_000 },
        ] {
            let carried = format!("Job 3 failed: Execution error: {stop}");
            assert_eq!(Stopped::from_message(&carried), Some(stop.clone()));
            // As an executor sends it: the Debug form of its error chain.
            let sent = format!("{:?}", DataFusionError::External(Box::new(stop.clone())));
            assert_eq!(Stopped::from_message(&sent), Some(stop));
        }
        assert_eq!(Stopped::from_message("another failure"), None);
        // The words alone are not read: only the tag the stop writes is.
        let words = Stopped::Rows { cap: 5 }.message();
        assert_eq!(Stopped::from_message(&words), None);
        assert_eq!(Stopped::from_message("[tally:stopped:rows:x]"), None);
        assert_eq!(Stopped::from_message("[tally:stopped:groups:1:2"), None);
    }

    #[test]
    fn the_caps_of_a_capped_count_are_read_back() {
        let caps = Caps {
            groups: 12,
            rows: 34,
        };
        assert_eq!(caps_of(&capped_count(caps)), Some(caps));
        assert_eq!(caps_of(&count_udaf()), None);
    }
}
