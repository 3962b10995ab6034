//! Model checks of the lock-free core under loom: every interleaving of 2–3 threads
//! up to a preemption bound, on the crate's own code (`src/sync.rs` swaps std's atomics and
//! locks for loom's under `cfg(loom)`).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release --test loom -- --nocapture`. In a normal
//! build this file compiles to nothing.
//!
//! Under loom the key table is tiny (a first segment of 2 buckets, a gate group of one bucket
//! of 4 slots), and an integer key is its own fingerprint: `key(h)` has both candidate
//! buckets named by `h` (bucket `h mod 2` at first, `h mod 4` once bucket 0 has split). The
//! clock is a frozen `ManualClock`: the clock is not what is checked, and a frozen clock makes
//! keys' TATs coincide, which is what the slot life cycle's ABA needs.
#![cfg(loom)]

use std::time::Duration;

use loom::thread;
use tollgate::limiter::Admission;
use tollgate::{KeyedRateLimiter, ManualClock, RateLimiter};

mod loom_support;
use loom_support::*;

// ---------------------------------------------------------------------------------------
// 1. Quota changes: the sequence lock, gates and generations.
// ---------------------------------------------------------------------------------------

/// `set_quota` (begin, rescale, finish) racing two checks of a direct cell. From one unit of
/// 2 used, 2 → 4 burst: the serial histories allow 1 or 2 of the two checks and leave the cell
/// full either way; an allow leaves at most 1 remaining (0 under the old quota, 1 or 0 under
/// the new one).
#[test]
fn quota_change_races_direct_checks() {
    explore("quota_change_races_direct_checks", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(
            RateLimiter::builder(quota("10/s;burst=2"))
                .clock(clock.clone())
                .build(),
        );
        assert!(lim.check().is_permitted());
        let l = lim.clone();
        let change = thread::spawn(move || l.set_quota(quota("10/s;burst=4")));
        let mut allowed = 0;
        for _ in 0..2 {
            let v = lim.check();
            if let Some(a) = v.allowed() {
                assert!(a.remaining() <= 1, "an impossible remainder: {v:?}");
                allowed += 1;
            }
        }
        change.join().unwrap();
        assert!((1..=2).contains(&allowed), "{allowed} allowed");
        assert_eq!(drain(|| lim.check(), 8), 0, "the cell ends full");
    });
}

/// `set_quota` rescaling a keyed table group by group (bucket 0, then bucket 1) racing a
/// thread that checks a key in group 0, then one in group 1. Each key has used 1 of 2; the
/// change makes it 2 of 4. A key checked before its group is rescaled ends full (2 allows in
/// all), one checked after has 1 left (3 in all). (Every pair of outcomes has a serial
/// history: the change is not atomic across groups, only per cell.)
#[test]
fn quota_change_gates_two_groups() {
    explore("quota_change_gates_two_groups", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed("10/s;burst=2", &clock));
        let (a, b) = (key(2), key(1)); // bucket 0, bucket 1: two gate groups
        assert!(lim.check_key(&a).is_permitted());
        assert!(lim.check_key(&b).is_permitted());
        let l = lim.clone();
        let change = thread::spawn(move || l.set_quota(quota("10/s;burst=4")));
        assert!(lim.check_key(&a).is_permitted());
        assert!(lim.check_key(&b).is_permitted());
        change.join().unwrap();
        let ta = 2 + drain(|| lim.check_key(&a), 8);
        let tb = 2 + drain(|| lim.check_key(&b), 8);
        assert!((2..=3).contains(&ta) && (2..=3).contains(&tb), "{ta}, {tb}");
    });
}

/// The sequence lock's publication: `publish` stores the data words Relaxed, with nothing
/// ordering them after the previous publication's sequence store. A check that read the
/// sequence number before the change could read the fast path's `T` from one quota and τ
/// from the other and still pass its re-check. On an empty cell the two quotas allow with 1
/// (10/s, burst 2) or 3 (4/s, burst 4) remaining; `T` of the first with τ of the second
/// would leave 9, `T` of the second with τ of the first would deny.
///
/// Loom found exactly that (`T` = 100 ms with τ = 1 s: 9 left) at a preemption bound of 2,
/// fixed by a Release fence at the start of `publish`. (Found while `set_quota` read the clock
/// inside the change; with the clock read before `begin`, the clock's own lock and the gates'
/// rescale fence order more, and this model passes with the fence removed (6,993,845
/// interleavings at its bound of 2, 468 s). The fence is guarded by the next model, which
/// takes the sequence lock alone.)
#[test]
fn quota_seqlock_never_tears_a_snapshot() {
    explore("quota_seqlock_never_tears_a_snapshot", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(
            RateLimiter::builder(quota("10/s;burst=2"))
                .clock(clock.clone())
                .build(),
        );
        let l = lim.clone();
        let change = thread::spawn(move || {
            l.set_quota(quota("4/s;burst=4"));
            l.set_quota(quota("10/s;burst=2"));
        });
        let v = lim.check();
        change.join().unwrap();
        let rem = v.allowed().map(|a| a.remaining());
        assert!(matches!(rem, Some(1 | 3)), "a torn snapshot: {v:?}");
        // In a serial history the cell ends with 1 left under 10/s;burst=2 (half used, or a
        // quarter). The engine's documented allowance (params.rs): a rescale that leaves the
        // word unchanged (here the empty cell) cannot stop one check in flight from landing
        // under the parameters it read — loom finds it: the check reads 4/s;burst=4 and the
        // empty word, the second change runs whole (its rescale a no-op), and the check's
        // re-read of the sequence number, Relaxed after a fence that synchronises with
        // nothing, still sees the old one: 250 ms written on a 200 ms scale, the cell full.
        // One check per thread in flight, in the denying direction here.
        let left = drain(|| lim.check(), 8);
        assert!(left <= 1, "{left} left: more than any history allows");
    });
}

