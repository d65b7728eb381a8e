//! A call's view of the cluster: the [`Cluster`] it sends work to, where its plans ran (and
//! why some stayed here), and how its scans of files are [`Split`] into the executors' tasks.

use std::fmt;
use std::sync::{Arc, Mutex};

use datafusion::catalog::Session;
use datafusion::physical_plan::ExecutionPlan;

/// A cluster the server sends the physical work of calls to.
pub trait Cluster: Send + Sync + fmt::Debug {
    /// Where it is, as the envelope names it (`df://host:port`).
    fn address(&self) -> &str;
    /// A plan that runs `plan` on the cluster and streams its answer back, or why `plan`
    /// cannot be sent (a node or function the cluster cannot rebuild).
    fn distribute(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        call: Arc<ClusterCall>,
    ) -> Result<Arc<dyn ExecutionPlan>, String>;
}

/// One call's view of the cluster, kept in its session config: where its plans went.
#[derive(Debug)]
pub struct ClusterCall {
    pub cluster: Arc<dyn Cluster>,
    /// How many of the call's plans ran on the cluster.
    distributed: Mutex<usize>,
    /// Why plans were computed here instead (each reason once).
    local: Mutex<Vec<String>>,
    /// The tasks the scheduler split the plans that ran there into, and whether it said so
    /// for every one of them.
    tasks: Mutex<(usize, bool)>,
    /// How its scans of files are split into partitions.
    pub split: Split,
}

/// How a scan of files sent to the cluster is split into partitions (the executors' tasks):
/// by the work it reads. A scan that reads little runs as one wave of tasks, one per slot of
/// the cluster (`--cluster-partitions`), so that a light call pays each task's fixed cost
/// (its share of the job, the footer compared, the page index decoded) once per slot. A scan
/// that reads more gets another wave for every `bytes_per_task` each slot would read, up to
/// [`Split::MOST_WAVES`]: with more tasks than slots, a slot that finishes early (an executor
/// on a core of its own) takes the next task instead of the call waiting for the slowest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The cluster's task slots (executors times the tasks each runs at once).
    pub slots: usize,
    /// Column-chunk bytes (compressed, as stored) a task reads before a scan gets another wave.
    pub bytes_per_task: u64,
}

impl Split {
    /// The bytes a task reads before another wave, by default: 16 MiB, about 40 ms of
    /// decoding and grouping on one core, against a few milliseconds of a task's fixed cost.
    pub const BYTES_PER_TASK: u64 = 16 << 20;
    /// The most waves of tasks a scan is split into.
    pub const MOST_WAVES: u64 = 4;

    /// The split of a cluster of `slots` task slots.
    pub fn slots(slots: usize) -> Split {
        Split {
            slots: slots.max(1),
            bytes_per_task: Self::BYTES_PER_TASK,
        }
    }

    /// The partitions of a scan that reads `bytes` of column chunks.
    pub fn partitions(&self, bytes: u64) -> usize {
        let slots = self.slots.max(1);
        let wave = self.bytes_per_task.max(1).saturating_mul(slots as u64);
        let waves = bytes.div_ceil(wave).clamp(1, Self::MOST_WAVES);
        slots * waves as usize
    }
}

impl ClusterCall {
    pub fn new(cluster: Arc<dyn Cluster>, split: Split) -> ClusterCall {
        ClusterCall {
            split,
            cluster,
            distributed: Mutex::new(0),
            local: Mutex::new(Vec::new()),
            tasks: Mutex::new((0, true)),
        }
    }

    /// A plan of the call ran on the cluster (in `tasks`, when the scheduler said).
    pub fn ran_remotely(&self, tasks: Option<usize>) {
        if let Ok(mut n) = self.distributed.lock() {
            *n += 1;
        }
        if let Ok(mut counted) = self.tasks.lock() {
            match tasks {
                Some(t) => counted.0 += t,
                None => counted.1 = false,
            }
        }
    }

    /// The tasks the plans that ran on the cluster were split into, when known for each.
    pub fn tasks(&self) -> Option<usize> {
        self.tasks
            .lock()
            .ok()
            .and_then(|t| (t.1 && t.0 > 0).then_some(t.0))
    }

    /// A plan of the call was computed on this server, for `why`.
    pub fn ran_here(&self, why: impl Into<String>) {
        let why = why.into();
        if let Ok(mut local) = self.local.lock()
            && !local.contains(&why)
        {
            local.push(why);
        }
    }

    /// How many plans ran on the cluster, and why others did not.
    pub fn outcome(&self) -> (usize, Vec<String>) {
        (
            self.distributed.lock().map(|n| *n).unwrap_or(0),
            self.local.lock().map(|l| l.clone()).unwrap_or_default(),
        )
    }
}

/// The cluster a call's context sends its work to, if any.
pub fn of_session(state: &dyn Session) -> Option<Arc<ClusterCall>> {
    state.config().get_extension::<ClusterCall>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_records_where_its_plans_ran() {
        #[derive(Debug)]
        struct Nowhere;
        impl Cluster for Nowhere {
            fn address(&self) -> &str {
                "df://127.0.0.1:1"
            }
            fn distribute(
                &self,
                _plan: Arc<dyn ExecutionPlan>,
                _call: Arc<ClusterCall>,
            ) -> Result<Arc<dyn ExecutionPlan>, String> {
                Err("nothing".into())
            }
        }
        let call = ClusterCall::new(Arc::new(Nowhere), Split::slots(2));
        call.ran_remotely(Some(4));
        call.ran_here("a reason");
        call.ran_here("a reason");
        call.ran_remotely(Some(3));
        assert_eq!(call.outcome(), (2, vec!["a reason".to_string()]));
        assert_eq!(call.tasks(), Some(7));
        call.ran_remotely(None);
        assert_eq!(call.tasks(), None);
    }

    #[test]
    fn a_scan_is_split_by_what_it_reads_in_whole_waves() {
        let split = Split::slots(2);
        let mib = 1u64 << 20;
        // Little or nothing read: one task per slot.
        assert_eq!(split.partitions(0), 2);
        assert_eq!(split.partitions(2 * mib), 2);
        assert_eq!(split.partitions(32 * mib), 2);
        // Another wave for every 16 MiB a slot would read, whole waves only.
        assert_eq!(split.partitions(32 * mib + 1), 4);
        assert_eq!(split.partitions(63 * mib), 4);
        assert_eq!(split.partitions(65 * mib), 6);
        // At most four waves, however much is read.
        assert_eq!(split.partitions(200 * mib), 8);
        assert_eq!(split.partitions(u64::MAX), 8);
        // No slot is taken as one; a test's small task size splits small files.
        assert_eq!(Split::slots(0).partitions(0), 1);
        let small = Split {
            slots: 3,
            bytes_per_task: 1000,
        };
        assert_eq!(small.partitions(2999), 3);
        assert_eq!(small.partitions(3001), 6);
    }
}
