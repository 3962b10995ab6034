//! `SuccessRate` driven by a `ManualClock`: incident 001 replayed, no page on noise, drift or
//! thin traffic, one alert per episode, a panicking callback, many recording threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use tollgate::safety::{RequestOutcome, SloAlert, SloConfigError, SuccessRate, SuccessRateBuilder};
use tollgate::ManualClock;

/// One simulation step: 100 ms.
const STEP: Duration = Duration::from_millis(100);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn builder(clock: &ManualClock) -> SuccessRateBuilder {
    SuccessRate::builder()
        .tiers(["free", "paid", "enterprise"])
        .clock(clock.clone())
}

/// A tier's traffic: `per_second` requests per second, sent each 100 ms step, of which a
/// share fails with the given status. Requests and failures are spread evenly (error
/// diffusion), so runs are exact and repeatable.
struct Stream {
    tier: &'static str,
    per_step: f64,
    requests: f64,
    failures: f64,
}

impl Stream {
    fn new(tier: &'static str, per_second: u32) -> Self {
        Self {
            tier,
            per_step: f64::from(per_second) / 10.0,
            requests: 0.0,
            failures: 0.0,
        }
    }

    fn step(&mut self, slo: &SuccessRate, fail: f64, status: u16) {
        self.requests += self.per_step;
        let n = self.requests.floor();
        self.requests -= n;
        self.failures += fail * n;
        let failures = self.failures.floor();
        self.failures -= failures;
        for i in 0..n as u32 {
            slo.record(
                self.tier,
                if f64::from(i) < failures { status } else { 200 },
            );
        }
    }
}

/// Runs `streams` from the clock's reading until `until`, one step at a time; `fail(tier, t)`
/// gives each tier's failure share (as 429s) at `t` seconds. Returns every alert.
fn simulate(
    slo: &SuccessRate,
    clock: &ManualClock,
    streams: &mut [Stream],
    until: Duration,
    fail: impl Fn(&str, f64) -> f64,
) -> Vec<SloAlert> {
    let mut alerts = Vec::new();
    while clock.now() < until {
        let t = clock.now().as_secs_f64();
        for s in streams.iter_mut() {
            let share = fail(s.tier, t);
            s.step(slo, share, 429);
        }
        alerts.extend(slo.poll_alerts());
        clock.advance(STEP);
    }
    alerts
}

/// Incident 001: ten minutes at 99.9 % for "paid" and "free", then 14 % of paid requests get
/// a 429 from `change` on. Returns the alerts raised in the two minutes after.
fn replay_incident(change: Duration) -> Vec<SloAlert> {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    let mut streams = [Stream::new("paid", 100), Stream::new("free", 50)];
    let change_s = change.as_secs_f64();
    simulate(
        &slo,
        &clock,
        &mut streams,
        change + secs(120.0),
        |tier, t| {
            if tier == "paid" && t >= change_s {
                0.001 + 0.14
            } else {
                0.001
            }
        },
    )
}

#[test]
fn incident_001_replay_pages_within_90_seconds() {
    let change = secs(600.0 + 3.7);
    let alerts = replay_incident(change);
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    let alert = &alerts[0];
    assert_eq!(alert.tier(), "paid");
    let delay = alert.at() - change;
    println!("incident 001 replay: {alert}; detection delay {delay:?}");
    assert!(delay < secs(90.0), "detected after {delay:?}");
    assert!((alert.reference() - 0.999).abs() < 1e-9, "{alert:?}");
    assert!(alert.drop_pp() > 2.0);
    assert_eq!(alert.window(), Duration::from_secs(60));
}

#[test]
fn incident_001_detection_delay_at_every_offset_in_a_sub_bucket() {
    let mut worst = Duration::ZERO;
    for tenths in (0..100).step_by(7) {
        let change = secs(600.0 + f64::from(tenths) / 10.0);
        let alerts = replay_incident(change);
        assert_eq!(alerts.len(), 1, "change at {change:?}: {alerts:?}");
        assert_eq!(alerts[0].tier(), "paid");
        let delay = alerts[0].at() - change;
        println!("change at {change:?}: detected after {delay:?}");
        worst = worst.max(delay);
    }
    println!("worst detection delay: {worst:?}");
    assert!(worst < secs(90.0));
}

