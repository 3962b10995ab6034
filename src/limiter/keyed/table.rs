//! The key table's internals: probing, the insert path, sweeping, the overflow cell.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Ask, Found, KeyedRateLimiter, Slow, Swept, WINDOW};
use crate::engine::cell::{self, Attempt, SharedParams, TOMBSTONE};
use crate::engine::gcra::{self, Outcome, Params};
use crate::engine::verdict::{Denied, DenyReason, PassReason, Verdict};
use crate::limiter::guard::{self, Guard};

impl<K> KeyedRateLimiter<K> {
    #[inline]
    pub(super) fn key_word(&self, slot: usize) -> &AtomicU64 {
        &self.slots[2 * slot]
    }

    #[inline]
    pub(super) fn tat_word(&self, slot: usize) -> &AtomicU64 {
        &self.slots[2 * slot + 1]
    }

    /// The home slot of `fp`: multiply-shift range reduction (any capacity, high bits used).
    #[inline]
    pub(super) fn home(&self, fp: u64) -> usize {
        // The product of a u64 and a usize capacity shifted right 64 is below the capacity.
        ((u128::from(fp) * self.capacity as u128) >> 64) as usize
    }

    /// Finds `fp` in its window without locking.
    #[inline]
    pub(super) fn find(&self, fp: u64) -> Found {
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
    pub(super) fn now(&self) -> u64 {
        match &self.guard {
            None => self.clock.now_nanos(),
            Some(g) => g.now(&self.clock),
        }
    }

    #[inline]
    pub(super) fn step_key(&self, ask: Ask, p: &Params) -> Verdict {
        match &self.guard {
            None => self.step_key_enforcing(ask, p),
            Some(g) => self.step_key_guarded(g, ask, p),
        }
    }

    #[inline]
    pub(super) fn step_key_guarded(&self, g: &Guard, ask: Ask, p: &Params) -> Verdict {
        let v = match g.pass_reason() {
            None => self.step_key_enforcing(ask, p),
            Some(reason) => self.step_key_passing(ask, p, reason, g.ceiling(p, ask.w)),
        };
        g.observe(&v, Some(ask.fp), ask.retry, || self.now());
        v
    }

    /// During a pass-through: the shadow step, under the ceiling, on the key's own cell.
    #[cold]
    #[inline(never)]
    pub(super) fn step_key_passing(
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
    pub(super) fn step_key_enforcing(&self, ask: Ask, p: &Params) -> Verdict {
        let Ask { fp, w, .. } = ask;
        if fp != 0 {
            if let Found::Slot(slot) = self.find(fp) {
                let now = self.now();
                let key = self.key_word(slot);
                let ours = || key.load(Ordering::Acquire) == fp;
                if let Some(v) = cell::step_within(
                    self.tat_word(slot),
                    Attempt { now, p, w },
                    ask.reserve.tolerance(p),
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

    pub(super) fn peek_fp(&self, fp: u64, p: &Params, w: u64) -> Verdict {
        let v = self.peek_enforcing(fp, p, w);
        match self.guard.as_ref().and_then(|g| g.pass_reason()) {
            Some(reason) if w > 0 => guard::pass(v, reason),
            _ => v,
        }
    }

    pub(super) fn peek_enforcing(&self, fp: u64, p: &Params, w: u64) -> Verdict {
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
    pub(super) fn step_slow(&self, ask: Ask, p: &Params) -> Verdict {
        let Ask { fp, w, .. } = ask;
        let tol = ask.reserve.tolerance(p);
        let mut slow = self.slow.lock();
        // Read under the lock, so the instants of successive sweeps and placements never go
        // backwards: a slot's new TAT (`now + w`) then exceeds every TAT it held before it was
        // swept (`≤ now`), and a stale reader's CAS on the old value cannot land on the new key.
        let now = self.now().max(slow.last_now);
        slow.last_now = now;
        if let Some(tat) = slow.spill.get_mut(&fp) {
            return step_plain(tat, now, p, w, tol);
        }
        if self.len() >= self.max_keys && now < slow.idle_not_before {
            // Full of keys none of which can be idle yet: nothing to sweep or revive.
            drop(slow);
            return self.step_overflow(now, p, ask);
        }
        if fp != 0 {
            if let Some(v) = self.step_in_window(&mut slow, now, p, ask) {
                return v;
            }
        }
        if self.len() >= self.max_keys && self.sweep_some(&mut slow, now) && fp != 0 {
            if let Some(v) = self.step_in_window(&mut slow, now, p, ask) {
                return v;
            }
        }
        if self.len() >= self.max_keys {
            drop(slow);
            return self.step_overflow(now, p, ask);
        }
        // The window has no room (rare), or fp is 0 (which marks empty slots): the key spills.
        let mut tat = 0;
        let v = step_plain(&mut tat, now, p, w, tol);
        if tat != 0 {
            slow.spill.insert(fp, tat);
            self.spilled.store(slow.spill.len(), Ordering::Relaxed);
            self.inserted(&mut slow, tat);
        }
        v
    }

    /// Under the lock: the key's own slot (live or dead), else a free one in its window.
    /// `None` if the window has no room or the table is full.
    pub(super) fn step_in_window(
        &self,
        slow: &mut Slow,
        now: u64,
        p: &Params,
        ask: Ask,
    ) -> Option<Verdict> {
        if self.capacity == 0 {
            return None;
        }
        let Ask { fp, w, .. } = ask;
        let tol = ask.reserve.tolerance(p);
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
                    let a = Attempt { now, p, w };
                    return cell::step_within(tat, a, tol, DenyReason::Quota, ours, || now);
                }
                if self.len() >= self.max_keys {
                    return None;
                }
                return Some(self.place(slow, slot, false, now, p, ask));
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
        // Sweep only when the window has no free slot: a key revisited after going idle then
        // keeps its slot (and its lock-free path) unless the room is needed.
        let (slot, empty) = match free {
            Some(free) => free,
            None => (self.sweep_window(home, now)?, false),
        };
        if self.len() >= self.max_keys {
            return None;
        }
        Some(self.place(slow, slot, empty, now, p, ask))
    }

    #[inline]
    pub(super) fn next(&self, slot: usize) -> usize {
        if slot + 1 == self.capacity {
            0
        } else {
            slot + 1
        }
    }

    /// Frees the first idle slot in the window starting at `home`, if any.
    pub(super) fn sweep_window(&self, home: usize, now: u64) -> Option<usize> {
        let mut slot = home;
        for _ in 0..WINDOW {
            if !matches!(self.sweep_slot(slot, now), Swept::Live(_)) {
                return Some(slot);
            }
            slot = self.next(slot);
        }
        None
    }

    /// Marks `slot` dead if it is idle (TAT ≤ now).
    pub(super) fn sweep_slot(&self, slot: usize, now: u64) -> Swept {
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

    /// Places the asking key in `slot` (empty, or dead) with the TAT its first step leaves.
    pub(super) fn place(
        &self,
        slow: &mut Slow,
        slot: usize,
        empty: bool,
        now: u64,
        p: &Params,
        ask: Ask,
    ) -> Verdict {
        let Ask { fp, w, .. } = ask;
        let mut tat = 0;
        let v = step_plain(&mut tat, now, p, w, ask.reserve.tolerance(p));
        if tat == 0 {
            return v; // An overflow denial: nothing to remember.
        }
        self.install(slow, slot, fp, empty, tat);
        v
    }

    /// Writes `fp` with `tat` into `slot` (empty, or dead), under the insert lock.
    pub(super) fn install(&self, slow: &mut Slow, slot: usize, fp: u64, empty: bool, tat: u64) {
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
    }

    pub(super) fn inserted(&self, slow: &mut Slow, tat: u64) {
        self.len.fetch_add(1, Ordering::Relaxed);
        slow.idle_not_before = slow.idle_not_before.min(tat);
        slow.pass_min = slow.pass_min.min(tat);
    }

    /// Before giving up on a full table: if some key can be idle by now, sweep on from the
    /// cursor until one idle key is freed or a whole pass is done. Each slot is visited once
    /// per pass, and a pass that finds nothing records the earliest instant a tracked key can
    /// go idle, so full-table arrivals before then cost nothing. Returns `true` if it freed a
    /// key.
    pub(super) fn sweep_some(&self, slow: &mut Slow, now: u64) -> bool {
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

    pub(super) fn overflow_params(&self, p: &Params) -> Params {
        self.overflow.params.as_ref().map_or(*p, SharedParams::load)
    }

    /// New keys share the overflow cell when the table is full. A cost above the overflow
    /// cell's own burst (or its class's share of it) can never pass it: denied, with a
    /// retry-after of `u64::MAX` ns.
    pub(super) fn step_overflow(&self, now: u64, p: &Params, ask: Ask) -> Verdict {
        let op = self.overflow_params(p);
        let tol = ask.reserve.tolerance(&op);
        let Some(w) = op.weight(ask.cost).filter(|&w| w <= tol) else {
            return Verdict::Deny(Denied::new(u64::MAX, DenyReason::KeyTableFull));
        };
        let a = Attempt { now, p: &op, w };
        cell::step_word(
            &self.overflow.tat.0,
            a,
            tol,
            DenyReason::KeyTableFull,
            || self.now(),
        )
    }
}

/// One step on a TAT held under a lock, for a class of tolerance `tol ≤ τ` (the clamp uses
/// the full τ, as in [`cell::step_within`]).
pub(super) fn step_plain(tat: &mut u64, now: u64, p: &Params, w: u64, tol: u64) -> Verdict {
    let clamped = gcra::clamp(*tat, now, p.tau);
    let outcome = gcra::step(clamped, now, w, tol);
    *tat = match outcome {
        Outcome::Allow { tat, .. } => tat,
        _ => clamped,
    };
    cell::verdict(outcome, &p.within(tol), DenyReason::Quota)
}
