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
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::sync::Mutex;

/// The process-wide epoch, captured once on both the fast (TSC) clock and the OS clock.
struct Epoch {
    fast: quanta::Clock,
    fast_origin: u64,
    /// quanta's scale as a multiplier of 2^-[`SCALE_SHIFT`] ns per raw tick, when that
    /// reproduces quanta's own conversion exactly (see [`scale_of`]); else `None`, and the
    /// conversion is quanta's.
    scale: Option<u64>,
    os_origin: Instant,
}

/// The fixed shift of the fast clock's conversion: `ns = (ticks · scale) >> 48`.
const SCALE_SHIFT: u32 = 48;

/// quanta converts `d` ticks to `⌊d·F / 2^S⌋` ns (`F`, `S` from its calibration, `S` about
/// 30). Its value at `d = 2^48` is `F·2^(48−S)` when `S ≤ 48`, and then `⌊d·that / 2^48⌋`
/// is `⌊d·F / 2^S⌋` for every `d`: the same reading with a constant shift instead of quanta's
/// dispatch on its clock type, its stored shift and its `end ≤ start` test. Checked on a
/// spread of deltas before it is used; `None` if any differs.
fn scale_of(fast: &quanta::Clock) -> Option<u64> {
    let scale = fast.delta_as_nanos(0, 1 << SCALE_SHIFT);
    let probes = (0..64).flat_map(|k| [1u64 << k, (1u64 << k) - 1, (1u64 << k) + 12_345]);
    probes
        .chain([u64::MAX, 0x1234_5678_9abc_def0])
        .all(|d| scaled(d, scale) == fast.delta_as_nanos(0, d))
        .then_some(scale)
}

/// `⌊d·scale / 2^48⌋`, truncated to 64 bits as quanta truncates.
#[inline(always)]
fn scaled(d: u64, scale: u64) -> u64 {
    // Truncation as quanta's `mul_div_po2_u64`.
    ((u128::from(d) * u128::from(scale)) >> SCALE_SHIFT) as u64
}

fn epoch() -> &'static Epoch {
    static EPOCH: OnceLock<Epoch> = OnceLock::new();
    EPOCH.get_or_init(|| {
        let fast = quanta::Clock::new();
        let fast_origin = fast.raw();
        Epoch {
            // The fast path reads `ns − origin_nanos` without saturating (see
            // `FastClock::wrapped`): it needs the origin below 2^62 ns of the raw clock (146
            // years of uptime). Else quanta's conversion, as for an inexact scale.
            scale: scale_of(&fast)
                .filter(|&s| scaled(fast_origin, s) < crate::engine::params::STEADY_NOW),
            fast,
            fast_origin,
            os_origin: Instant::now(),
        }
    })
}

/// [`Clock::monotonic`] without the dispatch, when its conversion has a fixed shift
/// ([`scale_of`]). The epoch's words are copied in, so a read loads nothing but them.
///
/// It converts the raw reading and the origin each from ticks and subtracts the two:
/// `⌊raw·scale / 2^48⌋ − ⌊origin·scale / 2^48⌋`, where quanta's `delta_as_nanos(origin, raw)`
/// converts the difference. The two agree to within 1 ns; this one subtracts a constant in
/// nanoseconds after the multiply, which the fast path folds into one instruction
/// ([`now_for_step`](Self::now_for_step)). Every reading of the fast clock in the process is
/// this one, so all of them stay monotonic together.
#[derive(Clone, Copy)]
pub(crate) struct FastClock {
    fast: &'static quanta::Clock,
    /// `⌊origin·scale / 2^48⌋`: the epoch in the raw clock's nanoseconds.
    origin_nanos: u64,
    scale: u64,
}

impl FastClock {
    fn of(e: &'static Epoch, scale: u64) -> Self {
        Self {
            fast: &e.fast,
            origin_nanos: scaled(e.fast_origin, scale),
            scale,
        }
    }

    /// The reading, as [`Clock::now_nanos`]: 0 for a raw reading at or before the origin.
    #[inline(always)]
    pub(crate) fn now_nanos(self) -> u64 {
        self.saturated(self.fast.raw())
    }

    /// The reading for a check's fast path: as [`now_nanos`](Self::now_nanos), but above
    /// 2^62 for a raw reading before the origin (a TSC behind the one the epoch was read on),
    /// so the fast path's bound ([`STEADY_NOW`](crate::engine::params::STEADY_NOW)) sends it
    /// to the general check, whose own reading saturates to 0. No branch and no select for
    /// the saturation.
    ///
    /// By reference, unlike the other reads: the scale and the origin are then read after the
    /// call into quanta, as operands of the multiply and the subtraction, rather than loaded
    /// into registers kept across it (2 instructions a check).
    #[inline(always)]
    pub(crate) fn now_for_step(&self) -> u64 {
        let raw = self.fast.raw();
        self.wrapped(raw)
    }

