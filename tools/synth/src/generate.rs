//! Row generation: one method per column (or group of related columns),
//! called in dependency order so that conditional structure (attributes
//! that only apply to 申請等, concerns only for procedures not yet online,
//! …) can be honoured while every null count and top-value count comes out
//! exactly as published.

use crate::laws::{self, Catalogue};
use crate::rng::Rng;
use crate::sampling::{NEVER, Pool, Tier, apportion, assign_exact, combo, pick_rows};
use crate::schema;
use crate::stats::{ColumnStats, Stats};
use crate::text::{floor2, full_width, kanji, round2};
use crate::vocab;
use std::collections::{BTreeMap, HashSet};

type Result<T> = std::result::Result<T, String>;

pub enum Column {
    Text(Vec<Option<String>>),
    Count(Vec<Option<i64>>),
}

// Indices into the static codelists (checked against the schema in tests).
pub(crate) mod kind {
    pub const APPLY: usize = 0;
    pub const NOTICE_ON_REQUEST: usize = 1;
    pub const NOTICE_EX_OFFICIO: usize = 2;
    pub const PRIVATE_DELIVERY: usize = 3;
    pub const INSPECTION: usize = 4;
    pub const RECORDS: usize = 5;
}

/// Class ids for rows without a 手続類型 / 手続主体, and the number of
/// actor classes (ten codes plus none), used to combine both in one id.
const KIND_NONE: usize = 6;
const ACTOR_NONE: usize = 10;
const ACTOR_CLASSES: usize = 11;

pub(crate) mod actor {
    pub const STATE: usize = 0;
    pub const AGENCY: usize = 1;
    pub const LOCAL: usize = 2;
    pub const STATE_AGENCY: usize = 3;
    pub const AGENCY_LOCAL: usize = 4;
    pub const STATE_LOCAL: usize = 5;
    pub const ALL_PUBLIC: usize = 6;
    pub const PERSON: usize = 7;
    pub const BUSINESS: usize = 8;
    pub const PERSON_BUSINESS: usize = 9;

    pub fn is_public(a: usize) -> bool {
        a <= ALL_PUBLIC
    }
    pub fn has_state(a: usize) -> bool {
        matches!(a, STATE | STATE_AGENCY | STATE_LOCAL | ALL_PUBLIC)
    }
    pub fn has_agency(a: usize) -> bool {
        matches!(a, AGENCY | STATE_AGENCY | AGENCY_LOCAL | ALL_PUBLIC)
    }
    pub fn has_local(a: usize) -> bool {
        matches!(a, LOCAL | AGENCY_LOCAL | STATE_LOCAL | ALL_PUBLIC)
    }
}

pub(crate) mod status {
    pub const DONE: usize = 0;
    pub const NOT_YET: usize = 1;
    pub const EXEMPT: usize = 2;
    pub const OTHER: usize = 3;
    pub const PARTLY: usize = 4;
}

/// Values of an information-system column with their exact counts and the
/// ministries that run each system (empty: used by everyone).
struct Systems {
    names: Vec<String>,
    counts: Vec<usize>,
    owners: Vec<Vec<usize>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Common {
    No,
    Some,
    All,
}

struct Gen<'a> {
    stats: &'a Stats,
    seed: u64,
    n: usize,
    cat: Catalogue,
    ministry: Vec<usize>,
    kind: Vec<Option<usize>>,
    actor: Vec<Option<usize>>,
    recipient: Vec<Option<usize>>,
    via: Vec<Option<usize>>,
    common: Vec<Common>,
    status: Vec<Option<usize>>,
    /// Concerns include 0 オンライン化実施予定.
    planned: Vec<bool>,
    out: BTreeMap<&'static str, Column>,
}

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

fn join(parts: &[&str]) -> String {
    parts.join("; ")
}

/// Replaces `{S}` and friends in a name pattern.
fn fill(pattern: &str, rng: &mut Rng, subject: &str) -> String {
    let mut s = pattern.replace("{S}", subject);
    for (key, words) in [
        ("{O}", vocab::NAME_OBJECTS),
        ("{A}", vocab::NAME_ACTIONS),
        ("{D}", vocab::NAME_DOCUMENTS),
        ("{R}", vocab::NAME_RECORDS),
    ] {
        if s.contains(key) {
            let word = if pattern.contains("{S}の{O}") && key == "{O}" && rng.chance(0.3) {
                *rng.pick(vocab::NAME_DECISIONS)
            } else {
                *rng.pick(words)
            };
            s = s.replace(key, word);
        }
    }
    s
}

/// A 根拠条項号 such as 第12条の2第1項, in one of the spellings the survey
/// mixes: Arabic, kanji, full-width, 第5の2条, with a law prefix, or listing
/// two articles.
fn article(rng: &mut Rng, max: u64) -> String {
    // Article 1 states a law's purpose and rarely grounds a procedure;
    // lower articles are still somewhat more common than later ones.
    let max = max.max(3);
    let a = if rng.chance(0.6) {
        rng.range(2, max)
    } else {
        rng.skewed(2, max)
    };
    let a = if rng.chance(0.02) { 1 } else { a };
    let branch = rng.chance(0.12).then(|| rng.range(2, 5));
    let para = rng.chance(0.55).then(|| rng.skewed(1, 8));
    let item = rng.chance(0.2).then(|| rng.skewed(1, 15));
    let arabic = |a: u64| {
        let mut s = format!("第{a}条");
        if let Some(b) = branch {
            s.push_str(&format!("の{b}"));
        }
        if let Some(p) = para {
            s.push_str(&format!("第{p}項"));
        }
        if let Some(i) = item {
            s.push_str(&format!("第{i}号"));
        }
        s
    };
    match rng.below(100) {
        0..=79 => arabic(a),
        80..=88 => {
            let k = |n: u64| kanji(n as u32);
            let mut s = format!("第{}条", k(a));
            if let Some(b) = branch {
                s.push_str(&format!("の{}", k(b)));
            }
            if let Some(p) = para {
                s.push_str(&format!("第{}項", k(p)));
            }
            if let Some(i) = item {
                s.push_str(&format!("第{}号", k(i)));
            }
            s
        }
        89..=93 => full_width(&arabic(a)),
        94..=95 => match (branch, para) {
            (Some(b), Some(p)) => format!("第{a}の{b}条第{p}項"),
            (Some(b), None) => format!("第{a}の{b}条"),
            (None, Some(p)) => format!("第{a}条{p}項"),
            (None, None) => format!("{a}条"),
        },
        96..=97 => format!(
            "{}{}",
            rng.pick(&["法", "令", "規則", "施行規則"]),
            arabic(a)
        ),
        _ => format!("{}、第{}条", arabic(a), a + 1),
    }
}

