//! [`KeyedConcurrencyLimiter`]: a count of permits in flight per key, in a sharded table of
//! key fingerprints, each shard under its own lock.
//!
//! An entry exists exactly while its key has permits out or waiters: the release that takes
//! its count to zero with no waiter removes it under the same lock, so an acquire of the
//! same key finds the live entry or none (and inserts a fresh one). The table never holds
//! more than `max_keys` entries: at the bound a new key is refused
//! ([`SaturatedReason::TableFull`](super::SaturatedReason::TableFull)), never let through
//! uncounted. A shard's map shrinks when it is mostly empty, so a stream of one-off keys
//! leaves no memory behind.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasherDefault, Hash, Hasher};
use core::marker::PhantomData;
use core::num::NonZeroU32;
#[cfg(feature = "tokio")]
use core::time::Duration;
use std::collections::hash_map::{Entry as MapEntry, HashMap};
use std::sync::Arc;

use super::permit::Permit;
use super::queue::WaitQueue;
use super::{LimitError, Saturated};
use crate::engine::cell::Padded;
use crate::engine::fingerprint::Fingerprinter;
use crate::shaping::priority::Priorities;
use crate::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Mutex, MutexGuard};

/// Shards of the table (a power of two).
#[cfg(not(loom))]
const SHARDS: usize = 64;
#[cfg(loom)]
const SHARDS: usize = 2;

/// Fingerprints are seeded hashes already: the map uses them as they are.
#[derive(Default)]
pub(super) struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// One key's count and waiters.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) in_flight: u32,
    pub(super) queue: Option<Box<WaitQueue>>,
}

pub(super) type Shard = HashMap<u64, Entry, BuildHasherDefault<Identity>>;

/// The shared state of a [`KeyedConcurrencyLimiter`] and its clones and permits.
pub(crate) struct KeyedCore {
    shards: Box<[Padded<Mutex<Shard>>]>,
    /// The per-key limit; read under a shard's lock by every acquire and grant.
    limit: AtomicU32,
    /// Entries in the table (changed under a shard's lock).
    keys: AtomicUsize,
    max_keys: usize,
    fingerprinter: Fingerprinter,
    /// Acquires refused (at once, or after a wait): a statistic, nothing is ordered by it.
    pub(super) saturations: AtomicU64,
    priorities: Option<Priorities>,
    #[cfg(feature = "tokio")]
    pub(super) max_wait: Option<Duration>,
}

impl KeyedCore {
    pub(super) fn fingerprint<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.fingerprinter.fingerprint(key)
    }

    pub(super) fn shard(&self, fp: u64) -> MutexGuard<'_, Shard> {
        // Bits 32.. pick the shard: the map itself uses the low bits and the top seven.
        self.shards[(fp >> 32) as usize & (SHARDS - 1)].0.lock()
    }

    #[inline]
    pub(super) fn slots(&self, limit: u32, class: u8) -> u32 {
        match &self.priorities {
            None => limit,
            Some(p) => p.reserve_of(class).slots(limit),
        }
    }

    pub(super) fn limit(&self) -> u32 {
        self.limit.load(Ordering::SeqCst)
    }

    /// Takes a slot of key `fp` for `class` (its shard locked).
    pub(super) fn take(&self, shard: &mut Shard, fp: u64, class: u8) -> Result<(), Saturated> {
        let limit = self.limit();
        let slots = self.slots(limit, class);
        match shard.entry(fp) {
            MapEntry::Occupied(mut o) => {
                let e = o.get_mut();
                if e.in_flight >= slots {
                    return Err(Saturated::limit_reached(limit, e.in_flight, slots));
                }
                e.in_flight += 1;
            }
            MapEntry::Vacant(v) => {
                let room = self
                    .keys
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                        (n < self.max_keys).then_some(n + 1)
                    });
                if room.is_err() {
                    return Err(Saturated::table_full(limit, slots));
                }
                v.insert(Entry {
                    in_flight: 1,
                    queue: None,
                });
            }
        }
        Ok(())
    }

    /// Gives a slot of key `fp` back.
    pub(crate) fn release(&self, fp: u64) {
        let mut shard = self.shard(fp);
        self.release_locked(&mut shard, fp);
    }

    /// Gives a slot of key `fp` back with its shard locked: grants it to the key's waiters,
    /// or forgets the key if nothing is left in flight.
    pub(super) fn release_locked(&self, shard: &mut Shard, fp: u64) {
        if let MapEntry::Occupied(mut o) = shard.entry(fp) {
            let e = o.get_mut();
            e.in_flight = e.in_flight.saturating_sub(1);
            self.grant(e);
            if e.in_flight == 0 && e.queue.as_ref().is_none_or(|q| q.is_empty()) {
                o.remove();
                self.keys.fetch_sub(1, Ordering::SeqCst);
                // Shrink a mostly empty shard (amortised: it must lose half again to shrink
                // again), so one-off keys leave no memory behind.
                if shard.capacity() > 64 && shard.len() * 4 < shard.capacity() {
                    shard.shrink_to(shard.len() * 2);
                }
            }
        }
    }

    /// One entry fewer (removed under its shard's lock).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // reason: the waits' (feature tokio)
    pub(super) fn forget_one(&self) {
        self.keys.fetch_sub(1, Ordering::SeqCst);
    }

    /// Grants the key's open slots to its waiters (its shard locked).
    pub(super) fn grant(&self, e: &mut Entry) {
        let Entry { in_flight, queue } = e;
        let Some(q) = queue else { return };
        if q.waiting() == 0 {
            return;
        }
        let limit = self.limit();
        q.grant(|class| {
            let slots = self.slots(limit, class);
            if *in_flight >= slots {
                return Err(Saturated::limit_reached(limit, *in_flight, slots));
            }
            *in_flight += 1;
            Ok(())
        });
    }
}

