//! Many threads, one frozen `ManualClock`: the GCRA bound holds exactly under contention, and
//! sweeping idle keys never loses an update that races it.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use common::count_allowed;
use tollgate::{Clock, DenyReason, KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict};

const THREADS: usize = 8;

/// Checks per thread per phase: 100 000 in release, fewer in debug.
fn per_thread() -> u64 {
    if cfg!(debug_assertions) {
        10_000
    } else {
        100_000
    }
}

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// `THREADS` threads start together and run `checks` checks each; returns the allowed total.
fn hammer(checks: u64, check: impl Fn() -> Verdict + Sync) -> u64 {
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    count_allowed(checks, &check)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    })
}

#[test]
fn limiters_and_values_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RateLimiter>();
    send_sync::<KeyedRateLimiter<u64>>();
    send_sync::<KeyedRateLimiter<String>>();
    send_sync::<Verdict>();
    send_sync::<Quota>();
    send_sync::<Clock>();
    send_sync::<ManualClock>();
}

#[test]
fn direct_frozen_clock_allows_exactly_the_burst() {
    let clock = ManualClock::at(Duration::from_secs(3));
    let lim = RateLimiter::builder(q("1000/s;burst=250"))
        .clock(clock.clone())
        .build();
    assert_eq!(hammer(per_thread(), || lim.check()), 250);
    assert!(!lim.peek().is_permitted());
}

#[test]
fn keyed_frozen_clock_allows_exactly_the_burst_for_one_key() {
    let clock = ManualClock::at(Duration::from_secs(3));
    let lim = KeyedRateLimiter::<u64>::builder(q("1000/s;burst=250"))
        .clock(clock.clone())
        .max_keys(16)
        .build();
    assert_eq!(hammer(per_thread(), || lim.check_key(&42)), 250);
    assert_eq!(lim.len(), 1);
}

/// Phase 0 empties the burst; each later phase follows an advance of exactly `T` and admits
/// exactly one more.
fn burst_plus_k(check: impl Fn() -> Verdict + Sync, clock: &ManualClock) {
    let k = 20;
    let checks = per_thread() / 10;
    let mut total = hammer(checks, &check);
    assert_eq!(total, 250);
    for phase in 1..=k {
        clock.advance(Duration::from_millis(1));
        total += hammer(checks, &check);
        assert_eq!(total, 250 + phase, "after {phase} advances of T");
    }
    // Advancing 2.5 T admits two more and leaves half an interval of credit.
    clock.advance(Duration::from_micros(2_500));
    assert_eq!(hammer(checks, &check), 2);
    clock.advance(Duration::from_micros(500));
    assert_eq!(hammer(checks, &check), 1);
}

#[test]
fn direct_burst_plus_one_per_interval_advanced() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("1000/s;burst=250"))
        .clock(clock.clone())
        .build();
    burst_plus_k(|| lim.check(), &clock);
}

#[test]
fn keyed_burst_plus_one_per_interval_advanced() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("1000/s;burst=250"))
        .clock(clock.clone())
        .max_keys(16)
        .build();
    burst_plus_k(|| lim.check_key(&7), &clock);
}

