//! Integration tests of `tally add` and `tally fetch`'s library: one binary, modules by
//! subject.

mod architecture;
mod common;
mod inputs;
mod limits;
mod reference;
mod staging;