/// xorshift64*: deterministic noise without a dependency.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn no_alert_on_steady_noisy_traffic() {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // One hour, ~20 requests/s per tier, each failing at random with probability 1 % (a mix
    // of 429 and 503), in bursty steps of 0 to 4 requests.
    while clock.now() < secs(3600.0) {
        for tier in ["free", "paid", "enterprise"] {
            let n = (rng.unit() * 5.0) as u32;
            for _ in 0..n {
                let r = rng.unit();
                let status = match r {
                    r if r < 0.005 => 429,
                    r if r < 0.01 => 503,
                    _ => 200,
                };
                slo.record(tier, status);
            }
        }
        clock.advance(STEP);
    }
    slo.tick();
    assert_eq!(slo.poll_alerts(), []);
    let paid = &slo.snapshot()[1];
    assert!(paid.window_requests() >= 500, "{paid:?}");
}

/// The failure share rises `pp_per_min` percentage points per minute for 20 minutes after a
/// 10-minute steady start, then stays there for 10 minutes.
fn drift(pp_per_min: f64) -> Vec<SloAlert> {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    let mut streams = [Stream::new("paid", 100)];
    simulate(&slo, &clock, &mut streams, secs(2400.0), |_, t| {
        let minutes = ((t - 600.0) / 60.0).clamp(0.0, 20.0);
        0.001 + minutes * pp_per_min / 100.0
    })
}

#[test]
fn no_alert_on_a_slow_drift_below_the_threshold() {
    // The window's midpoint trails the reference's by 3 minutes: 0.5 pp/min is a 1.5 pp gap.
    assert_eq!(drift(0.5), []);
    // The same drift twice as fast (a 3 pp gap) does page: the test can see a drift.
    let fast = drift(1.0);
    assert_eq!(fast.len(), 1, "{fast:?}");
}

#[test]
fn no_alert_below_min_samples() {
    let run = |min_samples: u64| {
        let clock = ManualClock::new();
        let slo = builder(&clock).min_samples(min_samples).build().unwrap();
        // 2 requests/s: 120 per window, then half of them fail.
        let mut streams = [Stream::new("enterprise", 2)];
        simulate(&slo, &clock, &mut streams, secs(900.0), |_, t| {
            if t >= 600.0 {
                0.5
            } else {
                0.0
            }
        })
    };
    assert_eq!(run(500), []);
    assert_eq!(run(100).len(), 1);
}

#[test]
fn client_errors_neither_help_nor_hurt() {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    let (mut paid, mut not_found) = (Stream::new("paid", 100), Stream::new("paid", 100));
    // Ten minutes at 99 % success, then as many 404s again on top: no page, same rate.
    while clock.now() < secs(900.0) {
        paid.step(&slo, 0.01, 429);
        if clock.now() >= secs(600.0) {
            not_found.step(&slo, 1.0, 404);
        }
        assert_eq!(slo.poll_alerts(), []);
        clock.advance(STEP);
    }
    let paid = &slo.snapshot()[1];
    assert_eq!(paid.client_errors(), 300 * 100);
    assert_eq!(paid.success_rate(), Some(0.99), "{paid:?}");
}

#[test]
fn alerts_once_per_episode_and_rearms_after_recovery() {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    let mut streams = [Stream::new("paid", 100)];
    // Healthy, 10 % 429s for 10 minutes (longer than window + reference), healthy for 10,
    // then 10 % again.
    let fail = |_: &str, t: f64| {
        if (600.0..1200.0).contains(&t) || t >= 1800.0 {
            0.1
        } else {
            0.0
        }
    };
    let first = simulate(&slo, &clock, &mut streams, secs(1800.0), fail);
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].at() < secs(690.0));
    let second = simulate(&slo, &clock, &mut streams, secs(2400.0), fail);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].tier(), "paid");
    assert!(second[0].at() < secs(1890.0));
}

