//! Refunds: `RateLimiter::refund` and `KeyedRateLimiter::refund_key` give back a
//! cost admitted earlier — exactly, never beyond a full cell, lock-free against checks, moves
//! in the key table and quota changes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use tollgate::{KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn remaining(v: Verdict) -> u64 {
    v.allowed().map(|a| a.remaining()).expect("an allow")
}

#[test]
fn a_refund_after_an_allow_restores_the_cell_exactly() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("10/s")).clock(clock.clone()).build();
    assert!(lim.check_n(3).unwrap().is_permitted());
    clock.advance(Duration::from_millis(50));
    let before = lim.check_n(0).unwrap();
    assert!(lim.check_n(4).unwrap().is_permitted());
    lim.refund(4);
    assert_eq!(
        lim.check_n(0).unwrap(),
        before,
        "the same remaining and reset"
    );
    // The cell steps exactly as before: 7 remain (3 used, half a unit back after 50 ms is
    // not a whole unit), the 8th is denied with the same retry-after.
    assert_eq!(remaining(before), 7);
    assert!(lim.check_n(7).unwrap().is_permitted());
    let d = lim.check().denied().expect("empty");
    assert_eq!(d.retry_after(), Duration::from_millis(50));

    let keyed = KeyedRateLimiter::<String>::builder(q("10/s"))
        .clock(clock.clone())
        .build();
    assert!(keyed.check_key_n("a", 3).unwrap().is_permitted());
    let before = keyed.check_key_n("a", 0).unwrap();
    assert!(keyed.check_key_n("a", 5).unwrap().is_permitted());
    keyed.refund_key("a", 5);
    assert_eq!(keyed.check_key_n("a", 0).unwrap(), before);
    assert_eq!(keyed.peek_key("a"), {
        let probe = KeyedRateLimiter::<String>::builder(q("10/s"))
            .clock(clock.clone())
            .build();
        let _ = probe.check_key_n("a", 3).unwrap();
        probe.peek_key("a")
    });
}

#[test]
fn an_idle_cell_is_full_and_a_refund_never_grants_beyond_the_burst() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("10/s;burst=5"))
        .clock(clock.clone())
        .build();
    assert!(lim.check_n(5).unwrap().is_permitted());
    clock.advance(Duration::from_secs(10)); // long idle: full again
    lim.refund(5); // a late refund of the old charge: nothing to give back
    lim.refund(u64::MAX);
    assert_eq!(remaining(lim.check_n(0).unwrap()), 5);
    assert!(lim.check_n(5).unwrap().is_permitted());
    assert!(!lim.check().is_permitted(), "exactly the burst, no more");

    // Half used, then refunded more than was taken: full, not beyond.
    clock.advance(Duration::from_secs(10));
    assert!(lim.check_n(2).unwrap().is_permitted());
    lim.refund(4);
    assert_eq!(remaining(lim.check_n(0).unwrap()), 5);

    let keyed = KeyedRateLimiter::<u64>::builder(q("10/s;burst=5"))
        .clock(clock.clone())
        .build();
    assert!(keyed.check_key_n(&1, 5).unwrap().is_permitted());
    clock.advance(Duration::from_secs(10));
    keyed.refund_key(&1, 5);
    keyed.refund_key(&2, 5); // never seen: no key created
    assert_eq!(keyed.len(), 1);
    assert!(keyed.check_key_n(&1, 5).unwrap().is_permitted());
    assert!(!keyed.check_key(&1).is_permitted());
    assert_eq!(remaining(keyed.check_key_n(&2, 0).unwrap()), 5);
}

#[test]
fn a_refund_across_a_quota_change_is_in_the_new_quota_and_bounded() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("10/s")).clock(clock.clone()).build();
    assert!(lim.check_n(4).unwrap().is_permitted()); // 40 % used
    lim.set_quota(q("20/s")); // 40 % of 20: 8 used
    assert_eq!(remaining(lim.check_n(0).unwrap()), 12);
    lim.refund(4); // four units of the quota in force
    assert_eq!(remaining(lim.check_n(0).unwrap()), 16);
    lim.refund(100);
    assert_eq!(remaining(lim.check_n(0).unwrap()), 20, "full, not beyond");
    lim.set_quota(q("10/s"));
    assert_eq!(remaining(lim.check_n(0).unwrap()), 10);

    let keyed = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(clock.clone())
        .build();
    for k in 0..200 {
        assert!(keyed.check_key_n(&k, 4).unwrap().is_permitted());
    }
    keyed.set_quota(q("20/s"));
    for k in 0..200 {
        keyed.refund_key(&k, 4);
        assert_eq!(remaining(keyed.check_key_n(&k, 0).unwrap()), 16, "key {k}");
    }
}

