//! Retry budgets: retries may add only a share of the originals.
//! The client-side half, [`Backoff`], is in `retry/backoff.rs`.

mod backoff;

pub use backoff::{
    AttemptFailure, Backoff, BackoffBuilder, BackoffDelays, BackoffError, RetryError,
};

use crate::sync::atomic::{AtomicU64, Ordering};
use core::fmt;
use core::time::Duration;

use crate::engine::cell::Padded;

/// Sub-buckets per period.
const SLOTS: usize = 10;
/// The shortest period: a sub-bucket of at least 100 ms keeps the 32-bit epoch tags unique
/// for 13 years (see [`Window`]).
const MIN_PERIOD: u64 = 1_000_000_000;
const NANOS_PER_SEC: u128 = 1_000_000_000;
const PPM: u128 = 1_000_000;
/// The largest ratio: 1,000 retries per original (100,000 %).
const MAX_RATIO: f64 = 1_000.0;

/// A server-side budget for retries: over a sliding period, the retries a limiter admits are
/// at most a share of the originals it admitted, plus a floor.
///
/// A check with [`Check::attempt`](crate::Check::attempt) ≥ 1 is a retry. It must pass both
/// the budget and the quota: the limiter *peeks* the budget (a retry over it is denied with
/// [`DenyReason::RetryBudget`](crate::DenyReason::RetryBudget) and the quota is not
/// touched), runs the quota step, and *debits* the budget only if the retry was permitted. A
/// retry the quota denies costs no budget. Originals (attempt 0, every plain
/// [`check`](crate::RateLimiter::check)) are never denied by the budget; each permitted
/// original deposits credit.
///
/// Over every period (to one sub-bucket, a tenth of it) the permitted retries are at most
/// `⌊ratio × permitted originals⌋ + floor × period`. Defaults: 10 % over 10 s, with a floor of
/// 10 retries per second (so 100 retries per 10 s even with no originals, for clients that
/// have just started).
///
/// # How it is kept
///
/// A ring of 10 sub-buckets (a tenth of the period each) holds three counters each,
/// originals, retries and retries the budget denied, on the limiter's clock: deterministic
/// under a [`ManualClock`](crate::ManualClock), lock-free (one compare-and-swap per permitted
/// check, and one per budget denial). The budget counts checks, not units: a retry of cost 10
/// is one retry.
///
/// # What a denied retry is told
///
/// [`Denied::retry_after`](crate::Denied::retry_after) is never earlier than the *reopening*:
/// when the budget will have room again if no further originals arrive (at most one period;
/// new originals may open it sooner). A budget with no floor earns retries only from
/// originals, so waiting alone may never make room: then the reopening is one period, after
/// which every retry counted now has aged out and the originals of that period alone decide.
///
/// Clients denied together must not come back together, so the answer is spread by the
/// backlog: the `k`-th retry the budget has denied within the window (counting from 0) is told
/// `reopening + (k mod c) × period / c`, where `c` is the number of retries the window allows
/// (`⌊ratio × originals⌋ + floor × period`, at least 1): one budget slot apart, round-robin
/// over at most one period past the reopening.
///
/// # Caveats
///
/// * Under concurrency, retries that peek the last unit of budget at the same instant may all
///   pass: the overshoot is at most the number of threads checking at once.
/// * One budget per limiter: on a [`KeyedRateLimiter`](crate::KeyedRateLimiter) all keys
///   share it. Per-key budgets are not built yet.
/// * The spread is a schedule, not a reservation: when the window has denied more retries
///   than it allows (`k ≥ c`), several are told the same slot, and all but one of them will
///   be denied again (and told a later slot).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Check, DenyReason, ManualClock, RateLimiter};
/// use tollgate::shaping::RetryBudget;
///
/// let budget = RetryBudget::new()
///     .with_ratio(0.1)
///     .with_period(Duration::from_secs(10))
///     .with_floor(0);
/// let lim = RateLimiter::builder("1000/s".parse()?)
///     .clock(ManualClock::new())
///     .retry_budget(budget)
///     .build();
/// for _ in 0..50 {
///     assert!(lim.check().is_permitted()); // 50 originals: room for 5 retries
/// }
/// for _ in 0..5 {
///     assert!(lim.check_with(Check::cost(1).attempt(1))?.is_permitted());
/// }
/// let v = lim.check_with(Check::cost(1).attempt(1))?;
/// assert_eq!(v.denied().map(|d| d.reason()), Some(DenyReason::RetryBudget));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryBudget {
    /// Retries allowed per original, in parts per million.
    ratio_ppm: u64,
    /// The period in ns, at least [`MIN_PERIOD`].
    period: u64,
    /// Retries per second always allowed.
    floor: u32,
}

