//! Refunds: undoing a cost a cell admitted earlier, lock-free and exact.
//!
//! A refund of weight `w` at `now` moves the TAT back by `w`, never below `now`:
//! `tat ← max(tat − w, now)` when `tat > now`, and nothing when `tat ≤ now` (the cell is full
//! already). A TAT at or before `now` means "full", so a refund can return a cell at most to
//! full and never beyond: whatever is refunded, the next check sees at most the burst. A
//! refund right after an allow at the same instant restores the cell exactly: the allow left
//! `max(tat₀, now) + w`, the refund leaves `max(tat₀, now)`, which steps exactly as `tat₀`.
//!
//! No clamp is applied first: a TAT beyond `now + τ` (left by a clock switch) keeps its
//! excess, which absorbs the refund before the cell gains anything — a refund never hands out
//! what the clamp will take away anyway. And no overflow: the result is at most the TAT.

use crate::sync::atomic::{AtomicU64, Ordering};

use crate::engine::cell::TOMBSTONE;
use crate::engine::gcra::Params;
use crate::engine::tagged;

/// The TAT after refunding weight `w` at `now`: `max(tat − w, now)` if `tat > now`, else
/// `tat` unchanged. Never above `tat`.
#[inline]
pub(crate) fn refunded(tat: u64, now: u64, w: u64) -> u64 {
    if tat <= now {
        return tat;
    }
    tat.saturating_sub(w).max(now)
}

impl Params {
    /// The weight a refund of `n` units gives back: capped at `τ + debt` (a refund returns a
    /// cell at most to full, and a full cell is at most `τ + debt` behind one in the deepest
    /// debt a charge may leave).
    #[inline]
    pub(crate) fn refund_weight(&self, n: u64) -> u64 {
        self.weight_uncapped(n).min(self.bound())
    }
}

/// Refunds weight `w` on the TAT word at `now`, racing checks with compare-and-swap.
///
/// `mask` is the word's owner tag (see [`tagged`](crate::engine::tagged); 0 for a word that
/// never changes hands): the swap expects the owner's encoding, so a refund never lands on a
/// word another key holds, whatever its TAT. `still_ours` is asked after each read of the
/// word, as in [`step_checked`](crate::engine::cell::step_checked) (the keyed table re-checks
/// that the slot holds the key and the parameters still apply). `lowering` is told the new
/// TAT before it is written (the keyed table keeps its sweep's bound on idle keys true with
/// it).
///
/// Returns `Some(())` once the refund is done (or there was nothing to give back: a full
/// cell), `None` if the word is dead or no longer ours: the caller looks the key up again.
#[inline]
pub(crate) fn refund_word(
    word: &AtomicU64,
    mask: u64,
    now: u64,
    w: u64,
    still_ours: impl Fn() -> bool,
    lowering: impl Fn(u64),
) -> Option<()> {
    // Acquire (load and failed CAS): see `cell::step_checked`; the word is re-validated with
    // `still_ours` after it.
    let mut raw = word.load(Ordering::Acquire);
    loop {
        if raw == TOMBSTONE || !still_ours() {
            return None;
        }
        let cur = tagged::decode(raw, mask);
        let next = refunded(cur, now, w);
        if next >= cur {
            return Some(());
        }
        lowering(next);
        let next = tagged::encode(next, mask);
        match word.compare_exchange_weak(raw, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(()),
            Err(actual) => raw = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::gcra::{self, Outcome, Per};

    #[test]
    fn a_refund_moves_the_tat_back_but_never_below_now() {
        assert_eq!(refunded(150, 100, 30), 120);
        assert_eq!(refunded(150, 100, 50), 100);
        assert_eq!(refunded(150, 100, 500), 100, "at most to full");
        assert_eq!(refunded(90, 100, 5), 90, "a full cell stays as it is");
        assert_eq!(refunded(gcra::MAX_TAT, 0, u64::MAX), 0);
        assert_eq!(refunded(u64::MAX - 1, u64::MAX - 2, 1), u64::MAX - 2);
    }

    #[test]
    fn a_refund_after_an_allow_restores_the_cell_exactly() {
        let (t, tau) = (10, 50);
        for tat0 in [0, 60, 100, 120, 140] {
            let now = 100;
            let Outcome::Allow { tat, .. } = gcra::step(gcra::clamp(tat0, now, tau), now, t, tau)
            else {
                panic!("room for one at {tat0}");
            };
            let back = refunded(tat, now, t);
            assert_eq!(back.max(now), tat0.max(now), "from {tat0}");
        }
    }

    #[test]
    fn the_refund_weight_is_capped_at_the_burst() {
        let p = Params {
            per: Per::Request { t: 10 },
            tau: 30,
            burst: 3,
            debt: 0,
        };
        assert_eq!(p.refund_weight(2), 20);
        assert_eq!(p.refund_weight(u64::MAX), 30);
        let word = AtomicU64::new(130);
        let seen = AtomicU64::new(0);
        let note = |t| seen.store(t, Ordering::Relaxed);
        assert_eq!(refund_word(&word, 0, 100, 20, || true, note), Some(()));
        assert_eq!(word.load(Ordering::Relaxed), 110);
        assert_eq!(seen.load(Ordering::Relaxed), 110);
        assert_eq!(refund_word(&word, 0, 100, 20, || false, |_| {}), None);
        // A tagged word: decoded, refunded, encoded under the same owner's mask.
        let m = tagged::mask_of(7 << 40 | 3);
        let word = AtomicU64::new(tagged::encode(130, m));
        assert_eq!(refund_word(&word, m, 100, 20, || true, |_| {}), Some(()));
        assert_eq!(tagged::decode(word.load(Ordering::Relaxed), m), 110);
    }
}
