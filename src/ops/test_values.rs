//! Deterministic test values for the ops' unit tests: a multiplicative hash of the index,
//! salted, folded onto 1,000 evenly spaced values.

/// `n` values in [-1, 1) (steps of 1/500), different for each `salt`.
pub(crate) fn values(n: usize, salt: u32) -> Vec<f32> {
    values_over(n, salt, 500.0, 1.0)
}

/// `n` values `k / div - shift` for `k` in 0..1000 picked by the salted hash of the index.
pub(crate) fn values_over(n: usize, salt: u32, div: f32, shift: f32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761) ^ salt) % 1000) as f32 / div - shift)
        .collect()
}
