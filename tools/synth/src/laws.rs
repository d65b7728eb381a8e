//! The catalogue of laws and how the rows are spread over ministries and
//! laws.
//!
//! Row counts per ministry and for the most frequent laws and law numbers
//! come straight from the statistics. The long tail of laws is invented per
//! ministry so that 法令名 and 法令番号 stay paired (one law, one number),
//! every invented law stays below the smallest published top count (so the
//! published top list keeps its ranking), and the number of distinct names
//! and numbers lands on the published distinct counts.

use crate::rng::Rng;
use crate::sampling::apportion;
use crate::stats::{ColumnStats, Stats};
use crate::text::{era_year, kanji};
use crate::vocab::{self, LawKind, Ministry};
use std::collections::HashSet;

pub const DASH: &str = "-";

#[derive(Debug, Clone)]
pub struct Law {
    pub name: String,
    /// `None` is a missing number; unnumbered instruments mostly carry `-`.
    pub number: Option<String>,
    pub ministry: usize,
    pub subjects: Vec<String>,
    pub rows: usize,
    /// Laws behind procedures common to several ministries (会計, 人事, …).
    pub common: bool,
    pub max_article: u64,
}

#[derive(Debug, Clone)]
pub struct MinistryInfo {
    pub name: String,
    pub profile: Option<&'static Ministry>,
    pub rows: usize,
}

impl MinistryInfo {
    pub fn domains(&self) -> &'static [&'static str] {
        self.profile.map_or(vocab::GENERIC_DOMAINS, |p| p.domains)
    }

    pub fn common_bias(&self) -> f64 {
        self.profile.map_or(1.0, |p| p.common_bias)
    }

    pub fn short(&self) -> &str {
        self.profile.map_or(&self.name, |p| p.short)
    }
}

#[derive(Debug, Clone)]
pub struct Catalogue {
    pub ministries: Vec<MinistryInfo>,
    pub laws: Vec<Law>,
    /// Law index of each row; rows are grouped by ministry, then by law.
    pub row_law: Vec<usize>,
}

struct NameFactory<'a> {
    used_names: HashSet<String>,
    used_numbers: HashSet<String>,
    rng: &'a mut Rng,
}

