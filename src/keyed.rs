//! [`KeyedRateLimiter`]: one cell per key in a bounded, flat table of atomics.
//!
//! # The table
//!
//! Keys are never stored: each key is reduced to a 64-bit *fingerprint* by a per-limiter
//! seeded hash (see [`fingerprint`](crate::fingerprint)), so every key occupies one 16-byte
//! slot whatever its length, and a long attacker-chosen key costs no more than a short one.
//! A slot is two words:
//!
//! | word | value | meaning |
//! |---|---|---|
//! | `key` | 0 | never used; ends every probe |
//! | `key` | fp | holds (or held) the key with fingerprint `fp` |
//! | `tat` | [`TOMBSTONE`] | dead: swept, reusable by any key |
//! | `tat` | other | the key's TAT |
//!
//! A key lives within [`WINDOW`] slots of its home slot (linear probing, capacity 1.5 ×
//! `max_keys`). Lookups of present keys are lock-free: scan, then one CAS on the TAT. New keys,
//! revivals and sweeps take one mutex (`slow`); they are rare next to checks. A key whose
//! window is full (rare at this load factor) or whose fingerprint is 0 lives in a small spill
//! map under the same mutex, so the first `max_keys` live keys are always tracked.

use core::borrow::Borrow;
use core::fmt;
use core::hash::Hash;
use core::marker::PhantomData;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::cell::{self, Attempt, Padded, SharedParams, TOMBSTONE};
use crate::check::Check;
use crate::clock::Clock;
use crate::error::InsufficientCapacity;
use crate::fault::FaultDetector;
use crate::fingerprint::Fingerprinter;
use crate::gcra::{self, Outcome, Params};
use crate::guard::{self, Guard};
use crate::quota::Quota;
use crate::stats::Stats;
use crate::verdict::{Denied, DenyReason, PassReason, Verdict};
use crate::watchdog::Watchdog;

/// How far from its home slot a key may live before it spills.
const WINDOW: usize = 64;
/// The default bound on tracked keys: 2^20.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
/// The largest bound on tracked keys a builder accepts: 2^32 − 1 (about 96 GiB of table).
pub const MAX_KEYS_LIMIT: usize = u32::MAX as usize;

/// A rate limiter with one cell per key, bounded to `max_keys` live keys.
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
/// The table is allocated once, zeroed (so the operating system commits pages only as keys
/// land in them): 16 bytes per slot, 1.5 slots per `max_keys`, i.e. 24 bytes per key at
/// capacity (24 MiB of address space at the default 2^20 keys; size it with
/// [`KeyedRateLimiterBuilder::max_keys`]).
///
/// # Keys are fingerprints
///
/// Keys are reduced to 64-bit seeded fingerprints. Keys that hash as a single integer
/// (`u64`, `i64`, `u32`, `usize`, …) get a keyed bijection, so two of them never share a cell.
/// Other keys (strings, tuples) get SipHash-1-3 under a random 128-bit key: two keys share a
/// cell with probability about n²/2^65 (1 in 30 million at 2^20 keys), and an attacker who
/// cannot see the seed cannot aim a key at someone else's cell.
pub struct KeyedRateLimiter<K> {
    slots: Box<[AtomicU64]>,
    capacity: usize,
    max_keys: usize,
    params: SharedParams,
    overflow: Overflow,
    fingerprinter: Fingerprinter,
    clock: Clock,
    quota: Mutex<Quota>,
    /// Tracked keys (table and spill), including idle ones not yet swept.
    len: AtomicUsize,
    /// Size of the spill map, read without the lock to skip it when empty.
    spilled: AtomicUsize,
    slow: Mutex<Slow>,
    guard: Option<Box<Guard>>,
    _key: PhantomData<fn(&K)>,
}