impl RetryBudget {
    /// The defaults: 10 % of originals over 10 s, plus 10 retries per second.
    pub const fn new() -> Self {
        Self {
            ratio_ppm: 100_000,
            period: 10 * MIN_PERIOD,
            floor: 10,
        }
    }

    /// Retries allowed per permitted original over the period (default 0.1: 10 %). Clamped
    /// to `[0, 1000]`, kept to parts per million; NaN counts as 0.
    ///
    /// ```
    /// use tollgate::shaping::RetryBudget;
    ///
    /// assert_eq!(RetryBudget::new().with_ratio(0.2).ratio(), 0.2);
    /// assert_eq!(RetryBudget::new().with_ratio(-1.0).ratio(), 0.0);
    /// ```
    #[must_use]
    pub fn with_ratio(self, ratio: f64) -> Self {
        let ratio = if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, MAX_RATIO)
        };
        // In [0, 10^9]: exact after rounding.
        let ratio_ppm = (ratio * 1e6).round() as u64;
        Self { ratio_ppm, ..self }
    }

    /// The sliding period (default 10 s), at least 1 s: shorter periods are raised to 1 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::shaping::RetryBudget;
    ///
    /// let b = RetryBudget::new().with_period(Duration::from_millis(10));
    /// assert_eq!(b.period(), Duration::from_secs(1));
    /// ```
    #[must_use]
    pub fn with_period(self, period: Duration) -> Self {
        let period = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
        Self {
            period: period.max(MIN_PERIOD),
            ..self
        }
    }

    /// Retries per second always allowed, whatever the originals (default 10): a period
    /// holds `floor × period` of them on top of the ratio.
    ///
    /// ```
    /// use tollgate::shaping::RetryBudget;
    ///
    /// assert_eq!(RetryBudget::new().with_floor(0).floor(), 0);
    /// ```
    #[must_use]
    pub fn with_floor(self, per_sec: u32) -> Self {
        Self {
            floor: per_sec,
            ..self
        }
    }

    /// Retries allowed per permitted original.
    pub fn ratio(&self) -> f64 {
        self.ratio_ppm as f64 / 1e6
    }

    /// The sliding period.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period)
    }

    /// Retries per second always allowed.
    pub fn floor(&self) -> u32 {
        self.floor
    }

    /// Retries the floor allows per period: `⌊floor × period⌋`.
    fn reserve(&self) -> u128 {
        u128::from(self.floor) * u128::from(self.period) / NANOS_PER_SEC
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::new()
    }
}

/// The running state of a [`RetryBudget`]: a ring of sub-buckets of atomic counters.
///
/// Each counter word packs an epoch tag and a count:
///
/// | bits | meaning |
/// |---|---|
/// | 63..32 | the sub-bucket's epoch (`now / sub`) modulo 2^32 |
/// | 31..0 | the count in that sub-bucket, saturating at 2^32 − 1 |
///
/// A word whose tag is not the epoch its slot stands for now is stale and counts 0; the first
/// write of a new epoch replaces it; a write for an epoch older than the word's is dropped
/// (it has left the window). Tags are compared modulo 2^32 sub-buckets, so a slot untouched
/// for more than 2^31 of them (6.8 years at the shortest period) may be misread once.
pub(crate) struct Window {
    cfg: RetryBudget,
    /// Sub-bucket length in ns (`period / 10`).
    sub: u64,
    originals: Padded<[AtomicU64; SLOTS]>,
    retries: Padded<[AtomicU64; SLOTS]>,
    /// Retries the budget denied: the backlog that spreads the retry-afters it tells.
    denied: Padded<[AtomicU64; SLOTS]>,
}

