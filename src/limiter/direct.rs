//! [`RateLimiter`]: one cell, no keys.

use core::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::engine::cell::{self, Attempt, Padded, SharedParams};
use crate::engine::check::Check;
use crate::engine::clock::Clock;
use crate::engine::error::InsufficientCapacity;
use crate::engine::gcra::Params;
use crate::engine::quota::Quota;
use crate::engine::stats::Stats;
use crate::engine::verdict::{DenyReason, PassReason, Verdict};
use crate::limiter::guard::{self, Attached, Guard};
use crate::safety::fault::FaultDetector;
use crate::safety::watchdog::Watchdog;
use crate::shaping::priority::{self, Priorities};
use crate::shaping::retry::RetryBudget;

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
    guard: Option<Box<Guard>>,
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
            attached: Attached::default(),
        }
    }

    /// Checks one unit (one request, or one byte for a byte budget).
    #[inline]
    pub fn check(&self) -> Verdict {
        match self.params.load_request() {
            Some((t, tau)) => {
                // The step of one request reads only T and τ (the burst bounds costs, and a
                // cost of one is always within it).
                let p = Params::request(t, tau);
                match &self.guard {
                    None => self.step(self.clock.now_nanos(), &p, t),
                    Some(g) => self.step_guarded(g, &p, t),
                }
            }
            None => self.check_general(),
        }
    }

    /// Byte budgets, and limiters with a detector or watchdog attached.
    #[inline(never)]
    fn check_general(&self) -> Verdict {
        let p = self.params.load();
        let w = p.unit();
        match &self.guard {
            None => self.step(self.clock.now_nanos(), &p, w),
            Some(g) => self.step_guarded(g, &p, w),
        }
    }

    /// Checks `cost` units at once: all or nothing.
    ///
    /// A cost of 0 is allowed, reports the remaining capacity, and writes and counts nothing.
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if `cost` exceeds the burst: it could never be allowed.
    ///
    /// ```
    /// use tollgate::RateLimiter;
    ///
    /// let lim = RateLimiter::new("10/s".parse()?);
    /// assert!(lim.check_n(5)?.is_permitted());
    /// assert_eq!(lim.check_n(0)?.allowed().map(|a| a.remaining()), Some(5));
    /// assert!(lim.check_n(11).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_n(&self, cost: u64) -> Result<Verdict, InsufficientCapacity> {
        let p = self.params.load();
        let w = p
            .weight(cost)
            .ok_or(InsufficientCapacity::new(cost, p.burst))?;
        if w == 0 {
            let tat = self.tat.0.load(Ordering::Relaxed);
            return Ok(cell::evaluate(tat, self.now(), &p, 0, DenyReason::Quota));
        }
        Ok(match &self.guard {
            None => self.step(self.clock.now_nanos(), &p, w),
            Some(g) => self.step_guarded(g, &p, w),
        })
    }

    /// Checks with per-request arguments: cost, attempt, priority class.
    ///
    /// With [`Priorities`] attached, the check sees its class's tolerance; with a
    /// [`RetryBudget`] attached, a retry (attempt ≥ 1) must fit the budget as well as the
    /// quota; with a [`FaultDetector`] attached, originals and retries are counted apart.
    /// Without them, the attempt and class are ignored and this is [`check_n`](Self::check_n).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds the burst, or the capacity of its class.
    ///
    /// ```
    /// use tollgate::{Check, ManualClock, Priorities, RateLimiter};
    ///
    /// let lim = RateLimiter::builder("100/s".parse()?)
    ///     .clock(ManualClock::new())
    ///     .priorities(Priorities::new([(1, 0.5)])?)
    ///     .build();
    /// assert!(lim.check_with(Check::cost(50).class(1))?.is_permitted());
    /// assert!(!lim.check_with(Check::cost(1).class(1))?.is_permitted());
    /// assert!(lim.check_with(Check::cost(50))?.is_permitted()); // class 0: the reserve
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_with(&self, check: Check) -> Result<Verdict, InsufficientCapacity> {
        match &self.guard {
            None => self.check_n(check.units()),
            Some(g) => self.check_attached(g, check),
        }
    }

    /// [`check_with`](Self::check_with) with something attached: the class's tolerance, the
    /// retry budget (peek, step, debit), the counts.
    #[inline(never)]
    fn check_attached(&self, g: &Guard, check: Check) -> Result<Verdict, InsufficientCapacity> {
        let p = self.params.load();
        let tol = g.reserve(check.priority_class()).tolerance(&p);
        let w = priority::weight_within(&p, check.units(), tol)?;
        let now = g.now(&self.clock);
        if w == 0 {
            let tat = self.tat.0.load(Ordering::Relaxed);
            return Ok(cell::evaluate(
                tat,
                now,
                &p.within(tol),
                0,
                DenyReason::Quota,
            ));
        }
        let retry = check.attempt_number() > 0;
        let v = match (retry.then(|| g.over_budget(now)).flatten(), g.pass_reason()) {
            (Some(denied), _) => denied,
            (None, None) => {
                let a = Attempt { now, p: &p, w };
                cell::step_word(&self.tat.0, a, tol, DenyReason::Quota, || self.now())
            }
            (None, Some(reason)) => self.step_passing(g, now, &p, w, reason),
        };
        g.observe(&v, None, retry, || now);
        Ok(v)
    }

    /// What [`check`](Self::check) would say now, without writing anything (during a
    /// pass-through: the pass-through, without the ceiling).
    pub fn peek(&self) -> Verdict {
        let p = self.params.load();
        let w = p.unit();
        let tat = self.tat.0.load(Ordering::Relaxed);
        let v = cell::evaluate(tat, self.now(), &p, w, DenyReason::Quota);
        match self.guard.as_ref().and_then(|g| g.pass_reason()) {
            Some(reason) => guard::pass(v, reason),
            None => v,
        }
    }

    /// The fault detector's counts, if one is attached: by outcome, and originals apart from
    /// retries.
    pub fn stats(&self) -> Option<Stats> {
        self.guard
            .as_ref()?
            .detector
            .as_ref()
            .map(FaultDetector::stats)
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

    /// The retry budget attached, if any.
    pub fn retry_budget(&self) -> Option<RetryBudget> {
        self.guard.as_ref()?.retry_budget()
    }

    /// The priority classes attached, if any.
    pub fn priorities(&self) -> Option<&Priorities> {
        self.guard.as_ref()?.priorities.as_ref()
    }

    #[inline]
    fn now(&self) -> u64 {
        match &self.guard {
            None => self.clock.now_nanos(),
            Some(g) => g.now(&self.clock),
        }
    }

    #[inline]
    fn step(&self, now: u64, p: &Params, w: u64) -> Verdict {
        let a = Attempt { now, p, w };
        cell::step_word(&self.tat.0, a, p.tau, DenyReason::Quota, || self.now())
    }

    /// With a detector or watchdog attached: enforcing inline, passing through out of line.
    #[inline]
    fn step_guarded(&self, g: &Guard, p: &Params, w: u64) -> Verdict {
        let now = g.now(&self.clock);
        let v = match g.pass_reason() {
            None => self.step(now, p, w),
            Some(reason) => self.step_passing(g, now, p, w, reason),
        };
        g.observe(&v, None, false, || now);
        v
    }

    #[cold]
    #[inline(never)]
    fn step_passing(&self, g: &Guard, now: u64, p: &Params, w: u64, reason: PassReason) -> Verdict {
        let (a, ceiling) = (Attempt { now, p, w }, g.ceiling(p, w));
        cell::step_pass_through(&self.tat.0, a, reason, ceiling, || true, || self.now())
            .unwrap_or_else(|| self.step(now, p, w))
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
    attached: Attached,
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
    /// above it ([`Priorities`]). Choose the class with [`Check::class`].
    pub fn priorities(mut self, priorities: Priorities) -> Self {
        self.attached.priorities = Some(priorities);
        self
    }

    /// Attaches a retry budget: retries ([`Check::attempt`] ≥ 1) may add only a share of the
    /// originals ([`RetryBudget`]). One budget per limiter.
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.attached.budget = Some(budget);
        self
    }

    /// Builds the limiter, starting full (a whole burst is available).
    pub fn build(self) -> RateLimiter {
        RateLimiter {
            tat: Padded(AtomicU64::new(0)),
            params: SharedParams::new(self.quota.params()),
            quota: Mutex::new(self.quota),
            clock: self.clock,
            guard: Guard::boxed(self.attached),
        }
    }
}