/// While the clock moves under the checkers, the allowed total never exceeds `burst + L/T`.
#[test]
fn a_moving_clock_never_admits_more_than_tau_plus_elapsed() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("1000/s;burst=50"))
        .clock(clock.clone())
        .build();
    let keyed = KeyedRateLimiter::<u64>::builder(q("1000/s;burst=50"))
        .clock(clock.clone())
        .max_keys(16)
        .build();
    let (direct_allowed, keyed_allowed) = (AtomicU64::new(0), AtomicU64::new(0));
    let stop = AtomicU64::new(0);
    let steps = if cfg!(debug_assertions) {
        2_000
    } else {
        10_000
    };
    thread::scope(|s| {
        for _ in 0..THREADS - 1 {
            s.spawn(|| {
                while stop.load(Ordering::Relaxed) == 0 {
                    direct_allowed
                        .fetch_add(u64::from(lim.check().is_permitted()), Ordering::Relaxed);
                    keyed_allowed.fetch_add(
                        u64::from(keyed.check_key(&1).is_permitted()),
                        Ordering::Relaxed,
                    );
                }
            });
        }
        for _ in 0..steps {
            clock.advance(Duration::from_nanos(333_333));
            thread::yield_now();
        }
        stop.store(1, Ordering::Relaxed);
    });
    // L = steps · 333 333 ns; the bound is burst + ⌊L/T⌋.
    let bound = 50 + steps * 333_333 / 1_000_000;
    for (name, allowed) in [("direct", direct_allowed), ("keyed", keyed_allowed)] {
        let allowed = allowed.into_inner();
        assert!(allowed <= bound, "{name}: {allowed} allowed, bound {bound}");
    }
}

