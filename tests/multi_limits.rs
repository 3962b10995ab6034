//! Several limits per request: policies marked `also = true` apply in addition to
//! the most specific one; `LimitsHandle::check_all` checks them all or nothing.

#![cfg(feature = "config")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use tollgate::limits::{ConfigErrorKind, Format, Limits, LimitsHandle, Rollout};
use tollgate::{Check, ManualClock, PassReason, Shadow, Verdict};

const DOC: &str = r#"
schema = 1
revision = 1
tiers = ["free", "paid"]
[[policies]]
name = "search"
match = { route = "/v1/search" }
quota = "10/s"
[[policies]]
name = "v1"
match = { route = "/v1/*" }
quota = "20/s"
[[policies]]
name = "customer"
match = { route = "/*" }
quota = "1/min;burst=3"
also = true
[[policies]]
name = "customer-daily"
match = { route = "/*" }
quota = "1000/day"
also = true
[[policies]]
name = "paid-extra"
match = { tier = "paid", route = "/v1/*" }
quota = "50/s"
also = true
"#;

fn limits(text: &str) -> Limits {
    Limits::from_toml(text).unwrap()
}

fn names(l: &Limits, tier: &str, route: &str) -> Vec<String> {
    l.resolve_all(tier, "api", route)
        .iter()
        .map(|p| p.name().to_owned())
        .collect()
}

fn remaining(v: Verdict) -> u64 {
    v.allowed().map(|a| a.remaining()).expect("an allow")
}

#[test]
fn resolve_all_lists_the_most_specific_then_the_additional_ones() {
    let l = limits(DOC);
    assert_eq!(
        names(&l, "paid", "/v1/search"),
        ["search", "paid-extra", "customer", "customer-daily"]
    );
    assert_eq!(
        names(&l, "free", "/v1/search"),
        ["search", "customer", "customer-daily"]
    );
    assert_eq!(names(&l, "free", "/v2/x"), ["customer", "customer-daily"]);
    assert_eq!(
        l.resolve("free", "api", "/v2/x"),
        None,
        "also never resolves alone"
    );
    assert_eq!(l.resolve("paid", "api", "/v1/x").unwrap().name(), "v1");
    assert!(l.policy("customer").unwrap().also());
    assert!(!l.policy("v1").unwrap().also());
}

#[test]
fn also_round_trips_through_every_format() {
    let l = limits(DOC);
    assert!(l.to_toml().contains("also = true"));
    assert_eq!(
        l.to_toml().matches("also").count(),
        3,
        "written only when true"
    );
    for format in [Format::Toml, Format::Yaml, Format::Json] {
        let text = l.to_format(format);
        let back = Limits::parse(&text, format).unwrap();
        assert_eq!(back, l, "{format}");
        assert!(back.policy("customer-daily").unwrap().also());
    }
    let yaml = Limits::from_yaml(
        "schema: 1\nrevision: 1\npolicies:\n  - name: a\n    match: { route: /* }\n    quota: 1/s\n    also: true\n",
    )
    .unwrap();
    assert!(yaml.policies()[0].also());
}

#[test]
fn a_bad_also_is_a_typed_error_with_its_place_and_identical_matchers_stay_an_error_for_the_most_specific(
) {
    let doc = "schema = 1\nrevision = 1\n[[policies]]\nname = \"a\"\nmatch = { route = \"/*\" }\nquota = \"1/s\"\nalso = \"global\"\n";
    let errs = Limits::from_toml(doc).unwrap_err();
    assert_eq!(errs.len(), 1);
    let e = &errs[0];
    assert_eq!(e.kind(), ConfigErrorKind::WrongType);
    assert_eq!(e.path(), "policies[a].also");
    assert_eq!((e.line(), e.column()), (Some(7), Some(8)));
    assert!(e.to_string().contains("expected a boolean"), "{e}");
    assert!(e.hint().unwrap().contains("also = true"));
    // A misspelling is caught as an unknown field with a suggestion.
    let errs = Limits::from_toml(&doc.replace("also = \"global\"", "aslo = true")).unwrap_err();
    assert_eq!(errs[0].kind(), ConfigErrorKind::UnknownField);
    assert_eq!(errs[0].hint(), Some("did you mean \"also\"?"));
    // Two `also` policies (or one `also` and one most specific) may share a matcher; two
    // most specific ones may not.
    let two = |a: &str, b: &str| {
        format!("schema = 1\nrevision = 1\n[[policies]]\nname = \"a\"\nmatch = {{ route = \"/*\" }}\nquota = \"1/s\"\nalso = {a}\n[[policies]]\nname = \"b\"\nmatch = {{ route = \"/*\" }}\nquota = \"1/day\"\nalso = {b}\n")
    };
    assert!(Limits::from_toml(&two("true", "true")).is_ok());
    assert!(Limits::from_toml(&two("true", "false")).is_ok());
    let errs = Limits::from_toml(&two("false", "false")).unwrap_err();
    assert_eq!(errs[0].kind(), ConfigErrorKind::OverlappingMatchers);
}

