//! Walker/Vose alias tables: O(1) draws from a fixed discrete distribution.

use crate::rng::Rng;

/// Walker/Vose alias table over a set of items: `(threshold, alias)` per item; item `j` is
/// kept when 32 random bits fall below its threshold, otherwise its alias is taken.
#[derive(Clone, Copy, Default)]
pub(super) struct Alias {
    thr: u32,
    alias: u32,
}

pub(super) fn build_alias(weights: &[f64], out: &mut [Alias]) {
    let k = weights.len();
    let total: f64 = weights.iter().sum();
    let mut p: Vec<f64> = weights.iter().map(|&w| w * k as f64 / total).collect();
    let (mut small, mut large): (Vec<u32>, Vec<u32>) =
        (0..k as u32).partition(|&j| p[j as usize] < 1.0);
    while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
        small.pop();
        out[s as usize] = Alias {
            thr: (p[s as usize] * 4_294_967_296.0).min(u32::MAX as f64) as u32,
            alias: l,
        };
        p[l as usize] += p[s as usize] - 1.0;
        if p[l as usize] < 1.0 {
            large.pop();
            small.push(l);
        }
    }
    // Leftovers (probability 1 up to rounding) always keep themselves.
    for j in small.into_iter().chain(large) {
        out[j as usize] = Alias {
            thr: u32::MAX,
            alias: j,
        };
    }
}

#[inline]
pub(super) fn draw(table: &[Alias], rng: &mut Rng) -> usize {
    let r = rng.next_u64();
    let j = (((r & 0xffff_ffff) * table.len() as u64) >> 32) as usize;
    let a = table[j];
    if ((r >> 32) as u32) < a.thr {
        j
    } else {
        a.alias as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn alias_tables_follow_weights() {
        let w = [1.0, 2.0, 3.0, 0.0, 4.0];
        let mut t = vec![Alias::default(); 5];
        build_alias(&w, &mut t);
        let mut rng = Rng::new(1);
        let mut count = [0usize; 5];
        for _ in 0..100_000 {
            count[draw(&t, &mut rng)] += 1;
        }
        assert_eq!(count[3], 0);
        for j in [0, 1, 2, 4] {
            let f = count[j] as f64 / 100_000.0;
            assert!((f - w[j] / 10.0).abs() < 0.01, "{j}: {f}");
        }
    }
}