impl NameFactory<'_> {
    fn year(&mut self) -> u32 {
        match self.rng.below(100) {
            0..=49 => self.rng.range(1947, 1970) as u32,
            50..=74 => self.rng.range(1971, 1995) as u32,
            _ => self.rng.range(1996, 2023) as u32,
        }
    }

    /// A fresh law number of the given kind (plus the rule designation
    /// used in 人事院規則 titles, which carry their number in the name).
    fn number(&mut self, kind: LawKind, ministry: &MinistryInfo) -> (String, Option<String>) {
        loop {
            let mut year = self.year();
            let (text, designation) = match kind {
                LawKind::Act => {
                    let max = if year < 1960 { 280 } else { 120 };
                    let n = self.rng.range(1, max) as u32;
                    (format!("{}法律第{}号", era_year(year), kanji(n)), None)
                }
                LawKind::CabinetOrder => {
                    let n = self.rng.range(1, 400) as u32;
                    (format!("{}政令第{}号", era_year(year), kanji(n)), None)
                }
                LawKind::Ordinance => {
                    let issuer = ministry.profile.map(|p| &p.issuer);
                    let name = match issuer {
                        Some(i) if year < i.since && !i.former.is_empty() => {
                            *self.rng.pick(i.former)
                        }
                        Some(i) => {
                            year = year.max(i.since);
                            i.current
                        }
                        None => "内閣府令",
                    };
                    if name == "人事院規則" {
                        let designation = format!(
                            "{}―{}",
                            kanji(self.rng.range(1, 17) as u32),
                            kanji(self.rng.range(0, 40) as u32 + 1)
                        );
                        (
                            format!("{}人事院規則{designation}", era_year(year)),
                            Some(designation),
                        )
                    } else {
                        let n = self.rng.range(1, 100) as u32;
                        (format!("{}{name}第{}号", era_year(year), kanji(n)), None)
                    }
                }
            };
            if self.used_numbers.insert(text.clone()) {
                return (text, designation);
            }
        }
    }

    /// Invents a law for `ministry`: its name, number (none for guidelines
    /// and circulars) and subject area.
    fn invent(
        &mut self,
        ministry: &MinistryInfo,
        unnumbered: bool,
    ) -> (String, Option<String>, String) {
        let domains = ministry.domains();
        let word = ministry.profile.map_or("省令", |p| {
            if p.issuer.current.ends_with("省令") {
                "省令"
            } else {
                p.issuer.current
            }
        });
        for attempt in 0..400 {
            let subject = (*self.rng.pick(domains)).to_string();
            if unnumbered {
                let template = self.rng.pick(vocab::UNNUMBERED_TEMPLATES);
                let name = template.replace("{S}", &subject);
                if self.used_names.insert(name.clone()) {
                    return (name, None, subject);
                }
                continue;
            }
            let weighted: Vec<(usize, f64)> = vocab::LAW_TEMPLATES
                .iter()
                .enumerate()
                .map(|(i, t)| (i, t.2 as f64))
                .collect();
            let (template, kind, _) = vocab::LAW_TEMPLATES[*self.rng.pick_weighted(&weighted)];
            // After many collisions the single-subject space is exhausted:
            // pair two subjects, which real omnibus ordinances also do.
            let subject_text = if attempt > 200 {
                let other = self.rng.pick(domains);
                format!("{subject}及び{other}")
            } else {
                subject.clone()
            };
            let is_hr = ministry
                .profile
                .is_some_and(|p| p.issuer.current == "人事院規則");
            if is_hr && kind == LawKind::Ordinance {
                let (number, designation) = self.number(kind, ministry);
                let name = format!(
                    "人事院規則{}（{subject_text}）",
                    designation.unwrap_or_default()
                );
                if self.used_names.insert(name.clone()) {
                    return (name, Some(number), subject);
                }
                self.used_numbers.remove(&number);
                continue;
            }
            let name = template.replace("{S}", &subject_text).replace("{W}", word);
            if self.used_names.contains(&name) {
                continue;
            }
            self.used_names.insert(name.clone());
            let (number, _) = self.number(kind, ministry);
            return (name, Some(number), subject);
        }
        // Practically unreachable; keeps names unique regardless.
        let n = self.used_names.len();
        let name = format!(
            "{}所管法令第{}",
            ministry.name,
            kanji((n % 9999 + 1) as u32)
        );
        self.used_names.insert(name.clone());
        let (number, _) = self.number(LawKind::Ordinance, ministry);
        (name, Some(number), domains[0].to_string())
    }
}

/// Subjects for a top law the vocabulary does not know: its name with the
/// usual suffixes removed.
fn subjects_from_name(name: &str) -> Vec<String> {
    let mut s = name.to_string();
    for suffix in ["施行規則", "施行令", "に関する法律", "法律", "法"] {
        if let Some(stripped) = s.strip_suffix(suffix) {
            s = stripped.to_string();
            break;
        }
    }
    vec![s]
}

/// Weights of a heavy-tailed size distribution over `k` items, randomly
/// perturbed so that equal ranks do not get equal sizes.
fn tail_weights(rng: &mut Rng, k: usize) -> Vec<u64> {
    let c = (k / 12).max(1) as f64;
    (0..k)
        .map(|i| {
            let base = 1.0e12 / ((i as f64 + c) * (i as f64 + c));
            (base * (0.5 + rng.unit())) as u64 + 1
        })
        .collect()
}

