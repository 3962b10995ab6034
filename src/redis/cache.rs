//! The local deny cache: a key that Redis just denied is answered here, with no round trip,
//! until the earliest instant at which a one-unit check could conform again.
//!
//! An entry remembers a lower bound on the key's TAT (in the limiter's local time base): the
//! TAT the script reported, placed at the local reading taken *before* the call, so the bound
//! is never later than the server's. Checks only raise a TAT, so while nothing lowers it a
//! check that the bound alone denies is denied by Redis too; its retry-after is the bound's,
//! which is never later than the true one. An entry expires at the retry time of a one-unit
//! check, so it never outlives any denial it answers, and a quota change clears the cache.
//!
//! Refunds and resets lower a TAT. This instance's own settle forgets the key before its call
//! and again after it, however the call ends, and each forget bumps the **epoch** of the key's
//! stripe under the cache's lock. A check reads the epoch (with its lookup) before its call
//! and remembers its denial only if the epoch is unchanged when the answer comes back. So a
//! denial Redis decided before one of this instance's refunds is never kept once the refund
//! has returned: either it is remembered before the second forget, which removes it, or after,
//! which the epoch refuses; and a check that read the epoch after the second forget reached
//! Redis after the refund. (The first forget alone would not do: a check reading the epoch
//! after it can still reach Redis before the refund does.) A refund or reset made by another
//! instance is not seen here: a denial cached here can outlast it by at most one retry-after,
//! when the entry expires.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use crate::sync::Mutex;

/// Stripes of keys with an epoch each: a settle of one key refuses the in-flight denials of
/// its stripe only, so a busy limiter's refunds do not keep every other customer uncached.
const STRIPES: usize = 64;

/// One remembered denial: the TAT is at least `tat` (local µs) under tolerance `tau`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    tat: u64,
    tau: u64,
    /// `tat + unit − τ`: from here on a one-unit check may conform; the entry is dropped.
    expires: u64,
}

/// The epoch of a key's stripe, read before a check's call: how many times a key of the
/// stripe was forgotten (or the cache cleared) so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Epoch(u64);

/// What the cache says of a check, before any call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    /// A remembered TAT alone denies it: the retry-after, µs.
    Denied(u64),
    /// Ask Redis; a denial it gives is remembered under this epoch (see the module doc).
    Ask(Epoch),
}

/// A bounded map from a key to its remembered denials, one slot per limit (looked up by
/// `&[u8]`, with no allocation), and the stripes' epochs.
#[derive(Debug)]
pub(crate) struct DenyCache {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    map: HashMap<Vec<u8>, Vec<Option<Entry>>>,
    /// Bumped by every forget of a key of the stripe, and all of them by a clear; only under
    /// the lock, which orders them with the reads of `lookup` and the test of `remember`.
    epochs: [u64; STRIPES],
}

