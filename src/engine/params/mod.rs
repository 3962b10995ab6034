//! Quota parameters published to lock-free readers, and live quota changes that keep every
//! cell's fill level.
//!
//! # How a change reaches every cell
//!
//! `set_quota` is rare and serialised by the limiter; checks are not. A change must rescale
//! each cell's TAT to the new tolerance
//! ([`gcra::rescale`](crate::engine::gcra::rescale)) exactly once, and a check must never
//! apply one quota's parameters to a TAT written under the other's — that is how a
//! racing check used to wipe debt built under a new quota. So:
//!
//! 1. [`SharedParams::begin`] publishes the new parameters *together with the previous ones*,
//!    under a new generation `g`.
//! 2. The limiter rescales its cells group by group. Each group of TAT words has a [`Gate`]:
//!    `2g` once its words are in generation `g`'s scale, odd while they are being rescaled.
//! 3. [`SharedParams::finish`] publishes the new parameters alone.
//!
//! A check reads the snapshot; in steady state (no previous parameters) that is all. During a
//! change it reads its group's gate and uses the parameters of the generation the gate names.
//! Either way, after loading the TAT word it re-validates the snapshot and the gate
//! ([`Token::still_valid`]); a rescale or a new change in between makes it start over, and its
//! compare-and-swap fails if a rescale lands after the re-validation. The only way a check can
//! act on stale parameters is a rescale that left the word's value unchanged (an ABA): that is
//! one check per thread in flight, the bound the engine promises for a change.
//!
//! A bare direct check in steady state reads the snapshot's `T` and τ without the sequence
//! lock's own re-read ([`SharedParams::load_fast`]) and re-validates once, after
//! loading the TAT word ([`SharedParams::confirm`]): one re-read of the sequence number proves
//! both that the words were consistent and that no change began before the TAT was read.

use crate::sync::atomic::{fence, AtomicU64, Ordering};
use crate::sync::spin_loop;

use crate::engine::gcra::{Params, Per};

mod gate;

#[cfg(loom)]
pub use gate::LoomGate;
pub(crate) use gate::{Gate, Token};

/// The fast path's `T` is below this (2^48 ns, about 3.26 days); a request quota with a
/// longer `T` (`"1/w"`, `"1/month"`, up to the longest period, 2^59 ns) takes the general
/// path. So the fast path's verdict stores `T` in 48 bits without a test
/// ([`Allowed::requests`](crate::engine::verdict::Allowed::requests)).
pub(crate) const FAST_T_LIMIT: u64 = 1 << 48;

/// Words per parameter set: `T` (0 for a byte budget), τ, burst, ns-per-byte numerator,
/// denominator low, denominator high.
const SET: usize = 6;

/// Quota parameters behind a double-buffered sequence lock: readers never write and never
/// wait for a writer. A writer (rare, serialised by the caller's quota lock) fills the copy
/// readers are not using, then publishes it by bumping `seq`; a reader retries only if a whole
/// write finished while it read.
///
/// | word of `copies[i]` | meaning |
/// |---|---|
/// | `0..6` | the parameters in force (see `SET`) |
/// | `6..12` | during a change: the previous parameters; `T = τ = 0` otherwise |
/// | `12` | the generation: how many changes have begun |
///
/// The fast path's three words are kept apart, one array per word indexed by copy
/// (`fast_t[seq & 1]`, …), so a check reaches each with one load and no multiply:
///
/// | word | meaning |
/// |---|---|
/// | `fast_t[i]` | `T` for a request quota in steady state; 0 for a byte budget or during a change (the fast path then steps aside) |
/// | `fast_tau[i]` | τ of the parameters in force |
/// | `steady_until[i]` | [`STEADY_NOW`] when `fast_t[i]` is not 0, else 0: the fast path applies to a clock reading below it, so one compare both keeps its arithmetic from overflowing and sends byte budgets and changes to the general path |
///
/// `seq` names the copy in force (`copies[seq & 1]`, and the fast words at `seq & 1`) and
/// versions the whole snapshot.
#[derive(Debug)]
pub(crate) struct SharedParams {
    seq: AtomicU64,
    fast_t: [AtomicU64; 2],
    fast_tau: [AtomicU64; 2],
    steady_until: [AtomicU64; 2],
    copies: [[AtomicU64; COPY]; 2],
    /// The debt cap ([`Params::debt`]): set once at build, kept across quota changes (a
    /// change publishes a quota's parameters; the cap is the limiter's, not the quota's).
    debt: u64,
}

