//! What stands between the network and the MCP endpoint: Host and Origin allow-lists, bearer
//! tokens (with dataset scopes), a per-caller rate limit, and caps on requests in flight: per
//! caller (`--max-concurrent`) and in all (`--max-in-flight`). Without tokens every local
//! client is the same address, so requests in flight are counted per MCP session there (per
//! address only outside a session): one client's requests cannot take every other local
//! client's slots. Every refusal says why, which cap, and when it frees; secrets never reach
//! a log.
//!
//! The middleware and the order of its checks (`admit`), over the tokens (`tokens`), who a
//! request speaks for (`authenticate`), whose a session is (`sessions`), what the guard
//! counts (`state`) and the refusals it answers with (`refusal`).

mod admit;
mod authenticate;
mod refusal;
mod sessions;
mod state;
mod tokens;

pub use admit::check;
pub use state::{Guard, MAX_IN_FLIGHT, MAX_SESSIONS, MAX_SESSIONS_PER_CALLER};
pub use tokens::{Auth, Tokens};

#[cfg(test)]
mod tests;
