//! Fault-detector scenarios, simulated on manual clocks: the detector keeps real
//! time on its own clock, the limiter reads a clock that can lag. Baselines are imported, so
//! no test has to simulate a day to get one.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::safety::{
    AlertKind, Baseline, DetectorMode, FaultDetector, FaultDetectorBuilder, FaultEvent, HourSample,
};
use tollgate::{
    DenyReason, KeyedRateLimiter, ManualClock, PassReason, Quota, RateLimiter, Verdict,
};

const TICK: Duration = Duration::from_millis(100);

fn q(s: &str) -> Quota {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn baseline(breadth: f64, deny_ratio: f64, allowed_per_sec: f64) -> Baseline {
    let hour = HourSample {
        breadth,
        deny_ratio,
        allowed_per_sec,
    };
    Baseline::from_hours(0, std::iter::repeat_n(hour, 24))
}

type Events = Arc<Mutex<Vec<(Duration, FaultEvent)>>>;

/// Real time, a limiter clock that may lag, a detector, and the events it raised.
struct World {
    real: ManualClock,
    lim_clock: ManualClock,
    lagging: bool,
    detector: FaultDetector,
    events: Events,
    checks: u64,
    passed: u64,
    denied: u64,
}

impl World {
    fn new(build: impl FnOnce(FaultDetectorBuilder) -> FaultDetectorBuilder) -> Self {
        let real = ManualClock::new();
        let events: Events = Arc::default();
        let sink = Arc::clone(&events);
        let clock = real.clone();
        let builder = FaultDetector::builder()
            .clock(real.clone())
            .on_event(move |e| sink.lock().unwrap().push((clock.now(), *e)));
        Self {
            lim_clock: ManualClock::new(),
            lagging: false,
            detector: build(builder).build(),
            events,
            real,
            checks: 0,
            passed: 0,
            denied: 0,
        }
    }

    /// Moves time on by one tick (the limiter's clock too, unless it lags), and evaluates.
    fn tick(&mut self) {
        self.real.advance(TICK);
        if !self.lagging {
            self.lim_clock.advance(TICK);
        }
        self.detector.tick();
    }

    /// Tallies a verdict; returns whether it permitted the request.
    fn saw(&mut self, v: Verdict) -> bool {
        self.checks += 1;
        match v {
            Verdict::PassThrough(_) => self.passed += 1,
            Verdict::Deny(_) => self.denied += 1,
            _ => {}
        }
        v.is_permitted()
    }

    /// The first event matching `f` at or after `since`, as the delay from `since`.
    fn first(&self, since: Duration, f: impl Fn(&FaultEvent) -> bool) -> Option<Duration> {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .find(|(at, e)| *at >= since && f(e))
            .map(|(at, _)| *at - since)
    }

    fn count(&self, f: impl Fn(&FaultEvent) -> bool) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, e)| f(e))
            .count()
    }
}

fn tripped(e: &FaultEvent) -> bool {
    matches!(e, FaultEvent::Tripped(_))
}

fn recovered(e: &FaultEvent) -> bool {
    matches!(e, FaultEvent::Recovered(_))
}

fn alert(kind: AlertKind) -> impl Fn(&FaultEvent) -> bool {
    move |e| matches!(e, FaultEvent::Alert(k, _) if *k == kind)
}

const KEYS: u64 = 1_000;

/// 1,000 keys on 10/s each, each sending 2 requests a second, spread over the ticks.
fn keyed_world(
    build: impl FnOnce(FaultDetectorBuilder) -> FaultDetectorBuilder,
) -> (World, KeyedRateLimiter<u64>) {
    let w = World::new(build);
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(w.lim_clock.clone())
        .detector(w.detector.clone())
        .build();
    (w, lim)
}

/// One tick of well-behaved traffic: each key sends 2 requests a second.
fn polite_tick(w: &mut World, lim: &KeyedRateLimiter<u64>, tick: u64) {
    for key in (0..KEYS).filter(|k| k % 5 == tick % 5) {
        let v = lim.check_key(&key);
        let _ = w.saw(v);
    }
    w.tick();
}

fn run(w: &mut World, lim: &KeyedRateLimiter<u64>, ticks: u64, clock: &mut u64) {
    for _ in 0..ticks {
        polite_tick(w, lim, *clock);
        *clock += 1;
    }
}

