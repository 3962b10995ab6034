//! [`KeyedRateLimiterBuilder`].

use crate::sync::atomic::{AtomicU64, AtomicUsize};
use core::fmt;
use core::marker::PhantomData;
use core::time::Duration;

use crate::sync::Mutex;

use super::admission::Admission;
use super::store::Store;
use super::{KeyedRateLimiter, Overflow, Slow, DEFAULT_MAX_KEYS, MAX_KEYS_LIMIT};
use crate::engine::cell::Padded;
use crate::engine::clock::Clock;
use crate::engine::error::ClockError;
use crate::engine::fingerprint::Fingerprinter;
use crate::engine::params::{Gate, SharedParams};
use crate::engine::quota::Quota;
use crate::engine::stats::Counters;
use crate::limiter::guard::{Attached, Guard, Hot};
use crate::safety::fault::FaultDetector;
use crate::safety::watchdog::Watchdog;
use crate::shaping::priority::Priorities;
use crate::shaping::retry::RetryBudget;

/// Builds a [`KeyedRateLimiter`].
#[must_use = "call .build() to get the limiter"]
pub struct KeyedRateLimiterBuilder<K> {
    quota: Quota,
    /// `None`: the default, [`Clock::monotonic`], taken when the limiter is built.
    clock: Option<Clock>,
    max_keys: usize,
    overflow_quota: Option<Quota>,
    admission: Admission,
    attached: Attached,
    max_debt: Duration,
    _key: PhantomData<fn(&K)>,
}

impl<K> fmt::Debug for KeyedRateLimiterBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimiterBuilder")
            .field("quota", &self.quota.to_string())
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .field(
                "overflow_quota",
                &self.overflow_quota.map(|q| q.to_string()),
            )
            .field("admission", &self.admission)
            .field("priorities", &self.attached.priorities)
            .field("retry_budget", &self.attached.budget)
            .field("max_debt", &self.max_debt)
            .finish_non_exhaustive()
    }
}

impl<K> KeyedRateLimiterBuilder<K> {
    pub(super) fn new(quota: Quota) -> Self {
        Self {
            quota,
            clock: None,
            max_keys: DEFAULT_MAX_KEYS,
            overflow_quota: None,
            admission: Admission::default(),
            attached: Attached::default(),
            max_debt: Duration::ZERO,
            _key: PhantomData,
        }
    }