/// Checks and refunds of the same keys from several threads on a frozen clock, while new keys
/// arrive and the table grows (moving keys between buckets): for every key the net charge
/// (allowed minus refunded units) never exceeds the burst, and the cell ends exactly at
/// `burst − net` remaining.
#[test]
fn concurrent_checks_and_refunds_keep_every_key_within_its_bound() {
    const KEYS: u64 = 64;
    const THREADS: u64 = 4;
    let rounds: u64 = if cfg!(debug_assertions) {
        3_000
    } else {
        30_000
    };
    let clock = ManualClock::new();
    let lim = Arc::new(
        KeyedRateLimiter::<u64>::builder(q("1/s;burst=20"))
            .clock(clock.clone())
            .build(),
    );
    let direct = Arc::new(RateLimiter::builder(q("1/s;burst=20")).clock(clock).build());
    let net: Arc<Vec<AtomicU64>> = Arc::new((0..=KEYS).map(|_| AtomicU64::new(0)).collect());
    let refunded: Arc<Vec<AtomicU64>> = Arc::new((0..=KEYS).map(|_| AtomicU64::new(0)).collect());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (lim, direct) = (Arc::clone(&lim), Arc::clone(&direct));
            let (net, refunded) = (Arc::clone(&net), Arc::clone(&refunded));
            thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                for i in 0..rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = x % KEYS;
                    let cost = 1 + (x >> 20) % 3;
                    if lim.check_key_n(&key, cost).unwrap().is_permitted() {
                        net[key as usize].fetch_add(cost, Ordering::Relaxed);
                        if (x >> 30) % 2 == 0 {
                            lim.refund_key(&key, cost);
                            refunded[key as usize].fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                    if direct.check_n(cost).unwrap().is_permitted() {
                        net[KEYS as usize].fetch_add(cost, Ordering::Relaxed);
                        if (x >> 31) % 2 == 0 {
                            direct.refund(cost);
                            refunded[KEYS as usize].fetch_add(cost, Ordering::Relaxed);
                        }
                    }
                    // New keys keep arriving: the table grows and moves keys meanwhile.
                    let _ = lim.check_key(&(1_000 + t * rounds + i));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for k in 0..=KEYS {
        let allowed = net[k as usize].load(Ordering::Relaxed);
        let back = refunded[k as usize].load(Ordering::Relaxed);
        let used = allowed - back;
        assert!(used <= 20, "key {k}: {used} units net on a burst of 20");
        let left = if k == KEYS {
            remaining(direct.check_n(0).unwrap())
        } else {
            remaining(lim.check_key_n(&k, 0).unwrap())
        };
        assert_eq!(
            left,
            20 - used,
            "key {k}: allowed {allowed}, refunded {back}"
        );
        assert!(back > 0, "key {k}: the test refunded something");
    }
}

/// With time passing, checks and refunds racing never admit more than τ + L net weight over
/// the run (the GCRA bound), however they interleave.
#[test]
fn refunds_racing_checks_while_time_passes_stay_under_the_gcra_bound() {
    let rounds: u64 = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    let clock = ManualClock::new();
    let lim = Arc::new(
        KeyedRateLimiter::<u64>::builder(q("1000/s;burst=10"))
            .clock(clock.clone())
            .build(),
    );
    let net = Arc::new(AtomicU64::new(0));
    let ticker = {
        let clock = clock.clone();
        thread::spawn(move || {
            for _ in 0..rounds / 10 {
                clock.advance(Duration::from_micros(100));
                thread::yield_now();
            }
        })
    };
    let handles: Vec<_> = (0..3u64)
        .map(|t| {
            let (lim, net) = (Arc::clone(&lim), Arc::clone(&net));
            thread::spawn(move || {
                for i in 0..rounds {
                    if lim.check_key(&7).is_permitted() {
                        if (i + t) % 3 == 0 {
                            lim.refund_key(&7, 1);
                        } else {
                            net.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    ticker.join().unwrap();
    // L = rounds/10 × 100 µs; T = 1 ms; τ = 10 units.
    let elapsed_units = (rounds / 10) * 100 / 1_000;
    let admitted = net.load(Ordering::Relaxed);
    assert!(
        admitted <= 10 + elapsed_units + 1,
        "{admitted} units net over {elapsed_units} units of time and a burst of 10"
    );
}

#[test]
fn a_refund_of_a_spilled_or_overflowing_key_is_exact_or_nothing() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("1/s;burst=4"))
        .clock(clock.clone())
        .max_keys(2)
        .build();
    assert!(lim.check_key_n(&1, 2).unwrap().is_permitted());
    assert!(lim.check_key_n(&2, 2).unwrap().is_permitted());
    // Key 3 shares the overflow cell: its refund is not given back (not its own cell).
    assert!(lim.check_key_n(&3, 2).unwrap().is_permitted());
    lim.refund_key(&3, 2);
    assert_eq!(remaining(lim.check_key_n(&4, 0).unwrap()), 2);
    assert_eq!(lim.len(), 2);
    lim.refund_key(&1, 2);
    assert_eq!(remaining(lim.check_key_n(&1, 0).unwrap()), 4);
}

#[test]
fn a_refunded_key_that_goes_idle_makes_room_in_a_full_table() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("1/s;burst=10"))
        .clock(clock.clone())
        .max_keys(4)
        .build();
    for k in 0..4 {
        assert!(lim.check_key_n(&k, 10).unwrap().is_permitted());
    }
    // Full of live keys: a newcomer goes to the overflow cell, and the sweep learns that no
    // key can be idle for 10 s.
    assert!(lim.check_key(&100).denied().is_none());
    assert_eq!(lim.len(), 4);
    lim.refund_key(&0, 10); // key 0 is full again, at once
    clock.advance(Duration::from_millis(1));
    assert!(lim.check_key_n(&101, 10).unwrap().is_permitted());
    assert_eq!(lim.len(), 4, "key 0 was swept for key 101");
    assert!(
        lim.check_key_n(&101, 1).unwrap().denied().is_some(),
        "101 has its own cell, tracked"
    );
}
