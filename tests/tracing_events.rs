//! The `tracing` feature: a subscriber captures the detector's trip and recovery, a clock
//! fault, a success-rate alert, reloads and rollout stages, with their fields — and no event
//! per check.
#![cfg(all(feature = "tracing", feature = "config", not(loom)))]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::limits::{Limits, LimitsHandle, Rollout};
use tollgate::safety::{Baseline, ClockFault, FaultDetector, HourSample, SuccessRate, Watchdog};
use tollgate::{Check, ManualClock, RateLimiter};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One captured event: its level, target and fields (the message as `message`).
#[derive(Clone, Debug)]
struct Captured {
    level: Level,
    target: String,
    fields: BTreeMap<String, String>,
}

impl Captured {
    fn f64(&self, name: &str) -> f64 {
        self.fields[name]
            .parse()
            .unwrap_or_else(|_| panic!("{name} in {self:?}"))
    }
}

/// A subscriber that keeps every event.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Captured {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            fields,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Capture {
    fn events(&self, target: &str) -> Vec<Captured> {
        let all = self.0.lock().unwrap();
        all.iter().filter(|e| e.target == target).cloned().collect()
    }

    fn all(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Incident 000 on a direct limiter: a clock that lags 45 s. The detector trips, then
/// recovers once the clock is fixed (the scenario of `tests/fault.rs`).
#[test]
fn a_trip_and_its_recovery_are_events_with_their_figures() {
    let capture = Capture::default();
    let checks = tracing::subscriber::with_default(capture.clone(), || {
        let real = ManualClock::new();
        let lim_clock = ManualClock::new();
        let hour = HourSample {
            breadth: 0.0,
            deny_ratio: 0.01,
            allowed_per_sec: 50.0,
        };
        let detector = FaultDetector::builder()
            .clock(real.clone())
            .baseline(Baseline::from_hours(0, std::iter::repeat_n(hour, 24)))
            .build();
        let lim = RateLimiter::builder("100/s".parse().unwrap())
            .clock(lim_clock.clone())
            .detector(detector.clone())
            .build();
        let mut checks = 0u64;
        let mut run = |ticks: u64, lagging: bool| {
            for _ in 0..ticks {
                for _ in 0..5 {
                    let _ = lim.check();
                    checks += 1;
                }
                real.advance(Duration::from_millis(100));
                if !lagging {
                    lim_clock.advance(Duration::from_millis(100));
                }
                detector.tick();
            }
        };
        run(1_200, false);
        for _ in 0..4 {
            run(450, true);
            lim_clock.set(real.now());
        }
        run(1_200, false);
        checks
    });
    let events = capture.events("tollgate::detector");
    let trip = events
        .iter()
        .find(|e| e.fields["event"] == "tripped")
        .expect("a trip event");
    assert_eq!(trip.level, Level::WARN);
    assert_eq!(trip.fields["kind"], "deny_anomaly");
    assert!(
        trip.f64("measure") > 0.2,
        "the deny ratio that tripped it: {trip:?}"
    );
    assert!((trip.f64("baseline") - 0.01).abs() < 1e-9);
    assert!(trip.f64("allowed_per_sec") < 50.0 / 5.0);
    assert!(trip.fields["samples"].parse::<u64>().unwrap() >= 100);
    assert_eq!(trip.f64("window_secs"), 60.0);
    let recovery = events
        .iter()
        .find(|e| e.fields["event"] == "recovered")
        .expect("a recovery event");
    assert_eq!(recovery.level, Level::INFO);
    assert!(recovery.f64("at_secs") > trip.f64("at_secs"));
    assert!(recovery.fields["message"].contains("enforcing again"));
    // Events, not a log of checks.
    assert!(
        capture.all() < 20,
        "{} events for {checks} checks",
        capture.all()
    );
}

#[test]
fn a_reload_and_a_refused_one_are_events_with_revision_and_diff() {
    let doc = |revision: u64, policies: &[(&str, &str)]| {
        let mut text = format!("schema = 1\nrevision = {revision}\n");
        for (name, quota) in policies {
            text += &format!(
                "[[policies]]\nname = \"{name}\"\nmatch = {{ route = \"/{name}/*\" }}\nquota = \"{quota}\"\n"
            );
        }
        Limits::from_toml(&text).unwrap()
    };
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), || {
        let handle = LimitsHandle::new(doc(41, &[("api", "10/s"), ("search", "5/s")]));
        for i in 0..1_000 {
            let _ = handle.check("t", "c", "/api/x", &format!("k{i}"), Check::cost(1));
        }
        let tighter = doc(50, &[("api", "10/min"), ("search", "5/s")]);
        assert!(
            handle.reload(tighter).is_err(),
            "60x tighter, unacknowledged"
        );
        handle
            .reload(doc(50, &[("api", "20/s"), ("new", "1/s")]))
            .unwrap();
    });
    let events = capture.events("tollgate::reload");
    assert_eq!(events.len(), 2, "{events:?}");
    let (refused, accepted) = (&events[0], &events[1]);
    assert_eq!(refused.level, Level::WARN);
    let revisions = |e: &Captured| {
        (
            e.fields["from_revision"].clone(),
            e.fields["revision"].clone(),
        )
    };
    assert_eq!(revisions(refused), ("41".into(), "50".into()));
    assert_eq!(refused.fields["errors"], "1");
    assert!(
        refused.fields["first"].contains("60× tighter"),
        "{refused:?}"
    );
    assert_eq!(accepted.level, Level::INFO);
    assert_eq!(revisions(accepted), ("41".into(), "50".into()));
    let counts = ["added", "removed", "changed"].map(|k| accepted.fields[k].as_str());
    assert_eq!(counts, ["1", "1", "1"]);
    assert!(
        accepted.fields["diff"].contains("api") && accepted.fields["diff"].contains("10/s → 20/s"),
        "{accepted:?}"
    );
    assert_eq!(capture.all(), 2, "nothing per check");
}

