//! [`RateLimiter`]: one cell, no keys.

use crate::sync::atomic::{AtomicU64, Ordering};
use core::fmt;

use crate::sync::Mutex;

use crate::engine::cell::{self, Attempt, Padded, Steady};
use crate::engine::clock::Clock;
use crate::engine::error::InsufficientCapacity;
use crate::engine::gcra::Params;
use crate::engine::params::{Fast, Gate, SharedParams, Token};
use crate::engine::quota::Quota;
use crate::engine::stats::{Counters, Stats, ALLOWED, DENIED_QUOTA};
use crate::engine::verdict::{Allowed, Denied, DenyReason, PassReason, Verdict};
use crate::limiter::guard::{self, Attached, Guard, Hot};
#[cfg(feature = "metrics")]
use crate::safety::{fault::FaultDetector, watchdog::Watchdog};
use crate::shaping::priority::{Priorities, Reserve};
use crate::shaping::retry::RetryBudget;

mod builder;
mod refund;
mod wait;
mod with;

pub use builder::RateLimiterBuilder;

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
    cell: Padded<DirectCell>,
    params: SharedParams,
    quota: Mutex<Quota>,
    clock: Clock,
    /// What a plain check does inline: one test selects the whole hot path.
    hot: Hot,
    /// Every verdict, always; an attached detector sums these with the counters of the other
    /// limiters it watches.
    counters: Counters,
    guard: Option<Box<Guard>>,
}

/// The one cell, and the generation its TAT is in (read only while a quota change runs).
#[derive(Debug, Default)]
struct DirectCell {
    /// The theoretical arrival time in ns since the epoch; `≤ now` means the cell is full.
    tat: AtomicU64,
    gate: Gate,
}

impl RateLimiter {
    /// A limiter for `quota` on the monotonic clock.
    ///
    /// # Panics
    ///
    /// On `wasm32-unknown-unknown`, which has no monotonic clock: there, build with
    /// [`builder`](Self::builder)`(quota).clock(..)` (or see [`RateLimiterBuilder::try_build`]).
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder, to choose the clock.
    pub fn builder(quota: Quota) -> RateLimiterBuilder {
        RateLimiterBuilder {
            quota,
            clock: None,
            attached: Attached::default(),
            max_debt: core::time::Duration::ZERO,
        }
    }

    /// Checks one unit (one request, or one byte for a byte budget).
    // Always inlined: the steady-state step is a few dozen instructions, and a call would
    // return the verdict through memory.
    #[inline(always)]
    pub fn check(&self) -> Verdict {
        match &self.hot {
            Hot::Bare(clock) => self.step_unit(clock.now_for_step(), |i| self.counters.bump(i)),
            Hot::Detected(clock, d) => {
                let d = d.shared();
                if d.pass_reason().is_some() {
                    return self.check_general();
                }
                let now = clock.now_for_step();
                self.step_unit(now, |i| d.observe_index_at(&self.counters, i, now))
            }
            Hot::Other => self.check_dispatch(),
        }
    }

    /// One unit at `now`, counted by `count`: the steady-state step, or the general check
    /// when the step cannot decide alone.
    #[inline(always)]
    fn step_unit(&self, now: u64, count: impl FnOnce(usize)) -> Verdict {
        let general = || self.check_general();
        self.step_bare(now, (1, Reserve::NONE), count, || None, |v| v, general)
    }

    /// [`check`](Self::check) on another clock, or with more attached.
    #[inline(never)]
    fn check_dispatch(&self) -> Verdict {
        match &self.guard {
            None => self.step_unit(self.clock.now_nanos(), |i| self.counters.bump(i)),
            // As `Hot::Detected`, on another clock.
            Some(g) => match g.detector_only().map(|d| d.shared()) {
                Some(d) if d.pass_reason().is_none() => self
                    .step_unit(self.clock.now_nanos(), |i| {
                        d.observe_index(&self.counters, i)
                    }),
                _ => self.check_guarded(g),
            },
        }
    }

