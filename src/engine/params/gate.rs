//! The change side of a quota change: each group of TAT words carries a [`Gate`] naming the
//! generation its words are in, and a check's [`Token`] re-validates the parameters it chose
//! for them (see the parent module).

use crate::sync::atomic::{fence, AtomicU64, Ordering};
use crate::sync::spin_loop;

use super::{SharedParams, Snapshot};
use crate::engine::cell::TOMBSTONE;
use crate::engine::gcra::{self, Params};
use crate::engine::tagged;

/// The generation a group of TAT words is in: `2g` once rescaled to generation `g`, `2g − 1`
/// while being rescaled to it. Written only by the (serialised) change; read by checks only
/// while a change is in progress.
#[derive(Debug, Default)]
pub(crate) struct Gate(AtomicU64);

/// What a check read before its TAT word, to re-validate after it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token {
    seq: u64,
    /// The gate's value, if the check had to read it (during a change).
    gate: Option<u64>,
}

impl Token {
    /// A token for a steady-state snapshot (the gate need not be read).
    #[inline]
    pub(crate) fn steady(seq: u64) -> Self {
        Self { seq, gate: None }
    }

    /// `true` if the parameters chosen with this token still apply to the words behind
    /// `gate`. Call after an Acquire load of such a word.
    #[inline]
    pub(crate) fn still_valid(&self, params: &SharedParams, gate: &Gate) -> bool {
        params.unchanged(self.seq)
            && self
                .gate
                .is_none_or(|g| gate.0.load(Ordering::Acquire) == g)
    }
}

impl Gate {
    /// The parameters that apply to the words behind this gate under `snap`, and the token to
    /// re-validate them with. In steady state that is `snap.cur` and no gate read; during a
    /// change it waits while this group is being rescaled (a few hundred nanoseconds: the
    /// change holds no lock a check needs, but a group's words must move together).
    #[inline]
    pub(crate) fn resolve(&self, snap: &Snapshot) -> (Params, Token) {
        let Some(prev) = snap.prev else {
            return (snap.cur, Token::steady(snap.seq));
        };
        self.resolve_changing(snap, prev)
    }

    #[cold]
    fn resolve_changing(&self, snap: &Snapshot, prev: Params) -> (Params, Token) {
        let mut spins = 0u32;
        loop {
            let g = self.0.load(Ordering::Acquire);
            if g & 1 == 0 {
                // 2·gen: rescaled; anything older: still in the previous generation's scale.
                let p = if g == snap.gen.wrapping_mul(2) {
                    snap.cur
                } else {
                    prev
                };
                return (
                    p,
                    Token {
                        seq: snap.seq,
                        gate: Some(g),
                    },
                );
            }
            spins += 1;
            if spins < 64 {
                spin_loop();
            } else {
                crate::sync::yield_now();
            }
        }
    }

    /// The change side: rescales `words` (TAT words of this group, each with its owner's mask
    /// — see [`tagged`](crate::engine::tagged); tombstones are skipped) from `old` to `new` at
    /// `now`, and marks the group as in generation `gen`. The caller
    /// serialises changes and holds whatever lock orders inserts into this group.
    pub(crate) fn rescale<'a>(
        &self,
        gen: u64,
        words: impl IntoIterator<Item = (&'a AtomicU64, u64)>,
        old: &Params,
        new: &Params,
        now: u64,
    ) {
        // Odd while the words move. Relaxed store, then a Release fence: a reader whose Acquire
        // load of a word sees a rescaled value then sees the odd (or final) gate value.
        self.0
            .store(gen.wrapping_mul(2).wrapping_sub(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, mask) in words {
            rescale_word(word, mask, old.tau, new.tau, now);
        }
        // Release: a reader that sees the final value sees every rescaled word.
        self.0.store(gen.wrapping_mul(2), Ordering::Release);
    }

    /// The generation-`gen` mark, for a group created during (or after) that generation.
    pub(crate) fn mark(&self, gen: u64) {
        self.0.store(gen.wrapping_mul(2), Ordering::Release);
    }

    /// Waits until this group's words are in generation `gen`'s scale (or a later one): for
    /// the rare check whose cost fits the new quota but not the previous one, on a group the
    /// change has not reached yet. The change rescales group by group without waiting for
    /// checks, so this ends.
    #[cold]
    pub(crate) fn wait_for(&self, gen: u64) {
        let mut spins = 0u32;
        while self
            .0
            .load(Ordering::Acquire)
            .wrapping_sub(gen.wrapping_mul(2))
            > u64::MAX / 2
        {
            spins += 1;
            if spins < 64 {
                spin_loop();
            } else {
                crate::sync::yield_now();
            }
        }
    }

    /// `true` if this group's words are in generation `gen`'s scale (for writers that hold the
    /// lock the change takes per group).
    pub(crate) fn is_at(&self, gen: u64) -> bool {
        self.0.load(Ordering::Acquire) == gen.wrapping_mul(2)
    }

    /// `true` if this group's words and `other`'s are in the same generation's scale, so a
    /// TAT may move from one to the other as it is (for writers that hold the lock the change
    /// takes per group).
    pub(crate) fn same_generation(&self, other: &Gate) -> bool {
        self.0.load(Ordering::Acquire) == other.0.load(Ordering::Acquire)
    }
}

/// Rescales one TAT word, stored under `mask`, to a new tolerance at `now` (see
/// [`gcra::rescale`]), racing checks with compare-and-swap: every check that lands first is
/// rescaled with the rest.
fn rescale_word(word: &AtomicU64, mask: u64, tau_old: u64, tau_new: u64, now: u64) {
    let mut raw = word.load(Ordering::Acquire);
    loop {
        if raw == TOMBSTONE {
            return;
        }
        let cur = tagged::decode(raw, mask);
        let next = gcra::rescale(cur, now, tau_old, tau_new);
        if next == cur {
            return;
        }
        let next = tagged::encode(next, mask);
        match word.compare_exchange_weak(raw, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(actual) => raw = actual,
        }
    }
}

/// Hooks for `tests/loom.rs`: one group of one TAT word behind its gate, with the sequence
/// lock, and nothing else between a change's steps (no table, no insert lock, no clock), so
/// a model sees what the gate's own orderings hold.
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug)]
pub struct LoomGate {
    params: SharedParams,
    gate: Gate,
    word: AtomicU64,
    now: u64,
}

#[cfg(loom)]
impl LoomGate {
    /// A word holding `tat` under `quota`, rescaled at `now` by a change.
    pub fn new(quota: &crate::Quota, tat: u64, now: u64) -> Self {
        Self {
            params: SharedParams::new(quota.params()),
            gate: Gate::default(),
            word: AtomicU64::new(tat),
            now,
        }
    }

    /// A whole change to `quota`, as `set_quota` makes it: publish, rescale the group, finish.
    pub fn change(&self, quota: &crate::Quota) {
        let new = quota.params();
        let (old, gen) = self.params.begin(new);
        self.gate
            .rescale(gen, [(&self.word, 0)], &old, &new, self.now);
        self.params.finish();
    }

    /// One lock-free read, as a check makes it: the snapshot, the parameters the gate names,
    /// the word (Acquire), the token's re-validation. `(τ, TAT)` if it re-validated, `None` if
    /// a check would start over.
    pub fn read(&self) -> Option<(u64, u64)> {
        let snap = self.params.load();
        let (p, token) = self.gate.resolve(&snap);
        let tat = self.word.load(Ordering::Acquire);
        token
            .still_valid(&self.params, &self.gate)
            .then_some((p.tau, tat))
    }
}
