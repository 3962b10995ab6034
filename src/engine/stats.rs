//! Accounting: every check counted once, by outcome and reason, in striped counters.

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::cell::Cell;
use std::sync::Arc;

use crate::sync::Mutex;

use crate::engine::verdict::{DenyReason, PassReason, Shadow, Verdict};

/// Counts of checks by outcome, as a metrics exporter reads them.
///
/// Every limiter counts each check exactly once (a zero-cost check is not counted): as allowed,
/// denied (by reason) or passed through (by reason); a [`FaultDetector`](crate::safety::FaultDetector)
/// counts the checks of every limiter it watches. Labels are fixed: never a key.
///
/// ```
/// use tollgate::RateLimiter;
/// use tollgate::safety::FaultDetector;
///
/// let detector = FaultDetector::new();
/// let lim = RateLimiter::builder("1/s".parse()?).detector(detector.clone()).build();
/// let _ = lim.check();
/// let _ = lim.check();
/// let stats = detector.stats();
/// assert_eq!((stats.allowed, stats.denied_quota, stats.total()), (1, 1, 2));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Allowed checks.
    pub allowed: u64,
    /// Denied: over quota.
    pub denied_quota: u64,
    /// Denied: a new key sharing the overflow cell of a full key table.
    pub denied_key_table_full: u64,
    /// Denied: the time arithmetic would overflow.
    pub denied_clock_overflow: u64,
    /// Denied by the ceiling that applies during pass-through.
    pub denied_ceiling: u64,
    /// Passed through: the deny anomaly detector tripped.
    pub passed_deny_anomaly: u64,
    /// Passed through: the clock watchdog saw a clock fault.
    pub passed_clock_fault: u64,
    /// Passed through: an operator forced it.
    pub passed_forced: u64,
    /// Passed through: an operator forced it with [`PassReason::Shadow`] (a shadow policy's
    /// pass-throughs are made above the limiter, which counts the verdict it gave).
    pub passed_shadow: u64,
    /// Passed through for any other reason: today, a shared backend that was unavailable
    /// ([`PassReason::BackendUnavailable`]).
    pub passed_other: u64,
    /// Of the pass-throughs, those whose shadow verdict was a denial.
    pub shadow_denied: u64,
    /// Denied: a retry over the limiter's [`RetryBudget`](crate::shaping::RetryBudget).
    pub denied_retry_budget: u64,
    /// Checks of original requests (attempt 0, including every plain `check`), whatever
    /// their outcome: `total() − retries`.
    pub original: u64,
    /// Checks of retries ([`Check::attempt`](crate::Check::attempt) ≥ 1), whatever their
    /// outcome.
    pub retries: u64,
    /// Of the retries, those permitted (allowed or passed through); `retries −
    /// retries_admitted` were denied.
    pub retries_admitted: u64,
    /// Keyed limiters: newcomers that a full table's admission filter sent to the overflow
    /// cell — seen too rarely to displace any key idle then (see
    /// [`Admission`](crate::limiter::Admission)). Not a verdict: their checks are counted by outcome
    /// as well, and `total()` does not include this.
    pub admissions_refused: u64,
}

impl Stats {
    /// Every check counted: allowed + denied + passed through.
    pub fn total(&self) -> u64 {
        self.allowed + self.denied() + self.passed()
    }

    /// All denials, whatever the reason.
    pub fn denied(&self) -> u64 {
        self.denied_quota
            + self.denied_key_table_full
            + self.denied_clock_overflow
            + self.denied_ceiling
            + self.denied_retry_budget
    }

    /// All pass-throughs, whatever the reason.
    pub fn passed(&self) -> u64 {
        self.passed_deny_anomaly
            + self.passed_clock_fault
            + self.passed_forced
            + self.passed_shadow
            + self.passed_other
    }

    pub(crate) fn from_counts(c: &[u64; COUNTERS]) -> Self {
        let mut s = Self {
            allowed: c[ALLOWED],
            denied_quota: c[DENIED_QUOTA],
            denied_key_table_full: c[DENIED_TABLE_FULL],
            denied_clock_overflow: c[DENIED_OVERFLOW],
            denied_ceiling: c[DENIED_CEILING],
            passed_deny_anomaly: c[PASSED_ANOMALY],
            passed_clock_fault: c[PASSED_CLOCK],
            passed_forced: c[PASSED_FORCED],
            passed_shadow: c[PASSED_SHADOW],
            passed_other: c[PASSED_OTHER],
            shadow_denied: c[SHADOW_DENIED],
            denied_retry_budget: c[DENIED_RETRY_BUDGET],
            original: 0,
            retries: c[RETRIES_ADMITTED].wrapping_add(c[RETRIES_DENIED]),
            retries_admitted: c[RETRIES_ADMITTED],
            admissions_refused: c[ADMISSIONS_REFUSED],
        };
        // Saturating: the counters are read one by one while checks go on.
        s.original = s.total().saturating_sub(s.retries);
        s
    }