/// The law catalogue the generated rows cite, in phases: the ministries with their rows, the
/// published top laws ([`top_laws`]), the unnumbered instruments ([`unnumbered_laws`]), the
/// long tail per ministry ([`tail_laws`]), and each row's law ([`rows_by_ministry`]).
pub fn build(stats: &Stats, seed: u64) -> Result<Catalogue, String> {
    let mut rng = Rng::stream(seed, "laws");
    let n_rows = stats.record_count;

    let ministry_stats = stats.column("所管府省庁")?;
    let ministries: Vec<MinistryInfo> = ministry_stats
        .top_values
        .iter()
        .map(|t| MinistryInfo {
            name: t.value.clone(),
            profile: vocab::ministry(&t.value),
            rows: t.count,
        })
        .collect();
    let covered: usize = ministries.iter().map(|m| m.rows).sum();
    if covered != n_rows || ministry_stats.null_count != 0 {
        return Err(format!(
            "所管府省庁 top values cover {covered} of {n_rows} rows; the generator needs them all"
        ));
    }
    let mut residual: Vec<usize> = ministries.iter().map(|m| m.rows).collect();

    let name_stats = stats.column("法令名")?;
    let number_stats = stats.column("法令番号")?;
    let top_numbers: Vec<(&str, usize)> = number_stats
        .top_values
        .iter()
        .filter(|t| t.value != DASH)
        .map(|t| (t.value.as_str(), t.count))
        .collect();
    // Invented laws and numbers must stay below every published top count.
    let cap = name_stats
        .top_values
        .iter()
        .chain(number_stats.top_values.iter())
        .map(|t| t.count)
        .min()
        .unwrap_or(n_rows)
        .saturating_sub(1)
        .max(1);

    let mut factory = NameFactory {
        used_names: HashSet::new(),
        used_numbers: HashSet::new(),
        rng: &mut rng,
    };
    for t in &name_stats.top_values {
        factory.used_names.insert(t.value.clone());
    }
    for (number, _) in &top_numbers {
        factory.used_numbers.insert((*number).to_string());
    }
    let mut plan = Plan {
        ministries: &ministries,
        residual: &mut residual,
        laws: Vec::new(),
        cap,
    };
    top_laws(&mut plan, &mut factory, name_stats, &top_numbers)?;
    unnumbered_laws(&mut plan, &mut factory, name_stats, number_stats)?;
    tail_laws(&mut plan, &mut factory, name_stats)?;
    let laws = plan.laws;
    if let Some(m) = residual.iter().position(|&r| r > 0) {
        return Err(format!(
            "{} rows of {} were left without a law",
            residual[m], ministries[m].name
        ));
    }
    let row_law = rows_by_ministry(&mut factory, &ministries, &laws);
    debug_assert_eq!(row_law.len(), n_rows);
    Ok(Catalogue {
        ministries,
        laws,
        row_law,
    })
}

/// What the phases of [`build`] share: the ministries, the rows each has left to give a law,
/// the laws so far, and the most rows an invented law may have.
struct Plan<'a> {
    ministries: &'a [MinistryInfo],
    residual: &'a mut Vec<usize>,
    laws: Vec<Law>,
    cap: usize,
}

