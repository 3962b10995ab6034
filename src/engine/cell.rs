//! The atomic side of the engine: one TAT word per cell, and the quota parameters published
//! so that a check never sees a torn `(T, τ)` pair.

use core::hint::spin_loop;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::engine::gcra::{self, Outcome, Params, Per};
use crate::engine::verdict::{
    Allowed, Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict,
};

/// The TAT value that marks a keyed slot as dead (swept); never a real TAT
/// ([`gcra::MAX_TAT`] is one less).
pub(crate) const TOMBSTONE: u64 = u64::MAX;

/// Quota parameters behind a double-buffered sequence lock: readers never write and never
/// wait for a writer. A writer (`set_quota`, rare, serialised by the caller's quota lock)
/// fills the copy readers are not using, then publishes it by bumping `seq`; a reader retries
/// only if a whole write finished while it read.
///
/// | word | meaning |
/// |---|---|
/// | `seq` | the copy in force is `copies[seq & 1]` |
/// | `copies[i][0]` | `T` in ns for a request quota; 0 for a byte budget |
/// | `copies[i][1]` | τ in ns |
/// | `copies[i][2]` | effective burst |
/// | `copies[i][3]` | byte budgets: numerator of ns per byte |
/// | `copies[i][4..6]` | byte budgets: denominator of ns per byte (low, high) |
#[derive(Debug)]
pub(crate) struct SharedParams {
    seq: AtomicU64,
    copies: [[AtomicU64; 6]; 2],
}

impl SharedParams {
    pub(crate) fn new(params: Params) -> Self {
        let words = encode(params);
        Self {
            seq: AtomicU64::new(0),
            copies: [words.map(AtomicU64::new), words.map(AtomicU64::new)],
        }
    }

    /// A consistent snapshot of the parameters.
    #[inline]
    pub(crate) fn load(&self) -> Params {
        loop {
            // Acquire: pairs with the writer's Release, so the copy read below is complete.
            let before = self.seq.load(Ordering::Acquire);
            let c = &self.copies[(before & 1) as usize];
            // Relaxed: validated by the sequence check after the fence.
            let t = c[0].load(Ordering::Relaxed);
            let tau = c[1].load(Ordering::Relaxed);
            let burst = c[2].load(Ordering::Relaxed);
            // Byte budgets only: request quotas skip three loads.
            let byte = (t == 0).then(|| {
                let num = c[3].load(Ordering::Relaxed);
                let den = u128::from(c[4].load(Ordering::Relaxed))
                    | (u128::from(c[5].load(Ordering::Relaxed)) << 64);
                (num, den)
            });
            // Acquire fence: the loads above happen before the re-read of `seq`, so a write
            // into this copy that overlapped them shows as a changed sequence number.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                let per = match byte {
                    Some((num, den)) => Per::Byte { num, den },
                    None => Per::Request { t },
                };
                return Params { per, tau, burst };
            }
            spin_loop();
        }
    }

    /// For a request quota, `(T, τ)`: three loads and a check, no byte-budget words; `None`
    /// for a byte budget. The hot path of [`crate::RateLimiter::check`].
    #[inline]
    pub(crate) fn load_request(&self) -> Option<(u64, u64)> {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            let c = &self.copies[(before & 1) as usize];
            let t = c[0].load(Ordering::Relaxed);
            let tau = c[1].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return (t != 0).then_some((t, tau));
            }
            spin_loop();
        }
    }

    /// Publishes new parameters. Callers serialise writers (the limiter's quota lock).
    pub(crate) fn store(&self, params: Params) {
        let seq = self.seq.load(Ordering::Relaxed);
        let next = seq.wrapping_add(1);
        for (word, value) in self.copies[(next & 1) as usize].iter().zip(encode(params)) {
            word.store(value, Ordering::Relaxed);
        }
        // Release: a reader that sees `next` sees every word written above.
        self.seq.store(next, Ordering::Release);
    }
}

fn encode(p: Params) -> [u64; 6] {
    let (t, num, den) = match p.per {
        Per::Request { t } => (t, 0, 0),
        Per::Byte { num, den } => (0, num, den),
    };
    // Truncations are the intended split of a u128 into two words.
    [t, p.tau, p.burst, num, den as u64, (den >> 64) as u64]
}

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
    let clamped = gcra::clamp(tat, now, p.tau);
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

