//! A staged rollout under concurrency: threads race the cohort checks of the same
//! keys as they join the cohort — a key's first checks carry its state from the old
//! document's limiter while others already check it in the new one — on a [`ManualClock`]
//! that stands still during the race, next to a thread that fills the old document's limiter
//! with new keys, so its table grows and moves the joining keys' cells while they are looked
//! up.
//!
//! Every joining key's TAT is its own: each key spends its share at its own microsecond
//! before the race. With one instant for all, hundreds of keys share each TAT, and the key
//! table's documented blind spot — a stalled check's write, or its undo, landing on a slot
//! reused by a key installed with exactly the value it expects (`cell::step_checked`,
//! `src/limiter/keyed/grow.rs`) — goes from a coincidence to an event: it moved one allowed
//! check from one key to another in about 1 of 3,000 such races. That is the table's, not the
//! rollout's.
#![cfg(feature = "config")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use tollgate::limits::{Limits, Rollout, RolloutStage};
use tollgate::{Check, ManualClock};

/// 10 per minute. The clock stands still during the race, so nothing refills and every key's
/// count of allowed checks is exact.
const BURST: usize = 10;
/// Keys that join the cohort at the promotion.
const JOINERS: usize = 2_000;
/// New keys the old document's limiter takes during the race.
const CHURN: usize = 40_000;
const THREADS: usize = 4;
const ROUNDS: u64 = 3;

fn doc(revision: u64) -> Limits {
    Limits::from_toml(&format!(
        "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\n\
         match = {{ route = \"/api/*\" }}\nquota = \"10/min\"\n"
    ))
    .expect("a valid test document")
}

/// How much of its burst key `i` used on the old document before joining: 1 to all of it.
/// (Keys with nothing to carry are the unit tests' in `src/limiter/keyed/carry.rs`: here they
/// would all share a TAT.)
fn used(i: usize) -> usize {
    1 + i % BURST
}

fn check(rollout: &Rollout, key: &str) -> (bool, u64) {
    let d = rollout
        .check("free", "api", "/api/items", key, Check::cost(1))
        .expect("cost 1 fits");
    (d.is_permitted(), d.revision())
}

/// Keys whose bucket is in `buckets`, `n` of them.
fn keys(rollout: &Rollout, tag: &str, buckets: core::ops::Range<u16>, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .filter(|k| buckets.contains(&rollout.bucket(k)))
        .take(n)
        .collect()
}

#[test]
fn racing_joiners_get_exactly_their_carried_share_and_the_old_state_survives() {
    for round in 0..ROUNDS {
        let start = Duration::from_secs(3_600);
        let clock = ManualClock::at(start);
        let long = Duration::from_secs(1_000_000);
        let rollout = Rollout::builder(doc(1), doc(2))
            .clock(clock.clone())
            .stages([RolloutStage::new(1, long), RolloutStage::new(5_000, long)])
            .seed(u128::from(round) + 1)
            .build()
            .expect("a harmless change");
        let joiners = keys(&rollout, "joiner", 1..5_000, JOINERS);
        let churn = keys(&rollout, "churn", 5_000..10_000, CHURN);
        let micros = |i: usize| start + Duration::from_micros(i as u64);
        for (i, k) in joiners.iter().enumerate() {
            clock.set(micros(i));
            for _ in 0..used(i) {
                assert_eq!(check(&rollout, k), (true, 1), "{k}: on the old document");
            }
        }
        // From here on the clock stands still, a few milliseconds after the last key's share:
        // nothing refills, and every count below is exact.
        clock.set(micros(JOINERS + 1));
        assert!(rollout.promote());

        let allowed: Vec<AtomicUsize> = joiners.iter().map(|_| AtomicUsize::new(0)).collect();
        let go = Barrier::new(THREADS + 1);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    go.wait();
                    // Every thread walks the keys in the same order, so they meet on each
                    // key's first checks, where it joins.
                    for _ in 0..BURST + 2 {
                        for (i, k) in joiners.iter().enumerate() {
                            let (permitted, revision) = check(&rollout, k);
                            assert_eq!(revision, 2, "{k}: in the cohort");
                            if permitted {
                                allowed[i].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
            s.spawn(|| {
                go.wait();
                for k in &churn {
                    assert_eq!(check(&rollout, k), (true, 1), "{k}: a control key");
                }
            });
        });

        // No fresh burst on joining, and nothing lost or counted twice: exactly what each key
        // had left on the old document, however the threads met.
        for (i, k) in joiners.iter().enumerate() {
            let got = allowed[i].load(Ordering::Relaxed);
            assert_eq!(
                got,
                BURST - used(i),
                "round {round}, {k} (used {})",
                used(i)
            );
        }
        // Carrying read the old document's cells and wrote none: reverted, every key resumes
        // exactly the state it left there.
        assert!(rollout.revert());
        for (i, k) in joiners.iter().enumerate() {
            let back = (0..BURST + 2).filter(|_| check(&rollout, k).0).count();
            assert_eq!(back, BURST - used(i), "round {round}, {k} after the revert");
        }
    }
}
