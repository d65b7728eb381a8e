//! tally-chart's tests: one binary, a module per concern.

mod choose;
mod common;
mod limits;
mod png;
mod svg;
