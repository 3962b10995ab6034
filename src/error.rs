//! Errors: caller mistakes and bad input. A denial is never an error; it is a
//! [`Verdict`](crate::Verdict).

use core::fmt;

/// A check asked for more than the cell can ever hold: its cost exceeds the burst (or, with
/// priority classes, the capacity of its class). Retrying will never succeed, so this is an
/// error, not a denial.
///
/// ```
/// use tollgate::{Quota, RateLimiter};
///
/// let lim = RateLimiter::new("10/s".parse()?);
/// let err = lim.check_n(11).unwrap_err();
/// assert_eq!(err.cost(), 11);
/// assert_eq!(err.capacity(), 10);
/// assert_eq!(err.to_string(), "cost 11 exceeds the capacity of 10 per check");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("cost {cost} exceeds the capacity of {capacity} per check")]
pub struct InsufficientCapacity {
    cost: u64,
    capacity: u64,
}

impl InsufficientCapacity {
    pub(crate) fn new(cost: u64, capacity: u64) -> Self {
        Self { cost, capacity }
    }

    /// The cost that was asked for.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The largest cost a single check may ask for (the effective burst).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// Writes `input` as a quoted, escaped string cut to at most `max` characters of input, so an
/// error message never carries control characters or unbounded attacker-controlled text.
pub(crate) fn quote(f: &mut fmt::Formatter<'_>, input: &str, max: usize) -> fmt::Result {
    let mut chars = input.chars();
    f.write_str("\"")?;
    for c in chars.by_ref().take(max) {
        write!(f, "{}", c.escape_debug())?;
    }
    if chars.next().is_some() {
        f.write_str("…")?;
    }
    f.write_str("\"")
}
