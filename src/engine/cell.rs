//! The atomic side of the engine: one GCRA step on one TAT word, lock-free (the parameters it
//! steps with are published by [`params`](crate::engine::params)).

use crate::sync::atomic::{AtomicU64, Ordering};

use crate::engine::gcra::{self, Outcome, Params, Per};
use crate::engine::params::STEADY_NOW;
use crate::engine::tagged;
use crate::engine::verdict::{
    Allowed, Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict,
};

/// The TAT value that marks a keyed slot as dead (swept); never a real TAT
/// ([`gcra::MAX_TAT`] is one less).
pub(crate) const TOMBSTONE: u64 = u64::MAX;

/// One check against a cell: the instant it was read at, the parameters, its weight (≥ 1).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt<'a> {
    pub(crate) now: u64,
    pub(crate) p: &'a Params,
    pub(crate) w: u64,
}

/// Takes a fresh reading when the clamp would lower `cur`. Another thread may have written
/// `cur` from a later reading than ours; lowering it to our `now + τ` would hand out the
/// difference. Only a genuine lowering (a smaller τ, a clock switch) survives a fresh reading.
#[cold]
fn refresh(now: &mut u64, fresh: impl Fn() -> u64) -> bool {
    let f = fresh();
    let moved = f > *now;
    *now = (*now).max(f);
    moved
}

/// The allowance reported after a step that left the TAT `ahead` ns in front of `now`.
#[inline]
pub(crate) fn allowed(p: &Params, ahead: u64) -> Allowed {
    let slack = p.tau.saturating_sub(ahead);
    match p.per {
        // Request quotas defer the division to `Allowed::remaining`.
        Per::Request { t } => Allowed::new(slack, t, ahead),
        Per::Byte { .. } => Allowed::new(p.units_in(slack), 0, ahead),
    }
}

/// What a check of weight `w` would say right now, without writing.
#[inline]
pub(crate) fn evaluate(tat: u64, now: u64, p: &Params, w: u64, reason: DenyReason) -> Verdict {
    let clamped = gcra::clamp(tat, now, p.bound());
    if w == 0 {
        let ahead = clamped.saturating_sub(now);
        return Verdict::Allow(allowed(p, ahead));
    }
    verdict(gcra::step(clamped, now, w, p.tau), p, reason)
}

/// The verdict for a step's outcome.
#[inline]
pub(crate) fn verdict(outcome: Outcome, p: &Params, reason: DenyReason) -> Verdict {
    match outcome {
        Outcome::Allow { ahead, .. } => Verdict::Allow(allowed(p, ahead)),
        Outcome::Deny { retry_after } => Verdict::Deny(Denied::new(retry_after, reason)),
        Outcome::Overflow => Verdict::Deny(Denied::new(u64::MAX, DenyReason::ClockOverflow)),
    }
}

/// The outcome of a [`steady_step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Steady {
    /// Conforms: store `tat`; `ahead = tat − now`.
    Allow { tat: u64, ahead: u64 },
    /// Does not conform; nothing to write.
    Deny { retry_after: u64 },
    /// Not a steady-state step: the clamp would lower `tat` (a quota change, a clock switch).
    /// Take the general path ([`step_within`]), which handles it.
    Cold,
}

/// [`gcra::step`] of weight `w` on the TAT `tat` at `now` with tolerance τ, for the common
/// case only: exactly the general step's outcome whenever it is not [`Steady::Cold`], with
/// no overflow check: the caller keeps `now` below [`STEADY_NOW`] (2^62 ns, about 146 years
/// after the epoch; [`Fast::until`](crate::engine::params::Fast::until) is that bound), and
/// then `now + τ + w < 3·2^62 ≤` [`gcra::MAX_TAT`]. `tol ≤ τ` is the check's class tolerance
/// (τ without classes): the clamp uses τ, the step `tol`, as in [`step_within`].
/// `w, τ ≤` [`gcra::MAX_TAU`].
#[inline(always)]
pub(crate) fn steady_step(tat: u64, now: u64, w: u64, tau: u64, tol: u64) -> Steady {
    debug_assert!(now < STEADY_NOW);
    // `ahead` before this step: max(tat − now, 0). The clamp lowers `tat` iff it exceeds τ.
    // (A saturating subtraction, not `tat.max(now) − now`: a subtraction and a select, where
    // the maximum is a compare, a copy and a select before its own subtraction.)
    let before = tat.saturating_sub(now);
    if before > tau {
        return Steady::Cold;
    }
    // before ≤ τ ≤ 2^62 and w ≤ 2^62: no overflow; tat ≤ now + τ < 2^63, so tat + w < MAX_TAT.
    let ahead = before + w;
    if ahead > tol {
        Steady::Deny {
            retry_after: ahead - tol,
        }
    } else {
        Steady::Allow {
            tat: now + ahead,
            ahead,
        }
    }
}

