//! The options every data command takes, and the per-call budgets (they hold for the CLI,
//! stdio and HTTP alike).

use std::path::PathBuf;

use clap::Args;

use crate::cluster;

/// Options every data command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// The datasets directory.
    #[arg(long, global = true, default_value = "datasets")]
    pub(crate) datasets: PathBuf,
    /// Print the envelope on one line instead of indented.
    #[arg(long, global = true)]
    pub(crate) compact: bool,
    /// `prov`: also give the provenance as W3C PROV-O in JSON-LD (`prov` beside
    /// `provenance`); `json` (the default): Tally's JSON only.
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["json", "prov"])]
    pub(crate) provenance: Option<String>,
    #[command(flatten)]
    pub(crate) budgets: Budgets,
    #[command(flatten)]
    pub(crate) cluster: cluster::ClusterArgs,
}

impl Common {
    /// The per-call limits; with a cluster, Parquet datasets are read from their files at
    /// every call (what a cluster's executors can do) unless `--streaming` says otherwise.
    pub fn limits(&self) -> tally_engine::Limits {
        let mut limits = self.budgets.limits();
        if self.cluster.cluster.is_some() && self.budgets.streaming == StreamingArg::Auto {
            limits.serving = tally_engine::storage::Serving::Streaming;
        }
        limits
    }
}

/// Per-call budgets (they hold for the CLI, stdio and HTTP alike).
#[derive(Debug, Args)]
pub struct Budgets {
    /// Wall-clock time one call may take, in milliseconds.
    #[arg(long, global = true, default_value_t = 10_000)]
    pub(crate) call_timeout_ms: u64,
    /// Wall-clock time a call run as an MCP task may take, in milliseconds (a client that
    /// declares the tasks extension gets a task for a call estimated past half its budget).
    #[arg(long, global = true, default_value_t = 600_000)]
    pub(crate) task_timeout_ms: u64,
    /// Memory the operators of one call may reserve, in MiB.
    #[arg(long, global = true, default_value_t = 512)]
    pub(crate) call_memory_mb: usize,
    /// Size of the rows of one result, in bytes; rows past it are left out and that is said.
    #[arg(long, global = true, default_value_t = 4 * 1024 * 1024)]
    pub(crate) max_result_bytes: usize,
    /// Estimated tokens of the rows of one result (about 4 ASCII characters or 1 kana/kanji
    /// a token); rows past it are left out with a cursor, and that is said.
    #[arg(long, global = true, default_value_t = 6_000)]
    pub(crate) max_result_tokens: usize,
    /// Wall-clock time one wasm plugin call may run, in milliseconds.
    #[arg(long, global = true, default_value_t = 5_000)]
    pub(crate) plugin_deadline_ms: u64,
    /// Memory one wasm plugin instance may grow to, in MiB.
    #[arg(long, global = true, default_value_t = 256)]
    pub(crate) plugin_memory_mb: usize,
    /// Size of what one wasm plugin scan may return, in MiB.
    #[arg(long, global = true, default_value_t = 64)]
    pub(crate) plugin_output_mb: usize,
    /// Load native plugins (shared libraries named by `backend: {kind: native}`). They run
    /// with the server's full rights: allow them only for libraries you trust.
    #[arg(long, global = true, env = "TALLY_ALLOW_NATIVE", value_parser = clap::builder::FalseyValueParser::new())]
    pub(crate) allow_native: bool,
    /// Memory the whole server may hold for data and calls, in MiB: prepared datasets, files
    /// being read and the operators of every call in flight. A Parquet dataset whose prepared
    /// table does not fit is read from its files at every call instead (a plugin's is
    /// refused); a call that does not fit is stopped. Default: half of the machine's memory.
    #[arg(long, global = true, value_name = "MIB")]
    pub(crate) memory_budget: Option<usize>,
    /// Groups one summary may build; past it the summary stops while aggregating and says
    /// how to narrow it.
    #[arg(long, global = true, default_value_t = 100_000)]
    pub(crate) max_groups: usize,
    /// Rows one summary may add by exploding multi-value fields, beyond one row per record
    /// (a record of three parts adds two).
    #[arg(long, global = true, default_value_t = 10_000_000)]
    pub(crate) max_explode_rows: u64,
    /// Size of an answer `tally verify` or the verify_answer tool checks, in bytes; a larger
    /// one is refused before it is read.
    #[arg(long, global = true, default_value_t = 16 * 1024 * 1024)]
    pub(crate) max_envelope_bytes: usize,
    /// Heavy calls (reading many records: files read at every call, an unprepared table or
    /// one of 250,000 records or more, an inspection not yet computed, a check of an answer)
    /// that run at once, each
    /// on a thread of its own apart from those serving requests; the others wait for a slot,
    /// the caller with the fewest running first. Default: one a core.
    #[arg(long, global = true, value_name = "N")]
    pub(crate) heavy_calls: Option<usize>,
    /// Heavy calls that may wait for a slot, in all; past it (or past its time budget while
    /// waiting) a call is refused, saying which bound it met.
    #[arg(long, global = true, default_value_t = 32)]
    pub(crate) heavy_queue: usize,
    /// Heavy calls one caller may have waiting for a slot.
    #[arg(long, global = true, default_value_t = 8)]
    pub(crate) heavy_queue_per_caller: usize,
    /// How Parquet datasets are served: `auto` prepares a table when it fits the memory
    /// budget (or the cache) and reads the files at every call when it does not, and while a
    /// large one (a million records or more) is being prepared; `always` reads the files at
    /// every call; `never` always prepares (a dataset over the budget is refused).
    #[arg(long, global = true, value_enum, default_value_t = StreamingArg::Auto)]
    pub(crate) streaming: StreamingArg,
    /// Where each dataset version's prepared data is kept, written once and mapped on later
    /// starts (the first answer after a restart does not prepare again). Entries are checked
    /// before use and rebuilt when they do not check out. Default: the user's cache
    /// directory (`$XDG_CACHE_HOME/tally`, else `~/.cache/tally`), one folder per datasets
    /// directory.
    #[arg(long, global = true, value_name = "DIR", env = "TALLY_CACHE_DIR")]
    pub(crate) cache_dir: Option<std::path::PathBuf>,
    /// Keep no prepared data across starts (every start prepares the data it is asked for).
    #[arg(
        long,
        global = true,
        env = "TALLY_NO_CACHE",
        // 1/0, true/false, yes/no, on/off (an empty value is off). It wins over a cache
        // directory (no conflict: TALLY_NO_CACHE=0 beside TALLY_CACHE_DIR is fine).
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub(crate) no_cache: bool,
}

