//! The float trait CPU kernels are generic over: f32 for training, f64 for gradient checks.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// Below this many elements, CPU kernels run serially: rayon's fork costs more than it saves.
pub const PAR_MIN: usize = 1 << 14;

/// Arithmetic CPU kernels need from a float.
pub trait Float:
    Copy
    + Send
    + Sync
    + Debug
    + PartialOrd
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + std::iter::Sum
    + 'static
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Negative infinity (the identity of max).
    const NEG_INFINITY: Self;
    /// The type's name in messages (`f32`, `f64`).
    const NAME: &'static str;
    /// The nearest value of this type.
    fn from_f64(v: f64) -> Self;
    /// Widened to f64 (exact).
    fn to_f64(self) -> f64;
    /// e^self.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The logistic function `1 / (1 + e^-x)`, never exponentiating a positive number.
    fn sigmoid(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// The larger of the two (the other one when self is NaN).
    fn max(self, other: Self) -> Self;
    /// The smaller of the two (the other one when self is NaN).
    fn min(self, other: Self) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// self^n.
    fn powi(self, n: i32) -> Self;
}

macro_rules! impl_float {
    ($t:ty, $tanh:expr, $sigmoid:expr) => {
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const NAME: &'static str = stringify!($t);
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline(always)]
            fn sigmoid(self) -> Self {
                $sigmoid(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            fn min(self, other: Self) -> Self {
                <$t>::min(self, other)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn powi(self, n: i32) -> Self {
                <$t>::powi(self, n)
            }
        }
    };
}
impl_float!(f32, tanh_f32, sigmoid_f32);
impl_float!(f64, f64::tanh, sigmoid_f64);

/// `e^x` of an f32 for `x <= 0` (NaN stays NaN; 0 below -87, where `e^x` is below f32's
/// normal range), without a call or a branch, so that loops over it vectorise: Cody and
/// Waite's reduction `x = n·ln 2 + r`, `|r| <= ln 2 / 2`, Cephes' degree-6 polynomial for
/// `e^r`, and `2^n` put into the exponent bits. Within 0.73 ulp of the exact value over
/// `[-87, 0]` (the test below). The LSTM's gates and `tanh` take it; glibc's `expf` is a
/// call per value, which kept those loops scalar.
#[inline(always)]
fn exp_nonpositive_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5·2²³: adding it rounds to an integer, which then sits in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    // ln 2's high part, 0.693359375: exact in a few bits, so n·LN2_HI is exact.
    const LN2_HI: f32 = 355.0 / 512.0;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let xc = if x < -87.0 { -87.0 } else { x };
    let t = xc * LOG2E + MAGIC;
    let n = t - MAGIC;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    // Cephes' 5.0000001201e-1, which is 0.5 as an f32.
    p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    let two_n = f32::from_bits(t.to_bits().wrapping_sub(MAGIC.to_bits()).wrapping_add(127) << 23);
    let y = er * two_n;
    if x < -87.0 {
        0.0
    } else {
        y
    }
}

/// `tanh` of an f32: the odd Taylor series to x⁹ below |x| = 1/4 (truncation below 1e-8
/// relative), and `(1 − e)/(1 + e)` with `e = e^(−2|x|)` ([`exp_nonpositive_f32`]) above
/// (no overflow). Both are computed and one selected, so loops over it vectorise (glibc's
/// `tanhf` is a call per value; the LSTM's gates had spent 8% of a Cora epoch in it).
/// Within 2 ulp of the exact value. NaN stays NaN, ±∞ gives ±1. f64 keeps the library's
/// `tanh`: it serves the gradient checks.
#[inline(always)]
fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let x2 = x * x;
    let p = -17.0 / 315.0 + x2 * (62.0 / 2835.0);
    let small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * p)));
    let e = exp_nonpositive_f32(-2.0 * a);
    let large = ((1.0 - e) / (1.0 + e)).copysign(x);
    if a < 0.25 {
        small
    } else {
        large
    }
}

/// The logistic function of an f32 with [`exp_nonpositive_f32`] of `-|x|`, and a select
/// instead of a branch (so loops over it vectorise): `1/(1 + e)` for `x >= 0`, `e/(1 + e)`
/// below. Within 2 ulp of the exact value; NaN stays NaN.
#[inline(always)]
fn sigmoid_f32(x: f32) -> f32 {
    let e = exp_nonpositive_f32(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 {
        s
    } else {
        e * s
    }
}

/// The logistic function of an f64 through the library's `exp` (the gradient checks'
/// precision).
fn sigmoid_f64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_tanh_is_within_two_ulp_of_the_exact_value() {
        // Every 1/4096 from -12 to 12 (past 9, tanh rounds to ±1), the switch at 1/4 and
        // tiny values.
        let mut xs: Vec<f32> = (-49152..=49152).map(|i| i as f32 / 4096.0).collect();
        xs.extend([0.25, -0.25, 0.2499999, 1e-30, -1e-8, 3e-4]);
        for x in xs {
            let (got, want) = (Float::tanh(x), (x as f64).tanh());
            let ulp = (want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
            assert!(
                ((got as f64) - want).abs() <= 2.0 * ulp as f64,
                "tanh({x}) = {got}, exactly {want}"
            );
        }
        assert!(Float::tanh(f32::NAN).is_nan());
        assert_eq!(Float::tanh(f32::INFINITY), 1.0);
        assert_eq!(Float::tanh(f32::NEG_INFINITY), -1.0);
        assert_eq!(Float::tanh(-0.0f32).to_bits(), (-0.0f32).to_bits());
    }

    /// Error of `got` in units of the last place of the f32 nearest `want`.
    fn ulps(got: f32, want: f64) -> f64 {
        let ulp = (want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
        ((got as f64) - want).abs() / ulp as f64
    }

    #[test]
    fn f32_exp_of_nonpositive_values_is_within_one_ulp() {
        // Every 97th f32 from -87 up to -1e-30, and the ends.
        let mut x = -87.0f32;
        while x < -1e-30 {
            let u = ulps(exp_nonpositive_f32(x), (x as f64).exp());
            assert!(
                u <= 1.0,
                "exp({x}) = {}, {u} ulp off",
                exp_nonpositive_f32(x)
            );
            x = f32::from_bits(x.to_bits() - 97);
        }
        assert_eq!(exp_nonpositive_f32(0.0), 1.0);
        assert_eq!(exp_nonpositive_f32(-0.0), 1.0);
        assert_eq!(exp_nonpositive_f32(-100.0), 0.0);
        assert_eq!(exp_nonpositive_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_nonpositive_f32(f32::NAN).is_nan());
    }

    #[test]
    fn f32_sigmoid_is_within_two_ulp_of_the_exact_value() {
        for i in -400_000..=400_000 {
            let x = i as f32 / 10_000.0;
            let want = 1.0 / (1.0 + (-(x as f64)).exp());
            let got = Float::sigmoid(x);
            assert!(
                ulps(got, want) <= 2.0,
                "sigmoid({x}) = {got}, exactly {want}"
            );
        }
        assert!(Float::sigmoid(f32::NAN).is_nan());
        assert_eq!(Float::sigmoid(f32::INFINITY), 1.0);
        assert_eq!(Float::sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(Float::sigmoid(0.0f32), 0.5);
        // f64 keeps the library's exp.
        assert_eq!(
            Float::sigmoid(-3.0f64),
            (-3.0f64).exp() / (1.0 + (-3.0f64).exp())
        );
    }
}
