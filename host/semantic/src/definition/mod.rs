//! The dataset definition (`dataset.yaml`): its model, and the reader that validates it.
//!
//! The format is a superset of the public administrative-procedures format
//! (`schema_version: "1"`). Reading never stops at the first problem: every error and warning
//! is collected with the file, the line, the key path and a fix, so that one `tally check`
//! run shows everything that needs mending.
//!
//! The model is in `types` (and `url`, `diagnostic`); the reader in `read`, one module per
//! kind of key.

mod backend;
mod codes;
mod derived;
mod diagnostic;
mod fields;
pub mod keys;
mod links;
mod measures;
mod read;
mod schema;
mod types;
mod url;

pub use diagnostic::*;
pub use read::{load_definition, load_definition_hiding, quote_name, valid_id};
pub use schema::{SCHEMA_FILE, json_schema, schema_text, schema_url};
pub use types::*;
pub use url::*;