    #[inline(always)]
    fn saturated(self, raw: u64) -> u64 {
        scaled(raw, self.scale).saturating_sub(self.origin_nanos)
    }

    /// A raw reading before the origin wraps to `2^64 − (origin_nanos − ns)`, and the epoch
    /// keeps the fast clock only if `origin_nanos < 2^62`: more than 2^62.
    #[inline(always)]
    fn wrapped(self, raw: u64) -> u64 {
        scaled(raw, self.scale).wrapping_sub(self.origin_nanos)
    }
}

impl fmt::Debug for FastClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FastClock")
    }
}

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
    pub fn monotonic() -> Self {
        Self {
            source: Source::Fast(epoch()),
        }
    }

    /// The operating system's monotonic clock ([`std::time::Instant`]), mapped into the same
    /// epoch as [`Clock::monotonic`]. Slower than the TSC, but independent of it.
    pub fn os() -> Self {
        Self {
            source: Source::Os(epoch()),
        }
    }

    /// A custom clock: `now` returns nanoseconds since the process epoch (or any fixed origin
    /// shared by every limiter whose state you move between). Backward steps are absorbed.
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
        match &self.source {
            Source::Fast(
                e @ Epoch {
                    scale: Some(scale), ..
                },
            ) => FastClock::of(e, *scale).now_nanos(),
            other => Self::now_slow(other),
        }
    }

    /// The fast clock, if this is it: for a limiter to keep beside its other hot fields and
    /// read without dispatching on the source.
    pub(crate) fn fast(&self) -> Option<FastClock> {
        match &self.source {
            Source::Fast(e) => Some(FastClock::of(e, e.scale?)),
            _ => None,
        }
    }

    /// The other clocks, out of line so the fast clock's read inlines into every check.
    #[cold]
    #[inline(never)]
    fn now_slow(source: &Source) -> u64 {
        match source {
            Source::Fast(e) => e.fast.delta_as_nanos(e.fast_origin, e.fast.raw()),
            Source::Os(e) => saturating_nanos(e.os_origin.elapsed()),
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
    /// [`Clock::monotonic`].
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
    fn the_fixed_shift_conversion_is_quantas() {
        let e = epoch();
        // On every machine this runs on quanta's shift is below 48: the fast path is taken.
        let scale = e.scale.unwrap(); // test
        let mut d = 1u64;
        while d < u64::MAX / 3 {
            for x in [d, d + 1, d.wrapping_mul(0x9e37_79b9) >> 7] {
                assert_eq!(scaled(x, scale), e.fast.delta_as_nanos(0, x), "{x}");
            }
            d = d * 3 + 1;
        }
        // The fast clock converts the reading and the origin apart: within 1 ns of quanta's
        // conversion of their difference, for any two readings.
        let fast = Clock::monotonic().fast().unwrap(); // test
        let mut x = e.fast_origin;
        while x < u64::MAX / 4 {
            let ours = fast.saturated(x);
            let quanta = e.fast.delta_as_nanos(e.fast_origin, x);
            assert!(ours.abs_diff(quanta) <= 1, "{x}: {ours} {quanta}");
            x = x.wrapping_mul(3) + 12_345;
        }
        let before = Clock::monotonic().now_nanos();
        let raw = e.fast.raw();
        let after = Clock::monotonic().now_nanos();
        let quanta = e.fast.delta_as_nanos(e.fast_origin, raw);
        assert!(
            before <= quanta + 1 && quanta <= after + 1,
            "{before} {quanta} {after}"
        );
    }

    #[test]
    fn a_fast_reading_before_the_origin_is_zero_or_past_the_fast_paths_bound() {
        let e = epoch();
        let scale = e.scale.unwrap(); // test
        let fast = Clock::monotonic().fast().unwrap(); // test
        assert!(fast.origin_nanos < crate::engine::params::STEADY_NOW);
        // A raw reading behind the origin, as another core's unsynchronised TSC could give.
        for behind in [1, 1_000, 1 << 20, e.fast_origin] {
            let raw = e.fast_origin - behind.min(e.fast_origin);
            assert_eq!(fast.saturated(raw), 0);
            let wrapped = fast.wrapped(raw);
            assert!(
                wrapped == 0 || wrapped > crate::engine::params::STEADY_NOW,
                "{behind}: {wrapped}"
            );
        }
        // At and after the origin the two readings are one.
        for ahead in [0, 1, 1 << 30, 1 << 50] {
            let raw = e.fast_origin + ahead;
            assert_eq!(fast.wrapped(raw), fast.saturated(raw));
        }
        assert_eq!(scale, fast.scale);
    }

    #[test]
    fn fast_and_os_clocks_share_the_epoch() {
        let fast = Clock::monotonic().now_nanos();
        let os = Clock::os().now_nanos();
        // Both count from the same instant; they were read microseconds apart.
        assert!(fast.abs_diff(os) < 1_000_000_000, "fast {fast} os {os}");
    }
}
