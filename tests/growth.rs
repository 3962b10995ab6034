//! The keyed table grows with its live keys: `max_keys` is a cap, not a
//! reservation. While it grows — buckets split and keys move between buckets under the insert
//! lock — checks of tracked keys go on lock-free, and no key's state is lost, reset or counted
//! twice; a quota change racing the growth keeps every key's fill level. `ManualClock`s,
//! frozen: at one instant a key's remaining capacity is its burst less what it was allowed,
//! however the table moves it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use tollgate::{KeyedRateLimiter, ManualClock, Quota, Verdict};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// Keys for the big tests: a million in release, a tenth in debug.
fn million() -> u64 {
    if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    }
}

fn remaining(v: Verdict) -> u64 {
    v.allowed()
        .map(|a| a.remaining())
        .expect("a zero-cost check is allowed")
}

/// A small deterministic mix, to revisit keys in no particular order.
fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

/// Threads inserting keys in the growth race.
const INSERTERS: u64 = 6;
/// Threads checking only the hot keys, as fast as they can, while the others insert.
const HAMMERS: u64 = 2;
/// The per-key burst of the growth race: large, so every check of a key is an allow (a CAS)
/// unless the key was drained on purpose.
const BURST: u64 = 1_000_000_000;
/// Keys the hammer threads check without pause, so that moves race allows on them.
const HOT: u64 = 64;