/// The reading a `Clock` gives of a shared `ManualClock` never runs ahead of the manual clock
/// itself while it only moves forward: otherwise a limiter on it admits more than `τ + L`.
#[test]
fn a_manual_clock_read_from_many_threads_never_runs_ahead() {
    let manual = ManualClock::new();
    let clock = Clock::from(&manual);
    let (stop, ahead, reads) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let steps = if cfg!(debug_assertions) { 1_000 } else { 5_000 };
    thread::scope(|s| {
        for _ in 0..THREADS - 1 {
            s.spawn(|| {
                while stop.load(Ordering::Relaxed) == 0 {
                    let seen = clock.now_nanos();
                    // Read after `seen`: the manual clock only moves forward, so it is ≥ it.
                    let raw = manual.nanos();
                    ahead.fetch_max(seen.saturating_sub(raw), Ordering::Relaxed);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for _ in 0..steps {
            manual.advance(Duration::from_nanos(1_000));
            thread::yield_now();
            if ahead.load(Ordering::Relaxed) > 0 {
                break;
            }
        }
        stop.store(1, Ordering::Relaxed);
    });
    let ahead = ahead.into_inner();
    assert_eq!(
        ahead,
        0,
        "the clock ran {ahead} ns ahead of the manual clock ({} reads; final reading {} vs {})",
        reads.into_inner(),
        clock.now_nanos(),
        manual.nanos()
    );
}

#[test]
fn first_touches_of_the_same_keys_from_eight_threads() {
    let keys = 1_000u64;
    let clock = ManualClock::at(Duration::from_secs(9));
    let lim = KeyedRateLimiter::<u64>::builder(q("1/s;burst=3"))
        .clock(clock.clone())
        .max_keys(4_096)
        .build();
    let allowed: Vec<AtomicU64> = (0..keys).map(|_| AtomicU64::new(0)).collect();
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS as u64 {
            let (lim, allowed, barrier) = (&lim, &allowed, &barrier);
            s.spawn(move || {
                barrier.wait();
                // Half the threads walk up, half walk down, from different offsets.
                for pass in 0..2 {
                    for i in 0..keys {
                        let k = if (t + pass) % 2 == 0 { i } else { keys - 1 - i };
                        let k = (k + t * 125) % keys;
                        if lim.check_key(&k).is_permitted() {
                            allowed[k as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    for (k, n) in allowed.iter().enumerate() {
        assert_eq!(n.load(Ordering::Relaxed), 3, "key {k}");
    }
    assert_eq!(lim.len(), 1_000);
}

/// Per phase (a frozen instant): allowed counts of hot keys, churn keys, and how often a
/// check was sent to the (exhausted) overflow cell.
struct PhaseCounts {
    hot: Vec<AtomicU64>,
    churn: Vec<AtomicU64>,
    table_full: AtomicU64,
}

const HOT: u64 = 8;
const CHURN_THREADS: u64 = 4;
const CHURN_PER_THREAD: u64 = 10;
const BURST: u64 = 4;

/// Keys go idle between phases and are swept by newly arriving keys while other threads keep
/// allowing the same keys: no allow is lost or doubled, and `len()` stays within the cap.
#[test]
fn sweeping_idle_keys_never_races_an_allow() {
    let max_keys = 64;
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s;burst=4"))
        .clock(clock.clone())
        .max_keys(max_keys)
        .overflow_quota(q("1/d"))
        .build();
    // Fill the table and use up the overflow cell (one per day), so that every allow below
    // comes from a key's own cell.
    for k in 0..max_keys as u64 {
        assert!(lim.check_key(&(1_000_000 + k)).is_permitted());
    }
    assert!(lim.check_key(&2_000_000).is_permitted());
    let full = lim
        .check_key(&2_000_001)
        .denied()
        .expect("overflow cell used up");
    assert_eq!(full.reason(), DenyReason::KeyTableFull);

    let phases = if cfg!(debug_assertions) { 10 } else { 60 };
    let mut table_full = 0;
    for phase in 0..phases {
        // Past τ = 400 ms: every key is idle, so sweepable, at the start of the phase.
        clock.advance(Duration::from_secs(1));
        let counts = run_phase(&lim, phase);
        for (k, n) in counts.hot.iter().enumerate() {
            // Demand (4 threads × 40 rounds) far exceeds the burst: exactly the burst.
            assert_eq!(
                n.load(Ordering::Relaxed),
                BURST,
                "phase {phase}: hot key {k}"
            );
        }
        for (k, n) in counts.churn.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            assert!(n <= BURST, "phase {phase}: churn key {k} allowed {n} times");
        }
        table_full += counts.table_full.into_inner();
    }
    // Live keys per phase (8 hot + 40 churn) never exceed the cap, and idle keys are swept
    // before giving up on a full table: no arrival should ever meet the overflow cell.
    assert_eq!(
        table_full, 0,
        "checks sent to the overflow cell with fewer live keys than the cap"
    );
}

fn run_phase(lim: &KeyedRateLimiter<u64>, phase: u32) -> PhaseCounts {
    let counts = PhaseCounts {
        hot: (0..HOT).map(|_| AtomicU64::new(0)).collect(),
        churn: (0..CHURN_THREADS * CHURN_PER_THREAD)
            .map(|_| AtomicU64::new(0))
            .collect(),
        table_full: AtomicU64::new(0),
    };
    let record = |v: Verdict, slot: &AtomicU64| match v {
        Verdict::Deny(d) if d.reason() == DenyReason::KeyTableFull => {
            counts.table_full.fetch_add(1, Ordering::Relaxed);
        }
        v => {
            slot.fetch_add(u64::from(v.is_permitted()), Ordering::Relaxed);
        }
    };
    let barrier = Barrier::new(4 + CHURN_THREADS as usize);
    thread::scope(|s| {
        for t in 0..4u64 {
            let (record, barrier, counts) = (&record, &barrier, &counts);
            s.spawn(move || {
                barrier.wait();
                for round in 0..40 {
                    for i in 0..HOT {
                        let k = (i + t + round) % HOT;
                        record(lim.check_key(&k), &counts.hot[k as usize]);
                    }
                    assert!(lim.len() <= lim.max_keys());
                }
            });
        }
        for t in 0..CHURN_THREADS {
            let (record, barrier, counts) = (&record, &barrier, &counts);
            s.spawn(move || {
                barrier.wait();
                for j in 0..CHURN_PER_THREAD {
                    let idx = t * CHURN_PER_THREAD + j;
                    let key = 10_000 + u64::from(phase) * 1_000 + idx;
                    for _ in 0..BURST + 2 {
                        record(lim.check_key(&key), &counts.churn[idx as usize]);
                    }
                    assert!(lim.len() <= lim.max_keys());
                }
            });
        }
    });
    counts
}