/// Runs one step on the TAT word: one CAS loop on allow; a denial writes only when the clamp
/// genuinely lowers the TAT (after a quota change), never in steady state.
///
/// `still_ours` is asked after each read of the word (the keyed table re-checks that the slot
/// still holds its key); `fresh` reads the clock again (see [`refresh`]). Returns `None` if the
/// word holds [`TOMBSTONE`] or `still_ours` says no: the caller must look the key up again.
///
/// `tol ≤ τ` is the tolerance of the check's priority class (τ without classes): the
/// clamp uses the full τ, so a low class never lowers what a critical class left above
/// `now + tol`; the step uses `tol`.
#[inline]
pub(crate) fn step_within(
    word: &AtomicU64,
    a: Attempt<'_>,
    tol: u64,
    reason: DenyReason,
    still_ours: impl Fn() -> bool,
    fresh: impl Fn() -> u64,
) -> Option<Verdict> {
    step_checked(word, 0, a, tol, reason, still_ours, fresh)
}

/// [`step_within`] on a word that can change hands — a keyed slot, which a sweep or a move
/// may kill and hand to another key — stored under its owner's `mask` (see
/// [`tagged`](crate::engine::tagged); 0 for a word that never changes hands). The
/// compare-and-swap expects the owner's encoding of the TAT read, so it cannot land on
/// another key's word even if that key's TAT equals the one read; once it lands, the step
/// stands (a move right after carries it).
#[inline]
pub(crate) fn step_checked(
    word: &AtomicU64,
    mask: u64,
    a: Attempt<'_>,
    tol: u64,
    reason: DenyReason,
    still_ours: impl Fn() -> bool,
    fresh: impl Fn() -> u64,
) -> Option<Verdict> {
    let (p, w, mut now) = (a.p, a.w, a.now);
    let told = p.within(tol);
    // Acquire (load and failed CAS): in the keyed table a slot's new TAT is published with
    // Release after its new key, so a reader that sees the TAT and re-checks the key sees the
    // new key. For a direct limiter this costs nothing on x86 and orders nothing else.
    let mut raw = word.load(Ordering::Acquire);
    let mut refreshed = false;
    loop {
        if raw == TOMBSTONE || !still_ours() {
            return None;
        }
        let cur = tagged::decode(raw, mask);
        let clamped = gcra::clamp(cur, now, p.bound());
        if clamped < cur && !refreshed {
            refreshed = true;
            if refresh(&mut now, &fresh) {
                continue;
            }
        }
        let outcome = gcra::step(clamped, now, w, tol);
        let next = match outcome {
            Outcome::Allow { tat, .. } => tat,
            _ if clamped < cur => clamped,
            _ => return Some(verdict(outcome, &told, reason)),
        };
        let next = tagged::encode(next, mask);
        match word.compare_exchange_weak(raw, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(verdict(outcome, &told, reason)),
            Err(actual) => {
                raw = actual;
                refreshed = false;
            }
        }
    }
}

/// [`step_within`] on a word that never holds the tombstone (a direct limiter, the overflow
/// cell), for a class of tolerance `tol` (τ without classes). TATs are capped below the
/// tombstone, so the fallback is unreachable; it denies.
#[inline]
pub(crate) fn step_word(
    word: &AtomicU64,
    a: Attempt<'_>,
    tol: u64,
    reason: DenyReason,
    fresh: impl Fn() -> u64,
) -> Verdict {
    step_within(word, a, tol, reason, || true, fresh).unwrap_or(Verdict::Deny(Denied::new(
        u64::MAX,
        DenyReason::ClockOverflow,
    )))
}

/// The ceiling that still applies during a pass-through: `factor` (c) × the quota in all.
/// The cell's own step (the shadow) admits one quota; the ceiling cell, a separate TAT, admits
/// the other `c − 1`: a shadow-denied check of weight `w` is charged `⌈w/(c−1)⌉` there, under
/// the cell's tolerance, so at one instant `(c−1) × burst` such checks pass on top of the
/// burst, and the sustained rate is `(c−1) ×` the quota on top of the quota. The shadow's own
/// TAT is never charged for them, so the shadow stays what an enforcing limiter would say.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ceiling {
    /// c ≥ 1; 1 admits nothing beyond the quota.
    pub(crate) factor: u32,
}

impl Ceiling {
    /// The weight a shadow-denied check of weight `w` costs on the ceiling cell, or `None` if
    /// the ceiling admits nothing beyond the quota (c = 1).
    #[inline]
    pub(crate) fn weight(&self, w: u64) -> Option<u64> {
        let extra = u64::from(self.factor.saturating_sub(1));
        (extra > 0).then(|| w.div_ceil(extra))
    }

    /// Runs a shadow-denied check of weight `w` (denied by the shadow after `retry_after` ns)
    /// against the ceiling cell `word`: a pass-through if it admits it, else a denial with
    /// [`DenyReason::Ceiling`].
    pub(crate) fn admit(
        &self,
        word: &AtomicU64,
        a: Attempt<'_>,
        reason: PassReason,
        retry_after: u64,
        fresh: impl Fn() -> u64,
    ) -> Verdict {
        let Some(wc) = self.weight(a.w) else {
            return Verdict::Deny(Denied::new(retry_after, DenyReason::Ceiling));
        };
        let a = Attempt { w: wc, ..a };
        match step_word(word, a, a.p.tau, DenyReason::Ceiling, fresh) {
            Verdict::Allow(_) => Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny)),
            other => other,
        }
    }
}