/// The one cell that new keys share when the table is full of live keys.
struct Overflow {
    tat: Padded<AtomicU64>,
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

/// One check's key and cost: its fingerprint, its cost in units, and the weight of that cost.
#[derive(Clone, Copy, Debug)]
struct Ask {
    fp: u64,
    cost: u64,
    w: u64,
}

enum Found {
    Slot(usize),
    Absent,
}

impl<K> KeyedRateLimiter<K> {
    /// A keyed limiter for `quota` with the default bound of 2^20 keys.
    pub fn new(quota: Quota) -> Self {
        Self::builder(quota).build()
    }

    /// A builder, to choose the clock, the key bound and the overflow quota.
    pub fn builder(quota: Quota) -> KeyedRateLimiterBuilder<K> {
        KeyedRateLimiterBuilder {
            quota,
            clock: Clock::monotonic(),
            max_keys: DEFAULT_MAX_KEYS,
            overflow_quota: None,
            detector: None,
            watchdog: None,
            _key: PhantomData,
        }
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

    /// Bytes the key table occupies (its slots), whatever the keys' own sizes.
    pub fn table_bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<AtomicU64>()
    }

    /// The per-key quota in force.
    pub fn quota(&self) -> Quota {
        *self.quota.lock()
    }

    /// Replaces the per-key quota for every key at once, in O(1): the parameters are shared,
    /// and each key's TAT is clamped on its next check (no lockout, no free burst).
    pub fn set_quota(&self, quota: Quota) {
        let mut current = self.quota.lock();
        *current = quota;
        self.params.store(quota.params());
        // A lower τ may make keys idle earlier than the last sweep pass saw.
        let mut slow = self.slow.lock();
        slow.idle_not_before = 0;
        slow.pass_min = 0;
    }

    /// The fault detector's counts, if one is attached.
    pub fn stats(&self) -> Option<Stats> {
        self.guard
            .as_ref()?
            .detector
            .as_ref()
            .map(FaultDetector::stats)
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}

impl<K: Hash> KeyedRateLimiter<K> {
    /// Checks one unit for `key`.
    #[inline]
    pub fn check_key<Q>(&self, key: &Q) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let p = self.params.load();
        let fp = self.fingerprinter.fingerprint(key);
        self.step_key(
            Ask {
                fp,
                cost: 1,
                w: p.unit(),
            },
            &p,
        )
    }

    /// Checks `cost` units for `key`: all or nothing. A cost of 0 reports the remaining
    /// capacity and writes nothing (a new key is not inserted).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if `cost` exceeds the burst.
    #[inline]
    pub fn check_key_n<Q>(&self, key: &Q, cost: u64) -> Result<Verdict, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let p = self.params.load();
        let w = p
            .weight(cost)
            .ok_or(InsufficientCapacity::new(cost, p.burst))?;
        let fp = self.fingerprinter.fingerprint(key);
        if w == 0 {
            return Ok(self.peek_fp(fp, &p, 0));
        }
        Ok(self.step_key(Ask { fp, cost, w }, &p))
    }

    /// Checks with per-request arguments (cost, attempt, priority class).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds the burst.
    #[inline]
    pub fn check_key_with<Q>(&self, key: &Q, check: Check) -> Result<Verdict, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.check_key_n(key, check.units())
    }

    /// What [`check_key`](Self::check_key) would say now, without writing anything.
    pub fn peek_key<Q>(&self, key: &Q) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let p = self.params.load();
        let w = p.unit();
        self.peek_fp(self.fingerprinter.fingerprint(key), &p, w)
    }
}

impl<K> KeyedRateLimiter<K> {
    #[inline]
    fn key_word(&self, slot: usize) -> &AtomicU64 {
        &self.slots[2 * slot]
    }

    #[inline]
    fn tat_word(&self, slot: usize) -> &AtomicU64 {
        &self.slots[2 * slot + 1]
    }

    /// The home slot of `fp`: multiply-shift range reduction (any capacity, high bits used).
    #[inline]
    fn home(&self, fp: u64) -> usize {
        // The product of a u64 and a usize capacity shifted right 64 is below the capacity.
        ((u128::from(fp) * self.capacity as u128) >> 64) as usize
    }

