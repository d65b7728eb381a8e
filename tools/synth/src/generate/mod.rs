//! Row generation: one method per column (or group of related columns),
//! called in dependency order so that conditional structure (attributes
//! that only apply to 申請等, concerns only for procedures not yet online,
//! …) can be honoured while every null count and top-value count comes out
//! exactly as published.
//!
//! The table and its helpers are in `table`, the codes rows are classed by in `codes`, cell
//! text in the survey's styles in `wording`; the phases [`generate`] calls are in
//! `procedure`, `online`, `application` and `counts`, by the columns they make.

mod application;
mod codes;
mod counts;
mod online;
mod procedure;
mod table;
mod wording;

use crate::laws;
use crate::schema;
use crate::stats::Stats;
use std::collections::BTreeMap;
use table::{Gen, Result};

pub(crate) use table::Column;

pub fn generate(stats: &Stats, seed: u64) -> Result<Vec<(&'static str, Column)>> {
    let cat = laws::build(stats, seed)?;
    let n = stats.record_count;
    let ministry = cat.row_law.iter().map(|&l| cat.laws[l].ministry).collect();
    let mut g = Gen {
        stats,
        seed,
        n,
        cat,
        ministry,
        kind: Vec::new(),
        actor: Vec::new(),
        recipient: Vec::new(),
        via: Vec::new(),
        common: Vec::new(),
        status: Vec::new(),
        planned: Vec::new(),
        out: BTreeMap::new(),
    };
    g.laws();
    g.kinds()?;
    g.articles_names_ids()?;
    g.parties()?;
    g.agencies_and_local()?;
    g.commonality()?;
    g.online_status()?;
    g.concerns()?;
    g.identity_and_fees()?;
    g.periods()?;
    g.systems()?;
    g.counts()?;
    g.application_details()?;
    g.attachments()?;
    g.events_and_receivers()?;

    let mut columns = Vec::with_capacity(schema::FIELDS.len());
    for f in schema::FIELDS {
        let col = g
            .out
            .remove(f.name)
            .ok_or_else(|| format!("column {} was not generated", f.name))?;
        columns.push((f.name, col));
    }
    Ok(columns)
}
