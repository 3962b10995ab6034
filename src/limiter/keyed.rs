//! [`KeyedRateLimiter`]: one cell per key in a bounded table of atomics that grows with its
//! live keys.
//!
//! # The table
//!
//! Keys are never stored: each key is reduced to a 64-bit *fingerprint* by a per-limiter
//! seeded hash (see [`fingerprint`](crate::engine::fingerprint)), so every key occupies one 16-byte
//! slot whatever its length, and a long attacker-chosen key costs no more than a short one.
//! A slot is two words:
//!
//! | word | value | meaning |
//! |---|---|---|
//! | `key` | 0 | never used |
//! | `key` | fp | holds (or held) the key with fingerprint `fp` |
//! | `tat` | [`TOMBSTONE`](crate::engine::cell::TOMBSTONE) | dead: swept, or moved away; reusable by any key |
//! | `tat` | other | the key's TAT, XOR a mask drawn from `fp` (see [`tagged`](crate::engine::tagged)) |
//!
//! Slots sit four to a bucket (one cache line). A key lives in one of its two candidate
//! buckets, and the table grows a bucket at a time as keys arrive, from 4 KiB up to what
//! `max_keys` keys need (`store.rs` has the layout and the addressing, `grow.rs` the moves).
//! Lookups of present keys are lock-free: scan at most two buckets, then one CAS on the TAT.
//! New keys, revivals, sweeps and growth take one mutex (`slow`); they are rare next to checks.
//! A key whose buckets stay full even after moving others (rare) or whose fingerprint is 0
//! lives in a small spill map under the same mutex, so the first `max_keys` live keys are
//! always tracked. At the cap, a live key is never displaced; which newcomer may take an idle
//! key's slot is for admission to say (`admission.rs`, [`Admission`]).
//!
//! # Moving a key while checks run
//!
//! Growth, and making room for a new key, move live keys between buckets under the insert lock
//! while checks go on without it. `grow.rs` has the argument that no step is lost, counted
//! twice or applied under the wrong quota meanwhile.

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use core::fmt;
use core::marker::PhantomData;
use std::collections::HashMap;

use crate::sync::Mutex;

use crate::engine::cell::Padded;
use crate::engine::clock::Clock;
use crate::engine::fingerprint::Fingerprinter;
use crate::engine::params::{Gate, SharedParams};
use crate::engine::quota::Quota;
use crate::engine::stats::{Counters, Stats};
use crate::limiter::guard::{self, Guard, Hot};
use crate::shaping::priority::{Priorities, Reserve};
use crate::shaping::retry::RetryBudget;

mod admission;
mod builder;
#[cfg(feature = "config")]
mod carry;
mod charge;
mod check;
mod grow;
mod insert;
mod refund;
mod sketch;
mod store;
mod sweep;
mod table;
mod wait;

pub use admission::Admission;
pub use builder::KeyedRateLimiterBuilder;
use store::Store;

/// Slots per group that a quota change rescales at once (one [`Gate`] each).
#[cfg(not(loom))]
const GROUP: usize = 64;
/// Under loom, a group is one bucket: models stay small enough to explore.
#[cfg(loom)]
const GROUP: usize = 4;
/// The default bound on the keys a [`KeyedRateLimiter`] tracks: 2^20 (see
/// [`KeyedRateLimiterBuilder::max_keys`]).
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
/// The largest bound on tracked keys a builder accepts: 2^32 − 1 (a table of about 90 GiB
/// once that many keys are tracked).
pub const MAX_KEYS: usize = u32::MAX as usize;
pub(crate) const MAX_KEYS_LIMIT: usize = MAX_KEYS;