#[test]
fn a_panicking_callback_stops_nothing() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let slo = builder(&clock)
        .on_alert(move |alert| {
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!(
                    "deliberate panic in the test callback, for {}",
                    alert.tier()
                );
            }
        })
        .build()
        .unwrap();
    let mut streams = [Stream::new("paid", 100), Stream::new("free", 100)];
    let alerts = simulate(&slo, &clock, &mut streams, secs(1200.0), |tier, t| {
        match (tier, t) {
            ("paid", t) if t >= 600.0 => 0.2,
            ("free", t) if t >= 900.0 => 0.2,
            _ => 0.0,
        }
    });
    let tiers: Vec<&str> = alerts.iter().map(SloAlert::tier).collect();
    assert_eq!(tiers, ["paid", "free"]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(slo.callback_panics(), 1);
    // Every record was counted, including the one whose evaluation ran the panicking callback.
    let paid = &slo.snapshot()[1];
    assert_eq!(paid.successes() + paid.failures_429(), 1200 * 100);
}

#[test]
fn tick_evaluates_idle_periods() {
    let clock = ManualClock::new();
    let slo = builder(&clock).min_samples(100).build().unwrap();
    let mut streams = [Stream::new("paid", 100)];
    simulate(&slo, &clock, &mut streams, secs(600.0), |_, _| 0.0);
    // 5 seconds of 429s, then nothing: no record crosses the next boundary.
    simulate(&slo, &clock, &mut streams, secs(605.0), |_, _| 1.0);
    clock.set(secs(612.0));
    assert_eq!(slo.poll_alerts(), []);
    slo.tick();
    let alerts = slo.poll_alerts();
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].at(), secs(612.0));
    // Raised late, over the last complete window: [550 s, 610 s), not the last 60 s.
    assert_eq!(alerts[0].window_end(), secs(610.0));
    assert!(alerts[0]
        .to_string()
        .contains("over the 60s window ending at 610s"));
    slo.tick();
    assert_eq!(slo.poll_alerts(), []);
}

#[test]
fn unknown_tiers_go_to_other() {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    for tier in ["gold", "Paid", "", "paid ", "customer-8812"] {
        slo.record(tier, 200);
    }
    slo.record("paid", 200);
    let snapshot = slo.snapshot();
    let names: Vec<&str> = snapshot.iter().map(|t| t.tier()).collect();
    assert_eq!(
        names,
        ["free", "paid", "enterprise", SuccessRate::OTHER_TIER]
    );
    assert_eq!(snapshot[1].successes(), 1);
    assert_eq!(snapshot[3].successes(), 5);
}

#[test]
fn statuses_are_classified() {
    for (status, outcome) in [
        (100, RequestOutcome::Success),
        (200, RequestOutcome::Success),
        (204, RequestOutcome::Success),
        (304, RequestOutcome::Success),
        (399, RequestOutcome::Success),
        (400, RequestOutcome::ClientError),
        (404, RequestOutcome::ClientError),
        (428, RequestOutcome::ClientError),
        (429, RequestOutcome::RateLimited),
        (430, RequestOutcome::ClientError),
        (499, RequestOutcome::ClientError),
        (500, RequestOutcome::ServerError),
        (503, RequestOutcome::ServerError),
        (599, RequestOutcome::ServerError),
        // Not an HTTP status: not a useful response either.
        (0, RequestOutcome::ServerError),
        (99, RequestOutcome::ServerError),
        (600, RequestOutcome::ServerError),
        (u16::MAX, RequestOutcome::ServerError),
    ] {
        assert_eq!(
            RequestOutcome::from_status(status),
            outcome,
            "status {status}"
        );
    }

    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    for status in [200, 201, 302, 429, 429, 500, 0, 404, 400] {
        slo.record("free", status);
    }
    slo.record_outcome("free", RequestOutcome::RateLimited);
    clock.advance(secs(60.0));
    let free = &slo.snapshot()[0];
    assert_eq!(free.successes(), 3);
    assert_eq!(free.failures_429(), 3);
    assert_eq!(free.failures_5xx(), 2);
    assert_eq!(free.client_errors(), 2);
    // 3 successes out of 8 successes and failures: client errors are left out.
    assert_eq!(free.window_requests(), 8);
    assert_eq!(free.success_rate(), Some(3.0 / 8.0));
    assert_eq!(slo.snapshot()[1].success_rate(), None);
}

