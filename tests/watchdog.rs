//! The clock watchdog: a fast clock that stalls, lags or steps
//! back is caught by comparing its *rate* with a reference over short spans; ordinary drift
//! never trips it. Attached to a limiter, a fault costs one window of
//! `PassThrough(ClockFault)` (under the ceiling), after which the limiter enforces again on
//! the reference clock. Two `ManualClock`s throughout: nothing sleeps.

use std::thread;
use std::time::Duration;

use tollgate::safety::{ClockFault, FaultDetector, Watchdog};
use tollgate::{
    Clock, DenyReason, KeyedRateLimiter, ManualClock, PassReason, Quota, RateLimiter, Shadow,
    Verdict,
};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// A watchdog that samples on every check: spans of 1 s to 10 s, 5 % tolerance, a 10 s
/// pass-through window.
fn every_check(fast: &ManualClock, reference: &ManualClock) -> Watchdog {
    Watchdog::with(
        Clock::from(fast),
        Clock::from(reference),
        1,
        0.05,
        secs(1),
        secs(10),
    )
}

fn deny_reason(v: Verdict) -> Option<DenyReason> {
    v.denied().map(|d| d.reason())
}

fn passed(v: Verdict) -> Option<(PassReason, Shadow)> {
    match v {
        Verdict::PassThrough(p) => Some((p.reason(), p.shadow())),
        _ => None,
    }
}

const CLOCK_FAULT_ALLOW: Option<(PassReason, Shadow)> =
    Some((PassReason::ClockFault, Shadow::Allow));
const CLOCK_FAULT_DENY: Option<(PassReason, Shadow)> = Some((PassReason::ClockFault, Shadow::Deny));

/// A deterministic generator for sample intervals.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

// ---------------------------------------------------------------------------------------------
// Sampling alone
// ---------------------------------------------------------------------------------------------

#[test]
fn a_stalled_fast_clock_is_seen_once_a_full_span_has_passed_on_the_reference() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = Watchdog::new(&fast, &reference);
    assert_eq!(dog.sample(), None, "the first sample only records");
    fast.advance(secs(1));
    reference.advance(secs(1));
    assert_eq!(dog.sample(), None, "healthy");

    // The fast clock stops. Half a second is too short a span to compare.
    reference.advance(ms(500));
    assert_eq!(dog.sample(), None);
    assert!(!dog.is_faulted() && !dog.is_switched());
    // A full second on the reference with no movement on the fast clock: a stall.
    reference.advance(ms(500));
    assert_eq!(dog.sample(), Some(ClockFault::Stalled));
    assert!(dog.is_faulted() && dog.is_switched());
    assert_eq!(dog.faults(), 1);
    assert_eq!(dog.last_fault(), Some(ClockFault::Stalled));
}

#[test]
fn a_fast_clock_at_half_the_reference_rate_diverged() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = Watchdog::new(&fast, &reference);
    assert_eq!(dog.sample(), None);
    for _ in 0..3 {
        fast.advance(secs(2));
        reference.advance(secs(2));
        assert_eq!(dog.sample(), None);
    }
    // Lag: the fast clock runs at 50 %.
    fast.advance(ms(1_000));
    reference.advance(ms(2_000));
    assert_eq!(dog.sample(), Some(ClockFault::Diverged));
    assert!(dog.is_faulted() && dog.is_switched());
    assert_eq!(dog.last_fault(), Some(ClockFault::Diverged));
}

#[test]
fn a_fast_clock_running_ahead_diverged_too() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = Watchdog::new(&fast, &reference);
    assert_eq!(dog.sample(), None);
    fast.advance(ms(3_000));
    reference.advance(ms(2_000));
    assert_eq!(dog.sample(), Some(ClockFault::Diverged));
}

#[test]
fn the_tolerance_is_five_percent_by_default() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = Watchdog::new(&fast, &reference);
    assert_eq!(dog.sample(), None);
    // 4 % slow, 4 % fast: within the tolerance.
    fast.advance(ms(9_600));
    reference.advance(secs(10));
    assert_eq!(dog.sample(), None);
    fast.advance(ms(10_400));
    reference.advance(secs(10));
    assert_eq!(dog.sample(), None);
    // 6 % slow: beyond it.
    fast.advance(ms(9_400));
    reference.advance(secs(10));
    assert_eq!(dog.sample(), Some(ClockFault::Diverged));
}

