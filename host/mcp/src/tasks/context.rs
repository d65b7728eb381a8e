//! What a task's work is handed: its status message, its questions to the user (shown as
//! `input_required` until `tasks/update` answers them) and its cancellation.

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::InputRequest;
use rmcp::task_manager::TaskExit;
use serde_json::Value;

use super::state::{Inner, Run};

/// What a task's work is handed: its id, its status message, its questions to the user and
/// its cancellation.
#[derive(Clone)]
pub struct Context {
    pub(super) id: String,
    pub(super) inner: Arc<Inner>,
    pub(super) cancel: tokio::sync::watch::Receiver<bool>,
}

impl Context {
    /// Asks the client (the task shows `input_required` with the question under `key` until
    /// `tasks/update` answers it); `TaskExit::Cancelled` when the task is cancelled first.
    /// Dropping the future withdraws the question.
    pub async fn request_input(
        &self,
        key: impl Into<String>,
        request: InputRequest,
    ) -> Result<Value, TaskExit> {
        let key = key.into();
        let (answer, answered) = tokio::sync::oneshot::channel();
        {
            let mut state = self.inner.lock();
            let Some(entry) = state.tasks.get_mut(&self.id) else {
                return Err(TaskExit::Cancelled);
            };
            let Run::Working(working) = &mut entry.run else {
                return Err(TaskExit::Cancelled);
            };
            if *working.cancel.borrow() {
                return Err(TaskExit::Cancelled);
            }
            if !working.used_keys.insert(key.clone()) {
                return Err(TaskExit::Error(ErrorData::internal_error(
                    format!("the question `{key}` was already asked in this task"),
                    None,
                )));
            }
            working.inputs.insert(key.clone(), (request, answer));
            entry.touch();
        }
        let _withdrawn = Withdraw {
            context: self,
            key: &key,
        };
        answered.await.map_err(|_| TaskExit::Cancelled)
    }

    /// The task's status message, as `tasks/get` shows it while it runs.
    pub fn set_status_message(&self, message: impl Into<String>) {
        let mut state = self.inner.lock();
        if let Some(entry) = state.tasks.get_mut(&self.id)
            && entry.running()
        {
            entry.task.status_message = Some(message.into());
            entry.touch();
        }
    }

    /// Resolves when `tasks/cancel` asks the task to stop (or the task is gone).
    pub async fn cancelled(&self) {
        let mut cancel = self.cancel.clone();
        let _ = cancel.wait_for(|asked| *asked).await;
    }
}

/// A question withdrawn when its wait ends (answered, timed out or dropped): the task no
/// longer shows it.
struct Withdraw<'a> {
    context: &'a Context,
    key: &'a str,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut state = self.context.inner.lock();
        if let Some(entry) = state.tasks.get_mut(&self.context.id)
            && let Run::Working(working) = &mut entry.run
            && working.inputs.remove(self.key).is_some()
        {
            entry.touch();
        }
    }
}