/// A concurrency limit per key: at most `limit` permits out for each key, for at most
/// `max_keys` keys with permits out at once (see the [module docs](super)).
///
/// Keys are never stored, only their seeded 64-bit fingerprints. Clones share one table.
///
/// ```
/// use std::num::NonZeroU32;
/// use tollgate::concurrency::{KeyedConcurrencyLimiter, SaturatedReason};
///
/// let lim = KeyedConcurrencyLimiter::<String>::builder(NonZeroU32::new(1).unwrap())
///     .max_keys(2)
///     .build();
/// let a = lim.try_acquire_key("alice")?; // a borrowed key, as `check_key`
/// assert!(lim.try_acquire_key("alice").is_err());
/// let _b = lim.try_acquire_key("bob")?;
/// // Two keys have permits out: a third key is refused, not tracked past the bound.
/// let full = lim.try_acquire_key("carol").unwrap_err();
/// assert_eq!(full.reason(), SaturatedReason::TableFull);
/// drop(a); // alice has nothing in flight: forgotten
/// assert_eq!((lim.in_flight_key("alice"), lim.keys()), (0, 1));
/// assert!(lim.try_acquire_key("carol").is_ok());
/// # Ok::<(), tollgate::concurrency::Saturated>(())
/// ```
pub struct KeyedConcurrencyLimiter<K> {
    pub(super) core: Arc<KeyedCore>,
    key: PhantomData<fn(&K)>,
}

impl<K> Clone for KeyedConcurrencyLimiter<K> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
            key: PhantomData,
        }
    }
}

impl<K> KeyedConcurrencyLimiter<K> {
    /// The default bound on keys with permits out: 2^20.
    pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
    /// The largest bound a builder accepts: 2^32 − 1.
    pub const MAX_KEYS: usize = u32::MAX as usize;

    /// A limiter of `limit` permits per key, [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS).
    pub fn new(limit: NonZeroU32) -> Self {
        Self::builder(limit).build()
    }

    /// [`new`](Self::new) from a plain integer.
    ///
    /// # Errors
    ///
    /// [`LimitError::Zero`] for a limit of 0.
    pub fn try_new(limit: u32) -> Result<Self, LimitError> {
        NonZeroU32::new(limit)
            .map(Self::new)
            .ok_or(LimitError::Zero)
    }

    /// A builder: the bound on keys, priority classes, a bound on waits.
    pub fn builder(limit: NonZeroU32) -> KeyedConcurrencyLimiterBuilder<K> {
        KeyedConcurrencyLimiterBuilder {
            limit,
            max_keys: Self::DEFAULT_MAX_KEYS,
            priorities: None,
            #[cfg(feature = "tokio")]
            max_wait: None,
            key: PhantomData,
        }
    }

