//! The `metrics` feature: what a scrape renders equals what clients were told, series exist
//! from the first scrape, a flood of keys adds no series, and counters never go down.
#![cfg(all(feature = "metrics", feature = "config"))]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tollgate::limits::{Limits, LimitsHandle};
use tollgate::metrics::{MetricsError, MetricsRegistry};
use tollgate::safety::{FaultDetector, SuccessRate};
use tollgate::shaping::RetryBudget;
use tollgate::{Check, KeyedRateLimiter, ManualClock, PassReason, RateLimiter, Stats, Verdict};

/// `name{labels}` → value, parsed from Prometheus exposition text.
type Scrape = BTreeMap<(String, BTreeMap<String, String>), f64>;

fn parse(text: &str) -> Scrape {
    let mut out = Scrape::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample line");
        let value: f64 = value.parse().expect("a number");
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                let labels = body
                    .split(',')
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("k=v");
                        (k.to_owned(), v.trim_matches('"').to_owned())
                    })
                    .collect();
                (name.to_owned(), labels)
            }
            None => (series.to_owned(), BTreeMap::new()),
        };
        out.insert((name, labels), value);
    }
    out
}

fn get(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let key = (
        name.to_owned(),
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    *s.get(&key)
        .unwrap_or_else(|| panic!("no series {name}{labels:?}"))
}

fn scrape(recorder: &PrometheusRecorder, registry: &MetricsRegistry) -> (String, Scrape) {
    metrics::with_local_recorder(recorder, || registry.publish());
    let text = recorder.handle().render();
    let parsed = parse(&text);
    (text, parsed)
}

/// What clients were told, by `(outcome, reason)` label values.
#[derive(Default)]
struct Seen(BTreeMap<(&'static str, &'static str), u64>);

impl Seen {
    fn saw(&mut self, v: Verdict) {
        let key = match v {
            Verdict::Allow(_) => ("allow", "none"),
            Verdict::Deny(d) => ("deny", snake(&format!("{:?}", d.reason()))),
            Verdict::PassThrough(p) => ("pass_through", snake(&format!("{:?}", p.reason()))),
            other => panic!("unknown verdict {other:?}"),
        };
        *self.0.entry(key).or_default() += 1;
    }

    /// Asserts every check series of `(limiter, policy)` equals what was seen (0 if never).
    fn assert_scraped(&self, s: &Scrape, limiter: &str, policy: &str) {
        let mut series = 0;
        for ((name, labels), value) in s {
            if name != "tollgate_checks_total"
                || labels["limiter"] != limiter
                || labels["policy"] != policy
            {
                continue;
            }
            series += 1;
            let key = (labels["outcome"].as_str(), labels["reason"].as_str());
            let seen = self
                .0
                .iter()
                .find(|((o, r), _)| (*o, *r) == key)
                .map_or(0, |(_, n)| *n);
            assert_eq!(*value, seen as f64, "{limiter}/{policy} {key:?}");
        }
        assert_eq!(series, 11, "every outcome and reason of {limiter}/{policy}");
    }
}

fn snake(debug: &str) -> &'static str {
    match debug {
        "Quota" => "quota",
        "KeyTableFull" => "key_table_full",
        "ClockOverflow" => "clock_overflow",
        "Ceiling" => "ceiling",
        "RetryBudget" => "retry_budget",
        "DenyAnomaly" => "deny_anomaly",
        "ClockFault" => "clock_fault",
        "Forced" => "forced",
        "BackendUnavailable" => "backend_unavailable",
        "Shadow" => "shadow",
        other => panic!("unknown reason {other}"),
    }
}

fn handle(clock: &ManualClock, detector: &FaultDetector) -> Arc<LimitsHandle> {
    let limits = Limits::from_path("examples/limits/valid.toml").expect("the example document");
    Arc::new(
        LimitsHandle::builder(limits)
            .clock(clock.clone())
            .detector(detector.clone())
            .build(),
    )
}

