//! Integration tests of the semantic layer: data-driven, one binary.

mod definitions;
mod harness;
mod reference;
mod requests;