/// A rate limiter with one cell per key, bounded to `max_keys` tracked keys (active, or idle
/// and not yet swept).
///
/// ```
/// use tollgate::{KeyedRateLimiter, Verdict};
///
/// let lim: KeyedRateLimiter<String> = KeyedRateLimiter::new("1/s".parse()?);
/// assert!(lim.check_key("alice").is_permitted()); // &str lookups, no allocation
/// assert!(!lim.check_key("alice").is_permitted());
/// assert!(lim.check_key("bob").is_permitted());
/// assert_eq!(lim.len(), 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// # Memory
///
/// `max_keys` is a cap, not a reservation: the table starts at 4 KiB and grows by one
/// 64-byte bucket (four 16-byte slots) per three new keys, so it holds its keys at three
/// quarters load — about 21½ bytes per live key at any number of keys — plus at most one
/// partly used segment (up to 1 MiB) and a directory of 40 bytes per segment the cap allows
/// (1.1 KiB at the default cap of 2^20 keys). [`table_bytes`](Self::table_bytes) reports what
/// the table occupies now. It does not shrink: when keys go idle their slots are reused by
/// the keys that come next.
///
/// # Keys are fingerprints
///
/// Keys are reduced to 64-bit seeded fingerprints. Keys that hash as a single integer
/// (`u64`, `i64`, `u32`, `usize`, …) get a keyed bijection, so two of them never share a cell.
/// Other keys (strings, tuples) get SipHash-1-3 under a random 128-bit key: two keys share a
/// cell with probability about n²/2^65 (1 in 30 million at 2^20 keys), and an attacker who
/// cannot see the seed cannot aim a key at someone else's cell.
pub struct KeyedRateLimiter<K> {
    /// What a plain check does inline: one test selects the whole hot path.
    hot: Hot,
    /// The slots; one [`Gate`] per [`GROUP`] of them, the generation of the quota their TATs
    /// were written under.
    table: Store,
    max_keys: usize,
    params: SharedParams,
    overflow: Overflow,
    fingerprinter: Fingerprinter,
    clock: Clock,
    quota: Mutex<Quota>,
    /// Tracked keys (table and spill), including idle ones not yet swept.
    len: AtomicUsize,
    /// Size of the spill map, read without the lock to skip it when empty (stored with
    /// Release after the map changes, so a reader that loads it with Acquire and finds 0 sees
    /// in the table every key moved there from the map: `carry.rs`).
    spilled: AtomicUsize,
    /// A sequence lock over the moves of live keys between slots (`grow.rs`): odd while a
    /// move (or a split's moves and its new shape) is under way, written only under the
    /// insert lock. A lock-free lookup that misses a key and finds it even and unchanged
    /// knows the key was in no slot (`carry.rs`).
    moves: AtomicU64,
    /// The lowest TAT a lock-free refund wrote since the insert lock last looked
    /// (`u64::MAX`: none); see `refund.rs`.
    refunded_min: AtomicU64,
    slow: Mutex<Slow>,
    /// The generation of the spilled keys' TATs (changed under `slow`).
    spill_gate: Gate,
    /// Every verdict, always; an attached detector sums these with the counters of the other
    /// limiters it watches.
    counters: Counters,
    guard: Option<Box<Guard>>,
    _key: PhantomData<fn(&K)>,
}

/// The one cell that new keys share when the table is full of live keys.
struct Overflow {
    tat: Padded<AtomicU64>,
    /// The generation of its TAT, when it follows the per-key quota.
    gate: Gate,
    /// Its own quota if the builder set one; else it follows the per-key quota.
    params: Option<SharedParams>,
}

/// State touched only under the insert lock.
#[derive(Debug, Default)]
struct Slow {
    /// Fingerprint → TAT for keys that found no slot in their window.
    spill: HashMap<u64, u64>,
    /// No tracked key can be idle before this instant (the smallest TAT seen by the last full
    /// sweep pass, lowered by later inserts); 0 when unknown.
    idle_not_before: u64,
    /// The latest clock reading taken under the lock: readings here never go backwards, even
    /// on a TSC that is not synchronised across cores.
    last_now: u64,
    /// Where the resumable full-table sweep goes on.
    cursor: usize,
    /// The smallest live TAT seen in the current sweep pass (0 when unknown).
    pass_min: u64,
    /// The admission filter (`admission.rs`).
    filter: admission::Filter,
}

impl Slow {
    /// A live key with this TAT is in the table (placed, or moved where the sweep's current
    /// pass may have looked already): it cannot be idle before `tat`.
    fn saw_live(&mut self, tat: u64) {
        self.idle_not_before = self.idle_not_before.min(tat);
        self.pass_min = self.pass_min.min(tat);
    }
}

/// What sweeping one slot found.
enum Swept {
    /// The slot was already dead.
    Dead,
    /// The slot held an idle key and is now dead.
    Freed,
    /// The slot holds a live key with this TAT.
    Live(u64),
}

/// One check's key and cost: its fingerprint, its cost in units, the weight of that cost,
/// its priority class's reserve, and whether it is a retry.
#[derive(Clone, Copy, Debug)]
struct Ask {
    fp: u64,
    cost: u64,
    w: u64,
    reserve: Reserve,
    retry: bool,
}

impl Ask {
    /// An original check of class 0.
    #[inline]
    fn plain(fp: u64, cost: u64, w: u64) -> Self {
        Self {
            fp,
            cost,
            w,
            reserve: Reserve::NONE,
            retry: false,
        }
    }
}