#[test]
fn the_diff_shows_also_changing_and_the_traffic_it_moves() {
    let old = limits(DOC);
    let new = limits(
        &DOC.replace("revision = 1", "revision = 2")
            .replace("quota = \"20/s\"\n", "quota = \"20/s\"\nalso = true\n"),
    );
    let diff = Limits::diff(&old, &new);
    let c = &diff.changed()[0];
    assert_eq!(c.policy, "v1");
    let also = c.also.unwrap();
    assert_eq!((also.from, also.to), (false, true));
    assert!(
        diff.to_string()
            .contains("changed  v1                   also false → true"),
        "{diff}"
    );
    // "/v1/x" no longer resolves to v1 as the most specific policy: the move is listed.
    assert!(
        diff.moves()
            .iter()
            .any(|m| m.from.as_deref() == Some("v1") && m.to.is_none()),
        "{diff}"
    );
    let added = limits(
        &DOC.replace("revision = 1", "revision = 2")
            .replace("[[policies]]\nname = \"paid-extra\"", "[[policies]]\nname = \"n\"\nmatch = { route = \"/x\" }\nquota = \"1/s\"\nalso = true\n[[policies]]\nname = \"paid-extra\""),
    );
    let diff = Limits::diff(&old, &added);
    assert_eq!(diff.added()[0].name(), "n");
    assert!(diff.to_string().contains("(route=/x, also)"), "{diff}");
    assert!(
        diff.moves().is_empty(),
        "an added also policy moves no traffic"
    );
    let json = serde_json::to_string(&Limits::diff(&old, &new)).unwrap();
    assert!(
        json.contains(r#""also":{"from":false,"to":true}"#),
        "{json}"
    );
}

fn handle(text: &str, clock: &ManualClock) -> LimitsHandle {
    LimitsHandle::builder(limits(text))
        .clock(clock.clone())
        .build()
}

#[test]
fn a_global_deny_leaves_the_per_key_budget_untouched_exactly() {
    let clock = ManualClock::new();
    let h = handle(DOC, &clock);
    let check = |key| {
        h.check_all("free", "api", "/v1/search", key, Check::cost(1))
            .unwrap()
    };
    for _ in 0..3 {
        let d = check("alice");
        assert!(d.is_permitted());
        assert_eq!(d.verdicts().len(), 3);
    }
    let d = check("alice");
    assert!(!d.is_permitted());
    assert_eq!(d.policy(), Some("customer"));
    assert_eq!(d.verdicts().len(), 2, "checked up to the denying one");
    assert_eq!(
        d.verdict().denied().unwrap().retry_after(),
        std::time::Duration::from_secs(60)
    );
    for _ in 0..50 {
        assert!(!check("alice").is_permitted());
    }
    // 3 requests went through: "search" lost exactly 3 of 10, "customer-daily" 3 of 1000.
    let search = h.limiter("search").unwrap();
    assert_eq!(remaining(search.check_key_n("alice", 0).unwrap()), 7);
    let daily = h.limiter("customer-daily").unwrap();
    assert_eq!(remaining(daily.check_key_n("alice", 0).unwrap()), 997);
    // bob is untouched by alice.
    assert!(check("bob").is_permitted());
}

#[test]
fn the_deciding_policy_of_an_allow_is_the_one_with_least_remaining() {
    let clock = ManualClock::new();
    let h = handle(DOC, &clock);
    let d = h
        .check_all("paid", "api", "/v1/search", "k", Check::cost(1))
        .unwrap();
    assert_eq!(d.policy(), Some("customer")); // 2 left, against 9, 49 and 999
    assert_eq!(remaining(d.verdict()), 2);
    assert_eq!(
        d.deciding().unwrap().quota(),
        "1/min;burst=3".parse().unwrap()
    );
    assert_eq!(d.revision(), 1);
    // A route no policy matches (not even "/*"): unlimited, no policy, nothing counted.
    let none = h
        .check_all("paid", "api", "nothing", "k", Check::cost(1))
        .unwrap();
    assert_eq!((none.policy(), none.verdicts().len()), (None, 0));
    assert_eq!(remaining(none.verdict()), u64::MAX);
}

#[test]
fn insufficient_capacity_on_a_later_policy_consumes_nothing() {
    let clock = ManualClock::new();
    let h = handle(DOC, &clock);
    let e = h
        .check_all("free", "api", "/v1/search", "k", Check::cost(5))
        .unwrap_err();
    assert_eq!(e.capacity(), 3, "customer's burst");
    let search = h.limiter("search").unwrap();
    assert_eq!(remaining(search.check_key_n("k", 0).unwrap()), 10);
}

#[test]
fn shadow_policies_never_deny_and_are_refunded_with_the_others() {
    let clock = ManualClock::new();
    let text = DOC.replace(
        "name = \"customer-daily\"\nmatch = { route = \"/*\" }\nquota = \"1000/day\"\n",
        "name = \"customer-daily\"\nmatch = { route = \"/*\" }\nquota = \"1/day\"\nshadow = true\n",
    );
    let h = handle(&text, &clock);
    let check = || {
        h.check_all("free", "api", "/v2/x", "k", Check::cost(1))
            .unwrap()
    };
    let d = check();
    assert!(d.is_permitted());
    assert_eq!(
        d.policy(),
        Some("customer"),
        "the allow with least remaining"
    );
    let d = check(); // customer allows (1 left); the shadow policy would deny
    assert!(d.is_permitted());
    assert_eq!(d.policy(), Some("customer-daily"));
    let Verdict::PassThrough(p) = d.verdict() else {
        panic!("a pass-through decides: {d:?}")
    };
    assert_eq!((p.reason(), p.shadow()), (PassReason::Shadow, Shadow::Deny));
    // A shadow policy checked before a denying one was charged, and is refunded: "search"
    // (most specific, in shadow here) loses nothing when "customer" denies.
    let text = DOC.replace("quota = \"10/s\"\n", "quota = \"10/s\"\nshadow = true\n");
    let h = handle(&text, &clock);
    let customer = h.limiter("customer").unwrap();
    assert!(customer.check_key_n("z", 3).unwrap().is_permitted());
    let d = h
        .check_all("free", "api", "/v1/search", "z", Check::cost(2))
        .unwrap();
    assert!(!d.is_permitted());
    assert_eq!(d.policy(), Some("customer"));
    let Verdict::PassThrough(p) = d.verdicts()[0].verdict() else {
        panic!("a shadow policy passes through: {d:?}")
    };
    assert_eq!(
        (p.reason(), p.shadow()),
        (PassReason::Shadow, Shadow::Allow)
    );
    let search = h.limiter("search").unwrap();
    assert_eq!(
        remaining(search.check_key_n("z", 0).unwrap()),
        10,
        "refunded"
    );
    let daily = h.limiter("customer-daily").unwrap();
    assert_eq!(
        daily.len(),
        0,
        "the policy after the denial was never checked"
    );
}

#[test]
fn under_concurrency_no_limit_is_exceeded_and_denials_consume_nothing() {
    let clock = ManualClock::new();
    let text = r#"
schema = 1
revision = 1
[[policies]]
name = "route"
match = { route = "/v1/*" }
quota = "1/min;burst=40"
[[policies]]
name = "customer"
match = { route = "/*" }
quota = "1/min;burst=25"
also = true
[[policies]]
name = "customer-b"
match = { route = "/*" }
quota = "1/min;burst=30"
also = true
"#;
    let h = Arc::new(handle(text, &clock));
    const KEYS: usize = 8;
    let rounds = if cfg!(debug_assertions) {
        2_000
    } else {
        20_000
    };
    // Per key: requests admitted on "/v1/a" (all three policies) and on "/v2/b" (the two
    // customer policies).
    let on_v1: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let on_v2: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (h, on_v1, on_v2) = (Arc::clone(&h), Arc::clone(&on_v1), Arc::clone(&on_v2));
            thread::spawn(move || {
                let mut x = 0x2545_f491_4f6c_dd1du64.wrapping_mul(t + 1);
                for _ in 0..rounds {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = (x % KEYS as u64) as usize;
                    let cost = 1 + (x >> 16) % 4;
                    let (route, tally) = if (x >> 40) % 3 == 0 {
                        ("/v2/b", &on_v2)
                    } else {
                        ("/v1/a", &on_v1)
                    };
                    let d = h
                        .check_all(
                            "free",
                            "api",
                            route,
                            &format!("key-{key}"),
                            Check::cost(cost),
                        )
                        .unwrap();
                    if d.is_permitted() {
                        tally[key].fetch_add(cost, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let left = |policy: &str, key: &str| {
        remaining(h.limiter(policy).unwrap().check_key_n(key, 0).unwrap())
    };
    for k in 0..KEYS {
        let key = format!("key-{k}");
        let v1 = on_v1[k].load(Ordering::Relaxed);
        let v2 = on_v2[k].load(Ordering::Relaxed);
        assert!(v1 <= 40 && v1 + v2 <= 25, "{key}: {v1} + {v2}");
        // Exactly what the admitted requests took, nothing for the denied ones.
        assert_eq!(left("route", &key), 40 - v1, "{key}");
        assert_eq!(left("customer", &key), 25 - v1 - v2, "{key}");
        assert_eq!(left("customer-b", &key), 30 - v1 - v2, "{key}");
        assert!(
            v1 + v2 >= 22,
            "{key}: the burst was (nearly) used: {v1} + {v2}"
        );
    }
}

#[test]
fn a_reload_that_flips_also_keeps_every_key_state() {
    let clock = ManualClock::new();
    let h = handle(DOC, &clock);
    for _ in 0..2 {
        assert!(h
            .check_all("free", "api", "/v1/x", "k", Check::cost(1))
            .unwrap()
            .is_permitted());
    }
    let v1 = h.limiter("v1").unwrap();
    let next = DOC
        .replace("revision = 1", "revision = 2")
        .replace("quota = \"20/s\"\n", "quota = \"20/s\"\nalso = true\n");
    let diff = h.reload(limits(&next)).unwrap();
    assert!(diff.changed()[0].also.is_some());
    assert!(
        Arc::ptr_eq(&v1, &h.limiter("v1").unwrap()),
        "the limiter is kept"
    );
    let d = h
        .check_all("free", "api", "/v1/x", "k", Check::cost(1))
        .unwrap();
    let names: Vec<&str> = d.verdicts().iter().map(|v| v.policy()).collect();
    assert_eq!(names, ["v1", "customer", "customer-daily"]);
    assert_eq!(remaining(d.verdicts()[0].verdict()), 17);
    assert_eq!(d.revision(), 2);
}

#[test]
fn a_rollout_checks_every_policy_of_the_document_its_key_is_on() {
    let clock = ManualClock::new();
    let new = DOC
        .replace("revision = 1", "revision = 2")
        .replace("quota = \"1/min;burst=3\"", "quota = \"1/min;burst=4\"");
    let rollout = Rollout::builder(limits(DOC), limits(&new))
        .clock(clock.clone())
        .build()
        .unwrap();
    while rollout.promote() {}
    assert_eq!(rollout.basis_points(), 10_000);
    // Everyone is on the new document: customer's burst is 4.
    let mut admitted = 0;
    for _ in 0..10 {
        let d = rollout
            .check_all("free", "api", "/v1/search", "k", Check::cost(1))
            .unwrap();
        assert_eq!(d.revision(), 2);
        admitted += u32::from(d.is_permitted());
    }
    assert_eq!(admitted, 4);
}

#[test]
fn many_also_policies_resolve_by_index() {
    // 20,000 policies on distinct exact routes and 64 also policies on prefixes (the most a
    // document may have, tollgate::limits::Limits::MAX_ALSO_POLICIES): each request finds its few matches
    // without scanning the list.
    let mut text = String::from("schema = 1\nrevision = 1\n");
    for i in 0..20_000 {
        text.push_str(&format!(
            "[[policies]]\nname = \"p{i}\"\nmatch = {{ route = \"/r/{i}\" }}\nquota = \"1/s\"\n"
        ));
    }
    for i in 0..64 {
        text.push_str(&format!(
            "[[policies]]\nname = \"q{i}\"\nmatch = {{ route = \"/r/{i}*\" }}\nquota = \"1/s\"\nalso = true\n"
        ));
    }
    let l = Limits::from_toml(&text).unwrap();
    let got = names(&l, "free", "/r/123");
    assert_eq!(got, ["p123", "q12", "q1"]);
    for i in (0..20_000).step_by(97) {
        assert_eq!(names(&l, "free", &format!("/r/{i}"))[0], format!("p{i}"));
    }
}