/// The published top laws, each given to its own ministry when known (else the roomiest), with
/// its real number or an unused published number of the same count.
fn top_laws(
    plan: &mut Plan<'_>,
    factory: &mut NameFactory<'_>,
    name_stats: &ColumnStats,
    top_numbers: &[(&str, usize)],
) -> Result<(), String> {
    let ministries = plan.ministries;
    let residual = &mut *plan.residual;
    let laws = &mut plan.laws;
    let mut taken_numbers: HashSet<&str> = HashSet::new();
    for t in &name_stats.top_values {
        let known = vocab::known_law(&t.value);
        let preferred = known.and_then(|k| ministries.iter().position(|m| m.name == k.ministry));
        let ministry = match preferred {
            Some(m) if residual[m] >= t.count => m,
            _ => (0..ministries.len())
                .max_by_key(|&m| (residual[m], std::cmp::Reverse(m)))
                .filter(|&m| residual[m] >= t.count)
                .ok_or_else(|| format!("no ministry has room for law {}", t.value))?,
        };
        residual[ministry] -= t.count;
        // Prefer the real number; otherwise pair with an unused published
        // number of the same count, as the statistics pair them.
        let number = match known {
            Some(k) => k.number.to_string(),
            None => match top_numbers
                .iter()
                .find(|(n, c)| *c == t.count && !taken_numbers.contains(n))
            {
                Some((n, _)) => (*n).to_string(),
                None => factory.number(LawKind::Act, &ministries[ministry]).0,
            },
        };
        factory.used_numbers.insert(number.clone());
        if let Some((n, _)) = top_numbers.iter().find(|(n, _)| *n == number) {
            taken_numbers.insert(n);
        }
        let subjects = known.map_or_else(
            || subjects_from_name(&t.value),
            |k| k.subjects.iter().map(|s| s.to_string()).collect(),
        );
        laws.push(Law {
            name: t.value.clone(),
            number: Some(number),
            ministry,
            subjects,
            rows: t.count,
            common: false,
            max_article: (40 + t.count as u64 / 3).min(400),
        });
    }
    Ok(())
}

/// Unnumbered instruments: one distinct name each, sharing `-` or null, which is what makes
/// the distinct counts of names and numbers differ.
fn unnumbered_laws(
    plan: &mut Plan<'_>,
    factory: &mut NameFactory<'_>,
    name_stats: &ColumnStats,
    number_stats: &ColumnStats,
) -> Result<(), String> {
    let (ministries, cap) = (plan.ministries, plan.cap);
    let residual = &mut *plan.residual;
    let laws = &mut plan.laws;
    let dash_rows = number_stats.top_count(DASH).unwrap_or(0);
    let null_rows = number_stats.null_count;
    let numbered_distinct =
        number_stats.distinct_count - usize::from(null_rows > 0) - usize::from(dash_rows > 0);
    let n_unnumbered = name_stats.distinct_count.saturating_sub(numbered_distinct);
    let (n_dash_laws, n_null_laws) = split_unnumbered(n_unnumbered, dash_rows, null_rows);
    for (n_laws, rows, number) in [
        (n_dash_laws, dash_rows, Some(DASH.to_string())),
        (n_null_laws, null_rows, None),
    ] {
        if n_laws == 0 {
            continue;
        }
        let weights = tail_weights(factory.rng, n_laws);
        let sizes = apportion(rows as u64, &weights, 1, cap as u64)?;
        for size in sizes {
            let size = size as usize;
            let ministry = pick_roomy_ministry(factory.rng, residual, size)
                .ok_or("no ministry has room for an unnumbered law")?;
            residual[ministry] -= size;
            let (name, _, subject) = factory.invent(&ministries[ministry], true);
            laws.push(Law {
                name,
                number: number.clone(),
                ministry,
                subjects: vec![subject],
                rows: size,
                common: false,
                max_article: 20,
            });
        }
    }
    Ok(())
}