    /// `self − earlier`, counter by counter (saturating).
    pub(crate) fn since(&self, earlier: &Stats) -> Stats {
        let (a, b) = (self.counts(), earlier.counts());
        let mut d = [0; COUNTERS];
        for i in 0..COUNTERS {
            d[i] = a[i].saturating_sub(b[i]);
        }
        Stats::from_counts(&d)
    }

    fn counts(&self) -> [u64; COUNTERS] {
        let mut c = [0; COUNTERS];
        c[ALLOWED] = self.allowed;
        c[DENIED_QUOTA] = self.denied_quota;
        c[DENIED_TABLE_FULL] = self.denied_key_table_full;
        c[DENIED_OVERFLOW] = self.denied_clock_overflow;
        c[DENIED_CEILING] = self.denied_ceiling;
        c[PASSED_ANOMALY] = self.passed_deny_anomaly;
        c[PASSED_CLOCK] = self.passed_clock_fault;
        c[PASSED_FORCED] = self.passed_forced;
        c[PASSED_OTHER] = self.passed_other;
        c[PASSED_SHADOW] = self.passed_shadow;
        c[SHADOW_DENIED] = self.shadow_denied;
        c[DENIED_RETRY_BUDGET] = self.denied_retry_budget;
        c[RETRIES_ADMITTED] = self.retries_admitted;
        c[RETRIES_DENIED] = self.retries.saturating_sub(self.retries_admitted);
        c[ADMISSIONS_REFUSED] = self.admissions_refused;
        c
    }
}

pub(crate) const ALLOWED: usize = 0;
pub(crate) const DENIED_QUOTA: usize = 1;
pub(crate) const DENIED_TABLE_FULL: usize = 2;
pub(crate) const DENIED_OVERFLOW: usize = 3;
pub(crate) const DENIED_CEILING: usize = 4;
pub(crate) const PASSED_ANOMALY: usize = 5;
pub(crate) const PASSED_CLOCK: usize = 6;
pub(crate) const PASSED_FORCED: usize = 7;
pub(crate) const PASSED_OTHER: usize = 8;
pub(crate) const SHADOW_DENIED: usize = 9;
pub(crate) const DENIED_RETRY_BUDGET: usize = 10;
/// Retries checked, whatever the verdict (counted besides the verdict's own counter).
/// Retries denied, whatever the reason (counted besides the verdict's own counter).
pub(crate) const RETRIES_DENIED: usize = 11;
/// Retries permitted: allowed or passed through (counted besides the verdict's own counter).
pub(crate) const RETRIES_ADMITTED: usize = 12;
pub(crate) const PASSED_SHADOW: usize = 13;
/// Newcomers a keyed table's admission filter sent to the overflow cell (not a verdict: their
/// checks are counted by outcome too).
pub(crate) const ADMISSIONS_REFUSED: usize = 14;
pub(crate) const COUNTERS: usize = 15;

/// Words per stripe: the counters, padded to 128 bytes (two cache lines, as `Padded`) so two
/// threads never write one line.
const STRIDE: usize = 16;
const _: () = assert!(COUNTERS <= STRIDE);

/// Stripes owned by one thread each: written with a plain load and store, no locked
/// instruction.
#[cfg(not(loom))]
const OWNED: usize = 64;
/// Under loom, a few stripes: every Acquire fence makes loom scan every atomic.
#[cfg(loom)]
const OWNED: usize = 2;
/// Stripes for threads beyond the first 64 alive at once: written with `fetch_add`.
#[cfg(not(loom))]
const SHARED: usize = 8;
#[cfg(loom)]
const SHARED: usize = 1;

/// Increase-only counters, striped by thread and padded so two threads never write one cache
/// line. `Relaxed` throughout: they are tallies, read as deltas by the evaluator, and order
/// nothing else.
///
/// Each of the first 64 threads alive at once owns a stripe (see [`claim_slot`]), so its
/// increments need no locked instruction: one writer per stripe makes a load-and-store exact.
/// Further threads share 8 stripes through `fetch_add`.
///
/// A limiter's counters can be [`share`](Self::share)d with the fault detector it is attached
/// to, which sums the counters of every limiter it watches: the limiter counts once, in its
/// own stripes, and both read them.
#[derive(Debug)]
pub(crate) struct Counters {
    /// A fixed-size array, so indexing an owned stripe needs no length load or bounds check.
    /// Behind an `Arc` (one pointer, like a `Box`) so a detector can read them too.
    stripes: Arc<Stripes>,
}

