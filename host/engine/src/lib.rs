#![recursion_limit = "256"]
//! Tally's engine: the catalog of datasets, the backends that serve them as DataFusion table
//! providers, planning of resolved requests into DataFusion plans, execution, and the result
//! envelope.
//!
//! Architecture invariant: knows nothing of MCP or JSON-RPC, and never builds SQL text from
//! input: every plan is made with DataFusion's DataFrame and Expr API from a plan that
//! `tally-semantic` resolved against the dataset's own vocabulary.
//!
//! The one entry point for callers (CLI and MCP alike) is [`Engine::answer`] ([`door`]): a
//! caller, a request parsed once ([`Ask`]) and a time budget in, an envelope (`{"data",
//! "provenance"}`) out, run under the execution [`governor`].

pub mod aliases;
pub mod calibration;
pub mod call;
pub mod compare;
pub mod context;
pub mod cursor;
pub mod descriptions;
pub mod door;
pub mod engine;
pub mod envelope;
pub mod error;
pub mod estimate;
pub mod first_rows;
pub mod governor;
pub mod groups;
pub mod inspect;
pub mod json;
pub mod limits;
mod list;
pub mod lookup;
pub mod meta;
pub mod multicode;
pub mod periods;
pub mod plan;
pub mod policy;
pub mod pregroup;
pub mod provisions;
pub mod pushdown;
pub mod query;
pub mod results;
pub mod schema;
pub mod storage;
pub mod summarize;
mod twin;
pub mod values;
pub mod verify;

pub use tally_storage::watch;

pub use context::{Ask, CallCtx, Caller, Cx, KNOWN_VALUES, KNOWN_VALUES_WAIT, KnownValues, View};
pub use engine::Engine;
pub use envelope::{Envelope, Provenance};
pub use error::EngineError;
pub use limits::Limits;
pub use policy::Scope;
