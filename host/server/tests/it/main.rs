//! End-to-end tests of the `tally` binary: one test binary for the crate.

mod cli;
mod e2e;
mod laws;