/// A standard processing period in the free-text style of the survey.
fn period(rng: &mut Rng) -> String {
    // Round, customary periods dominate; the rest is the long tail of
    // free-text answers.
    const TYPICAL: &[(&str, f64)] = &[
        ("1か月", 6.0),
        ("30日", 6.0),
        ("14日", 5.0),
        ("7日", 4.0),
        ("10日", 3.0),
        ("2か月", 3.0),
        ("3か月", 3.0),
        ("60日", 2.0),
        ("20日", 2.0),
        ("15日", 2.0),
        ("90日", 2.0),
        ("2週間", 2.0),
        ("即日", 2.0),
        ("45日", 1.5),
        ("6か月", 1.0),
        ("5日", 1.0),
        ("3日", 1.0),
    ];
    const DAYS: &[u64] = &[1, 2, 3, 5, 7, 10, 14, 15, 20, 21, 30, 40, 45, 60, 90, 120];
    if rng.chance(0.55) {
        return (*rng.pick_weighted(TYPICAL)).to_string();
    }
    let days = |rng: &mut Rng| {
        if rng.chance(0.7) {
            *rng.pick(DAYS)
        } else {
            rng.range(1, 180)
        }
    };
    match rng.below(100) {
        0..=27 => format!("{}日", days(rng)),
        28..=39 => format!("{}か月", rng.pick(&[1u64, 2, 3, 4, 6, 12])),
        40..=49 => format!("{}日以内", days(rng)),
        50..=56 => format!("{}営業日", rng.pick(&[3u64, 5, 7, 10, 14, 20, 30])),
        57..=66 => format!("{}週間", rng.range(1, 8)),
        67..=78 => {
            let a = days(rng);
            let b = a * rng.range(2, 6);
            format!("{a}日～{b}日")
        }
        79..=83 => (*rng.pick(&["定めなし", "標準処理期間なし", "随時", "個別に判断"])).to_string(),
        84..=90 => format!("概ね{}日", days(rng)),
        91..=94 => format!("{}か月～{}か月", rng.range(1, 3), rng.range(4, 12)),
        _ => format!("{}日（補正期間を除く）", days(rng)),
    }
}

/// Where an application is handed in: generic bodies, the ministry's own
/// offices, and local government, listed in a fixed order as on a form.
fn receiver_list(rng: &mut Rng, offices: &[&str], national: bool, local: bool) -> String {
    let mut parts: Vec<&str> = Vec::new();
    if national {
        if offices.is_empty() || rng.chance(0.55) {
            parts.push(vocab::GENERIC_RECEIVERS[0]);
        }
        if rng.chance(0.08) {
            parts.push(*rng.pick(&vocab::GENERIC_RECEIVERS[1..]));
        }
        if !offices.is_empty() && (parts.is_empty() || rng.chance(0.35)) {
            parts.push(*rng.pick(offices));
            if rng.chance(0.1) {
                parts.push(*rng.pick(offices));
            }
        }
    }
    if local || (!national && rng.chance(0.5)) {
        parts.push("地方等");
    }
    if parts.is_empty() {
        parts.push(vocab::GENERIC_RECEIVERS[0]);
    }
    let order = |p: &str| {
        vocab::GENERIC_RECEIVERS
            .iter()
            .chain(offices)
            .position(|x| *x == p)
            .unwrap_or(usize::MAX)
    };
    parts.sort_by_key(|p| order(p));
    parts.dedup();
    join(&parts)
}

/// Multi-value cell from the codes of a codelist (weights by position).
fn code_combo(
    rng: &mut Rng,
    codes: &[&str],
    weights: &[f64],
    exclusive: &[&str],
    max: usize,
) -> String {
    let vocab: Vec<(&str, f64)> = codes.iter().copied().zip(weights.iter().copied()).collect();
    combo(rng, &vocab, exclusive, max)
}

