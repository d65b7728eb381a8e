//! `--cluster df://HOST:PORT`: the physical work of calls over Parquet data sent to an
//! Apache Arrow Ballista cluster (docs/cluster.md). Built with the `cluster` feature; without
//! it the flag is refused with how to build a server that has it.

use clap::Args;

/// Where calls are computed.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Send the physical work of query and summarize calls over Parquet data to the Ballista
    /// scheduler at this address (`df://HOST:PORT`, started with `tally-scheduler`, its
    /// executors with `tally-executor`). Name resolution, the semantic layer, budgets and
    /// the envelope stay on this server; Parquet datasets are read from their files at every
    /// call. Needs a server built with `--features cluster`.
    #[arg(
        long,
        global = true,
        value_name = "df://HOST:PORT",
        env = "TALLY_CLUSTER"
    )]
    pub cluster: Option<String>,
    /// When the scheduler cannot be reached: `fail` (the server does not start, a call
    /// fails saying why) or `local` (computed on this server, which the envelope says).
    #[arg(long, global = true, value_enum, default_value_t = Fallback::Fail)]
    pub cluster_fallback: Fallback,
    /// The cluster's task slots (its executors times the tasks each runs at once): a scan of
    /// files that reads little is split into this many partitions (tasks), one for each slot;
    /// a scan that reads more into further waves of as many, one wave for every 16 MiB of
    /// column chunks each slot would read, up to four waves.
    #[arg(long, global = true, default_value_t = 4, value_name = "N")]
    pub cluster_partitions: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fallback {
    Fail,
    Local,
}

impl ClusterArgs {
    /// The engine with its cluster, when one is named: the scheduler must answer at start
    /// (unless `--cluster-fallback local`, which only warns).
    #[cfg(feature = "cluster")]
    pub async fn apply(
        &self,
        engine: tally_engine::Engine,
        serving: bool,
    ) -> Result<tally_engine::Engine, String> {
        let Some(text) = &self.cluster else {
            return Ok(engine);
        };
        let address = tally_cluster::Address::parse(text).map_err(|e| format!("--cluster: {e}"))?;
        let fallback = self.cluster_fallback == Fallback::Local;
        if let Err(why) = tally_cluster::reachable(&address).await {
            if !fallback {
                return Err(format!(
                    "{why}; start it and its executors (docs/cluster.md), or pass --cluster-fallback local to compute on this server while it is down"
                ));
            }
            tracing::warn!(%why, "the cluster is not reachable; calls are computed on this server until it is");
        } else if serving {
            tracing::info!(cluster = %address, partitions = self.cluster_partitions, "sending the physical work of calls to the cluster");
        }
        Ok(engine.with_cluster(
            std::sync::Arc::new(tally_cluster::BallistaCluster::new(address, fallback)),
            tally_engine::storage::Split::slots(self.cluster_partitions),
        ))
    }

    #[cfg(not(feature = "cluster"))]
    pub async fn apply(
        &self,
        engine: tally_engine::Engine,
        _serving: bool,
    ) -> Result<tally_engine::Engine, String> {
        match &self.cluster {
            None => Ok(engine),
            Some(_) => Err(
                "--cluster: this tally was built without the cluster client; build it with `cargo build --release -p tally --features cluster` (docs/cluster.md)"
                    .to_string(),
            ),
        }
    }
}
