//! The key table's check paths: the lock-free step of a tracked key (enforcing or passing
//! through), peeks, the overflow cell. The insert path is in `insert.rs`, the storage in
//! `store.rs`, growth and moves in `grow.rs`, sweeping and rescaling in `sweep.rs`.

use crate::sync::atomic::{fence, Ordering};

use super::insert::Held;
use super::store::Place;
use super::{Ask, KeyedRateLimiter};
use crate::engine::cell::{self, Attempt, Steady, TOMBSTONE};
use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::engine::gcra::Params;
use crate::engine::params::{Fast, Gate, SharedParams, Snapshot, Token};
use crate::engine::stats::{Counters, ALLOWED, DENIED_QUOTA};
use crate::engine::tagged;
use crate::engine::verdict::{Allowed, Denied, DenyReason, PassReason, Verdict};
use crate::limiter::guard::{self, Guard};
use crate::safety::fault::Shared;
use crate::shaping::priority;

impl<K> KeyedRateLimiter<K> {
    /// One unit for a tracked key under a request quota in steady state — the common check:
    /// `T` and τ (confirmed once, after the TAT load, as a direct limiter's
    /// `step_bare`), the key's slot, one [`cell::steady_step`], one CAS; counted by `count`
    /// (a [`Tally`], inlined whatever LLVM makes of its size).
    /// Anything else — a new key, a byte budget, a quota change, the clamp lowering the TAT,
    /// a slot that died or changed hands under it — goes to `general`, having written
    /// nothing: the swap expects the key's own encoding of the TAT (see [`tagged`]).
    #[inline(always)]
    pub(super) fn step_steady(
        &self,
        fp: u64,
        now: u64,
        count: impl Tally,
        general: impl FnOnce() -> Verdict,
    ) -> Verdict {
        let Fast { t, tau, until, seq } = self.params.load_fast();
        if now >= until {
            return general();
        }
        let Some(slot) = self.table.find_slot(fp) else {
            return general();
        };
        let mask = tagged::mask_of(fp);
        // Acquire (load and failed CAS): a reused slot's TAT is published with Release after
        // its new key, so a reader that sees the new TAT sees the new key below.
        let mut raw = slot.tat.load(Ordering::Acquire);
        loop {
            // `confirm` after the TAT load: the steady snapshot needs no gate, a change would
            // have moved `seq`.
            if raw == TOMBSTONE
                || slot.key.load(Ordering::Acquire) != fp
                || !self.params.confirm(seq)
            {
                return general();
            }
            match cell::steady_step(tagged::decode(raw, mask), now, t, tau, tau) {
                Steady::Allow { tat: next, ahead } => {
                    // A steady step's TAT is below 2^63: its encoding is never the tombstone,
                    // so the plain XOR is `tagged::encode` here.
                    let cas = slot.tat.compare_exchange_weak(
                        raw,
                        next ^ mask,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    );
                    match cas {
                        Ok(_) => {
                            count.tally(ALLOWED);
                            return Verdict::Allow(Allowed::requests(tau, t, ahead));
                        }
                        Err(actual) => raw = actual,
                    }
                }
                Steady::Deny { retry_after } => {
                    count.tally(DENIED_QUOTA);
                    return Verdict::Deny(Denied::new(retry_after, DenyReason::Quota));
                }
                Steady::Cold => return general(),
            }
        }
    }

    /// [`check_key_n`](KeyedRateLimiter::check_key_n) of the key with fingerprint `fp`.
    #[inline]
    pub(super) fn check_fp_n(&self, fp: u64, cost: u64) -> Result<Verdict, InsufficientCapacity> {
        let snap = self.params.load();
        let p = snap.cur;
        let w = p
            .weight(cost)
            .ok_or(InsufficientCapacity::new(cost, p.burst))?;
        if w == 0 {
            return Ok(self.peek_fp(fp, 0, |p| p.tau));
        }
        Ok(self.step_key(Ask::plain(fp, cost, w), &snap))
    }

    /// [`check_key_with`](KeyedRateLimiter::check_key_with) of the key with fingerprint `fp`
    /// (for a caller that has it already: a rollout's cohort check, see `carry.rs`).
    #[inline]
    pub(super) fn check_fp_with(
        &self,
        fp: u64,
        check: Check,
    ) -> Result<Verdict, InsufficientCapacity> {
        match &self.guard {
            None => {
                let v = self.check_fp_n(fp, check.units())?;
                if check.attempt_number() > 0 && check.units() > 0 {
                    self.counters.retry(v.is_permitted());
                }
                Ok(v)
            }
            Some(g) => self.check_fp_attached(g, fp, check),
        }
    }