/// A step's verdict while the limiter passes traffic through with `reason`: the step was
/// exactly the enforcing one (the same writes, so the shadow stays true); an allow passes, a
/// quota denial is handed to `shadow_denied` (the ceiling), anything else (an overflow) stands.
#[inline]
pub(crate) fn pass_through(
    step: Verdict,
    reason: PassReason,
    shadow_denied: impl FnOnce(u64) -> Verdict,
) -> Verdict {
    match step {
        Verdict::Allow(_) => Verdict::PassThrough(PassThrough::new(reason, Shadow::Allow)),
        Verdict::Deny(d) if d.reason() == DenyReason::Quota => shadow_denied(d.retry_after_nanos()),
        other => other,
    }
}

/// Keeps a hot atomic on its own cache line(s), so writes to it do not slow readers of its
/// neighbours (128 bytes: adjacent-line prefetch pairs lines on x86).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowering_clamp_is_stored_even_on_a_denial() {
        let p = Params {
            per: Per::Request { t: 10 },
            tau: 20,
            burst: 2,
            debt: 0,
        };
        // A TAT far ahead (left by an older, larger τ): clamped to now + τ and stored.
        let word = AtomicU64::new(1_000);
        let a = Attempt {
            now: 100,
            p: &p,
            w: 10,
        };
        let v = step_within(&word, a, p.tau, DenyReason::Quota, || true, || 100);
        assert!(matches!(v, Some(Verdict::Deny(_))));
        assert_eq!(word.load(Ordering::Relaxed), 120);
    }

    #[test]
    fn a_step_never_lands_on_another_owners_word_with_the_same_tat() {
        let p = Params {
            per: Per::Request { t: 10 },
            tau: 100,
            burst: 10,
            debt: 0,
        };
        let a = Attempt {
            now: 100,
            p: &p,
            w: 10,
        };
        let quota = DenyReason::Quota;
        let (ma, mb) = (tagged::mask_of(2 << 32 | 2), tagged::mask_of(12 << 32 | 12));
        let word = AtomicU64::new(tagged::encode(150, ma));
        let v = step_checked(&word, ma, a, p.tau, quota, || true, || 100);
        assert!(matches!(v, Some(Verdict::Allow(_))));
        assert_eq!(tagged::decode(word.load(Ordering::Relaxed), ma), 160);
        // The key read 160 and re-checked its slot; then, before its swap, the slot changed
        // hands to a key whose TAT is also 160. The swap expects the first key's word and
        // fails on the second's; the re-check then says no, and the caller looks again.
        let handed_over = std::sync::atomic::AtomicBool::new(false);
        let ours = || {
            let first = !handed_over.swap(true, std::sync::atomic::Ordering::Relaxed);
            if first {
                word.store(tagged::encode(160, mb), Ordering::Relaxed);
            }
            first
        };
        let v = step_checked(&word, ma, a, p.tau, quota, ours, || 100);
        assert!(v.is_none(), "not ours: the caller looks the key up again");
        assert_eq!(
            tagged::decode(word.load(Ordering::Relaxed), mb),
            160,
            "the new owner's TAT is untouched"
        );
    }

    #[test]
    fn a_steady_step_is_the_general_step_or_cold() {
        let near = STEADY_NOW - 1;
        let max = gcra::MAX_TAU;
        for (tat, now, w, tau) in [
            (0, 0, 1, 1),
            (100, 50, 10, 60),
            (100, 50, 10, 59),
            (111, 50, 10, 60),
            (40, 50, 10, 10),
            (near + max, near, max, max),
            (near + max + 1, near, max, max),
            (u64::MAX - 1, 5, 1, 10),
            (u64::MAX - 1, 5, max, max),
        ] {
            // A class's tolerance: the whole τ, a share of it, or just one weight.
            for tol in [tau, tau - tau / 5, w.min(tau)] {
                let clamped = gcra::clamp(tat, now, tau);
                let general = gcra::step(clamped, now, w, tol);
                match steady_step(tat, now, w, tau, tol) {
                    Steady::Allow { tat: next, ahead } => {
                        assert_eq!(general, Outcome::Allow { tat: next, ahead });
                    }
                    Steady::Deny { retry_after } => {
                        assert_eq!(general, Outcome::Deny { retry_after });
                    }
                    Steady::Cold => assert!(clamped < tat),
                }
            }
        }
    }

    #[test]
    fn a_stale_reading_never_lowers_a_fresher_tat() {
        let p = Params {
            per: Per::Request { t: 10 },
            tau: 20,
            burst: 2,
            debt: 0,
        };
        // Another thread, reading now = 1005, left the cell empty: TAT = 1005 + τ.
        let word = AtomicU64::new(1_025);
        let stale = Attempt {
            now: 1_000,
            p: &p,
            w: 10,
        };
        let v = step_within(&word, stale, p.tau, DenyReason::Quota, || true, || 1_005);
        assert!(matches!(v, Some(Verdict::Deny(_))));
        assert_eq!(word.load(Ordering::Relaxed), 1_025, "nothing handed out");
    }
}