#[test]
fn a_scrape_right_after_traffic_renders_every_verdict_the_clients_saw() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let handle = handle(&clock, &detector);
    let login = Arc::new(
        RateLimiter::builder("2/s".parse().unwrap())
            .clock(clock.clone())
            .build(),
    );
    let registry = MetricsRegistry::new();
    registry.register_limits("gateway", &handle).unwrap();
    registry.register_limiter("login", &login).unwrap();

    let (mut free, mut paid_search, mut login_seen) =
        (Seen::default(), Seen::default(), Seen::default());
    let check = |tier, category, route, key| {
        handle
            .check(tier, category, route, key, Check::cost(1))
            .unwrap()
            .verdict()
    };
    // "free": 10/s, burst 20. Alice spends her burst and is denied; Bob stays well within.
    for _ in 0..25 {
        free.saw(check("free", "other", "/v1/items", "alice"));
    }
    for _ in 0..3 {
        free.saw(check("free", "other", "/v1/items", "bob"));
    }
    // "paid-search" is a shadow policy (50/s): every verdict is a pass-through.
    for _ in 0..60 {
        paid_search.saw(check("paid", "search", "/v1/search", "carol"));
    }
    // An operator forces pass-through on the detector the enforcing policies share.
    detector.force_pass_through(PassReason::Forced, Duration::from_secs(60));
    for _ in 0..4 {
        free.saw(check("free", "other", "/v1/items", "alice"));
    }
    for _ in 0..5 {
        login_seen.saw(login.check());
    }
    // 60× tighter and unacknowledged: refused, the document in force keeps serving.
    assert!(handle
        .reload(Limits::from_path("examples/limits/tightened.toml").unwrap())
        .is_err());

    let recorder = PrometheusBuilder::new().build_recorder();
    let (text, s) = scrape(&recorder, &registry);
    free.assert_scraped(&s, "gateway", "free");
    paid_search.assert_scraped(&s, "gateway", "paid-search");
    login_seen.assert_scraped(&s, "login", "");
    // The client saw allows, denials and pass-throughs of both kinds.
    assert!(free.0[&("deny", "quota")] > 0 && free.0[&("pass_through", "forced")] == 4);
    assert!(paid_search.0[&("pass_through", "shadow")] == 60);
    let shadow_denied = get(
        &s,
        "tollgate_shadow_denied_total",
        &[("limiter", "gateway"), ("policy", "paid-search")],
    );
    assert_eq!(shadow_denied, 10.0, "60 checks on a 50-burst shadow policy");
    assert_eq!(
        get(
            &s,
            "tollgate_live_keys",
            &[("limiter", "gateway"), ("policy", "free")]
        ),
        2.0
    );
    assert_eq!(
        get(
            &s,
            "tollgate_detector_mode",
            &[("limiter", "gateway"), ("mode", "forced")]
        ),
        1.0
    );
    assert_eq!(
        get(
            &s,
            "tollgate_detector_mode",
            &[("limiter", "gateway"), ("mode", "enforcing")]
        ),
        0.0
    );
    let reloads = |result| {
        get(
            &s,
            "tollgate_reloads_total",
            &[("limiter", "gateway"), ("result", result)],
        )
    };
    assert_eq!((reloads("accepted"), reloads("refused")), (0.0, 1.0));
    // The excerpt for the closing note.
    let excerpt: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.contains(r#"policy="free""#)
                || l.contains("detector_mode")
                || l.contains("reloads")
                || l.starts_with("# HELP tollgate_checks")
        })
        .collect();
    println!("--- /metrics excerpt ---\n{}", excerpt.join("\n"));
}