/// The stripes, one flat array of words, stripe `s` at words `s·STRIDE ..`: a thread keeps
/// its stripe's first word index ([`Local::at`]), so a count is one indexed increment, with
/// no multiply by the stripe's size.
#[derive(Debug)]
#[repr(align(128))]
struct Stripes([AtomicU64; (OWNED + SHARED) * STRIDE]);

impl Counters {
    pub(crate) fn new() -> Self {
        Self {
            stripes: Arc::new(Stripes(std::array::from_fn(|_| AtomicU64::new(0)))),
        }
    }

    /// The same counters, for a reader that outlives no one: a detector summing the counts
    /// of the limiters it watches.
    pub(crate) fn share(&self) -> Counters {
        Counters {
            stripes: Arc::clone(&self.stripes),
        }
    }

    /// `true` if no other holder of these counters is left (the limiter that wrote them was
    /// dropped): they will not change again.
    pub(crate) fn is_orphaned(&self) -> bool {
        Arc::strong_count(&self.stripes) == 1
    }

    /// `true` if both are the same counters (one limiter's).
    #[cfg(feature = "metrics")]
    pub(crate) fn same(&self, other: &Counters) -> bool {
        Arc::ptr_eq(&self.stripes, &other.stripes)
    }

    /// Counts a retry with its verdict: [`RETRIES_ADMITTED`] or [`RETRIES_DENIED`], one
    /// increment either way. Only on a retry's path: a plain check never gets here.
    #[inline]
    pub(crate) fn retry(&self, permitted: bool) {
        self.bump(if permitted {
            RETRIES_ADMITTED
        } else {
            RETRIES_DENIED
        });
    }

    /// Counts `v` once. Returns `true` once every `every` calls on this thread (a power of
    /// two): time for the caller to look at its evaluation deadline.
    #[inline]
    pub(crate) fn record(&self, v: &Verdict, every: u32) -> bool {
        let (index, shadow_denied) = classify(v);
        let (at, due) = LOCAL.with(|l| {
            let n = l.ticks[Ticker::Detector as usize].get().wrapping_add(1);
            l.ticks[Ticker::Detector as usize].set(n);
            (l.at.get(), n & (every - 1) == 0)
        });
        let at = if at == UNCLAIMED { claim_slot() } else { at };
        let stripe = &self.stripes.0[at..at + COUNTERS];
        if at < OWNED * STRIDE {
            bump_owned(&stripe[index]);
            if shadow_denied {
                bump_owned(&stripe[SHADOW_DENIED]);
            }
        } else {
            stripe[index].fetch_add(1, Ordering::Relaxed);
            if shadow_denied {
                stripe[SHADOW_DENIED].fetch_add(1, Ordering::Relaxed);
            }
        }
        due
    }

    /// [`record`](Self::record) of a verdict known by its counter `index` (a shadow denial
    /// is never one).
    #[inline(always)]
    pub(crate) fn record_index(&self, index: usize, every: u32) -> bool {
        let (at, due) = LOCAL.with(|l| {
            let n = l.ticks[Ticker::Detector as usize].get().wrapping_add(1);
            l.ticks[Ticker::Detector as usize].set(n);
            (l.at.get(), n & (every - 1) == 0)
        });
        if at < OWNED * STRIDE {
            bump_owned(&self.stripes.0[at + index]);
        } else {
            self.bump_unowned(at, index);
        }
        due
    }

    /// Counts `v` once, with no tick: a limiter's own tally. An allow (the common case) is one
    /// thread-local read and one plain increment.
    #[inline(always)]
    pub(crate) fn count(&self, v: &Verdict) {
        match v {
            Verdict::Allow(_) => self.bump(ALLOWED),
            Verdict::Deny(d) if d.reason() == DenyReason::Quota => self.bump(DENIED_QUOTA),
            _ => self.count_other(v),
        }
    }

    #[inline(never)]
    fn count_other(&self, v: &Verdict) {
        let (index, shadow_denied) = classify(v);
        self.bump(index);
        if shadow_denied {
            self.bump(SHADOW_DENIED);
        }
    }

    /// Counts one more in counter `index` (no verdict, no tick).
    #[inline(always)]
    pub(crate) fn bump(&self, index: usize) {
        debug_assert!(index < COUNTERS);
        let at = LOCAL.with(|l| l.at.get());
        // An owned stripe (every thread but the 65th alive at once, after its first check):
        // one thread-local load, one compare, one plain increment.
        if at < OWNED * STRIDE {
            bump_owned(&self.stripes.0[at + index]);
        } else {
            self.bump_unowned(at, index);
        }
    }