impl State {
    fn stripe(&self, key: &[u8]) -> usize {
        // The map's own keyed hasher: a client cannot aim its keys at one stripe.
        (self.map.hasher().hash_one(key) % STRIPES as u64) as usize
    }
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            state: Mutex::new(State {
                map: HashMap::with_hasher(RandomState::new()),
                epochs: [0; STRIPES],
            }),
        }
    }

    /// Whether a check of weights `ws[i]` on limits `i` of `key` at `now` is denied by a
    /// remembered TAT alone (the retry-after: the largest over the limits it denies), or must
    /// ask Redis, under which epoch. An empty `ws` only reads the epoch.
    pub(crate) fn lookup(&self, key: &[u8], ws: &[u64], now: u64) -> Cached {
        if self.capacity == 0 {
            return Cached::Ask(Epoch(0));
        }
        let mut state = self.state.lock();
        let epoch = Epoch(state.epochs[state.stripe(key)]);
        let Some(slots) = state.map.get_mut(key) else {
            return Cached::Ask(epoch);
        };
        let mut retry = None;
        for (slot, &w) in slots.iter_mut().zip(ws) {
            let Some(e) = *slot else { continue };
            if now >= e.expires {
                *slot = None;
                continue;
            }
            let ahead = e.tat.max(now) - now + w;
            if ahead > e.tau {
                retry = retry.max(Some(ahead - e.tau));
            }
        }
        if slots.iter().all(Option::is_none) {
            state.map.remove(key);
        }
        retry.map_or(Cached::Ask(epoch), Cached::Denied)
    }

    /// Remembers that limit `i` of `key` holds a TAT of at least `tat` (local µs) under `tau`,
    /// where one unit weighs `unit` — unless the key's stripe was forgotten since `epoch` was
    /// read: Redis may have decided before a refund that has returned since.
    pub(crate) fn remember(
        &self,
        i: usize,
        key: &[u8],
        (tat, tau, unit): (u64, u64, u64),
        now: u64,
        epoch: Epoch,
    ) {
        if self.capacity == 0 {
            return;
        }
        let expires = (tat + unit).saturating_sub(tau);
        if expires <= now {
            return;
        }
        let mut state = self.state.lock();
        if state.epochs[state.stripe(key)] != epoch.0 {
            return;
        }
        let map = &mut state.map;
        if !map.contains_key(key) && map.len() >= self.capacity {
            map.retain(|_, slots| {
                slots.iter_mut().for_each(|s| {
                    if s.is_some_and(|e| e.expires <= now) {
                        *s = None;
                    }
                });
                slots.iter().any(Option::is_some)
            });
            if map.len() >= self.capacity {
                return;
            }
        }
        let slots = map.entry(key.to_vec()).or_default();
        if slots.len() <= i {
            slots.resize(i + 1, None);
        }
        slots[i] = Some(Entry { tat, tau, expires });
    }

    /// Forgets `key` and bumps its stripe's epoch (this instance refunds, charges or resets
    /// it: called before the settle's call and again after it).
    pub(crate) fn forget(&self, key: &[u8]) {
        if self.capacity > 0 {
            let mut state = self.state.lock();
            state.map.remove(key);
            let s = state.stripe(key);
            state.epochs[s] = state.epochs[s].wrapping_add(1);
        }
    }

    /// Forgets everything and bumps every epoch (a quota changed: a denial decided under the
    /// old quota must not be remembered under the new one).
    pub(crate) fn clear(&self) {
        let mut state = self.state.lock();
        state.map.clear();
        for e in &mut state.epochs {
            *e = e.wrapping_add(1);
        }
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(c: &DenyCache, key: &[u8], ws: &[u64], now: u64) -> Epoch {
        match c.lookup(key, ws, now) {
            Cached::Ask(e) => e,
            Cached::Denied(r) => panic!("expected a miss, got a denial of {r} µs"),
        }
    }

    #[test]
    fn answers_until_a_unit_could_conform_and_no_longer() {
        let c = DenyCache::new(4);
        let e = ask(&c, b"k", &[10], 0);
        // τ = 100, one unit weighs 10, TAT 100 ahead of now = 0: full. A unit conforms at 10.
        c.remember(0, b"k", (100, 100, 10), 0, e);
        assert_eq!(c.lookup(b"k", &[10], 0), Cached::Denied(10));
        assert_eq!(c.lookup(b"k", &[30], 5), Cached::Denied(25));
        assert_eq!(c.lookup(b"k", &[10], 9), Cached::Denied(1));
        assert_eq!(
            c.lookup(b"k", &[10], 10),
            Cached::Ask(e),
            "expired at the unit's retry time"
        );
        assert_eq!(c.len(), 0);
        assert_eq!(
            c.lookup(b"other", &[10], 0),
            Cached::Ask(ask(&c, b"other", &[], 0))
        );
    }

    #[test]
    fn stays_bounded() {
        let c = DenyCache::new(2);
        for k in 0..10u8 {
            let e = ask(&c, &[k], &[10], 0);
            c.remember(0, &[k], (1_000, 100, 10), 0, e);
        }
        assert_eq!(c.len(), 2);
        // Once those expire, new keys get in again.
        let e = ask(&c, b"late", &[10], 1_000);
        c.remember(0, b"late", (2_000, 100, 10), 1_000, e);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn a_denial_read_before_a_forget_is_not_remembered() {
        let c = DenyCache::new(4);
        // A check reads the epoch and goes to Redis; this instance's refund forgets the key
        // (before its call, or after it) while the check's denial is on its way back.
        let before = ask(&c, b"k", &[10], 0);
        c.forget(b"k");
        c.remember(0, b"k", (100, 100, 10), 0, before);
        assert_eq!(
            c.len(),
            0,
            "a denial Redis may have decided before the refund"
        );
        assert_ne!(ask(&c, b"k", &[10], 0), before);
        // A check that read the epoch after the forget is remembered.
        let after = ask(&c, b"k", &[10], 0);
        c.remember(0, b"k", (100, 100, 10), 0, after);
        assert_eq!(c.lookup(b"k", &[10], 0), Cached::Denied(10));
        // Remembered between the settle's two forgets: the second one removes it.
        c.forget(b"k");
        assert_eq!(c.lookup(b"k", &[10], 0), Cached::Ask(ask(&c, b"k", &[], 0)));
    }

    #[test]
    fn a_forget_refuses_only_its_own_stripe_and_a_clear_refuses_all() {
        let c = DenyCache::new(4);
        let stripe = |k: &[u8]| c.state.lock().stripe(k);
        let other = (0..=255u8)
            .map(|b| vec![b])
            .find(|k| stripe(k) != stripe(b"k"))
            .expect("256 keys do not all share one stripe of 64"); // test
        let e = ask(&c, &other, &[10], 0);
        c.forget(b"k");
        c.remember(0, &other, (100, 100, 10), 0, e);
        assert_eq!(c.lookup(&other, &[10], 0), Cached::Denied(10));
        let e = ask(&c, b"k", &[10], 0);
        c.clear();
        c.remember(0, b"k", (100, 100, 10), 0, e);
        assert_eq!(c.len(), 0, "decided under the quota before the change");
    }

    #[test]
    fn a_zero_capacity_cache_holds_nothing() {
        let c = DenyCache::new(0);
        let e = ask(&c, b"k", &[10], 0);
        c.remember(0, b"k", (100, 100, 10), 0, e);
        assert_eq!(c.lookup(b"k", &[10], 0), Cached::Ask(e));
    }
}