/// Runs one step on the TAT word: one CAS loop on allow; a denial writes only when the clamp
/// genuinely lowers the TAT (after a quota change), never in steady state.
///
/// `still_ours` is asked after each read of the word (the keyed table re-checks that the slot
/// still holds its key); `fresh` reads the clock again (see [`refresh`]). Returns `None` if the
/// word holds [`TOMBSTONE`] or `still_ours` says no: the caller must look the key up again.
///
/// `tol ≤ τ` is the tolerance of the check's priority class (τ itself without classes): the
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
    let (p, w, mut now) = (a.p, a.w, a.now);
    let told = p.within(tol);
    // Acquire (load and failed CAS): in the keyed table a slot's new TAT is published with
    // Release after its new key, so a reader that sees the TAT and re-checks the key sees the
    // new key. For a direct limiter this costs nothing on x86 and orders nothing else.
    let mut cur = word.load(Ordering::Acquire);
    let mut refreshed = false;
    loop {
        if cur == TOMBSTONE || !still_ours() {
            return None;
        }
        let clamped = gcra::clamp(cur, now, p.tau);
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
        match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(verdict(outcome, &told, reason)),
            Err(actual) => {
                cur = actual;
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

/// The ceiling that still applies during a pass-through, `factor` (c) × the quota, as
/// `(weight of this check, tolerance)` on the cell's own TAT. A check past the normal
/// tolerance is charged `w/c`, so the sustained rate is c × the quota; the tolerance grows by
/// `(c−1)/c · τ`, room for `(c−1)·burst` such checks on top of the normal burst, so at one
/// instant c × the burst passes.
#[inline]
pub(crate) fn ceiling(p: &Params, w: u64, factor: u32) -> (u64, u64) {
    let c = u128::from(factor.max(1));
    let extra = u128::from(p.tau) * (c - 1) / c;
    let tau = (u128::from(p.tau) + extra).min(u128::from(gcra::MAX_TAU));
    // tau ≤ MAX_TAU fits u64.
    (w.div_ceil(factor.max(1).into()), tau as u64)
}

/// A step while the limiter passes traffic through with `reason`: the shadow verdict is the
/// normal step (its TAT written on a shadow-allow, so the shadow stays true); a shadow-denial
/// passes if the `ceiling` (weight, tolerance) admits it, and is charged against it; past the
/// ceiling it is a real denial ([`DenyReason::Ceiling`]). Returns `None` like [`step_within`].
#[inline]
pub(crate) fn step_pass_through(
    word: &AtomicU64,
    a: Attempt<'_>,
    reason: PassReason,
    ceiling: Option<(u64, u64)>,
    still_ours: impl Fn() -> bool,
    fresh: impl Fn() -> u64,
) -> Option<Verdict> {
    let (p, w, mut now) = (a.p, a.w, a.now);
    let mut cur = word.load(Ordering::Acquire);
    let mut refreshed = false;
    loop {
        if cur == TOMBSTONE || !still_ours() {
            return None;
        }
        if cur > now.saturating_add(p.tau) && !refreshed {
            refreshed = true;
            if refresh(&mut now, &fresh) {
                continue;
            }
        }
        let Some((next, verdict)) = pass_step(cur, now, p, w, reason, ceiling) else {
            return Some(verdict_of_pass(cur, now, p, w, reason, ceiling));
        };
        match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(verdict),
            Err(actual) => {
                cur = actual;
                refreshed = false;
            }
        }
    }
}

/// The write and verdict of one pass-through step, or `None` if it writes nothing.
fn pass_step(
    cur: u64,
    now: u64,
    p: &Params,
    w: u64,
    reason: PassReason,
    ceiling: Option<(u64, u64)>,
) -> Option<(u64, Verdict)> {
    let passed = |shadow| Verdict::PassThrough(PassThrough::new(reason, shadow));
    // A shadow-allow implies tat ≤ now + τ − w: the normal clamp lowers nothing here.
    match gcra::step(gcra::clamp(cur, now, p.tau), now, w, p.tau) {
        Outcome::Allow { tat, .. } => Some((tat, passed(Shadow::Allow))),
        Outcome::Overflow => None,
        Outcome::Deny { .. } => {
            let (wc, tc) = ceiling?;
            let clamped = gcra::clamp(cur, now, tc);
            match gcra::step(clamped, now, wc, tc) {
                Outcome::Allow { tat, .. } => Some((tat, passed(Shadow::Deny))),
                Outcome::Deny { retry_after } if clamped < cur => Some((
                    clamped,
                    Verdict::Deny(Denied::new(retry_after, DenyReason::Ceiling)),
                )),
                _ => None,
            }
        }
    }
}

/// The verdict of a pass-through step that writes nothing.
#[cold]
fn verdict_of_pass(
    cur: u64,
    now: u64,
    p: &Params,
    w: u64,
    reason: PassReason,
    ceiling: Option<(u64, u64)>,
) -> Verdict {
    match gcra::step(gcra::clamp(cur, now, p.tau), now, w, p.tau) {
        Outcome::Overflow => verdict(Outcome::Overflow, p, DenyReason::Quota),
        _ => match ceiling {
            None => Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny)),
            Some((wc, tc)) => match gcra::step(gcra::clamp(cur, now, tc), now, wc, tc) {
                Outcome::Deny { retry_after } => {
                    Verdict::Deny(Denied::new(retry_after, DenyReason::Ceiling))
                }
                other => verdict(other, p, DenyReason::Ceiling),
            },
        },
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
    fn params_round_trip_through_the_seqlock() {
        let req = Params {
            per: Per::Request { t: 7 },
            tau: 70,
            burst: 10,
        };
        let bytes = Params {
            per: Per::Byte {
                num: 3,
                den: (5u128 << 64) | 9,
            },
            tau: 1 << 40,
            burst: 12,
        };
        let shared = SharedParams::new(req);
        assert_eq!(shared.load(), req);
        shared.store(bytes);
        assert_eq!(shared.load(), bytes);
    }

    #[test]
    fn a_lowering_clamp_is_stored_even_on_a_denial() {
        let p = Params {
            per: Per::Request { t: 10 },
            tau: 20,
            burst: 2,
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
    fn a_stale_reading_never_lowers_a_fresher_tat() {
        let p = Params {
            per: Per::Request { t: 10 },
            tau: 20,
            burst: 2,
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
