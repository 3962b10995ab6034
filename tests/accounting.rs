//! Accounting: with a fault detector attached, every
//! check is counted exactly once, by outcome and reason, under any number of threads; counts
//! restart per config revision; operator overrides are visible in the verdicts and the counts;
//! a panicking event callback never stops verdicts. `ManualClock`s throughout: nothing sleeps.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use tollgate::safety::{AlertKind, Baseline, DetectorMode, FaultDetector, FaultEvent, HourSample};
use tollgate::{
    DenyReason, KeyedRateLimiter, ManualClock, PassReason, Quota, RateLimiter, Shadow, Stats,
    Verdict,
};

const THREADS: usize = 8;

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Checks per thread: 20 000 in release, fewer in debug.
fn per_thread() -> u64 {
    if cfg!(debug_assertions) {
        4_000
    } else {
        20_000
    }
}

/// What a caller saw, tallied the way [`Stats`] counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    allowed: u64,
    denied_quota: u64,
    denied_key_table_full: u64,
    denied_clock_overflow: u64,
    denied_ceiling: u64,
    passed_deny_anomaly: u64,
    passed_clock_fault: u64,
    passed_forced: u64,
    passed_other: u64,
    shadow_denied: u64,
}

impl Tally {
    fn add(&mut self, v: Verdict) {
        match v {
            Verdict::Allow(_) => self.allowed += 1,
            Verdict::Deny(d) => match d.reason() {
                DenyReason::Quota => self.denied_quota += 1,
                DenyReason::KeyTableFull => self.denied_key_table_full += 1,
                DenyReason::ClockOverflow => self.denied_clock_overflow += 1,
                DenyReason::Ceiling => self.denied_ceiling += 1,
                other => panic!("unknown deny reason {other:?}"),
            },
            Verdict::PassThrough(p) => {
                match p.reason() {
                    PassReason::DenyAnomaly => self.passed_deny_anomaly += 1,
                    PassReason::ClockFault => self.passed_clock_fault += 1,
                    PassReason::Forced => self.passed_forced += 1,
                    _ => self.passed_other += 1,
                }
                if p.shadow() == Shadow::Deny {
                    self.shadow_denied += 1;
                }
            }
            other => panic!("unknown verdict {other:?}"),
        }
    }

    fn merge(mut self, o: Tally) -> Tally {
        self.allowed += o.allowed;
        self.denied_quota += o.denied_quota;
        self.denied_key_table_full += o.denied_key_table_full;
        self.denied_clock_overflow += o.denied_clock_overflow;
        self.denied_ceiling += o.denied_ceiling;
        self.passed_deny_anomaly += o.passed_deny_anomaly;
        self.passed_clock_fault += o.passed_clock_fault;
        self.passed_forced += o.passed_forced;
        self.passed_other += o.passed_other;
        self.shadow_denied += o.shadow_denied;
        self
    }

    fn of(s: &Stats) -> Tally {
        Tally {
            allowed: s.allowed,
            denied_quota: s.denied_quota,
            denied_key_table_full: s.denied_key_table_full,
            denied_clock_overflow: s.denied_clock_overflow,
            denied_ceiling: s.denied_ceiling,
            passed_deny_anomaly: s.passed_deny_anomaly,
            passed_clock_fault: s.passed_clock_fault,
            passed_forced: s.passed_forced,
            passed_other: s.passed_other + s.passed_shadow,
            shadow_denied: s.shadow_denied,
        }
    }

    fn total(&self) -> u64 {
        self.allowed
            + self.denied_quota
            + self.denied_key_table_full
            + self.denied_clock_overflow
            + self.denied_ceiling
            + self.passed_deny_anomaly
            + self.passed_clock_fault
            + self.passed_forced
            + self.passed_other
    }
}

/// 24 hours of normal operation: a baseline that exists.
fn baseline(rev: u64, deny_ratio: f64, allowed_per_sec: f64, breadth: f64) -> Baseline {
    let normal = HourSample {
        breadth,
        deny_ratio,
        allowed_per_sec,
    };
    Baseline::from_hours(rev, std::iter::repeat_n(normal, 24))
}

