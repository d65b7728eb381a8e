//! What goes wrong with a plugin, in words for the person who put it there.

use tally_storage::problem::{Problem, Refusal};

/// Why a plugin could not be used or a call to it failed, in words for the caller: each kind
/// says what went wrong and what would fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// The plugin cannot be used as it is: a wrong API version, a missing entry point, an
    /// import the sandbox does not provide, a refused configuration.
    #[error("{message} ({fix})")]
    Unusable { message: String, fix: String },
    /// The plugin's file does not load or parse: it may still be being written, so the
    /// dataset is retried when the file settles before the refusal is reported.
    #[error("{message} ({fix})")]
    Incomplete { message: String, fix: String },
    /// The plugin answered a call with an error of its own.
    #[error("{message} ({fix})")]
    Refused { message: String, fix: String },
    /// The sandbox stopped a call: past its memory limit or deadline, a trap or a panic.
    #[error("{message} ({fix})")]
    Stopped { message: String, fix: String },
}

impl PluginError {
    /// A plugin that cannot be used as it is.
    pub fn new(message: impl Into<String>, fix: impl Into<String>) -> PluginError {
        PluginError::Unusable {
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// A plugin file that does not load, perhaps because it is still being written.
    pub fn incomplete(message: impl Into<String>, fix: impl Into<String>) -> PluginError {
        PluginError::Incomplete {
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// A call the plugin answered with an error of its own.
    pub fn refused(message: impl Into<String>, fix: impl Into<String>) -> PluginError {
        PluginError::Refused {
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// A call the sandbox stopped.
    pub fn stopped(message: impl Into<String>, fix: impl Into<String>) -> PluginError {
        PluginError::Stopped {
            message: message.into(),
            fix: fix.into(),
        }
    }

    /// What went wrong.
    pub fn message(&self) -> &str {
        match self {
            PluginError::Unusable { message, .. }
            | PluginError::Incomplete { message, .. }
            | PluginError::Refused { message, .. }
            | PluginError::Stopped { message, .. } => message,
        }
    }

    /// What would fix it.
    pub fn fix(&self) -> &str {
        match self {
            PluginError::Unusable { fix, .. }
            | PluginError::Incomplete { fix, .. }
            | PluginError::Refused { fix, .. }
            | PluginError::Stopped { fix, .. } => fix,
        }
    }

    /// Whether the plugin's file may still be being written (retry before reporting).
    pub fn maybe_incomplete(&self) -> bool {
        matches!(self, PluginError::Incomplete { .. })
    }
}

impl PluginError {
    /// The dataset folder's refusal: the `dataset.yaml` key at fault, the reason and the fix.
    pub fn refusal(self, key: &str) -> Refusal {
        let maybe_incomplete = self.maybe_incomplete();
        let (PluginError::Unusable { message, fix }
        | PluginError::Incomplete { message, fix }
        | PluginError::Refused { message, fix }
        | PluginError::Stopped { message, fix }) = self;
        Refusal {
            maybe_incomplete,
            data_gone: false,
            problems: vec![Problem {
                line: None,
                key: key.into(),
                reason: message,
                fix,
            }],
        }
    }
}
