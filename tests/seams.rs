//! The seams that testing as a user broke: a quota change keeps each cell's
//! fill level, a check racing a change never applies one quota to a cell written under the
//! other, a pass-through's shadow stays what an enforcing twin says, a clock-fault
//! pass-through ends on time at low traffic, and every limiter counts its verdicts.
//! `ManualClock`s throughout; the concurrency tests freeze the clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use tollgate::safety::{FaultDetector, Watchdog};
use tollgate::shaping::Priorities;
use tollgate::{
    Check, Clock, KeyedRateLimiter, ManualClock, PassReason, Quota, RateLimiter, Shadow, Verdict,
};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn direct(quota: &str, clock: &ManualClock) -> RateLimiter {
    RateLimiter::builder(q(quota)).clock(clock).build()
}

/// Checks of `cost` at this instant until one is denied; the units admitted.
fn drain_n(lim: &RateLimiter, cost: u64) -> u64 {
    let mut n = 0;
    while lim.check_n(cost).unwrap().is_permitted() {
        n += cost;
        assert!(n <= 1 << 40, "never denied");
    }
    n
}

fn drain_key(lim: &KeyedRateLimiter<u64>, key: u64) -> u64 {
    let mut n = 0;
    while lim.check_key(&key).is_permitted() {
        n += 1;
        assert!(n <= 1 << 24, "never denied");
    }
    n
}

fn remaining(v: Verdict) -> u64 {
    v.allowed()
        .map(|a| a.remaining())
        .expect("a zero-cost check is allowed")
}

// ---- 1. A quota change keeps each cell's fill level -------------------------------------

#[test]
fn lowering_the_rate_with_the_same_burst_does_not_refill_an_empty_cell() {
    let clock = ManualClock::new();
    let lim = direct("4Gbit/s;burst=8MiB", &clock);
    assert_eq!(drain_n(&lim, 1 << 20), 8 << 20);
    lim.set_quota(q("1Gbit/s;burst=8MiB"));
    // Before the fix 6 MiB more passed at the same instant.
    assert_eq!(drain_n(&lim, 1 << 10), 0, "empty stays empty");

    // The crate docs' own example: 8 -> 2 Gbit/s with a 64 MiB burst.
    let lim = direct("8Gbit/s;burst=64MiB", &clock);
    assert_eq!(drain_n(&lim, 1 << 20), 64 << 20);
    lim.set_quota(q("2Gbit/s;burst=64MiB"));
    assert_eq!(
        drain_n(&lim, 1 << 10),
        0,
        "before the fix 48 MiB more passed"
    );
}

#[test]
fn half_stays_half_and_full_stays_full() {
    let clock = ManualClock::new();
    let lim = direct("10/s", &clock);
    for _ in 0..5 {
        assert!(lim.check().is_permitted());
    }
    lim.set_quota(q("100/s"));
    assert_eq!(remaining(lim.check_n(0).unwrap()), 50);
    lim.set_quota(q("1/s;burst=4"));
    assert_eq!(remaining(lim.check_n(0).unwrap()), 2);
    // A full cell (nothing used) stays full through any change.
    let fresh = direct("10/s", &clock);
    fresh.set_quota(q("3/min;burst=7"));
    assert_eq!(remaining(fresh.check_n(0).unwrap()), 7);
}

#[test]
fn toggling_two_quotas_at_a_frozen_instant_grants_nothing() {
    let clock = ManualClock::new();
    let lim = direct("2000/s;burst=100", &clock);
    let mut admitted = drain_n(&lim, 1);
    for _ in 0..3 {
        lim.set_quota(q("500/s;burst=10"));
        admitted += drain_n(&lim, 1);
        lim.set_quota(q("2000/s;burst=100"));
        admitted += drain_n(&lim, 1);
    }
    // Before the fix: 280.
    assert_eq!(admitted, 100);
}