/// The sequence lock alone ([`tollgate::LoomSeqlock`]: no gate, no clock, no lock between its
/// publications), so nothing but its own orderings can order a reader after the writer. This
/// is the model that guards the Release fence at the start of `publish`; the model above
/// cannot, because between a change's two publications the gates' rescale runs a Release
/// fence of its own, and the clock's lock orders more: with the fence removed it still passes.
///
/// The reader reads sequence number 0 (copy 0: 10/s, burst 2), the writer then publishes the
/// change (copy 1) and its end (copy 0 again: 4/s, burst 4). A reader whose loads of copy 0
/// see some of the end's words must fail its re-check: with the fence, the end's data words
/// carry the writer's view from after the change's sequence store, so the reader's Acquire
/// fence makes its re-read see at least 1. Without it nothing orders them, and loom finds a
/// snapshot mixing the two quotas that passes its re-check (`T` of 10/s with τ of 4/s).
///
/// Loom models fences as C11 does here: a Relaxed store carries the view of the writer's last
/// Release fence (`released` in loom's `rt::thread`), which an Acquire fence after a load that
/// read it joins; a Release *store* orders only loads that read it.
#[test]
fn quota_seqlock_publication_fence_orders_the_data_words() {
    explore(
        "quota_seqlock_publication_fence_orders_the_data_words",
        2,
        || {
            let (a, b) = (quota("10/s;burst=2"), quota("4/s;burst=4"));
            // The three states a serial history shows, from a lock of the model's own.
            let serial = tollgate::LoomSeqlock::new(&a);
            let s0 = serial.load();
            serial.begin(&b);
            let s1 = serial.load();
            serial.finish();
            let s2 = serial.load();
            let lock = loom::sync::Arc::new(tollgate::LoomSeqlock::new(&a));
            let w = lock.clone();
            let writer = thread::spawn(move || {
                w.begin(&b);
                w.finish();
            });
            let fast = lock.fast();
            let request = lock.request();
            let snap = lock.load();
            writer.join().unwrap();
            let steady = [(s0[0], s0[1]), (s2[0], s2[1])];
            assert!(
                fast.is_none_or(|f| steady.contains(&f)),
                "the fast path accepted a torn (T, τ): {fast:?}, states {steady:?}"
            );
            assert!(
                request.is_none_or(|f| steady.contains(&f)),
                "load_request returned a torn (T, τ): {request:?}, states {steady:?}"
            );
            assert!(
                [s0, s1, s2].contains(&snap),
                "a torn snapshot: {snap:?}, states {:?}",
                [s0, s1, s2]
            );
        },
    );
}

/// A gate on its own ([`tollgate::LoomGate`]: one group of one word, the sequence lock, no
/// table, lock or clock): a check's lock-free read — snapshot, the parameters the gate names,
/// the TAT word, the token's re-validation — racing a whole change. A read that re-validates
/// must hold the word in the scale of the parameters it chose: the serial states are the old
/// quota with the old word and the new quota with the rescaled word, nothing in between.
///
/// It guards the gate's Release orderings: the final store of a rescale (a check that sees
/// the group rescaled must see its rescaled words), and the Release that orders the odd gate
/// value before the rescaled words — which two steps give, the fence after the odd store and
/// the word's compare-and-swap (AcqRel): either alone suffices, so each alone is an
/// equivalent mutant, and the model fails with both removed (`docs/model-checking.md`).
#[test]
fn quota_gate_orders_a_group_rescale() {
    explore("quota_gate_orders_a_group_rescale", 2, || {
        let (a, b) = (quota("10/s;burst=2"), quota("4/s;burst=4"));
        let now = 1_000_000_000;
        let tat = now + 100_000_000; // one of 2 used under 10/s
        let serial = tollgate::LoomGate::new(&a, tat, now);
        let before = serial.read().expect("no change in flight");
        serial.change(&b);
        let after = serial.read().expect("no change in flight");
        assert_ne!(before.1, after.1, "the change rescales the word");
        let gate = loom::sync::Arc::new(tollgate::LoomGate::new(&a, tat, now));
        let g = gate.clone();
        let reader = thread::spawn(move || g.read());
        gate.change(&b);
        let read = reader.join().unwrap();
        assert!(
            read.is_none_or(|r| r == before || r == after),
            "a word read in another quota's scale: {read:?}, states {before:?} {after:?}"
        );
    });
}