#[test]
fn a_backward_step_is_seen_at_once_even_within_a_short_span() {
    let (fast, reference) = (ManualClock::at(secs(100)), ManualClock::at(secs(100)));
    let dog = Watchdog::new(&fast, &reference);
    assert_eq!(dog.sample(), None);
    fast.advance(ms(100));
    reference.advance(ms(100));
    assert_eq!(dog.sample(), None);
    // The reference moved 10 ms only (a span too short to compare rates), but a step back is
    // a fault whatever the span.
    fast.set(secs(99));
    reference.advance(ms(10));
    assert_eq!(dog.sample(), Some(ClockFault::SteppedBack));
    assert!(dog.is_faulted() && dog.is_switched());
    assert_eq!(dog.last_fault(), Some(ClockFault::SteppedBack));
}

#[test]
fn the_fault_window_is_ten_seconds_on_the_reference() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = Watchdog::new(&fast, &reference);
    assert_eq!(dog.sample(), None);
    reference.advance(secs(2));
    assert_eq!(dog.sample(), Some(ClockFault::Stalled));
    // The fast clock is repaired (it runs at the reference's rate again, lagging 2 s).
    for t in 1..=9 {
        fast.advance(secs(1));
        reference.advance(secs(1));
        assert_eq!(dog.sample(), None);
        assert!(dog.is_faulted(), "{t} s after the fault");
    }
    fast.advance(secs(1));
    reference.advance(secs(1));
    assert_eq!(dog.sample(), None);
    assert!(!dog.is_faulted(), "the window is over");
    assert!(dog.is_switched(), "the reference stays in use");
    assert_eq!(dog.faults(), 1);
}

/// Runs a fast clock that is off by `num/den` (faster if `ahead`) with samples every 1–10 s
/// (seeded) for `span` of reference time; asserts that it never trips; returns how far apart
/// the two clocks ended up.
fn drift(num: u64, den: u64, ahead: bool, span: Duration, seed: u64) -> Duration {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = Watchdog::new(&fast, &reference);
    assert_eq!(dog.sample(), None);
    let mut rng = Lcg(seed);
    let mut samples = 0u64;
    while reference.now() < span {
        let step = 1_000_000_000 + rng.next() % 9_000_000_001; // 1 s to 10 s, in ns
        let off = step * num / den;
        reference.advance(Duration::from_nanos(step));
        fast.advance(Duration::from_nanos(if ahead {
            step + off
        } else {
            step - off
        }));
        let seen = dog.sample();
        assert_eq!(seen, None, "sample {samples} at {:?}", reference.now());
        samples += 1;
    }
    assert_eq!(dog.faults(), 0);
    assert!(!dog.is_switched());
    assert!(samples > span.as_secs() / 10);
    let (f, r) = (fast.nanos(), reference.nanos());
    Duration::from_nanos(f.abs_diff(r))
}

#[test]
fn slow_drift_over_hours_never_trips() {
    // 0.01 %: far worse than TSC drift (a few ppm), far below the 5 % tolerance.
    let six_hours = secs(6 * 3600);
    drift(1, 10_000, true, six_hours, 1);
    drift(1, 10_000, false, six_hours, 2);
    // Even 1 % is an ordinary rate difference, not a fault.
    drift(1, 100, true, six_hours, 3);
    drift(1, 100, false, six_hours, 4);
}

#[test]
fn drift_that_accumulates_to_seconds_over_days_never_trips() {
    // Rates are compared over short spans, never cumulatively: 0.01 % over three days is
    // 26 s apart, which an offset check would call a fault.
    let three_days = secs(3 * 86_400);
    let apart = drift(1, 10_000, true, three_days, 5);
    assert!(apart >= secs(25), "{apart:?}");
    let apart = drift(1, 10_000, false, three_days, 6);
    assert!(apart >= secs(25), "{apart:?}");
}

// ---------------------------------------------------------------------------------------------
// Attached to limiters
// ---------------------------------------------------------------------------------------------

/// Checks until the first `Deny(Ceiling)` at a frozen instant: returns how many passed through
/// before it. Panics on anything else.
fn flood_until_ceiling(mut check: impl FnMut() -> Verdict) -> u64 {
    let mut permitted = 0;
    for _ in 0..1_000_000 {
        let v = check();
        match passed(v) {
            CLOCK_FAULT_ALLOW | CLOCK_FAULT_DENY => permitted += 1,
            _ if deny_reason(v) == Some(DenyReason::Ceiling) => return permitted,
            _ => panic!("flooding during the fault window: {v:?}"),
        }
    }
    panic!("no ceiling after a million checks at one instant");
}

