//! [`RateLimiterBuilder`]: the clock and what a [`RateLimiter`] carries.

use core::time::Duration;

use crate::sync::Mutex;

use super::{DirectCell, RateLimiter};
use crate::engine::cell::Padded;
use crate::engine::clock::Clock;
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
    pub(super) clock: Clock,
    pub(super) attached: Attached,
    pub(super) max_debt: Duration,
}

impl RateLimiterBuilder {
    /// The clock to read on every check (default: [`Clock::monotonic`]). Pass a
    /// [`ManualClock`](crate::ManualClock) in tests.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
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
    pub fn build(self) -> RateLimiter {
        let counters = Counters::new();
        let guard = Guard::boxed(self.attached, &counters);
        RateLimiter {
            hot: Hot::new(&self.clock, guard.as_deref()),
            cell: Padded(DirectCell::default()),
            params: SharedParams::new(
                self.quota
                    .params()
                    .with_debt(crate::engine::charge::debt_ns(self.max_debt)),
            ),
            quota: Mutex::new(self.quota),
            clock: self.clock,
            counters,
            guard,
        }
    }
}
