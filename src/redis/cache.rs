//! The local deny cache: a key that Redis just denied is answered here, with no round trip,
//! until the earliest instant at which a one-unit check could conform again.
//!
//! An entry remembers a lower bound on the key's TAT (in the limiter's local time base): the
//! TAT the script reported, placed at the local reading taken *before* the call, so the bound
//! is never later than the server's. Other instances only raise a TAT, so a check that the
//! bound alone denies is denied by Redis too; its retry-after is the bound's, which is never
//! later than the true one. An entry expires at the retry time of a one-unit check, so it
//! never outlives any denial it answers, and a quota change clears the cache.

use std::collections::HashMap;

use crate::sync::Mutex;

/// One remembered denial: the TAT is at least `tat` (local µs) under tolerance `tau`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    tat: u64,
    tau: u64,
    /// `tat + unit − τ`: from here on a one-unit check may conform; the entry is dropped.
    expires: u64,
}

/// A bounded map from a key to its remembered denials, one slot per limit (looked up by
/// `&[u8]`, with no allocation).
#[derive(Debug)]
pub(crate) struct DenyCache {
    capacity: usize,
    map: Mutex<HashMap<Vec<u8>, Vec<Option<Entry>>>>,
}

impl DenyCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The retry-after (µs) of a check of weights `ws[i]` on limits `i` of `key` at `now`, if
    /// a remembered TAT alone denies it: the largest over the limits it denies.
    pub(crate) fn lookup(&self, key: &[u8], ws: &[u64], now: u64) -> Option<u64> {
        if self.capacity == 0 {
            return None;
        }
        let mut map = self.map.lock();
        if map.is_empty() {
            return None;
        }
        let slots = map.get_mut(key)?;
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
            map.remove(key);
        }
        retry
    }

    /// Remembers that limit `i` of `key` holds a TAT of at least `tat` (local µs) under `tau`,
    /// where one unit weighs `unit`.
    pub(crate) fn remember(&self, i: usize, key: &[u8], tat: u64, tau: u64, unit: u64, now: u64) {
        if self.capacity == 0 {
            return;
        }
        let expires = (tat + unit).saturating_sub(tau);
        if expires <= now {
            return;
        }
        let mut map = self.map.lock();
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

    /// Forgets `key` (this instance refunded, charged or reset it).
    pub(crate) fn forget(&self, key: &[u8]) {
        if self.capacity > 0 {
            self.map.lock().remove(key);
        }
    }

    /// Forgets everything (a quota changed).
    pub(crate) fn clear(&self) {
        self.map.lock().clear();
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_until_a_unit_could_conform_and_no_longer() {
        let c = DenyCache::new(4);
        // τ = 100, one unit weighs 10, TAT 100 ahead of now = 0: full. A unit conforms at 10.
        c.remember(0, b"k", 100, 100, 10, 0);
        assert_eq!(c.lookup(b"k", &[10], 0), Some(10));
        assert_eq!(c.lookup(b"k", &[30], 5), Some(25));
        assert_eq!(c.lookup(b"k", &[10], 9), Some(1));
        assert_eq!(
            c.lookup(b"k", &[10], 10),
            None,
            "expired at the unit's retry time"
        );
        assert_eq!(c.len(), 0);
        assert_eq!(c.lookup(b"other", &[10], 0), None);
    }

    #[test]
    fn stays_bounded() {
        let c = DenyCache::new(2);
        for k in 0..10u8 {
            c.remember(0, &[k], 1_000, 100, 10, 0);
        }
        assert_eq!(c.len(), 2);
        // Once those expire, new keys get in again.
        c.remember(0, b"late", 2_000, 100, 10, 1_000);
        assert_eq!(c.len(), 1);
    }
}
