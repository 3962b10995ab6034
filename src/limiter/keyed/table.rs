//! The key table's internals: probing, the check paths, the insert path, the overflow cell.
//! Sweeping idle keys and rescaling for a quota change are in `sweep.rs`.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Ask, Found, KeyedRateLimiter, Slow, GROUP, WINDOW};
use crate::engine::cell::{self, Attempt, TOMBSTONE};
use crate::engine::error::InsufficientCapacity;
use crate::engine::gcra::{self, Outcome, Params};
use crate::engine::params::{Gate, Snapshot, Token};
use crate::engine::verdict::{Denied, DenyReason, PassReason, Verdict};
use crate::limiter::guard::{self, Guard};
use crate::shaping::priority;

impl<K> KeyedRateLimiter<K> {
    #[inline]
    pub(super) fn key_word(&self, slot: usize) -> &AtomicU64 {
        &self.slots[2 * slot]
    }

    #[inline]
    pub(super) fn tat_word(&self, slot: usize) -> &AtomicU64 {
        &self.slots[2 * slot + 1]
    }

    /// The gate of the group `slot` belongs to.
    #[inline]
    pub(super) fn gate_of(&self, slot: usize) -> &Gate {
        &self.gates[slot / GROUP]
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

    #[inline(always)]
    pub(super) fn now(&self) -> u64 {
        match &self.guard {
            None => self.clock.now_nanos(),
            Some(g) => g.now(&self.clock),
        }
    }

    /// The parameters for words behind `gate` under `snap`, for callers that hold the insert
    /// lock (a change rescales a group only under it, so the answer cannot move).
    pub(super) fn params_at(snap: &Snapshot, gate: &Gate) -> Params {
        match snap.prev {
            Some(prev) if !gate.is_at(snap.gen) => prev,
            _ => snap.cur,
        }
    }

    /// The weight of the check under `p` (its class's share of the tolerance), or the error
    /// if its cost does not fit.
    #[inline]
    pub(super) fn weight(p: &Params, ask: &Ask) -> Result<u64, InsufficientCapacity> {
        priority::weight_within(p, ask.cost, ask.reserve.tolerance(p))
    }

    /// Finds the asking key lock-free and resolves the parameters its cell is under: the
    /// slot, the parameters, the check's weight under them, and the token to re-validate.
    /// `None` if the key must take the insert path.
    #[inline(always)]
    fn locate(&self, ask: &Ask, snap: &Snapshot) -> Option<(usize, Params, u64, Token)> {
        if ask.fp == 0 {
            return None;
        }
        let Found::Slot(slot) = self.find(ask.fp) else {
            return None;
        };
        let gate = self.gate_of(slot);
        let (p, token) = gate.resolve(snap);
        if snap.prev.is_none() {
            return Some((slot, p, ask.w, token));
        }
        match Self::weight(&p, ask) {
            Ok(w) => Some((slot, p, w, token)),
            Err(_) => {
                // Fits the new quota but not the previous one, on a cell the change has not
                // reached yet: wait for it, then use the new quota.
                gate.wait_for(snap.gen);
                let (p, token) = gate.resolve(snap);
                Some((slot, p, Self::weight(&p, ask).ok()?, token))
            }
        }
    }

    #[inline]
    pub(super) fn step_key(&self, ask: Ask, snap: &Snapshot) -> Verdict {
        match &self.guard {
            None => {
                let v = self.step_key_enforcing(ask, snap);
                self.counters.count(&v);
                v
            }
            Some(g) => self.step_key_guarded(g, ask, snap),
        }
    }

    #[inline]
    pub(super) fn step_key_guarded(&self, g: &Guard, ask: Ask, snap: &Snapshot) -> Verdict {
        let now = self.now();
        let v = match g.pass_reason(now) {
            None => self.step_key_enforcing(ask, snap),
            Some(reason) => self.step_key_passing(g, ask, snap, reason),
        };
        g.observe(&self.counters, &v, Some(ask.fp), ask.retry, || now);
        v
    }

    /// During a pass-through: the shadow step on the key's own cell, and a shadow denial
    /// under the key's ceiling cell.
    #[cold]
    #[inline(never)]
    pub(super) fn step_key_passing(
        &self,
        g: &Guard,
        ask: Ask,
        snap: &Snapshot,
        reason: PassReason,
    ) -> Verdict {
        if let Some((slot, p, w, token)) = self.locate(&ask, snap) {
            let (key, gate) = (self.key_word(slot), self.gate_of(slot));
            let valid =
                || key.load(Ordering::Acquire) == ask.fp && token.still_valid(&self.params, gate);
            let a = Attempt {
                now: self.now(),
                p: &p,
                w,
            };
            let tol = ask.reserve.tolerance(&p);
            let ceiling = |retry_after| g.ceiling_key(ask.fp, a, reason, retry_after);
            let tat = self.tat_word(slot);
            if let Some(v) =
                cell::step_pass_through(tat, a, tol, reason, valid, || self.now(), ceiling)
            {
                return v;
            }
        }
        guard::pass(self.step_slow(ask), reason)
    }

    #[inline]
    pub(super) fn step_key_enforcing(&self, ask: Ask, snap: &Snapshot) -> Verdict {
        if let Some((slot, p, w, token)) = self.locate(&ask, snap) {
            let now = self.now();
            let (key, gate) = (self.key_word(slot), self.gate_of(slot));
            let valid =
                || key.load(Ordering::Acquire) == ask.fp && token.still_valid(&self.params, gate);
            if let Some(v) = cell::step_within(
                self.tat_word(slot),
                Attempt { now, p: &p, w },
                ask.reserve.tolerance(&p),
                DenyReason::Quota,
                valid,
                || self.now(),
            ) {
                return v;
            }
        }
        self.step_slow(ask)
    }

    pub(super) fn peek_fp(&self, fp: u64, cost: u64, tol_of: impl Fn(&Params) -> u64) -> Verdict {
        let now = self.now();
        let v = self.peek_enforcing(fp, cost, now, tol_of);
        match self.guard.as_ref().and_then(|g| g.pass_reason(now)) {
            Some(reason) if cost > 0 => guard::pass(v, reason),
            _ => v,
        }
    }

    /// What a check of `cost` for `fp` would say at `now`, under its class's tolerance.
    fn peek_enforcing(
        &self,
        fp: u64,
        cost: u64,
        now: u64,
        tol_of: impl Fn(&Params) -> u64,
    ) -> Verdict {
        let snap = self.params.load();
        let eval = |tat: u64, p: &Params, reason| {
            let within = p.within(tol_of(p));
            let w = if cost == 0 {
                0
            } else {
                p.weight(cost).unwrap_or(within.tau.saturating_add(1))
            };
            cell::evaluate(tat, now, &within, w, reason)
        };
        let found = match (fp, self.find(fp)) {
            (1.., Found::Slot(slot)) => {
                let (p, _) = self.gate_of(slot).resolve(&snap);
                Some((self.tat_word(slot).load(Ordering::Acquire), p))
            }
            _ if self.spilled.load(Ordering::Relaxed) == 0 => None,
            _ => {
                let slow = self.slow.lock();
                let p = Self::params_at(&snap, &self.spill_gate);
                slow.spill.get(&fp).map(|&tat| (tat, p))
            }
        };
        match found {
            Some((tat, p)) if tat != TOMBSTONE => eval(tat, &p, DenyReason::Quota),
            // A new key: fresh if it would be tracked, else it would share the overflow cell.
            _ if self.len() < self.max_keys => eval(0, &snap.cur, DenyReason::Quota),
            _ => {
                let op = self.overflow_params(&snap);
                let within = op.within(tol_of(&op));
                let w = if cost == 0 {
                    0
                } else {
                    op.weight(1).unwrap_or(op.tau)
                };
                let tat = self.overflow.tat.0.load(Ordering::Relaxed);
                cell::evaluate(tat, now, &within, w, DenyReason::KeyTableFull)
            }
        }
    }

    /// The insert path: new keys, revivals, spilled keys and the overflow cell. Takes the
    /// insert lock and resolves the parameters of whatever cell it steps anew under it.
    #[cold]
    pub(super) fn step_slow(&self, ask: Ask) -> Verdict {
        loop {
            let mut slow = self.slow.lock();
            let snap = self.params.load();
            // Read under the lock, so the instants of successive sweeps and placements never
            // go backwards: a slot's new TAT (`now + w`) then exceeds every TAT it held before
            // it was swept (`≤ now`), and a stale reader's CAS on the old value cannot land on
            // the new key.
            let now = self.now().max(slow.last_now);
            slow.last_now = now;
            match self.step_locked(&mut slow, &snap, now, ask) {
                Ok(Step::Done(v)) => return v,
                Ok(Step::Overflow) => {
                    // The overflow cell is stepped lock-free, like any tracked key.
                    drop(slow);
                    return self.step_overflow(now, ask);
                }
                // The cost fits the new quota but not the cell's previous one, and the change
                // has not reached that cell: let it (it needs this lock), then step again.
                Err(gate) => {
                    drop(slow);
                    gate.wait_for(snap.gen);
                }
            }
        }
    }

    fn step_locked<'a>(
        &'a self,
        slow: &mut Slow,
        snap: &Snapshot,
        now: u64,
        ask: Ask,
    ) -> Result<Step, &'a Gate> {
        let fp = ask.fp;
        if let Some(tat) = slow.spill.get_mut(&fp) {
            let p = Self::params_at(snap, &self.spill_gate);
            let w = Self::weight(&p, &ask).map_err(|_| &self.spill_gate)?;
            return Ok(Step::Done(step_plain(
                tat,
                now,
                &p,
                w,
                ask.reserve.tolerance(&p),
            )));
        }
        if self.len() >= self.max_keys && now < slow.idle_not_before {
            // Full of keys none of which can be idle yet: nothing to sweep or revive.
            return Ok(Step::Overflow);
        }
        if fp != 0 {
            if let Some(v) = self.step_in_window(slow, snap, now, ask)? {
                return Ok(Step::Done(v));
            }
        }
        if self.len() >= self.max_keys && self.sweep_some(slow, now) && fp != 0 {
            if let Some(v) = self.step_in_window(slow, snap, now, ask)? {
                return Ok(Step::Done(v));
            }
        }
        if self.len() >= self.max_keys {
            return Ok(Step::Overflow);
        }
        // The window has no room (rare), or fp is 0 (which marks empty slots): the key spills.
        let p = Self::params_at(snap, &self.spill_gate);
        let w = Self::weight(&p, &ask).map_err(|_| &self.spill_gate)?;
        let mut tat = 0;
        let v = step_plain(&mut tat, now, &p, w, ask.reserve.tolerance(&p));
        if tat != 0 {
            slow.spill.insert(fp, tat);
            self.spilled.store(slow.spill.len(), Ordering::Relaxed);
            self.inserted(slow, tat);
        }
        Ok(Step::Done(v))
    }

    /// Under the lock: the key's own slot (live or dead), else a free one in its window.
    /// `Ok(None)` if the window has no room or the table is full; `Err(gate)` if the cost does
    /// not fit the parameters the chosen slot's group is still under.
    pub(super) fn step_in_window<'a>(
        &'a self,
        slow: &mut Slow,
        snap: &Snapshot,
        now: u64,
        ask: Ask,
    ) -> Result<Option<Verdict>, &'a Gate> {
        if self.capacity == 0 {
            return Ok(None);
        }
        let fp = ask.fp;
        let home = self.home(fp);
        let mut free = None;
        let mut slot = home;
        for _ in 0..WINDOW {
            let key = self.key_word(slot).load(Ordering::Acquire);
            if key == fp {
                let tat = self.tat_word(slot);
                if tat.load(Ordering::Acquire) != TOMBSTONE {
                    // Placed by another thread since our lock-free look: step it as usual.
                    let gate = self.gate_of(slot);
                    let p = Self::params_at(snap, gate);
                    let w = Self::weight(&p, &ask).map_err(|_| gate)?;
                    let (ours, a) = (|| true, Attempt { now, p: &p, w });
                    let tol = ask.reserve.tolerance(&p);
                    return Ok(cell::step_within(
                        tat,
                        a,
                        tol,
                        DenyReason::Quota,
                        ours,
                        || now,
                    ));
                }
                if self.len() >= self.max_keys {
                    return Ok(None);
                }
                return self.place(slow, slot, false, snap, now, ask).map(Some);
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
            None => match self.sweep_window(home, now) {
                Some(slot) => (slot, false),
                None => return Ok(None),
            },
        };
        if self.len() >= self.max_keys {
            return Ok(None);
        }
        self.place(slow, slot, empty, snap, now, ask).map(Some)
    }

    #[inline]
    pub(super) fn next(&self, slot: usize) -> usize {
        if slot + 1 == self.capacity {
            0
        } else {
            slot + 1
        }
    }

    /// Places the asking key in `slot` (empty, or dead) with the TAT its first step leaves,
    /// under the parameters of the slot's group.
    fn place<'a>(
        &'a self,
        slow: &mut Slow,
        slot: usize,
        empty: bool,
        snap: &Snapshot,
        now: u64,
        ask: Ask,
    ) -> Result<Verdict, &'a Gate> {
        let gate = self.gate_of(slot);
        let p = Self::params_at(snap, gate);
        let w = Self::weight(&p, &ask).map_err(|_| gate)?;
        let mut tat = 0;
        let v = step_plain(&mut tat, now, &p, w, ask.reserve.tolerance(&p));
        if tat != 0 {
            self.install(slow, slot, ask.fp, empty, tat);
        }
        // tat == 0: an overflow denial, nothing to remember.
        Ok(v)
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

    /// The overflow cell's parameters: its own quota, or the per-key quota (through its gate).
    pub(super) fn overflow_params(&self, snap: &Snapshot) -> Params {
        match &self.overflow.params {
            Some(own) => own.load().cur,
            None => self.overflow.gate.resolve(snap).0,
        }
    }

    /// New keys share the overflow cell when the table is full. A cost above the overflow
    /// cell's own burst (or its class's share of it) can never pass it: denied, with a
    /// retry-after of `u64::MAX` ns. Lock-free, like a tracked key's check.
    pub(super) fn step_overflow(&self, now: u64, ask: Ask) -> Verdict {
        let oc = &self.overflow;
        loop {
            let (op, token, shared) = match &oc.params {
                Some(own) => {
                    let s = own.load();
                    (s.cur, Token::steady(s.seq), own)
                }
                None => {
                    let (p, token) = oc.gate.resolve(&self.params.load());
                    (p, token, &self.params)
                }
            };
            let tol = ask.reserve.tolerance(&op);
            let Some(w) = op.weight(ask.cost).filter(|&w| w <= tol) else {
                return Verdict::Deny(Denied::new(u64::MAX, DenyReason::KeyTableFull));
            };
            let a = Attempt { now, p: &op, w };
            let valid = || token.still_valid(shared, &oc.gate);
            let reason = DenyReason::KeyTableFull;
            if let Some(v) = cell::step_within(&oc.tat.0, a, tol, reason, valid, || self.now()) {
                return v;
            }
        }
    }
}

/// What the insert path does next.
pub(super) enum Step {
    /// Stepped a cell under the lock.
    Done(Verdict),
    /// The table is full: step the overflow cell, after dropping the lock.
    Overflow,
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
