//! Sweeping idle keys to make room, and rescaling every key's cell for a quota change.

use crate::sync::atomic::Ordering;

use super::grow::tat_words;
use super::store::{Slot, SLOTS};
use super::{KeyedRateLimiter, Slow, Swept};
use crate::engine::cell::TOMBSTONE;
use crate::engine::gcra::{self, Params};
use crate::engine::tagged;

impl<K> KeyedRateLimiter<K> {
    /// A quota change from `old` to `new` (generation `gen`, already published): rescales the
    /// spilled keys, the overflow cell (if it follows the per-key quota) and then the table,
    /// one group of [`GROUP`](super::GROUP) slots at a time, each under the insert lock, so
    /// that a key placed during the change is placed under the parameters of its group's
    /// generation. Checks of tracked keys go on lock-free meanwhile; one whose group is being
    /// rescaled waits for that group only.
    ///
    /// The table may grow meanwhile: the walk reads how far the table reaches under the lock
    /// at each group, and skips groups already at `gen` — groups born during the change, empty
    /// then, whose keys were placed under the new parameters. Keys move only between groups at
    /// the same generation, so every TAT is rescaled exactly once.
    ///
    /// `now` was read before the change began: no user code (a clock) runs during it, so a
    /// panicking clock cannot leave groups in two generations. Under the lock it is raised to
    /// the latest reading taken there, so readings under the lock never go backwards.
    pub(super) fn rescale_all(&self, old: &Params, new: &Params, gen: u64, now: u64) {
        let at = |slow: &mut Slow| {
            let now = now.max(slow.last_now);
            slow.last_now = now;
            now
        };
        {
            let mut slow = self.slow.lock();
            let now = at(&mut slow);
            for tat in slow.spill.values_mut() {
                *tat = gcra::rescale(*tat, now, old.tau, new.tau);
            }
            self.spill_gate.mark(gen);
            if self.overflow.params.is_none() {
                let word = &self.overflow.tat.0;
                self.overflow.gate.rescale(gen, [(word, 0)], old, new, now);
            }
            // A lower τ may make keys idle earlier than the last sweep pass saw.
            slow.idle_not_before = 0;
            slow.pass_min = 0;
        }
        for group in 0.. {
            let mut slow = self.slow.lock();
            let Some((gate, buckets)) = self.table.group(group) else {
                break;
            };
            if gate.is_at(gen) {
                continue;
            }
            let now = at(&mut slow);
            gate.rescale(gen, tat_words(buckets), old, new, now);
        }
    }

    /// A clock reading under the insert lock, never behind an earlier one taken under it.
    pub(super) fn locked_now(&self, slow: &mut Slow) -> u64 {
        let now = self.now().max(slow.last_now);
        slow.last_now = now;
        now
    }

    /// Marks `slot` dead if it is idle (TAT ≤ now). Under the insert lock, so the slot's key
    /// stays put and its mask decodes the word.
    pub(super) fn sweep_slot(&self, slot: &Slot, now: u64) -> Swept {
        let tat = &slot.tat;
        let mask = tagged::mask_of(slot.key.load(Ordering::Relaxed));
        let mut raw = tat.load(Ordering::Acquire);
        // The CAS races allows on the same word: if an allow lands first the CAS fails and the
        // key stays; if the CAS lands first the allow's CAS fails, sees the tombstone and
        // revives the key under this same lock. No update is lost either way.
        while raw != TOMBSTONE && tagged::decode(raw, mask) <= now {
            match tat.compare_exchange(raw, TOMBSTONE, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.len.fetch_sub(1, Ordering::Relaxed);
                    return Swept::Freed;
                }
                Err(actual) => raw = actual,
            }
        }
        if raw == TOMBSTONE {
            Swept::Dead
        } else {
            Swept::Live(tagged::decode(raw, mask))
        }
    }

    /// Before giving up on a full table: if some key can be idle by `now` (the instant a swept
    /// key's TAT must not exceed: the clock, or earlier for a newcomer admission lets take only
    /// keys idle for τ), sweep on from the cursor until one idle key is freed or a whole pass
    /// is done. Each slot is visited once
    /// per pass (a key moved behind the cursor counts as seen, with its TAT), and a pass that
    /// finds nothing records the earliest instant a tracked key can go idle, so full-table
    /// arrivals before then cost nothing. Returns `true` if it freed a key.
    pub(super) fn sweep_some(&self, slow: &mut Slow, now: u64) -> bool {
        if now < slow.idle_not_before {
            return false;
        }
        let before = slow.spill.len();
        let filter = &mut slow.filter;
        slow.spill.retain(|&fp, tat| {
            let live = *tat > now;
            if !live {
                filter.saw_swept(fp);
            }
            live
        });
        if slow.spill.len() < before {
            self.len
                .fetch_sub(before - slow.spill.len(), Ordering::Relaxed);
            self.spilled.store(slow.spill.len(), Ordering::Release);
            return true;
        }
        let slots = SLOTS * self.table.buckets_in_use();
        for _ in 0..slots {
            let i = slow.cursor;
            let (fp, swept) = match self.table.slot(i) {
                Some(slot) => {
                    let fp = slot.key.load(Ordering::Relaxed);
                    (
                        fp,
                        if fp == 0 {
                            Swept::Dead
                        } else {
                            self.sweep_slot(slot, now)
                        },
                    )
                }
                None => (0, Swept::Dead),
            };
            if let Swept::Live(tat) = swept {
                slow.pass_min = slow.pass_min.min(tat);
            }
            slow.cursor = i + 1;
            if slow.cursor >= slots {
                let spill_min = slow.spill.values().copied().min().unwrap_or(u64::MAX);
                slow.idle_not_before = slow.pass_min.min(spill_min);
                slow.pass_min = u64::MAX;
                slow.cursor = 0;
            }
            if let Swept::Freed = swept {
                slow.filter.saw_swept(fp);
                return true;
            }
        }
        false
    }
}