    /// [`bump`](Self::bump) on a thread's first check (`UNCLAIMED`), or from a thread that
    /// shares a stripe.
    #[cold]
    #[inline(never)]
    fn bump_unowned(&self, at: usize, index: usize) {
        let at = if at == UNCLAIMED { claim_slot() } else { at };
        let word = &self.stripes.0[at + index];
        if at < OWNED * STRIDE {
            bump_owned(word);
        } else {
            word.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What these counters hold, as [`Stats`].
    pub(crate) fn stats(&self) -> Stats {
        Stats::from_counts(&self.sum())
    }

    /// The sums over all stripes.
    pub(crate) fn sum(&self) -> [u64; COUNTERS] {
        let mut total = [0u64; COUNTERS];
        for stripe in self.stripes.0.chunks_exact(STRIDE) {
            for (t, c) in total.iter_mut().zip(stripe) {
                *t = t.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        total
    }
}

/// An increment by the only thread that writes `c`.
#[inline]
fn bump_owned(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

const UNCLAIMED: usize = usize::MAX;

/// Per-thread state read on every check: one thread-local without a destructor, so an access
/// is a plain load.
struct Local {
    /// The index of this thread's stripe's first word: `stripe · STRIDE` (`UNCLAIMED` before
    /// its first check).
    at: Cell<usize>,
    /// Tick counters, one per [`Ticker`].
    ticks: [Cell<u32>; 2],
}

crate::sync::thread_locals! {
    static LOCAL: Local = const {
        Local {
            at: Cell::new(UNCLAIMED),
            ticks: [Cell::new(0), Cell::new(0)],
        }
    };
    static RELEASE: Release = const { Release(Cell::new(UNCLAIMED)) };
}

crate::sync::statics! {
    static FREE_SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
}

/// Hands an owned stripe back when its thread exits.
struct Release(Cell<usize>);

impl Drop for Release {
    fn drop(&mut self) {
        let slot = self.0.get();
        // Under loom the statics are gone when the last modelled thread's locals drop, and
        // each run starts with fresh ones: nothing to hand back.
        if slot < OWNED && cfg!(not(loom)) {
            // Checks run by later thread-local destructors use a shared stripe from now on.
            let _ = LOCAL.try_with(|l| l.at.set(OWNED * STRIDE));
            // The mutex orders this thread's last increments before the next owner's first.
            FREE_SLOTS.lock().push(slot);
        }
    }
}

/// Claims this thread's stripe on its first counted check: a free owned stripe, else the
/// next never-used one, else a shared one. Returns the index of its first word.
#[cold]
// Under loom one shared stripe (`SHARED` = 1) keeps models small.
#[cfg_attr(loom, allow(clippy::modulo_one))]
fn claim_slot() -> usize {
    let slot = FREE_SLOTS.lock().pop().unwrap_or_else(|| {
        let i = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
        if i < OWNED {
            i
        } else {
            OWNED + i % SHARED
        }
    });
    // If the release hook cannot be registered (thread teardown), do not own a stripe.
    let slot = match RELEASE.try_with(|r| r.0.set(slot)) {
        Ok(()) => slot,
        Err(_) => OWNED,
    };
    let at = slot * STRIDE;
    let _ = LOCAL.try_with(|l| l.at.set(at));
    at
}

#[inline]
fn classify(v: &Verdict) -> (usize, bool) {
    match v {
        Verdict::Allow(_) => (ALLOWED, false),
        Verdict::Deny(d) => (
            match d.reason() {
                DenyReason::KeyTableFull => DENIED_TABLE_FULL,
                DenyReason::ClockOverflow => DENIED_OVERFLOW,
                DenyReason::Ceiling => DENIED_CEILING,
                DenyReason::RetryBudget => DENIED_RETRY_BUDGET,
                _ => DENIED_QUOTA,
            },
            false,
        ),
        Verdict::PassThrough(p) => (
            match p.reason() {
                PassReason::DenyAnomaly => PASSED_ANOMALY,
                PassReason::ClockFault => PASSED_CLOCK,
                PassReason::Forced => PASSED_FORCED,
                PassReason::Shadow => PASSED_SHADOW,
                PassReason::BackendUnavailable => PASSED_OTHER,
            },
            p.shadow() == Shadow::Deny,
        ),
    }
}

/// Which per-thread tick counter: the detector's and the watchdog's count separately, so
/// each sees every check.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ticker {
    Detector = 0,
    Watchdog = 1,
}

/// A per-thread tick: `true` once every `every` calls (a power of two) on this thread for
/// this ticker. Drives lazy evaluation without a shared write or a second clock read per
/// check.
#[inline]
pub(crate) fn tick(ticker: Ticker, every: u32) -> bool {
    LOCAL.with(|l| {
        let c = &l.ticks[ticker as usize];
        let n = c.get().wrapping_add(1);
        c.set(n);
        n & (every - 1) == 0
    })
}
