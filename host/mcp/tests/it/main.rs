//! The MCP library driven in-process, as a host embedding it would: one session over an
//! in-memory stream ([`tally_mcp::serve::over`]) and the HTTP server on a loopback port
//! ([`tally_mcp::serve::http`]), with the engine opened by the test. The Python suite drives
//! the `tally` binary from outside; these hold the library's own promises: every input is
//! bounded before work, the guard answers before a handler runs, and a caller sees only its
//! view of the catalog.

mod common;
mod http;
mod session;