impl<K> KeyedRateLimiter<K> {
    /// A keyed limiter for `quota` with the default bound of 2^20 keys.
    ///
    /// # Panics
    ///
    /// On `wasm32-unknown-unknown`, which has no monotonic clock: there, build with
    /// [`builder`](Self::builder)`(quota).clock(..)` (or see
    /// [`KeyedRateLimiterBuilder::try_build`](crate::limiter::KeyedRateLimiterBuilder::try_build)).
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder, to choose the clock, the key bound and the overflow quota.
    pub fn builder(quota: Quota) -> KeyedRateLimiterBuilder<K> {
        KeyedRateLimiterBuilder::new(quota)
    }

    /// Tracked keys, including idle ones not yet swept; never more than `max_keys`.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// `true` if no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on tracked keys.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Bytes the key table occupies now (its slots, the gates a quota change uses and the
    /// directory of its segments), whatever the keys' own sizes. It grows with the keys
    /// tracked, up to what `max_keys` keys need.
    ///
    /// ```
    /// use tollgate::KeyedRateLimiter;
    ///
    /// let lim: KeyedRateLimiter<u64> = KeyedRateLimiter::new("10/s".parse()?);
    /// let small = lim.table_bytes();
    /// assert!(small < 8 << 10); // 4 KiB of slots and a small directory
    /// for key in 0..10_000 {
    ///     assert!(lim.check_key(&key).is_permitted());
    /// }
    /// assert!(lim.table_bytes() > small);
    /// assert!(lim.table_bytes() / lim.len() <= 32);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn table_bytes(&self) -> usize {
        self.table.bytes()
    }

    /// The per-key quota in force.
    pub fn quota(&self) -> Quota {
        *self.quota.lock()
    }

    /// Replaces the per-key quota for every key, live, keeping each key's fill level: a key
    /// that has used a share `u` of its burst has used the same share of the new burst
    /// afterwards (rounded toward "used"), whenever it was last checked. An empty cell stays
    /// empty, a full one full, switching back and forth hands out nothing, a looser quota
    /// never locks anyone out and a tighter one never grants.
    ///
    /// The change walks the table once (O(table), in groups of 64 slots under the insert
    /// lock); checks of tracked keys stay lock-free meanwhile and never apply one quota to a
    /// cell written under the other. Changes are serialised; the table may grow meanwhile.
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, ManualClock};
    ///
    /// let lim = KeyedRateLimiter::<u64>::builder("10/s".parse()?).clock(ManualClock::new()).build();
    /// for _ in 0..10 {
    ///     assert!(lim.check_key(&7).is_permitted()); // key 7 spends its whole burst
    /// }
    /// lim.set_quota("1000/s;burst=10".parse()?); // faster, same burst: still empty
    /// assert!(!lim.check_key(&7).is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        let mut current = self.quota.lock();
        let new = quota.params();
        // The clock (user code: it may panic) is read once, before the change begins: between
        // `begin` and `finish` nothing runs that could leave groups in two generations.
        let now = self.now();
        let (old, gen) = self.params.begin(new);
        self.rescale_all(&old, &new, gen, now);
        self.params.finish();
        *current = quota;
    }

    /// This limiter's counts: by outcome, and originals apart from retries. With a
    /// [`FaultDetector`](crate::safety::FaultDetector) attached these are the detector's counts (of every limiter it watches, since its last
    /// [`set_revision`](crate::safety::FaultDetector::set_revision)).
    pub fn stats(&self) -> Stats {
        guard::stats(self.guard.as_deref(), &self.counters)
    }

    /// This limiter's own counts since it was built (never reset, whatever is attached): what
    /// metrics export.
    #[cfg(feature = "metrics")]
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The fault detector and clock watchdog attached, if any.
    #[cfg(feature = "metrics")]
    pub(crate) fn safety(
        &self,
    ) -> (
        Option<&crate::safety::FaultDetector>,
        Option<&crate::safety::Watchdog>,
    ) {
        match self.guard.as_deref() {
            Some(g) => (g.detector.as_ref(), g.watchdog.as_ref()),
            None => (None, None),
        }
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The retry budget attached (shared by all keys), if any.
    pub fn retry_budget(&self) -> Option<RetryBudget> {
        self.guard.as_ref()?.retry_budget()
    }

    /// The priority classes attached, if any.
    pub fn priorities(&self) -> Option<&Priorities> {
        self.guard.as_ref()?.priorities.as_ref()
    }
}
impl<K> fmt::Debug for KeyedRateLimiter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimiter")
            .field("quota", &self.quota().to_string())
            .field("len", &self.len())
            .field("max_keys", &self.max_keys)
            .field("table", &self.table)
            .field("spilled", &self.spilled.load(Ordering::Relaxed))
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}