#[test]
fn a_lagging_clock_trips_within_a_window_and_recovers_within_one_after_the_fix() {
    let (mut w, lim) = keyed_world(|b| b.baseline(baseline(0.0, 0.0, 2_000.0)));
    let mut t = 0;
    run(&mut w, &lim, 1_800, &mut t); // three minutes of normal traffic
    assert_eq!(w.count(tripped), 0, "no trip on normal traffic");
    assert_eq!(w.passed + w.denied, 0);

    // Incident 000: the limiter's clock stops for 45 s while real time goes on.
    let fault = w.real.now();
    w.lagging = true;
    run(&mut w, &lim, 450, &mut t);
    let to_trip = w
        .first(fault, tripped)
        .expect("the lagging clock must trip the detector");
    assert!(
        to_trip <= Duration::from_secs(60),
        "tripped after {to_trip:?}"
    );
    assert!(matches!(
        w.detector.state().mode,
        DetectorMode::PassingThrough {
            reason: PassReason::DenyAnomaly,
            ..
        }
    ));
    assert!(w.passed > 0, "verdicts pass through while tripped");

    // The clock is fixed: it jumps to real time and runs with it again.
    let fixed = w.real.now();
    w.lim_clock.set(w.real.now());
    w.lagging = false;
    run(&mut w, &lim, 1_200, &mut t);
    let to_recover = w.first(fixed, recovered).expect("recovers after the fix");
    assert!(
        to_recover <= Duration::from_secs(70),
        "recovered {to_recover:?} after the fix"
    );
    assert_eq!(w.detector.state().mode, DetectorMode::Enforcing);
    assert_eq!(
        w.detector.stats().total(),
        w.checks,
        "every request got a counted verdict"
    );
    println!("keyed lagging clock: tripped {to_trip:?} after the fault, recovered {to_recover:?} after the fix");
}

#[test]
fn a_sixty_fold_tightening_trips_within_a_window() {
    let (mut w, lim) = keyed_world(|b| b.baseline(baseline(0.0, 0.0, 2_000.0)));
    let mut t = 0;
    run(&mut w, &lim, 1_200, &mut t);
    // Incident 001: "10/s" read as "10/min".
    let change = w.real.now();
    lim.set_quota(q("10/min"));
    run(&mut w, &lim, 900, &mut t);
    let to_trip = w.first(change, tripped).expect("a 60x tightening trips");
    assert!(
        to_trip <= Duration::from_secs(60),
        "tripped after {to_trip:?}"
    );
    println!("60x tightening: tripped {to_trip:?} after the change");
}

#[test]
fn one_percent_of_keys_flooding_never_trips() {
    let (mut w, lim) = keyed_world(|b| b.baseline(baseline(0.0, 0.0, 2_000.0)));
    let mut t = 0;
    run(&mut w, &lim, 1_200, &mut t);
    let (mut flood, mut flood_denied) = (0u64, 0u64);
    for _ in 0..3_000 {
        // Ten keys (1 %) each send 1,000 requests a second: 100x their limit.
        for key in 0..10u64 {
            for _ in 0..100 {
                let v = lim.check_key(&key);
                flood += 1;
                flood_denied += u64::from(!w.saw(v));
            }
        }
        polite_tick(&mut w, &lim, t);
        t += 1;
    }
    let all = w.detector.stats();
    assert!(
        all.denied() * 2 > all.total(),
        "the request deny ratio is over 50 %: {all:?}"
    );
    assert!(flood_denied * 100 > flood * 95);
    assert_eq!(
        w.count(tripped),
        0,
        "a flood from 1 % of keys must never trip"
    );
    assert_eq!(w.passed, 0);
}

#[test]
fn a_key_cardinality_flood_never_trips_and_alerts_on_the_overflow_cell() {
    let w0 = World::new(|b| b.baseline(baseline(0.0, 0.0, 2_000.0)));
    let mut w = w0;
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(w.lim_clock.clone())
        .max_keys(2_000)
        .detector(w.detector.clone())
        .build();
    let mut t = 0;
    run(&mut w, &lim, 600, &mut t);
    let mut next = 1_000_000u64;
    for _ in 0..1_200 {
        // 500 new keys a tick, each using its whole burst: 5,000 live keys against room for
        // 2,000.
        for _ in 0..500 {
            for _ in 0..10 {
                let v = lim.check_key(&next);
                let _ = w.saw(v);
            }
            next += 1;
        }
        polite_tick(&mut w, &lim, t);
        t += 1;
    }
    assert!(
        w.detector.stats().denied_key_table_full > 0,
        "the table filled"
    );
    assert_eq!(
        w.count(tripped),
        0,
        "a key-cardinality flood must never trip"
    );
    assert_eq!(
        w.count(alert(AlertKind::OverflowCell)),
        1,
        "one overflow alert per episode"
    );
}

