//! Integration tests of the semantic layer: data-driven, one binary.

mod definitions;
mod fuzz;
mod harness;
mod perturbations;
mod reference;
mod requests;
mod schema;