/// Runs `THREADS` workers; worker 0 also plays the operator, toggling a forced pass-through
/// every 1000 of its checks. Each worker advances the limiter clock by 1 ms and the detector
/// clock by 1 s every 64 of its checks (a lagging limiter clock: the detector may trip).
/// `check(thread, i)` runs one check and returns the verdict if it was counted.
fn hammer(
    detector: &FaultDetector,
    limiter_clock: &ManualClock,
    detector_clock: &ManualClock,
    check: impl Fn(usize, u64) -> Option<Verdict> + Sync,
) -> (Tally, u64) {
    let barrier = Barrier::new(THREADS);
    let checks = per_thread();
    thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (barrier, check) = (&barrier, &check);
                s.spawn(move || {
                    let mut tally = Tally::default();
                    let mut counted = 0u64;
                    barrier.wait();
                    for i in 0..checks {
                        if i % 64 == 63 {
                            limiter_clock.advance(Duration::from_millis(1));
                            detector_clock.advance(secs(1));
                        }
                        if t == 0 && i % 1000 == 999 {
                            if (i / 1000) % 2 == 0 {
                                detector.force_pass_through(PassReason::Forced, secs(3600));
                            } else {
                                detector.clear_override();
                            }
                        }
                        if let Some(v) = check(t, i) {
                            tally.add(v);
                            counted += 1;
                        }
                    }
                    (tally, counted)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((Tally::default(), 0), |(a, n), (b, m)| (a.merge(b), n + m))
    })
}

#[test]
fn direct_counts_equal_the_verdicts_the_threads_received() {
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder()
        .clock(&dclock)
        .baseline(baseline(0, 0.01, 50.0, 0.0))
        .build();
    let lim = RateLimiter::builder(q("50/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();
    let uncounted = AtomicU64::new(0);
    let (tally, counted) = hammer(&detector, &lclock, &dclock, |t, i| match i % 10 {
        // Cost 0: reports capacity, counts nothing.
        3 => {
            let v = lim.check_n(0).unwrap();
            assert!(!matches!(v, Verdict::PassThrough(_)), "{v:?}");
            uncounted.fetch_add(1, Ordering::Relaxed);
            None
        }
        // A cost above the burst is an error, not a verdict: not counted either.
        7 if t % 2 == 0 => {
            assert!(lim.check_n(51).is_err());
            uncounted.fetch_add(1, Ordering::Relaxed);
            None
        }
        5 => Some(lim.check_n(2).unwrap()),
        _ => Some(lim.check()),
    });
    let stats = detector.stats();
    assert_eq!(Tally::of(&stats), tally);
    assert_eq!(lim.stats(), stats);
    assert_eq!(stats.total(), counted);
    assert_eq!(tally.total(), counted);
    assert_eq!(
        counted + uncounted.load(Ordering::Relaxed),
        THREADS as u64 * per_thread()
    );
    // The run is a real mix.
    assert!(tally.allowed > 0 && tally.denied_quota > 0, "{tally:?}");
    assert!(
        tally.passed_forced > 0 && tally.shadow_denied > 0,
        "{tally:?}"
    );
}

#[test]
fn keyed_counts_equal_the_verdicts_the_threads_received() {
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder()
        .clock(&dclock)
        .baseline(baseline(0, 0.01, 50.0, 0.01))
        .build();
    // 32 keys tracked at most: the others share the overflow cell (KeyTableFull). Few enough
    // that the table stays full even while pass-throughs let keys go idle (a shadow denial
    // writes nothing, as an enforcing denial writes nothing).
    let lim: KeyedRateLimiter<u64> = KeyedRateLimiter::builder(q("5/s"))
        .clock(&lclock)
        .max_keys(32)
        .detector(detector.clone())
        .build();
    let uncounted = AtomicU64::new(0);
    let (tally, counted) = hammer(&detector, &lclock, &dclock, |t, i| {
        // Each thread has 40 keys of its own and shares 16 with the others.
        let key = if i % 4 == 0 {
            i % 16
        } else {
            1_000 + t as u64 * 40 + i % 40
        };
        match i % 10 {
            3 => {
                let _ = lim.check_key_n(&key, 0).unwrap();
                uncounted.fetch_add(1, Ordering::Relaxed);
                None
            }
            5 => Some(lim.check_key_n(&key, 2).unwrap()),
            _ => Some(lim.check_key(&key)),
        }
    });
    let stats = detector.stats();
    assert_eq!(Tally::of(&stats), tally);
    assert_eq!(lim.stats(), stats);
    assert_eq!(stats.total(), counted);
    assert_eq!(
        counted + uncounted.load(Ordering::Relaxed),
        THREADS as u64 * per_thread()
    );
    assert!(tally.allowed > 0 && tally.denied_quota > 0, "{tally:?}");
    assert!(tally.denied_key_table_full > 0, "{tally:?}");
    assert!(tally.passed_forced > 0, "{tally:?}");
}

#[test]
fn check_n_zero_is_not_counted() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(&clock).build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&clock)
        .detector(detector.clone())
        .build();
    for _ in 0..5 {
        assert_eq!(
            lim.check_n(0).unwrap().allowed().map(|a| a.remaining()),
            Some(10)
        );
    }
    assert_eq!(detector.stats().total(), 0);
    let keyed: KeyedRateLimiter<u64> = KeyedRateLimiter::builder(q("10/s"))
        .clock(&clock)
        .detector(FaultDetector::builder().clock(&clock).build())
        .build();
    let _ = keyed.check_key_n(&1, 0).unwrap();
    let _ = keyed.check_key(&1);
    let _ = keyed.check_key_n(&1, 0).unwrap();
    assert_eq!(keyed.stats().total(), 1);
}