    /// A permit for `key` if it has a slot open, at once (class 0).
    ///
    /// This never waits, and may take a slot that frees while others wait in
    /// [`acquire_key`](Self::acquire_key) (feature `tokio`): the queue is fair among waiters.
    ///
    /// # Errors
    ///
    /// [`Saturated`]: the key's slots are all taken, or the key is new and the table holds
    /// `max_keys` keys with permits out.
    #[inline]
    pub fn try_acquire_key<Q>(&self, key: &Q) -> Result<Permit, Saturated>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.try_acquire_key_class(key, 0)
    }

    /// [`try_acquire_key`](Self::try_acquire_key) for a priority class.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_key`](Self::try_acquire_key), with the class's share of the slots.
    #[inline]
    pub fn try_acquire_key_class<Q>(&self, key: &Q, class: u8) -> Result<Permit, Saturated>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let fp = self.core.fingerprint(key);
        if let Err(s) = self.core.take(&mut self.core.shard(fp), fp, class) {
            // Relaxed: a statistic (see `saturations`).
            self.core.saturations.fetch_add(1, Ordering::Relaxed);
            return Err(s);
        }
        Ok(Permit::keyed(Arc::clone(&self.core), fp))
    }

    /// Acquires refused so far (any key), at once or after a wait.
    pub fn saturations(&self) -> u64 {
        self.core.saturations.load(Ordering::Relaxed)
    }

    /// The permits out now, summed over every key: one walk of the table (each shard's lock
    /// taken in turn), for a scrape rather than a request path. Not a snapshot: a key's
    /// count may change while another shard is read.
    pub fn in_flight_total(&self) -> u64 {
        (self.core.shards.iter())
            .map(|s| {
                s.0.lock()
                    .values()
                    .map(|e| u64::from(e.in_flight))
                    .sum::<u64>()
            })
            .sum()
    }

    /// The permits out for `key` (0 for a key not tracked).
    pub fn in_flight_key<Q>(&self, key: &Q) -> u32
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let fp = self.core.fingerprint(key);
        self.core.shard(fp).get(&fp).map_or(0, |e| e.in_flight)
    }

    /// Keys tracked now: those with permits out or waiters.
    pub fn keys(&self) -> usize {
        self.core.keys.load(Ordering::SeqCst)
    }

    /// The per-key limit in force.
    pub fn limit(&self) -> u32 {
        self.core.limit()
    }

    /// Changes the per-key limit, live: lowering it revokes nothing (each key's excess
    /// drains), raising it grants the new slots to every key's waiters.
    pub fn set_limit(&self, limit: NonZeroU32) {
        self.core.limit.store(limit.get(), Ordering::SeqCst);
        // Each shard is locked after the store: a waiter that enqueued before saw the old
        // limit and is granted here; one that locks after sees the new one.
        for shard in self.core.shards.iter() {
            let mut shard = shard.0.lock();
            for e in shard.values_mut() {
                self.core.grant(e);
            }
        }
    }

    /// [`set_limit`](Self::set_limit) from a plain integer.
    ///
    /// # Errors
    ///
    /// [`LimitError::Zero`] for 0 (the limit is left as it was).
    pub fn try_set_limit(&self, limit: u32) -> Result<(), LimitError> {
        let limit = NonZeroU32::new(limit).ok_or(LimitError::Zero)?;
        self.set_limit(limit);
        Ok(())
    }
}

impl<K> fmt::Debug for KeyedConcurrencyLimiter<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConcurrencyLimiter")
            .field("limit", &self.limit())
            .field("keys", &self.keys())
            .field("max_keys", &self.core.max_keys)
            .finish()
    }
}

/// Builds a [`KeyedConcurrencyLimiter`]: [`KeyedConcurrencyLimiter::builder`].
#[must_use = "a builder does nothing until build()"]
pub struct KeyedConcurrencyLimiterBuilder<K> {
    limit: NonZeroU32,
    max_keys: usize,
    priorities: Option<Priorities>,
    #[cfg(feature = "tokio")]
    max_wait: Option<Duration>,
    key: PhantomData<fn(&K)>,
}

impl<K> fmt::Debug for KeyedConcurrencyLimiterBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedConcurrencyLimiterBuilder")
            .field("limit", &self.limit)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl<K> KeyedConcurrencyLimiterBuilder<K> {
    /// The most keys with permits out at once (clamped to
    /// `1..=`[`MAX_KEYS`](KeyedConcurrencyLimiter::MAX_KEYS)).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.clamp(1, KeyedConcurrencyLimiter::<K>::MAX_KEYS);
        self
    }

    /// Priority classes, applied to each key's slots.
    pub fn priorities(mut self, priorities: Priorities) -> Self {
        let none = priorities.classes().all(|(_, r)| r == 0.0);
        self.priorities = (!none).then_some(priorities);
        self
    }

    /// The longest an [`acquire_key`](KeyedConcurrencyLimiter::acquire_key) waits (default:
    /// no bound).
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The limiter.
    pub fn build(self) -> KeyedConcurrencyLimiter<K> {
        let shards = (0..SHARDS)
            .map(|_| Padded(Mutex::new(Shard::default())))
            .collect();
        KeyedConcurrencyLimiter {
            core: Arc::new(KeyedCore {
                shards,
                limit: AtomicU32::new(self.limit.get()),
                keys: AtomicUsize::new(0),
                max_keys: self.max_keys,
                fingerprinter: Fingerprinter::new(),
                saturations: AtomicU64::new(0),
                priorities: self.priorities,
                #[cfg(feature = "tokio")]
                max_wait: self.max_wait,
            }),
            key: PhantomData,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_off_keys_leave_no_memory_behind() {
        let lim = KeyedConcurrencyLimiter::<u64>::try_new(1).unwrap(); // a test: a panic is its failure
        let mut held = std::collections::VecDeque::new();
        for k in 0..200_000u64 {
            held.push_back(lim.try_acquire_key(&k).unwrap()); // a test: a panic is its failure
            if held.len() > 100 {
                held.pop_front();
            }
        }
        held.clear();
        assert_eq!(lim.keys(), 0);
        let capacity: usize = lim.core.shards.iter().map(|s| s.0.lock().capacity()).sum();
        // 64 shards, each shrunk back to at most its floor of 64 slots (or less).
        assert!(capacity <= SHARDS * 128, "{capacity}");
    }
}
