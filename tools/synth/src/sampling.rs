//! Sampling helpers that hit exact counts by construction.
//!
//! The generator's contract is that null ratios and top-value shares match
//! the published statistics, so instead of drawing independently (and being
//! off by sampling noise) every column is built from exact counts, with
//! randomness only deciding *which* rows get which value.

use crate::rng::Rng;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Splits `total` into `weights.len()` integer parts proportional to the
/// weights, each part in `min_each..=cap`.
pub fn apportion(total: u64, weights: &[u64], min_each: u64, cap: u64) -> Result<Vec<u64>, String> {
    let n = weights.len() as u64;
    if n == 0 {
        return if total == 0 {
            Ok(Vec::new())
        } else {
            Err(format!("cannot split {total} into zero parts"))
        };
    }
    if min_each * n > total || cap * n < total || min_each > cap {
        return Err(format!(
            "cannot split {total} into {n} parts within {min_each}..={cap}"
        ));
    }
    let mut parts = vec![min_each; weights.len()];
    let mut rest = total - min_each * n;
    while rest > 0 {
        let open: Vec<usize> = (0..parts.len()).filter(|&i| parts[i] < cap).collect();
        let weight_sum: u128 = open.iter().map(|&i| u128::from(weights[i].max(1))).sum();
        let mut given = 0;
        for &i in &open {
            let share = (u128::from(rest) * u128::from(weights[i].max(1)) / weight_sum) as u64;
            let add = share.min(cap - parts[i]);
            parts[i] += add;
            given += add;
        }
        rest -= given;
        if given == 0 {
            // Floors all rounded to zero: hand out single units, heaviest first.
            let mut order = open;
            order.sort_by_key(|&i| (std::cmp::Reverse(weights[i]), i));
            for i in order {
                if rest == 0 {
                    break;
                }
                parts[i] += 1;
                rest -= 1;
            }
        }
    }
    Ok(parts)
}

/// Preference tier of a row when choosing which rows get a value: lower is
/// preferred; [`NEVER`] rows are never chosen.
pub type Tier = u8;
pub const NEVER: Tier = u8::MAX;

/// Chooses exactly `k` rows, taking tiers in order and picking uniformly at
/// random inside the tier that is only partly taken.
pub fn pick_rows(rng: &mut Rng, tiers: &[Tier], k: usize) -> Result<Vec<bool>, String> {
    let mut keyed: Vec<(Tier, u64, usize)> = tiers
        .iter()
        .enumerate()
        .filter(|&(_, &t)| t != NEVER)
        .map(|(i, &t)| (t, rng.next_u64(), i))
        .collect();
    if keyed.len() < k {
        return Err(format!(
            "need {k} rows but only {} are eligible",
            keyed.len()
        ));
    }
    keyed.sort_unstable();
    let mut chosen = vec![false; tiers.len()];
    for &(_, _, i) in &keyed[..k] {
        chosen[i] = true;
    }
    Ok(chosen)
}

/// Assigns one of `targets.len()` values to each element, value `v` exactly
/// `targets[v]` times, preferring values with a high `affinity(class, v)`
/// where `classes[i]` is the class of element `i` (rows that share the
/// attributes the affinity looks at share a class, so weights are computed
/// once per class). Returns the value index of each element.
///
/// Each element first draws a value in proportion to
/// `targets[v] * affinity`; values left short then take over elements from
/// overfull values, most constrained value first and best-suited class
/// first, which makes the totals exact while keeping most of the
/// correlation.
pub fn assign_exact(
    rng: &mut Rng,
    classes: &[usize],
    targets: &[usize],
    affinity: impl Fn(usize, usize) -> f64,
) -> Vec<usize> {
    assert_eq!(
        targets.iter().sum::<usize>(),
        classes.len(),
        "targets must add up to the number of elements"
    );
    let n_values = targets.len();
    let class_ids: Vec<usize> = classes
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let dense: BTreeMap<usize, usize> =
        class_ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    // Per class: affinity to every value, and cumulative draw weights.
    let fit: Vec<Vec<f64>> = class_ids
        .iter()
        .map(|&c| (0..n_values).map(|v| affinity(c, v)).collect())
        .collect();
    let cumulative: Vec<Vec<f64>> = fit
        .iter()
        .map(|a| {
            let mut total = 0.0;
            (0..n_values)
                .map(|v| {
                    total += targets[v] as f64 * a[v];
                    total
                })
                .collect()
        })
        .collect();
    let fallback: Vec<f64> = targets.iter().map(|&t| t as f64).collect();

    let element_class: Vec<usize> = classes.iter().map(|c| dense[c]).collect();
    let mut choice = Vec::with_capacity(classes.len());
    for &k in &element_class {
        let cum = &cumulative[k];
        let total = cum[n_values - 1];
        let v = if total > 0.0 {
            let x = rng.unit() * total;
            // First value whose cumulative weight exceeds x (never a
            // zero-weight value, as its cumulative equals its predecessor's).
            cum.partition_point(|&c| c <= x).min(n_values - 1)
        } else {
            rng.weighted(&fallback).expect("non-empty targets")
        };
        choice.push(v);
    }

    let mut count = vec![0usize; n_values];
    for &v in &choice {
        count[v] += 1;
    }
    let mut deficit: Vec<usize> = (0..n_values)
        .map(|v| targets[v].saturating_sub(count[v]))
        .collect();
    // Elements of overfull values, bucketed by (class, value) and shuffled,
    // so taking from the end of a bucket takes a random one.
    let mut buckets: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    for (i, &v) in choice.iter().enumerate() {
        if count[v] > targets[v] {
            buckets.entry((element_class[i], v)).or_default().push(i);
        }
    }
    for bucket in buckets.values_mut() {
        rng.shuffle(bucket);
    }
    let mut order: Vec<(f64, usize)> = (0..n_values)
        .filter(|&v| deficit[v] > 0)
        .map(|d| {
            let supply: f64 = buckets
                .iter()
                .map(|(&(k, _), b)| fit[k][d] * b.len() as f64)
                .sum();
            (supply / deficit[d] as f64, d)
        })
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for (_, d) in order {
        let mut ranked: Vec<(f64, u64, (usize, usize))> = buckets
            .iter()
            .filter(|&(&(_, v), b)| !b.is_empty() && count[v] > targets[v])
            .map(|(&(k, v), _)| (fit[k][d] / fit[k][v].max(1e-12), rng.next_u64(), (k, v)))
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, _, key) in ranked {
            let v = key.1;
            let bucket = buckets.get_mut(&key).expect("ranked buckets exist");
            while deficit[d] > 0 && count[v] > targets[v] {
                let Some(i) = bucket.pop() else { break };
                choice[i] = d;
                count[v] -= 1;
                count[d] += 1;
                deficit[d] -= 1;
            }
            if deficit[d] == 0 {
                break;
            }
        }
    }
    choice
}

