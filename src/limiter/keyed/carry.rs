//! Carrying one key's state between two limiters (a staged rollout moves keys between the
//! old and the new document's limiters): time is carried over, so a move never hands out a
//! free burst.

use core::borrow::Borrow;
use core::hash::Hash;
use std::sync::atomic::Ordering;

use super::{Found, KeyedRateLimiter, WINDOW};
use crate::engine::cell::TOMBSTONE;

impl<K> KeyedRateLimiter<K> {
    /// The TAT of the key with fingerprint `fp`, if it is tracked and live.
    fn live_tat(&self, fp: u64) -> Option<u64> {
        let tat = match (fp, self.find(fp)) {
            (1.., Found::Slot(slot)) => self.tat_word(slot).load(Ordering::Acquire),
            _ => *self.slow.lock().spill.get(&fp)?,
        };
        (tat != TOMBSTONE && tat > self.now()).then_some(tat)
    }

    /// Starts the untracked key `fp` at `tat`, if there is room; a tracked key keeps its own.
    fn adopt(&self, fp: u64, tat: u64) {
        let mut slow = self.slow.lock();
        let now = self.now().max(slow.last_now);
        slow.last_now = now;
        if tat <= now || fp == 0 || self.capacity == 0 || slow.spill.contains_key(&fp) {
            return;
        }
        let home = self.home(fp);
        let (mut slot, mut free) = (home, None);
        for _ in 0..WINDOW {
            let key = self.key_word(slot).load(Ordering::Acquire);
            if key == fp {
                if self.tat_word(slot).load(Ordering::Acquire) != TOMBSTONE {
                    return;
                }
                free = Some((slot, false));
                break;
            }
            if key == 0 {
                free = free.or(Some((slot, true)));
                break;
            }
            if free.is_none() && self.tat_word(slot).load(Ordering::Acquire) == TOMBSTONE {
                free = Some((slot, false));
            }
            slot = self.next(slot);
        }
        let Some((slot, empty)) = free.or_else(|| Some((self.sweep_window(home, now)?, false)))
        else {
            return;
        };
        if self.len() < self.max_keys {
            self.install(&mut slow, slot, fp, empty, tat);
        }
    }
}

impl<K: Hash> KeyedRateLimiter<K> {
    /// If `key` is live in `from`, carries its place in time here: an untracked key starts at
    /// `from`'s TAT, a tracked one moves up to it if that is later. A key moving between the
    /// two limiters never gets a fresh burst; the clamp on its next check fits the TAT to this
    /// limiter's tolerance.
    pub(crate) fn carry_from<Q>(&self, from: &KeyedRateLimiter<K>, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let Some(tat) = from.live_tat(from.fingerprinter.fingerprint(key)) else {
            return;
        };
        let fp = self.fingerprinter.fingerprint(key);
        if fp != 0 {
            if let Found::Slot(slot) = self.find(fp) {
                let word = self.tat_word(slot);
                if word.load(Ordering::Acquire) != TOMBSTONE {
                    // Tracked here too: keep the later of the two places in time. `fetch_max`
                    // leaves a tombstone (u64::MAX) as it is.
                    word.fetch_max(tat, Ordering::AcqRel);
                    return;
                }
            }
        }
        self.adopt(fp, tat);
    }
}