#[test]
fn snapshot_rate_covers_the_last_complete_window() {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    slo.record("paid", 200);
    slo.record("paid", 503);
    // Still in progress: not in the window yet.
    assert_eq!(slo.snapshot()[1].success_rate(), None);
    clock.advance(secs(10.0));
    assert_eq!(slo.snapshot()[1].success_rate(), Some(0.5));
    clock.advance(secs(50.0));
    assert_eq!(slo.snapshot()[1].success_rate(), Some(0.5));
    clock.advance(secs(10.0));
    assert_eq!(slo.snapshot()[1].success_rate(), None);
    // The counts stay cumulative.
    assert_eq!(slo.snapshot()[1].successes(), 1);
}

#[test]
fn concurrent_records_are_all_counted() {
    const THREADS: usize = 4;
    const PER_THREAD: u64 = 20_000;
    const STATUSES: [u16; 5] = [200, 429, 503, 404, 200];
    const TIERS: [&str; 4] = ["free", "paid", "enterprise", "unknown"];
    let clock = ManualClock::new();
    let slo = builder(&clock).min_samples(1).build().unwrap();
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for id in 0..THREADS {
            let (slo, clock, barrier) = (&slo, &clock, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..PER_THREAD {
                    let tier = TIERS[(i as usize + id) % TIERS.len()];
                    slo.record(tier, STATUSES[i as usize % STATUSES.len()]);
                    // Move time on now and then, so evaluations race the records.
                    if id == 0 && i % 1_000 == 0 {
                        clock.advance(secs(1.0));
                    }
                }
            });
        }
    });
    // Each thread walks the same (tier, status) cycle: 20 combinations, 1000 times each.
    let each = THREADS as u64 * PER_THREAD / 20;
    for tier in slo.snapshot() {
        assert_eq!(tier.successes(), 2 * each, "{tier:?}");
        assert_eq!(tier.failures_429(), each, "{tier:?}");
        assert_eq!(tier.failures_5xx(), each, "{tier:?}");
        assert_eq!(tier.client_errors(), each, "{tier:?}");
    }
}