#[test]
fn every_series_exists_at_zero_from_the_first_scrape() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let handle = handle(&clock, &detector);
    let slo = Arc::new(
        SuccessRate::builder()
            .tiers(["free", "paid"])
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let registry = MetricsRegistry::new();
    registry.register_limits("gateway", &handle).unwrap();
    registry.register_success_rate("customers", &slo).unwrap();
    let recorder = PrometheusBuilder::new().build_recorder();
    let (_, s) = scrape(&recorder, &registry);
    let policies = handle.limits().policies().len();
    let count = |name: &str| s.keys().filter(|(n, _)| n == name).count();
    assert_eq!(count("tollgate_checks_total"), 11 * policies);
    assert_eq!(count("tollgate_retries_total"), 2 * policies);
    assert_eq!(count("tollgate_live_keys"), policies);
    assert!(s
        .iter()
        .filter(|((n, _), _)| n.ends_with("_total"))
        .all(|(_, v)| *v == 0.0));
    assert_eq!(
        count("tollgate_responses_total"),
        4 * 3,
        "free, paid and other"
    );
    assert_eq!(count("tollgate_detector_mode"), 3);
    assert_eq!(
        get(&s, "tollgate_limits_revision", &[("limiter", "gateway")]),
        41.0
    );
}

/// Every `(name, labels)` the recorder holds.
fn series(recorder: &DebuggingRecorder, registry: &MetricsRegistry) -> BTreeSet<String> {
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(recorder, || registry.publish());
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, ..)| format!("{:?}", key.key()))
        .collect()
}