    /// A check of `cost ≥ 1` units on a request quota in steady state, for a class of
    /// reserve `reserve` ([`Reserve::NONE`] for a plain check), stepped inline ([`Steady`]),
    /// counted and handed to `done`; anything else — a byte budget, a quota change, a cost
    /// over the burst or the class's capacity, the clamp lowering the TAT, a clock past 2^62
    /// ns — goes to `general`. `ahead` runs once the weight is known to fit, before the step:
    /// a verdict it returns stands instead (a retry over its budget). (Continuations rather
    /// than an `Option<Verdict>`, which costs a verdict's copy and a test on the hot path.)
    #[inline(always)]
    fn step_bare<R>(
        &self,
        now: u64,
        (cost, reserve): (u64, Reserve),
        count: impl FnOnce(usize),
        ahead_of_step: impl FnOnce() -> Option<R>,
        done: impl FnOnce(Verdict) -> R,
        general: impl FnOnce() -> R,
    ) -> R {
        // `now` is read first: the fast clock is a call into quanta, and nothing read before
        // it then has to be kept across it.
        let Fast { t, tau, until, seq } = self.params.load_fast();
        if now >= until {
            return general();
        }
        // Unconfirmed, `t` and `τ` may come from two quotas: arithmetic only until `confirm`.
        let tol = reserve.tolerance(&Params::request(t, tau));
        // One unit is always within the burst (every burst is at least 1) and within every
        // class's tolerance (never less than one unit's weight): a plain check reads no
        // burst. Unconfirmed, `cost·t` may come from two quotas: bounded by τ here.
        let w = if cost == 1 {
            t
        } else {
            let burst = self.params.burst_unconfirmed(seq);
            match cost.checked_mul(t) {
                Some(w) if cost != 0 && cost <= burst && w <= tol => w,
                _ => return general(),
            }
        };
        if let Some(r) = ahead_of_step() {
            return r;
        }
        let tat = &self.cell.0.tat;
        // Acquire: see `cell::step_checked`; `confirm` re-reads the snapshot after it.
        let mut cur = tat.load(Ordering::Acquire);
        loop {
            if !self.params.confirm(seq) {
                return general();
            }
            match cell::steady_step(cur, now, w, tau, tol) {
                Steady::Allow { tat: next, ahead } => {
                    match tat.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => {
                            count(ALLOWED);
                            return done(Verdict::Allow(Allowed::requests(tol, t, ahead)));
                        }
                        Err(actual) => cur = actual,
                    }
                }
                Steady::Deny { retry_after } => {
                    count(DENIED_QUOTA);
                    return done(Verdict::Deny(Denied::new(retry_after, DenyReason::Quota)));
                }
                Steady::Cold => return general(),
            }
        }
    }

    /// A check with a detector or watchdog attached.
    #[inline]
    fn check_guarded(&self, g: &Guard) -> Verdict {
        if let Some((t, tau, seq)) = self.params.load_request() {
            let p = self.params.request(t, tau);
            if let Some(v) = self.try_guarded(g, &p, t, Token::steady(seq)) {
                return v;
            }
        }
        self.check_general()
    }

    /// Byte budgets, checks during a quota change, and checks that raced one.
    #[inline(never)]
    fn check_general(&self) -> Verdict {
        loop {
            let (p, token) = self.resolve();
            let w = p.unit();
            let v = match &self.guard {
                None => self.try_step(self.clock.now_nanos(), &p, w, token),
                Some(g) => self.try_guarded(g, &p, w, token),
            };
            if let Some(v) = v {
                return v;
            }
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
    // Always inlined, as `check`.
    #[inline(always)]
    pub fn check_n(&self, cost: u64) -> Result<Verdict, InsufficientCapacity> {
        match &self.hot {
            Hot::Bare(clock) => {
                let count = |i| self.counters.bump(i);
                let general = || self.check_n_general(cost);
                self.step_bare(
                    clock.now_for_step(),
                    (cost, Reserve::NONE),
                    count,
                    || None,
                    Ok,
                    general,
                )
            }
            _ => self.check_n_dispatch(cost),
        }
    }

    /// [`check_n`](Self::check_n) on another clock, or with something attached.
    #[inline(never)]
    fn check_n_dispatch(&self, cost: u64) -> Result<Verdict, InsufficientCapacity> {
        match &self.guard {
            None => {
                let count = |i| self.counters.bump(i);
                let general = || self.check_n_general(cost);
                self.step_bare(
                    self.clock.now_nanos(),
                    (cost, Reserve::NONE),
                    count,
                    || None,
                    Ok,
                    general,
                )
            }
            Some(_) => self.check_n_general(cost),
        }
    }

    /// [`check_n`](Self::check_n) for everything [`step_bare`](Self::step_bare) leaves.
    #[inline(never)]
    fn check_n_general(&self, cost: u64) -> Result<Verdict, InsufficientCapacity> {
        loop {
            let (p, token) = self.resolve();
            let w = p
                .weight(cost)
                .ok_or(InsufficientCapacity::new(cost, p.burst))?;
            if w == 0 {
                let Some(tat) = self.tat_under(token) else {
                    continue;
                };
                return Ok(cell::evaluate(tat, self.now(), &p, 0, DenyReason::Quota));
            }
            let v = match &self.guard {
                None => self.try_step(self.clock.now_nanos(), &p, w, token),
                Some(g) => self.try_guarded(g, &p, w, token),
            };
            if let Some(v) = v {
                return Ok(v);
            }
        }
    }

    /// What [`check`](Self::check) would say now, without writing anything (during a
    /// pass-through: the pass-through, without the ceiling).
    pub fn peek(&self) -> Verdict {
        let (p, tat) = loop {
            let (p, token) = self.resolve();
            if let Some(tat) = self.tat_under(token) {
                break (p, tat);
            }
        };
        let w = p.unit();
        let now = self.now();
        let v = cell::evaluate(tat, now, &p, w, DenyReason::Quota);
        match self.guard.as_ref().and_then(|g| g.pass_reason(now)) {
            Some(reason) => guard::pass(v, reason),
            None => v,
        }
    }

    /// This limiter's counts: by outcome, and originals apart from retries. With a
    /// [`FaultDetector`](crate::safety::FaultDetector) attached these are the detector's counts (of
    /// every limiter it watches, since its last
    /// [`set_revision`](crate::safety::FaultDetector::set_revision)).
    ///
    /// ```
    /// use tollgate::{ManualClock, RateLimiter};
    ///
    /// let lim = RateLimiter::builder("1/s".parse()?).clock(ManualClock::new()).build();
    /// let _ = lim.check();
    /// let _ = lim.check();
    /// let stats = lim.stats();
    /// assert_eq!((stats.allowed, stats.denied_quota), (1, 1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        guard::stats(self.guard.as_deref(), &self.counters)
    }

    /// Replaces the quota, live, keeping the cell's fill level: if the cell has used a share
    /// `u` of its burst, it has used the same share of the new burst afterwards (rounded
    /// toward "used"). An empty cell stays empty, a full one full, switching back and forth
    /// hands out nothing, a looser quota never locks anyone out and a tighter one never grants.
    /// Checks racing the change never apply one quota to a cell written under the other.
    ///
    /// ```
    /// use tollgate::{ManualClock, RateLimiter};
    ///
    /// let lim = RateLimiter::builder("10/s".parse()?).clock(ManualClock::new()).build();
    /// for _ in 0..5 {
    ///     assert!(lim.check().is_permitted()); // half of the burst of 10
    /// }
    /// lim.set_quota("100/s".parse()?); // half of the burst of 100 is used, 50 remain
    /// assert_eq!(lim.check_n(0)?.allowed().map(|a| a.remaining()), Some(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        let mut current = self.quota.lock();
        let new = quota.params();
        // The clock (user code: it may panic) is read before the change begins: between
        // `begin` and `finish` nothing runs that could leave the change half done.
        let now = self.now();
        let (old, gen) = self.params.begin(new);
        self.cell
            .0
            .gate
            .rescale(gen, [(&self.cell.0.tat, 0)], &old, &new, now);
        self.params.finish();
        *current = quota;
    }

    /// The quota in force.
    pub fn quota(&self) -> Quota {
        *self.quota.lock()
    }

    /// This limiter's own counts since it was built (never reset, whatever is attached): what
    /// metrics export.
    #[cfg(feature = "metrics")]
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The fault detector and clock watchdog attached, if any.
    #[cfg(feature = "metrics")]
    pub(crate) fn safety(&self) -> (Option<&FaultDetector>, Option<&Watchdog>) {
        match self.guard.as_deref() {
            Some(g) => (g.detector.as_ref(), g.watchdog.as_ref()),
            None => (None, None),
        }
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

    /// The parameters in force for the cell, and the token that re-validates them.
    #[inline]
    fn resolve(&self) -> (Params, Token) {
        self.cell.0.gate.resolve(&self.params.load())
    }

    /// The TAT word, if the parameters `token` was resolved with still apply to it once it
    /// is loaded: a read-only look (a peek, a cost of 0) must not read a word a quota change
    /// rescaled meanwhile under the parameters from before it. `None`: resolve again.
    #[inline]
    fn tat_under(&self, token: Token) -> Option<u64> {
        let c = &self.cell.0;
        // Acquire: a rescaled word carries the change's snapshot and gate (see `Token`).
        let tat = c.tat.load(Ordering::Acquire);
        token.still_valid(&self.params, &c.gate).then_some(tat)
    }

    /// One step on the cell, uncounted; `None` if the parameters changed under it.
    #[inline(always)]
    fn try_raw(&self, a: Attempt<'_>, tol: u64, token: Token) -> Option<Verdict> {
        let c = &self.cell.0;
        let valid = || token.still_valid(&self.params, &c.gate);
        cell::step_within(&c.tat, a, tol, DenyReason::Quota, valid, || self.now())
    }

    /// A bare limiter's step, counted.
    #[inline(always)]
    fn try_step(&self, now: u64, p: &Params, w: u64, token: Token) -> Option<Verdict> {
        let v = self.try_raw(Attempt { now, p, w }, p.tau, token)?;
        self.counters.count(&v);
        Some(v)
    }

    /// With a detector or watchdog attached: enforcing inline, passing through out of line.
    #[inline]
    fn try_guarded(&self, g: &Guard, p: &Params, w: u64, token: Token) -> Option<Verdict> {
        let now = g.now(&self.clock);
        let a = Attempt { now, p, w };
        let v = match g.pass_reason(now) {
            None => self.try_raw(a, p.tau, token)?,
            Some(reason) => self.try_passing(g, a, p.tau, reason, token)?,
        };
        g.observe(&self.counters, &v, None, false, || now);
        Some(v)
    }

    #[cold]
    #[inline(never)]
    fn try_passing(
        &self,
        g: &Guard,
        a: Attempt<'_>,
        tol: u64,
        reason: PassReason,
        token: Token,
    ) -> Option<Verdict> {
        let c = &self.cell.0;
        let valid = || token.still_valid(&self.params, &c.gate);
        let ceiling = |retry_after| g.ceiling_direct(a, reason, retry_after, || self.now());
        let step = cell::step_within(&c.tat, a, tol, DenyReason::Quota, valid, || self.now())?;
        Some(cell::pass_through(step, reason, ceiling))
    }
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = self.clock.now_nanos();
        let tat = self.cell.0.tat.load(Ordering::Relaxed);
        f.debug_struct("RateLimiter")
            .field("quota", &self.quota().to_string())
            .field("ahead_ns", &tat.saturating_sub(now))
            .field("clock", &self.clock)
            .finish()
    }
}