#[test]
fn direct_limiter_passes_through_for_one_window_then_enforces_on_the_reference() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = every_check(&fast, &reference);
    let lim = RateLimiter::builder(q("10/s"))
        .watchdog(dog.clone())
        .build();

    // Healthy: the burst, then a quota denial.
    for _ in 0..10 {
        assert!(lim.check().allowed().is_some());
    }
    assert_eq!(deny_reason(lim.check()), Some(DenyReason::Quota));

    // The fast clock stalls while real time goes on. The check that samples the stall was
    // still decided on the stalled clock.
    reference.advance(secs(2));
    assert_eq!(deny_reason(lim.check()), Some(DenyReason::Quota));
    assert_eq!(dog.last_fault(), Some(ClockFault::Stalled));
    assert!(dog.is_faulted() && dog.is_switched());
    let fault_at = reference.now();

    // Pass-through, with the shadow computed on the reference clock (2 s: the cell is full
    // again there, though the fast clock says 0).
    for _ in 0..10 {
        assert_eq!(passed(lim.check()), CLOCK_FAULT_ALLOW);
    }
    assert_eq!(passed(lim.check()), CLOCK_FAULT_DENY);

    // A flood far past 10× the quota meets the ceiling, and stays denied at this instant:
    // at most 10 × the burst passed at once.
    let at_once = 10 + 1 + flood_until_ceiling(|| lim.check());
    assert!((11..=10 * 10).contains(&at_once), "{at_once}");
    for _ in 0..1_000 {
        assert_eq!(deny_reason(lim.check()), Some(DenyReason::Ceiling));
    }

    // The fast clock is repaired: it runs at the reference's rate again, 2 s behind. Traffic
    // passes through until the window (10 s on the reference) is over.
    loop {
        fast.advance(secs(1));
        reference.advance(secs(1));
        let faulted = dog.is_faulted();
        let v = lim.check();
        if reference.now() < fault_at + secs(10) {
            assert!(faulted);
            assert_eq!(passed(v).map(|p| p.0), Some(PassReason::ClockFault));
        }
        if !faulted {
            assert!(passed(v).is_none(), "enforced after the window: {v:?}");
            break;
        }
    }
    assert!(
        reference.now() <= fault_at + secs(11),
        "{:?}",
        reference.now()
    );
    assert!(!dog.is_faulted() && dog.is_switched());

    // Enforcing again, on the reference clock: drain the cell.
    let retry = loop {
        match lim.check() {
            Verdict::Allow(_) => {}
            Verdict::Deny(d) => {
                assert_eq!(d.reason(), DenyReason::Quota);
                break d.retry_after();
            }
            other => panic!("enforcing: {other:?}"),
        }
    };
    assert!(retry > Duration::ZERO && retry <= ms(100), "{retry:?}");
    // Advancing only the fast clock changes nothing: the limiter no longer reads it.
    fast.advance(secs(5));
    let v = lim.check();
    assert_eq!(deny_reason(v), Some(DenyReason::Quota));
    assert_eq!(v.denied().unwrap().retry_after(), retry);
    // Advancing only the reference brings capacity back, exactly on time.
    reference.advance(retry - Duration::from_nanos(1));
    assert_eq!(deny_reason(lim.check()), Some(DenyReason::Quota));
    reference.advance(Duration::from_nanos(1));
    assert!(lim.check().allowed().is_some());
    assert_eq!(dog.faults(), 1);
}