impl Budgets {
    /// The backends datasets may name: Parquet, wasm components in their sandbox, and native
    /// libraries when allowed. With a `cache` of prepared data, compiled wasm components
    /// are kept in it too (its `code` folder).
    pub fn backends(
        &self,
        cache: Option<&tally_engine::storage::Cache>,
    ) -> tally_engine::storage::Backends {
        tally_plugin_host::backends(tally_plugin_host::PluginOptions {
            code_cache: cache.map(|c| tally_plugin_host::CodeCache::new(c.dir().join("code"))),
            limits: tally_plugin_host::PluginLimits {
                deadline: std::time::Duration::from_millis(self.plugin_deadline_ms.max(10)),
                memory_bytes: self.plugin_memory_mb.max(1) * 1024 * 1024,
                output_bytes: self.plugin_output_mb.max(1) * 1024 * 1024,
                ..Default::default()
            },
            allow_native: self.allow_native,
        })
    }

    /// The cache of prepared data for the datasets directory `datasets`: the one named, else
    /// a folder of the user's cache directory kept for this datasets directory (two
    /// directories with a dataset of the same name never evict each other's entries); none
    /// with `--no-cache`, or when there is no cache directory to use.
    pub fn cache(&self, datasets: &std::path::Path) -> Option<tally_engine::storage::Cache> {
        if self.no_cache {
            return None;
        }
        if let Some(dir) = self
            .cache_dir
            .as_ref()
            .filter(|d| !d.as_os_str().is_empty())
        {
            return Some(tally_engine::storage::Cache::new(dir));
        }
        let root = tally_engine::storage::Cache::default_dir()?;
        Some(tally_engine::storage::Cache::new(
            root.join(tally_engine::storage::Cache::folder_for(datasets)),
        ))
    }

    pub fn limits(&self) -> tally_engine::Limits {
        tally_engine::Limits {
            call_timeout: std::time::Duration::from_millis(self.call_timeout_ms.max(1)),
            task_timeout: std::time::Duration::from_millis(self.task_timeout_ms.max(1)),
            call_memory_bytes: self.call_memory_mb.max(1) * 1024 * 1024,
            max_result_bytes: self.max_result_bytes.max(1024),
            max_result_tokens: self.max_result_tokens.max(100),
            memory_budget_bytes: self
                .memory_budget
                .map(|m| m.max(16) * 1024 * 1024)
                .unwrap_or_else(tally_engine::storage::default_memory_budget),
            max_groups: self.max_groups.max(1),
            max_explode_rows: self.max_explode_rows.max(1),
            max_envelope_bytes: self.max_envelope_bytes.max(1024),
            heavy_calls: self
                .heavy_calls
                .unwrap_or(tally_engine::Limits::default().heavy_calls)
                .max(1),
            heavy_queue: self.heavy_queue,
            heavy_queue_per_caller: self.heavy_queue_per_caller.max(1),
            serving: match self.streaming {
                StreamingArg::Auto => tally_engine::storage::Serving::Auto,
                StreamingArg::Always => tally_engine::storage::Serving::Streaming,
                StreamingArg::Never => tally_engine::storage::Serving::Prepared,
            },
            ..tally_engine::Limits::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamingArg {
    Auto,
    Always,
    Never,
}
