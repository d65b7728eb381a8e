//! Tally's semantic layer.
//!
//! Everything that gives data its meaning, and nothing that touches files, engines or
//! protocols: the `dataset.yaml` model and its validation ([`definition`]), matching names
//! against a dataset's vocabulary ([`names`]), the arguments of the four tools ([`request`])
//! and their resolution into plans the engine executes ([`resolve`]).
//!
//! Architecture invariant: no IO beyond parsing text handed in, no DataFusion, no MCP. Its
//! tests run in seconds.

pub mod definition;
pub mod error;
pub mod files;
pub mod names;
pub mod period;
pub mod request;
pub mod resolve;
pub mod yaml;

pub use definition::{DatasetDef, Diagnostic, Loaded, load_definition};
pub use error::{Ambiguous, Candidate, Error, ErrorCode, RequestError};
pub use request::{Request, Tool};
pub use resolve::{FieldId, Metric, QueryPlan, SummarizePlan};