#[test]
fn keyed_limiter_passes_through_for_one_window_then_enforces_on_the_reference() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = every_check(&fast, &reference);
    let lim: KeyedRateLimiter<u64> = KeyedRateLimiter::builder(q("10/s"))
        .watchdog(dog.clone())
        .build();

    for _ in 0..10 {
        assert!(lim.check_key(&1).allowed().is_some());
    }
    assert_eq!(deny_reason(lim.check_key(&1)), Some(DenyReason::Quota));

    reference.advance(secs(2));
    assert_eq!(deny_reason(lim.check_key(&1)), Some(DenyReason::Quota));
    assert_eq!(dog.last_fault(), Some(ClockFault::Stalled));
    let fault_at = reference.now();

    // A new key and an old one pass through, shadows computed on the reference clock.
    assert_eq!(passed(lim.check_key(&2)), CLOCK_FAULT_ALLOW);
    for _ in 0..10 {
        assert_eq!(passed(lim.check_key(&1)), CLOCK_FAULT_ALLOW);
    }
    assert_eq!(passed(lim.check_key(&1)), CLOCK_FAULT_DENY);

    // Key 7 floods far past 10× its quota: it meets the ceiling; the others are untouched.
    let at_once = flood_until_ceiling(|| lim.check_key(&7));
    assert!((11..=10 * 10).contains(&at_once), "{at_once}");
    assert_eq!(deny_reason(lim.check_key(&7)), Some(DenyReason::Ceiling));
    assert_eq!(passed(lim.check_key(&2)), CLOCK_FAULT_ALLOW);
    assert_eq!(passed(lim.check_key(&3)), CLOCK_FAULT_ALLOW);

    // The fast clock is repaired, 2 s behind: the window runs out on the reference.
    loop {
        fast.advance(secs(1));
        reference.advance(secs(1));
        let faulted = dog.is_faulted();
        let v = lim.check_key(&2);
        if reference.now() < fault_at + secs(10) {
            assert!(faulted);
            assert_eq!(passed(v).map(|p| p.0), Some(PassReason::ClockFault));
        }
        if !faulted {
            assert!(passed(v).is_none(), "enforced after the window: {v:?}");
            break;
        }
    }
    assert!(
        reference.now() <= fault_at + secs(11),
        "{:?}",
        reference.now()
    );

    // Enforcing on the reference: a fresh key gets its burst, then waits on the reference.
    for _ in 0..10 {
        assert!(lim.check_key(&4).allowed().is_some());
    }
    let v = lim.check_key(&4);
    assert_eq!(deny_reason(v), Some(DenyReason::Quota));
    let retry = v.denied().unwrap().retry_after();
    assert_eq!(retry, ms(100));
    fast.advance(secs(5));
    assert_eq!(deny_reason(lim.check_key(&4)), Some(DenyReason::Quota));
    reference.advance(retry);
    assert!(lim.check_key(&4).allowed().is_some());
    assert_eq!(deny_reason(lim.check_key(&4)), Some(DenyReason::Quota));
    assert_eq!(dog.faults(), 1);
}

#[test]
fn a_fast_clock_that_stays_stalled_costs_one_window_of_pass_through_only() {
    // The rule: "PassThrough(ClockFault) for one window, the limiter switches to the OS
    // clock …, then enforces again". The fast clock is never repaired here: once the
    // limiter reads the reference, the dead fast clock must not keep it passing through.
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = every_check(&fast, &reference);
    let lim = RateLimiter::builder(q("10/s"))
        .watchdog(dog.clone())
        .build();
    assert!(lim.check().is_permitted());
    reference.advance(secs(2));
    let _ = lim.check();
    assert_eq!(dog.last_fault(), Some(ClockFault::Stalled));
    let fault_at = reference.now();

    let mut passed_at = Vec::new();
    for _ in 0..30 {
        reference.advance(secs(1));
        let v = lim.check();
        if passed(v).is_some() {
            passed_at.push(reference.now() - fault_at);
        } else {
            // One check a second on a 10/s quota: always allowed when enforced.
            assert!(v.allowed().is_some(), "{v:?}");
        }
    }
    assert!(
        passed_at.iter().all(|&t| t <= secs(10)),
        "still passing through {:?} after the fault (faults seen: {}): {passed_at:?}",
        passed_at.last().unwrap(),
        dog.faults(),
    );
    // Capacity comes back on the reference alone.
    for _ in 0..9 {
        assert!(lim.check().allowed().is_some());
    }
    assert_eq!(deny_reason(lim.check()), Some(DenyReason::Quota));
    reference.advance(ms(100));
    assert!(lim.check().allowed().is_some());
}

#[test]
fn the_ceiling_admits_at_most_ten_times_the_quota() {
    // The ceiling is "factor × the quota (rate and burst)", 10 by default with a watchdog
    // alone: at one instant a full cell admits at most 10 × the burst, and over time at most
    // 10 × the rate.
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = every_check(&fast, &reference);
    let lim = RateLimiter::builder(q("10/s"))
        .watchdog(dog.clone())
        .build();
    let _ = lim.check();
    reference.advance(secs(2));
    let _ = lim.check();
    assert!(dog.is_faulted());

    // Sustained: 100 ms steps for 5 s on the reference, flooding at each step: at most
    // 10 × the burst at once plus 10 × the rate.
    let mut sustained = 0u64;
    for _ in 0..50 {
        reference.advance(ms(100));
        sustained += (0..1_000).filter(|_| lim.check().is_permitted()).count() as u64;
        assert!(dog.is_faulted());
    }
    assert!(
        sustained <= 10 * 10 + 10 * 10 * 5,
        "{sustained} permitted over 5 s at 10× 10/s"
    );

    // At one instant, starting from a full cell.
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = every_check(&fast, &reference);
    let lim = RateLimiter::builder(q("10/s"))
        .watchdog(dog.clone())
        .build();
    let _ = lim.check();
    reference.advance(secs(2));
    let _ = lim.check();
    assert!(dog.is_faulted());
    let at_once = (0..100_000).filter(|_| lim.check().is_permitted()).count();
    assert!(
        at_once <= 10 * 10,
        "{at_once} permitted at one instant: 10 × a burst of 10 is 100"
    );
}