/// `peek` (and `check_n(0)`) racing a quota change: they load the TAT word after resolving
/// the parameters, and must not read a word rescaled meanwhile under the parameters they
/// resolved before it. After one allow under 10/s;burst=2 (half used) the change to
/// 4/s;burst=4 keeps it half used: a check of one unit is allowed under either quota.
#[test]
fn quota_change_races_a_peek() {
    explore("quota_change_races_a_peek", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(
            RateLimiter::builder(quota("10/s;burst=2"))
                .clock(clock.clone())
                .build(),
        );
        assert!(lim.check().is_permitted());
        let l = lim.clone();
        let change = thread::spawn(move || l.set_quota(quota("4/s;burst=4")));
        let p = lim.peek();
        let z = lim.check_n(0).expect("a cost of 0 always fits");
        change.join().unwrap();
        assert!(p.is_permitted(), "peek: {p:?}");
        assert!(
            matches!(z.allowed().map(|a| a.remaining()), Some(1 | 2)),
            "{z:?}"
        );
    });
}

/// The keyed table's read-only look (`check_key_n(k, 0)`, `peek_key`) racing a quota change,
/// as [`quota_change_races_a_peek`] for a key's slot and its group's gate.
#[test]
fn quota_change_races_a_key_peek() {
    explore("quota_change_races_a_key_peek", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed("10/s;burst=2", &clock));
        let k = key(2);
        assert!(lim.check_key(&k).is_permitted());
        let l = lim.clone();
        let change = thread::spawn(move || l.set_quota(quota("4/s;burst=4")));
        let z = lim.check_key_n(&k, 0).expect("a cost of 0 always fits");
        let p = lim.peek_key(&k);
        change.join().unwrap();
        assert!(
            matches!(z.allowed().map(|a| a.remaining()), Some(1 | 2)),
            "{z:?}"
        );
        assert!(p.is_permitted(), "peek: {p:?}");
    });
}

/// [`quota_change_races_a_key_peek`] for a key the full table would send to the shared
/// overflow cell: the peek reads the overflow cell's word, which the change rescales too.
#[test]
fn quota_change_races_an_overflow_peek() {
    explore("quota_change_races_an_overflow_peek", 2, || {
        let clock = clock();
        let lim = KeyedRateLimiter::<u64>::builder(quota("10/s;burst=2"))
            .clock(clock.clone())
            .max_keys(1)
            .build();
        let lim = loom::sync::Arc::new(lim);
        assert!(lim.check_key(&key(2)).is_permitted());
        // The table is full: a new key takes a unit of the overflow cell (1 of 2 left).
        assert!(lim.check_key(&key(3)).is_permitted());
        let l = lim.clone();
        let change = thread::spawn(move || l.set_quota(quota("4/s;burst=4")));
        let z = lim
            .check_key_n(&key(4), 0)
            .expect("a cost of 0 always fits");
        let p = lim.peek_key(&key(4));
        change.join().unwrap();
        assert!(
            matches!(z.allowed().map(|a| a.remaining()), Some(1 | 2)),
            "{z:?}"
        );
        assert!(p.is_permitted(), "peek: {p:?}");
    });
}

// ---------------------------------------------------------------------------------------
// 2. The slot life cycle: install, relocate, the check's re-check and its swap on a word
//    tagged with its owner (`src/engine/tagged.rs`).
// ---------------------------------------------------------------------------------------

/// The second failure mode of the ABA undo the check used to have: a check's compare-and-swap
/// lands on `A`'s slot (a legitimate allow, `X → X + T`); a split then moves `A` away carrying
/// `X + T`, and a new key `C` (cost 2 at the same frozen instant: TAT `now + 2T = X + T`) is
/// installed in the dead slot. The old check re-checked the key after its swap, saw `C` and
/// the word holding exactly its write, and "undid" it: `C`'s TAT dropped by `T`, so `C` was
/// allowed one more than its burst. With the owner's tag in the word there is no undo: the
/// swap that landed stands. Invariant: no key is ever allowed more than its burst (3) in all,
/// and none is charged for another's check.
///
/// Loom did not reach the undo's interleaving (433 interleavings at a preemption bound of 3,
/// 112 at 2, all passing, before the tag): the model stays as a guard.
#[test]
fn slot_aba_undo_lowers_a_new_owner() {
    explore("slot_aba_undo_lowers_a_new_owner", 3, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        let c = key(12); // bucket 0 after the split: A's dead slot 0 is its first free one
        let l = lim.clone();
        let insert = thread::spawn(move || {
            l.check_key_n(&c, 2)
                .expect("2 fits a burst of 3")
                .is_permitted()
        });
        let a1 = u64::from(lim.check_key(&A).is_permitted());
        let c1 = if insert.join().unwrap() { 2 } else { 0 };
        let ta = 1 + a1 + drain(|| lim.check_key(&A), 8);
        let tc = c1 + drain(|| lim.check_key(&c), 8);
        assert_eq!(ta, 3, "A: allowed {ta} of a burst of 3");
        assert_eq!(tc, 3, "C: allowed {tc} of a burst of 3");
    });
}

