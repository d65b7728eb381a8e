//! The table being generated: its columns so far and the per-row classes later columns
//! depend on, with the helpers every phase uses to hit the published counts.

use super::codes::{kind, status};
use crate::laws::Catalogue;
use crate::rng::Rng;
use crate::sampling::{Tier, apportion, assign_exact, pick_rows};
use crate::stats::{ColumnStats, Stats};
use std::collections::BTreeMap;

pub(super) type Result<T> = std::result::Result<T, String>;

/// A generated column: text, or counts.
pub(crate) enum Column {
    Text(Vec<Option<String>>),
    Count(Vec<Option<i64>>),
}

/// Whether a procedure is common to several ministries (府省共通手続): not, to some, to all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Common {
    No,
    Some,
    All,
}

/// The table as generated so far, with the per-row classes later columns depend on.
pub(super) struct Gen<'a> {
    pub(super) stats: &'a Stats,
    pub(super) seed: u64,
    pub(super) n: usize,
    pub(super) cat: Catalogue,
    pub(super) ministry: Vec<usize>,
    pub(super) kind: Vec<Option<usize>>,
    pub(super) actor: Vec<Option<usize>>,
    pub(super) recipient: Vec<Option<usize>>,
    pub(super) via: Vec<Option<usize>>,
    pub(super) common: Vec<Common>,
    pub(super) status: Vec<Option<usize>>,
    /// Concerns include 0 オンライン化実施予定.
    pub(super) planned: Vec<bool>,
    pub(super) out: BTreeMap<&'static str, Column>,
}

impl Gen<'_> {
    pub(super) fn rng(&self, label: &str) -> Rng {
        Rng::stream(self.seed, label)
    }

    pub(super) fn col(&self, name: &str) -> Result<&ColumnStats> {
        self.stats.column(name)
    }

    pub(super) fn non_null(&self, name: &str) -> Result<usize> {
        Ok(self.col(name)?.non_null(self.n))
    }

    /// Target number of distinct non-null cells.
    pub(super) fn distinct_values(&self, name: &str) -> Result<usize> {
        let c = self.col(name)?;
        Ok(c.distinct_count
            .saturating_sub(usize::from(c.null_count > 0))
            .max(1))
    }

    pub(super) fn text(&self, name: &str) -> &[Option<String>] {
        match self.out.get(name) {
            Some(Column::Text(v)) => v,
            _ => panic!("text column {name} requested before it was generated"),
        }
    }

    pub(super) fn put_text(&mut self, name: &'static str, values: Vec<Option<String>>) {
        self.out.insert(name, Column::Text(values));
    }

    pub(super) fn is_apply(&self, row: usize) -> bool {
        self.kind[row] == Some(kind::APPLY)
    }

    pub(super) fn is_online(&self, row: usize) -> bool {
        matches!(self.status[row], Some(status::DONE | status::PARTLY))
    }

    /// Counts per code from the published top values; codes missing from
    /// the top list share whatever non-null rows remain.
    pub(super) fn code_targets(&self, name: &str, codes: &[&str]) -> Result<Vec<usize>> {
        let c = self.col(name)?;
        let mut targets = vec![0usize; codes.len()];
        for t in &c.top_values {
            let i = codes
                .iter()
                .position(|code| *code == t.value)
                .ok_or_else(|| format!("{name}: top value {} is not in the codelist", t.value))?;
            targets[i] = t.count;
        }
        let listed: usize = targets.iter().sum();
        let rest = c
            .non_null(self.n)
            .checked_sub(listed)
            .ok_or_else(|| format!("{name}: top values exceed rows"))?;
        if rest > 0 {
            let open: Vec<usize> = (0..codes.len()).filter(|&i| targets[i] == 0).collect();
            if open.is_empty() {
                return Err(format!("{name}: {rest} rows not covered by any code"));
            }
            let parts = apportion(rest as u64, &vec![1; open.len()], 0, rest as u64)?;
            for (i, p) in open.into_iter().zip(parts) {
                targets[i] = p as usize;
            }
        }
        Ok(targets)
    }

    /// Assigns codes (or null) to every row with the exact published
    /// counts; `class_of` groups rows that `affinity` treats alike.
    pub(super) fn exact_codes(
        &self,
        name: &str,
        codes: &[&str],
        rng: &mut Rng,
        class_of: impl Fn(usize) -> usize,
        affinity: impl Fn(usize, Option<usize>) -> f64,
    ) -> Result<Vec<Option<usize>>> {
        let mut targets = self.code_targets(name, codes)?;
        targets.push(self.col(name)?.null_count);
        let classes: Vec<usize> = (0..self.n).map(class_of).collect();
        let none = codes.len();
        let picked = assign_exact(rng, &classes, &targets, |class, v| {
            affinity(class, (v != none).then_some(v))
        });
        Ok(picked
            .into_iter()
            .map(|v| (v != none).then_some(v))
            .collect())
    }

    /// Chooses exactly the published number of non-null rows by tier.
    pub(super) fn non_null_rows(
        &self,
        name: &str,
        rng: &mut Rng,
        tier: impl Fn(usize) -> Tier,
    ) -> Result<Vec<bool>> {
        let tiers: Vec<Tier> = (0..self.n).map(tier).collect();
        self.exact_rows(name, rng, tiers)
    }

    pub(super) fn exact_rows(
        &self,
        name: &str,
        rng: &mut Rng,
        tiers: Vec<Tier>,
    ) -> Result<Vec<bool>> {
        pick_rows(rng, &tiers, self.non_null(name)?).map_err(|e| format!("{name}: {e}"))
    }

    /// A shuffled list holding value `v` exactly `counts[v]` times.
    pub(super) fn multiset(rng: &mut Rng, counts: &[u64]) -> Vec<usize> {
        let mut values: Vec<usize> = counts
            .iter()
            .enumerate()
            .flat_map(|(v, &c)| std::iter::repeat_n(v, c as usize))
            .collect();
        rng.shuffle(&mut values);
        values
    }

    /// Fills the chosen rows with a shuffled multiset of codes in the given
    /// proportions (for codelist attributes whose split is not published).
    pub(super) fn fill_codes(
        rng: &mut Rng,
        chosen: &[bool],
        codes: &[&str],
        weights: &[u64],
    ) -> Result<Vec<Option<String>>> {
        if codes.len() != weights.len() {
            return Err(format!(
                "{} codes but {} weights",
                codes.len(),
                weights.len()
            ));
        }
        let k = chosen.iter().filter(|&&c| c).count();
        let counts = apportion(k as u64, weights, 0, k as u64)?;
        let mut values = Self::multiset(rng, &counts).into_iter();
        Ok(chosen
            .iter()
            .map(|&c| {
                c.then(|| values.next())
                    .flatten()
                    .map(|v| codes[v].to_string())
            })
            .collect())
    }

    pub(super) fn involves(&self, row: usize, test: fn(usize) -> bool) -> bool {
        [self.actor[row], self.recipient[row], self.via[row]]
            .into_iter()
            .flatten()
            .any(test)
    }
}