#[test]
fn a_ramp_of_legitimate_denials_alerts_and_barely_moves_the_baseline() {
    let b0 = baseline(0.01, 0.01, 2_000.0);
    let start = b0.breadth().unwrap();
    let w0 = World::new(|b| b.baseline(b0).min_panel_keys(20));
    let mut w = w0;
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(w.lim_clock.clone())
        .detector(w.detector.clone())
        .build();
    let keys = 100u64;
    let seconds = 6 * 3_600u64;
    for s in 0..seconds {
        // The share of keys sending over their limit grows from 1 % to 50 %.
        let heavy = keys * (100 + 4_900 * s / seconds) / 10_000;
        for key in 0..keys {
            let n = if key < heavy { 25 } else { 2 };
            for _ in 0..n {
                let v = lim.check_key(&key);
                let _ = w.saw(v);
            }
        }
        for _ in 0..10 {
            w.tick();
        }
    }
    assert_eq!(w.count(tripped), 0, "a slow ramp is not a fault");
    assert!(w.count(alert(AlertKind::Drift)) >= 1, "but it is reported");
    let now = w.detector.baseline().breadth().unwrap();
    assert!(
        (now - start).abs() <= start * 0.1,
        "baseline {start} -> {now}"
    );
}

/// A direct limiter serving 50 requests a second on a 100/s quota.
fn direct_world(
    build: impl FnOnce(FaultDetectorBuilder) -> FaultDetectorBuilder,
) -> (World, RateLimiter) {
    let w = World::new(|b| build(b.baseline(baseline(0.0, 0.01, 50.0))));
    let lim = RateLimiter::builder(q("100/s"))
        .clock(w.lim_clock.clone())
        .detector(w.detector.clone())
        .build();
    (w, lim)
}

fn direct_ticks(w: &mut World, lim: &RateLimiter, ticks: u64, per_tick: u64) {
    for _ in 0..ticks {
        for _ in 0..per_tick {
            let v = lim.check();
            let _ = w.saw(v);
        }
        w.tick();
    }
}

#[test]
fn a_direct_limiter_trips_on_a_lagging_clock_and_recovers() {
    let (mut w, lim) = direct_world(|b| b);
    direct_ticks(&mut w, &lim, 1_200, 5);
    // Incident 000 as it ran: a cached clock refreshed only every 45 s.
    let fault = w.real.now();
    w.lagging = true;
    for _ in 0..4 {
        direct_ticks(&mut w, &lim, 450, 5);
        w.lim_clock.set(w.real.now());
    }
    let to_trip = w.first(fault, tripped).expect("trips");
    assert!(
        to_trip <= Duration::from_secs(70),
        "tripped after {to_trip:?}"
    );
    let fixed = w.real.now();
    w.lim_clock.set(w.real.now());
    w.lagging = false;
    direct_ticks(&mut w, &lim, 1_200, 5);
    let to_recover = w.first(fixed, recovered).expect("recovers");
    assert!(
        to_recover <= Duration::from_secs(70),
        "recovered after {to_recover:?}"
    );
    println!("direct lagging clock: tripped {to_trip:?} after the fault, recovered {to_recover:?} after the fix");
}

#[test]
fn a_single_client_flooding_a_direct_limiter_never_trips() {
    let (mut w, lim) = direct_world(|b| b);
    direct_ticks(&mut w, &lim, 1_200, 5);
    // One client at 10,000 requests a second: the limiter still admits its 100/s.
    direct_ticks(&mut w, &lim, 3_000, 1_000);
    let s = w.detector.stats();
    assert!(s.denied_quota * 10 > s.total() * 9, "{s:?}");
    assert_eq!(
        w.count(tripped),
        0,
        "a healthy limiter under a flood must never trip"
    );
}

#[test]
fn without_a_baseline_it_only_alerts() {
    let w0 = World::new(|b| b);
    let mut w = w0;
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s"))
        .clock(w.lim_clock.clone())
        .detector(w.detector.clone())
        .build();
    let mut t = 0;
    run(&mut w, &lim, 1_200, &mut t);
    w.lagging = true;
    run(&mut w, &lim, 900, &mut t);
    assert_eq!(w.count(tripped), 0, "cold start: no pass-through");
    assert_eq!(w.count(alert(AlertKind::ColdStart)), 1);
    assert_eq!(w.passed, 0);
}

#[test]
fn a_persisting_anomaly_is_extended_then_exhausted_then_cools_down() {
    let (mut w, lim) = keyed_world(|b| {
        b.baseline(baseline(0.0, 0.0, 2_000.0))
            .pass_through_for(Duration::from_secs(120))
            .max_pass_through(Duration::from_secs(300))
            .cooldown(Duration::from_secs(600))
    });
    let mut t = 0;
    run(&mut w, &lim, 1_200, &mut t);
    let fault = w.real.now();
    w.lagging = true; // and never fixed
    run(&mut w, &lim, 6_000, &mut t);
    let trip = w.first(fault, tripped).expect("trips");
    let end = w
        .first(fault, recovered)
        .expect("the pass-through is bounded");
    let passing = end - trip;
    assert!(
        passing >= Duration::from_secs(300) && passing <= Duration::from_secs(310),
        "passed through for {passing:?}"
    );
    assert_eq!(w.count(alert(AlertKind::PassThroughExhausted)), 1);
    assert_eq!(w.count(tripped), 1, "at most one trip per cool-down");
    assert_eq!(
        w.count(alert(AlertKind::CoolDown)),
        1,
        "the anomaly within the cool-down alerts"
    );
    assert_eq!(w.detector.state().mode, DetectorMode::Enforcing);
}