    /// Finds `fp` in its window without locking.
    #[inline]
    fn find(&self, fp: u64) -> Found {
        if self.capacity == 0 {
            return Found::Absent;
        }
        let mut slot = self.home(fp);
        for _ in 0..WINDOW {
            // Acquire: pairs with the Release store of a newly placed key, so its TAT is seen.
            match self.key_word(slot).load(Ordering::Acquire) {
                k if k == fp => return Found::Slot(slot),
                0 => return Found::Absent,
                _ => {}
            }
            slot += 1;
            if slot == self.capacity {
                slot = 0;
            }
        }
        Found::Absent
    }

    #[inline]
    fn now(&self) -> u64 {
        match &self.guard {
            None => self.clock.now_nanos(),
            Some(g) => g.now(&self.clock),
        }
    }

    #[inline]
    fn step_key(&self, ask: Ask, p: &Params) -> Verdict {
        match &self.guard {
            None => self.step_key_enforcing(ask, p),
            Some(g) => self.step_key_guarded(g, ask, p),
        }
    }

    fn step_key_guarded(&self, g: &Guard, ask: Ask, p: &Params) -> Verdict {
        let v = match g.pass_reason() {
            None => self.step_key_enforcing(ask, p),
            Some(reason) => self.step_key_passing(ask, p, reason, g.ceiling(p, ask.w)),
        };
        g.observe(&v, Some(ask.fp));
        v
    }

    /// During a pass-through: the shadow step, under the ceiling, on the key's own cell.
    fn step_key_passing(
        &self,
        ask: Ask,
        p: &Params,
        reason: PassReason,
        ceiling: Option<(u64, u64)>,
    ) -> Verdict {
        let Ask { fp, w, .. } = ask;
        if fp != 0 {
            if let Found::Slot(slot) = self.find(fp) {
                let key = self.key_word(slot);
                let ours = || key.load(Ordering::Acquire) == fp;
                let (tat, a) = (
                    self.tat_word(slot),
                    Attempt {
                        now: self.now(),
                        p,
                        w,
                    },
                );
                if let Some(v) =
                    cell::step_pass_through(tat, a, reason, ceiling, ours, || self.now())
                {
                    return v;
                }
            }
        }
        guard::pass(self.step_slow(ask, p), reason)
    }

    #[inline]
    fn step_key_enforcing(&self, ask: Ask, p: &Params) -> Verdict {
        let Ask { fp, w, .. } = ask;
        if fp != 0 {
            if let Found::Slot(slot) = self.find(fp) {
                let now = self.now();
                let key = self.key_word(slot);
                let ours = || key.load(Ordering::Acquire) == fp;
                if let Some(v) = cell::step_atomic(
                    self.tat_word(slot),
                    Attempt { now, p, w },
                    DenyReason::Quota,
                    ours,
                    || self.now(),
                ) {
                    return v;
                }
            }
        }
        self.step_slow(ask, p)
    }

    fn peek_fp(&self, fp: u64, p: &Params, w: u64) -> Verdict {
        let v = self.peek_enforcing(fp, p, w);
        match self.guard.as_ref().and_then(|g| g.pass_reason()) {
            Some(reason) if w > 0 => guard::pass(v, reason),
            _ => v,
        }
    }

    fn peek_enforcing(&self, fp: u64, p: &Params, w: u64) -> Verdict {
        let now = self.now();
        let tat = match (fp, self.find(fp)) {
            (1.., Found::Slot(slot)) => Some(self.tat_word(slot).load(Ordering::Acquire)),
            _ if self.spilled.load(Ordering::Relaxed) == 0 => None,
            _ => self.slow.lock().spill.get(&fp).copied(),
        };
        match tat {
            Some(tat) if tat != TOMBSTONE => cell::evaluate(tat, now, p, w, DenyReason::Quota),
            // A new key: fresh if it would be tracked, else it would share the overflow cell.
            _ if self.len() < self.max_keys => cell::evaluate(0, now, p, w, DenyReason::Quota),
            _ => {
                let op = self.overflow_params(p);
                let w = if w == 0 {
                    0
                } else {
                    op.weight(1).unwrap_or(op.tau)
                };
                let tat = self.overflow.tat.0.load(Ordering::Relaxed);
                cell::evaluate(tat, now, &op, w, DenyReason::KeyTableFull)
            }
        }
    }

