//! What goes wrong with a plugin, in words for the person who put it there.

use std::fmt;

use tally_storage::problem::{Problem, Refusal};

/// Why a plugin call failed, in words for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    pub message: String,
    /// What would fix it.
    pub fix: String,
    /// The component may still be being written (it does not parse): retry before
    /// reporting it.
    pub maybe_incomplete: bool,
}

impl PluginError {
    pub fn new(message: impl Into<String>, fix: impl Into<String>) -> PluginError {
        PluginError {
            message: message.into(),
            fix: fix.into(),
            maybe_incomplete: false,
        }
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.fix)
    }
}

impl PluginError {
    /// The dataset folder's refusal: the `dataset.yaml` key at fault, the reason and the fix.
    pub fn refusal(self, key: &str) -> Refusal {
        Refusal {
            maybe_incomplete: self.maybe_incomplete,
            data_gone: false,
            problems: vec![Problem {
                line: None,
                key: key.into(),
                reason: self.message,
                fix: self.fix,
            }],
        }
    }
}
