//! The insert path, under the insert lock: new keys, revivals, spilled keys, admission at the
//! cap (`admission.rs`) and the way to the overflow cell.

use crate::sync::atomic::Ordering;

use super::admission::{Admit, Filter};
use super::store::{self, Place};
use super::{Ask, KeyedRateLimiter, Slow, Swept};
use crate::engine::cell::{self, Attempt, TOMBSTONE};
use crate::engine::gcra::{self, Outcome, Params};
use crate::engine::params::{Gate, Snapshot};
use crate::engine::stats::ADMISSIONS_REFUSED;
use crate::engine::tagged;
use crate::engine::verdict::{DenyReason, Verdict};

/// What the insert path does next.
enum Step {
    /// Stepped a cell under the lock.
    Done(Verdict),
    /// The table is full: step the overflow cell, after dropping the lock.
    Overflow,
}

/// What the insert lock finds of a key in its two buckets.
pub(super) enum Held<'a> {
    /// Its live slot.
    Live(Place<'a>),
    /// Its dead slot (swept): where it goes back if it returns.
    Dead(Place<'a>),
    Absent,
}

impl<K> KeyedRateLimiter<K> {
    /// The insert path: new keys, revivals, spilled keys and the overflow cell. Takes the
    /// insert lock and resolves the parameters of whatever cell it steps anew under it.
    #[cold]
    pub(super) fn step_slow(&self, ask: Ask) -> Verdict {
        loop {
            let mut slow = self.slow.lock();
            let snap = self.params.load();
            // Read under the lock, so the instants of successive sweeps and placements never
            // go backwards, even on a TSC that is not synchronised across cores: a key placed
            // at one instant is never swept as idle at an earlier one.
            let now = self.now().max(slow.last_now);
            slow.last_now = now;
            if let Some(tat) = self.take_lowered() {
                slow.saw_live(tat);
            }
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
        // Skip hashing the fingerprint again when nothing spilled (almost always).
        let spilled = if slow.spill.is_empty() {
            None
        } else {
            slow.spill.get_mut(&fp)
        };
        if let Some(tat) = spilled {
            let p = Self::params_at(snap, &self.spill_gate);
            let w = Self::weight(&p, &ask).map_err(|_| &self.spill_gate)?;
            let v = step_plain(tat, now, &p, w, ask.reserve.tolerance(&p));
            self.rehome(slow, fp);
            return Ok(Step::Done(v));
        }
        // First, so that the buckets looked at below are the key's for good.
        self.grow(slow, snap, now);
        let dead = match self.held(fp) {
            Held::Live(place) => {
                // Placed by another thread since our lock-free look: step it as usual.
                let p = Self::params_at(snap, place.gate);
                let w = Self::weight(&p, &ask).map_err(|_| place.gate)?;
                let (a, tol) = (Attempt { now, p: &p, w }, ask.reserve.tolerance(&p));
                let quota = DenyReason::Quota;
                let mask = tagged::mask_of(fp);
                match cell::step_checked(&place.slot.tat, mask, a, tol, quota, || true, || now) {
                    Some(v) => return Ok(Step::Done(v)),
                    // Dead after all (only the lock's holder kills a slot, so never): revive.
                    None => Some(place),
                }
            }
            Held::Dead(place) => Some(place),
            Held::Absent => None,
        };
        // A new key, or one back after it was swept (to its dead slot). At the cap, admission
        // says which idle keys it may displace (`admission.rs`); below it, with admission on,
        // only stale ones: the table has room, so no key idle for less than τ makes way.
        let mut sweep_at = match slow.filter {
            Filter::Off => now,
            _ => Admit::Stale.sweep_at(now, &snap.cur),
        };
        if self.len() >= self.max_keys {
            let admit = slow.admit(fp, dead.is_some());
            sweep_at = admit.sweep_at(now, &snap.cur);
            if !self.free_one(slow, fp, sweep_at) {
                if admit != Admit::Idle {
                    self.counters.bump(ADMISSIONS_REFUSED);
                }
                return Ok(Step::Overflow);
            }
        }
        if let Some(place) = dead.or_else(|| self.room_for(slow, fp, snap, now, sweep_at)) {
            return self.place(slow, place, snap, now, ask).map(Step::Done);
        }
        if self.len() >= self.max_keys {
            return Ok(Step::Overflow);
        }
        // Both buckets full even after moving keys (rare), or fp is 0 (which marks never-used
        // slots): the key spills.
        let p = Self::params_at(snap, &self.spill_gate);
        let w = Self::weight(&p, &ask).map_err(|_| &self.spill_gate)?;
        let mut tat = 0;
        let v = step_plain(&mut tat, now, &p, w, ask.reserve.tolerance(&p));
        if tat != 0 {
            slow.spill.insert(fp, tat);
            self.spilled.store(slow.spill.len(), Ordering::Release);
            self.inserted(slow, tat);
        }
        Ok(Step::Done(v))
    }

    /// `fp`'s slot in its two buckets (under the insert lock): its live one, else a dead copy
    /// (left by a sweep or a move) to go back to. A key has at most one live slot.
    pub(super) fn held(&self, fp: u64) -> Held<'_> {
        if fp == 0 {
            return Held::Absent;
        }
        let mut dead = None;
        for p in self.table.home(fp) {
            let Some((bucket, gate)) = self.table.bucket(p) else {
                continue;
            };
            for slot in &bucket.0 {
                if slot.key.load(Ordering::Relaxed) == fp {
                    let place = Place { slot, gate };
                    if slot.tat.load(Ordering::Acquire) != TOMBSTONE {
                        return Held::Live(place);
                    }
                    dead = dead.or(Some(place));
                }
            }
        }
        dead.map_or(Held::Absent, Held::Dead)
    }

    /// With the table full of keys: makes room for one more by sweeping a key idle at `at`
    /// (TAT ≤ `at`) — one in `fp`'s own buckets if they have no free slot (so the newcomer
    /// lands there), else the next one anywhere. `true` if it freed one.
    pub(super) fn free_one(&self, slow: &mut Slow, fp: u64, at: u64) -> bool {
        if fp != 0 {
            let home = self.table.home(fp);
            let has_free = home.iter().any(|&p| self.table.free_in(p).is_some());
            if !has_free && self.sweep_home(slow, home, at).is_some() {
                return true;
            }
        }
        self.sweep_some(slow, at)
    }

    /// A slot for the new key `fp` in its buckets (the table has grown if it had to): a free
    /// one, the slot of a key idle at `sweep_at` (TAT ≤ `sweep_at`, at most `now`) swept, or
    /// one freed by moving keys to their other buckets. `None` for fp 0 or if all of that
    /// fails.
    pub(super) fn room_for(
        &self,
        slow: &mut Slow,
        fp: u64,
        snap: &Snapshot,
        now: u64,
        sweep_at: u64,
    ) -> Option<Place<'_>> {
        if fp == 0 {
            return None;
        }
        let home = self.table.home(fp);
        // A free slot in either bucket (both read by the lookup that sent the key here), else
        // the first bucket if a key living there as its second choice can go home.
        self.table
            .free_in(home[0])
            .or_else(|| self.table.free_in(home[1]))
            .or_else(|| self.bring_home(slow, home[0], snap, now))
            .or_else(|| self.sweep_home(slow, home, sweep_at))
            .or_else(|| self.make_room(slow, home, snap, now))
    }

    /// Frees the slot of the first key in `home`'s buckets idle at `at` (TAT ≤ `at`), if any.
    fn sweep_home(&self, slow: &mut Slow, home: [usize; 2], at: u64) -> Option<Place<'_>> {
        for p in home {
            let (bucket, gate) = self.table.bucket(p)?;
            for slot in &bucket.0 {
                let fp = slot.key.load(Ordering::Relaxed);
                if fp != 0 && matches!(self.sweep_slot(slot, at), Swept::Freed) {
                    slow.filter.saw_swept(fp);
                    return Some(Place { slot, gate });
                }
            }
        }
        None
    }

    /// Places the asking key in `place` (free, or dead) with the TAT its first step leaves,
    /// under the parameters of the slot's group.
    fn place<'a>(
        &'a self,
        slow: &mut Slow,
        place: Place<'a>,
        snap: &Snapshot,
        now: u64,
        ask: Ask,
    ) -> Result<Verdict, &'a Gate> {
        let p = Self::params_at(snap, place.gate);
        let w = Self::weight(&p, &ask).map_err(|_| place.gate)?;
        let mut tat = 0;
        let v = step_plain(&mut tat, now, &p, w, ask.reserve.tolerance(&p));
        if tat != 0 {
            store::install(place.slot, ask.fp, tat);
            self.inserted(slow, tat);
        }
        // tat == 0: an overflow denial, nothing to remember.
        Ok(v)
    }

    /// One more key tracked, with this TAT.
    pub(super) fn inserted(&self, slow: &mut Slow, tat: u64) {
        self.len.fetch_add(1, Ordering::Relaxed);
        slow.saw_live(tat);
    }

    /// After a spilled key's step: it moves into the table if one of its buckets has a free
    /// slot in a group at the spill's generation (a TAT moves only within one generation), so
    /// its next check is lock-free again.
    fn rehome(&self, slow: &mut Slow, fp: u64) {
        if fp == 0 {
            return;
        }
        let home = self.table.home(fp);
        let Some(place) = home.iter().find_map(|&p| self.table.free_in(p)) else {
            return;
        };
        if !place.gate.same_generation(&self.spill_gate) {
            return;
        }
        if let Some(tat) = slow.spill.remove(&fp) {
            store::install(place.slot, fp, tat);
            // Release, after the install: a lock-free reader that finds the map empty then
            // finds the key in the table (`carry.rs`).
            self.spilled.store(slow.spill.len(), Ordering::Release);
            slow.saw_live(tat);
        }
    }
}

/// One step on a TAT held under a lock, for a class of tolerance `tol ≤ τ` (the clamp uses
/// the full τ, as in [`cell::step_within`]).
pub(super) fn step_plain(tat: &mut u64, now: u64, p: &Params, w: u64, tol: u64) -> Verdict {
    let clamped = gcra::clamp(*tat, now, p.bound());
    let outcome = gcra::step(clamped, now, w, tol);
    *tat = match outcome {
        Outcome::Allow { tat, .. } => tat,
        _ => clamped,
    };
    cell::verdict(outcome, &p.within(tol), DenyReason::Quota)
}
