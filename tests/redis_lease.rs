//! Leases for hot customers against a real `redis-server` on loopback: the script calls per
//! check counted by the server, the admissions against burst + rate·elapsed, both bounds (the
//! window bound, and under-admission against an exact GCRA) over bursty schedules across 2–3
//! instances (`redis_lease/bursty.rs`, and a property test in `redis_lease/property.rs`), a
//! cold customer's exact verdicts, and how leases meet `set_quota` and `peek_key`.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "redis_lease/bursty.rs"]
mod bursty;
mod common;
#[path = "redis_lease/property.rs"]
mod property;
#[path = "redis_lease/quota.rs"]
mod quota;
#[path = "common/redis_server.rs"]
mod redis_server;

use std::sync::OnceLock;
use std::time::Duration;

use common::Obs;
use redis_server::{connection, own, prefix, shared, Redis};
use tollgate::redis::SharedRateLimiter;
use tollgate::{ManualClock, Quota, Verdict};

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn limiter(
    r: &Redis,
    prefix: &str,
    quota: Quota,
    clock: &ManualClock,
    lease: Option<(u32, Duration)>,
) -> SharedRateLimiter {
    let _guard = rt().enter();
    let mut b = SharedRateLimiter::builder(quota, &r.url)
        .prefix(prefix)
        .clock(clock.clone())
        // A loaded machine: each call gets room, these are not latency tests.
        .deadline(Duration::from_secs(5));
    if let Some((cells, time)) = lease {
        b = b.lease(cells).lease_time(time);
    }
    b.build().unwrap()
}

fn check(lim: &SharedRateLimiter, key: &str) -> Verdict {
    rt().block_on(lim.check_key(key)).unwrap()
}

fn allowed(v: &Verdict) -> bool {
    match v {
        Verdict::Allow(_) => true,
        Verdict::Deny(_) => false,
        other => panic!("no pass-through expected here, got {other:?}"),
    }
}