#[test]
fn counts_restart_per_revision() {
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder().clock(&dclock).revision(1).build();
    let lim = RateLimiter::builder(q("5/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();
    let mut first = Tally::default();
    for _ in 0..7 {
        first.add(lim.check());
    }
    assert_eq!((first.allowed, first.denied_quota), (5, 2));
    assert_eq!(Tally::of(&detector.stats()), first);
    assert_eq!(detector.state().revision, 1);

    detector.set_revision(2);
    assert_eq!(detector.state().revision, 2);
    assert_eq!(detector.stats().total(), 0);
    assert_eq!(lim.stats().total(), 0);
    let mut second = Tally::default();
    for _ in 0..3 {
        second.add(lim.check());
    }
    assert_eq!(second.denied_quota, 3);
    assert_eq!(Tally::of(&detector.stats()), second);

    let by_rev = detector.stats_by_revision();
    let by_rev: Vec<(u64, Tally)> = by_rev.iter().map(|(r, s)| (*r, Tally::of(s))).collect();
    assert_eq!(by_rev, vec![(1, first), (2, second)]);

    detector.set_revision(3);
    lclock.advance(secs(1));
    let mut third = Tally::default();
    third.add(lim.check());
    let revs: Vec<u64> = detector
        .stats_by_revision()
        .iter()
        .map(|(r, _)| *r)
        .collect();
    assert_eq!(revs, vec![1, 2, 3]);
    assert_eq!(Tally::of(&detector.stats_by_revision()[1].1), second);
    assert_eq!(Tally::of(&detector.stats()), third);
}

#[test]
fn forced_pass_through_is_counted_and_ends_after_its_duration() {
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder().clock(&dclock).build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();

    detector.force_pass_through(PassReason::Forced, secs(30));
    let st = detector.state();
    assert!(st.overridden);
    assert_eq!(
        st.mode,
        DetectorMode::PassingThrough {
            reason: PassReason::Forced,
            until: secs(30)
        }
    );
    let mut tally = Tally::default();
    for i in 0..20 {
        let v = lim.check();
        let Verdict::PassThrough(p) = v else {
            panic!("check {i}: {v:?}")
        };
        assert_eq!(p.reason(), PassReason::Forced);
        let shadow = if i < 10 { Shadow::Allow } else { Shadow::Deny };
        assert_eq!(p.shadow(), shadow, "check {i}");
        tally.add(v);
    }
    let stats = detector.stats();
    assert_eq!((stats.passed_forced, stats.shadow_denied), (20, 10));
    assert_eq!(Tally::of(&stats), tally);

    // Half-way: still forced.
    dclock.advance(secs(15));
    detector.tick();
    assert!(matches!(lim.check(), Verdict::PassThrough(_)));
    // Once the duration has passed on the detector's clock, enforcement resumes.
    dclock.advance(secs(15));
    detector.tick();
    assert_eq!(
        lim.check().denied().map(|d| d.reason()),
        Some(DenyReason::Quota)
    );
    let st = detector.state();
    assert!(!st.overridden);
    assert_eq!(st.mode, DetectorMode::Enforcing);
    assert_eq!(detector.stats().passed_forced, 21);
    assert_eq!(detector.stats().denied_quota, 1);
}

#[test]
fn a_forced_pass_through_ends_on_time_whenever_the_last_evaluation_ran() {
    // The evaluation runs once per sub-bucket (10 s); an override for 25 s must still end
    // at 25 s, not at the next sub-bucket close (30 s).
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder().clock(&dclock).build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();
    for _ in 0..10 {
        assert!(lim.check().allowed().is_some());
    }
    detector.force_pass_through(PassReason::Forced, secs(25));
    dclock.advance(secs(20));
    detector.tick(); // an evaluation at 20 s: the next one is due at 30 s
    assert!(matches!(lim.check(), Verdict::PassThrough(_)));
    dclock.advance(secs(5));
    detector.tick();
    let v = lim.check();
    assert_eq!(
        v.denied().map(|d| d.reason()),
        Some(DenyReason::Quota),
        "25 s after a forced pass-through of 25 s: {v:?}, {:?}",
        detector.state().mode
    );
}

#[test]
fn force_enforce_and_clear_override() {
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder().clock(&dclock).build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();
    for _ in 0..10 {
        assert!(lim.check().allowed().is_some());
    }
    detector.force_pass_through(PassReason::Forced, secs(3600));
    assert!(matches!(lim.check(), Verdict::PassThrough(_)));
    detector.force_enforce();
    assert!(detector.state().overridden);
    assert_eq!(detector.state().mode, DetectorMode::Enforcing);
    assert_eq!(
        lim.check().denied().map(|d| d.reason()),
        Some(DenyReason::Quota)
    );
    detector.clear_override();
    assert!(!detector.state().overridden);
    assert_eq!(
        lim.check().denied().map(|d| d.reason()),
        Some(DenyReason::Quota)
    );
    let s = detector.stats();
    assert_eq!((s.allowed, s.passed_forced, s.denied_quota), (10, 1, 2));
}

/// A lagging limiter clock under a detector with a baseline: 200 checks per 10 s of detector
/// time, then an evaluation.
fn drive_deny_anomaly(lim: &RateLimiter, detector: &FaultDetector, dclock: &ManualClock) {
    for _ in 0..3 {
        dclock.advance(secs(10));
        for _ in 0..200 {
            let _ = lim.check();
        }
        detector.tick();
    }
}

#[test]
fn force_enforce_overrides_a_trip() {
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder()
        .clock(&dclock)
        .baseline(baseline(0, 0.01, 10.0, 0.0))
        .build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();
    drive_deny_anomaly(&lim, &detector, &dclock);
    assert!(
        matches!(
            detector.state().mode,
            DetectorMode::PassingThrough {
                reason: PassReason::DenyAnomaly,
                ..
            }
        ),
        "{:?}",
        detector.state()
    );
    // The flood met the ceiling at the frozen instant; ten seconds later on the limiter's
    // clock the cell is full again, and the verdicts pass through.
    lclock.advance(secs(10));
    let v = lim.check();
    assert!(
        matches!(v, Verdict::PassThrough(p) if p.reason() == PassReason::DenyAnomaly),
        "{v:?} {:?}",
        detector.stats()
    );
    detector.force_enforce();
    for _ in 0..9 {
        assert!(lim.check().allowed().is_some());
    }
    assert_eq!(
        lim.check().denied().map(|d| d.reason()),
        Some(DenyReason::Quota)
    );
    // Later evaluations do not undo the override.
    dclock.advance(secs(10));
    for _ in 0..200 {
        assert!(!matches!(lim.check(), Verdict::PassThrough(_)));
    }
    detector.tick();
    assert_eq!(detector.state().mode, DetectorMode::Enforcing);
    assert!(!matches!(lim.check(), Verdict::PassThrough(_)));
    detector.clear_override();
    assert!(!detector.state().overridden);
}

#[test]
fn a_panicking_event_callback_never_stops_verdicts() {
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let events = Arc::new(AtomicU64::new(0));
    let cold_start = Arc::new(AtomicBool::new(false));
    let (e, c) = (Arc::clone(&events), Arc::clone(&cold_start));
    // No baseline: an anomaly raises a ColdStart alert (and trips nothing).
    let detector = FaultDetector::builder()
        .clock(&dclock)
        .on_event(|event| panic!("a buggy callback on {event:?}"))
        .on_event(move |event| {
            e.fetch_add(1, Ordering::Relaxed);
            if matches!(event, FaultEvent::Alert(AlertKind::ColdStart, _)) {
                c.store(true, Ordering::Relaxed);
            }
        })
        .build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();
    let mut tally = Tally::default();
    // No tick(): the evaluation (and the panic) runs on one of these checks.
    for _ in 0..6 {
        dclock.advance(secs(10));
        for _ in 0..200 {
            tally.add(lim.check());
        }
    }
    assert!(
        detector.state().callback_panics > 0,
        "{:?}",
        detector.state()
    );
    assert!(cold_start.load(Ordering::Relaxed), "a ColdStart alert");
    assert_eq!(
        detector.state().callback_panics,
        events.load(Ordering::Relaxed),
        "every event reached both callbacks"
    );
    // Verdicts went on, enforced, and all were counted.
    assert_eq!((tally.allowed, tally.denied_quota), (10, 1190));
    assert_eq!(Tally::of(&detector.stats()), tally);
    assert_eq!(detector.state().mode, DetectorMode::Enforcing);
    assert!(lim.check().denied().is_some());
}

#[test]
fn evaluations_racing_checks_never_panic() {
    // Every check is a pass-through whose shadow is a denial, and the detector's clock moves
    // so fast that the threads evaluate all the time: the evaluator reads the striped
    // counters while they move, so a snapshot may hold a check's shadow-denial count but not
    // yet its pass-through count. No check may panic on that.
    let (lclock, dclock) = (ManualClock::new(), ManualClock::new());
    let detector = FaultDetector::builder()
        .clock(&dclock)
        .ceiling(None)
        .build();
    let lim = RateLimiter::builder(q("10/s"))
        .clock(&lclock)
        .detector(detector.clone())
        .build();
    for _ in 0..10 {
        assert!(lim.check().allowed().is_some());
    }
    detector.force_pass_through(PassReason::Forced, secs(1 << 40));
    let checks = 4 * per_thread();
    let tallies: Vec<Tally> = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut tally = Tally::default();
                    for i in 0..checks {
                        if i % 32 == 0 {
                            dclock.advance(secs(10));
                        }
                        tally.add(lim.check());
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let tally = tallies.into_iter().fold(Tally::default(), Tally::merge);
    assert_eq!(tally.passed_forced, THREADS as u64 * checks);
    assert_eq!(tally.shadow_denied, THREADS as u64 * checks);
    assert_eq!(
        Tally::of(&detector.stats()).passed_forced,
        tally.passed_forced
    );
}