/// A lock-free peek of `A` racing the insert of `C` that splits bucket 0, moves `A` away and
/// installs `C` in `A`'s dead slot 0. The peek may have found `A` in slot 0 before the move;
/// the TAT word it then loads may be `C`'s, which decoded under `A`'s mask is neither key's
/// state. It re-checks the slot's key after that load and looks again. Invariant: `A` is not
/// touched (a frozen clock), so the peek says exactly what it said before the race.
///
/// With the key re-check removed loom finds the peek reading `C`'s word (a TAT of
/// `C`'s ⊕ both masks: a denial of many years).
#[test]
fn slot_reuse_races_a_key_peek() {
    explore("slot_reuse_races_a_key_peek", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        let before = lim.peek_key(&A);
        let c = key(12); // bucket 0 after the split: A's dead slot 0 is its first free one
        let l = lim.clone();
        let insert = thread::spawn(move || {
            l.check_key_n(&c, 2)
                .expect("2 fits a burst of 3")
                .is_permitted()
        });
        let p = lim.peek_key(&A);
        assert!(insert.join().unwrap(), "C's first check is allowed");
        assert_eq!(p, before, "the peek of A read another key's word");
        assert_eq!(lim.peek_key(&A), before);
    });
}

/// A key's first check installing it in a never-used slot (TAT word first, then the key
/// with Release) racing a lock-free peek of the same key: the peek sees the key absent (a
/// full burst) or installed with its TAT, never the key with the slot's empty word (which
/// decodes under the key's mask to a TAT of centuries). The property the key's Release in
/// `install` and the lookup's Acquire load of the key hold; loom 0.7 does not produce the
/// stale read of the word here, so the model passes with either removed (see
/// `docs/model-checking.md`, the census).
#[test]
fn slot_install_races_a_key_peek() {
    explore("slot_install_races_a_key_peek", 2, || {
        let clock = clock();
        let c = key(2);
        let serial = keyed("10/s;burst=3", &clock);
        let fresh = serial.peek_key(&c);
        assert!(serial.check_key(&c).is_permitted());
        let used = serial.peek_key(&c);
        let lim = loom::sync::Arc::new(keyed("10/s;burst=3", &clock));
        let l = lim.clone();
        let peek = thread::spawn(move || l.peek_key(&c));
        assert!(lim.check_key(&c).is_permitted());
        let p = peek.join().unwrap();
        assert!(
            p == fresh || p == used,
            "a peek of a key being installed: {p:?}, states {fresh:?} {used:?}"
        );
    });
}

/// A staged rollout's carry (`src/limiter/keyed/carry.rs`) racing a split of the old
/// limiter's table: the key's fill level is read lock-free from `from` while an insert moves
/// it (its old copy dies before its new one is written). The carry must find it: with the
/// same quota on both sides, `A` ends in `to` exactly as full as in `from` (2 of 3 left, one
/// check used), never fresh (3 left: a free unit handed out by the move).
///
/// The carry runs on the spawned thread, the insert here: with a reader that only loads on
/// this thread after the spawn, loom 0.7 explored one interleaving (see
/// `quota_gate_orders_a_group_rescale`). It guards the carry's move-counter re-check and its
/// fence, and the dead copy's fall-back to the insert lock. (The carry is built with feature
/// `config`, which the loom step enables.)
#[cfg(feature = "config")]
#[test]
fn slot_move_races_a_carry() {
    explore("slot_move_races_a_carry", 2, || {
        let clock = clock();
        let from = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        let to = keyed("10/s;burst=3", &clock);
        let before = from.peek_key(&A);
        let f = from.clone();
        let carry = thread::spawn(move || {
            to.loom_carry_from(&f, &A);
            to.peek_key(&A)
        });
        let c = key(12); // bucket 0 after the split: the insert that splits it
        assert!(from.check_key(&c).is_permitted());
        let carried = carry.join().unwrap();
        assert_eq!(carried, before, "the carry lost A's fill level to the move");
    });
}

/// A table that cannot grow (6 keys, 2 buckets) with the key `X` spilled and a free slot
/// in its bucket: `k2 k4 k6 k8` fill bucket 0 (`X`'s two candidate buckets both), so `X`,
/// checked three times, spills; once the four are idle and `X` is not, `Y` fills the table and
/// `Z`, at the cap, sweeps `k2` (the sweep's cursor starts at bucket 0), leaving its slot dead.
/// `X`'s next check, under the insert lock, moves it back into that slot (`rehome`).
const X: u64 = 10 << 32 | 10;

