//! The per-request arguments of a check.

/// What one check asks for: its cost, whether it is a retry, and its priority class.
///
/// ```
/// use tollgate::{Check, RateLimiter};
///
/// let lim = RateLimiter::new("100/s".parse()?);
/// let v = lim.check_with(Check::cost(3).attempt(1).class(2))?;
/// assert!(v.is_permitted());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Check {
    cost: u64,
    attempt: u32,
    class: u8,
}

impl Check {
    /// A check of `cost` units: requests, or bytes for a byte budget. A cost of 0 reports the
    /// remaining capacity and writes nothing.
    #[inline]
    pub const fn cost(cost: u64) -> Self {
        Self {
            cost,
            attempt: 0,
            class: 0,
        }
    }

    /// The attempt number: 0 for an original request, 1 for its first retry, and so on. A
    /// retry must fit the limiter's [`RetryBudget`](crate::shaping::RetryBudget), if one is attached,
    /// and is counted apart in [`Stats`](crate::Stats).
    #[inline]
    pub const fn attempt(self, attempt: u32) -> Self {
        Self { attempt, ..self }
    }

    /// The priority class: 0 is the most critical. With [`Priorities`](crate::shaping::Priorities)
    /// attached, the class decides how much of the burst the check may use; without them it
    /// is ignored.
    #[inline]
    pub const fn class(self, class: u8) -> Self {
        Self { class, ..self }
    }

    /// The cost of this check.
    #[inline]
    pub const fn units(&self) -> u64 {
        self.cost
    }

    /// The attempt number (0 = original).
    #[inline]
    pub const fn attempt_number(&self) -> u32 {
        self.attempt
    }

    /// The priority class (0 = most critical).
    #[inline]
    pub const fn priority_class(&self) -> u8 {
        self.class
    }
}

impl Default for Check {
    /// One unit, an original request, the most critical class.
    fn default() -> Self {
        Self::cost(1)
    }
}