/// Words per copy: the parameters in force, the previous ones, the generation.
const COPY: usize = 2 * SET + 1;

/// Below this clock reading (2^62 ns, about 146 years after the epoch) a steady step cannot
/// overflow (see [`cell::steady_step`](crate::engine::cell::steady_step)).
pub(crate) const STEADY_NOW: u64 = 1 << 62;

/// The fast path's words of one copy, read by
/// [`SharedParams::load_fast`] before they are confirmed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fast {
    /// `T`.
    pub(crate) t: u64,
    /// τ.
    pub(crate) tau: u64,
    /// The fast path applies only to a clock reading below this: [`STEADY_NOW`] for a request
    /// quota in steady state, 0 for a byte budget or during a change.
    pub(crate) until: u64,
    /// The sequence number, for [`SharedParams::confirm`].
    pub(crate) seq: u64,
}

/// One consistent reading of [`SharedParams`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    /// The parameters in force.
    pub(crate) cur: Params,
    /// During a change: the parameters of the cells not yet rescaled.
    pub(crate) prev: Option<Params>,
    /// The generation of `cur` (read only while `prev` is present).
    pub(crate) gen: u64,
    /// The sequence number read, to re-validate with [`SharedParams::unchanged`].
    pub(crate) seq: u64,
}

impl SharedParams {
    pub(crate) fn new(params: Params) -> Self {
        let words = encode(params, None, 0);
        let [t, tau, until] = fast_words(params, None);
        let pair = |w: u64| [AtomicU64::new(w), AtomicU64::new(w)];
        Self {
            seq: AtomicU64::new(0),
            fast_t: pair(t),
            fast_tau: pair(tau),
            steady_until: pair(until),
            copies: [words.map(AtomicU64::new), words.map(AtomicU64::new)],
            debt: params.debt,
        }
    }

    /// The parameters of a one-request step with this limiter's debt cap: what the fast
    /// words `(T, τ)` stand for on the general path.
    #[inline]
    pub(crate) fn request(&self, t: u64, tau: u64) -> Params {
        Params::request(t, tau).with_debt(self.debt)
    }