fn spilled_beside_a_free_slot(clock: &ManualClock) -> KeyedRateLimiter<u64> {
    let lim = KeyedRateLimiter::<u64>::builder(quota("10/s;burst=3"))
        .clock(clock.clone())
        .max_keys(6)
        .admission(Admission::Off)
        .build();
    for k in [key(2), key(4), key(6), key(8)] {
        assert!(lim.check_key(&k).is_permitted());
    }
    for _ in 0..3 {
        assert!(lim.check_key(&X).is_permitted());
    }
    clock.advance(Duration::from_millis(150));
    for k in [key(1), key(3)] {
        assert!(lim.check_key(&k).is_permitted());
    }
    assert_eq!(lim.len(), 6);
    assert_eq!(lim.stats().admissions_refused, 0, "Z took k2's slot");
    lim
}

/// A lock-free peek of a spilled key racing the check that moves it back into the table
/// (`rehome`: installed in a slot, then the spill map's count stored). The peek reports the
/// key's state before the check or after it, never a new key's full burst. This model found
/// a bug: the peek read the spill count after its lookup, so a lookup that missed the key
/// before the move and a count read after it (0: nothing spilled) reported a tracked key as
/// new. It reads the count first now (Acquire, paired with the Release after the install).
#[test]
fn spill_rehome_races_a_key_peek() {
    explore("spill_rehome_races_a_key_peek", 2, || {
        let serial_clock = clock();
        let serial = spilled_beside_a_free_slot(&serial_clock);
        let before = serial.peek_key(&X);
        assert!(serial.check_key(&X).is_permitted());
        let after = serial.peek_key(&X);
        assert_ne!(before, after);
        let clock = clock();
        let lim = loom::sync::Arc::new(spilled_beside_a_free_slot(&clock));
        let l = lim.clone();
        let peek = thread::spawn(move || l.peek_key(&X));
        assert!(lim.check_key(&X).is_permitted());
        let p = peek.join().unwrap();
        assert!(
            p == before || p == after,
            "a peek of a spilled key moving back: {p:?}, states {before:?} {after:?}"
        );
        assert_eq!(lim.peek_key(&X), after);
    });
}

/// A check of `A` whose compare-and-swap fails because the split moved `A` away and
/// installed `C` in its dead slot: the failed swap reads `C`'s word, and the check then
/// re-checks the slot's key. The failed swap's Acquire (paired with the Release of `C`'s
/// word in `install`, after its key) is what makes that re-check see `C`'s key; without it
/// the check could decode `C`'s word under `A`'s mask and swap into it. Run with the check
/// on the spawned thread, as `check_key` (the steady fast path, `table.rs`) and as
/// `check_key_n` of 2 (the general path, `cell::step_checked`). Invariant: `A`'s check is
/// allowed (2 of its 3 are left), and `A` and `C` are each allowed exactly their burst.
#[test]
fn slot_move_fails_a_check_swap() {
    for cost in [1, 2] {
        explore("slot_move_fails_a_check_swap", 2, move || {
            let clock = clock();
            let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
            let c = key(12); // bucket 0 after the split: A's dead slot 0 is its first free one
            let l = lim.clone();
            let check = thread::spawn(move || {
                let v = match cost {
                    1 => l.check_key(&A),
                    _ => l.check_key_n(&A, cost).expect("fits a burst of 3"),
                };
                if v.is_permitted() {
                    cost
                } else {
                    0
                }
            });
            assert!(lim.check_key(&c).is_permitted());
            let a1 = check.join().unwrap();
            assert_eq!(
                a1, cost,
                "A's check, with 2 of 3 left, was denied (cost {cost})"
            );
            let ta = 1 + a1 + drain(|| lim.check_key(&A), 8);
            let tc = 1 + drain(|| lim.check_key(&c), 8);
            assert_eq!(ta, 3, "A: allowed {ta} of a burst of 3 (cost {cost})");
            assert_eq!(tc, 3, "C: allowed {tc} of a burst of 3 (cost {cost})");
        });
    }
}

/// The first failure mode of the ABA undo: a stalled check of `A` read `X`; a split moves `A`
/// away and a new key `C` is installed in the dead slot with exactly `X` (same frozen instant,
/// cost 1). The old check's compare-and-swap on the bare TAT landed on `C`'s cell; before it
/// could undo, a check of `C` stepped the word on, the undo failed, and the check counted its
/// allow for `A` although `A`'s own TAT never moved: loom found `A` allowed 4 times with a
/// burst of 3 (at a preemption bound of 2, in about a second). Now the word holds `C`'s TAT
/// under `C`'s mask, which is not `A`'s encoding of `X`: the swap fails and the check looks
/// `A` up again. Invariant: `A` and `C` are each allowed exactly their burst, never more,
/// none lost.
#[test]
fn slot_aba_new_owner_steps_before_the_undo() {
    explore("slot_aba_new_owner_steps_before_the_undo", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        let c = key(12);
        let (a1, c1) = while_checked_twice(&lim, c, || u64::from(lim.check_key(&A).is_permitted()));
        let ta = 1 + a1 + drain(|| lim.check_key(&A), 8);
        let tc = c1 + drain(|| lim.check_key(&c), 8);
        assert_eq!(ta, 3, "A: allowed {ta} of a burst of 3");
        assert_eq!(tc, 3, "C: allowed {tc} of a burst of 3");
    });
}

