//! A fault detector on the default (fast) clock, attached to a limiter on the same clock: the
//! inline check hands the detector its own reading, and the detector closes a sub-bucket at
//! the first check that finds it due — no tick, no clock read of its own, no 32 checks to
//! wait for. The fast clock cannot be driven like a `ManualClock`, so these tests use
//! sub-buckets of a few microseconds and spin (never sleep) until a few of them have passed.

use std::time::{Duration, Instant};

use tollgate::safety::FaultDetector;
use tollgate::{KeyedRateLimiter, Quota, RateLimiter};

fn q(s: &str) -> Quota {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// A detector on the fast clock closing a sub-bucket every `sub`.
fn detector(sub: Duration) -> FaultDetector {
    FaultDetector::builder().window(sub * 6).build()
}

/// Spins until `d` has passed on the monotonic clock (microseconds here).
fn spin(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// When the detector last evaluated, on its clock (zero before its first evaluation).
fn last_evaluation(d: &FaultDetector) -> Duration {
    d.state().last.at
}

#[test]
fn a_lone_check_after_the_sub_bucket_closes_it_direct() {
    let sub = Duration::from_micros(20);
    let d = detector(sub);
    let lim = RateLimiter::builder(q("1000/s"))
        .detector(d.clone())
        .build();
    assert!(lim.check().is_permitted());
    let first = last_evaluation(&d);
    // Low traffic: one check per sub-bucket and a half. Each one closes the sub-bucket it
    // finds due (a per-thread count of 32 checks would not have looked at the clock yet).
    let mut at = first;
    for i in 0..5 {
        spin(sub * 3 / 2);
        assert!(lim.check().is_permitted());
        let now = last_evaluation(&d);
        assert!(now > at, "check {i}: no evaluation ({at:?} → {now:?})");
        at = now;
    }
    assert_eq!(d.stats().allowed, 6);
}

#[test]
fn a_lone_check_after_the_sub_bucket_closes_it_keyed() {
    let sub = Duration::from_micros(20);
    let d = detector(sub);
    let lim = KeyedRateLimiter::<u64>::builder(q("1000/s"))
        .detector(d.clone())
        .build();
    // A key is inserted by the general path; its later checks take the inline one.
    assert!(lim.check_key(&1).is_permitted());
    let mut at = last_evaluation(&d);
    for i in 0..5 {
        spin(sub * 3 / 2);
        assert!(lim.check_key(&1).is_permitted());
        let now = last_evaluation(&d);
        assert!(now > at, "check {i}: no evaluation ({at:?} → {now:?})");
        at = now;
    }
}

#[test]
fn a_detector_that_is_not_due_is_not_evaluated() {
    // The default window: a sub-bucket of 10 s. However many checks, one evaluation at most
    // (the first check finds the first close due), never one per check.
    let d = FaultDetector::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("1000000/s"))
        .detector(d.clone())
        .build();
    for key in 0..1_000u64 {
        assert!(lim.check_key(&key).is_permitted());
    }
    let at = last_evaluation(&d);
    for key in 0..10_000u64 {
        let _ = lim.check_key(&(key % 1_000));
    }
    assert_eq!(
        last_evaluation(&d),
        at,
        "evaluated again before its sub-bucket was due"
    );
}

#[test]
fn checks_from_many_threads_are_each_counted_once_through_sub_bucket_closes() {
    // Four threads checking through several sub-bucket closes: every check is counted once,
    // and closes keep coming (the CAS on the next close lets one thread evaluate each).
    let sub = Duration::from_micros(50);
    let d = detector(sub);
    let lim = KeyedRateLimiter::<u64>::builder(q("1000000000/s"))
        .detector(d.clone())
        .build();
    let start = last_evaluation(&d);
    let per = 20_000u64;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let lim = &lim;
            s.spawn(move || {
                for i in 0..per {
                    assert!(lim.check_key(&(t * 1_000 + i % 100)).is_permitted());
                }
            });
        }
    });
    let stats = d.stats();
    assert_eq!(stats.allowed, 4 * per);
    assert!(last_evaluation(&d) > start);
}