    /// The insert path: new keys, revivals, spilled keys and the overflow cell.
    #[cold]
    fn step_slow(&self, ask: Ask, p: &Params) -> Verdict {
        let Ask { fp, cost, w } = ask;
        let mut slow = self.slow.lock();
        // Read under the lock, so the instants of successive sweeps and placements never go
        // backwards: a slot's new TAT (`now + w`) then exceeds every TAT it held before it was
        // swept (`≤ now`), and a stale reader's CAS on the old value cannot land on the new key.
        let now = self.now().max(slow.last_now);
        slow.last_now = now;
        if let Some(tat) = slow.spill.get_mut(&fp) {
            return step_plain(tat, now, p, w, DenyReason::Quota);
        }
        if self.len() >= self.max_keys && now < slow.idle_not_before {
            // Full of keys none of which can be idle yet: nothing to sweep or revive.
            drop(slow);
            return self.step_overflow(now, p, cost);
        }
        if fp != 0 {
            if let Some(v) = self.step_in_window(&mut slow, fp, now, p, w) {
                return v;
            }
        }
        if self.len() >= self.max_keys && self.sweep_some(&mut slow, now) && fp != 0 {
            if let Some(v) = self.step_in_window(&mut slow, fp, now, p, w) {
                return v;
            }
        }
        if self.len() >= self.max_keys {
            drop(slow);
            return self.step_overflow(now, p, cost);
        }
        // The window has no room (rare), or fp is 0 (which marks empty slots): the key spills.
        let mut tat = 0;
        let v = step_plain(&mut tat, now, p, w, DenyReason::Quota);
        if tat != 0 {
            slow.spill.insert(fp, tat);
            self.spilled.store(slow.spill.len(), Ordering::Relaxed);
            self.inserted(&mut slow, tat);
        }
        v
    }

    /// Under the lock: the key's own slot (live or dead), else a free one in its window.
    /// `None` if the window has no room or the table is full.
    fn step_in_window(
        &self,
        slow: &mut Slow,
        fp: u64,
        now: u64,
        p: &Params,
        w: u64,
    ) -> Option<Verdict> {
        if self.capacity == 0 {
            return None;
        }
        let home = self.home(fp);
        let mut free = None;
        let mut slot = home;
        for _ in 0..WINDOW {
            let key = self.key_word(slot).load(Ordering::Acquire);
            if key == fp {
                let tat = self.tat_word(slot);
                if tat.load(Ordering::Acquire) != TOMBSTONE {
                    // Placed by another thread since our lock-free look: step it as usual.
                    let ours = || true;
                    return cell::step_atomic(
                        tat,
                        Attempt { now, p, w },
                        DenyReason::Quota,
                        ours,
                        || now,
                    );
                }
                if self.len() >= self.max_keys {
                    return None;
                }
                return Some(self.place(slow, slot, fp, false, now, p, w));
            }
            if key == 0 || !matches!(self.sweep_slot(slot, now), Swept::Live(_)) {
                free = free.or(Some((slot, key == 0)));
                if key == 0 {
                    break;
                }
            }
            slot += 1;
            if slot == self.capacity {
                slot = 0;
            }
        }
        let (slot, empty) = free?;
        if self.len() >= self.max_keys {
            return None;
        }
        Some(self.place(slow, slot, fp, empty, now, p, w))
    }

