//! A quota change meets leases: a lease call in flight across `set_quota` keeps no cell, and
//! `set_quota` racing leased checks from several threads on two instances (a tightening and a
//! loosening) leaves the new quota's window bound intact from the change on.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use tollgate::{ManualClock, Quota};

use super::{allowed, check, limiter, rt};
use crate::redis_server::{connection, own, prefix, shared, Redis};

#[test]
fn a_lease_granted_across_a_quota_change_keeps_no_cell() {
    // A server of its own: the test pauses it.
    let Some(r) = own("lease_quota_flight") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lim = limiter(
        &r,
        &prefix("lease_quota_flight"),
        "1000/s;burst=200".parse().unwrap(),
        &clock,
        Some((20, Duration::from_millis(100))),
    );
    // Hot after max(2·20, rate·100 ms) = 100 checks: 99 plain calls, all allowed.
    for _ in 0..99 {
        assert!(allowed(&check(&lim, "k")));
    }
    let mut admin = connection(&r.url);
    // Scripts wait while the server is paused for writes; CLIENT UNPAUSE does not.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let asking = lim.clone();
    let flight = rt().spawn(async move { asking.check_key("k").await });
    // The 100th check has read the quota and sent its lease call (round trips are counted as
    // a call is sent); the server holds it.
    while lim.stats().round_trips < 100 {
        thread::yield_now();
    }
    lim.set_quota("10/s;burst=5".parse().unwrap());
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .unwrap();
    let first = rt().block_on(flight).unwrap().unwrap();
    let s = lim.stats();
    assert_eq!((s.leases_taken, s.cells_leased), (1, 20));
    assert!(
        allowed(&first),
        "the check that asked is answered as the call it sent, under the old quota"
    );
    assert_eq!(s.cells_lapsed, 19, "the other cells were never spendable");
    // At the same instant, under 10/s;burst=5: the fill level of 119 ms of 200 is 297.5 ms of
    // 500, so two more fit. With the old cells kept, 19 more would have been admitted.
    let more = (0..30).filter(|_| allowed(&check(&lim, "k"))).count();
    assert_eq!(more, 2);
}

/// What the threads of [`race`] saw: the admissions of each round, and the round in which both
/// quota changes returned.
struct Raced {
    admitted: Vec<u64>,
    changed: usize,
}

/// Two instances of one customer, `workers` threads each checking it once a round (the clock
/// steps 100 µs between rounds), while another thread changes both instances' quota from
/// `from` to `to` during round `at`.
fn race(r: &Redis, from: &str, to: &str, workers: usize, rounds: usize, at: usize) -> Raced {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let p = prefix("lease_quota_race");
    let lease = Some((20, Duration::from_millis(100)));
    let from: Quota = from.parse().unwrap();
    let lims = [
        limiter(r, &p, from, &clock, lease),
        limiter(r, &p, from, &clock, lease),
    ];
    let admitted = Arc::new(Mutex::new(vec![0u64; rounds]));
    // Workers and the changer meet at the start of a round, and again at its end, when the
    // clock moves on.
    let start = Arc::new(Barrier::new(workers + 2));
    let end = Arc::new(Barrier::new(workers + 2));
    let changed = Arc::new(Mutex::new(None));
    thread::scope(|s| {
        for w in 0..workers {
            let (lim, start, end, admitted) = (&lims[w % 2], &start, &end, &admitted);
            s.spawn(move || {
                for round in 0..rounds {
                    start.wait();
                    if allowed(&check(lim, "c")) {
                        admitted.lock().unwrap()[round] += 1;
                    }
                    end.wait();
                }
            });
        }
        let (start2, end2, changed2, lims2) = (&start, &end, &changed, &lims);
        s.spawn(move || {
            let to: Quota = to.parse().unwrap();
            for round in 0..rounds {
                start2.wait();
                if round == at {
                    for lim in lims2 {
                        lim.set_quota(to);
                    }
                    *changed2.lock().unwrap() = Some(round);
                }
                end2.wait();
            }
        });
        for _ in 0..rounds {
            start.wait();
            end.wait();
            clock.advance(Duration::from_micros(100));
        }
    });
    let admitted = admitted.lock().unwrap().clone();
    let changed = changed.lock().unwrap().unwrap();
    Raced { admitted, changed }
}

/// The largest excess over burst + ⌊Δ/T⌋ of any window of rounds after `from` (exclusive),
/// rounds 100 µs apart.
fn worst_excess_after(admitted: &[u64], from: usize, burst: u64, t_us: u64) -> i64 {
    let mut worst = i64::MIN;
    for j in from + 1..admitted.len() {
        let mut n = 0;
        for i in (from + 1..=j).rev() {
            n += admitted[i];
            let allowance = burst + (j - i) as u64 * 100 / t_us;
            worst = worst.max(n as i64 - allowance as i64);
        }
    }
    worst
}

#[test]
fn set_quota_racing_leased_checks_keeps_the_new_window_bound() {
    // 4 threads on two instances, 40 checks a millisecond: hot and leasing long before the
    // change at round 300 (30 ms).
    let Some(r) = shared("lease_quota_race") else {
        return;
    };
    let tight = race(&r, "1000/s;burst=200", "10/s;burst=5", 4, 3_300, 300);
    let before: u64 = tight.admitted[..tight.changed].iter().sum();
    let after: u64 = tight.admitted[tight.changed + 1..].iter().sum();
    eprintln!("tightening: {before} admitted before the change, {after} in the 300 ms after");
    assert!(before > 200, "leased at 1000/s before the change: {before}");
    // 10/s;burst=5 (T = 100 ms): a full bucket keeps its fill level; over 300 ms a window
    // admits at most 5 + 3 + 1.
    assert!(worst_excess_after(&tight.admitted, tight.changed, 5, 100_000) <= 1);
    assert!(after <= 9, "{after} admitted after the change");

    let loose = race(&r, "10/s;burst=5", "1000/s;burst=200", 4, 3_300, 300);
    let after: u64 = loose.admitted[loose.changed + 1..].iter().sum();
    eprintln!("loosening: {after} admitted in the 300 ms after the change");
    assert!(worst_excess_after(&loose.admitted, loose.changed, 200, 1_000) <= 1);
    // The new quota applies at once: a bucket full at 10/s is full at 1000/s (the fill
    // level), and from there it admits one a millisecond — not the old leases' pace of 10 a
    // second.
    assert!(after >= 250, "{after} admitted after the change");
}
