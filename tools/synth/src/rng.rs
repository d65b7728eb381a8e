//! A small seeded PRNG (xoshiro256**, seeded through splitmix64).
//!
//! Everything here uses integer arithmetic or correctly rounded IEEE-754
//! operations only (no `exp`/`ln`/`powf`), so a given seed yields the same
//! stream on every platform.

#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a, used to derive one independent stream per column, so that
/// changing how one column is generated leaves the others untouched.
fn fnv1a(label: &str) -> u64 {
    label.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    pub fn stream(seed: u64, label: &str) -> Self {
        Self::new(seed ^ fnv1a(label))
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (Lemire's multiply-shift with rejection, unbiased).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }

    /// Index drawn with probability proportional to `weights`; `None` when
    /// every weight is zero.
    pub fn weighted(&mut self, weights: &[f64]) -> Option<usize> {
        let total: f64 = weights.iter().sum();
        if total.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return None;
        }
        let mut x = self.unit() * total;
        let mut last = None;
        for (i, &w) in weights.iter().enumerate() {
            if w > 0.0 {
                if x < w {
                    return Some(i);
                }
                x -= w;
                last = Some(i);
            }
        }
        // Rounding can leave `x` a hair above the last positive weight.
        last
    }

    /// Picks from `(item, weight)` pairs.
    pub fn pick_weighted<'a, T>(&mut self, items: &'a [(T, f64)]) -> &'a T {
        let weights: Vec<f64> = items.iter().map(|(_, w)| *w).collect();
        let i = self.weighted(&weights).expect("all weights are zero");
        &items[i].0
    }

    /// Integer in `lo..=hi`, skewed towards `lo` (the square of a uniform
    /// draw), for things like article numbers where small values dominate.
    pub fn skewed(&mut self, lo: u64, hi: u64) -> u64 {
        let u = self.unit();
        let span = (hi - lo + 1) as f64;
        (lo + (u * u * span) as u64).min(hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_reference_xoshiro256starstar() {
        // Seeded from splitmix64(0) (state e220a8397b1dcdaf, 6e789e6aa1b965f4,
        // …); values computed with an independent implementation. Pins the
        // stream so an accidental change does not silently alter every file.
        let mut r = Rng::new(0);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                0x99ec_5f36_cb75_f2b4,
                0xbf6e_1f78_4956_452a,
                0x1a5f_849d_4933_e6e0
            ]
        );
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(7);
        for n in 1..200 {
            assert!(r.below(n) < n);
        }
    }
}
