//! Tally's MCP layer: the tools, prompts, completions, resources and subscriptions a client
//! sees, the HTTP guard (tokens, scopes, origins, rate limits), and serving over stdio and
//! streamable HTTP. The `tally` binary wires the command line to it; tests and other hosts can
//! serve with it as a library.
//!
//! Architecture invariant: the only crate that knows MCP; it holds no query logic. Everything
//! the catalog holds reaches a caller through [`view::View`], which applies the caller's scope
//! (clippy refuses any other way to the catalog, `clippy.toml`), and every input is bounded in
//! `bounds` before a handler sees it. The engine's one entry point, `Engine::call`, answers
//! tool calls here and from the CLI alike.
//!
//! The public surface is small: [`serve`] (stdio and HTTP), [`view`] (the caller's view, for
//! the CLI's commands), [`chart`] (a summary drawn as SVG or PNG), [`audit`] (the audit log)
//! and [`exit`] (the exit codes every command shares).

pub mod audit;
mod bounds;
mod chart;
mod choose;
mod events;
mod guard;
mod listen;
mod logging;
mod mcp;
pub mod methods;
mod metrics;
mod oauth;
pub mod otlp;
mod policies;
mod progress;
mod prompts;
pub mod serve;
mod session;
mod stdio;
mod subscriptions;
mod tasks;
mod tools;
mod ui;
pub mod view;