#[test]
fn switching_every_millisecond_stays_within_the_looser_bound() {
    let clock = ManualClock::new();
    let lim = direct("2000/s;burst=100", &clock);
    let mut admitted = 0u64;
    for i in 0..10_000u64 {
        lim.set_quota(q(if i % 2 == 0 {
            "500/s;burst=10"
        } else {
            "2000/s;burst=100"
        }));
        admitted += drain_n(&lim, 1);
        clock.advance(Duration::from_millis(1));
    }
    // The fill-level rule carries the share used, so a cell refills at the faster relative
    // pace of the smaller τ (1/20 ms under 500/s;burst=10) and spends it in the larger burst
    // (100): at most 100 + 100 × 10 s / 20 ms. The rule admits 35,008 here; the old rule
    // (time carried over, a clamp per toggle) admitted 332,382.
    let bound = 100 + 100 * 10_000 / 20;
    assert!(admitted <= bound, "{admitted} > {bound}");
    // And the change does not lock anyone out: the looser rate gets through.
    assert!(admitted >= 20_000, "{admitted}");
}

#[test]
fn loosening_never_locks_out_and_tightening_never_grants() {
    let clock = ManualClock::new();
    let lim = direct("10/s", &clock);
    drain_n(&lim, 1);
    lim.set_quota(q("1000/s"));
    let wait = lim.check().denied().expect("still empty").retry_after();
    assert!(
        wait <= Duration::from_millis(1),
        "at most one new interval: {wait:?}"
    );
    clock.advance(wait);
    assert!(lim.check().is_permitted());

    let lim = direct("1000/s;burst=100", &clock);
    for _ in 0..50 {
        assert!(lim.check().is_permitted());
    }
    lim.set_quota(q("10/s"));
    // Half used stays half used: 5 of 10. Carrying the 50 ms of time over (the old rule)
    // left 9.
    assert_eq!(
        drain_n(&lim, 1),
        5,
        "half of the new burst is left, no more"
    );
}

#[test]
fn every_key_keeps_its_fill_level_however_long_ago_it_was_touched() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(&clock)
        .max_keys(10_000)
        .build();
    // Key k uses k % 11 of its 10: 0 (untouched) .. 10 (empty).
    for k in 0..5_000u64 {
        for _ in 0..k % 11 {
            assert!(lim.check_key(&k).is_permitted());
        }
    }
    // A tenth of a second later, nothing touched since: each key has earned back one.
    clock.advance(Duration::from_millis(100));
    // Same burst, ten times the rate: the share used is kept (the old rule carried the
    // time over and left a key that had used 1 of 10 with nothing).
    lim.set_quota(q("100/s;burst=10"));
    lim.set_quota(q("1/s;burst=100"));
    for k in 0..5_000u64 {
        let used = (k % 11).saturating_sub(1);
        let left = lim.check_key_n(&k, 0).unwrap();
        assert_eq!(remaining(left), 100 - used * 10, "key {k}");
    }
    // A toggle back grants nothing to the empty keys.
    lim.set_quota(q("10/s"));
    assert_eq!(drain_key(&lim, 10), 1);
    assert_eq!(drain_key(&lim, 5), 6);
}

#[test]
fn the_overflow_cell_and_priority_classes_keep_their_fill_level() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(&clock)
        .max_keys(1)
        .priorities(Priorities::new([(0, 0.0), (1, 0.5)]).unwrap())
        .build();
    assert!(lim.check_key(&1).is_permitted());
    // Key 2 shares the overflow cell: 10 for everyone past the table.
    assert_eq!(drain_key(&lim, 2), 10);
    lim.set_quota(q("1/s;burst=10"));
    assert_eq!(drain_key(&lim, 3), 0, "the overflow cell stays empty");
    // Class 1 may use half the burst: 5 of key 1's remaining 9 under a burst of 10.
    let class1 = || lim.check_key_with(&1, Check::cost(1).class(1)).unwrap();
    let mut n = 0;
    while class1().is_permitted() {
        n += 1;
    }
    assert_eq!(n, 4, "class 1 stops at half the burst (1 used by class 0)");
    lim.set_quota(q("100/s;burst=100"));
    n = 0;
    while class1().is_permitted() {
        n += 1;
    }
    assert_eq!(n, 0, "half used stays half used: class 1 still has nothing");
    assert_eq!(remaining(lim.check_key_n(&1, 0).unwrap()), 50);
}

