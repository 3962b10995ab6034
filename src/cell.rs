//! The atomic side of the engine: one TAT word per cell, and the quota parameters published
//! so that a check never sees a torn `(T, τ)` pair.

use core::hint::spin_loop;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::gcra::{self, Outcome, Params, Per};
use crate::verdict::{Allowed, Denied, DenyReason, Verdict};

/// The TAT value that marks a keyed slot as dead (swept); never a real TAT
/// ([`gcra::MAX_TAT`] is one less).
pub(crate) const TOMBSTONE: u64 = u64::MAX;

/// Quota parameters behind a sequence lock: readers never block and never write; a writer
/// (`set_quota`, rare) makes the sequence odd, writes, and makes it even again.
///
/// | word | meaning |
/// |---|---|
/// | `seq` | even: stable; odd: a write is in progress |
/// | `words[0]` | `T` in ns for a request quota; 0 for a byte budget |
/// | `words[1]` | τ in ns |
/// | `words[2]` | effective burst |
/// | `words[3]` | byte budgets: numerator of ns per byte |
/// | `words[4..6]` | byte budgets: denominator of ns per byte (low, high) |
#[derive(Debug)]
pub(crate) struct SharedParams {
    seq: AtomicU64,
    words: [AtomicU64; 6],
    writer: Mutex<()>,
}

impl SharedParams {
    pub(crate) fn new(params: Params) -> Self {
        let words = encode(params).map(AtomicU64::new);
        Self {
            seq: AtomicU64::new(0),
            words,
            writer: Mutex::new(()),
        }
    }

    /// A consistent snapshot of the parameters.
    #[inline]
    pub(crate) fn load(&self) -> Params {
        loop {
            // Acquire: the words read below are at least as new as this sequence number.
            let before = self.seq.load(Ordering::Acquire);
            // Relaxed: validated by the sequence check after the fence.
            let words = [
                self.words[0].load(Ordering::Relaxed),
                self.words[1].load(Ordering::Relaxed),
                self.words[2].load(Ordering::Relaxed),
                self.words[3].load(Ordering::Relaxed),
                self.words[4].load(Ordering::Relaxed),
                self.words[5].load(Ordering::Relaxed),
            ];
            // Acquire fence: the word loads above happen before the re-read of `seq`, so a
            // write that overlapped them is seen as a changed sequence number.
            fence(Ordering::Acquire);
            let after = self.seq.load(Ordering::Relaxed);
            if before == after && before & 1 == 0 {
                return decode(words);
            }
            spin_loop();
        }
    }

    /// Publishes new parameters.
    pub(crate) fn store(&self, params: Params) {
        let _writer = self.writer.lock();
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Release fence: a reader that sees any word below also sees the odd sequence.
        fence(Ordering::Release);
        for (word, value) in self.words.iter().zip(encode(params)) {
            word.store(value, Ordering::Relaxed);
        }
        // Release: a reader that sees the even sequence sees every word written above.
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
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

#[inline]
fn decode(w: [u64; 6]) -> Params {
    let per = match w[0] {
        0 => Per::Byte {
            num: w[3],
            den: u128::from(w[4]) | (u128::from(w[5]) << 64),
        },
        t => Per::Request { t },
    };
    Params {
        per,
        tau: w[1],
        burst: w[2],
    }
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

/// Runs one step of weight `w ≥ 1` on the TAT word: one CAS loop on allow; a denial writes
/// only when the clamp lowered the TAT (after a quota change), never in steady state.
///
/// `still_ours` is asked after each read of the word (the keyed table re-checks that the slot
/// still holds its key). Returns `None` if the word holds [`TOMBSTONE`] or `still_ours` says
/// no: the caller must look the key up again.
#[inline]
pub(crate) fn step_atomic(
    word: &AtomicU64,
    now: u64,
    p: &Params,
    w: u64,
    reason: DenyReason,
    still_ours: impl Fn() -> bool,
) -> Option<Verdict> {
    // Acquire (load and failed CAS): in the keyed table a slot's new TAT is published with
    // Release after its new key, so a reader that sees the TAT and re-checks the key sees the
    // new key. For a direct limiter this costs nothing on x86 and orders nothing else.
    let mut cur = word.load(Ordering::Acquire);
    loop {
        if cur == TOMBSTONE || !still_ours() {
            return None;
        }
        let clamped = gcra::clamp(cur, now, p.tau);
        let outcome = gcra::step(clamped, now, w, p.tau);
        let next = match outcome {
            Outcome::Allow { tat, .. } => tat,
            _ if clamped < cur => clamped,
            _ => return Some(verdict(outcome, p, reason)),
        };
        match word.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(verdict(outcome, p, reason)),
            Err(actual) => cur = actual,
        }
    }
}

/// [`step_atomic`] on a word that never holds the tombstone (a direct limiter, the overflow
/// cell). TATs are capped below the tombstone, so the fallback is unreachable; it denies.
#[inline]
pub(crate) fn step_word(
    word: &AtomicU64,
    now: u64,
    p: &Params,
    w: u64,
    reason: DenyReason,
) -> Verdict {
    step_atomic(word, now, p, w, reason, || true).unwrap_or(Verdict::Deny(Denied::new(
        u64::MAX,
        DenyReason::ClockOverflow,
    )))
}

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
        let v = step_atomic(&word, 100, &p, 10, DenyReason::Quota, || true);
        assert!(matches!(v, Some(Verdict::Deny(_))));
        assert_eq!(word.load(Ordering::Relaxed), 120);
    }
}

/// Keeps a hot atomic on its own cache line(s), so writes to it do not slow readers of its
/// neighbours (128 bytes: adjacent-line prefetch pairs lines on x86).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);