#[test]
fn the_ceiling_still_applies_during_pass_through() {
    let (mut w, lim) = keyed_world(|b| b.baseline(baseline(0.0, 0.0, 2_000.0)));
    let mut t = 0;
    run(&mut w, &lim, 1_200, &mut t);
    w.lagging = true;
    run(&mut w, &lim, 450, &mut t);
    assert!(w.count(tripped) == 1);
    // Frozen clock, pass-through: the ceiling is 10x the quota (burst 100 against 10).
    let key = 7u64;
    let mut passed = 0;
    let verdict = loop {
        match lim.check_key(&key) {
            Verdict::PassThrough(_) => passed += 1,
            other => break other,
        }
        assert!(passed < 10_000, "the ceiling never applied");
    };
    match verdict {
        Verdict::Deny(d) => assert_eq!(d.reason(), DenyReason::Ceiling),
        other => panic!("expected a ceiling denial, got {other:?}"),
    }
    assert!(
        passed <= 100,
        "{passed} passed under a ceiling of 10x the burst"
    );
}

#[test]
fn force_enforce_keeps_enforcing_through_an_anomaly() {
    let (mut w, lim) = keyed_world(|b| b.baseline(baseline(0.0, 0.0, 2_000.0)));
    let mut t = 0;
    run(&mut w, &lim, 1_200, &mut t);
    w.detector.force_enforce();
    w.lagging = true;
    run(&mut w, &lim, 900, &mut t);
    assert_eq!(w.passed, 0, "forced enforcement never passes through");
    assert_eq!(w.count(tripped), 0);
    w.detector.clear_override();
    run(&mut w, &lim, 300, &mut t);
    assert!(
        w.passed > 0,
        "after clearing the override the detector decides again"
    );
}

#[test]
fn detector_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<FaultDetector>();
    send_sync::<tollgate::safety::Watchdog>();
    send_sync::<tollgate::Stats>();
    send_sync::<Baseline>();
    send_sync::<FaultEvent>();
}

#[cfg(feature = "serde")]
#[test]
fn a_baseline_survives_a_restart_through_serde() {
    let b = baseline(0.01, 0.02, 80.0);
    let json = serde_json::to_string(&b).unwrap();
    let back: Baseline = serde_json::from_str(&json).unwrap();
    assert_eq!(back, b);
    let restarted = FaultDetector::builder().with_baseline(back).build();
    assert_eq!(restarted.baseline().breadth(), Some(0.01));
}

#[cfg(feature = "serde")]
#[test]
fn an_imported_baseline_is_checked_like_a_learned_one() {
    let bad = r#"{"revision":1,"hours":[{"breadth":-1.0,"deny_ratio":0.0,"allowed_per_sec":1.0}]}"#;
    assert!(serde_json::from_str::<Baseline>(bad).is_err());
    let hour = r#"{"breadth":0.5,"deny_ratio":0.0,"allowed_per_sec":1.0}"#;
    let long = format!(
        r#"{{"revision":1,"hours":[{}]}}"#,
        vec![hour; 200].join(",")
    );
    let b: Baseline = serde_json::from_str(&long).unwrap();
    assert_eq!(
        b.hours().len(),
        tollgate::safety::Baseline::HOURS,
        "trimmed to 7 days"
    );
}

/// On the fast clock with only a detector attached, tracked keys are checked inline: their
/// quota denials must reach the breadth panel as denials (they did not, so a keyed limiter on
/// the default clock could never trip on its tracked keys).
#[test]
fn inline_checks_of_tracked_keys_feed_breadth_with_their_denials() {
    let real = ManualClock::new();
    let detector = FaultDetector::builder()
        .clock(real.clone())
        .baseline(baseline(0.01, 0.01, 100.0))
        .build();
    // The default (fast) clock; 1 per hour, so each key's second check is denied.
    let lim: KeyedRateLimiter<u64> = KeyedRateLimiter::builder(q("1/h"))
        .detector(detector.clone())
        .build();
    for key in 0..200u64 {
        assert!(lim.check_key(&key).is_permitted());
    }
    real.advance(Duration::from_secs(10));
    detector.tick();
    for key in 0..200u64 {
        for _ in 0..3 {
            let _ = lim.check_key(&key);
        }
    }
    real.advance(Duration::from_secs(10));
    detector.tick();
    let state = detector.state();
    assert!(
        state.last.measure > 0.9,
        "every sampled key is mostly denied: {:?}",
        state.last
    );
}