impl Gen<'_> {
    fn rng(&self, label: &str) -> Rng {
        Rng::stream(self.seed, label)
    }

    fn col(&self, name: &str) -> Result<&ColumnStats> {
        self.stats.column(name)
    }

    fn non_null(&self, name: &str) -> Result<usize> {
        Ok(self.col(name)?.non_null(self.n))
    }

    /// Target number of distinct non-null cells.
    fn distinct_values(&self, name: &str) -> Result<usize> {
        let c = self.col(name)?;
        Ok(c.distinct_count
            .saturating_sub(usize::from(c.null_count > 0))
            .max(1))
    }

    fn text(&self, name: &str) -> &[Option<String>] {
        match self.out.get(name) {
            Some(Column::Text(v)) => v,
            _ => panic!("text column {name} requested before it was generated"),
        }
    }

    fn put_text(&mut self, name: &'static str, values: Vec<Option<String>>) {
        self.out.insert(name, Column::Text(values));
    }

    fn is_apply(&self, row: usize) -> bool {
        self.kind[row] == Some(kind::APPLY)
    }

    fn is_online(&self, row: usize) -> bool {
        matches!(self.status[row], Some(status::DONE | status::PARTLY))
    }

    /// Counts per code from the published top values; codes missing from
    /// the top list share whatever non-null rows remain.
    fn code_targets(&self, name: &str, codes: &[&str]) -> Result<Vec<usize>> {
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
    fn exact_codes(
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
    fn non_null_rows(
        &self,
        name: &str,
        rng: &mut Rng,
        tier: impl Fn(usize) -> Tier,
    ) -> Result<Vec<bool>> {
        let tiers: Vec<Tier> = (0..self.n).map(tier).collect();
        self.exact_rows(name, rng, tiers)
    }

    fn exact_rows(&self, name: &str, rng: &mut Rng, tiers: Vec<Tier>) -> Result<Vec<bool>> {
        pick_rows(rng, &tiers, self.non_null(name)?).map_err(|e| format!("{name}: {e}"))
    }

    /// A shuffled list holding value `v` exactly `counts[v]` times.
    fn multiset(rng: &mut Rng, counts: &[u64]) -> Vec<usize> {
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
    fn fill_codes(
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

    fn laws(&mut self) {
        let names = self
            .cat
            .row_law
            .iter()
            .map(|&l| Some(self.cat.laws[l].name.clone()))
            .collect();
        let numbers = self
            .cat
            .row_law
            .iter()
            .map(|&l| self.cat.laws[l].number.clone())
            .collect();
        let ministries = self
            .ministry
            .iter()
            .map(|&m| Some(self.cat.ministries[m].name.clone()))
            .collect();
        self.put_text("法令名", names);
        self.put_text("法令番号", numbers);
        self.put_text("所管府省庁", ministries);
    }

    fn kinds(&mut self) -> Result<()> {
        let mut rng = self.rng("手続類型");
        let codes = schema::codes("手続類型");
        // Each law leans towards some procedure types, so types cluster by law.
        let bias: Vec<Vec<f64>> = (0..self.cat.laws.len())
            .map(|_| (0..codes.len()).map(|_| 0.4 + 1.2 * rng.unit()).collect())
            .collect();
        let row_law = &self.cat.row_law;
        self.kind = self.exact_codes(
            "手続類型",
            &codes,
            &mut rng,
            |row| row_law[row],
            |law, v| v.map_or(1.0, |k| bias[law][k]),
        )?;
        let text = self
            .kind
            .iter()
            .map(|k| k.map(|k| codes[k].to_string()))
            .collect();
        self.put_text("手続類型", text);
        Ok(())
    }

    fn articles_names_ids(&mut self) -> Result<()> {
        let mut rng = self.rng("根拠条項号");
        let null_articles = self.col("根拠条項号")?.null_count;
        let mut articles: Vec<Option<String>> = self
            .cat
            .row_law
            .iter()
            .map(|&l| Some(article(&mut rng, self.cat.laws[l].max_article)))
            .collect();
        let mut rows: Vec<usize> = (0..self.n).collect();
        rng.shuffle(&mut rows);
        for &r in rows.iter().take(null_articles) {
            articles[r] = None;
        }

        let mut rng = self.rng("手続名");
        let mut used: HashSet<String> = HashSet::new();
        let mut names = Vec::with_capacity(self.n);
        for (row, article) in articles.iter().enumerate() {
            let law = &self.cat.laws[self.cat.row_law[row]];
            let patterns = vocab::NAME_PATTERNS[self.kind[row].unwrap_or(kind::APPLY)];
            let mut name = String::new();
            let mut fresh = false;
            for _ in 0..6 {
                let subject = rng.pick(&law.subjects).clone();
                let pattern = *rng.pick(patterns);
                name = fill(pattern, &mut rng, &subject);
                // Some repeats are kept on purpose: the survey has ~7% of
                // rows sharing a name with another row.
                if !used.contains(&name) || rng.chance(0.3) {
                    fresh = true;
                    break;
                }
            }
            if !fresh {
                let a = article.as_deref().unwrap_or("附則");
                name = format!("{name}（{a}関係）");
            }
            used.insert(name.clone());
            names.push(Some(name));
        }
        let ids = (1..=self.n).map(|i| Some(format!("SYN-{i:06}"))).collect();
        self.put_text("根拠条項号", articles);
        self.put_text("手続名", names);
        self.put_text("手続ID", ids);
        Ok(())
    }

    fn parties(&mut self) -> Result<()> {
        use actor::*;
        let codes = schema::codes("手続主体");
        let mut rng = self.rng("手続主体");
        let kinds = self.kind.clone();
        let kind_class = |row: usize| kinds[row].unwrap_or(KIND_NONE);
        self.actor = self.exact_codes("手続主体", &codes, &mut rng, kind_class, |k, a| {
            let Some(a) = a else { return 1.0 };
            let public = is_public(a);
            match (k != KIND_NONE).then_some(k) {
                Some(kind::APPLY) => match a {
                    STATE | LOCAL => 0.15,
                    _ if public => 0.25,
                    BUSINESS => 1.5,
                    _ => 1.0,
                },
                Some(kind::NOTICE_ON_REQUEST | kind::NOTICE_EX_OFFICIO | kind::INSPECTION) => {
                    if public {
                        1.0
                    } else {
                        0.05
                    }
                }
                Some(kind::PRIVATE_DELIVERY) => match a {
                    BUSINESS => 2.0,
                    _ if public => 0.1,
                    _ => 1.0,
                },
                Some(kind::RECORDS) if public => 0.6,
                _ => 1.0,
            }
        })?;

        let codes_r = schema::codes("手続の受け手");
        let mut rng = self.rng("手続の受け手");
        let actors = self.actor.clone();
        let class =
            |row: usize| kind_class(row) * ACTOR_CLASSES + actors[row].unwrap_or(ACTOR_NONE);
        self.recipient =
            self.exact_codes("手続の受け手", &codes_r, &mut rng, class, |c, r| {
                let (k, a) = (c / ACTOR_CLASSES, c % ACTOR_CLASSES);
                let k = (k != KIND_NONE).then_some(k);
                let a = (a != ACTOR_NONE).then_some(a);
                let Some(r) = r else {
                    return match k {
                        Some(kind::INSPECTION | kind::RECORDS) | None => 1.0,
                        _ => 0.01,
                    };
                };
                let base = match k {
                    Some(kind::APPLY) => {
                        if is_public(r) {
                            1.0
                        } else {
                            0.05
                        }
                    }
                    Some(kind::NOTICE_ON_REQUEST | kind::NOTICE_EX_OFFICIO) => {
                        if is_public(r) {
                            0.25
                        } else {
                            1.0
                        }
                    }
                    Some(kind::PRIVATE_DELIVERY) => match r {
                        PERSON => 1.5,
                        _ if is_public(r) => 0.1,
                        _ => 1.0,
                    },
                    _ => 0.001,
                };
                if a == Some(r) { base * 0.15 } else { base }
            })?;

        let codes_v = schema::codes("経由機関");
        let mut rng = self.rng("経由機関");
        let recipients = self.recipient.clone();
        let chosen = self.non_null_rows("経由機関", &mut rng, |row| {
            match (kinds[row], recipients[row]) {
                (Some(kind::APPLY), Some(r)) if is_public(r) => 0,
                (_, Some(_)) => 1,
                _ => 2,
            }
        })?;
        let rows: Vec<usize> = (0..self.n).filter(|&r| chosen[r]).collect();
        let shares = [20u64, 15, 50, 2, 2, 8, 2, 1, 6, 1];
        let targets: Vec<usize> = apportion(rows.len() as u64, &shares, 1, rows.len() as u64)?
            .into_iter()
            .map(|c| c as usize)
            .collect();
        let classes: Vec<usize> = rows
            .iter()
            .map(|&r| recipients[r].unwrap_or(ACTOR_NONE))
            .collect();
        let picked = assign_exact(&mut rng, &classes, &targets, |recipient, v| {
            if recipient == v { 0.1 } else { 1.0 }
        });
        let mut via = vec![None; self.n];
        for (&row, v) in rows.iter().zip(picked) {
            via[row] = Some(v);
        }
        self.via = via;

        let to_text = |v: &[Option<usize>], codes: &[&str]| -> Vec<Option<String>> {
            v.iter().map(|x| x.map(|i| codes[i].to_string())).collect()
        };
        let (a, r, v) = (
            to_text(&self.actor, &codes),
            to_text(&self.recipient, &codes_r),
            to_text(&self.via, &codes_v),
        );
        self.put_text("手続主体", a);
        self.put_text("手続の受け手", r);
        self.put_text("経由機関", v);
        Ok(())
    }

    fn involves(&self, row: usize, test: fn(usize) -> bool) -> bool {
        [self.actor[row], self.recipient[row], self.via[row]]
            .into_iter()
            .flatten()
            .any(test)
    }

    fn agencies_and_local(&mut self) -> Result<()> {
        // 独立行政法人等の名称: a pool of invented bodies per ministry.
        let mut rng = self.rng("独立行政法人等の名称");
        let chosen = self.non_null_rows("独立行政法人等の名称", &mut rng, |row| {
            if self.involves(row, actor::has_agency) {
                0
            } else if self.is_apply(row) {
                1
            } else {
                2
            }
        })?;
        const ALL_AGENCIES: &str = "全独立行政法人等";
        let k = self
            .distinct_values("独立行政法人等の名称")?
            .saturating_sub(1);
        let weights: Vec<u64> = self.cat.ministries.iter().map(|m| m.rows as u64).collect();
        let per_ministry = apportion(k as u64, &weights, 0, k as u64)?;
        let mut used = HashSet::new();
        let pools: Vec<Pool> = self
            .cat
            .ministries
            .iter()
            .zip(per_ministry)
            .map(|(m, count)| {
                let domains = m.domains();
                let items: Vec<String> = (0..count * 20)
                    .map(|_| {
                        rng.pick(vocab::AGENCY_TEMPLATES)
                            .replace("{S}", rng.pick::<&str>(domains))
                    })
                    .filter(|name| used.insert(name.clone()))
                    .take(count as usize)
                    .collect();
                Pool::from_items(items)
            })
            .collect();
        let names = (0..self.n)
            .map(|row| {
                if !chosen[row] {
                    return None;
                }
                let pool = &pools[self.ministry[row]];
                if pool.is_empty() || rng.chance(0.1) {
                    Some(ALL_AGENCIES.to_string())
                } else {
                    Some(pool.sample(&mut rng).to_string())
                }
            })
            .collect();
        self.put_text("独立行政法人等の名称", names);

        // 事務区分: local-government procedures get a division; a few others
        // are marked as not local work.
        let mut rng = self.rng("事務区分");
        let codes = schema::codes("事務区分");
        let local: Vec<bool> = (0..self.n)
            .map(|r| self.involves(r, actor::has_local))
            .collect();
        let chosen =
            self.non_null_rows("事務区分", &mut rng, |row| if local[row] { 0 } else { 1 })?;
        let rows: Vec<usize> = (0..self.n).filter(|&r| chosen[r]).collect();
        let targets = self.code_targets("事務区分", &codes)?;
        let classes: Vec<usize> = rows.iter().map(|&r| usize::from(local[r])).collect();
        let picked = assign_exact(&mut rng, &classes, &targets, |local, v| {
            match (local == 1, v == 3) {
                (true, false) | (false, true) => 1.0,
                _ => 0.05,
            }
        });
        let mut division = vec![None; self.n];
        for (&row, v) in rows.iter().zip(picked) {
            division[row] = Some(codes[v].to_string());
        }
        self.put_text("事務区分", division);
        Ok(())
    }

    fn commonality(&mut self) -> Result<()> {
        let mut rng = self.rng("府省共通手続");
        let col = self.col("府省共通手続")?;
        if col.null_count > 0 {
            return Err("府省共通手続 is expected to have no nulls".into());
        }
        let values: Vec<String> = col.top_values.iter().map(|t| t.value.clone()).collect();
        let kinds: Vec<Common> = values
            .iter()
            .map(|v| match v.chars().next() {
                Some('○' | '〇') => Common::All,
                Some('●') => Common::Some,
                _ => Common::No,
            })
            .collect();
        let targets: Vec<usize> = col.top_values.iter().map(|t| t.count).collect();
        if targets.iter().sum::<usize>() != self.n {
            return Err("府省共通手続 top values must cover every row".into());
        }
        let laws = &self.cat.laws;
        let ministries = &self.cat.ministries;
        let picked = assign_exact(&mut rng, &self.cat.row_law, &targets, |law, v| {
            if kinds[v] == Common::No {
                1.0
            } else {
                let law = &laws[law];
                ministries[law.ministry].common_bias() * if law.common { 30.0 } else { 1.0 }
            }
        });
        self.common = picked.iter().map(|&v| kinds[v]).collect();
        let text = picked.iter().map(|&v| Some(values[v].clone())).collect();
        self.put_text("府省共通手続", text);

        // 実施府省庁: the ministry itself, or a list of ministries for common
        // procedures, drawn from per-ministry pools so the number of
        // distinct lists stays near the published one.
        let mut rng = self.rng("実施府省庁");
        let names: Vec<&str> = self
            .cat
            .ministries
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        let sizes: Vec<f64> = self.cat.ministries.iter().map(|m| m.rows as f64).collect();
        let singles = (0..self.n)
            .filter(|&r| self.common[r] == Common::No)
            .map(|r| self.ministry[r])
            .collect::<HashSet<_>>()
            .len();
        // Lists drawn for different ministries often coincide and rare pool
        // entries may never be drawn, so aim above the target.
        let lists = (self.distinct_values("実施府省庁")?.saturating_sub(singles) * 7 / 4).max(2);
        let mut pools: BTreeMap<(usize, bool), Pool> = BTreeMap::new();
        for all in [true, false] {
            let wanted = if all { Common::All } else { Common::Some };
            let budget = if all {
                lists * 3 / 10
            } else {
                lists - lists * 3 / 10
            };
            let total = self.common.iter().filter(|&&c| c == wanted).count().max(1);
            for m in 0..names.len() {
                let rows = (0..self.n)
                    .filter(|&r| self.ministry[r] == m && self.common[r] == wanted)
                    .count();
                if rows == 0 {
                    continue;
                }
                let k = ((budget * rows + total / 2) / total).max(1);
                let pool = Pool::build(&mut rng, k, |rng| {
                    let mut members = vec![false; names.len()];
                    members[m] = true;
                    if all {
                        for (i, member) in members.iter_mut().enumerate() {
                            *member |= i != m && rng.chance(0.85);
                        }
                    } else {
                        let extra = 1 + rng.skewed(0, 5) as usize;
                        for _ in 0..extra {
                            members[rng.weighted(&sizes).unwrap_or(0)] = true;
                        }
                    }
                    let parts: Vec<&str> = (0..names.len())
                        .filter(|&i| members[i])
                        .map(|i| names[i])
                        .collect();
                    join(&parts)
                });
                pools.insert((m, all), pool);
            }
        }
        let implementers = (0..self.n)
            .map(|row| {
                let m = self.ministry[row];
                Some(match self.common[row] {
                    Common::No => names[m].to_string(),
                    c => pools[&(m, c == Common::All)].sample(&mut rng).to_string(),
                })
            })
            .collect();
        self.put_text("実施府省庁", implementers);
        Ok(())
    }

    fn online_status(&mut self) -> Result<()> {
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

    fn concerns(&mut self) -> Result<()> {
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

    fn identity_and_fees(&mut self) -> Result<()> {
        use status::*;
        let name = "申請等における本人確認手法";
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            match (self.is_apply(row), self.status[row]) {
                (true, Some(NOT_YET | EXEMPT | OTHER)) => 0,
                (true, _) => 1,
                _ => 2,
            }
        })?;
        let pool = Pool::build(&mut rng, self.distinct_values(name)?, |rng| {
            combo(rng, vocab::IDENTITY_CHECKS, &["6 本人確認不要"], 3)
        });
        let ids = chosen
            .iter()
            .map(|&c| c.then(|| pool.sample(&mut rng).to_string()))
            .collect();
        self.put_text(name, ids);

        // Whether fees apply, then how they are paid, then online discounts;
        // each applies only where the previous answer makes it relevant.
        let name = "手数料等の納付有無";
        let codes = schema::codes(name);
        let mut rng = self.rng(name);
        let chosen =
            self.non_null_rows(name, &mut rng, |row| if self.is_apply(row) { 0 } else { 1 })?;
        let methods = self.non_null("手数料等の納付方法")?;
        let rows: Vec<usize> = (0..self.n).filter(|&r| chosen[r]).collect();
        let paid = (methods + methods / 9).min(rows.len());
        let actors = &self.actor;
        let classes: Vec<usize> = rows
            .iter()
            .map(|&r| actors[r].unwrap_or(ACTOR_NONE))
            .collect();
        let picked = assign_exact(
            &mut rng,
            &classes,
            &[rows.len() - paid, paid],
            |a, v| match (v, a) {
                (1, a) if actor::is_public(a) => 0.3,
                (1, actor::BUSINESS | actor::PERSON_BUSINESS) => 1.5,
                _ => 1.0,
            },
        );
        let mut fee = vec![None; self.n];
        for (&row, v) in rows.iter().zip(picked) {
            fee[row] = Some(v);
        }
        self.put_text(
            name,
            fee.iter()
                .map(|v| v.map(|i| codes[i].to_string()))
                .collect(),
        );

        let name = "手数料等の納付方法";
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| match fee[row] {
            Some(1) => 0,
            Some(_) => 1,
            None => 2,
        })?;
        let preferential = self.non_null("手数料等のオンライン納付時の優遇措置")?;
        let online_rows = (preferential + preferential / 3)
            .max(methods * 2 / 5)
            .min(methods);
        let tiers: Vec<Tier> = chosen.iter().map(|&c| if c { 0 } else { NEVER }).collect();
        let online = pick_rows(&mut rng, &tiers, online_rows)?;
        let k = self.distinct_values(name)?;
        // Five offline methods allow few combinations; online ones take the rest.
        let offline_pool = Pool::build(&mut rng, k / 3, |rng| {
            combo(rng, vocab::PAYMENT_OFFLINE, &[], 4)
        });
        let online_pool = Pool::build(
            &mut rng,
            k.saturating_sub(offline_pool.len()).max(1),
            |rng| {
                let mut parts = vec![combo(rng, vocab::PAYMENT_ONLINE, &[], 3)];
                if rng.chance(0.7) {
                    parts.insert(0, combo(rng, vocab::PAYMENT_OFFLINE, &[], 3));
                }
                parts.join("; ")
            },
        );
        let methods_text = (0..self.n)
            .map(|row| {
                if online[row] {
                    Some(online_pool.sample(&mut rng).to_string())
                } else if chosen[row] {
                    Some(offline_pool.sample(&mut rng).to_string())
                } else {
                    None
                }
            })
            .collect();
        self.put_text(name, methods_text);

        let name = "手数料等のオンライン納付時の優遇措置";
        let codes = schema::codes(name);
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            if online[row] {
                0
            } else if chosen[row] {
                1
            } else {
                2
            }
        })?;
        let perk = Self::fill_codes(&mut rng, &chosen, &codes, &[12, 88])?;
        self.put_text(name, perk);
        Ok(())
    }

    fn periods(&mut self) -> Result<()> {
        let name = "処理期間(オンライン)";
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            match (self.is_apply(row), self.is_online(row)) {
                (true, true) => 0,
                (true, false) => 1,
                (false, true) => 2,
                _ => 3,
            }
        })?;
        let pool = Pool::build(&mut rng, self.distinct_values(name)?, period);
        let online: Vec<Option<String>> = chosen
            .iter()
            .map(|&c| c.then(|| pool.sample(&mut rng).to_string()))
            .collect();

        let name = "処理期間(非オンライン)";
        let mut rng = self.rng(name);
        let chosen =
            self.non_null_rows(name, &mut rng, |row| if self.is_apply(row) { 0 } else { 1 })?;
        // Copies of online periods below add their own distinct values.
        let pool = Pool::build(&mut rng, self.distinct_values(name)? * 2 / 3, period);
        let offline = (0..self.n)
            .map(|row| {
                if !chosen[row] {
                    return None;
                }
                // Often the same standard period applies either way.
                match &online[row] {
                    Some(p) if rng.chance(0.5) => Some(p.clone()),
                    _ => Some(pool.sample(&mut rng).to_string()),
                }
            })
            .collect();
        self.put_text("処理期間(オンライン)", online);
        self.put_text(name, offline);
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

    fn systems(&mut self) -> Result<()> {
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

    fn counts(&mut self) -> Result<()> {
        const TOTAL: &str = "総手続件数";
        const ONLINE: &str = "オンライン手続件数";
        const OFFLINE: &str = "非オンライン手続件数";
        let mut rng = self.rng(TOTAL);
        let cap = |name: &str| -> Result<i64> {
            let c = self.col(name)?;
            Ok(floor2(c.max.ok_or_else(|| format!("{name} has no max"))?))
        };
        let (total_cap, online_cap, offline_cap) = (cap(TOTAL)?, cap(ONLINE)?, cap(OFFLINE)?);
        let floor = |name: &str| -> Result<i64> { Ok(self.col(name)?.min.unwrap_or(0).max(0)) };
        let (total_min, online_min, offline_min) = (floor(TOTAL)?, floor(ONLINE)?, floor(OFFLINE)?);

        let (known_total, known_online, known_offline) = self.known_counts(&mut rng)?;

        let draws = TotalDraws::new(total_cap);

        let mut total = vec![None; self.n];
        let mut online = vec![None; self.n];
        let mut offline = vec![None; self.n];
        for row in 0..self.n {
            if !known_total[row] {
                continue;
            }
            let t = draws.draw(&mut rng, self.is_online(row));
            let permille: i64 = if self.is_online(row) {
                // Big procedures are the ones people actually file online.
                match rng.below(100) {
                    _ if t >= 100_000 && rng.chance(0.8) => rng.range(800, 1000) as i64,
                    0..=11 => 0,
                    12..=36 => 1000,
                    _ => rng.range(1, 999) as i64,
                }
            } else if self.status[row] == Some(status::OTHER) && rng.chance(0.1) {
                rng.range(1, 200) as i64
            } else {
                0
            };
            let mut on = round2(t * permille / 1000).min(online_cap);
            let mut off = round2(t - on).min(offline_cap);
            if t - on > offline_cap {
                on = round2(t - off).min(online_cap);
            }
            on = on.max(online_min);
            off = off.max(offline_min);
            let sum = round2(on + off).clamp(total_min, total_cap);
            total[row] = Some(if known_offline[row] {
                sum
            } else {
                round2(t).clamp(total_min, total_cap)
            });
            if known_online[row] {
                online[row] = Some(on);
            }
            if known_offline[row] {
                offline[row] = Some(off);
            }
        }
        self.out.insert(TOTAL, Column::Count(total));
        self.out.insert(ONLINE, Column::Count(online));
        self.out.insert(OFFLINE, Column::Count(offline));
        Ok(())
    }

    /// Which counts are known: online and offline counts are only known where the total is,
    /// and online counts mostly for online procedures.
    fn known_counts(&mut self, rng: &mut Rng) -> Result<(Vec<bool>, Vec<bool>, Vec<bool>)> {
        const TOTAL: &str = "総手続件数";
        const ONLINE: &str = "オンライン手続件数";
        const OFFLINE: &str = "非オンライン手続件数";
        let total_tiers: Vec<Tier> = (0..self.n)
            .map(|row| {
                let p = match self.kind[row] {
                    Some(kind::APPLY | kind::NOTICE_ON_REQUEST | kind::PRIVATE_DELIVERY) => 0.85,
                    Some(kind::NOTICE_EX_OFFICIO) => 0.6,
                    Some(kind::INSPECTION) => 0.35,
                    Some(_) => 0.25,
                    None => 0.5,
                } + if self.is_online(row) { 0.1 } else { 0.0 };
                Tier::from(!rng.chance(p))
            })
            .collect();
        let known_total = self.exact_rows(TOTAL, rng, total_tiers)?;
        let known_online = self.non_null_rows(ONLINE, rng, |row| {
            match (known_total[row], self.is_online(row)) {
                (false, _) => NEVER,
                (true, true) => 0,
                (true, false) => 1,
            }
        })?;
        let offline_tiers: Vec<Tier> = known_total
            .iter()
            .map(|&known| {
                if known {
                    Tier::from(rng.chance(0.01))
                } else {
                    NEVER
                }
            })
            .collect();
        let known_offline = self.exact_rows(OFFLINE, rng, offline_tiers)?;
        Ok((known_total, known_online, known_offline))
    }

    /// 0 individual, 1 business, 2 public body: decides which vocabulary an
    /// application's details come from.
    fn profile(&self, row: usize) -> usize {
        match self.actor[row] {
            Some(actor::PERSON) => 0,
            Some(a) if actor::is_public(a) => 2,
            _ => 1,
        }
    }

    /// Pools for individuals, businesses and public bodies. The small
    /// vocabularies cannot produce many combinations, so they are built
    /// first and the business pool takes whatever is left of `k`.
    fn profile_pools(
        rng: &mut Rng,
        k: usize,
        vocabs: [&[(&str, f64)]; 3],
        exclusive: &[&str],
    ) -> [Pool; 3] {
        let person = Pool::build(rng, (k / 5).max(1), |rng| {
            combo(rng, vocabs[0], exclusive, 4)
        });
        let public = Pool::build(rng, (k / 6).max(1), |rng| {
            combo(rng, vocabs[2], exclusive, 4)
        });
        let rest = k.saturating_sub(person.len() + public.len()).max(1);
        let business = Pool::build(rng, rest, |rng| combo(rng, vocabs[1], exclusive, 5));
        [person, business, public]
    }

    fn application_details(&mut self) -> Result<()> {
        let name = "申請書等に記載させる情報";
        let mut rng = self.rng(name);
        let chosen =
            self.non_null_rows(name, &mut rng, |row| if self.is_apply(row) { 0 } else { 1 })?;
        let pools = Self::profile_pools(
            &mut rng,
            self.distinct_values(name)?,
            [
                vocab::FORM_INFO_PERSON,
                vocab::FORM_INFO_BUSINESS,
                vocab::FORM_INFO_ADMIN,
            ],
            &[],
        );
        let info = (0..self.n)
            .map(|row| chosen[row].then(|| pools[self.profile(row)].sample(&mut rng).to_string()))
            .collect();
        self.put_text(name, info);

        let name = "申請時に添付させる書類";
        let mut rng = self.rng(name);
        let chosen =
            self.non_null_rows(name, &mut rng, |row| if self.is_apply(row) { 0 } else { 1 })?;
        let pools = Self::profile_pools(
            &mut rng,
            self.distinct_values(name)?,
            [
                vocab::ATTACH_PERSON,
                vocab::ATTACH_BUSINESS,
                vocab::ATTACH_ADMIN,
            ],
            &[vocab::NO_ATTACHMENT],
        );
        let docs = (0..self.n)
            .map(|row| chosen[row].then(|| pools[self.profile(row)].sample(&mut rng).to_string()))
            .collect();
        self.put_text(name, docs);

        let name = "申請に関連する士業";
        let mut rng = self.rng(name);
        let chosen =
            self.non_null_rows(name, &mut rng, |row| if self.is_apply(row) { 0 } else { 1 })?;
        let pool = Pool::build(&mut rng, self.distinct_values(name)?, |rng| {
            combo(rng, vocab::PROFESSIONALS, &[vocab::NO_PROFESSIONAL], 4)
        });
        let pros = chosen
            .iter()
            .map(|&c| c.then(|| pool.sample(&mut rng).to_string()))
            .collect();
        self.put_text(name, pros);
        Ok(())
    }

    /// For procedures common to several ministries, answers from different
    /// ministries are sometimes listed together (e.g. `2 …; 3 …`): one code
    /// from `others` is added with probability `p_one`, two with `p_two`.
    #[allow(clippy::too_many_arguments)]
    fn maybe_joined(
        &self,
        rng: &mut Rng,
        row: usize,
        codes: &[&str],
        v: usize,
        others: &[usize],
        p_one: f64,
        p_two: f64,
    ) -> String {
        let mut picked = vec![v];
        if self.common[row] != Common::No && !others.is_empty() {
            let extra = if rng.chance(p_two) {
                2
            } else {
                usize::from(rng.chance(p_one))
            };
            for _ in 0..extra {
                picked.push(*rng.pick(others));
            }
        }
        picked.sort_unstable();
        picked.dedup();
        let parts: Vec<&str> = picked.iter().map(|&i| codes[i]).collect();
        join(&parts)
    }

    fn attachments(&mut self) -> Result<()> {
        let docs = self.text("申請時に添付させる書類").to_vec();
        let name = "添付書類等提出の撤廃/省略状況";
        let codes = schema::codes(name);
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| match docs[row].as_deref() {
            Some(vocab::NO_ATTACHMENT) => 1,
            Some(_) => 0,
            None if self.is_apply(row) => 2,
            None => 3,
        })?;
        // Rows already rid of attachments get no submission method or rule,
        // so keep them fewer than the gap between those columns' counts.
        let k = chosen.iter().filter(|&&c| c).count();
        let method_rows = self.non_null("添付書類等の提出方法")?;
        let rule_rows = self.non_null("添付形式等が定められた規定")?;
        let abolished = (k.saturating_sub(method_rows.max(rule_rows)) / 2) as u64;
        let rest = k as u64 - abolished;
        let mut counts = vec![abolished];
        counts.extend(apportion(rest, &[12, 70, 18], 0, rest)?);
        let mut values = Self::multiset(&mut rng, &counts).into_iter();
        let mut status_text = vec![None; self.n];
        let mut not_abolished = vec![false; self.n];
        for row in 0..self.n {
            if chosen[row] {
                let v = values.next().expect("one value per chosen row");
                not_abolished[row] = v != 0;
                let others: &[usize] = if v == 0 { &[] } else { &[0, 1, 2, 3] };
                status_text[row] =
                    Some(self.maybe_joined(&mut rng, row, &codes, v, others, 0.25, 0.0));
            }
        }
        self.put_text(name, status_text);

        let name = "添付書類等の提出方法";
        let codes = schema::codes(name);
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            if not_abolished[row] {
                0
            } else if self.is_apply(row) {
                1
            } else {
                2
            }
        })?;
        let weights = [3.0, 1.5, 4.0, 1.0, 1.5];
        let pool = Pool::build(&mut rng, self.distinct_values(name)?, |rng| {
            code_combo(rng, &codes, &weights, &[], 3)
        });
        let methods: Vec<Option<String>> = chosen
            .iter()
            .map(|&c| c.then(|| pool.sample(&mut rng).to_string()))
            .collect();

        let name = "添付書類等への電子署名";
        let sig_codes = schema::codes(name);
        let mut rng = self.rng(name);
        let electronic = |m: &str| {
            m.split("; ")
                .any(|p| !p.starts_with("2 ") && !p.starts_with("4 "))
        };
        let chosen = self.non_null_rows(name, &mut rng, |row| match methods[row].as_deref() {
            Some(m) if electronic(m) => 0,
            Some(_) => 1,
            None if not_abolished[row] => 2,
            None if self.is_apply(row) => 3,
            None => 4,
        })?;
        let k = chosen.iter().filter(|&&c| c).count() as u64;
        let mut values = Self::multiset(&mut rng, &apportion(k, &[75, 12, 13], 0, k)?).into_iter();
        let signatures = (0..self.n)
            .map(|row| {
                chosen[row].then(|| {
                    let v = values.next().expect("one value per chosen row");
                    self.maybe_joined(&mut rng, row, &sig_codes, v, &[0], 0.2, 0.0)
                })
            })
            .collect();
        self.put_text("添付書類等の提出方法", methods);
        self.put_text(name, signatures);

        let name = "添付形式等が定められた規定";
        let codes = schema::codes(name);
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            if not_abolished[row] {
                0
            } else if self.is_apply(row) {
                1
            } else {
                2
            }
        })?;
        let k = chosen.iter().filter(|&&c| c).count() as u64;
        let mut values =
            Self::multiset(&mut rng, &apportion(k, &[38, 27, 15, 12, 8], 0, k)?).into_iter();
        let rules = (0..self.n)
            .map(|row| {
                chosen[row].then(|| {
                    let v = values.next().expect("one value per chosen row");
                    self.maybe_joined(&mut rng, row, &codes, v, &[0, 1, 2, 3, 4], 0.35, 0.002)
                })
            })
            .collect();
        self.put_text(name, rules);
        Ok(())
    }

    fn events_and_receivers(&mut self) -> Result<()> {
        use actor::*;
        let name = "手続が行われるイベント(個人)";
        let mut rng = self.rng(name);
        let personal = |row: usize| matches!(self.actor[row], Some(PERSON | PERSON_BUSINESS));
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            if personal(row) || self.is_apply(row) {
                0
            } else {
                1
            }
        })?;
        let pool = Pool::build(
            &mut rng,
            self.distinct_values(name)?.saturating_sub(1).max(1),
            |rng| combo(rng, vocab::EVENTS_PERSON, &[], 3),
        );
        let events = (0..self.n)
            .map(|row| {
                chosen[row].then(|| {
                    if personal(row) || rng.chance(0.15) {
                        pool.sample(&mut rng).to_string()
                    } else {
                        vocab::OTHER_EVENT.to_string()
                    }
                })
            })
            .collect();
        self.put_text(name, events);

        let name = "手続が行われるイベント(法人)";
        let mut rng = self.rng(name);
        let corporate = |row: usize| {
            matches!(
                self.actor[row],
                Some(BUSINESS | PERSON_BUSINESS | AGENCY | STATE_AGENCY | AGENCY_LOCAL)
            )
        };
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            if self.actor[row] == Some(PERSON) {
                1
            } else {
                0
            }
        })?;
        let pool = Pool::build(
            &mut rng,
            self.distinct_values(name)?.saturating_sub(1).max(1),
            |rng| combo(rng, vocab::EVENTS_BUSINESS, &[], 5),
        );
        let events = (0..self.n)
            .map(|row| {
                chosen[row].then(|| {
                    if corporate(row) || rng.chance(0.2) {
                        pool.sample(&mut rng).to_string()
                    } else {
                        vocab::OTHER_EVENT.to_string()
                    }
                })
            })
            .collect();
        self.put_text(name, events);

        // 申請を提出する機関: where an application is handed in, from the
        // ministry's own offices plus generic bodies.
        let name = "申請を提出する機関";
        let mut rng = self.rng(name);
        let chosen = self.non_null_rows(name, &mut rng, |row| {
            match (self.is_apply(row), self.recipient[row]) {
                (true, Some(r)) if is_public(r) && r != AGENCY => 0,
                (true, _) => 1,
                _ => 2,
            }
        })?;
        // Pools per ministry and kind of recipient keep the number of
        // distinct lists near the published one.
        let class = |row: usize| {
            let r = self.recipient[row].unwrap_or(STATE);
            usize::from(has_state(r) || !is_public(r)) + 2 * usize::from(has_local(r))
        };
        let budget = self.distinct_values(name)? * 8 / 5;
        let total = chosen.iter().filter(|&&c| c).count().max(1);
        let mut sizes: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for row in (0..self.n).filter(|&r| chosen[r]) {
            *sizes.entry((self.ministry[row], class(row))).or_default() += 1;
        }
        let mut pools: BTreeMap<(usize, usize), Pool> = BTreeMap::new();
        for (&(m, c), &rows) in &sizes {
            let offices = self.cat.ministries[m]
                .profile
                .map_or(&[][..], |p| p.offices);
            let k = ((budget * rows + total / 2) / total).max(1);
            let pool = Pool::build(&mut rng, k, |rng| {
                receiver_list(rng, offices, c & 1 == 1, c & 2 == 2)
            });
            pools.insert((m, c), pool);
        }
        let receivers = (0..self.n)
            .map(|row| {
                chosen[row].then(|| {
                    pools[&(self.ministry[row], class(row))]
                        .sample(&mut rng)
                        .to_string()
                })
            })
            .collect();
        self.put_text(name, receivers);
        Ok(())
    }
}