#[test]
fn a_flood_of_100_000_distinct_keys_adds_no_series() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let handle = handle(&clock, &detector);
    let keyed = Arc::new(
        KeyedRateLimiter::<String>::builder("1/s".parse().unwrap())
            .clock(clock.clone())
            .max_keys(50_000)
            .build(),
    );
    let registry = MetricsRegistry::new();
    registry.register_limits("gateway", &handle).unwrap();
    registry.register_keyed("per-ip", &keyed).unwrap();
    let recorder = DebuggingRecorder::new();
    let before = series(&recorder, &registry);
    for i in 0..100_000u32 {
        let key = format!("attacker-{i}");
        let _ = keyed.check_key(&key);
        let _ = handle
            .check("free", "search", "/v1/search", &key, Check::cost(1))
            .unwrap();
        let _ = handle
            .check(&key, &key, &key, &key, Check::cost(1))
            .unwrap();
    }
    let after = series(&recorder, &registry);
    assert_eq!(before, after, "no series added by keys");
    assert!(
        after.iter().all(|s| !s.contains("attacker")),
        "no key in any label"
    );
    // The flood is counted, under the fixed labels.
    let snapshot = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || registry.publish());
    let total: u64 = snapshot
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| {
            k.key().name() == "tollgate_checks_total"
                && k.key().labels().any(|l| l.value() == "per-ip")
        })
        .map(|(.., v)| match v {
            DebugValue::Counter(n) => n,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(total, 100_000);
    assert_eq!(keyed.len(), 50_000);
}

#[test]
fn limiters_sharing_a_detector_are_counted_apart_and_the_detector_sums_them() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let build = |q: &str| {
        Arc::new(
            RateLimiter::builder(q.parse().unwrap())
                .clock(clock.clone())
                .detector(detector.clone())
                .build(),
        )
    };
    let (a, b) = (build("3/s"), build("1/s"));
    let registry = MetricsRegistry::new();
    registry.register_limiter("a", &a).unwrap();
    registry.register_limiter("b", &b).unwrap();
    let (mut seen_a, mut seen_b) = (Seen::default(), Seen::default());
    for _ in 0..5 {
        seen_a.saw(a.check());
        seen_b.saw(b.check());
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    let (_, s) = scrape(&recorder, &registry);
    seen_a.assert_scraped(&s, "a", "");
    seen_b.assert_scraped(&s, "b", "");
    let stats: Stats = detector.stats();
    assert_eq!((stats.allowed, stats.denied_quota), (4, 6));
    // A dropped limiter leaves the registry; the detector keeps what it counted.
    drop(b);
    registry.publish();
    assert_eq!(registry.len(), 1);
    assert_eq!(detector.stats().total(), 10);
}

#[test]
fn counters_never_go_down_when_a_reload_gives_a_policy_a_fresh_limiter() {
    let doc = |revision: u64, budget: &str| {
        Limits::from_toml(&format!(
            "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"2/s\"\n{budget}"
        ))
        .unwrap()
    };
    let clock = ManualClock::new();
    let handle = Arc::new(
        LimitsHandle::builder(doc(1, ""))
            .clock(clock.clone())
            .build(),
    );
    let registry = MetricsRegistry::new();
    registry.register_limits("gw", &handle).unwrap();
    let recorder = PrometheusBuilder::new().build_recorder();
    let check = |attempt| {
        handle
            .check("t", "c", "/api/x", "k", Check::cost(1).attempt(attempt))
            .unwrap()
    };
    for _ in 0..3 {
        let _ = check(0);
    }
    let (_, s1) = scrape(&recorder, &registry);
    let before = get(
        &s1,
        "tollgate_checks_total",
        &[
            ("limiter", "gw"),
            ("policy", "api"),
            ("outcome", "deny"),
            ("reason", "quota"),
        ],
    );
    assert_eq!(before, 1.0);
    let old = handle.limiter("api").unwrap();
    // A retry budget is fixed when a limiter is built: the policy gets a fresh one.
    handle
        .reload(doc(
            2,
            "retry_budget = { ratio = 0.5, period = \"10s\", floor = \"1/s\" }",
        ))
        .unwrap();
    assert!(!Arc::ptr_eq(&old, &handle.limiter("api").unwrap()));
    for _ in 0..3 {
        let _ = check(0);
    }
    let _ = check(1);
    let (_, s2) = scrape(&recorder, &registry);
    let after = get(
        &s2,
        "tollgate_checks_total",
        &[
            ("limiter", "gw"),
            ("policy", "api"),
            ("outcome", "deny"),
            ("reason", "quota"),
        ],
    );
    // The old limiter's denial carried; the fresh one (a full burst of 2) denied the third
    // original and the retry.
    assert_eq!(after, 3.0);
    let allowed = get(
        &s2,
        "tollgate_checks_total",
        &[
            ("limiter", "gw"),
            ("policy", "api"),
            ("outcome", "allow"),
            ("reason", "none"),
        ],
    );
    assert_eq!(allowed, 4.0);
    let retries: f64 = ["true", "false"]
        .iter()
        .map(|a| {
            get(
                &s2,
                "tollgate_retries_total",
                &[("limiter", "gw"), ("policy", "api"), ("admitted", a)],
            )
        })
        .sum();
    assert_eq!(retries, 1.0);
    assert_eq!(
        get(
            &s2,
            "tollgate_reloads_total",
            &[("limiter", "gw"), ("result", "accepted")]
        ),
        1.0
    );
}

#[test]
fn retries_are_counted_by_whether_they_were_admitted() {
    let clock = ManualClock::new();
    let lim = Arc::new(
        KeyedRateLimiter::<u64>::builder("2/s".parse().unwrap())
            .clock(clock.clone())
            .retry_budget(RetryBudget::new())
            .build(),
    );
    let bare = Arc::new(
        RateLimiter::builder("1/s".parse().unwrap())
            .clock(clock.clone())
            .build(),
    );
    let registry = MetricsRegistry::new();
    registry.register_keyed("k", &lim).unwrap();
    registry.register_limiter("d", &bare).unwrap();
    let mut admitted = 0;
    for i in 0..4 {
        admitted += u32::from(
            lim.check_key_with(&7, Check::cost(1).attempt(i))
                .unwrap()
                .is_permitted(),
        );
    }
    let _ = bare.check_with(Check::cost(1).attempt(1)).unwrap();
    let _ = bare.check_with(Check::cost(1).attempt(2)).unwrap();
    let recorder = PrometheusBuilder::new().build_recorder();
    let (_, s) = scrape(&recorder, &registry);
    let r = |l: &str, a: &str| {
        get(
            &s,
            "tollgate_retries_total",
            &[("limiter", l), ("policy", ""), ("admitted", a)],
        )
    };
    assert_eq!(r("k", "true") + r("k", "false"), 3.0);
    assert_eq!(
        r("k", "true"),
        f64::from(admitted) - 1.0,
        "the original was admitted too"
    );
    assert_eq!((r("d", "true"), r("d", "false")), (1.0, 1.0));
    assert_eq!(lim.stats().retries_admitted, r("k", "true") as u64);
}

#[test]
fn names_are_checked() {
    let registry = MetricsRegistry::new();
    let lim = Arc::new(RateLimiter::new("1/s".parse().unwrap()));
    for bad in ["", "a b", "quote\"", "é", &"x".repeat(65)] {
        assert!(
            matches!(
                registry.register_limiter(bad, &lim),
                Err(MetricsError::InvalidName { .. })
            ),
            "{bad:?}"
        );
    }
    registry
        .register_limiter("api.v1:login/x-y_z", &lim)
        .unwrap();
    let err = registry
        .register_limiter("api.v1:login/x-y_z", &lim)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"metrics name "api.v1:login/x-y_z" is already registered"#
    );
    let long = registry
        .register_limiter(&"y".repeat(1000), &lim)
        .unwrap_err();
    assert!(long.to_string().len() < 200, "the message is bounded");
}

