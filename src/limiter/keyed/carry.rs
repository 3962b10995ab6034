//! Carrying one key's state between two limiters (a staged rollout moves keys between the
//! old and the new document's limiters): the key's fill level is carried over, as for a quota
//! change, so a move never hands out a free burst.

use core::borrow::Borrow;
use core::hash::Hash;
use std::sync::atomic::Ordering;

use super::insert::Held;
use super::{store, KeyedRateLimiter};
use crate::engine::cell::TOMBSTONE;
use crate::engine::gcra;

impl<K> KeyedRateLimiter<K> {
    /// The key with fingerprint `fp`, if it is tracked and live: its TAT, the tolerance it
    /// was written under, and the instant read.
    fn live_fill(&self, fp: u64) -> Option<(u64, u64, u64)> {
        let snap = self.params.load();
        let (tat, tau) = match (fp, self.table.find(fp)) {
            (1.., Some(place)) => {
                let (p, _) = place.gate.resolve(&snap);
                (place.slot.tat.load(Ordering::Acquire), p.tau)
            }
            _ => {
                let slow = self.slow.lock();
                (
                    *slow.spill.get(&fp)?,
                    Self::params_at(&snap, &self.spill_gate).tau,
                )
            }
        };
        let now = self.now();
        (tat != TOMBSTONE && tat > now).then_some((tat, tau, now))
    }

    /// Starts the untracked key `fp` at the fill level `(tat, tau_from, at)` carried from
    /// another limiter, if there is room; a tracked key moves up to it if that is later.
    fn adopt(&self, fp: u64, (tat, tau_from, at): (u64, u64, u64)) {
        let mut slow = self.slow.lock();
        let now = self.locked_now(&mut slow).max(at);
        let snap = self.params.load();
        let fill = |tau_to: u64| gcra::rescale(tat, now, tau_from, tau_to);
        if let Some(own) = slow.spill.get_mut(&fp) {
            let tau = Self::params_at(&snap, &self.spill_gate).tau;
            *own = (*own).max(fill(tau));
            return;
        }
        self.grow(&mut slow, &snap, now);
        let dead = match self.held(fp) {
            Held::Live(place) => {
                // Tracked: keep the later of the two fill levels. Under the insert lock, so
                // the group's generation cannot change; `fetch_max` leaves a tombstone
                // (u64::MAX) as it is, and races allows harmlessly.
                let tau = Self::params_at(&snap, place.gate).tau;
                place.slot.tat.fetch_max(fill(tau), Ordering::AcqRel);
                return;
            }
            Held::Dead(place) => Some(place),
            Held::Absent => None,
        };
        let Some(place) = dead.or_else(|| self.room_for(&mut slow, fp, &snap, now)) else {
            return;
        };
        let tat = fill(Self::params_at(&snap, place.gate).tau);
        if tat > now && self.len() < self.max_keys {
            store::install(place.slot, fp, tat);
            self.inserted(&mut slow, tat);
        }
    }
}

impl<K: Hash> KeyedRateLimiter<K> {
    /// If `key` is live in `from`, carries its fill level here: if it has used a share `u` of
    /// its burst there, it has used (at least) the same share of this limiter's burst. An
    /// untracked key starts there, a tracked one moves up to it if that is fuller. A key
    /// moving between the two limiters never gets a fresh burst, and never loses more than
    /// its share.
    pub(crate) fn carry_from<Q>(&self, from: &KeyedRateLimiter<K>, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        if let Some(fill) = from.live_fill(from.fingerprinter.fingerprint(key)) {
            self.adopt(self.fingerprinter.fingerprint(key), fill);
        }
    }
}
