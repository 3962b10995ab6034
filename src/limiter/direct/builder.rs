//! [`RateLimiterBuilder`]: the clock and what a [`RateLimiter`] carries.

use core::time::Duration;

use crate::sync::Mutex;

use super::{DirectCell, RateLimiter};
use crate::engine::cell::Padded;
use crate::engine::clock::Clock;
use crate::engine::error::ClockError;
use crate::engine::params::SharedParams;
use crate::engine::quota::Quota;
use crate::engine::stats::Counters;
use crate::limiter::guard::{Attached, Guard, Hot};
use crate::safety::fault::FaultDetector;
use crate::safety::watchdog::Watchdog;
use crate::shaping::priority::Priorities;
use crate::shaping::retry::RetryBudget;

/// Builds a [`RateLimiter`].
#[derive(Debug)]
#[must_use = "call .build() to get the limiter"]
pub struct RateLimiterBuilder {
    pub(super) quota: Quota,
    /// `None`: the default, [`Clock::monotonic`], taken when the limiter is built.
    pub(super) clock: Option<Clock>,
    pub(super) attached: Attached,
    pub(super) max_debt: Duration,
}

impl RateLimiterBuilder {
    /// The clock to read on every check (default: [`Clock::monotonic`]). Pass a
    /// [`ManualClock`](crate::ManualClock) in tests.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// Attaches a fault detector: deny anomalies turn into pass-throughs, and every check is
    /// counted ([`FaultDetector::stats`]). One detector per limiter.
    pub fn detector(mut self, detector: FaultDetector) -> Self {
        self.attached.detector = Some(detector);
        self
    }

    /// Attaches a clock watchdog. The limiter then reads the watchdog's clocks (its fast
    /// clock, or its reference after a fault) instead of [`clock`](Self::clock).
    pub fn watchdog(mut self, watchdog: Watchdog) -> Self {
        self.attached.watchdog = Some(watchdog);
        self
    }

    /// Attaches priority classes: each class keeps a share of the burst for the classes
    /// above it ([`Priorities`]). Choose the class with [`Check::class`](crate::Check::class).
    pub fn priorities(mut self, priorities: Priorities) -> Self {
        self.attached.priorities = Some(priorities);
        self
    }

    /// Attaches a retry budget: retries ([`Check::attempt`](crate::Check::attempt) ≥ 1) may add only a share of the
    /// originals ([`RetryBudget`]). One budget per limiter.
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.attached.budget = Some(budget);
        self
    }

    /// How far into debt a [`charge`](RateLimiter::charge) may push the limiter (default
    /// zero: a charge drains the cell at most): a cell in debt denies every check until time
    /// has paid the debt off, so a cost reported after the fact (tokens, a failed login) is
    /// waited out rather than forgotten. Capped at about 146 years.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::RateLimiter;
    ///
    /// let lim = RateLimiter::builder("1000/min".parse()?)
    ///     .max_debt(Duration::from_secs(600)) // at most ten minutes' worth beyond a drained cell
    ///     .build();
    /// assert_eq!(lim.charge(5_000).unpaid(), 0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_debt(mut self, max: Duration) -> Self {
        self.max_debt = max;
        self
    }

    /// Builds the limiter, starting full (a whole burst is available).
    ///
    /// # Panics
    ///
    /// Without a [`clock`](Self::clock) on `wasm32-unknown-unknown`, which has no default
    /// clock; [`try_build`](Self::try_build) returns the error instead.
    pub fn build(self) -> RateLimiter {
        self.try_build().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`build`](Self::build), or the error when the default clock is wanted and this target
    /// has none.
    ///
    /// ```
    /// use tollgate::{Clock, RateLimiter};
    ///
    /// // A host clock, as a wasm32 build reads `performance.now()`: here a fixed reading.
    /// let lim = RateLimiter::builder("1/s".parse()?).clock(Clock::from_fn(|| 7_000)).try_build()?;
    /// assert!(lim.check().is_permitted());
    /// assert!(!lim.check().is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClockError::Unavailable`] on `wasm32-unknown-unknown` when no clock was given.
    pub fn try_build(self) -> Result<RateLimiter, ClockError> {
        self.try_build_with(Clock::try_monotonic)
    }

    /// [`try_build`](Self::try_build), with `default` for the clock when none was given.
    fn try_build_with(
        self,
        default: impl FnOnce() -> Result<Clock, ClockError>,
    ) -> Result<RateLimiter, ClockError> {
        let clock = match self.clock {
            Some(clock) => clock,
            None => default()?,
        };
        let counters = Counters::new();
        let guard = Guard::boxed(self.attached, &counters);
        Ok(RateLimiter {
            hot: Hot::new(&clock, guard.as_deref()),
            cell: Padded(DirectCell::default()),
            params: SharedParams::new(
                self.quota
                    .params()
                    .with_debt(crate::engine::charge::debt_ns(self.max_debt)),
            ),
            quota: Mutex::new(self.quota),
            clock,
            counters,
            guard,
        })
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::engine::clock::ManualClock;

    /// The default clock as `wasm32-unknown-unknown` has it.
    fn no_default() -> Result<Clock, ClockError> {
        Err(ClockError::Unavailable {
            target: "wasm32-unknown-unknown",
        })
    }

    fn quota() -> Quota {
        "2/s".parse().unwrap() // test
    }

    #[test]
    fn without_a_default_clock_the_builder_asks_for_one() {
        let err = RateLimiter::builder(quota())
            .try_build_with(no_default)
            .unwrap_err(); // test
        assert_eq!(err, no_default().unwrap_err()); // test
        assert_eq!(
            err.to_string(),
            "no built-in clock on wasm32-unknown-unknown (its standard library cannot read \
             time): give the builder .clock(Clock::from_fn(..)) or a ManualClock"
        );
    }

    #[test]
    fn without_a_default_clock_a_given_one_is_read() {
        let manual = ManualClock::new();
        let lim = RateLimiter::builder(quota())
            .clock(&manual)
            .try_build_with(no_default)
            .unwrap(); // test
        assert!(lim.check().is_permitted());
        assert!(lim.check().is_permitted());
        assert!(!lim.check().is_permitted());
        manual.advance(Duration::from_millis(500));
        assert!(lim.check().is_permitted());

        // A host's clock in milliseconds, as `performance.now()` reads.
        let host_ms = Arc::new(AtomicU64::new(1_000));
        let read = Arc::clone(&host_ms);
        let lim = RateLimiter::builder(quota())
            .clock(Clock::from_fn(move || {
                read.load(Ordering::Relaxed) * 1_000_000
            }))
            .try_build_with(no_default)
            .unwrap(); // test
        assert!(lim.check_n(2).unwrap().is_permitted()); // test
        let retry = lim.check().denied().map(|d| d.retry_after());
        assert_eq!(retry, Some(Duration::from_millis(500)));
        host_ms.fetch_add(500, Ordering::Relaxed);
        assert!(lim.check().is_permitted());
    }
}