const COUNT: u64 = u32::MAX as u64;

impl Window {
    pub(crate) fn new(cfg: RetryBudget) -> Self {
        Self {
            cfg,
            sub: cfg.period / SLOTS as u64,
            originals: Padded(Default::default()),
            retries: Padded(Default::default()),
            denied: Padded(Default::default()),
        }
    }

    /// `None` if a retry at `now` fits the budget. Else the denial is counted and the answer
    /// is the ns to wait: the [reopening](Self::reopening), spread by the backlog — the `k`-th
    /// retry denied in the window is told `reopening + (k mod c) × period / c`, where `c` is
    /// the retries the window allows, so the denied come back one budget slot apart instead of
    /// in step, and never more than one period after the reopening. Writes nothing the budget
    /// decides on: the debit comes with [`record`](Self::record).
    pub(crate) fn peek(&self, now: u64) -> Option<u64> {
        let epoch = now / self.sub;
        let orig = self.counts(&self.originals.0, epoch);
        let retr = self.counts(&self.retries.0, epoch);
        let reopening = self.reopening(&orig, &retr, epoch, now)?;
        Some(self.spread(reopening, orig.iter().sum(), epoch))
    }

    /// `None` if the window has room now; else the ns until it will if no further originals
    /// arrive, at most one period. A budget with no floor earns retries only from originals:
    /// when even an empty window would have no room, the answer is one period, after which
    /// every retry counted now has aged out and the originals of that period alone decide.
    fn reopening(
        &self,
        orig: &[u128; SLOTS],
        retr: &[u128; SLOTS],
        epoch: u64,
        now: u64,
    ) -> Option<u64> {
        // After `j` more sub-buckets, the oldest `j` have left the window.
        let opens = (0..=SLOTS).find(|&j| {
            let kept = SLOTS - j;
            self.credit(orig[..kept].iter().sum()) > retr[..kept].iter().sum()
        });
        match opens {
            Some(0) => None,
            Some(j) => Some(self.until(epoch + j as u64, now)),
            None => Some(self.cfg.period),
        }
    }

    /// `reopening` plus this denial's place in the backlog (see [`peek`](Self::peek)); counts
    /// the denial.
    #[cold]
    fn spread(&self, reopening: u64, originals: u128, epoch: u64) -> u64 {
        let slot = &self.denied.0[(epoch % SLOTS as u64) as usize];
        let older: u128 = self.counts(&self.denied.0, epoch)[1..].iter().sum();
        let k = older + u128::from(add(slot, epoch));
        // Retries the whole window allows; at least one, so an empty budget still has a slot,
        // and below 2^64 so that `(k mod c) × period < 2^128` (slots are then < 1 ns apart).
        let c = self.credit(originals).clamp(1, u128::from(u64::MAX));
        let period = u128::from(self.cfg.period);
        // < period ≤ u64::MAX: fits.
        let offset = ((k % c) * period / c) as u64;
        reopening.saturating_add(offset)
    }

    /// Counts a permitted check at `now`: a deposit for an original, a debit for a retry.
    #[inline]
    pub(crate) fn record(&self, now: u64, retry: bool) {
        let epoch = now / self.sub;
        let words = if retry {
            &self.retries.0
        } else {
            &self.originals.0
        };
        add(&words[(epoch % SLOTS as u64) as usize], epoch);
    }

    /// The budget's configuration.
    pub(crate) fn config(&self) -> RetryBudget {
        self.cfg
    }

    /// Counts per age (0 = the current sub-bucket), newest first.
    fn counts(&self, words: &[AtomicU64; SLOTS], epoch: u64) -> [u128; SLOTS] {
        let mut out = [0; SLOTS];
        for (age, slot) in out.iter_mut().enumerate() {
            let Some(e) = epoch.checked_sub(age as u64) else {
                break;
            };
            // Relaxed: tallies; a count one check stale in either direction is harmless.
            let w = words[(e % SLOTS as u64) as usize].load(Ordering::Relaxed);
            if w >> 32 == e & COUNT {
                *slot = u128::from(w & COUNT);
            }
        }
        out
    }

