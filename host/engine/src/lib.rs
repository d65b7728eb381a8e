//! Tally's engine: the catalog of datasets, the backends that serve them as DataFusion table
//! providers, planning of resolved requests into DataFusion plans, execution, and the result
//! envelope. It knows nothing of MCP or JSON-RPC.
//!
//! The engine arrives with the engine issue; this crate fixes its place in the workspace.