    /// The clock to read on every check (default: [`Clock::monotonic`]).
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// The most keys tracked at once (default 2^20, at least 1): a cap, not a reservation —
    /// the table grows with the keys it tracks, up to this many. A tracked key is one with a
    /// slot: active, or idle and not yet swept (a key whose cell is full again stays tracked
    /// until a newcomer needs its slot). When the table tracks this many, a new key takes the
    /// slot of an idle one if [`Admission`](crate::limiter::Admission) lets it, else shares
    /// one overflow cell; a key with a debt (its cell not full) is never displaced.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.clamp(1, MAX_KEYS_LIMIT);
        self
    }

    /// The quota of the overflow cell that new keys share when the table is full (default:
    /// the per-key quota, following [`KeyedRateLimiter::set_quota`]).
    pub fn overflow_quota(mut self, quota: Quota) -> Self {
        self.overflow_quota = Some(quota);
        self
    }

    /// Who takes a slot while the table is at its cap (default: [`Admission::default`], a
    /// frequency filter of at most 1 MiB, allocated when the table first reaches its cap):
    /// with the filter, a newcomer seen only once may not displace a key idle for less than
    /// τ, one seen twice a key idle for less than `T`, so a flood of one-off keys cannot take
    /// recurring customers' slots between their checks. [`Admission::Off`] lets any newcomer
    /// take the next idle key's slot.
    ///
    /// ```
    /// use tollgate::KeyedRateLimiter;
    /// use tollgate::limiter::Admission;
    ///
    /// let lim = KeyedRateLimiter::<u64>::builder("6/min".parse()?)
    ///     .max_keys(10_000)
    ///     .admission(Admission::Filter { bytes: 256 << 10 })
    ///     .build();
    /// assert_eq!(lim.filter_bytes(), 0); // allocated when the table first reaches its cap
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// Attaches a fault detector: breadth anomalies turn into pass-throughs, and every check
    /// is counted ([`FaultDetector::stats`]). One detector per limiter.
    pub fn detector(mut self, detector: FaultDetector) -> Self {
        detector.attach_keyed();
        self.attached.detector = Some(detector);
        self
    }

    /// Attaches a clock watchdog. The limiter then reads the watchdog's clocks (its fast
    /// clock, or its reference after a fault) instead of [`clock`](Self::clock).
    pub fn watchdog(mut self, watchdog: Watchdog) -> Self {
        self.attached.watchdog = Some(watchdog);
        self
    }

    /// Attaches priority classes, applied on every key's cell (and the overflow cell): each
    /// class keeps a share of the burst for the classes above it ([`Priorities`]).
    pub fn priorities(mut self, priorities: Priorities) -> Self {
        self.attached.priorities = Some(priorities);
        self
    }

    /// Attaches a retry budget shared by all keys ([`RetryBudget`]); per-key budgets are not
    /// built yet.
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.attached.budget = Some(budget);
        self
    }

    /// How far into debt a [`charge_key`](KeyedRateLimiter::charge_key) may push a key
    /// (default zero: a charge drains the key's cell at most): a key in debt is denied until
    /// time has paid the debt off. Capped at about 146 years. The overflow cell is never
    /// charged.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::KeyedRateLimiter;
    ///
    /// let lim = KeyedRateLimiter::<String>::builder("100/min".parse()?)
    ///     .max_debt(Duration::from_secs(3_600))
    ///     .build();
    /// assert!(lim.check_key("tenant-a").is_permitted());
    /// assert!(lim.charge_key("tenant-a", 500).is_paid());
    /// assert!(!lim.check_key("tenant-a").is_permitted());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_debt(mut self, max: Duration) -> Self {
        self.max_debt = max;
        self
    }

    /// Builds the limiter. The table starts small (4 KiB of slots) and grows with the keys
    /// tracked, up to what `max_keys` keys need; only the directory of its segments is sized
    /// for `max_keys` now (40 bytes per MiB of the largest table). If the allocator
    /// refuses even that, the bound is halved until it agrees:
    /// [`KeyedRateLimiter::max_keys`] reports the bound in force.
    ///
    /// # Panics
    ///
    /// Only without a [`clock`](Self::clock) on `wasm32-unknown-unknown`, which has no
    /// default clock; [`try_build`](Self::try_build) returns the error instead.
    pub fn build(self) -> KeyedRateLimiter<K> {
        self.try_build().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`build`](Self::build), or the error when the default clock is wanted and this target
    /// has none.
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, ManualClock};
    ///
    /// let lim = KeyedRateLimiter::<u32>::builder("1/s".parse()?)
    ///     .clock(ManualClock::new())
    ///     .try_build()?;
    /// assert!(lim.check_key(&7).is_permitted());
    /// assert!(!lim.check_key(&7).is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClockError::Unavailable`] on `wasm32-unknown-unknown` when no clock was given.
    pub fn try_build(self) -> Result<KeyedRateLimiter<K>, ClockError> {
        self.try_build_with(Clock::try_monotonic)
    }

    /// [`try_build`](Self::try_build), with `default` for the clock when none was given.
    fn try_build_with(
        self,
        default: impl FnOnce() -> Result<Clock, ClockError>,
    ) -> Result<KeyedRateLimiter<K>, ClockError> {
        let clock = match self.clock {
            Some(clock) => clock,
            None => default()?,
        };
        let mut max_keys = self.max_keys;
        let table = loop {
            match Store::new(max_keys) {
                Some(table) => break table,
                None if max_keys > 1 => max_keys /= 2,
                // Even the smallest table failed: the process is out of memory; an empty
                // table that sends every key to the overflow cell still never panics.
                None => {
                    max_keys = 0;
                    break Store::empty();
                }
            }
        };
        let counters = Counters::new();
        let guard = Guard::boxed(self.attached, &counters);
        Ok(KeyedRateLimiter {
            hot: Hot::new(&clock, guard.as_deref()),
            table,
            max_keys,
            params: SharedParams::new(
                self.quota
                    .params()
                    .with_debt(crate::engine::charge::debt_ns(self.max_debt)),
            ),
            overflow: Overflow {
                tat: Padded(AtomicU64::new(0)),
                gate: Gate::default(),
                params: self.overflow_quota.map(|q| SharedParams::new(q.params())),
            },
            fingerprinter: Fingerprinter::new(),
            clock,
            quota: Mutex::new(self.quota),
            len: AtomicUsize::new(0),
            spilled: AtomicUsize::new(0),
            moves: AtomicU64::new(0),
            refunded_min: AtomicU64::new(u64::MAX),
            guard,
            spill_gate: Gate::default(),
            counters,
            slow: Mutex::new(Slow {
                pass_min: u64::MAX,
                filter: self.admission.into(),
                ..Slow::default()
            }),
            _key: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;
    use crate::engine::clock::ManualClock;
    use crate::KeyedRateLimiter;

    /// The default clock as `wasm32-unknown-unknown` has it.
    fn no_default() -> Result<Clock, ClockError> {
        Err(ClockError::Unavailable {
            target: "wasm32-unknown-unknown",
        })
    }

    #[test]
    fn without_a_default_clock_the_builder_asks_for_one() {
        let b = KeyedRateLimiter::<u64>::builder("1/s".parse().unwrap()); // test
        assert_eq!(
            b.try_build_with(no_default).unwrap_err(), // test
            no_default().unwrap_err()                  // test
        );

        let manual = ManualClock::new();
        let lim = KeyedRateLimiter::<u64>::builder("1/s".parse().unwrap()) // test
            .clock(&manual)
            .try_build_with(no_default)
            .unwrap(); // test
        assert!(lim.check_key(&1).is_permitted());
        assert!(!lim.check_key(&1).is_permitted());
        assert!(lim.check_key(&2).is_permitted());
        manual.advance(Duration::from_secs(1));
        assert!(lim.check_key(&1).is_permitted());
    }
}
