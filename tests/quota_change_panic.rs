//! `set_quota` is panic-safe: a clock that panics during a quota change
//! leaves the limiter as it was — the previous quota published alone, every cell in its scale —
//! so the next change rescales from the right parameters.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tollgate::{Clock, KeyedRateLimiter, Quota, RateLimiter};

/// A clock at 10 s that panics while `fail` is set.
fn failing_clock() -> (Clock, Arc<AtomicBool>) {
    let fail = Arc::new(AtomicBool::new(false));
    let now = Arc::new(AtomicU64::new(10_000_000_000));
    let f = fail.clone();
    let clock = Clock::from_fn(move || {
        assert!(!f.load(Ordering::Relaxed), "the clock fails (on purpose)");
        now.load(Ordering::Relaxed)
    });
    (clock, fail)
}

fn quota(s: &str) -> Quota {
    s.parse().expect("a valid quota") // a test: a panic is the test failing
}

fn remaining(v: tollgate::Verdict) -> Option<u64> {
    v.allowed().map(|a| a.remaining())
}

#[test]
fn a_direct_quota_change_whose_clock_panics_changes_nothing() {
    let (clock, fail) = failing_clock();
    let lim = RateLimiter::builder(quota("10/s;burst=2"))
        .clock(clock)
        .build();
    assert!(lim.check().is_permitted()); // half of the burst used
    fail.store(true, Ordering::Relaxed);
    let r = catch_unwind(AssertUnwindSafe(|| lim.set_quota(quota("10/s;burst=10"))));
    assert!(r.is_err(), "the clock's panic reaches the caller");
    fail.store(false, Ordering::Relaxed);
    assert_eq!(lim.quota().to_string(), quota("10/s;burst=2").to_string());
    assert_eq!(remaining(lim.check_n(0).unwrap()), Some(1), "as before");
    // The next change rescales from 10/s;burst=2 (half used), not from the failed one's.
    lim.set_quota(quota("10/s;burst=4"));
    assert_eq!(remaining(lim.check_n(0).unwrap()), Some(2), "half of 4");
    assert!(lim.check().is_permitted());
    assert!(lim.check().is_permitted());
    assert!(!lim.check().is_permitted());
}

#[test]
fn a_keyed_quota_change_whose_clock_panics_changes_nothing() {
    let (clock, fail) = failing_clock();
    let lim = KeyedRateLimiter::<u64>::builder(quota("10/s;burst=2"))
        .clock(clock)
        .build();
    for k in 0..200u64 {
        assert!(lim.check_key(&k).is_permitted()); // half of each key's burst used
    }
    fail.store(true, Ordering::Relaxed);
    let r = catch_unwind(AssertUnwindSafe(|| lim.set_quota(quota("10/s;burst=10"))));
    assert!(r.is_err(), "the clock's panic reaches the caller");
    fail.store(false, Ordering::Relaxed);
    assert_eq!(lim.quota().to_string(), quota("10/s;burst=2").to_string());
    lim.set_quota(quota("10/s;burst=4"));
    for k in 0..200u64 {
        let left = remaining(lim.check_key_n(&k, 0).unwrap());
        assert_eq!(left, Some(2), "key {k}: half of 4");
    }
}
