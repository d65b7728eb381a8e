//! The counts of each procedure (total, online, offline): which are known, and values drawn
//! with the published heavy tail, never past the published bounds.

use super::codes::{kind, status};
use super::table::{Column, Gen, Result};
use crate::rng::Rng;
use crate::sampling::{NEVER, Tier};
use crate::text::{floor2, round2};

impl Gen<'_> {
    pub(super) fn counts(&mut self) -> Result<()> {
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