    /// For a request quota in steady state, `(T, τ, seq)`: three loads and a check; `None`
    /// for a byte budget or during a change. The hot path of a direct check.
    #[inline]
    pub(crate) fn load_request(&self) -> Option<(u64, u64, u64)> {
        loop {
            // Acquire: pairs with the writer's Release, so the copy read below is complete.
            let before = self.seq.load(Ordering::Acquire);
            let i = (before & 1) as usize;
            // Relaxed: validated by the sequence check after the fence.
            let t = self.fast_t[i].load(Ordering::Relaxed);
            let tau = self.fast_tau[i].load(Ordering::Relaxed);
            // Acquire fence: the loads above happen before the re-read of `seq`, so a write
            // into this copy that overlapped them shows as a changed sequence number.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return (t != 0).then_some((t, tau, before));
            }
            spin_loop();
        }
    }

    /// The hot path of a direct check, in two halves around the load of the TAT word: the
    /// fast words read without the sequence lock's own re-read, which
    /// [`confirm`](Self::confirm) does once for both purposes — the words are consistent, and
    /// no change was published before the TAT word was loaded. [`Fast::until`] is 0 for a
    /// byte budget or during a change. Until confirmed, `T` and τ may come from two different
    /// quotas; each is still some quota's (both at most
    /// [`MAX_TAU`](crate::engine::gcra::MAX_TAU), `T` below [`FAST_T_LIMIT`]), so arithmetic
    /// on them cannot overflow, but nothing may be written on their strength.
    #[inline(always)]
    pub(crate) fn load_fast(&self) -> Fast {
        // Acquire: pairs with the writer's Release, so the copy read below is complete.
        let seq = self.seq.load(Ordering::Acquire);
        let i = (seq & 1) as usize;
        // Relaxed: validated by `confirm`, after its fence.
        Fast {
            t: self.fast_t[i].load(Ordering::Relaxed),
            tau: self.fast_tau[i].load(Ordering::Relaxed),
            until: self.steady_until[i].load(Ordering::Relaxed),
            seq,
        }
    }

    /// The burst of the copy `seq` names, unconfirmed as
    /// [`load_fast`](Self::load_fast)'s words.
    #[inline(always)]
    pub(crate) fn burst_unconfirmed(&self, seq: u64) -> u64 {
        self.copies[(seq & 1) as usize][2].load(Ordering::Relaxed)
    }

    /// `true` if nothing was published since `seq` was read by
    /// [`load_fast`](Self::load_fast). Call it after the Acquire
    /// load of the TAT word: the words read with `seq` are then consistent, and the word is in
    /// their scale (as [`unchanged`](Self::unchanged)).
    #[inline(always)]
    pub(crate) fn confirm(&self, seq: u64) -> bool {
        // Acquire fence: the loads of the parameters and of the TAT word happen before the
        // re-read of `seq`, so a write that overlapped any of them shows as a new number.
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == seq
    }

    /// A snapshot for one check: [`load_request`](Self::load_request)'s three words when
    /// they suffice (a request quota in steady state), else [`load`](Self::load).
    #[inline]
    pub(crate) fn load_check(&self) -> Snapshot {
        match self.load_request() {
            Some((t, tau, seq)) => Snapshot {
                cur: self.request(t, tau),
                prev: None,
                gen: 0,
                seq,
            },
            None => self.load(),
        }
    }

    /// A consistent snapshot: the parameters in force and, during a change, the previous ones.
    #[inline]
    pub(crate) fn load(&self) -> Snapshot {
        loop {
            let before = self.seq.load(Ordering::Acquire);
            let c = &self.copies[(before & 1) as usize];
            let cur = decode(&c[0..SET], self.debt);
            // A previous set is present only during a change (its τ is never 0 then).
            let prev = (c[SET + 1].load(Ordering::Relaxed) != 0)
                .then(|| decode(&c[SET..2 * SET], self.debt));
            let gen = c[2 * SET].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return Snapshot {
                    cur,
                    prev,
                    gen,
                    seq: before,
                };
            }
            spin_loop();
        }
    }

    /// `true` if nothing was published since the snapshot `seq` was read. Call it after an
    /// Acquire load of a TAT word: a rescale publishes its snapshot before it writes any word,
    /// so a reader that saw a rescaled word sees the new sequence number here.
    #[inline]
    pub(crate) fn unchanged(&self, seq: u64) -> bool {
        self.seq.load(Ordering::Acquire) == seq
    }

    /// Starts a change to `new`: publishes it with the parameters it replaces, under the next
    /// generation, and returns `(previous, generation)`. The caller serialises changes, then
    /// rescales every [`Gate`] to the returned generation and calls [`finish`](Self::finish).
    pub(crate) fn begin(&self, new: Params) -> (Params, u64) {
        let old = self.load();
        let gen = old.gen.wrapping_add(1);
        self.publish(new, Some(old.cur), gen);
        (old.cur, gen)
    }

    /// Ends the change begun last: every gate is rescaled, the previous parameters go.
    pub(crate) fn finish(&self) {
        let s = self.load();
        self.publish(s.cur, None, s.gen);
    }

    fn publish(&self, cur: Params, prev: Option<Params>, gen: u64) {
        // Release fence before the data words: a reader whose Relaxed load sees one of them
        // then synchronises, at its Acquire fence, with everything before this fence — the
        // previous publication's sequence store included — so its re-read of `seq` sees at
        // least that and fails. Without it a reader that read `seq` before the previous
        // publication could mix words of two quotas and pass its re-check (found by
        // `tests/loom.rs`, `quota_seqlock_never_tears_a_snapshot`). Free on x86.
        fence(Ordering::Release);
        let seq = self.seq.load(Ordering::Relaxed);
        let next = seq.wrapping_add(1);
        let i = (next & 1) as usize;
        let fast = [&self.fast_t[i], &self.fast_tau[i], &self.steady_until[i]];
        for (word, value) in fast.into_iter().zip(fast_words(cur, prev)) {
            word.store(value, Ordering::Relaxed);
        }
        for (word, value) in self.copies[i].iter().zip(encode(cur, prev, gen)) {
            word.store(value, Ordering::Relaxed);
        }
        // Release: a reader that sees `next` sees every word written above.
        self.seq.store(next, Ordering::Release);
    }
}