    /// [`step_steady`](Self::step_steady) with a guard attached: its clock, and its count; a
    /// pass-through goes the general way.
    #[inline]
    pub(super) fn check_fast_guarded(&self, g: &Guard, fp: u64) -> Option<Verdict> {
        let (t, tau, seq) = self.params.load_request()?;
        let slot = self.table.find_slot(fp)?;
        let now = g.now(&self.clock);
        if g.pass_reason(now).is_some() {
            return None;
        }
        let p = self.params.request(t, tau);
        let a = Attempt { now, p: &p, w: t };
        let valid = || slot.key.load(Ordering::Acquire) == fp && self.params.unchanged(seq);
        let fresh = || self.now();
        let mask = tagged::mask_of(fp);
        let v = cell::step_checked(&slot.tat, mask, a, tau, DenyReason::Quota, valid, fresh)?;
        g.observe(&self.counters, &v, Some(fp), false, || now);
        Some(v)
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
    fn locate(&self, ask: &Ask, snap: &Snapshot) -> Option<(Place<'_>, Params, u64, Token)> {
        if ask.fp == 0 {
            return None;
        }
        let place = self.table.find(ask.fp)?;
        let (p, token) = place.gate.resolve(snap);
        if snap.prev.is_none() {
            return Some((place, p, ask.w, token));
        }
        match Self::weight(&p, ask) {
            Ok(w) => Some((place, p, w, token)),
            Err(_) => {
                // Fits the new quota but not the previous one, on a cell the change has not
                // reached yet: wait for it, then use the new quota.
                place.gate.wait_for(snap.gen);
                let (p, token) = place.gate.resolve(snap);
                Some((place, p, Self::weight(&p, ask).ok()?, token))
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
        if let Some((Place { slot, gate }, p, w, token)) = self.locate(&ask, snap) {
            let fp = ask.fp;
            let valid =
                || slot.key.load(Ordering::Acquire) == fp && token.still_valid(&self.params, gate);
            let a = Attempt {
                now: self.now(),
                p: &p,
                w,
            };
            let tol = ask.reserve.tolerance(&p);
            let (mask, reason_q) = (tagged::mask_of(fp), DenyReason::Quota);
            let fresh = || self.now();
            if let Some(v) = cell::step_checked(&slot.tat, mask, a, tol, reason_q, valid, fresh) {
                let ceiling = |retry_after| g.ceiling_key(fp, a, reason, retry_after);
                return cell::pass_through(v, reason, ceiling);
            }
        }
        guard::pass(self.step_slow(ask), reason)
    }

    #[inline]
    pub(super) fn step_key_enforcing(&self, ask: Ask, snap: &Snapshot) -> Verdict {
        if let Some((Place { slot, gate }, p, w, token)) = self.locate(&ask, snap) {
            let now = self.now();
            let fp = ask.fp;
            let valid =
                || slot.key.load(Ordering::Acquire) == fp && token.still_valid(&self.params, gate);
            if let Some(v) = cell::step_checked(
                &slot.tat,
                tagged::mask_of(fp),
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
        let eval = |tat: u64, p: &Params, reason| {
            let within = p.within(tol_of(p));
            let w = if cost == 0 {
                0
            } else {
                p.weight(cost).unwrap_or(within.tau.saturating_add(1))
            };
            cell::evaluate(tat, now, &within, w, reason)
        };
        let (snap, found) = loop {
            // Acquire: pairs with the Release of the store that ended the last move.
            let moves = self.moves.load(Ordering::Acquire);
            // Before the lookup, Acquire: pairs with the Release after a spilled key's move
            // back into the table (`rehome`), so a count of 0 read here means the lookup
            // below sees the key if it was spilled before. Read after the lookup, a count
            // stored after the move could follow a lookup that missed it: a tracked key
            // reported as new (found by the loom model `spill_rehome_races_a_key_peek`).
            let spilled = self.spilled.load(Ordering::Acquire);
            let snap = self.params.load();
            let found = match (fp, self.table.find(fp)) {
                (1.., Some(place)) => {
                    let (p, token) = place.gate.resolve(&snap);
                    let tat = place.slot.tat_of(fp);
                    // A word a quota change rescaled after `p` was resolved is not read under
                    // `p`, nor one another key took over after the lookup: look again.
                    if place.slot.key.load(Ordering::Acquire) != fp
                        || !token.still_valid(&self.params, place.gate)
                    {
                        continue;
                    }
                    match tat {
                        Some(tat) => Some((tat, p)),
                        // The copy died after the lookup: swept, or moved (its new copy may
                        // not be written yet). Only the insert lock can tell.
                        None => self.locked_word(fp),
                    }
                }
                // A miss while keys moved may be a key between its two copies (a move kills
                // the old copy before it writes the new one): only the insert lock can tell
                // (found by the loom model `slot_reuse_races_a_key_peek`, a peek that
                // reported a tracked key as new). The move counter is read again after the
                // lookup's loads, as `carry.rs` does.
                (1.., None)
                    if {
                        fence(Ordering::Acquire);
                        moves & 1 == 1 || self.moves.load(Ordering::Relaxed) != moves
                    } =>
                {
                    self.locked_word(fp)
                }
                _ if spilled == 0 => None,
                // Spilled keys: the map, or the table if the key moved back meanwhile (its
                // slot seen dead, or not yet written, by the lookup): under the insert lock.
                _ => self.locked_word(fp),
            };
            break (snap, found);
        };
        match found {
            Some((tat, p)) => eval(tat, &p, DenyReason::Quota),
            // A new key: fresh if it would be tracked, else it would share the overflow cell.
            _ if self.len() < self.max_keys => eval(0, &snap.cur, DenyReason::Quota),
            _ => {
                let (tat, op) = self.overflow_word();
                let within = op.within(tol_of(&op));
                let w = if cost == 0 {
                    0
                } else {
                    op.weight(1).unwrap_or(op.tau)
                };
                cell::evaluate(tat, now, &within, w, DenyReason::KeyTableFull)
            }
        }
    }

    /// The TAT of the key with fingerprint `fp` and the parameters it is in the scale of, read
    /// under the insert lock, where keys neither move nor spill and quota changes rescale no
    /// group: exact. `None` for a key not tracked.
    #[cold]
    #[inline(never)]
    pub(super) fn locked_word(&self, fp: u64) -> Option<(u64, Params)> {
        let slow = self.slow.lock();
        let snap = self.params.load();
        if let Some(&tat) = slow.spill.get(&fp) {
            return Some((tat, Self::params_at(&snap, &self.spill_gate)));
        }
        match self.held(fp) {
            Held::Live(place) => Some((place.slot.tat_of(fp)?, Self::params_at(&snap, place.gate))),
            Held::Dead(_) | Held::Absent => None,
        }
    }

    /// The overflow cell's TAT and the parameters it is in the scale of: re-validated after
    /// the load, as [`step_overflow`](Self::step_overflow) does, so a word a quota change
    /// rescaled in between is never read under the previous parameters (a spurious denial,
    /// found by the loom model `quota_change_races_an_overflow_peek`).
    fn overflow_word(&self) -> (u64, Params) {
        let oc = &self.overflow;
        loop {
            let (op, token, shared) = self.overflow_params();
            // Acquire: a word rescaled after `op` was chosen then shows in the re-validation.
            let tat = oc.tat.0.load(Ordering::Acquire);
            if token.still_valid(shared, &oc.gate) {
                return (tat, op);
            }
        }
    }

    /// The overflow cell's parameters (its own quota, or the per-key quota through its gate),
    /// the token to re-validate them with after loading its word, and the parameters the token
    /// names.
    #[inline]
    fn overflow_params(&self) -> (Params, Token, &SharedParams) {
        let oc = &self.overflow;
        match &oc.params {
            Some(own) => {
                let s = own.load();
                (s.cur, Token::steady(s.seq), own)
            }
            None => {
                let (p, token) = oc.gate.resolve(&self.params.load());
                (p, token, &self.params)
            }
        }
    }

    /// New keys share the overflow cell when the table is full. A cost above the overflow
    /// cell's own burst (or its class's share of it) can never pass it: denied, with a
    /// retry-after of `u64::MAX` ns. Lock-free, like a tracked key's check.
    pub(super) fn step_overflow(&self, now: u64, ask: Ask) -> Verdict {
        let oc = &self.overflow;
        loop {
            let (op, token, shared) = self.overflow_params();
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

/// How [`step_steady`](KeyedRateLimiter::step_steady) counts its verdict. A trait with
/// `#[inline(always)]` methods rather than a closure: the detector's count was once left out
/// of line by LLVM when the insert path, compiled in the same unit, grew (+28 Ir a check).
pub(super) trait Tally {
    /// Counts one verdict, by its counter index.
    fn tally(self, index: usize);
}

/// The limiter's own counters.
pub(super) struct Bump<'a>(pub(super) &'a Counters);

impl Tally for Bump<'_> {
    #[inline(always)]
    fn tally(self, index: usize) {
        self.0.bump(index);
    }
}

/// An attached detector: the limiter's counters, its tick and the key's panel sample.
pub(super) struct Observed<'a> {
    pub(super) detector: &'a Shared,
    pub(super) counters: &'a Counters,
    pub(super) fp: u64,
}

impl Tally for Observed<'_> {
    #[inline(always)]
    fn tally(self, index: usize) {
        self.detector.observe_key(self.counters, index, self.fp);
    }
}

/// An attached detector on the check's own clock: the limiter's counters, the key's panel
/// sample, and the check's reading `now` to see whether the detector is due.
pub(super) struct ObservedAt<'a> {
    pub(super) detector: &'a Shared,
    pub(super) counters: &'a Counters,
    pub(super) fp: u64,
    pub(super) now: u64,
}

impl Tally for ObservedAt<'_> {
    #[inline(always)]
    fn tally(self, index: usize) {
        self.detector
            .observe_key_at(self.counters, index, self.fp, self.now);
    }
}
