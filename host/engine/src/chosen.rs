//! The names the user chose for ambiguous ones, for the call running on this task: set by
//! [`crate::Engine::call_guarded_within`], read where names are resolved and where the answer
//! says how they were (`resolved_fields`).

use std::sync::Arc;

use tally_semantic::resolve::Choice;

tokio::task_local! {
    /// The names the user chose for ambiguous ones of the call on this task.
    pub(crate) static CHOSEN: Arc<Vec<Choice>>;
}

/// The names the user chose for ambiguous ones of the call running on this task (none
/// outside a call, or when nothing was asked).
pub(crate) fn chosen() -> Arc<Vec<Choice>> {
    CHOSEN.try_with(Arc::clone).unwrap_or_default()
}