// ---- 2. The quota-change race ------------------------------------------------------------

/// The tighter quota of a race, and the looser one, whose burst is 100.
const TIGHT_LOOSE: (&str, &str) = ("500/s;burst=10", "2000/s;burst=100");

/// 8 threads check one limiter on a frozen clock while the quota switches between `tight`
/// (where it starts) and `loose` (burst 100); at one instant no more than the looser burst
/// plus one in-flight check per thread may pass.
fn race(switches: usize, repeats: usize, (tight, loose): (&str, &str)) {
    const THREADS: usize = 8;
    let mut most = (0, 0);
    for _ in 0..repeats {
        let clock = ManualClock::new();
        let lim = direct(tight, &clock);
        let keyed = KeyedRateLimiter::<u64>::builder(q(tight))
            .clock(&clock)
            .max_keys(64)
            .build();
        let (admitted, keyed_admitted) = (AtomicU64::new(0), AtomicU64::new(0));
        let done = AtomicBool::new(false);
        let start = Barrier::new(THREADS + 1);
        thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    start.wait();
                    let (mut mine, mut keyed_mine) = (0, 0);
                    let mut rounds = 0;
                    while !done.load(Ordering::Relaxed) || rounds < 2_000 {
                        mine += u64::from(lim.check().is_permitted());
                        keyed_mine += u64::from(keyed.check_key(&7).is_permitted());
                        rounds += 1;
                    }
                    admitted.fetch_add(mine, Ordering::Relaxed);
                    keyed_admitted.fetch_add(keyed_mine, Ordering::Relaxed);
                });
            }
            start.wait();
            for i in 0..switches {
                let quota = if i % 2 == 0 { loose } else { tight };
                lim.set_quota(q(quota));
                keyed.set_quota(q(quota));
                thread::yield_now();
            }
            done.store(true, Ordering::Relaxed);
        });
        let bound = 100 + THREADS as u64;
        let (a, k) = (admitted.into_inner(), keyed_admitted.into_inner());
        assert!(a <= bound, "direct: {a} admitted at one instant > {bound}");
        assert!(k <= bound, "keyed: {k} admitted at one instant > {bound}");
        most = (most.0.max(a), most.1.max(k));
    }
    println!(
        "{switches} switch(es) x {repeats} repeats, 8 threads: at most {} (direct) and {} \
         (keyed) admitted at one instant; bound 108",
        most.0, most.1
    );
}

#[test]
fn a_check_racing_one_quota_change_never_wipes_debt() {
    // Before the fix: up to 490 admitted where 100 is the bound, in 100 of 100 repeats.
    race(1, 100, TIGHT_LOOSE);
}

#[test]
fn checks_racing_repeated_quota_changes_stay_within_the_looser_burst() {
    race(100, 10, TIGHT_LOOSE);
}

#[test]
fn checks_racing_switches_between_a_byte_budget_and_a_request_quota_stay_within_the_burst() {
    // A byte budget has no fast path: every switch turns the checks' fast path off and on
    // again under them (one unit is one byte, or one request).
    race(100, 10, ("4000bit/s;burst=10B", "2000/s;burst=100"));
}

// ---- 3. The shadow stays true during a pass-through ---------------------------------------

