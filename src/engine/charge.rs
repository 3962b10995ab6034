//! Charges: a cost added after the fact, lock-free, bounded by the cell's debt cap.
//!
//! A check asks before it takes: it is allowed only if the cell has room. A charge takes what
//! a request turned out to cost (tokens a response reported, a failed login) whatever the room:
//! `tat ← min(max(tat, now) + w, now + τ + debt)`. Past `now + τ` the cell is *in debt*: every
//! check is denied, with a retry-after that covers the debt, until time pays it off. The debt
//! cap ([`Params::debt`], `max_debt` on the builders, 0 by default) bounds how far ahead a
//! charge may push the TAT; what does not fit is reported as unpaid, never silently dropped.
//! A charge never lowers a TAT (it cannot hand anything out), and never overflows.

use core::time::Duration;

use crate::sync::atomic::{AtomicU64, Ordering};

use crate::engine::cell::TOMBSTONE;
use crate::engine::gcra::{Params, Per, MAX_TAT, MAX_TAU};
use crate::engine::tagged;

/// What a charge did: how much of it did not fit under the debt cap, and how deep in debt it
/// left the cell. Returned by [`RateLimiter::charge`](crate::RateLimiter::charge) and
/// [`KeyedRateLimiter::charge_key`](crate::KeyedRateLimiter::charge_key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a charge may not have fit: `unpaid` says what the cap cut off"]
pub struct Charged {
    unpaid: u64,
    debt: u64,
}

impl Charged {
    /// The units of the charge that did not fit under the debt cap (0 if all of it stood; the
    /// whole charge for a key that shares the overflow cell, which is never charged).
    pub fn unpaid(&self) -> u64 {
        self.unpaid
    }

    /// How far past a drained cell the charge left it: the extra time every check waits
    /// before the cell has room again (zero if the cell is not in debt).
    pub fn debt(&self) -> Duration {
        Duration::from_nanos(self.debt)
    }

    /// `true` if the whole charge stood.
    pub fn is_paid(&self) -> bool {
        self.unpaid == 0
    }

    pub(crate) fn new(unpaid: u64, debt: u64) -> Self {
        Self { unpaid, debt }
    }
}

/// The longest debt a cap may allow, as [`MAX_TAU`]: `now + τ + debt` then stays below 2^63
/// past `now`.
pub(crate) fn debt_ns(max: Duration) -> u64 {
    u64::try_from(max.as_nanos())
        .unwrap_or(u64::MAX)
        .min(MAX_TAU)
}

impl Params {
    /// The weight of `n` units with no burst cap, saturating: what a charge or a refund weighs.
    #[inline]
    pub(crate) fn weight_uncapped(&self, n: u64) -> u64 {
        match self.per {
            Per::Request { t } => n.saturating_mul(t),
            Per::Byte { .. } => {
                let capped = Self {
                    burst: u64::MAX,
                    ..*self
                };
                capped.weight(n).unwrap_or(u64::MAX)
            }
        }
    }

    /// How many whole units a weight of `w` ns pays for (no burst cap).
    #[inline]
    pub(crate) fn units_for(&self, w: u64) -> u64 {
        Self {
            burst: u64::MAX,
            ..*self
        }
        .units_in(w)
    }

    /// What a charge of `n` units that added `applied` ns of its weight `w` reports.
    pub(crate) fn charged(&self, n: u64, w: u64, applied: u64, tat: u64, now: u64) -> Charged {
        let unpaid = if applied >= w {
            0
        } else {
            n.saturating_sub(self.units_for(applied))
        };
        let debt = tat.saturating_sub(now.saturating_add(self.tau));
        Charged::new(unpaid, debt)
    }
}

/// The TAT after a charge of weight `w` at `now` with bound `τ + debt`, and the weight it
/// added: `min(max(tat, now) + w, now + bound)`; a TAT already at or past that bound stays
/// (nothing added).
#[inline]
pub(crate) fn outcome(tat: u64, now: u64, w: u64, bound: u64) -> (u64, u64) {
    let base = tat.max(now);
    let limit = now.saturating_add(bound).min(MAX_TAT);
    if base >= limit {
        return (tat, 0);
    }
    let next = base.saturating_add(w).min(limit);
    (next, next - base)
}

/// Charges weight `w` on the TAT word at `now` (bound `τ + debt`), racing checks and refunds
/// with compare-and-swap. `mask` and `still_ours` as in
/// [`refund_word`](crate::engine::refund::refund_word). Returns `(tat, applied)`: the TAT
/// left and the weight added; `None` if the word is dead or no longer ours: look again.
#[inline]
pub(crate) fn charge_word(
    word: &AtomicU64,
    mask: u64,
    now: u64,
    w: u64,
    bound: u64,
    still_ours: impl Fn() -> bool,
) -> Option<(u64, u64)> {
    // Acquire (load and failed CAS): see `cell::step_checked`.
    let mut raw = word.load(Ordering::Acquire);
    loop {
        if raw == TOMBSTONE || !still_ours() {
            return None;
        }
        let cur = tagged::decode(raw, mask);
        let (next, applied) = outcome(cur, now, w, bound);
        if applied == 0 {
            return Some((cur, 0));
        }
        let enc = tagged::encode(next, mask);
        match word.compare_exchange_weak(raw, enc, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some((next, applied)),
            Err(actual) => raw = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_stops_at_the_debt_cap_and_never_lowers() {
        // bound = τ + debt = 30 + 50.
        assert_eq!(outcome(0, 100, 20, 80), (120, 20), "a full cell");
        assert_eq!(outcome(150, 100, 20, 80), (170, 20));
        assert_eq!(outcome(150, 100, 500, 80), (180, 30), "cut at now + bound");
        assert_eq!(
            outcome(200, 100, 5, 80),
            (200, 0),
            "past the bound: left as it is"
        );
        assert_eq!(outcome(5, u64::MAX - 3, 9, 80), (MAX_TAT, 2), "no overflow");
    }

    #[test]
    fn the_report_counts_what_was_cut_off() {
        let p = Params::request(10, 30).with_debt(50);
        let c = p.charged(50, 500, 300, 180, 100);
        assert_eq!((c.unpaid(), c.debt()), (20, Duration::from_nanos(50)));
        assert!(p.charged(2, 20, 20, 120, 100).is_paid());
        assert_eq!(p.weight_uncapped(u64::MAX), u64::MAX);
        let word = AtomicU64::new(150);
        assert_eq!(
            charge_word(&word, 0, 100, 500, 80, || true),
            Some((180, 30))
        );
        assert_eq!(word.load(Ordering::Relaxed), 180);
        assert_eq!(charge_word(&word, 0, 100, 5, 80, || false), None);
        assert_eq!(debt_ns(Duration::MAX), MAX_TAU);
    }
}
