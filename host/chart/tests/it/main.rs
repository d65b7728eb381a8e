//! tally-chart's tests: one binary, a module per concern.

mod choose;
mod common;
mod limits;
#[cfg(not(feature = "png"))]
mod no_png;
#[cfg(feature = "png")]
mod png;
mod svg;