/// A stalled refund of `A` read `A`'s TAT `X + T` (one unit used) and re-checked the key; a
/// split moves `A` away and a new key `C` (cost 1 at the same frozen instant) is installed in
/// the dead slot with exactly `X + T`, and stepped once more by a second check. A refund whose
/// swap landed on `C`'s word would lower `C`'s TAT: an allow beyond `C`'s burst, for a refund
/// `C` never asked for. Invariant: the refund gives `A` back its unit (3 allows after it) and
/// `C` is allowed exactly its burst.
#[test]
fn slot_aba_a_refund_never_lands_on_a_new_owner() {
    explore("slot_aba_a_refund_never_lands_on_a_new_owner", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        let c = key(12);
        let ((), c1) = while_checked_twice(&lim, c, || lim.refund_key(&A, 1));
        let ta = drain(|| lim.check_key(&A), 8);
        let tc = c1 + drain(|| lim.check_key(&c), 8);
        assert_eq!(ta, 3, "A: {ta} allowed after its refund, of a burst of 3");
        assert_eq!(tc, 3, "C: allowed {tc} of a burst of 3");
    });
}

// ---------------------------------------------------------------------------------------
// 3. Growth and refunds.
// ---------------------------------------------------------------------------------------

/// A split (moving `A` from bucket 0 to the new bucket 2 and publishing the new shape) racing
/// two lock-free checks of `A`. The new key `D` lands in bucket 1, so no slot is reused (no
/// ABA): this is the split's own publication. Invariant: `A` and `D` end exactly as a serial
/// history leaves them — 3 allows each in all, never more, none lost.
#[test]
fn grow_split_moves_a_key_under_its_checks() {
    explore("grow_split_moves_a_key_under_its_checks", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        let d = key(7); // bucket 1, its last free slot
        let l = lim.clone();
        let insert = thread::spawn(move || l.check_key(&d).is_permitted());
        let a1 = u64::from(lim.check_key(&A).is_permitted());
        let a2 = u64::from(lim.check_key(&A).is_permitted());
        assert!(insert.join().unwrap());
        assert_eq!(a1 + a2, 2, "A had room for both");
        let ta = 3 + drain(|| lim.check_key(&A), 8);
        assert_eq!(ta, 3, "A: allowed {ta} of a burst of 3");
        assert_eq!(1 + drain(|| lim.check_key(&d), 8), 3);
        assert_eq!(lim.len(), 7);
    });
}

/// `refund_key` racing the split that moves the key. `A` has used 2 of 3 and gets 1 back:
/// whatever the order, it has exactly 2 left — a refund lost would leave 1, one applied twice
/// (or to the moved copy and the dead one) 3.
#[test]
fn refund_races_a_split() {
    explore("refund_races_a_split", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(keyed_at_the_split("10/s;burst=3", &clock));
        assert!(lim.check_key(&A).is_permitted()); // A: 2 of 3 used
        let d = key(7);
        let l = lim.clone();
        let insert = thread::spawn(move || l.check_key(&d).is_permitted());
        lim.refund_key(&A, 1);
        assert!(insert.join().unwrap());
        assert_eq!(drain(|| lim.check_key(&A), 8), 2, "A after a refund of 1");
    });
}

/// `refund` racing a quota change of a direct cell (3 → 6 burst, `T` halved). 2 of 3 used,
/// 1 refunded: refund first leaves 1 of 3 used, 2 of 6 after the change (4 left); the change
/// first leaves 4 of 6 used, 3 after the refund of one new unit (3 left). Nothing else.
#[test]
fn refund_races_a_quota_change() {
    explore("refund_races_a_quota_change", 2, || {
        let clock = clock();
        let lim = loom::sync::Arc::new(
            RateLimiter::builder(quota("10/s;burst=3"))
                .clock(clock.clone())
                .build(),
        );
        assert!(lim.check_n(2).expect("2 fits a burst of 3").is_permitted());
        let l = lim.clone();
        let change = thread::spawn(move || l.set_quota(quota("20/s;burst=6")));
        lim.refund(1);
        change.join().unwrap();
        let left = drain(|| lim.check(), 8);
        assert!((3..=4).contains(&left), "{left} left");
    });
}

// ---------------------------------------------------------------------------------------
// 4. Admission at the cap: the filter lives under the insert lock, next to the
//    slot life cycle it decides on.
// ---------------------------------------------------------------------------------------