    fn credit(&self, originals: u128) -> u128 {
        originals * u128::from(self.cfg.ratio_ppm) / PPM + self.cfg.reserve()
    }

    /// ns from `now` to the start of sub-bucket `epoch`.
    fn until(&self, epoch: u64, now: u64) -> u64 {
        epoch.saturating_mul(self.sub).saturating_sub(now).max(1)
    }
}

/// One more in the sub-bucket of `epoch` held by `word`; returns the count before it. A word
/// holding a later epoch means ours has left the window: nothing to count (0).
#[inline]
fn add(word: &AtomicU64, epoch: u64) -> u64 {
    let tag = (epoch & COUNT) << 32;
    // Relaxed: a tally, ordering nothing else.
    let mut cur = word.load(Ordering::Relaxed);
    loop {
        let (before, next) = if cur & !COUNT == tag {
            if cur & COUNT == COUNT {
                return COUNT;
            }
            (cur & COUNT, cur + 1)
        } else if cur != 0 && ((cur >> 32) as u32).wrapping_sub(epoch as u32) as i32 > 0 {
            return 0;
        } else {
            (0, tag | 1)
        };
        match word.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return before,
            Err(actual) => cur = actual,
        }
    }
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("config", &self.cfg)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn credit_is_a_share_of_originals_plus_the_floor() {
        let w = Window::new(RetryBudget::new().with_ratio(0.1).with_floor(1));
        // Floor: 1/s over 10 s = 10 retries.
        for _ in 0..10 {
            assert_eq!(w.peek(0), None);
            w.record(0, true);
        }
        assert!(w.peek(0).is_some());
        for _ in 0..10 {
            w.record(0, false);
        }
        assert_eq!(w.peek(0), None, "10 originals add one retry");
    }

    #[test]
    fn retry_after_is_when_the_oldest_retries_leave_spread_by_the_backlog() {
        let w = Window::new(RetryBudget::new().with_ratio(0.0).with_floor(1));
        for _ in 0..10 {
            w.record(SEC / 2, true);
        }
        // The retries sit in sub-bucket 0; it leaves the window at epoch 10, i.e. 10 s.
        assert_eq!(w.peek(SEC / 2), Some(10 * SEC - SEC / 2));
        // The second denial in the window: one budget slot (10 s / 10 retries) later.
        assert_eq!(w.peek(10 * SEC - 1), Some(1 + SEC));
        assert_eq!(w.peek(10 * SEC), None);
    }

    #[test]
    fn an_empty_budget_without_a_floor_reopens_after_one_period() {
        let w = Window::new(RetryBudget::new().with_floor(0));
        assert_eq!(w.peek(3 * SEC), Some(10 * SEC));
        // No credit at all: one slot per period, so the backlog adds whole periods mod 1.
        assert_eq!(w.peek(3 * SEC), Some(10 * SEC));
    }

    #[test]
    fn add_returns_the_count_before() {
        let word = AtomicU64::new(0);
        assert_eq!(add(&word, 4), 0);
        assert_eq!(add(&word, 4), 1);
        assert_eq!(add(&word, 5), 0, "a new epoch starts over");
        assert_eq!(
            add(&word, 4),
            0,
            "an epoch that has left the window counts nothing"
        );
        word.store((5 << 32) | COUNT, Ordering::Relaxed);
        assert_eq!(add(&word, 5), COUNT, "saturated");
    }

    #[test]
    fn stale_words_count_nothing_and_late_writers_do_not_clobber() {
        let word = AtomicU64::new(0);
        add(&word, 25);
        add(&word, 25);
        assert_eq!(word.load(Ordering::Relaxed), (25 << 32) | 2);
        add(&word, 15); // older: out of the window of epoch 25
        assert_eq!(word.load(Ordering::Relaxed), (25 << 32) | 2);
        add(&word, 35);
        assert_eq!(word.load(Ordering::Relaxed), (35 << 32) | 1);
    }
}
