//! The one search for the smallest count that fits a memory budget: the micro-batch
//! planner's K, the full-graph chunk count and the memory-aware partitioners' K all call
//! [`smallest_fitting`]. The count doubles from its start until an attempt fits, then a
//! bisection between the last failing and the first fitting count finds the smallest
//! fitting one, assuming (as every caller's estimate does) that a larger count never
//! needs more memory. It tries about `2 log2(answer / start)` counts instead of one per
//! count.

use crate::error::Result;

/// What [`smallest_fitting`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found<T> {
    /// The smallest count that fits, and what the attempt at it made.
    Fits {
        /// The smallest fitting count.
        count: usize,
        /// What the attempt at `count` made.
        value: T,
    },
    /// No count up to the limit fits.
    NoneFits {
        /// What the attempt at the limit made.
        value: T,
    },
}

/// The smallest count in `start..=most` whose attempt fits. `attempt(count)` makes the
/// caller's candidate at `count` (a partition, a chunk plan, an estimate) and says whether
/// it fits. `start` is clamped to `1..=most`; `most` of 0 is taken as 1.
pub fn smallest_fitting<T>(
    start: usize,
    most: usize,
    mut attempt: impl FnMut(usize) -> Result<(T, bool)>,
) -> Result<Found<T>> {
    let most = most.max(1);
    let mut count = start.clamp(1, most);
    let (mut value, mut fits) = attempt(count)?;
    let mut failed = 0;
    while !fits {
        if count == most {
            return Ok(Found::NoneFits { value });
        }
        failed = count;
        count = count.saturating_mul(2).min(most);
        (value, fits) = attempt(count)?;
    }
    if failed == 0 {
        return Ok(Found::Fits { count, value });
    }
    while count - failed > 1 {
        let mid = failed + (count - failed) / 2;
        let (v, ok) = attempt(mid)?;
        if ok {
            (count, value) = (mid, v);
        } else {
            failed = mid;
        }
    }
    Ok(Found::Fits { count, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts fit from `need` up; records every count tried.
    fn search(start: usize, most: usize, need: usize) -> (Found<usize>, Vec<usize>) {
        let mut tried = Vec::new();
        let found = smallest_fitting(start, most, |c| {
            tried.push(c);
            Ok((c * 10, c >= need))
        })
        .unwrap();
        (found, tried)
    }

    #[test]
    fn finds_the_smallest_fitting_count_from_every_start() {
        for most in 1..40 {
            for start in 0..=most + 1 {
                for need in 1..=most {
                    let (found, _) = search(start, most, need);
                    let want = need.max(start.clamp(1, most));
                    assert_eq!(
                        found,
                        Found::Fits {
                            count: want,
                            value: want * 10
                        }
                    );
                }
            }
        }
    }

    #[test]
    fn reports_the_attempt_at_the_limit_when_none_fits() {
        let (found, tried) = search(3, 20, 21);
        assert_eq!(found, Found::NoneFits { value: 200 });
        assert_eq!(tried, [3, 6, 12, 20]);
    }

    #[test]
    fn tries_logarithmically_many_counts() {
        let (found, tried) = search(1, 1 << 20, 700_001);
        assert_eq!(
            found,
            Found::Fits {
                count: 700_001,
                value: 7_000_010
            }
        );
        assert!(tried.len() <= 2 * 21, "{} attempts", tried.len());
    }

    #[test]
    fn an_attempts_error_stops_the_search() {
        let r = smallest_fitting(1, 8, |c| {
            if c == 4 {
                Err(crate::error::Error::invalid("no"))
            } else {
                Ok(((), false))
            }
        });
        assert!(r.is_err());
    }
}