#[test]
fn a_passed_shadow_denial_does_not_charge_the_shadow() {
    let (clock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder().clock(&dclock).build();
    let lim = RateLimiter::builder(q("1/s;burst=1"))
        .clock(&clock)
        .detector(detector.clone())
        .build();
    detector.force_pass_through(PassReason::Forced, Duration::from_secs(3600));
    let shadow = |v: Verdict| match v {
        Verdict::PassThrough(p) => p.shadow(),
        other => panic!("expected a pass-through, got {other:?}"),
    };
    assert_eq!(shadow(lim.check()), Shadow::Allow);
    assert_eq!(shadow(lim.check()), Shadow::Deny);
    clock.advance(Duration::from_secs(1));
    // 1/s allows one more after a second; before the fix the passed denial had pushed the
    // shadow's TAT, and this said Deny.
    assert_eq!(shadow(lim.check()), Shadow::Allow);
    assert_eq!(lim.stats().shadow_denied, 1);
}

/// A limiter passing through and an enforcing twin, fed the same schedule: the shadow of
/// every pass-through equals the twin's verdict, for direct and keyed limiters alike.
#[test]
fn shadows_equal_an_enforcing_twin() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for quota in [
        "10/s;burst=5",
        "1/s;burst=1",
        "1000/s;burst=20",
        "1MB/s;burst=64kB",
    ] {
        let (clock, dclock) = (ManualClock::new(), ManualClock::new());
        let detector = FaultDetector::builder().clock(&dclock).build();
        detector.force_pass_through(PassReason::Forced, Duration::from_secs(1 << 20));
        let passing = RateLimiter::builder(q(quota))
            .clock(&clock)
            .detector(detector.clone())
            .build();
        let twin = direct(quota, &clock);
        let kpassing = KeyedRateLimiter::<u64>::builder(q(quota))
            .clock(&clock)
            .detector(detector.clone())
            .build();
        let ktwin = KeyedRateLimiter::<u64>::builder(q(quota))
            .clock(&clock)
            .build();
        let burst = q(quota).burst();
        let (mut shadow_denials, mut compared) = (0u64, 0u64);
        for _ in 0..20_000 {
            let r = next();
            clock.advance(Duration::from_nanos((r % 200_000_000) >> (r % 8 * 3)));
            let cost = 1 + r % burst.min(8).max(burst / 8);
            let key = r % 5;
            let pairs = [
                (passing.check_n(cost).unwrap(), twin.check_n(cost).unwrap()),
                (
                    kpassing.check_key_n(&key, cost).unwrap(),
                    ktwin.check_key_n(&key, cost).unwrap(),
                ),
            ];
            for (p, t) in pairs {
                match p {
                    Verdict::PassThrough(pt) => {
                        let want = if t.is_permitted() {
                            Shadow::Allow
                        } else {
                            Shadow::Deny
                        };
                        assert_eq!(pt.shadow(), want, "{quota}: shadow {pt:?} vs twin {t:?}");
                        shadow_denials += u64::from(want == Shadow::Deny);
                        compared += 1;
                    }
                    // Past the ceiling (10× the quota): only where the twin denies too.
                    Verdict::Deny(_) => assert!(!t.is_permitted(), "{quota}: {p:?} vs {t:?}"),
                    Verdict::Allow(_) => panic!("{quota}: enforced during a pass-through"),
                    _ => unreachable!(),
                }
            }
        }
        assert!(compared > 1_000, "{quota}: {compared}");
        assert!(shadow_denials > 0, "{quota}: the schedule must deny");
        let stats = detector.stats();
        assert_eq!(
            stats.shadow_denied, shadow_denials,
            "{quota}: true shadow denials"
        );
    }
}

#[test]
fn the_ceiling_still_bounds_a_pass_through_at_ten_times_the_quota() {
    let (clock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder().clock(&dclock).build();
    detector.force_pass_through(PassReason::Forced, Duration::from_secs(3600));
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&clock)
        .detector(detector.clone())
        .build();
    let keyed = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(&clock)
        .detector(detector)
        .build();
    // At most 10× the quota; the ceiling cell's weight rounds up (⌈T/9⌉), so it may stop a
    // request short of the tenth burst, never past it.
    let count = |f: &dyn Fn() -> Verdict| (0..1_000).filter(|_| f().is_permitted()).count();
    let ten_bursts = 99..=100;
    assert!(
        ten_bursts.contains(&count(&|| lim.check())),
        "10 × the burst at one instant"
    );
    assert!(ten_bursts.contains(&count(&|| keyed.check_key(&1))));
    assert!(
        ten_bursts.contains(&count(&|| keyed.check_key(&2))),
        "per key"
    );
    clock.advance(Duration::from_secs(1));
    assert!(
        ten_bursts.contains(&count(&|| lim.check())),
        "10 × the rate over a second"
    );
}