    /// Marks `slot` dead if it is idle (TAT ≤ now).
    fn sweep_slot(&self, slot: usize, now: u64) -> Swept {
        let tat = self.tat_word(slot);
        let mut cur = tat.load(Ordering::Acquire);
        // The CAS races allows on the same word: if an allow lands first the CAS fails and the
        // key stays; if the CAS lands first the allow's CAS fails, sees the tombstone and
        // revives the key under this same lock. No update is lost either way.
        while cur != TOMBSTONE && cur <= now {
            match tat.compare_exchange(cur, TOMBSTONE, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.len.fetch_sub(1, Ordering::Relaxed);
                    return Swept::Freed;
                }
                Err(actual) => cur = actual,
            }
        }
        if cur == TOMBSTONE {
            Swept::Dead
        } else {
            Swept::Live(cur)
        }
    }

    /// Places `fp` in `slot` (empty, or dead) with the TAT its first step leaves.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        slow: &mut Slow,
        slot: usize,
        fp: u64,
        empty: bool,
        now: u64,
        p: &Params,
        w: u64,
    ) -> Verdict {
        let mut tat = 0;
        let v = step_plain(&mut tat, now, p, w, DenyReason::Quota);
        if tat == 0 {
            return v; // An overflow denial: nothing to remember.
        }
        let (key_word, tat_word) = (self.key_word(slot), self.tat_word(slot));
        if empty {
            // TAT first, then the key with Release: a reader that sees the key sees the TAT.
            tat_word.store(tat, Ordering::Relaxed);
            key_word.store(fp, Ordering::Release);
        } else {
            // Key first, then the TAT with Release: a reader of the old key that sees the new
            // TAT re-checks the key, sees it changed, and looks again.
            key_word.store(fp, Ordering::Release);
            tat_word.store(tat, Ordering::Release);
        }
        self.inserted(slow, tat);
        v
    }

    fn inserted(&self, slow: &mut Slow, tat: u64) {
        self.len.fetch_add(1, Ordering::Relaxed);
        slow.idle_not_before = slow.idle_not_before.min(tat);
        slow.pass_min = slow.pass_min.min(tat);
    }

    /// Before giving up on a full table: if some key can be idle by now, sweep on from the
    /// cursor until one idle key is freed or a whole pass is done. Each slot is visited once
    /// per pass, and a pass that finds nothing records the earliest instant a tracked key can
    /// go idle, so full-table arrivals before then cost nothing. Returns `true` if it freed a
    /// key.
    fn sweep_some(&self, slow: &mut Slow, now: u64) -> bool {
        if now < slow.idle_not_before {
            return false;
        }
        let before = slow.spill.len();
        slow.spill.retain(|_, tat| *tat > now);
        if slow.spill.len() < before {
            self.len
                .fetch_sub(before - slow.spill.len(), Ordering::Relaxed);
            self.spilled.store(slow.spill.len(), Ordering::Relaxed);
            return true;
        }
        for _ in 0..self.capacity {
            let slot = slow.cursor;
            let swept = if self.key_word(slot).load(Ordering::Acquire) == 0 {
                Swept::Dead
            } else {
                self.sweep_slot(slot, now)
            };
            if let Swept::Live(tat) = swept {
                slow.pass_min = slow.pass_min.min(tat);
            }
            slow.cursor = slot + 1;
            if slow.cursor == self.capacity {
                let spill_min = slow.spill.values().copied().min().unwrap_or(u64::MAX);
                slow.idle_not_before = slow.pass_min.min(spill_min);
                slow.pass_min = u64::MAX;
                slow.cursor = 0;
            }
            if let Swept::Freed = swept {
                return true;
            }
        }
        false
    }

    fn overflow_params(&self, p: &Params) -> Params {
        self.overflow.params.as_ref().map_or(*p, SharedParams::load)
    }

    /// New keys share the overflow cell when the table is full. A cost above the overflow
    /// cell's own burst can never pass it: denied, with a retry-after of `u64::MAX` ns.
    fn step_overflow(&self, now: u64, p: &Params, cost: u64) -> Verdict {
        let op = self.overflow_params(p);
        let Some(w) = op.weight(cost) else {
            return Verdict::Deny(Denied::new(u64::MAX, DenyReason::KeyTableFull));
        };
        let a = Attempt { now, p: &op, w };
        cell::step_word(&self.overflow.tat.0, a, DenyReason::KeyTableFull, || {
            self.now()
        })
    }
}

