//! The exit codes of every `tally` command, one meaning each (README lists them):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | what was asked cannot be answered as given: tool arguments, an input file (`add`), a dataset `check` finds unservable |
//! | 2 | the command line itself: an unknown flag, a missing argument (clap's usage errors) |
//! | 3 | a failure while working: a limit, a file or the network, a bug |
//! | 4 | no such dataset |
//! | 5 | the setup: the datasets directory or a dataset folder/definition cannot be used, the audit log cannot be opened, the HTTP address or its tokens are refused |

/// What was asked cannot be answered as given.
pub const BAD_INPUT: u8 = 1;
/// A usage error of the command line (clap's own code).
pub const USAGE: u8 = 2;
/// A failure while working.
pub const FAILED: u8 = 3;
/// No such dataset.
pub const UNKNOWN_DATASET: u8 = 4;
/// The setup cannot be used.
pub const CONFIG: u8 = 5;

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_signal_while_draining_exits_as_a_failure() {
        assert_eq!(
            tally_mcp::serve::EXIT_ON_SECOND_SIGNAL,
            i32::from(super::FAILED)
        );
    }
}
