//! Calls whose physical work runs on a cluster (Apache Arrow Ballista): what the engine
//! knows of it. The cluster itself (the codec, the client, the scheduler and executor
//! binaries) lives in the `tally-cluster` crate, which implements [`Cluster`].
//!
//! Only data read from its files at every call can be distributed: a prepared table lives in
//! this process's memory. In cluster mode the scan of such a table is a [`ScanExec`]: the
//! scan the single-node path makes, plus a description of its table ([`TableSource`]: the
//! definition, the files and the versions registered, the call's projection, conditions and
//! limit). An executor that receives it rebuilds the table from that description and makes
//! the very same scan (the same code, the same partitions), so the answers are those of the
//! single-node path. Name resolution, the semantic layer, budgets and the envelope stay on
//! the server; the executors only scan and compute.
//!
//! [`TableSource`]: crate::source::TableSource

mod call;
mod crossing;
mod partitions;
mod planner;
mod scan;

pub use call::{Cluster, ClusterCall, Split, of_session};
pub use crossing::Crossing;
pub use partitions::partitions_alone;
pub use planner::ClusterPlanner;
pub use scan::{ScanExec, StreamedTable};