/// 8 threads on a table that starts at 64 buckets and grows to n/3: 6 insert keys 64..n
/// (thread t the keys ≡ t mod 6, in order) and after each insert check two keys already
/// tracked, one of their own and one of another thread's; 2 check the 64 hot keys without
/// pause. So splits and cuckoo moves race allows on the keys they move. A quarter of the keys
/// are drained on insertion and must stay denied through all later growth. The clock is
/// frozen, so afterwards each key's remaining capacity is exactly its burst less the units it
/// was allowed: no allow lost in a move, none counted twice, no key reset.
#[test]
fn eight_threads_check_while_the_table_grows_to_a_million_keys() {
    let n = million();
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lim = KeyedRateLimiter::<u64>::builder(q("1/s;burst=1000000000"))
        .clock(&clock)
        .build();
    let start_bytes = lim.table_bytes();
    for k in 0..HOT {
        assert!(lim.check_key(&k).is_permitted());
    }
    let allowed: Vec<AtomicU64> = (0..n).map(|k| AtomicU64::new(u64::from(k < HOT))).collect();
    // Keys each inserter has inserted so far: thread u's keys 64 + u, 64 + u + 6, … below it.
    let progress: Vec<AtomicU64> = (0..INSERTERS).map(|_| AtomicU64::new(0)).collect();
    let (drained_allowed_again, inserting) = (AtomicU64::new(0), AtomicU64::new(INSERTERS));
    let barrier = Barrier::new((INSERTERS + HAMMERS) as usize);
    let check = |k: u64, cost: u64| {
        // One unit takes the lock-free fast path, a larger cost the general one.
        let v = match cost {
            1 => lim.check_key(&k),
            _ => lim.check_key_n(&k, cost).unwrap(),
        };
        if v.is_permitted() {
            allowed[k as usize].fetch_add(cost, Ordering::Relaxed);
        }
        v.is_permitted()
    };
    thread::scope(|s| {
        for t in 0..HAMMERS {
            let (check, barrier, inserting) = (&check, &barrier, &inserting);
            s.spawn(move || {
                barrier.wait();
                let mut i = t;
                while inserting.load(Ordering::Relaxed) > 0 {
                    assert!(check(mix(i) % HOT, 1), "a hot key");
                    i += 1;
                }
            });
        }
        for t in 0..INSERTERS {
            let (check, progress, barrier) = (&check, &progress, &barrier);
            let (drained_allowed_again, inserting) = (&drained_allowed_again, &inserting);
            s.spawn(move || {
                barrier.wait();
                for done in 0.. {
                    let k = HOT + t + INSERTERS * done;
                    if k >= n {
                        break;
                    }
                    if k % 4 == 0 {
                        // Drained now: denied from here on, whatever moves it later.
                        assert!(check(k, BURST), "key {k} drained on insertion");
                        assert!(!check(k, 1), "key {k} after its burst");
                    } else {
                        assert!(check(k, 1), "key {k} on insertion");
                    }
                    // Release: a thread that reads the count finds these keys tracked.
                    progress[t as usize].store(done + 1, Ordering::Release);
                    for (u, salt) in [(t, 1), (mix(k) % INSERTERS, 2)] {
                        let inserted = progress[u as usize].load(Ordering::Acquire);
                        if inserted == 0 {
                            continue;
                        }
                        let r = HOT + u + INSERTERS * (mix(k ^ salt) % inserted);
                        if check(r, 1) && r % 4 == 0 {
                            drained_allowed_again.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                inserting.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    assert_eq!(
        drained_allowed_again.into_inner(),
        0,
        "a drained key was allowed again after the table grew"
    );
    assert_eq!(lim.len() as u64, n, "every key tracked, none twice");
    for k in 0..n {
        let used = allowed[k as usize].load(Ordering::Relaxed);
        let left = remaining(lim.check_key_n(&k, 0).unwrap());
        assert_eq!(left, BURST - used, "key {k}: allowed {used} units");
    }
    let bytes = lim.table_bytes();
    assert!(
        bytes > 100 * start_bytes,
        "it grew: {start_bytes} -> {bytes}"
    );
    assert!(bytes as u64 / n <= 32, "{} bytes per key", bytes as u64 / n);
}

/// `table_bytes()` per live key at a million keys is at most 32 whatever the cap; a limiter
/// with 10 keys under the default cap fits in 64 KiB, table and struct together.
#[test]
fn memory_follows_the_live_keys_not_the_cap() {
    let n = million();
    let clock = ManualClock::new();
    for cap in [1 << 20, 4 << 20, 16 << 20] {
        let lim = KeyedRateLimiter::<u64>::builder(q("1/s"))
            .clock(&clock)
            .max_keys(cap)
            .build();
        let empty = lim.table_bytes();
        assert!(empty < 32 << 10, "cap {cap}: {empty} bytes before any key");
        for k in 0..n {
            assert!(lim.check_key(&k).is_permitted());
        }
        assert_eq!(lim.len() as u64, n);
        let per_key = lim.table_bytes() as f64 / n as f64;
        assert!(per_key <= 32.0, "cap {cap}: {per_key:.1} bytes per key");
        assert_eq!(lim.max_keys(), cap, "the cap stays what was asked");
    }
    let lim = KeyedRateLimiter::<u64>::builder(q("1/s"))
        .clock(&clock)
        .build();
    for k in 0..10u64 {
        assert!(lim.check_key(&k).is_permitted());
    }
    let total = lim.table_bytes() + core::mem::size_of_val(&lim);
    assert!(total < 64 << 10, "10 keys: {total} bytes");
}

/// Quotas toggle between "10/s" and "100/s;burst=10" (the same
/// burst) while 4 threads insert 300k new keys (the table grows through ~100k buckets) and 2
/// threads drain hot keys. Afterwards every key that was not touched during the race has the
/// fill level it had, every key inserted during it has used exactly one of its ten, and no hot
/// key was allowed more than its burst plus one in-flight check per checker thread.
#[test]
fn a_quota_change_racing_growth_keeps_every_fill_level() {
    const INSERTERS: u64 = 4;
    const CHECKERS: u64 = 2;
    let fresh = if cfg!(debug_assertions) {
        30_000
    } else {
        300_000
    };
    let clock = ManualClock::at(Duration::from_secs(50));
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(&clock)
        .build();
    // Before the race: key k uses k % 11 of its 10 (0 = untouched … 10 = empty).
    let settled = 20_000u64;
    for k in 0..settled {
        for _ in 0..k % 11 {
            assert!(lim.check_key(&k).is_permitted());
        }
    }
    let hot_base = 1u64 << 40;
    let hot_allowed: Vec<AtomicU64> = (0..HOT).map(|_| AtomicU64::new(0)).collect();
    let fresh_base = 1u64 << 50;
    let done = AtomicBool::new(false);
    let barrier = Barrier::new((INSERTERS + CHECKERS + 1) as usize);
    let bytes_before = lim.table_bytes();
    thread::scope(|s| {
        for t in 0..INSERTERS {
            let (lim, barrier) = (&lim, &barrier);
            s.spawn(move || {
                barrier.wait();
                let mut k = t;
                while k < fresh {
                    assert!(lim.check_key(&(fresh_base + k)).is_permitted());
                    k += INSERTERS;
                }
            });
        }
        for t in 0..CHECKERS {
            let (lim, barrier, hot_allowed, done) = (&lim, &barrier, &hot_allowed, &done);
            s.spawn(move || {
                barrier.wait();
                let mut i = t;
                while !done.load(Ordering::Relaxed) {
                    let h = i % HOT;
                    if lim.check_key(&(hot_base + h)).is_permitted() {
                        hot_allowed[h as usize].fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            });
        }
        barrier.wait();
        let mut toggles = 0;
        while lim.len() < (settled + fresh) as usize * 9 / 10 || toggles < 20 {
            let quota = if toggles % 2 == 0 {
                "100/s;burst=10"
            } else {
                "10/s"
            };
            lim.set_quota(q(quota));
            toggles += 1;
        }
        if toggles % 2 == 1 {
            lim.set_quota(q("10/s"));
        }
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(lim.quota(), q("10/s"));
    // Keys 0, 11, 22, … were never checked, so never tracked.
    let touched = settled - settled.div_ceil(11);
    assert_eq!(lim.len() as u64, touched + fresh + HOT);
    eprintln!("{lim:?}");
    assert!(
        lim.table_bytes() > 2 * bytes_before,
        "the table grew during the race"
    );
    for k in 0..settled {
        let used = k % 11;
        assert_eq!(
            remaining(lim.check_key_n(&k, 0).unwrap()),
            10 - used,
            "settled key {k}"
        );
    }
    for k in 0..fresh {
        let left = remaining(lim.check_key_n(&(fresh_base + k), 0).unwrap());
        assert_eq!(left, 9, "key {k} inserted during the race");
    }
    for (h, n) in hot_allowed.iter().enumerate() {
        let n = n.load(Ordering::Relaxed);
        assert!(
            (10..=10 + CHECKERS).contains(&n),
            "hot key {h}: {n} allowed at one instant, burst 10"
        );
    }
}
