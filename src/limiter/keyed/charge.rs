//! [`KeyedRateLimiter::charge_key`] and [`reset_key`](KeyedRateLimiter::reset_key): settling a
//! key's cost after the fact.

use crate::sync::atomic::Ordering;
use core::borrow::Borrow;
use core::hash::Hash;

use super::insert::Held;
use super::KeyedRateLimiter;
use crate::engine::charge::{self, Charged};
use crate::engine::tagged;

impl<K: Hash> KeyedRateLimiter<K> {
    /// Charges `key` `n` more units, whatever room its cell has: for a cost known only after
    /// the request ran (tokens a response reported, a login that failed). Past a drained cell
    /// the key is **in debt**: its checks are denied, with an exact retry-after that covers
    /// the debt, until time pays it off. The debt is capped by
    /// [`max_debt`](crate::limiter::KeyedRateLimiterBuilder::max_debt) (default zero); what
    /// does not fit is reported in [`Charged::unpaid`].
    ///
    /// Only a tracked key is charged: charge after the check that placed it. A key that is not
    /// tracked (never checked, swept after going idle, or sharing the overflow cell of a full
    /// table) is left alone and the whole charge is reported unpaid — a charge never creates a
    /// key, so a flood of charges for made-up keys cannot fill the table. Lock-free for a
    /// tracked key (one compare-and-swap); never panics, whatever `n`. Charges are not
    /// counted as checks in [`stats`](Self::stats).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedRateLimiter, ManualClock, Verdict};
    ///
    /// let lim = KeyedRateLimiter::<String>::builder("10/s".parse()?)
    ///     .clock(ManualClock::new())
    ///     .max_debt(Duration::from_secs(5))
    ///     .build();
    /// assert!(lim.check_key("alice").is_permitted());
    /// assert!(lim.charge_key("alice", 19).is_paid()); // 20 units in all: 1 s past drained
    /// match lim.check_key("alice") {
    ///     Verdict::Deny(d) => assert_eq!(d.retry_after(), Duration::from_millis(1_100)),
    ///     other => panic!("in debt, got {other:?}"),
    /// }
    /// assert_eq!(lim.charge_key("bob", 3).unpaid(), 3); // never checked: not charged
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn charge_key<Q>(&self, key: &Q, n: u64) -> Charged
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        if n == 0 {
            return Charged::new(0, 0);
        }
        let fp = self.fingerprinter.fingerprint(key);
        self.charge_fast(fp, n)
            .unwrap_or_else(|| self.charge_slow(fp, n))
    }

    /// Resets `key` to full, as if it had never been checked: a whole burst is available
    /// again and any debt is forgiven (an operator clearing one customer after an incident).
    /// A key that is not tracked is full already and is left alone; the overflow cell is not
    /// reset (it is not one key's).
    ///
    /// ```
    /// use tollgate::{KeyedRateLimiter, ManualClock};
    ///
    /// let lim = KeyedRateLimiter::<u64>::builder("1/min".parse()?).clock(ManualClock::new()).build();
    /// assert!(lim.check_key(&7).is_permitted());
    /// assert!(!lim.check_key(&7).is_permitted());
    /// lim.reset_key(&7);
    /// assert!(lim.check_key(&7).is_permitted());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn reset_key<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        // A refund of everything: never below now, so never beyond full.
        self.refund_key(key, u64::MAX);
    }
}

impl<K> KeyedRateLimiter<K> {
    /// The lock-free charge of a tracked key; `None` sends it the locked way.
    fn charge_fast(&self, fp: u64, n: u64) -> Option<Charged> {
        if fp == 0 {
            return None;
        }
        let place = self.table.find(fp)?;
        let snap = self.params.load();
        let (p, token) = place.gate.resolve(&snap);
        let w = p.weight_uncapped(n);
        let ours = || place.slot.key.load(Ordering::Acquire) == fp;
        let valid = || ours() && token.still_valid(&self.params, place.gate);
        let now = self.now();
        let mask = tagged::mask_of(fp);
        let (tat, applied) = charge::charge_word(&place.slot.tat, mask, now, w, p.bound(), valid)?;
        Some(p.charged(n, w, applied, tat, now))
    }

    /// Under the insert lock: the key's live slot or its spilled TAT; an untracked key is not
    /// charged (all unpaid).
    #[cold]
    fn charge_slow(&self, fp: u64, n: u64) -> Charged {
        let mut slow = self.slow.lock();
        let snap = self.params.load();
        let now = self.locked_now(&mut slow);
        if let Some(tat) = slow.spill.get_mut(&fp) {
            let p = Self::params_at(&snap, &self.spill_gate);
            let w = p.weight_uncapped(n);
            let (next, applied) = charge::outcome(*tat, now, w, p.bound());
            *tat = next;
            return p.charged(n, w, applied, next, now);
        }
        if let Held::Live(place) = self.held(fp) {
            let p = Self::params_at(&snap, place.gate);
            let w = p.weight_uncapped(n);
            // Only this lock's holder moves or kills a slot: it stays ours.
            let (word, mask) = (&place.slot.tat, tagged::mask_of(fp));
            if let Some((tat, applied)) =
                charge::charge_word(word, mask, now, w, p.bound(), || true)
            {
                return p.charged(n, w, applied, tat, now);
            }
        }
        Charged::new(n, 0)
    }
}
