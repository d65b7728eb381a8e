//! How far a procedure is online: its status, the concerns and schedule where it is not
//! yet, and the information systems that take and process it.

use super::codes::{KIND_NONE, kind, status};
use super::table::{Common, Gen, Result};
use super::wording::code_combo;
use crate::rng::Rng;
use crate::sampling::{NEVER, Pool, Tier, apportion, assign_exact, pick_rows};
use crate::schema;
use crate::text::kanji;
use crate::vocab;
use std::collections::HashSet;

/// Values of an information-system column with their exact counts and the
/// ministries that run each system (empty: used by everyone).
struct Systems {
    names: Vec<String>,
    counts: Vec<usize>,
    owners: Vec<Vec<usize>>,
}

impl Gen<'_> {
    pub(super) fn online_status(&mut self) -> Result<()> {
        use status::*;
        let mut rng = self.rng("オンライン化の実施状況");
        let codes = schema::codes("オンライン化の実施状況");
        // Some laws are far more digitised than others.
        let digital: Vec<f64> = (0..self.cat.laws.len())
            .map(|_| 0.3 + 1.4 * rng.unit())
            .collect();
        let (kinds, common, row_law) = (&self.kind, &self.common, &self.cat.row_law);
        // Class: law, procedure type and whether the procedure is common.
        let class = |row: usize| {
            (row_law[row] * (KIND_NONE + 1) + kinds[row].unwrap_or(KIND_NONE)) * 2
                + usize::from(common[row] != Common::No)
        };
        self.status = self.exact_codes(
            "オンライン化の実施状況",
            &codes,
            &mut rng,
            class,
            |c, s| {
                let Some(s) = s else { return 1.0 };
                let (law, kind, shared) =
                    (c / 2 / (KIND_NONE + 1), c / 2 % (KIND_NONE + 1), c % 2 == 1);
                if s == PARTLY {
                    return if shared { 3.0 } else { 0.0005 };
                }
                let by_kind: [f64; 4] = match (kind != KIND_NONE).then_some(kind) {
                    Some(kind::APPLY) => [1.3, 0.8, 0.2, 0.5],
                    Some(kind::NOTICE_ON_REQUEST) => [1.0, 0.8, 0.2, 0.8],
                    Some(kind::NOTICE_EX_OFFICIO) => [0.8, 1.0, 0.3, 1.2],
                    Some(kind::RECORDS) => [0.6, 1.0, 0.5, 2.0],
                    _ => [0.7, 1.0, 0.3, 1.5],
                };
                let w = by_kind[s];
                if s == DONE { w * digital[law] } else { w }
            },
        )?;
        let text = self
            .status
            .iter()
            .map(|s| s.map(|s| codes[s].to_string()))
            .collect();
        self.put_text("オンライン化の実施状況", text);
        Ok(())
    }

    pub(super) fn concerns(&mut self) -> Result<()> {
        use status::*;
        let name = "オンライン化の実施予定及び検討時の懸念点";
        let mut rng = self.rng(name);
        let codes = schema::codes(name);
        let status = &self.status;
        let chosen = self.non_null_rows(name, &mut rng, |row| match status[row] {
            Some(NOT_YET | OTHER | PARTLY) => 0,
            Some(EXEMPT) | None => 1,
            Some(_) => 2,
        })?;
        let schedule = self.non_null("オンライン化実施時期")?;
        let chosen_count = chosen.iter().filter(|&&c| c).count();
        let planned_count = (schedule + schedule / 8).min(chosen_count);
        let tiers: Vec<Tier> = (0..self.n)
            .map(|row| match (chosen[row], status[row]) {
                (false, _) => NEVER,
                (true, Some(NOT_YET | PARTLY)) => 0,
                (true, Some(OTHER)) => 1,
                _ => 2,
            })
            .collect();
        let planned = pick_rows(&mut rng, &tiers, planned_count)?;

        let k = self.distinct_values(name)?;
        let k_plan = (k / 4).max(1);
        let weights = [0.0, 1.0, 1.5, 1.0, 1.5, 2.0, 2.5, 3.0];
        let plan_pool = Pool::build(&mut rng, k_plan, |rng| {
            if rng.chance(0.6) {
                codes[0].to_string()
            } else {
                let rest = code_combo(rng, &codes, &weights, &[], 3);
                format!("{}; {rest}", codes[0])
            }
        });
        let other_pool = Pool::build(&mut rng, k.saturating_sub(k_plan).max(1), |rng| {
            code_combo(rng, &codes, &weights, &[], 4)
        });
        let concerns = (0..self.n)
            .map(|row| {
                if planned[row] {
                    Some(plan_pool.sample(&mut rng).to_string())
                } else if chosen[row] {
                    Some(other_pool.sample(&mut rng).to_string())
                } else {
                    None
                }
            })
            .collect();
        self.planned = planned;
        self.put_text(name, concerns);

        let name = "オンライン化実施時期";
        let codes = schema::codes(name);
        let mut rng = self.rng(name);
        let planned = &self.planned;
        let chosen =
            self.non_null_rows(name, &mut rng, |row| if planned[row] { 0 } else { NEVER })?;
        let when = Self::fill_codes(&mut rng, &chosen, &codes, &[10, 25, 28, 15, 8, 4, 10])?;
        self.put_text(name, when);
        Ok(())
    }

    /// Values for an information-system column: the published top values
    /// plus invented ministry systems for the rest, each below the smallest
    /// top count.
    fn system_values(&self, name: &str, suffixes: &[&str], rng: &mut Rng) -> Result<Systems> {
        let col = self.col(name)?;
        let mut names: Vec<String> = col.top_values.iter().map(|t| t.value.clone()).collect();
        let mut counts: Vec<usize> = col.top_values.iter().map(|t| t.count).collect();
        let mut owners: Vec<Vec<usize>> = names
            .iter()
            .map(|n| {
                vocab::system_owners(n)
                    .iter()
                    .filter_map(|o| self.cat.ministries.iter().position(|m| m.name == *o))
                    .collect()
            })
            .collect();
        let rest = col.non_null(self.n).saturating_sub(counts.iter().sum());
        let cap = counts
            .iter()
            .copied()
            .min()
            .unwrap_or(rest)
            .saturating_sub(1)
            .max(1);
        let tail = self
            .distinct_values(name)?
            .saturating_sub(names.len())
            .min(rest)
            .max(rest.div_ceil(cap));
        if tail > 0 {
            let weights: Vec<u64> = self.cat.ministries.iter().map(|m| m.rows as u64).collect();
            let per_ministry = apportion(tail as u64, &weights, 0, tail as u64)?;
            let mut used: HashSet<String> = names.iter().cloned().collect();
            for (m, want) in per_ministry.into_iter().enumerate() {
                let info = &self.cat.ministries[m];
                let mut made = 0;
                let mut tries = 0;
                while made < want {
                    tries += 1;
                    let suffix = rng.pick(suffixes);
                    let domain = rng.pick(info.domains());
                    let candidate = match rng.below(10) {
                        0..=5 => format!("{domain}{suffix}"),
                        6..=7 => format!("{}{suffix}", info.short()),
                        _ => format!("{}{domain}{suffix}", info.short()),
                    };
                    let candidate = if tries > 200 {
                        format!("{candidate}（{}）", kanji(tries))
                    } else {
                        candidate
                    };
                    if used.insert(candidate.clone()) {
                        names.push(candidate);
                        owners.push(vec![m]);
                        made += 1;
                    }
                }
            }
            let tail_weights: Vec<u64> = (0..tail)
                .map(|i| 1_000_000 / (i as u64 + 3) + rng.below(1000))
                .collect();
            let tail_counts = apportion(rest as u64, &tail_weights, 1, cap as u64)?;
            // Shuffle sizes so big tail systems are not all the first ministry's.
            let mut tail_counts: Vec<usize> = tail_counts.into_iter().map(|c| c as usize).collect();
            rng.shuffle(&mut tail_counts);
            counts.extend(tail_counts);
        }
        Ok(Systems {
            names,
            counts,
            owners,
        })
    }

    pub(super) fn systems(&mut self) -> Result<()> {
        let name = "情報システム(申請)";
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            match (self.is_apply(row), self.is_online(row) || self.planned[row]) {
                (true, true) => 0,
                (true, false) => 1,
                (false, true) => 2,
                _ => 3,
            }
        })?;
        let Systems {
            names,
            counts,
            owners,
        } = self.system_values(name, vocab::SYSTEM_SUFFIXES_APPLY, &mut rng)?;
        let rows: Vec<usize> = (0..self.n).filter(|&r| chosen[r]).collect();
        let affinity = |ministry: usize, v: usize, owners: &[Vec<usize>]| -> f64 {
            if owners[v].is_empty() {
                1.0
            } else if owners[v].contains(&ministry) {
                6.0
            } else {
                0.02
            }
        };
        let classes: Vec<usize> = rows.iter().map(|&r| self.ministry[r]).collect();
        let picked = assign_exact(&mut rng, &classes, &counts, |m, v| affinity(m, v, &owners));
        let mut apply_idx: Vec<Option<usize>> = vec![None; self.n];
        for (&row, v) in rows.iter().zip(picked) {
            apply_idx[row] = Some(v);
        }
        let apply_sys: Vec<Option<String>> = apply_idx
            .iter()
            .map(|v| v.map(|v| names[v].clone()))
            .collect();

        let name = "情報システム(事務処理)";
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            if apply_sys[row].is_some() {
                0
            } else if self.is_online(row) {
                1
            } else if self.is_apply(row) {
                2
            } else {
                3
            }
        })?;
        let Systems {
            names: names_b,
            counts: counts_b,
            owners: owners_b,
        } = self.system_values(name, vocab::SYSTEM_SUFFIXES_BACK, &mut rng)?;
        let rows: Vec<usize> = (0..self.n).filter(|&r| chosen[r]).collect();
        // Class: ministry and intake system (if any).
        let stride = names.len() + 1;
        let classes: Vec<usize> = rows
            .iter()
            .map(|&r| self.ministry[r] * stride + apply_idx[r].unwrap_or(names.len()))
            .collect();
        let picked = assign_exact(&mut rng, &classes, &counts_b, |c, v| {
            // The same system often handles both intake and processing.
            let same = names.get(c % stride) == Some(&names_b[v]);
            affinity(c / stride, v, &owners_b) * if same { 8.0 } else { 1.0 }
        });
        let mut back_sys = vec![None; self.n];
        for (&row, v) in rows.iter().zip(picked) {
            back_sys[row] = Some(names_b[v].clone());
        }
        self.put_text("情報システム(申請)", apply_sys);
        self.put_text(name, back_sys);
        Ok(())
    }
}
