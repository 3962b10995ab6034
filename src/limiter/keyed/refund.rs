//! [`KeyedRateLimiter::refund_key`]: giving back a cost a key's cell admitted.

use crate::sync::atomic::Ordering;
use core::borrow::Borrow;
use core::hash::Hash;

use super::insert::Held;
use super::KeyedRateLimiter;
use crate::engine::refund;
use crate::engine::tagged;

impl<K: Hash> KeyedRateLimiter<K> {
    /// Gives back `n` units that a check of `key` admitted earlier: the key's TAT moves back by
    /// the weight of `n` units, but never before now — a refund returns the key's cell at most
    /// to full, never beyond, so it can never grant more than the burst. A refund right after
    /// the allow it undoes, at the same instant, restores the cell exactly.
    ///
    /// A key that is not tracked (never checked, swept after going idle, or sharing the
    /// overflow cell of a full table) is left alone: a refund never creates a key, and a new
    /// or idle key is full already. Keys sharing the overflow cell are not refunded either,
    /// since the cell is not theirs alone (a denied multi-limit request then keeps its charge
    /// there: conservative).
    ///
    /// `n` is counted in units of the quota in force when it is refunded. Lock-free for a
    /// tracked key (one compare-and-swap), safe against checks, moves in the table and quota
    /// changes racing it; a key being moved or spilled takes the insert lock. The refunded
    /// check stays counted as allowed in [`stats`](Self::stats); a retry's debit of the
    /// [`RetryBudget`](crate::shaping::RetryBudget) is not given back; a check the shadow denied
    /// during a pass-through wrote nothing to the key's cell and must not be refunded.
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, ManualClock};
    ///
    /// let lim = KeyedRateLimiter::<String>::builder("10/s".parse()?)
    ///     .clock(ManualClock::new())
    ///     .build();
    /// assert!(lim.check_key_n("alice", 6)?.is_permitted());
    /// lim.refund_key("alice", 6);
    /// assert_eq!(lim.check_key_n("alice", 0)?.allowed().map(|a| a.remaining()), Some(10));
    /// lim.refund_key("bob", 5); // never checked: nothing happens, no key is created
    /// assert_eq!(lim.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund_key<Q>(&self, key: &Q, n: u64)
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        if n == 0 {
            return;
        }
        let fp = self.fingerprinter.fingerprint(key);
        if self.refund_fast(fp, n).is_none() {
            self.refund_slow(fp, n);
        }
    }
}

impl<K> KeyedRateLimiter<K> {
    /// The lock-free refund of a tracked key found in the table; `None` sends it the locked
    /// way (not found, the slot died or changed hands, or a quota change moved under it).
    fn refund_fast(&self, fp: u64, n: u64) -> Option<()> {
        if fp == 0 {
            return None;
        }
        let place = self.table.find(fp)?;
        let snap = self.params.load();
        let (p, token) = place.gate.resolve(&snap);
        let w = p.refund_weight(n);
        let ours = || place.slot.key.load(Ordering::Acquire) == fp;
        let valid = || ours() && token.still_valid(&self.params, place.gate);
        let lowering = |tat| self.lowered_to(tat);
        let mask = tagged::mask_of(fp);
        refund::refund_word(&place.slot.tat, mask, self.now(), w, valid, lowering)
    }

    /// Under the insert lock, where keys do not move and quota changes wait: the key's live
    /// slot, or its spilled TAT; nothing if it is not tracked.
    #[cold]
    fn refund_slow(&self, fp: u64, n: u64) {
        let mut slow = self.slow.lock();
        let snap = self.params.load();
        let now = self.locked_now(&mut slow);
        if let Some(tat) = slow.spill.get_mut(&fp) {
            let p = Self::params_at(&snap, &self.spill_gate);
            *tat = refund::refunded(*tat, now, p.refund_weight(n));
            let tat = *tat;
            slow.saw_live(tat);
            return;
        }
        if let Held::Live(place) = self.held(fp) {
            let w = Self::params_at(&snap, place.gate).refund_weight(n);
            // Only this lock's holder moves or kills a slot: it stays ours.
            let (word, mask) = (&place.slot.tat, tagged::mask_of(fp));
            let _ = refund::refund_word(word, mask, now, w, || true, |_| {});
            if let Some(tat) = place.slot.tat_of(fp) {
                slow.saw_live(tat);
            }
        }
    }

    /// A lock-free refund is about to lower a TAT to `tat`: the sweep's bound on when a
    /// tracked key can go idle must not stay above it, or a full table would send new keys
    /// to the overflow cell while a refunded key could make room. Folded in under the insert
    /// lock ([`take_lowered`](Self::take_lowered)).
    fn lowered_to(&self, tat: u64) {
        // Relaxed: the insert path reads it under the lock it takes after any refund that
        // happens before it; a refund racing an insert may be ordered after it.
        if tat < self.refunded_min.load(Ordering::Relaxed) {
            self.refunded_min.fetch_min(tat, Ordering::Relaxed);
        }
    }

    /// Under the insert lock: the lowest TAT a lock-free refund wrote since the last call, if
    /// any, and resets it.
    pub(super) fn take_lowered(&self) -> Option<u64> {
        if self.refunded_min.load(Ordering::Relaxed) == u64::MAX {
            return None;
        }
        Some(self.refunded_min.swap(u64::MAX, Ordering::Relaxed))
    }
}