/// A fixed set of distinct strings drawn with Zipf-like weights (1/rank),
/// used to give free-text and multi-value columns a realistic number of
/// distinct cells: the first items are common, the last ones rare.
#[derive(Clone, Debug)]
pub struct Pool {
    items: Vec<String>,
    cumulative: Vec<f64>,
}

impl Pool {
    /// Builds up to `k` distinct items from `generate` (fewer if it cannot
    /// produce that many distinct values in a reasonable number of tries).
    /// Items are ranked by how often `generate` produced them, so its most
    /// typical outputs (single answers, round periods) become the most
    /// frequent cells.
    pub fn build(rng: &mut Rng, k: usize, mut generate: impl FnMut(&mut Rng) -> String) -> Pool {
        let mut tally: HashMap<String, (usize, usize)> = HashMap::new();
        let mut draws = 0;
        let min_draws = (30 * k).max(1000);
        while (draws < min_draws || tally.len() < k) && draws < 200 * k.max(10) {
            let item = generate(rng);
            let first_seen = tally.len();
            tally.entry(item).or_insert((0, first_seen)).0 += 1;
            draws += 1;
        }
        let mut ranked: Vec<(String, (usize, usize))> = tally.into_iter().collect();
        ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.1.1.cmp(&b.1.1)));
        ranked.truncate(k);
        Self::from_items(ranked.into_iter().map(|(item, _)| item).collect())
    }

    pub fn from_items(items: Vec<String>) -> Pool {
        let mut total = 0.0;
        let cumulative = (0..items.len())
            .map(|i| {
                total += 1.0 / (i + 1) as f64;
                total
            })
            .collect();
        Pool { items, cumulative }
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn sample(&self, rng: &mut Rng) -> &str {
        let total = *self.cumulative.last().expect("sampling an empty pool");
        let x = rng.unit() * total;
        let i = self.cumulative.partition_point(|&c| c <= x);
        &self.items[i.min(self.items.len() - 1)]
    }
}

/// Draws a multi-value cell: a few distinct entries of `vocab` (weighted),
/// written in vocabulary order and joined with "; " like the survey.
/// Entries listed in `exclusive` (e.g. "none" answers) always stand alone.
pub fn combo(rng: &mut Rng, vocab: &[(&str, f64)], exclusive: &[&str], max_size: usize) -> String {
    let size = match rng.below(100) {
        0..=56 => 1,
        57..=81 => 2,
        82..=93 => 3,
        94..=97 => 4,
        _ => 5,
    }
    .min(max_size)
    .min(vocab.len());
    let mut weights: Vec<f64> = vocab.iter().map(|(_, w)| *w).collect();
    let mut picked = Vec::new();
    while picked.len() < size {
        let Some(i) = rng.weighted(&weights) else {
            break;
        };
        if exclusive.contains(&vocab[i].0) {
            if picked.is_empty() {
                return vocab[i].0.to_string();
            }
            weights[i] = 0.0;
            continue;
        }
        picked.push(i);
        weights[i] = 0.0;
    }
    picked.sort_unstable();
    picked
        .iter()
        .map(|&i| vocab[i].0)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apportion_is_exact_and_capped() {
        let parts = apportion(1000, &[100, 50, 10, 1, 1], 1, 400).unwrap();
        assert_eq!(parts.iter().sum::<u64>(), 1000);
        assert!(parts.iter().all(|&p| (1..=400).contains(&p)));
        assert!(apportion(10, &[1, 1], 1, 4).is_err());
    }

    #[test]
    fn assign_exact_hits_targets() {
        let mut rng = Rng::new(1);
        let classes: Vec<usize> = (0..1000).map(|i| i % 2).collect();
        let targets = [600, 300, 100];
        let got = assign_exact(&mut rng, &classes, &targets, |class, v| {
            if class == 0 && v == 2 { 0.0 } else { 1.0 }
        });
        let mut counts = [0; 3];
        for (i, &v) in got.iter().enumerate() {
            counts[v] += 1;
            assert!(
                !(classes[i] == 0 && v == 2),
                "affinity 0 must be respected when possible"
            );
        }
        assert_eq!(counts, targets);
    }

    #[test]
    fn pick_rows_prefers_low_tiers() {
        let mut rng = Rng::new(2);
        let tiers = [1, 0, NEVER, 0, 2];
        let chosen = pick_rows(&mut rng, &tiers, 3).unwrap();
        assert_eq!(chosen, vec![true, true, false, true, false]);
        assert!(pick_rows(&mut rng, &tiers, 5).is_err());
    }
}