#[test]
fn a_clock_fault_is_an_error_event() {
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), || {
        let (fast, reference) = (ManualClock::new(), ManualClock::new());
        let dog = Watchdog::new(fast, reference.clone());
        assert_eq!(dog.sample(), None);
        reference.advance(Duration::from_secs(2));
        assert_eq!(dog.sample(), Some(ClockFault::Stalled));
    });
    let events = capture.events("tollgate::watchdog");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].level, Level::ERROR);
    assert_eq!(events[0].fields["fault"], "Stalled");
    assert_eq!(events[0].fields["fast_elapsed_ns"], "0");
    assert_eq!(events[0].fields["reference_elapsed_ns"], "2000000000");
}

#[test]
fn a_success_rate_alert_is_an_event_with_its_figures() {
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), || {
        let clock = ManualClock::new();
        let slo = SuccessRate::builder()
            .tiers(["paid"])
            .clock(clock.clone())
            .build()
            .unwrap();
        // Five minutes at 100 %, then a minute at 80 %.
        for second in 0..360 {
            for i in 0..10 {
                let status = if second >= 300 && i < 2 { 429 } else { 200 };
                slo.record("paid", status);
            }
            clock.advance(Duration::from_secs(1));
        }
        slo.tick();
    });
    let events = capture.events("tollgate::success_rate");
    let alert = events.first().expect("an alert");
    assert_eq!(alert.level, Level::WARN);
    assert_eq!(alert.fields["tier"], "paid");
    assert_eq!(alert.f64("reference"), 1.0);
    // Raised at the first evaluation past the 2-point threshold, with the figures it saw.
    let (current, drop_pp) = (alert.f64("current"), alert.f64("drop_pp"));
    assert!(current < 0.98 && drop_pp > 2.0, "{alert:?}");
    assert!(((1.0 - current) * 100.0 - drop_pp).abs() < 1e-9);
    assert!(alert.fields["current_requests"].parse::<u64>().unwrap() >= 500);
}

#[test]
fn rollout_stages_and_a_halt_are_events() {
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), || {
        let doc = |quota: &str, revision: u64| {
            Limits::from_toml(&format!(
                "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
            ))
            .unwrap()
        };
        let clock = ManualClock::new();
        let rollout = Rollout::new(doc("10/s", 1), doc("20/s", 2), clock.clone()).unwrap();
        assert!(rollout.promote());
        assert!(rollout.halt("looks wrong"));
    });
    let events = capture.events("tollgate::rollout");
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0].fields["basis_points"], "100");
    assert_eq!(events[1].fields["basis_points"], "1000");
    assert_eq!(events[1].fields["stage"], "1");
    let halt = &events[2];
    assert_eq!(halt.level, Level::WARN);
    assert_eq!(halt.fields["reason"], "looks wrong");
    assert_eq!(halt.fields["reverted"], "false");
    assert_eq!(
        (
            halt.fields["from_revision"].as_str(),
            halt.fields["to_revision"].as_str()
        ),
        ("1", "2")
    );
}

/// The Redis circuit breaker's transitions are events: a shared limiter pointed at a loopback
/// port nobody listens on fails its calls, and its breaker opens after 5 consecutive failures
/// — one WARN event, not one per failed check.
#[cfg(feature = "redis")]
#[test]
fn the_redis_breaker_opening_is_one_warn_event() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A port just bound and released: nothing listens there, so connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), || {
        let _guard = rt.enter();
        let lim = tollgate::redis::SharedRateLimiter::builder(
            "10/s".parse().unwrap(),
            &format!("redis://127.0.0.1:{port}/"),
        )
        .failure_policy(tollgate::redis::FailurePolicy::Open)
        .deadline(Duration::from_millis(200))
        .build()
        .unwrap();
        for _ in 0..20 {
            let v = rt.block_on(lim.check_key("k")).unwrap();
            assert!(v.is_permitted(), "Open: every check passes through");
        }
        assert!(lim.breaker_open());
    });
    let events = capture.events("tollgate::redis");
    let opened: Vec<_> = events
        .iter()
        .filter(|e| e.fields.get("event").map(String::as_str) == Some("breaker_opened"))
        .collect();
    assert_eq!(opened.len(), 1, "{events:?}");
    assert_eq!(opened[0].level, Level::WARN);
    assert_eq!(opened[0].fields["consecutive_failures"], "5");
    assert!(events.len() < 5, "no event per check: {events:?}");
}
