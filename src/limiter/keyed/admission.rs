//! [`Admission`]: which newcomers take a slot while the table is at its cap, decided by a
//! frequency filter ([`sketch`](super::sketch)) that only the insert lock's holder touches.
//!
//! # The admission step
//!
//! Under the insert lock, for a key that holds no live slot, when the table holds `max_keys`
//! keys (live or idle): the key's sighting is recorded, and with the estimate after it
//!
//! | the key | may take the slot of |
//! |---|---|
//! | a dead copy of it is still in its buckets (it was tracked, and swept), or seen 3 times or more | any idle key (TAT ≤ now), as without a filter |
//! | seen twice | a key idle for `T` at least (TAT ≤ now − T: one unit back) |
//! | seen once | a key idle for τ at least (TAT ≤ now − τ: the whole burst back) |
//!
//! A key that finds none shares the overflow cell; if admission held it to keys idle for `T`
//! or τ, it counts in [`Stats::admissions_refused`](crate::Stats::admissions_refused). Live keys are never displaced, whoever asks. Keys that spilled, keys placed
//! by another thread meanwhile and keys carried in with a debt by a rollout
//! ([`adopt`](super::carry)) are tracked keys and never go through this step. A key swept to
//! make room is recorded too, so a customer whose slot was taken while it was idle comes back
//! as a key seen before.
//!
//! Why a ladder rather than TinyLFU's "the newcomer's frequency against the victim's": the
//! victims are tracked keys, whose checks are lock-free and never reach the filter, so their
//! frequency is unknown; how long a key has been idle stands in for it. A recurring key idle
//! between two checks (less than `T` late) is displaced only by a key seen three times, or
//! by one that was itself displaced; a key seen twice — which a one-off key is, about 1 % of
//! the time, when the filter errs — waits for a key idle for `T`; a one-off key for a key
//! idle for a whole τ, which a table parked at its cap in quiet times (its idle keys long
//! idle) always has: newcomers are tracked at once there, as without a filter.
//!
//! Below the cap, with the filter on, a newcomer whose buckets are full sweeps only a key idle
//! for τ to take its slot (else it moves keys, or spills): the table has room, so no key idle
//! for less makes way.

use core::fmt;

use super::sketch::Sketch;
use super::{KeyedRateLimiter, Slow};
use crate::engine::gcra::Params;

pub(crate) const DEFAULT_FILTER_BYTES: usize = 1 << 20;

/// Who takes a slot of a keyed table that holds `max_keys` keys: *frequency-aware admission*.
///
/// A keyed table at its cap makes room for a newcomer by sweeping an idle key (one whose cell
/// is full again); a key with a debt is never displaced. Without a filter, a flood of one-off
/// keys (scanners, spoofed keys) takes every slot the moment it goes idle: a recurring
/// customer whose cell was idle for a moment between two checks loses its slot and lands in
/// the overflow cell, which the flood has spent.
///
/// With the filter (the default), the more often a newcomer was seen, the more recently idle
/// a key it may displace: seen once, only a key idle for τ (its whole burst's refill: a minute
/// for `"6/min"`); seen twice, a key idle for `T` (one unit's: 10 s for `"6/min"`); seen more
/// often, or coming back after its own slot was swept, any idle key, as without a filter.
/// Recurring keys keep their slots through their gaps, and a one-off key shares the overflow
/// cell ([`DenyReason::KeyTableFull`](crate::DenyReason::KeyTableFull) once that is spent).
/// In quiet times a table parked at its cap holds keys idle for long, and newcomers take their
/// slots at once.
///
/// # The filter
///
/// A doorkeeper (two generations of a Bloom filter) in front of a count-min sketch of 4-bit
/// counters, as in TinyLFU, over the keys' fingerprints. It is allocated when a newcomer first
/// meets the table at its cap — a table that never fills never pays for it — and touched only
/// on the insert path: checks of tracked keys never see it. Its memory is `bytes` (raised to
/// 4 KiB), sized for what it must remember rather than for `max_keys`: a key is remembered
/// for at least `3/8` sightings per byte after its last one (newcomers recorded at the cap),
/// at most twice that — 393,216 to 786,432 at the default 1 MiB, 8 to 16 seconds of a flood
/// of 50,000 new keys a second. A one-off key passes for one seen twice about 1 % of the time.
/// If the allocator refuses the filter, the table admits as with [`Admission::Off`].
///
/// # Caveats
///
/// - A one-off key's check may be allowed by the overflow cell, and the same key's next
///   check by a fresh cell of its own: newcomers together get at most the overflow cell's
///   quota on top of their own ([`overflow_quota`](crate::limiter::KeyedRateLimiterBuilder::overflow_quota)
///   sets it). A key with a debt in a cell of its own is never given a fresh one.
/// - A key first seen while the table is full of recently idle keys is tracked from its
///   second or third check, not its first.
/// - A customer idle for longer than `T` between checks can be displaced by a key seen twice,
///   and one idle for longer than τ, or than the filter remembers, meets the table as a
///   newcomer, as without a filter.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{DenyReason, KeyedRateLimiter, ManualClock};
///
/// let clock = ManualClock::new();
/// let lim = KeyedRateLimiter::<u64>::builder("1/s;burst=3".parse()?) // T = 1 s, τ = 3 s
///     .clock(clock.clone())
///     .max_keys(2)
///     .overflow_quota("1/h".parse()?)
///     .build(); // with the filter: Admission::default()
/// assert!(lim.check_key(&1).is_permitted());
/// assert!(lim.check_key(&2).is_permitted()); // the table is at its cap
/// assert!(lim.check_key(&3).is_permitted()); // seen once: the overflow cell's 1 an hour
/// clock.advance(Duration::from_millis(2_500)); // keys 1 and 2 idle for 1.5 s
/// let v = lim.check_key(&4); // seen once: no key idle for τ, the overflow cell is spent
/// assert_eq!(v.denied().map(|d| d.reason()), Some(DenyReason::KeyTableFull));
/// assert!(lim.check_key(&3).is_permitted()); // seen twice: takes a key idle for T
/// assert_eq!(lim.len(), 2);
/// assert_eq!(lim.stats().admissions_refused, 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Admission {
    /// No filter: at the cap, any newcomer takes the slot of the next idle key.
    Off,
    /// The frequency filter, of at most `bytes` bytes (raised to 4 KiB, lowered to 1 GiB).
    Filter {
        /// The filter's memory budget in bytes.
        bytes: usize,
    },
}

