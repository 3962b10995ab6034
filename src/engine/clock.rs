//! Clocks: one concrete [`Clock`] type, read on every check.
//!
//! Every clock measures integer nanoseconds since one process-wide epoch (the first time any
//! clock in the process is built), so limiter state carried between limiters (a reload, a
//! rollout, a clock switch) stays in one time base. A [`ManualClock`] starts at the epoch (0)
//! and moves only when told to.
//!
//! There is deliberately no cached or background-refreshed reading: incident 000 was a
//! limiter reading a clock that lagged 45 s behind under load. quanta's `recent()` is banned
//! in `clippy.toml`.

use crate::sync::atomic::{AtomicU64, Ordering};
use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use crate::engine::error::ClockError;
use crate::sync::Mutex;

// The epoch and the fast clock read quanta's clock and `std::time::Instant`. On
// wasm32-unknown-unknown the standard library has no time (`Instant::now` panics: "time not
// implemented on this platform") and quanta would need a JavaScript host: there both types
// are empty, and the built-in clocks are a `ClockError`.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
mod epoch;
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
#[path = "clock/no_epoch.rs"]
mod epoch;

pub(crate) use epoch::FastClock;
use epoch::{epoch, Epoch};

/// Converts a [`Duration`] to nanoseconds, saturating at `u64::MAX` (about 584 years).
#[inline]
pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of time for limiters: the monotonic TSC clock (the default), the OS monotonic
/// clock, a [`ManualClock`] for tests and simulations, or a custom function.
///
/// One concrete type with enum dispatch, so limiters need no clock type parameter. Cloning is
/// cheap and clones share state.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock, RateLimiter};
///
/// let manual = ManualClock::new();
/// let lim = RateLimiter::builder("1/s".parse()?).clock(manual.clone()).build();
/// assert!(lim.check().is_permitted());
/// assert!(!lim.check().is_permitted());
/// manual.advance(Duration::from_secs(1));
/// assert!(lim.check().is_permitted());
///
/// let real = Clock::monotonic();
/// assert!(real.now() <= real.now());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// # Caveats
///
/// * The monotonic clock is quanta's TSC clock, calibrated against the OS clock once. If the
///   TSC stalls, drifts or is unsynchronised across cores, readings can be off; the readings
///   never go below the epoch (they saturate at 0).
/// * Manual and custom clocks that step backwards are *monotonized*: the backward step counts
///   as zero elapsed time, and time then advances from where it was (no lockout, no free
///   burst).
/// * On `wasm32-unknown-unknown` the standard library cannot read time, so neither built-in
///   clock exists there: [`Clock::try_monotonic`] and [`Clock::try_os`] return
///   [`ClockError::Unavailable`], and a limiter needs a [`ManualClock`] or a
///   [`Clock::from_fn`] (`performance.now()` in a browser, `Date.now()` elsewhere).
#[derive(Clone)]
pub struct Clock {
    source: Source,
}

