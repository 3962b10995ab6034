//! [`RateLimiter`]: one cell, no keys.

use core::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::cell::{self, Padded, SharedParams};
use crate::check::Check;
use crate::clock::Clock;
use crate::error::InsufficientCapacity;
use crate::quota::Quota;
use crate::verdict::{DenyReason, Verdict};

/// A rate limiter with one cell: a single TAT word, checked lock-free.
///
/// Every check reads the clock, loads the quota parameters and runs one GCRA step; an allowed
/// check is one compare-and-swap, a denied one writes nothing shared.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, RateLimiter, Verdict};
///
/// let clock = ManualClock::new();
/// let lim = RateLimiter::builder("10/s;burst=2".parse()?).clock(clock.clone()).build();
/// assert!(lim.check().is_permitted());
/// assert!(lim.check().is_permitted());
/// let Verdict::Deny(d) = lim.check() else { panic!("the burst is 2") };
/// assert_eq!(d.retry_after(), Duration::from_millis(100));
/// clock.advance(d.retry_after());
/// assert!(lim.check().is_permitted());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct RateLimiter {
    /// The theoretical arrival time in ns since the epoch; `≤ now` means the cell is full.
    tat: Padded<AtomicU64>,
    params: SharedParams,
    quota: Mutex<Quota>,
    clock: Clock,
}

impl RateLimiter {
    /// A limiter for `quota` on the monotonic clock.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder, to choose the clock.
    pub fn builder(quota: Quota) -> RateLimiterBuilder {
        RateLimiterBuilder {
            quota,
            clock: Clock::monotonic(),
        }
    }

    /// Checks one unit (one request, or one byte for a byte budget).
    #[inline]
    pub fn check(&self) -> Verdict {
        let p = self.params.load();
        let now = self.clock.now_nanos();
        // Every quota's burst is at least 1, so one unit always has a weight.
        let w = p.weight(1).unwrap_or(p.tau);
        self.step(now, &p, w)
    }

    /// Checks `cost` units at once: all or nothing.
    ///
    /// A cost of 0 is allowed, reports the remaining capacity and writes nothing.
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if `cost` exceeds the burst: it could never be allowed.
    #[inline]
    pub fn check_n(&self, cost: u64) -> Result<Verdict, InsufficientCapacity> {
        let p = self.params.load();
        let w = p
            .weight(cost)
            .ok_or(InsufficientCapacity::new(cost, p.burst))?;
        let now = self.clock.now_nanos();
        if w == 0 {
            let tat = self.tat.0.load(Ordering::Relaxed);
            return Ok(cell::evaluate(tat, now, &p, 0, DenyReason::Quota));
        }
        Ok(self.step(now, &p, w))
    }

    /// Checks with per-request arguments (cost, attempt, priority class).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds the burst.
    #[inline]
    pub fn check_with(&self, check: Check) -> Result<Verdict, InsufficientCapacity> {
        self.check_n(check.units())
    }

    /// What [`check`](Self::check) would say now, without writing anything.
    pub fn peek(&self) -> Verdict {
        let p = self.params.load();
        let now = self.clock.now_nanos();
        let w = p.weight(1).unwrap_or(p.tau);
        let tat = self.tat.0.load(Ordering::Relaxed);
        cell::evaluate(tat, now, &p, w, DenyReason::Quota)
    }

    /// Replaces the quota, live. Time is carried over, not tokens: a full cell stays full, an
    /// empty one stays empty (the TAT is clamped to `now + τ` on the next check), and a larger
    /// burst is available at once.
    pub fn set_quota(&self, quota: Quota) {
        let mut current = self.quota.lock();
        *current = quota;
        self.params.store(quota.params());
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        *self.quota.lock()
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    #[inline]
    fn step(&self, now: u64, p: &crate::gcra::Params, w: u64) -> Verdict {
        cell::step_word(&self.tat.0, now, p, w, DenyReason::Quota)
    }
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = self.clock.now_nanos();
        let tat = self.tat.0.load(Ordering::Relaxed);
        f.debug_struct("RateLimiter")
            .field("quota", &self.quota().to_string())
            .field("ahead_ns", &tat.saturating_sub(now))
            .field("clock", &self.clock)
            .finish()
    }
}

/// Builds a [`RateLimiter`].
#[derive(Debug)]
#[must_use = "call .build() to get the limiter"]
pub struct RateLimiterBuilder {
    quota: Quota,
    clock: Clock,
}

impl RateLimiterBuilder {
    /// The clock to read on every check (default: [`Clock::monotonic`]). Pass a
    /// [`ManualClock`](crate::ManualClock) in tests.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// Builds the limiter, starting full (a whole burst is available).
    pub fn build(self) -> RateLimiter {
        RateLimiter {
            tat: Padded(AtomicU64::new(0)),
            params: SharedParams::new(self.quota.params()),
            quota: Mutex::new(self.quota),
            clock: self.clock,
        }
    }
}