/// The long tail, spread over ministries by their remaining rows; a ministry's top acts bring
/// their implementing orders and ordinances first.
fn tail_laws(
    plan: &mut Plan<'_>,
    factory: &mut NameFactory<'_>,
    name_stats: &ColumnStats,
) -> Result<(), String> {
    let (ministries, cap) = (plan.ministries, plan.cap);
    let residual = &mut *plan.residual;
    let laws = &mut plan.laws;
    let n_tail = name_stats
        .distinct_count
        .saturating_sub(laws.len())
        .min(residual.iter().sum());
    let active: Vec<usize> = (0..ministries.len()).filter(|&m| residual[m] > 0).collect();
    let weights: Vec<u64> = active.iter().map(|&m| residual[m] as u64).collect();
    let mut per_ministry = apportion(n_tail as u64, &weights, 1, n_tail as u64)?;
    // A ministry cannot have more laws than rows, nor fewer than it needs to
    // keep each law under the cap; move the difference to the largest.
    for (slot, &m) in active.iter().enumerate() {
        let min_laws = residual[m].div_ceil(cap) as u64;
        let max_laws = residual[m] as u64;
        per_ministry[slot] = per_ministry[slot].clamp(min_laws, max_laws);
    }
    let total: u64 = per_ministry.iter().sum();
    let biggest = (0..active.len())
        .max_by_key(|&s| residual[active[s]])
        .unwrap_or(0);
    per_ministry[biggest] = (per_ministry[biggest] + n_tail as u64).saturating_sub(total);

    let top_count = laws.len();
    for (slot, &m) in active.iter().enumerate() {
        let k = per_ministry[slot] as usize;
        let weights = tail_weights(factory.rng, k);
        let sizes = apportion(residual[m] as u64, &weights, 1, cap as u64)?;
        // Implementing orders and ordinances of the ministry's top laws are
        // natural high-volume members of its tail.
        let mut derived: Vec<(String, LawKind, Vec<String>)> = laws[..top_count]
            .iter()
            .filter(|l| l.ministry == m && l.number.is_some() && l.name.ends_with('法'))
            .flat_map(|l| {
                [
                    ("施行令", LawKind::CabinetOrder),
                    ("施行規則", LawKind::Ordinance),
                ]
                .map(|(suffix, kind)| (format!("{}{suffix}", l.name), kind, l.subjects.clone()))
            })
            .filter(|(name, _, _)| !factory.used_names.contains(name))
            .collect();
        derived.reverse();
        let bias = ministries[m].common_bias();
        for size in sizes {
            let (name, number, subjects) = match derived.pop() {
                Some((name, kind, subjects)) => {
                    factory.used_names.insert(name.clone());
                    let (number, _) = factory.number(kind, &ministries[m]);
                    (name, Some(number), subjects)
                }
                None => {
                    let (name, number, subject) = factory.invent(&ministries[m], false);
                    (name, number, vec![subject])
                }
            };
            let common = factory.rng.chance((0.03 * bias).min(0.6));
            laws.push(Law {
                name,
                number,
                ministry: m,
                subjects,
                rows: size as usize,
                common,
                max_article: (15 + size / 2).min(250),
            });
        }
        residual[m] = 0;
    }
    Ok(())
}

/// Each row's law: rows grouped by ministry (in the statistics' order), laws shuffled inside
/// each ministry.
fn rows_by_ministry(
    factory: &mut NameFactory<'_>,
    ministries: &[MinistryInfo],
    laws: &[Law],
) -> Vec<usize> {
    let n_rows = laws.iter().map(|l| l.rows).sum();
    let mut row_law = Vec::with_capacity(n_rows);
    for m in 0..ministries.len() {
        let mut ids: Vec<usize> = (0..laws.len()).filter(|&i| laws[i].ministry == m).collect();
        factory.rng.shuffle(&mut ids);
        for i in ids {
            row_law.extend(std::iter::repeat_n(i, laws[i].rows));
        }
    }
    row_law
}

fn split_unnumbered(n: usize, dash_rows: usize, null_rows: usize) -> (usize, usize) {
    if n == 0 || dash_rows + null_rows == 0 {
        return (0, 0);
    }
    let mut dash = (n * dash_rows + (dash_rows + null_rows) / 2) / (dash_rows + null_rows);
    if null_rows > 0 && dash == n {
        dash -= 1;
    }
    if dash_rows > 0 && dash == 0 {
        dash = 1;
    }
    (dash.min(dash_rows), (n - dash).min(null_rows))
}

/// A ministry with plenty of rows left, chosen in proportion to them.
fn pick_roomy_ministry(rng: &mut Rng, residual: &[usize], size: usize) -> Option<usize> {
    let weights: Vec<f64> = residual
        .iter()
        .map(|&r| if r >= size + 1000 { r as f64 } else { 0.0 })
        .collect();
    rng.weighted(&weights)
}