#[derive(Clone)]
enum Source {
    Fast(&'static Epoch),
    Os(&'static Epoch),
    Manual(ManualClock, Arc<Monotonize>),
    Custom(Arc<dyn Fn() -> u64 + Send + Sync>, Arc<Monotonize>),
}

impl Clock {
    /// The fast monotonic clock (quanta's TSC clock where available), read on every check.
    ///
    /// # Panics
    ///
    /// On `wasm32-unknown-unknown`, where there is no such clock; [`Clock::try_monotonic`]
    /// returns the error instead.
    pub fn monotonic() -> Self {
        Self::try_monotonic().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Clock::monotonic`], or the reason this target has none.
    ///
    /// ```
    /// use tollgate::Clock;
    ///
    /// // Everywhere but wasm32-unknown-unknown, where this is `ClockError::Unavailable`.
    /// let clock = Clock::try_monotonic()?;
    /// assert!(clock.now_nanos() <= clock.now_nanos());
    /// # Ok::<(), tollgate::ClockError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClockError::Unavailable`] on `wasm32-unknown-unknown`, whose standard library cannot
    /// read time.
    pub fn try_monotonic() -> Result<Self, ClockError> {
        Ok(Self {
            source: Source::Fast(epoch()?),
        })
    }

    /// The operating system's monotonic clock ([`std::time::Instant`]), mapped into the same
    /// epoch as [`Clock::monotonic`]. Slower than the TSC, but independent of it.
    ///
    /// # Panics
    ///
    /// On `wasm32-unknown-unknown`, as [`Clock::monotonic`]; [`Clock::try_os`] returns the
    /// error instead.
    pub fn os() -> Self {
        Self::try_os().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Clock::os`], or the reason this target has none.
    ///
    /// # Errors
    ///
    /// [`ClockError::Unavailable`] on `wasm32-unknown-unknown`.
    pub fn try_os() -> Result<Self, ClockError> {
        Ok(Self {
            source: Source::Os(epoch()?),
        })
    }

    /// A custom clock: `now` returns nanoseconds since the process epoch (or any fixed origin
    /// shared by every limiter whose state you move between). Backward steps are absorbed.
    ///
    /// On every target, `wasm32-unknown-unknown` included: there it is how a limiter reads
    /// the host's time, e.g. `performance.now()` (milliseconds, as an `f64`) times 10^6.
    ///
    /// ```
    /// use tollgate::Clock;
    /// let clock = Clock::from_fn(|| 42);
    /// assert_eq!(clock.now_nanos(), 42);
    /// ```
    pub fn from_fn(now: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        Self {
            source: Source::Custom(Arc::new(now), Arc::default()),
        }
    }

    /// Nanoseconds since the process epoch.
    #[inline]
    pub fn now_nanos(&self) -> u64 {
        match self.fast() {
            Some(fast) => fast.now_nanos(),
            None => Self::now_slow(&self.source),
        }
    }

    /// The fast clock, if this is it: for a limiter to keep beside its other hot fields and
    /// read without dispatching on the source.
    #[inline(always)]
    pub(crate) fn fast(&self) -> Option<FastClock> {
        match &self.source {
            Source::Fast(e) => e.fast(),
            _ => None,
        }
    }

    /// The other clocks, out of line so the fast clock's read inlines into every check.
    #[cold]
    #[inline(never)]
    fn now_slow(source: &Source) -> u64 {
        match source {
            Source::Fast(e) => e.fast_nanos(),
            Source::Os(e) => e.os_nanos(),
            Source::Manual(m, mono) => mono.apply(|| m.nanos()),
            Source::Custom(f, mono) => mono.apply(|| f()),
        }
    }

    /// The reading without the backward-step absorption of manual and custom clocks: what the
    /// watchdog compares, so it can see a step back.
    pub(crate) fn raw_nanos(&self) -> u64 {
        match &self.source {
            Source::Manual(m, _) => m.nanos(),
            Source::Custom(f, _) => f(),
            _ => self.now_nanos(),
        }
    }

    /// Time since the process epoch.
    #[inline]
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }
}

impl Default for Clock {
    /// [`Clock::monotonic`] (which panics on `wasm32-unknown-unknown`).
    fn default() -> Self {
        Self::monotonic()
    }
}

impl From<ManualClock> for Clock {
    fn from(clock: ManualClock) -> Self {
        Self {
            source: Source::Manual(clock, Arc::default()),
        }
    }
}

impl From<&ManualClock> for Clock {
    fn from(clock: &ManualClock) -> Self {
        clock.clone().into()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.source {
            Source::Fast(_) => "monotonic",
            Source::Os(_) => "os",
            Source::Manual(..) => "manual",
            Source::Custom(..) => "custom",
        };
        f.debug_struct("Clock")
            .field("kind", &kind)
            .field("now_nanos", &self.now_nanos())
            .finish()
    }
}

/// Turns a raw reading that may step backwards into one that never does: a backward step
/// counts as zero elapsed time, and later forward steps count in full from there.
#[derive(Debug, Default)]
struct Monotonize {
    /// `(last raw reading, last output)`; `None` before the first reading. A lock, not
    /// atomics: the two values move together, and this path serves manual and custom clocks
    /// only.
    last: Mutex<Option<(u64, u64)>>,
}

impl Monotonize {
    /// Reads the raw clock *under the lock*: a reading taken before it could be older than
    /// the last one recorded, and would make the next reading count the same time twice.
    fn apply(&self, read: impl FnOnce() -> u64) -> u64 {
        let mut last = self.last.lock();
        let raw = read();
        let out = match *last {
            None => raw,
            Some((prev_raw, prev_out)) => prev_out.saturating_add(raw.saturating_sub(prev_raw)),
        };
        *last = Some((raw, out));
        out
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time. It starts at the process epoch (0 ns) unless built with
/// [`ManualClock::at`]. All arithmetic saturates.
///
/// ```
/// use std::time::Duration;
/// use tollgate::ManualClock;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(10));
/// assert_eq!(clock.now(), Duration::from_millis(10));
/// clock.set(Duration::from_secs(5));
/// assert_eq!(clock.now(), Duration::from_secs(5));
/// clock.advance(Duration::MAX); // saturates, never panics
/// assert_eq!(clock.now(), Duration::from_nanos(u64::MAX));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    // Relaxed everywhere: the reading is a value, not a guard for other memory.
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock at the epoch (0 ns).
    pub fn new() -> Self {
        Self::default()
    }

    /// A manual clock at `since_epoch` (saturating at `u64::MAX` ns).
    pub fn at(since_epoch: Duration) -> Self {
        let clock = Self::new();
        clock.set(since_epoch);
        clock
    }

    /// Moves the clock forward by `by`, saturating at `u64::MAX` ns.
    pub fn advance(&self, by: Duration) {
        let by = saturating_nanos(by);
        // fetch_update with a closure that always returns Some never fails.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the clock to `since_epoch` (saturating at `u64::MAX` ns). Setting it backwards
    /// is allowed: limiters count a backward step as zero elapsed time.
    pub fn set(&self, since_epoch: Duration) {
        self.nanos
            .store(saturating_nanos(since_epoch), Ordering::Relaxed);
    }

    /// The current reading.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos())
    }

    /// The current reading in nanoseconds.
    pub fn nanos(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_step_counts_as_zero_elapsed() {
        let manual = ManualClock::at(Duration::from_nanos(1_000));
        let clock = Clock::from(&manual);
        assert_eq!(clock.now_nanos(), 1_000);
        manual.set(Duration::from_nanos(400));
        assert_eq!(clock.now_nanos(), 1_000);
        manual.advance(Duration::from_nanos(10));
        assert_eq!(clock.now_nanos(), 1_010);
    }

    #[test]
    fn manual_clock_saturates() {
        let manual = ManualClock::at(Duration::MAX);
        assert_eq!(manual.nanos(), u64::MAX);
        manual.advance(Duration::from_secs(1));
        assert_eq!(manual.nanos(), u64::MAX);
    }

    #[test]
    fn fast_and_os_clocks_share_the_epoch() {
        let fast = Clock::monotonic().now_nanos();
        let os = Clock::os().now_nanos();
        // Both count from the same instant; they were read microseconds apart.
        assert!(fast.abs_diff(os) < 1_000_000_000, "fast {fast} os {os}");
    }
}