fn encode_set(p: Params) -> [u64; SET] {
    let (t, num, den) = match p.per {
        Per::Request { t } => (t, 0, 0),
        Per::Byte { num, den } => (0, num, den),
    };
    // Truncations are the intended split of a u128 into two words.
    [t, p.tau, p.burst, num, den as u64, (den >> 64) as u64]
}

fn encode(cur: Params, prev: Option<Params>, gen: u64) -> [u64; COPY] {
    let c = encode_set(cur);
    let p = prev.map_or([0; SET], encode_set);
    [
        c[0], c[1], c[2], c[3], c[4], c[5], p[0], p[1], p[2], p[3], p[4], p[5], gen,
    ]
}

/// The fast path's words of a copy: `T` (0 when the fast path steps aside: a byte budget,
/// a change, a `T` of [`FAST_T_LIMIT`] or more), τ, and the reading it applies below.
fn fast_words(cur: Params, prev: Option<Params>) -> [u64; 3] {
    match cur.per {
        Per::Request { t } if prev.is_none() && t < FAST_T_LIMIT => [t, cur.tau, STEADY_NOW],
        _ => [0, cur.tau, 0],
    }
}

#[inline]
fn decode(w: &[AtomicU64], debt: u64) -> Params {
    let t = w[0].load(Ordering::Relaxed);
    let per = if t != 0 {
        Per::Request { t }
    } else {
        let den = u128::from(w[4].load(Ordering::Relaxed))
            | (u128::from(w[5].load(Ordering::Relaxed)) << 64);
        Per::Byte {
            num: w[3].load(Ordering::Relaxed),
            den,
        }
    };
    Params {
        per,
        tau: w[1].load(Ordering::Relaxed),
        burst: w[2].load(Ordering::Relaxed),
        debt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(t: u64, burst: u64) -> Params {
        Params {
            per: Per::Request { t },
            tau: t * burst,
            burst,
            debt: 0,
        }
    }

    #[test]
    fn a_t_of_2_48_or_more_leaves_the_fast_path() {
        let fast = SharedParams::new(req(FAST_T_LIMIT - 1, 2));
        assert_eq!(
            fast.load_request().map(|(t, _, _)| t),
            Some(FAST_T_LIMIT - 1)
        );
        let slow = SharedParams::new(req(FAST_T_LIMIT, 2));
        assert!(slow.load_request().is_none());
        assert_eq!(slow.load_fast().until, 0);
        assert_eq!(fast.load_fast().until, STEADY_NOW);
        assert_eq!(slow.load().cur.per, Per::Request { t: FAST_T_LIMIT });
    }

    #[test]
    fn params_round_trip_through_the_seqlock() {
        let r = req(7, 10);
        let bytes = Params {
            per: Per::Byte {
                num: 3,
                den: (5u128 << 64) | 9,
            },
            tau: 1 << 40,
            burst: 12,
            debt: 0,
        };
        let shared = SharedParams::new(r);
        assert_eq!(shared.load().cur, r);
        assert_eq!(
            shared.load_request().map(|(t, tau, _)| (t, tau)),
            Some((7, 70))
        );
        let (old, gen) = shared.begin(bytes);
        assert_eq!((old, gen), (r, 1));
        let s = shared.load();
        assert_eq!((s.cur, s.prev, s.gen), (bytes, Some(r), 1));
        assert_eq!(shared.load_request(), None, "no fast path during a change");
        assert_eq!(shared.load_fast().until, 0, "no fast path during a change");
        shared.finish();
        let s = shared.load();
        assert_eq!((s.cur, s.prev, s.gen), (bytes, None, 1));
        assert_eq!(
            shared.load_request(),
            None,
            "a byte budget has no fast path"
        );
        assert_eq!(
            shared.load_fast().until,
            0,
            "a byte budget has no fast path"
        );
        // Back to a request quota: the fast path's words are the new quota's.
        shared.begin(r);
        shared.finish();
        let f = shared.load_fast();
        assert_eq!((f.t, f.tau, f.until), (7, 70, STEADY_NOW));
    }

    #[test]
    fn a_gate_names_the_parameters_of_its_words() {
        let (a, b) = (req(10, 5), req(10, 50));
        let shared = SharedParams::new(a);
        let gate = Gate::default();
        let word = AtomicU64::new(125); // at now = 100: half of τ = 50 used
        let (old, gen) = shared.begin(b);
        let snap = shared.load();
        let (p, token) = gate.resolve(&snap);
        assert_eq!(p, a, "not rescaled yet: the previous quota");
        gate.rescale(gen, [(&word, 0)], &old, &b, 100);
        assert_eq!(word.load(Ordering::Relaxed), 350, "half of τ = 500 used");
        assert!(
            !token.still_valid(&shared, &gate),
            "the rescale invalidates it"
        );
        let (p, token) = gate.resolve(&shared.load());
        assert_eq!(p, b);
        assert!(token.still_valid(&shared, &gate));
        shared.finish();
        assert!(
            !token.still_valid(&shared, &gate),
            "a new snapshot invalidates it"
        );
    }
}

/// Hooks for `tests/loom.rs`: the sequence lock alone, with nothing between its publications
/// (no gate's fence), so a model sees what each of its own orderings holds.
#[cfg(loom)]
#[doc(hidden)]
#[derive(Debug)]
pub struct LoomSeqlock(SharedParams);

#[cfg(loom)]
impl LoomSeqlock {
    /// The lock over `quota`'s parameters.
    pub fn new(quota: &crate::Quota) -> Self {
        Self(SharedParams::new(quota.params()))
    }

    /// [`SharedParams::begin`]: `quota` published with the parameters it replaces.
    pub fn begin(&self, quota: &crate::Quota) {
        self.0.begin(quota.params());
    }

    /// [`SharedParams::finish`].
    pub fn finish(&self) {
        self.0.finish();
    }

    /// The words one [`SharedParams::load`] returned: `(T, τ, previous τ or 0, generation)`.
    pub fn load(&self) -> [u64; 4] {
        let s = self.0.load();
        let t = match s.cur.per {
            Per::Request { t } => t,
            Per::Byte { .. } => 0,
        };
        [t, s.cur.tau, s.prev.map_or(0, |p| p.tau), s.gen]
    }

    /// [`SharedParams::load_request`]'s `(T, τ)`: `None` for a byte budget or during a change.
    pub fn request(&self) -> Option<(u64, u64)> {
        self.0.load_request().map(|(t, tau, _)| (t, tau))
    }

    /// What the direct check's hot path accepts: [`SharedParams::load_fast`]'s `(T, τ)` once
    /// [`SharedParams::confirm`] holds (`None` while a change is under way: the general path).
    pub fn fast(&self) -> Option<(u64, u64)> {
        loop {
            let f = self.0.load_fast();
            if self.0.confirm(f.seq) {
                return (f.until != 0).then_some((f.t, f.tau));
            }
        }
    }
}