/// Draws a procedure's total count: zero now and then, else a heavy tail by order of
/// magnitude (1–9, 10–99, …) where a handful of procedures reach hundreds of millions, never
/// past the published maximum.
struct TotalDraws {
    mantissa_weights: Vec<f64>,
    digit_weights: Vec<f64>,
    total_cap: i64,
}

impl TotalDraws {
    fn new(total_cap: i64) -> TotalDraws {
        TotalDraws {
            mantissa_weights: (10..100).map(|m| 1.0 / m as f64).collect(),
            digit_weights: (1..10).map(|m| 1.0 / m as f64).collect(),
            total_cap,
        }
    }

    fn draw(&self, rng: &mut Rng, online: bool) -> i64 {
        // Share of procedures per order of magnitude: the largest volumes are the ones that
        // went online (tax returns, social insurance), so online procedures get the heavier
        // tail.
        let online_decades = [
            12000.0, 18000.0, 22000.0, 21000.0, 15000.0, 7000.0, 1000.0, 150.0, 12.0,
        ];
        let offline_decades = [
            18000.0, 24000.0, 25000.0, 19000.0, 10000.0, 2000.0, 120.0, 4.0, 0.0,
        ];
        if rng.chance(0.12) {
            return 0;
        }
        let decades = if online {
            &online_decades
        } else {
            &offline_decades
        };
        loop {
            let d = rng.weighted(decades).unwrap_or(0) as u32;
            let v = if d == 0 {
                1 + rng.weighted(&self.digit_weights).unwrap_or(0) as i64
            } else {
                (10 + rng.weighted(&self.mantissa_weights).unwrap_or(0) as i64) * 10i64.pow(d - 1)
            };
            if v <= self.total_cap {
                return v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_indices_match_schema() {
        let kinds = schema::codes("手続類型");
        assert_eq!(kinds[kind::APPLY], "1 申請等");
        assert_eq!(
            kinds[kind::NOTICE_ON_REQUEST],
            "2-1 申請等に基づく処分通知等"
        );
        assert_eq!(
            kinds[kind::NOTICE_EX_OFFICIO],
            "2-2 申請等に基づかない処分通知等"
        );
        assert_eq!(kinds[kind::PRIVATE_DELIVERY], "2-3 交付等（民間手続）");
        assert_eq!(kinds[kind::INSPECTION], "3 縦覧等");
        assert_eq!(kinds[kind::RECORDS], "4 作成・保存等");
        let actors = schema::codes("手続主体");
        assert_eq!(actors[actor::AGENCY], "2 独立行政法人等");
        assert_eq!(
            actors[actor::ALL_PUBLIC],
            "4-4 国、独立行政法人等又は地方等"
        );
        assert_eq!(actors[actor::PERSON], "5 国民等");
        assert_eq!(actors[actor::PERSON_BUSINESS], "7 国民等、民間事業者等");
        let s = schema::codes("オンライン化の実施状況");
        assert_eq!(s[status::DONE], "1 実施済");
        assert_eq!(s[status::PARTLY], "5 一部実施済");
        assert_eq!(s[status::OTHER], "4 その他");
        assert_eq!(schema::codes("事務区分")[3], "4 地方の事務でない");
    }

    #[test]
    fn articles_look_like_articles() {
        let mut rng = Rng::new(3);
        for _ in 0..200 {
            let a = article(&mut rng, 50);
            assert!(a.contains('条'), "{a}");
        }
    }
}
