//! The process-wide epoch and the fast clock: quanta's TSC clock (or the OS clock it falls
//! back to) and [`std::time::Instant`], both captured once, on every target whose standard
//! library can read time.

use core::fmt;
use std::sync::OnceLock;
use std::time::Instant;

use super::saturating_nanos;
use crate::engine::error::ClockError;

/// The process-wide epoch, captured once on both the fast (TSC) clock and the OS clock.
pub(crate) struct Epoch {
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

/// The epoch, captured at the first call in the process. Always there on this target.
pub(super) fn epoch() -> Result<&'static Epoch, ClockError> {
    static EPOCH: OnceLock<Epoch> = OnceLock::new();
    Ok(EPOCH.get_or_init(|| {
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
    }))
}

impl Epoch {
    /// The fast clock without the dispatch, when its conversion has a fixed shift.
    #[inline(always)]
    pub(super) fn fast(&'static self) -> Option<FastClock> {
        Some(FastClock::of(self, self.scale?))
    }

    /// The fast clock through quanta's own conversion (a scale with no fixed shift).
    pub(super) fn fast_nanos(&self) -> u64 {
        self.fast.delta_as_nanos(self.fast_origin, self.fast.raw())
    }

    /// The OS monotonic clock since the epoch.
    pub(super) fn os_nanos(&self) -> u64 {
        saturating_nanos(self.os_origin.elapsed())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::Clock;

    fn epoch() -> &'static Epoch {
        super::epoch().unwrap() // test: there is always an epoch here
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
}