/// A table at its cap of 3: `a` and `b` live (1 of 2 used), `c` idle for 900 ms (stale: τ is
/// 200 ms). A newcomer `n` checks twice (refused or admitted: it may displace only `c`) while
/// `a` is checked lock-free and `c` is checked again, racing the sweep that would free its
/// slot for `n`. Invariant: the live keys are never displaced (`a` and `b` are allowed exactly
/// their burst of 2 in all), and `c` and `n` together get exactly one cell's burst and the
/// overflow cell's one unit: 3, whichever of them keeps the slot.
#[test]
fn slot_admission_never_displaces_a_live_key() {
    explore("slot_admission_never_displaces_a_live_key", 3, || {
        let clock = clock();
        let lim = KeyedRateLimiter::<u64>::builder(quota("10/s;burst=2"))
            .clock(clock.clone())
            .max_keys(3)
            .overflow_quota(quota("1/h"))
            .build();
        let (a, b, c, n) = (key(1), key(2), key(3), key(5));
        assert!(lim.check_key(&c).is_permitted());
        clock.advance(Duration::from_secs(1));
        assert!(lim.check_key(&a).is_permitted());
        assert!(lim.check_key(&b).is_permitted());
        let lim = loom::sync::Arc::new(lim);
        let (l1, l2) = (lim.clone(), lim.clone());
        let newcomer = thread::spawn(move || {
            u64::from(l1.check_key(&n).is_permitted()) + u64::from(l1.check_key(&n).is_permitted())
        });
        let tracked = thread::spawn(move || l2.check_key(&a).is_permitted());
        let c1 = u64::from(lim.check_key(&c).is_permitted());
        assert!(tracked.join().unwrap(), "a had a unit left");
        let tn = newcomer.join().unwrap() + drain(|| lim.check_key(&n), 4);
        let tc = c1 + drain(|| lim.check_key(&c), 4);
        assert_eq!(2 + drain(|| lim.check_key(&a), 4), 2, "a displaced");
        assert_eq!(1 + drain(|| lim.check_key(&b), 4), 2, "b displaced");
        assert_eq!(tn + tc, 3, "n: {tn}, c: {tc}");
        assert!(lim.len() <= 3);
    });
}

// Concurrency limits: `tollgate::concurrency`.

use std::num::NonZeroU32;

use tollgate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("a non-zero limit in a model") // a test: a panic is the test failing
}

/// Two threads race for the last slot of a limit of 2 (one held from the start): exactly one
/// wins, and the count is exact at the end. Weakened once, the acquire's compare-and-swap
/// made a load and a store (`word.store(w + 1)` after the check) fails this model: both
/// threads see 1 in flight and both take the slot (3 permits out of a limit of 2).
#[test]
fn concurrency_acquires_never_exceed_the_limit() {
    explore("concurrency_acquires_never_exceed_the_limit", 3, || {
        let lim = ConcurrencyLimiter::new(nz(2));
        let held = lim.try_acquire().expect("an empty limiter has a slot");
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let lim = lim.clone();
                thread::spawn(move || lim.try_acquire().ok())
            })
            .collect();
        let won: Vec<_> = threads
            .into_iter()
            .filter_map(|t| t.join().expect("no panic"))
            .collect();
        assert_eq!(won.len(), 1);
        assert_eq!(lim.in_flight(), 2);
        drop((won, held));
        assert_eq!(lim.in_flight(), 0);
    });
}

/// `set_limit` lowering 2 -> 1 races an acquire while a release frees a slot. The limit and
/// the count are one word, so whichever comes first, at most one permit is out under the
/// lowered limit: the acquire either took its slot before the change (and the other one is
/// then refused) or saw the new limit at its compare-and-swap. (A design with the limit in
/// an atomic of its own admits both: the acquire reads 2, the limit drops to 1, the held
/// permit is released and re-taken, and the acquire's swap of the count still succeeds.)
#[test]
fn concurrency_set_limit_races_an_acquire() {
    explore("concurrency_set_limit_races_an_acquire", 3, || {
        let lim = ConcurrencyLimiter::new(nz(2));
        let held = lim.try_acquire().expect("an empty limiter has a slot");
        let racer = {
            let lim = lim.clone();
            thread::spawn(move || lim.try_acquire().ok())
        };
        lim.set_limit(nz(1));
        drop(held);
        let again = lim.try_acquire().ok();
        let raced = racer.join().expect("no panic");
        let out = usize::from(again.is_some()) + usize::from(raced.is_some());
        assert_eq!(out, 1, "exactly one permit under the lowered limit");
        assert_eq!(lim.in_flight(), 1);
        assert_eq!(lim.limit(), 1);
    });
}

