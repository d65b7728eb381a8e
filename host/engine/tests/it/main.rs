//! Integration tests of the engine: one binary, data-driven.

mod aliases;
mod architecture;
mod cache;
mod calls;
mod cases;
mod differential;
mod fixture;
mod golden;
mod governor;
mod hostile;
mod lows;
mod modules;
mod paging;
mod partitions;
mod periods;
mod provenance;
mod provisions;
mod readable;
mod reference;
mod search;
mod snapshots;
mod streaming;
mod survey;