/// Script calls the server ran since its last `CONFIG RESETSTAT`: EVALSHA, EVAL and FCALL.
fn script_calls(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter(|l| {
            ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_fcall:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| {
            let calls = l.split("calls=").nth(1).unwrap();
            calls.split(',').next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

/// The largest count of admissions in any window, beyond burst + ⌊Δ/T⌋ (µs): ≤ 1 is the bound.
fn worst_window_excess(times: &[u64], burst: u64, t_us: u64) -> i64 {
    let mut worst = i64::MIN;
    for j in 0..times.len() {
        for i in 0..=j {
            let n = (j - i + 1) as i64;
            let allowance = (burst + (times[j] - times[i]) / t_us) as i64;
            worst = worst.max(n - allowance);
        }
    }
    worst
}

#[test]
fn a_hot_customer_on_two_instances_needs_a_tenth_of_a_call_per_check() {
    let Some(r) = own("lease_hot") else { return };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let quota: Quota = "1000/s;burst=200".parse().unwrap();
    let p = prefix("lease_hot");
    let lease = Some((20, Duration::from_secs(1)));
    let a = limiter(&r, &p, quota, &clock, lease);
    let b = limiter(&r, &p, quota, &clock, lease);
    let mut con = connection(&r.url);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .unwrap();
    let checks = 20_000u64;
    let mut times = Vec::new();
    let start = clock.nanos() / 1000;
    for i in 0..checks {
        let lim = if i % 2 == 0 { &a } else { &b };
        if allowed(&check(lim, "hot")) {
            times.push(clock.nanos() / 1000);
        }
        clock.advance(Duration::from_micros(100));
    }
    let elapsed_us = clock.nanos() / 1000 - 100 - start;
    let calls = script_calls(&mut con);
    let admitted = times.len() as u64;
    // burst + rate·elapsed, in cells of T = 1 ms.
    let bound = 200 + elapsed_us / 1000;
    let (sa, sb) = (a.stats(), b.stats());
    let lapsed = sa.cells_lapsed + sb.cells_lapsed;
    eprintln!(
        "{checks} checks: {calls} script calls ({:.4} per check), admitted {admitted} of \
         burst + rate·elapsed = {bound} ({:.2} %), leases {}, cells leased {}, lapsed {lapsed}",
        calls as f64 / checks as f64,
        100.0 * admitted as f64 / bound as f64,
        sa.leases_taken + sb.leases_taken,
        sa.cells_leased + sb.cells_leased,
    );
    assert!(
        calls * 10 <= checks,
        "{calls} script calls for {checks} checks"
    );
    // The first EVALSHA met NOSCRIPT and was sent again as EVAL: the server counts both.
    let sent = sa.round_trips + sb.round_trips + sa.script_reloads + sb.script_reloads;
    assert_eq!(calls, sent);
    assert!(
        admitted * 100 >= bound * 95,
        "admitted {admitted} of {bound}"
    );
    assert!(
        admitted <= bound + 1,
        "admitted {admitted} over {bound} + 1"
    );
    assert!(sa.leases_taken > 0 && sb.leases_taken > 0);
    assert!(worst_window_excess(&times, 200, 1000) <= 1);
}

#[test]
fn a_cold_customer_gets_the_exact_verdicts_of_a_limiter_without_leases() {
    let Some(r) = shared("lease_cold") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    // T = 2 s, burst 3: one check per second is allowed until the burst is spent, then every
    // other one, with remaining and reset_after moving each time.
    let quota: Quota = "30/min;burst=3".parse().unwrap();
    let leased = limiter(
        &r,
        &prefix("lease_cold_a"),
        quota,
        &clock,
        Some((1, Duration::from_secs(1))),
    );
    let plain = limiter(&r, &prefix("lease_cold_b"), quota, &clock, None);
    let (mut allows, mut denies) = (0, 0);
    for i in 0..40 {
        let got = Obs::of(check(&leased, "cold"));
        let want = Obs::of(check(&plain, "cold"));
        assert_eq!(got, want, "check #{i}");
        if got.is_allow() {
            allows += 1;
        } else {
            denies += 1;
        }
        clock.advance(Duration::from_secs(1));
    }
    assert!(
        allows > 0 && denies > 0,
        "{allows} allowed, {denies} denied"
    );
    let s = leased.stats();
    assert_eq!((s.leases_taken, s.round_trips), (0, 40));
}

/// A limiter whose customer "k" is hot and holds a fresh lease at a full bucket: 2·cells
/// checks at one instant made it hot (allowed, one call each; a lease time of 10 ms needs no
/// more than rate·10 ms = 10), the last of them took the lease and spent its first cell.
fn hot_with_lease(r: &Redis, clock: &ManualClock, cells: u32) -> SharedRateLimiter {
    let quota: Quota = "1000/s;burst=200".parse().unwrap();
    let lim = limiter(
        r,
        &prefix("lease_rest"),
        quota,
        clock,
        Some((cells, Duration::from_millis(10))),
    );
    for _ in 0..2 * cells {
        assert!(allowed(&check(&lim, "k")));
    }
    assert_eq!(lim.stats().leases_taken, 1);
    assert_eq!(lim.stats().round_trips, u64::from(2 * cells));
    lim
}

#[test]
fn a_quota_change_ends_every_lease() {
    let Some(r) = shared("lease_quota") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lim = hot_with_lease(&r, &clock, 10);
    assert!(allowed(&check(&lim, "k")));
    assert_eq!(lim.stats().round_trips, 20, "spent from the lease");
    lim.set_quota("10/s;burst=5".parse().unwrap());
    let before = lim.stats();
    assert!(
        allowed(&check(&lim, "k")),
        "the fill level kept: 29 ms of 200 is 72.5 ms of 500"
    );
    let after = lim.stats();
    assert_eq!(after.round_trips, before.round_trips + 1, "the lease ended");
    // 10 leased, the first and one more spent: 8 lapse.
    assert_eq!(after.cells_lapsed, 8);
}

#[test]
fn a_peek_neither_spends_nor_takes_a_lease() {
    let Some(r) = shared("lease_peek") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lim = hot_with_lease(&r, &clock, 10);
    for _ in 0..30 {
        assert!(rt().block_on(lim.peek_key("k")).unwrap().is_permitted());
    }
    let s = lim.stats();
    assert_eq!(
        (s.round_trips, s.leases_taken),
        (50, 1),
        "each peek one call"
    );
    // The 9 cells left are all still there.
    for _ in 0..9 {
        assert!(allowed(&check(&lim, "k")));
    }
    let s = lim.stats();
    assert_eq!(
        (s.round_trips, s.leased_allowed, s.cells_lapsed),
        (50, 9, 0)
    );
}

// ---------------------------------------------------------------------------------------------
// Under-admission, measured against an exact GCRA on the merged schedule

/// The exact GCRA in µs: allowed iff max(tat, now) + T − now ≤ τ.
struct Oracle {
    tat: u64,
    t: u64,
    tau: u64,
}

impl Oracle {
    fn check(&mut self, now: u64) -> bool {
        let next = self.tat.max(now) + self.t;
        let ok = next - now <= self.tau;
        if ok {
            self.tat = next;
        }
        ok
    }
}

/// Random gaps (a fixed LCG: the same schedule every run) with mean `mean_us`, each check sent
/// to instance 0 with probability `share0`; (admitted with leases, admitted by the oracle).
fn under_admission(r: &Redis, mean_us: u64, share0: f64, cells: u32) -> (u64, u64, u64) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let quota: Quota = "1000/s;burst=200".parse().unwrap();
    let p = prefix("lease_under");
    let lease = Some((cells, Duration::from_secs(1)));
    let lims = [
        limiter(r, &p, quota, &clock, lease),
        limiter(r, &p, quota, &clock, lease),
    ];
    let mut oracle = Oracle {
        tat: 0,
        t: 1000,
        tau: 200_000,
    };
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let (mut got, mut want) = (0, 0);
    let start = clock.nanos() / 1000;
    // 4 simulated seconds.
    while clock.nanos() / 1000 - start < 4_000_000 {
        let gap = (rnd() * 2.0 * mean_us as f64) as u64;
        clock.advance(Duration::from_micros(gap));
        let i = usize::from(rnd() >= share0);
        got += u64::from(allowed(&check(&lims[i], "c")));
        want += u64::from(oracle.check(clock.nanos() / 1000));
    }
    let (s0, s1) = (lims[0].stats(), lims[1].stats());
    let calls = s0.round_trips + s1.round_trips;
    eprintln!(
        "  leases {}, cells leased {}, lapsed {}, round trips {calls}",
        s0.leases_taken + s1.leases_taken,
        s0.cells_leased + s1.cells_leased,
        s0.cells_lapsed + s1.cells_lapsed
    );
    (got, want, s0.cells_lapsed + s1.cells_lapsed)
}

#[test]
fn under_admission_stays_within_n_leases_per_lease_time() {
    let Some(r) = shared("lease_under") else {
        return;
    };
    let cells = 20;
    // (mean gap µs, share of instance 0): 2× the rate split evenly, 1.25× the rate split
    // 80/20 (instance 1 below the rate: cold there), 1.1× split evenly (both cold).
    for (mean, share0) in [(500, 0.5), (800, 0.8), (900, 0.5), (100, 0.5)] {
        let (got, want, lapsed) = under_admission(&r, mean, share0, cells);
        eprintln!(
            "mean gap {mean} µs, share {share0}: admitted {got}, exact GCRA {want}, \
             under-admission {} ({:.2} %), cells lapsed {lapsed}",
            want as i64 - got as i64,
            100.0 * (want as f64 - got as f64) / want as f64
        );
        // 2 instances, 4 lease times (+1 for a lease taken at the start).
        assert!(got + 2 * u64::from(cells) * 5 >= want, "{got} of {want}");
    }
}

#[test]
fn leases_on_the_servers_clock_stay_within_the_bound() {
    let Some(r) = shared("lease_server_time") else {
        return;
    };
    let _guard = rt().enter();
    let p = prefix("lease_server_time");
    let build = || {
        // 200/s: an instance is hot after 200 checks in a second, which a slow debug build
        // on a loaded machine still makes in the half second below (1000/s needed 1,000).
        SharedRateLimiter::builder("200/s;burst=50".parse().unwrap(), &r.url)
            .prefix(&p)
            .deadline(Duration::from_secs(5))
            .lease(20)
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    let started = std::time::Instant::now();
    let mut admitted = 0u64;
    let mut checks = 0u64;
    // Real time on a real server: half a second of checks as fast as they go.
    while started.elapsed() < Duration::from_millis(500) {
        let lim = if checks % 2 == 0 { &a } else { &b };
        admitted += u64::from(allowed(&check(lim, "hot")));
        checks += 1;
    }
    let elapsed_us = started.elapsed().as_micros() as u64;
    let (sa, sb) = (a.stats(), b.stats());
    let bound = 50 + elapsed_us / 5000;
    eprintln!(
        "server clock: {checks} checks, admitted {admitted} of {bound}, {} round trips, \
         {} leases, {} cells lapsed",
        sa.round_trips + sb.round_trips,
        sa.leases_taken + sb.leases_taken,
        sa.cells_lapsed + sb.cells_lapsed
    );
    assert!(
        admitted <= bound + 1,
        "admitted {admitted} over {bound} + 1"
    );
    assert!(sa.leases_taken + sb.leases_taken > 0, "no lease taken");
    assert!(admitted * 10 >= bound * 8, "admitted {admitted} of {bound}");
}

/// Exported as `tollgate_redis_leases_total` and `tollgate_redis_lease_cells_total`, and the
/// checks a lease answered as `tollgate_redis_checks_total{outcome="leased_allowed"}`.
#[cfg(feature = "metrics")]
#[test]
fn leases_are_exported() {
    let Some(r) = shared("lease_metrics") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lim = std::sync::Arc::new(hot_with_lease(&r, &clock, 10));
    for _ in 0..3 {
        assert!(allowed(&check(&lim, "k")));
    }
    let text = redis_server::scrape(&lim);
    let value = |s: &str| redis_server::series(&text, s);
    assert_eq!(
        value(r#"tollgate_redis_leases_total{limiter="shared"}"#),
        Some(1),
        "{text}"
    );
    let cells = r#"tollgate_redis_lease_cells_total{limiter="shared",event="leased"}"#;
    assert_eq!(value(cells), Some(10), "{text}");
    let spent = r#"tollgate_redis_checks_total{limiter="shared",outcome="leased_allowed"}"#;
    assert_eq!(value(spent), Some(3), "{text}");
}

#[test]
fn lease_settings_out_of_range_are_refused_at_build() {
    let _guard = rt().enter();
    let b = || SharedRateLimiter::builder("10/s".parse().unwrap(), "redis://127.0.0.1:1/");
    for (what, r) in [
        ("no cell", b().lease(0).build()),
        ("too many cells", b().lease((1 << 20) + 1).build()),
        ("no time", b().lease(5).lease_time(Duration::ZERO).build()),
    ] {
        assert!(
            matches!(r, Err(tollgate::redis::BackendError::InvalidSetting(_))),
            "{what}: {r:?}"
        );
    }
    assert!(b().lease(1 << 20).build().is_ok());
}
