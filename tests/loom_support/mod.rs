//! Helpers shared by the loom model files (`tests/loom.rs`, `tests/loom_charge.rs`).
#![allow(dead_code)] // each model file uses its own share

use std::time::{Duration, Instant};

use loom::thread;
use tollgate::{KeyedRateLimiter, ManualClock, Quota, Verdict};

/// A key whose two candidate buckets are both named by `h`.
pub fn key(h: u64) -> u64 {
    h << 32 | h
}

pub fn quota(s: &str) -> Quota {
    s.parse().expect("a valid quota in a model") // a test: a panic is the test failing
}

/// Runs `f` under every interleaving up to `bound` preemptions; prints the time taken.
pub fn explore(name: &str, bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(bound);
    // The keyed models' setup (six inserts) alone is a few thousand atomic accesses.
    b.max_branches = 1_000_000;
    let start = Instant::now();
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = runs.clone();
    b.check(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom model {name}: preemption bound {bound}, {} interleavings, {:.1} s",
        runs.load(std::sync::atomic::Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
}

/// Allows in a row until the first denial (at most `max + 1` checks).
pub fn drain(mut check: impl FnMut() -> Verdict, max: u64) -> u64 {
    let mut n = 0;
    while n <= max && check().is_permitted() {
        n += 1;
    }
    n
}

pub fn clock() -> ManualClock {
    ManualClock::at(Duration::from_secs(10))
}

pub fn keyed(q: &str, clock: &ManualClock) -> KeyedRateLimiter<u64> {
    KeyedRateLimiter::<u64>::builder(quota(q))
        .clock(clock.clone())
        .max_keys(64)
        .build()
}

/// The keys of the slot and growth models: `A` first, in slot 0 of bucket 0, and five more,
/// so that the table holds 6 keys in 2 buckets and the next insert splits bucket 0. `A`
/// (`h = 2`) is the one key the split moves (to bucket 2); `k4`, `k8` stay in bucket 0;
/// `k1`, `k3`, `k5` fill bucket 1 but for its last slot. Each key is checked once.
pub const A: u64 = 2 << 32 | 2;
pub const SETUP: [u64; 6] = [
    A,
    4 << 32 | 4,
    8 << 32 | 8,
    1 << 32 | 1,
    3 << 32 | 3,
    5 << 32 | 5,
];

pub fn keyed_at_the_split(q: &str, clock: &ManualClock) -> KeyedRateLimiter<u64> {
    let lim = keyed(q, clock);
    for k in SETUP {
        assert!(lim.check_key(&k).is_permitted());
    }
    assert_eq!(lim.len(), 6);
    lim
}

/// Runs `main` on this thread while two other threads check `c` once each: what `main`
/// returns, and how many of the two checks were allowed.
pub fn while_checked_twice<R>(
    lim: &loom::sync::Arc<KeyedRateLimiter<u64>>,
    c: u64,
    main: impl FnOnce() -> R,
) -> (R, u64) {
    let (l2, l3) = (lim.clone(), lim.clone());
    let insert = thread::spawn(move || l2.check_key(&c).is_permitted());
    let again = thread::spawn(move || l3.check_key(&c).is_permitted());
    let r = main();
    (
        r,
        u64::from(insert.join().unwrap()) + u64::from(again.join().unwrap()),
    )
}