#[test]
fn reset_goes_back_to_the_fast_clock() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = every_check(&fast, &reference);
    let lim = RateLimiter::builder(q("10/s"))
        .watchdog(dog.clone())
        .build();
    assert_eq!(dog.sample(), None);
    reference.advance(secs(2));
    assert_eq!(dog.sample(), Some(ClockFault::Stalled));
    // Flood during the fault window: the TAT runs ahead on the reference, up to the ceiling.
    while lim.check().is_permitted() {}
    assert!(dog.is_switched());

    dog.reset();
    assert!(!dog.is_switched() && !dog.is_faulted());
    assert_eq!(dog.faults(), 1, "the count of faults seen is kept");
    // The limiter reads the fast clock again (still 0 s): enforced, and the TAT left ahead on
    // the reference is clamped to one τ.
    let v = lim.check();
    assert_eq!(deny_reason(v), Some(DenyReason::Quota));
    assert!(v.denied().unwrap().retry_after() <= secs(1));
    // The reference no longer matters ...
    reference.advance(ms(500));
    assert_eq!(deny_reason(lim.check()), Some(DenyReason::Quota));
    // ... the fast clock does: one τ later the whole burst is back.
    fast.advance(secs(1));
    for _ in 0..10 {
        assert!(lim.check().allowed().is_some());
    }
    assert_eq!(deny_reason(lim.check()), Some(DenyReason::Quota));
    fast.advance(ms(100));
    assert!(lim.check().allowed().is_some());
    assert_eq!(dog.faults(), 1);
}

#[test]
fn a_watchdog_sampling_every_n_checks_samples_with_a_detector_attached_too() {
    // `Watchdog::new` samples every 1024 checks per thread. Each case runs on a thread of its
    // own, so the per-thread tick starts from zero.
    fn faults_after_4096_checks(direct: bool, detector: bool) -> u64 {
        thread::spawn(move || {
            let (fast, reference) = (ManualClock::new(), ManualClock::new());
            let dog = Watchdog::new(&fast, &reference);
            assert_eq!(dog.sample(), None);
            reference.advance(secs(2)); // the fast clock stalls
            let det = FaultDetector::builder().clock(&reference).build();
            if direct {
                let mut b = RateLimiter::builder(q("1000000/s")).watchdog(dog.clone());
                if detector {
                    b = b.detector(det);
                }
                let lim = b.build();
                for _ in 0..4096 {
                    let _ = lim.check();
                }
            } else {
                let mut b = KeyedRateLimiter::<u64>::builder(q("1000000/s")).watchdog(dog.clone());
                if detector {
                    b = b.detector(det);
                }
                let lim = b.build();
                for i in 0..4096u64 {
                    let _ = lim.check_key(&(i % 16));
                }
            }
            dog.faults()
        })
        .join()
        .unwrap()
    }
    let mut unsampled = Vec::new();
    for direct in [true, false] {
        for detector in [false, true] {
            if faults_after_4096_checks(direct, detector) == 0 {
                unsampled.push(format!("direct: {direct}, detector: {detector}"));
            }
        }
    }
    assert!(
        unsampled.is_empty(),
        "no sample (and so no fault seen) in 4096 checks: {unsampled:?}"
    );
}

#[test]
fn an_opt_in_sampler_thread_sees_a_stall_without_any_check() {
    let (fast, reference) = (ManualClock::new(), ManualClock::new());
    let dog = Watchdog::new(fast.clone(), reference.clone());
    let sampler = dog.spawn_sampler(Duration::from_millis(1));
    assert!(sampler.is_running());
    // Wait (bounded) for the thread's first sample, then stall the fast clock.
    let mut spins = 0u32;
    while dog.faults() == 0 && spins < 5_000 {
        reference.advance(Duration::from_secs(2));
        std::thread::park_timeout(Duration::from_millis(1));
        spins += 1;
    }
    assert!(dog.faults() > 0, "the sampler thread never sampled");
    assert!(dog.is_switched());
    drop(sampler);
}