#[test]
fn bad_configuration_is_a_typed_error() {
    let clock = ManualClock::new();
    let err = |b: SuccessRateBuilder| b.build().unwrap_err();
    let none: [&str; 0] = [];
    assert_eq!(
        err(SuccessRate::builder()),
        SloConfigError::NoTiers,
        "tiers are required"
    );
    assert_eq!(
        err(SuccessRate::builder().tiers(none)),
        SloConfigError::NoTiers
    );
    assert_eq!(
        err(builder(&clock).tiers(["paid", ""])),
        SloConfigError::EmptyTier
    );
    assert_eq!(
        err(builder(&clock).tiers(["other"])),
        SloConfigError::ReservedTier
    );
    let dup = err(builder(&clock).tiers(["paid", "free", "paid"]));
    assert_eq!(dup.to_string(), r#"tier "paid" is declared twice"#);
    let names: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
    assert_eq!(
        err(builder(&clock).tiers(&names)),
        SloConfigError::TooManyTiers(65)
    );
    assert!(builder(&clock).tiers(&names[..64]).build().is_ok());

    for pp in [0.0, -1.0, 100.01, 0.004, f64::NAN, f64::INFINITY] {
        let e = err(builder(&clock).drop_threshold(pp));
        assert!(matches!(e, SloConfigError::Threshold(_)), "{pp}: {e:?}");
        assert!(e
            .to_string()
            .starts_with("drop threshold must be between 0.01 and 100"));
    }
    for pp in [0.01, 0.5, 2.0, 100.0] {
        assert!(builder(&clock).drop_threshold(pp).build().is_ok(), "{pp}");
    }

    let zero = err(builder(&clock).window(Duration::ZERO));
    assert_eq!(zero, SloConfigError::ZeroWindow);
    assert_eq!(zero.to_string(), "window must be longer than zero");
    assert_eq!(
        err(builder(&clock).reference(Duration::ZERO)),
        SloConfigError::ZeroReference
    );
    let long = err(builder(&clock).window(secs(6.0)).reference(secs(86_400.0)));
    assert!(matches!(
        long,
        SloConfigError::TooManyBuckets {
            buckets: 86_400,
            ..
        }
    ));
    // Extreme but valid durations build, and recording at the end of time does not panic.
    let slo = builder(&ManualClock::at(Duration::MAX))
        .window(Duration::MAX)
        .reference(Duration::MAX)
        .build()
        .unwrap();
    slo.record("paid", 200);
    slo.tick();
    let tiny = builder(&clock)
        .window(Duration::from_nanos(1))
        .reference(Duration::from_nanos(5))
        .build()
        .unwrap();
    assert_eq!(tiny.window(), Duration::from_nanos(6));
}

#[test]
fn is_send_sync_and_debug() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SuccessRate>();
    assert_send_sync::<SloAlert>();
    let slo = builder(&ManualClock::new()).build().unwrap();
    let debug = format!("{slo:?}");
    assert!(
        debug.contains(r#"tiers: ["free", "paid", "enterprise", "other"]"#),
        "{debug}"
    );
    assert!(debug.contains("threshold_pp: 2.0"), "{debug}");
}

/// A former bug: `examples/success_rate.rs` printed 96.18 % and 86.92 % for the paid tier, both
/// said to be over the last minute; they were over two different windows. Alerts and
/// snapshots now say which window their rate is over, and it is that window's rate.
#[test]
fn alerts_and_snapshots_say_which_window_their_rate_is_over() {
    let clock = ManualClock::new();
    let slo = builder(&clock).build().unwrap();
    // The example's run: every 10 ms a paid request, 1 in 1000 a 503; from 603.7 s on, 14 in
    // 100 are 429s.
    let push = Duration::from_millis(603_700);
    let (mut request, mut log) = (0u64, Vec::new());
    while clock.now() < push + secs(60.0) {
        request += 1;
        let background = if request % 1000 == 0 { 503 } else { 200 };
        let status = if clock.now() >= push && request % 100 < 14 {
            429
        } else {
            background
        };
        slo.record("paid", status);
        log.push((clock.now(), status == 200));
        clock.advance(Duration::from_millis(10));
    }
    // The success rate over [from, to), from the log.
    let rate = |from: f64, to: f64| {
        let inside: Vec<bool> = log
            .iter()
            .filter(|(at, _)| (secs(from)..secs(to)).contains(at))
            .map(|&(_, ok)| ok)
            .collect();
        inside.iter().filter(|&&ok| ok).count() as f64 / inside.len() as f64
    };
    let alerts = slo.poll_alerts();
    assert_eq!(alerts.len(), 1);
    let alert = &alerts[0];
    assert_eq!((alert.at(), alert.window_end()), (secs(620.0), secs(620.0)));
    assert_eq!(alert.current(), rate(560.0, 620.0));
    assert_eq!(
        alert.to_string(),
        r#"tier "paid": success rate 96.18 % over the 60s window ending at 620s, down 3.72 pp from 99.90 % before it"#
    );
    let paid = &slo.snapshot()[1];
    assert_eq!(paid.window_end(), secs(660.0));
    assert_eq!(paid.success_rate(), Some(rate(600.0, 660.0)));
}
