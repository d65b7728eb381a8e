//! Tally on an Apache Arrow Ballista cluster.
//!
//! The server plans each call as it does alone; the part of a plan that scans files
//! (`tally_storage::cluster::ScanExec`), below its lowest exchanges
//! (`tally_storage::cluster::ClusterPlanner`), is sent as a physical plan to the Ballista
//! scheduler, which hands its tasks to the executors. Its answer streams back to the server,
//! which merges it (the exchanges and what is above them) and shapes it into the envelope as
//! for any call.
//!
//! - [`codec`]: how Tally's scans and functions travel (the scheduler and every executor
//!   must use it: `tally-scheduler` and `tally-executor` are Ballista's with it).
//! - [`BallistaCluster`]: what `tally serve --cluster df://HOST:PORT` sends plans to.

mod address;
mod client;
pub mod codec;
mod exec;

pub use address::{Address, without_delay};
pub use codec::TallyCodec;
pub use exec::{BallistaCluster, reachable};
