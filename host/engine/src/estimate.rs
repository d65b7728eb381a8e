//! How long a call is likely to take, judged before it runs from what it names and where its
//! data is: a client that lets long calls run as MCP tasks gets a task for a call estimated
//! past half its budget, and an answer at once for the rest.
//!
//! The rates are this server's measured ones on two cores (docs/benchmarks.md): a summary
//! read from the files goes through about 75M field values a second, a substring search
//! through about 40M values a second for each text field it searches (46M measured over the
//! 35 text fields of 75M records), and a first preparation reads about 400k records a second. They are deliberately plain: an estimate only chooses
//! between answering now and answering through a task, and either way the answer is the same.
//!
//! Calibrated against what calls measure ([`crate::calibration`]): later estimates of a kind
//! (data read from the files, a first preparation) are scaled by how far off the estimates of
//! that kind have been on this machine, under its load.

use std::time::Duration;

use serde_json::Value;
use tally_semantic::Tool;
use tally_semantic::resolve::Choice;
use tally_storage::Dataset;

use crate::calibration::EstimateKind;
use crate::context::{Ask, Caller};
use crate::engine::Engine;

/// Field values a call read from the files goes through in a second.
const FIELD_VALUES_PER_SECOND: f64 = 75_000_000.0;
/// Text values a substring search folds and scans in a second, per searched field.
const SEARCHED_VALUES_PER_SECOND: f64 = 40_000_000.0;
/// Records a first preparation reads and prepares in a second.
const PREPARED_RECORDS_PER_SECOND: f64 = 400_000.0;
/// How many times an inspection read from the files goes through its fields' values: one
/// plan for the statistics of every field, then one per field for its value counts and
/// distinct values, each a scan of the columns it needs. Measured (release build, two
/// cores, 2026-12-05): 5.5 s for the 38 fields of 7.5M records read from the files, where
/// one pass at the rate above is 3.8 s; an inspection past half its budget becomes a task.
const INSPECT_PASSES: f64 = 2.0;
/// What sending a plan to a cluster and collecting its answer costs, whatever its size.
const CLUSTER_OVERHEAD: Duration = Duration::from_secs(2);

/// A call's estimated time and what it is spent on, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub time: Duration,
    pub why: String,
    /// What the estimate is of, which its calibration is kept by.
    pub kind: EstimateKind,
}

impl Engine {
    /// The estimated time of `tool` called with `arguments` by a caller limited to `scope`:
    /// `None` for calls that read no records (lists, checks of an answer) or name no dataset
    /// the caller may see, whose time is that of any small call. Scaled by how far this
    /// machine's calls of its kind have been from their estimates
    /// ([`crate::calibration::Calibration`]).
    pub fn estimate(&self, caller: &Caller, ask: &Ask, chosen: &[Choice]) -> Option<Estimate> {
        let mut estimate = self.plain_estimate(caller, ask, chosen)?;
        let factor = self.calibration.factor(estimate.kind);
        if factor != 1.0 {
            estimate.time = estimate.time.mul_f64(factor);
            estimate.why.push_str(&format!(
                " (×{factor:.2}, as {} such calls here took against their estimates)",
                self.calibration.samples(estimate.kind)
            ));
        }
        Some(estimate)
    }

    /// The estimate from the rates above alone, before calibration: what a call's measured
    /// time is compared with.
    pub(crate) fn plain_estimate(
        &self,
        caller: &Caller,
        ask: &Ask,
        chosen: &[Choice],
    ) -> Option<Estimate> {
        let (tool, arguments) = (ask.tool(), ask.arguments());
        if !matches!(
            tool,
            Tool::InspectDataset | Tool::QueryRecords | Tool::SummarizeRecords
        ) {
            return None;
        }
        let ds = self.dataset_named(ask.dataset_id(), &caller.scope, chosen)?;
        let records = ds.record_count()? as f64;
        let (fields, searched) = reads(&ds, tool, arguments);
        let passes = if tool == Tool::InspectDataset {
            INSPECT_PASSES
        } else {
            1.0
        };
        let from_files = Duration::from_secs_f64(
            passes * records * fields as f64 / FIELD_VALUES_PER_SECOND
                + records * searched as f64 / SEARCHED_VALUES_PER_SECOND,
        ) + if self.cluster().is_some() {
            CLUSTER_OVERHEAD
        } else {
            Duration::ZERO
        };
        let searching = if searched > 0 {
            format!(", searching {searched} text fields")
        } else {
            String::new()
        };
        let id = ds.id();
        if ds.read_from_files(self) {
            return Some(Estimate {
                time: from_files,
                why: format!(
                    "`{id}` is read from its files at every call: {records} records{searching}{}",
                    if self.cluster().is_some() {
                        " on the cluster"
                    } else {
                        ""
                    }
                ),
                kind: EstimateKind::Files,
            });
        }
        if ds.ready().is_some() {
            return None;
        }
        // Its table is being prepared, or will be at this call: the call answers from the
        // files or waits for the preparation, whichever is estimated sooner.
        let preparing = match ds.weigh(tally_storage::dataset::Work::default()) {
            Some(Some((_, left))) => left,
            _ => Duration::from_secs_f64(records / PREPARED_RECORDS_PER_SECOND),
        };
        let cached = self.cache().is_some_and(|c| c.holds(ds.id(), &ds.version));
        if cached {
            return None;
        }
        Some(Estimate {
            time: preparing.min(from_files.max(Duration::from_millis(1))),
            why: format!(
                "`{id}` is being prepared for its first use ({records} records{searching})"
            ),
            kind: EstimateKind::Preparing,
        })
    }
}

impl Engine {
    /// How long the first preparation of `ds`'s table is estimated to take still: the
    /// running preparation's own estimate, else its records at the rate above, calibrated.
    /// `None` when its records are not known.
    pub(crate) fn preparation_left(&self, ds: &Dataset) -> Option<Duration> {
        match ds.weigh(tally_storage::dataset::Work::default()) {
            Some(Some((_, left))) => Some(left),
            _ => {
                let records = ds.record_count()? as f64;
                Some(Duration::from_secs_f64(
                    records / PREPARED_RECORDS_PER_SECOND
                        * self.calibration.factor(EstimateKind::Preparing),
                ))
            }
        }
    }
}

/// The fields whose every value a call reads, and of those the text fields it searches for a
/// substring, as far as its arguments say before they are resolved.
fn reads(ds: &Dataset, tool: Tool, arguments: &Value) -> (usize, usize) {
    let all = ds.def.fields.len();
    if tool == Tool::InspectDataset {
        return (all, 0);
    }
    let named = |key: &str| match arguments.get(key) {
        Some(Value::Array(items)) => items.len(),
        Some(Value::Object(items)) => items.len(),
        Some(Value::String(_)) => 1,
        _ => 0,
    };
    let text_fields = ds
        .def
        .fields
        .iter()
        .filter(|f| !f.data_type.is_numeric())
        .count();
    let mut searched = 0;
    if arguments.get("q").is_some_and(|q| !q.is_null()) {
        searched += match named("search_fields") {
            0 => text_fields,
            n => n,
        };
    }
    if let Some(conditions) = arguments.get("where") {
        let text = conditions.to_string();
        searched +=
            text.matches("\"$contains\"").count() + text.matches("\"$not_contains\"").count();
    }
    let fields = (named("group_by") + named("measures") + named("where") + named("order_by") + 1)
        .max(searched)
        .min(all.max(1));
    (fields, searched.min(all))
}