#[test]
fn the_success_rate_is_exported_per_declared_tier_only() {
    let clock = ManualClock::new();
    let slo = Arc::new(
        SuccessRate::builder()
            .tiers(["free", "paid"])
            .clock(clock.clone())
            .window(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    let registry = MetricsRegistry::new();
    registry.register_success_rate("customers", &slo).unwrap();
    for i in 0..100u16 {
        slo.record("paid", if i < 90 { 200 } else { 429 });
        slo.record(&format!("client-chosen-{i}"), 200);
    }
    clock.advance(Duration::from_secs(61));
    slo.tick();
    let recorder = PrometheusBuilder::new().build_recorder();
    let (_, s) = scrape(&recorder, &registry);
    let tiers: BTreeSet<&str> = s
        .keys()
        .filter(|(n, _)| n == "tollgate_success_rate")
        .map(|(_, l)| l["tier"].as_str())
        .collect();
    assert_eq!(tiers, BTreeSet::from(["free", "other", "paid"]));
    assert!(
        (get(
            &s,
            "tollgate_success_rate",
            &[("limiter", "customers"), ("tier", "paid")]
        ) - 0.9)
            .abs()
            < 1e-9
    );
    assert_eq!(
        get(
            &s,
            "tollgate_responses_total",
            &[
                ("limiter", "customers"),
                ("tier", "paid"),
                ("outcome", "rate_limited")
            ]
        ),
        10.0
    );
    assert_eq!(
        get(
            &s,
            "tollgate_responses_total",
            &[
                ("limiter", "customers"),
                ("tier", "other"),
                ("outcome", "success")
            ]
        ),
        100.0
    );
}

#[test]
fn a_policy_flipped_to_shadow_keeps_its_enforced_counts_and_counts_on_as_served() {
    let doc = |revision: u64, shadow: bool| {
        Limits::from_toml(&format!(
            "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"2/s\"\nshadow = {shadow}\n"
        ))
        .unwrap()
    };
    let clock = ManualClock::new();
    let handle = Arc::new(
        LimitsHandle::builder(doc(1, false))
            .clock(clock.clone())
            .build(),
    );
    let registry = MetricsRegistry::new();
    registry.register_limits("gw", &handle).unwrap();
    let recorder = PrometheusBuilder::new().build_recorder();
    let mut seen = Seen::default();
    let mut check = || {
        seen.saw(
            handle
                .check("t", "c", "/api/x", "k", Check::cost(1))
                .unwrap()
                .verdict(),
        )
    };
    for _ in 0..3 {
        check();
    }
    let _ = scrape(&recorder, &registry);
    let kept = handle.limiter("api").unwrap();
    handle.reload(doc(2, true)).unwrap();
    // Without a detector the limiter (and every key's state) is kept.
    assert!(Arc::ptr_eq(&kept, &handle.limiter("api").unwrap()));
    for _ in 0..4 {
        check();
    }
    let (_, s) = scrape(&recorder, &registry);
    assert_eq!(seen.0[&("deny", "quota")], 1);
    assert_eq!(seen.0[&("pass_through", "shadow")], 4);
    seen.assert_scraped(&s, "gw", "api");
    let shadow_denied = get(
        &s,
        "tollgate_shadow_denied_total",
        &[("limiter", "gw"), ("policy", "api")],
    );
    assert_eq!(
        shadow_denied, 4.0,
        "the bucket was empty: all four would have been denied"
    );
}

#[test]
fn an_idle_limiters_detector_mode_is_current_at_the_scrape() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let lim = Arc::new(
        KeyedRateLimiter::<u64>::builder("5/s".parse().unwrap())
            .clock(clock.clone())
            .detector(detector.clone())
            .build(),
    );
    let registry = MetricsRegistry::new();
    registry.register_keyed("k", &lim).unwrap();
    let recorder = PrometheusBuilder::new().build_recorder();
    let mode = |s: &Scrape, m: &str| {
        get(
            s,
            "tollgate_detector_mode",
            &[("limiter", "k"), ("mode", m)],
        )
    };
    detector.force_pass_through(PassReason::Forced, Duration::from_secs(60));
    assert!(matches!(lim.check_key(&1), Verdict::PassThrough(_)));
    let (_, s) = scrape(&recorder, &registry);
    assert_eq!((mode(&s, "forced"), mode(&s, "enforcing")), (1.0, 0.0));
    // No check arrives after the override ends: the scrape still sees it ended.
    clock.advance(Duration::from_secs(61));
    let (_, s) = scrape(&recorder, &registry);
    assert_eq!((mode(&s, "forced"), mode(&s, "enforcing")), (0.0, 1.0));
    let passed = get(
        &s,
        "tollgate_checks_total",
        &[
            ("limiter", "k"),
            ("policy", ""),
            ("outcome", "pass_through"),
            ("reason", "forced"),
        ],
    );
    assert_eq!(passed, 1.0);
}

#[test]
fn concurrency_limiters_export_in_flight_limit_and_saturations_without_keys() {
    use std::num::NonZeroU32;
    use tollgate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter};

    let registry = MetricsRegistry::new();
    let direct = Arc::new(ConcurrencyLimiter::new(NonZeroU32::new(2).unwrap()));
    let keyed = Arc::new(KeyedConcurrencyLimiter::<String>::new(
        NonZeroU32::new(1).unwrap(),
    ));
    registry.register_concurrency("uploads", &direct).unwrap();
    registry
        .register_keyed_concurrency("per-key", &keyed)
        .unwrap();
    let held: Vec<_> = (0..2).map(|_| direct.try_acquire().unwrap()).collect();
    assert!(direct.try_acquire().is_err());
    // 1,000 keys with a permit each, and one refusal per key.
    let permits: Vec<_> = (0..1000)
        .map(|i| keyed.try_acquire_key(&format!("customer-{i}")).unwrap())
        .collect();
    for i in 0..1000 {
        assert!(keyed.try_acquire_key(&format!("customer-{i}")).is_err());
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    let (text, s) = scrape(&recorder, &registry);
    let l = |n| [("limiter", n)];
    assert_eq!(get(&s, "tollgate_in_flight", &l("uploads")), 2.0);
    assert_eq!(get(&s, "tollgate_concurrency_limit", &l("uploads")), 2.0);
    assert_eq!(get(&s, "tollgate_saturations_total", &l("uploads")), 1.0);
    assert_eq!(get(&s, "tollgate_in_flight", &l("per-key")), 1000.0);
    assert_eq!(get(&s, "tollgate_in_flight_keys", &l("per-key")), 1000.0);
    assert_eq!(get(&s, "tollgate_saturations_total", &l("per-key")), 1000.0);
    assert!(!text.contains("customer-"), "no label carries a key");

    drop((held, permits));
    let (_, s) = scrape(&recorder, &registry);
    assert_eq!(get(&s, "tollgate_in_flight", &l("uploads")), 0.0);
    assert_eq!(get(&s, "tollgate_in_flight", &l("per-key")), 0.0);
    assert_eq!(get(&s, "tollgate_in_flight_keys", &l("per-key")), 0.0);
    assert_eq!(get(&s, "tollgate_saturations_total", &l("per-key")), 1000.0);
}