impl Default for Admission {
    /// The filter with [`DEFAULT_FILTER_BYTES`](crate::limiter::Admission::DEFAULT_FILTER_BYTES) (1 MiB).
    fn default() -> Self {
        Self::Filter {
            bytes: DEFAULT_FILTER_BYTES,
        }
    }
}

/// The filter's state, under the insert lock.
#[derive(Default)]
pub(super) enum Filter {
    /// No filter ([`Admission::Off`], or the allocator refused it).
    #[default]
    Off,
    /// Not allocated yet (the table has not reached its cap): at most this many bytes.
    Pending(usize),
    On(Sketch),
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => f.write_str("Off"),
            Self::Pending(bytes) => write!(f, "Pending({bytes} bytes)"),
            Self::On(s) => s.fmt(f),
        }
    }
}

impl From<Admission> for Filter {
    fn from(a: Admission) -> Self {
        match a {
            Admission::Off => Self::Off,
            Admission::Filter { bytes } => Self::Pending(bytes),
        }
    }
}

impl Filter {
    /// Bytes the filter occupies (0 until allocated).
    pub(super) fn bytes(&self) -> usize {
        match self {
            Self::On(s) => s.bytes(),
            _ => 0,
        }
    }

    /// A key swept to make room: one sighting, so that it comes back as a key seen before.
    pub(super) fn saw_swept(&mut self, fp: u64) {
        if let Self::On(s) = self {
            s.record(fp);
        }
    }

    /// Records a sighting of a newcomer at the cap (allocating the filter on the first) and
    /// returns its estimate after it (1: seen once); `None` without a filter.
    fn sighted(&mut self, fp: u64) -> Option<u64> {
        if let Self::Pending(bytes) = *self {
            *self = Sketch::new(bytes).map_or(Self::Off, Self::On);
        }
        match self {
            Self::On(s) => Some(s.record(fp)),
            _ => None,
        }
    }
}

/// Which idle keys a newcomer at the cap may displace: the more often it was seen, the more
/// recently idle a key it may displace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Any idle key: a key seen three times or more, one coming back to a slot swept from
    /// under it, or any key without a filter.
    Idle,
    /// Only a key idle for `T` at least (one unit's refill): a key seen twice.
    Interval,
    /// Only a key idle for τ at least (the whole burst's refill): a key seen once.
    Stale,
}

impl Admit {
    /// The instant a displaced key's TAT must not exceed: `now`, `now − T` or `now − τ`.
    pub(super) fn sweep_at(self, now: u64, p: &Params) -> u64 {
        match self {
            Self::Idle => now,
            Self::Interval => now.saturating_sub(p.unit()),
            Self::Stale => now.saturating_sub(p.tau),
        }
    }
}

impl Slow {
    /// The admission step for `fp`, a key with no live slot, while the table is at its cap
    /// (under the insert lock): records its sighting and says which keys it may displace.
    /// `returning`: a dead copy of it is still in its buckets (it was tracked, and swept).
    ///
    /// A method of the lock's state, not of the limiter: not generic over the key, so it is
    /// compiled once, in this crate, rather than for each key type next to `check_key`.
    pub(super) fn admit(&mut self, fp: u64, returning: bool) -> Admit {
        match self.filter.sighted(fp) {
            _ if returning => Admit::Idle,
            None | Some(3..) => Admit::Idle,
            Some(2) => Admit::Interval,
            Some(_) => Admit::Stale,
        }
    }
}

impl<K> KeyedRateLimiter<K> {
    /// Bytes the admission filter occupies: 0 until the table first reaches its cap (or with
    /// [`Admission::Off`]), then its budget (see [`Admission`]).
    ///
    /// ```
    /// use tollgate::KeyedRateLimiter;
    ///
    /// let lim = KeyedRateLimiter::<u64>::builder("1/s".parse()?).max_keys(2).build();
    /// for key in 0..2 {
    ///     assert!(lim.check_key(&key).is_permitted());
    /// }
    /// assert_eq!(lim.filter_bytes(), 0); // at its cap, but no newcomer yet
    /// let _ = lim.check_key(&2);
    /// assert_eq!(lim.filter_bytes(), 1 << 20);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn filter_bytes(&self) -> usize {
        self.slow.lock().filter.bytes()
    }
}

impl Admission {
    /// The default budget of the admission filter: 1 MiB.
    pub const DEFAULT_FILTER_BYTES: usize = crate::limiter::keyed::admission::DEFAULT_FILTER_BYTES;
}
