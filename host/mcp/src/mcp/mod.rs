//! The MCP server: the six tools over any rmcp transport (stdio, streamable HTTP), in both
//! protocol eras rmcp serves (2025-11-25 with the initialize handshake, 2026-07-28 stateless
//! with `server/discover`).
//!
//! One session's handler (`server`, over what all sessions share: `shared`) answers the MCP
//! methods (`handler`): the resources (`resources`), and a tool call (`call`) run now or as
//! a task (`task`), given as a tool result (`answer`) and recorded (`record`).

mod answer;
mod call;
mod handler;
mod record;
mod resources;
mod server;
mod shared;
mod task;

pub use server::TallyServer;
pub use shared::Shared;