/// One step on a TAT held under a lock.
fn step_plain(tat: &mut u64, now: u64, p: &Params, w: u64, reason: DenyReason) -> Verdict {
    let clamped = gcra::clamp(*tat, now, p.tau);
    let outcome = gcra::step(clamped, now, w, p.tau);
    *tat = match outcome {
        Outcome::Allow { tat, .. } => tat,
        _ => clamped,
    };
    cell::verdict(outcome, p, reason)
}

impl<K> fmt::Debug for KeyedRateLimiter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedRateLimiter")
            .field("quota", &self.quota().to_string())
            .field("len", &self.len())
            .field("max_keys", &self.max_keys)
            .field("spilled", &self.spilled.load(Ordering::Relaxed))
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Builds a [`KeyedRateLimiter`].
#[must_use = "call .build() to get the limiter"]
pub struct KeyedRateLimiterBuilder<K> {
    quota: Quota,
    clock: Clock,
    max_keys: usize,
    overflow_quota: Option<Quota>,
    detector: Option<FaultDetector>,
    watchdog: Option<Watchdog>,
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
            .finish()
    }
}

impl<K> KeyedRateLimiterBuilder<K> {
    /// The clock to read on every check (default: [`Clock::monotonic`]).
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// The most live keys tracked at once (default 2^20, at least 1). When the table is full of
    /// live keys, new keys share one overflow cell.
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

    /// Attaches a fault detector: breadth anomalies turn into pass-throughs, and every check
    /// is counted ([`FaultDetector::stats`]). One detector per limiter.
    pub fn detector(mut self, detector: FaultDetector) -> Self {
        detector.attach_keyed();
        self.detector = Some(detector);
        self
    }

    /// Attaches a clock watchdog. The limiter then reads the watchdog's clocks (its fast
    /// clock, or its reference after a fault) instead of [`clock`](Self::clock).
    pub fn watchdog(mut self, watchdog: Watchdog) -> Self {
        self.watchdog = Some(watchdog);
        self
    }

    /// Builds the limiter. Allocates the whole table now (zeroed, so committed lazily). If
    /// the allocator refuses a table that large, the bound is halved until it agrees:
    /// [`KeyedRateLimiter::max_keys`] reports the bound in force. Never panics.
    pub fn build(self) -> KeyedRateLimiter<K> {
        let mut max_keys = self.max_keys;
        let (slots, capacity) = loop {
            let capacity = max_keys.saturating_add(max_keys / 2).max(2 * WINDOW);
            match bytemuck::allocation::try_zeroed_slice_box(capacity.saturating_mul(2)) {
                Ok(slots) => break (slots, capacity),
                Err(()) if max_keys > 1 => max_keys /= 2,
                // Even the smallest table failed: the process is out of memory; an empty
                // table that sends every key to the overflow cell still never panics.
                Err(()) => break (Box::default(), 0),
            }
        };
        KeyedRateLimiter {
            slots,
            capacity,
            max_keys: if capacity == 0 { 0 } else { max_keys },
            params: SharedParams::new(self.quota.params()),
            overflow: Overflow {
                tat: Padded(AtomicU64::new(0)),
                params: self.overflow_quota.map(|q| SharedParams::new(q.params())),
            },
            fingerprinter: Fingerprinter::new(),
            clock: self.clock,
            quota: Mutex::new(self.quota),
            len: AtomicUsize::new(0),
            spilled: AtomicUsize::new(0),
            guard: Guard::boxed(self.detector, self.watchdog),
            slow: Mutex::new(Slow {
                pass_min: u64::MAX,
                ..Slow::default()
            }),
            _key: PhantomData,
        }
    }
}
