//! What a procedure is and who takes part: its law and ministry, 手続類型, article, name and
//! id, the parties to it, the agencies and local division involved, and whether several
//! ministries share it.

use super::codes::{ACTOR_CLASSES, ACTOR_NONE, KIND_NONE, actor, kind};
use super::table::{Common, Gen, Result};
use super::wording::{article, fill, join};
use crate::sampling::{Pool, apportion, assign_exact};
use crate::schema;
use crate::vocab;
use std::collections::{BTreeMap, HashSet};

impl Gen<'_> {
    pub(super) fn laws(&mut self) {
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

    pub(super) fn kinds(&mut self) -> Result<()> {
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

    pub(super) fn articles_names_ids(&mut self) -> Result<()> {
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

    pub(super) fn parties(&mut self) -> Result<()> {
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

    pub(super) fn agencies_and_local(&mut self) -> Result<()> {
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

    pub(super) fn commonality(&mut self) -> Result<()> {
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
}
