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
    ($t:ty) => {
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
            fn tanh(self) -> Self {
                <$t>::tanh(self)
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
impl_float!(f32);
impl_float!(f64);