/// A permit's release forgets its key (count 0: the entry is removed) while two threads
/// acquire the same key: no count is lost, the key never has two entries, and all of it is
/// forgotten once the permits are dropped. Weakened once, the release forgetting a key at a
/// count of 1 instead of 0 (the entry removed with a permit still out) fails this model: the
/// count left after the racing acquires is 1 short.
#[test]
fn permit_forget_key_races_an_acquire() {
    explore("permit_forget_key_races_an_acquire", 3, || {
        let lim = KeyedConcurrencyLimiter::<u64>::new(nz(2));
        let held = lim.try_acquire_key(&7).expect("a new key has a slot");
        let releaser = thread::spawn(move || drop(held));
        let other = {
            let lim = lim.clone();
            thread::spawn(move || lim.try_acquire_key(&7).ok())
        };
        let mine = lim.try_acquire_key(&7).ok();
        releaser.join().expect("no panic");
        let theirs = other.join().expect("no panic");
        // The limit is 2: at most one was refused (while the first permit was still out).
        let out = u32::from(mine.is_some()) + u32::from(theirs.is_some());
        assert!(out >= 1);
        assert_eq!(lim.in_flight_key(&7), out);
        assert_eq!(lim.keys(), 1);
        drop((mine, theirs));
        assert_eq!((lim.in_flight_key(&7), lim.keys()), (0, 0));
    });
}

/// Raising the limit while a permit is released: the count stays exact and the new limit
/// holds (`set_limit`'s swap keeps the count half, the release's subtraction the limit half).
/// The load-and-store mutation of the acquire above fails this model and the one before too.
#[test]
fn permit_release_races_a_raise() {
    explore("permit_release_races_a_raise", 3, || {
        let lim = ConcurrencyLimiter::new(nz(1));
        let held = lim.try_acquire().expect("an empty limiter has a slot");
        let releaser = thread::spawn(move || drop(held));
        lim.set_limit(nz(3));
        let a = lim.try_acquire().ok();
        releaser.join().expect("no panic");
        assert!(a.is_some());
        assert_eq!(lim.in_flight(), 1);
        assert_eq!(lim.limit(), 3);
    });
}

/// A waiter queues (feature `tokio`'s `acquire`, without the runtime) while the only permit
/// is released: whichever comes first, the waiter ends up granted — by its own grant attempt
/// or by the release's. Weakened once, the waiter's flag set after its grant attempt instead
/// of before fails this model (the release reads no flag, the attempt saw no slot: a slot
/// free and a waiter parked forever). So did a first design with the waiter count in an
/// atomic of its own (a store-buffering pattern across two locations, which loom's model
/// does not order even under `SeqCst`): hence the flag in the count's own word.
#[test]
fn concurrency_wait_loses_no_wake_up() {
    explore("concurrency_wait_loses_no_wake_up", 3, || {
        let lim = ConcurrencyLimiter::new(nz(1));
        let held = lim.try_acquire().expect("an empty limiter has a slot");
        let releaser = thread::spawn(move || drop(held));
        let id = lim.loom_enqueue();
        releaser.join().expect("no panic");
        assert!(
            lim.loom_leave(id),
            "the waiter was never granted the freed slot"
        );
        assert_eq!((lim.in_flight(), lim.waiting()), (0, 0));
    });
}

/// A permit orders like a semaphore's: what its holder wrote before dropping it happens
/// before the acquire that takes its slot next. With a limit of 1, the holder writes an
/// unsynchronised cell and drops the permit; a racing `try_acquire` that wins reads the cell.
/// Loom reports the read as a data race unless the release's decrement (Release) and the
/// acquire's compare-and-swap (Acquire) pair; weakened to Relaxed on either side, this model
/// fails. The keyed limiter gives the same through its shard's lock.
#[test]
fn permit_release_happens_before_the_next_acquire() {
    explore("permit_release_happens_before_the_next_acquire", 3, || {
        let lim = ConcurrencyLimiter::new(nz(1));
        let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(1));
        let data = loom::sync::Arc::new(loom::cell::UnsafeCell::new(0u32));
        let held = lim.try_acquire().expect("an empty limiter has a slot");
        let held_key = keyed.try_acquire_key(&7).expect("a new key has a slot");
        let reader = {
            let (lim, keyed, data) = (lim.clone(), keyed.clone(), data.clone());
            thread::spawn(move || {
                let mut seen = Vec::new();
                if let Ok(p) = lim.try_acquire() {
                    // SAFETY: the permit orders this read after the holder's write.
                    seen.push(data.with(|v| unsafe { *v }));
                    drop(p);
                }
                if let Ok(p) = keyed.try_acquire_key(&7) {
                    // SAFETY: as above, through the key's slot.
                    seen.push(data.with(|v| unsafe { *v }));
                    drop(p);
                }
                seen
            })
        };
        // SAFETY: the one slot is held here; the reader reads only once it takes the slot.
        data.with_mut(|v| unsafe { *v = 1 });
        drop(held);
        drop(held_key);
        let seen = reader.join().expect("no panic");
        assert!(seen.iter().all(|&v| v == 1), "{seen:?}");
    });
}
