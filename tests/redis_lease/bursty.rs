//! Under-admission on bursty schedules, against an exact GCRA on the same merged schedule:
//! fixed schedules whose figures the README quotes, with the calls per check.

use std::time::Duration;

use tollgate::{ManualClock, Quota};

use super::{allowed, check, limiter, script_calls, worst_window_excess, Oracle};
use crate::redis_server::{connection, own, prefix, Redis};

/// A schedule: the gap before each check (µs) and the instance it goes to.
pub(crate) type Schedule = Vec<(u64, usize)>;

/// Events at absolute µs, in the order listed within one instant, turned into gaps.
fn gaps(mut events: Vec<(u64, usize)>) -> Schedule {
    events.sort_by_key(|e| e.0);
    let mut last = 0;
    events
        .into_iter()
        .map(|(t, i)| {
            let gap = t - last;
            last = t;
            (gap, i)
        })
        .collect()
}

/// Every `period` µs for `secs` seconds, `size` checks at once on each of `n` instances, one
/// instance after the other; `stagger` spreads the instances' bursts over the period.
pub(crate) fn bursts(n: usize, period: u64, size: usize, stagger: bool, secs: u64) -> Schedule {
    let mut events = Vec::new();
    for b in 0..secs * 1_000_000 / period {
        for i in 0..n {
            let off = if stagger {
                period * i as u64 / n as u64
            } else {
                0
            };
            events.extend((0..size).map(|_| (b * period + off, i)));
        }
    }
    gaps(events)
}

/// The schedule that makes cells held by one instance cost another its admissions, with no
/// cell lapsing: each second instance 1 proves hot with 1,000 checks at once; then three
/// times, 220 ms apart (the bucket drains in between), instance 1 takes a lease at a drained
/// bucket and instance 0 sends 200 checks at the same instant — the exact GCRA admits them
/// all, but 19 of the bucket's cells are instance 1's — which instance 1 then spends one per
/// millisecond, when the exact GCRA has room for them too.
pub(crate) fn episodes(secs: u64) -> Schedule {
    let mut events = Vec::new();
    for s in 0..secs {
        let t0 = s * 1_000_000;
        events.extend((0..1000).map(|_| (t0, 1)));
        for e in 0..3 {
            let t = t0 + 200_000 + e * 220_000;
            events.push((t, 1));
            events.extend((0..200).map(|_| (t, 0)));
            events.extend((1..20).map(|j| (t + j * 1000, 1)));
        }
    }
    gaps(events)
}

/// What a schedule gave.
#[derive(Debug)]
pub(crate) struct Replay {
    pub(crate) checks: u64,
    pub(crate) admitted: u64,
    pub(crate) exact: u64,
    /// The largest under-admission of any prefix of the run (exact − admitted).
    pub(crate) worst_under: i64,
    pub(crate) lapsed: u64,
    pub(crate) leases: u64,
    /// Script calls the server counted (EVALSHA and EVAL).
    pub(crate) calls: u64,
    /// From the first check to the last, µs.
    pub(crate) span_us: u64,
    pub(crate) window_excess: i64,
}

impl Replay {
    /// N · max_cells · (⌊D / lease_time⌋ + 1): the documented bound on under-admission.
    pub(crate) fn bound(&self, n: usize, cells: u32, lease_us: u64) -> i64 {
        (n as u64 * u64::from(cells) * (self.span_us / lease_us + 1)) as i64
    }
}

/// Runs `schedule` on `n` fresh instances of one customer (client clock), beside the exact GCRA.
pub(crate) fn replay(
    r: &Redis,
    quota: &str,
    (burst, t_us, tau_us): (u64, u64, u64),
    n: usize,
    (cells, lease): (u32, Duration),
    schedule: &[(u64, usize)],
) -> Replay {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let quota: Quota = quota.parse().unwrap();
    let p = prefix("lease_bursty");
    let lims: Vec<_> = (0..n)
        .map(|_| limiter(r, &p, quota, &clock, Some((cells, lease))))
        .collect();
    let mut con = connection(&r.url);
    let calls_before = script_calls(&mut con);
    let mut oracle = Oracle {
        tat: 0,
        t: t_us,
        tau: tau_us,
    };
    let (mut admitted, mut exact, mut worst_under) = (0u64, 0u64, 0i64);
    let mut times = Vec::new();
    let start = clock.nanos() / 1000;
    let mut first = None;
    for &(gap, i) in schedule {
        clock.advance(Duration::from_micros(gap));
        let now = clock.nanos() / 1000;
        first.get_or_insert(now);
        if allowed(&check(&lims[i % n], "c")) {
            admitted += 1;
            times.push(now);
        }
        exact += u64::from(oracle.check(now));
        worst_under = worst_under.max(exact as i64 - admitted as i64);
    }
    let stats: Vec<_> = lims.iter().map(|l| l.stats()).collect();
    Replay {
        checks: schedule.len() as u64,
        admitted,
        exact,
        worst_under,
        lapsed: stats.iter().map(|s| s.cells_lapsed).sum(),
        leases: stats.iter().map(|s| s.leases_taken).sum(),
        calls: script_calls(&mut con) - calls_before,
        span_us: clock.nanos() / 1000 - first.unwrap_or(start),
        window_excess: worst_window_excess(&times, burst, t_us),
    }
}

#[test]
fn under_admission_on_bursty_schedules() {
    // A server of its own: the calls are counted by the server, with no other test's.
    let Some(r) = own("lease_bursty") else {
        return;
    };
    let r = &r;
    let lease_us = 1_000_000;
    let cases: [(&str, usize, Schedule); 5] = [
        (
            "even: 2 instances alternating, 100 µs",
            2,
            (0..20_000).map(|i| (100, i % 2)).collect(),
        ),
        (
            "2 instances, 100 each every 50 ms",
            2,
            bursts(2, 50_000, 100, false, 4),
        ),
        (
            "3 instances, 60 each every 50 ms, staggered",
            3,
            bursts(3, 50_000, 60, true, 4),
        ),
        (
            "2 instances, 300 each every 250 ms",
            2,
            bursts(2, 250_000, 300, false, 4),
        ),
        ("episodes: held cells, no lapse", 2, episodes(6)),
    ];
    for (name, n, schedule) in cases {
        let got = replay(
            r,
            "1000/s;burst=200",
            (200, 1000, 200_000),
            n,
            (20, Duration::from_micros(lease_us)),
            &schedule,
        );
        eprintln!(
            "{name}: {} checks, {:.4} calls per check, admitted {} of exact {}, worst \
             under-admission {} (bound {}), {} leases, {} cells lapsed",
            got.checks,
            got.calls as f64 / got.checks as f64,
            got.admitted,
            got.exact,
            got.worst_under,
            got.bound(n, 20, lease_us),
            got.leases,
            got.lapsed,
        );
        assert!(got.window_excess <= 1, "{name}: {got:?}");
        assert!(
            got.worst_under <= got.bound(n, 20, lease_us),
            "{name}: {got:?}"
        );
    }
}
