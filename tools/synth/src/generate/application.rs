//! What filing an application involves: identity checks and fees, processing periods, what
//! its form asks and what is attached, the events that prompt it and where it is handed in.

use super::codes::{ACTOR_NONE, actor, status};
use super::table::{Common, Gen, Result};
use super::wording::{code_combo, join, period, receiver_list};
use crate::rng::Rng;
use crate::sampling::{NEVER, Pool, Tier, apportion, assign_exact, combo, pick_rows};
use crate::schema;
use crate::vocab;
use std::collections::BTreeMap;

impl Gen<'_> {
    pub(super) fn identity_and_fees(&mut self) -> Result<()> {
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

    pub(super) fn periods(&mut self) -> Result<()> {
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

    pub(super) fn application_details(&mut self) -> Result<()> {
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

    pub(super) fn attachments(&mut self) -> Result<()> {
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

    pub(super) fn events_and_receivers(&mut self) -> Result<()> {
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