// ---- 4. A clock-fault pass-through lasts one window, whatever the traffic -----------------

#[test]
fn a_clock_fault_pass_through_ends_on_time_at_low_traffic() {
    for keyed in [false, true] {
        let (fast, reference) = (ManualClock::new(), ManualClock::new());
        // The default watchdog: a sample every 1024 checks per thread, a 10 s window.
        let dog = Watchdog::new(Clock::from(&fast), Clock::from(&reference));
        let check: Box<dyn Fn() -> Verdict> = if keyed {
            let lim = KeyedRateLimiter::<u64>::builder(q("100/s"))
                .clock(&fast)
                .watchdog(dog.clone())
                .build();
            Box::new(move || lim.check_key(&1))
        } else {
            let lim = RateLimiter::builder(q("100/s"))
                .clock(&fast)
                .watchdog(dog.clone())
                .build();
            Box::new(move || lim.check())
        };
        assert_eq!(dog.sample(), None);
        reference.advance(Duration::from_secs(2)); // the fast clock stalls
        assert!(dog.sample().is_some());
        // 30 checks a second on the reference clock: far fewer than a sample needs.
        let mut passed_until = None;
        for i in 1..=600u64 {
            reference.advance(Duration::from_nanos(33_333_333));
            let at = Duration::from_nanos(33_333_333 * i);
            if matches!(check(), Verdict::PassThrough(p) if p.reason() == PassReason::ClockFault) {
                passed_until = Some(at);
            }
        }
        let last = passed_until.expect("a pass-through");
        // The window is 10 s from the fault (noticed at 2 s on the reference clock); before
        // the fix it lasted the 34 s until a sample happened to run.
        assert!(
            last < Duration::from_secs(10),
            "keyed {keyed}: passed through until {last:?}"
        );
        assert!(
            last >= Duration::from_secs(9),
            "keyed {keyed}: ended early at {last:?}"
        );
        assert!(!dog.is_faulted());
        assert!(check().is_permitted(), "enforcing on the reference clock");
    }
}

#[test]
fn a_forced_pass_through_ends_on_time_at_low_traffic() {
    let (clock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder().clock(&dclock).build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&clock)
        .detector(detector.clone())
        .build();
    detector.force_pass_through(PassReason::Forced, Duration::from_secs(30));
    // One check a second: far fewer than the checks between two evaluations.
    let mut last_passed = 0;
    for s in 1..=40u64 {
        clock.advance(Duration::from_secs(1));
        dclock.advance(Duration::from_secs(1));
        if matches!(lim.check(), Verdict::PassThrough(_)) {
            last_passed = s;
        }
    }
    assert_eq!(last_passed, 29, "the forced pass-through ends at 30 s");
}

// ---- 6. Every limiter counts its verdicts ------------------------------------------------

#[test]
fn every_limiter_counts_its_verdicts_without_a_detector() {
    let clock = ManualClock::new();
    let lim = direct("2/s", &clock);
    for _ in 0..3 {
        let _ = lim.check();
    }
    let _ = lim.check_n(0).unwrap(); // a zero-cost check is not counted
    let _ = lim.check_with(Check::cost(1).attempt(1)).unwrap();
    let s = lim.stats();
    assert_eq!(
        (s.allowed, s.denied_quota, s.retries, s.total()),
        (2, 2, 1, 4)
    );

    let keyed = KeyedRateLimiter::<u64>::builder(q("1/s"))
        .clock(&clock)
        .max_keys(1)
        .build();
    let _ = keyed.check_key(&1);
    let _ = keyed.check_key(&1);
    let _ = keyed.check_key(&2); // the overflow cell
    let _ = keyed.check_key(&3);
    let s = keyed.stats();
    assert_eq!(
        (s.allowed, s.denied_quota, s.denied_key_table_full),
        (2, 1, 1)
    );
}
