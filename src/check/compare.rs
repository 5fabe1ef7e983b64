//! Comparing a device's values with the CPU's: the largest absolute and relative error,
//! how much of the tolerance the worst value uses, and the first value outside it.

use serde::Serialize;

/// Elementwise tolerance: `|cpu - device| <= atol + rtol·|cpu|`. NaN must meet NaN and an
/// infinity the same infinity.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tol {
    /// Relative part.
    pub rtol: f32,
    /// Absolute part.
    pub atol: f32,
}

impl Tol {
    /// The parity tolerance of f32 ops whose device sums in another order than the CPU:
    /// 1e-4 relative plus 1e-5 absolute.
    pub const F32: Tol = Tol {
        rtol: 1e-4,
        atol: 1e-5,
    };
    /// Bit for bit (for integers and ops that keep the CPU's order of operations).
    pub const EXACT: Tol = Tol {
        rtol: 0.0,
        atol: 0.0,
    };
}

/// What comparing two vectors found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Comparison {
    /// Values compared.
    pub len: usize,
    /// Largest `|cpu - device|` over finite pairs.
    pub max_abs: f64,
    /// Largest `|cpu - device| / |cpu|` over finite pairs with `cpu != 0`.
    pub max_rel: f64,
    /// Largest `|cpu - device| / (atol + rtol·|cpu|)`: at most 1 within tolerance (0 when
    /// the tolerance is zero and the values are equal, infinite when they differ).
    pub tol_used: f64,
    /// Values outside the tolerance (NaN, infinity and length mismatches included).
    pub bad: usize,
    /// The first value outside: index, the CPU's value and the device's.
    pub first_bad: Option<(usize, f32, f32)>,
    /// Lengths differ: (the CPU's, the device's).
    pub len_mismatch: Option<(usize, usize)>,
}

impl Comparison {
    /// Compares `device` with the reference `cpu` under `tol`.
    pub fn of(cpu: &[f32], device: &[f32], tol: Tol) -> Comparison {
        let mut c = Comparison {
            len: cpu.len(),
            ..Comparison::default()
        };
        if cpu.len() != device.len() {
            c.len_mismatch = Some((cpu.len(), device.len()));
            c.bad = cpu.len().max(device.len());
            c.tol_used = f64::INFINITY;
            return c;
        }
        for (i, (&e, &g)) in cpu.iter().zip(device).enumerate() {
            let ok = if e.is_finite() && g.is_finite() {
                let d = (e as f64 - g as f64).abs();
                let allowed = tol.atol as f64 + tol.rtol as f64 * (e as f64).abs();
                c.max_abs = c.max_abs.max(d);
                if e != 0.0 {
                    c.max_rel = c.max_rel.max(d / (e as f64).abs());
                }
                let used = match (d == 0.0, allowed == 0.0) {
                    (true, _) => 0.0,
                    (false, true) => f64::INFINITY,
                    (false, false) => d / allowed,
                };
                c.tol_used = c.tol_used.max(used);
                d <= allowed
            } else {
                (e.is_nan() && g.is_nan()) || e == g
            };
            if !ok {
                if !(e.is_finite() && g.is_finite()) {
                    c.tol_used = f64::INFINITY;
                }
                c.bad += 1;
                c.first_bad.get_or_insert((i, e, g));
            }
        }
        c
    }

    /// Compares u32 vectors, which must be equal.
    pub fn of_u32(cpu: &[u32], device: &[u32]) -> Comparison {
        let mut c = Comparison {
            len: cpu.len(),
            ..Comparison::default()
        };
        if cpu.len() != device.len() {
            c.len_mismatch = Some((cpu.len(), device.len()));
            c.bad = cpu.len().max(device.len());
            c.tol_used = f64::INFINITY;
            return c;
        }
        for (i, (&e, &g)) in cpu.iter().zip(device).enumerate() {
            if e != g {
                let d = (e as f64 - g as f64).abs();
                c.max_abs = c.max_abs.max(d);
                c.tol_used = f64::INFINITY;
                c.bad += 1;
                c.first_bad.get_or_insert((i, e as f32, g as f32));
            }
        }
        c
    }

    /// Whether every value is within tolerance.
    pub fn ok(&self) -> bool {
        self.bad == 0
    }

    /// Merges `other` (another tensor of the same check) into `self`: the worst figures,
    /// the counts summed, the first failure kept.
    pub fn merge(&mut self, other: Comparison) {
        self.len += other.len;
        self.max_abs = self.max_abs.max(other.max_abs);
        self.max_rel = self.max_rel.max(other.max_rel);
        self.tol_used = self.tol_used.max(other.tol_used);
        if self.first_bad.is_none() && self.len_mismatch.is_none() {
            self.first_bad = other.first_bad;
            self.len_mismatch = other.len_mismatch;
        }
        self.bad += other.bad;
    }

    /// One line: the errors and the share of the tolerance, or the first bad value.
    pub fn describe(&self) -> String {
        if let Some((a, b)) = self.len_mismatch {
            return format!("{a} values on the cpu, {b} on the device");
        }
        let errors = format!(
            "max abs {:.2e}, max rel {:.2e}, {:.0}% of tolerance",
            self.max_abs,
            self.max_rel,
            if self.tol_used.is_finite() {
                self.tol_used * 100.0
            } else {
                f64::INFINITY
            }
        );
        match self.first_bad {
            Some((i, e, g)) => format!(
                "{} of {} values outside tolerance; first at {i}: cpu {e} vs device {g}; {errors}",
                self.bad, self.len
            ),
            None => errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_and_outside_tolerance() {
        let c = Comparison::of(&[1.0, 2.0, 0.0], &[1.0, 2.0001, 0.0], Tol::F32);
        assert!(c.ok(), "{}", c.describe());
        assert!(c.tol_used > 0.4 && c.tol_used < 0.6, "{}", c.tol_used);
        let c = Comparison::of(&[1.0, 2.0, 3.0], &[1.0, 2.1, 3.5], Tol::F32);
        assert!(!c.ok());
        assert_eq!((c.bad, c.first_bad), (2, Some((1, 2.0, 2.1))));
        assert!(c.describe().contains("first at 1"), "{}", c.describe());
    }

    #[test]
    fn nan_and_infinities_must_match() {
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        assert!(Comparison::of(&[nan, inf, -inf], &[nan, inf, -inf], Tol::EXACT).ok());
        for got in [[1.0, inf], [nan, -inf], [nan, 1.0]] {
            let c = Comparison::of(&[nan, inf], &got, Tol::F32);
            assert!(!c.ok() && c.tol_used.is_infinite(), "{got:?}");
        }
    }

    #[test]
    fn exact_and_lengths() {
        assert_eq!(
            Comparison::of(&[1.0], &[1.0 + f32::EPSILON], Tol::EXACT).bad,
            1
        );
        let c = Comparison::of(&[1.0, 2.0], &[1.0], Tol::F32);
        assert!(!c.ok() && c.describe().contains("2 values on the cpu, 1"));
        assert!(!Comparison::of_u32(&[1, 2], &[1, 3]).ok());
        assert!(Comparison::of_u32(&[1, 2], &[1, 2]).ok());
    }
}
