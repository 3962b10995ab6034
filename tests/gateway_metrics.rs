//! The gateway example's `GET /metrics` over real HTTP on loopback: the example's own router
//! (with its metrics route, as `--features tower,metrics` serves it) on 127.0.0.1:0 in this
//! process, its limiters on a `ManualClock`. The counters a scrape renders equal the verdicts
//! the client saw, and scrapes are never rate-limited. Its own test binary: the Prometheus
//! recorder is installed once per process.
#![cfg(all(feature = "tower", feature = "metrics", not(loom)))]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::limits::Limits;
use tollgate::ManualClock;

#[allow(dead_code)]
#[path = "../examples/gateway.rs"]
mod gateway;

/// Every network step is bounded.
const STEP: Duration = Duration::from_secs(10);

/// `free` enforces; `paid` is a shadow policy: judged, counted, never enforced.
const LIMITS: &str = r#"
schema = 1
revision = 1
tiers = ["free", "paid"]
categories = ["search"]

[[policies]]
name = "free"
match = { tier = "free" }
quota = "1/s"
burst = 3

[[policies]]
name = "paid"
match = { tier = "paid" }
quota = "1/s"
burst = 2
shadow = true
"#;

struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<bytes::Bytes>>();
    let mut req = http::Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = tokio::time::timeout(STEP, client.request(req.body(Empty::new()).unwrap()))
        .await
        .expect("bounded")
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = tokio::time::timeout(STEP, res.into_body().collect())
        .await
        .expect("bounded")
        .unwrap()
        .to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// A series (its name, its labels sorted) and its value.
type Samples = HashMap<(String, Vec<(String, String)>), f64>;

/// The exposition text's samples: `name{labels} value` (or `name value`) → value, keyed by
/// the name and its labels sorted. Comment lines (`# HELP`, `# TYPE`) are skipped; a line
/// that does not parse fails the test.
fn parse(text: &str) -> Samples {
    let mut out = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = value.parse().expect(line);
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), Vec::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect(line);
                let mut labels: Vec<(String, String)> = body
                    .split("\",")
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p.split_once("=\"").expect(line);
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                labels.sort();
                (name.to_owned(), labels)
            }
        };
        assert!(
            out.insert((name, labels), value).is_none(),
            "duplicate {line}"
        );
    }
    out
}

fn sample(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut key: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    key.sort();
    *samples
        .get(&(name.to_owned(), key))
        .unwrap_or_else(|| panic!("no series {name}{labels:?}"))
}

fn checks(samples: &Samples, policy: &str, outcome: &str, reason: &str) -> u64 {
    sample(
        samples,
        "tollgate_checks_total",
        &[
            ("limiter", "gateway"),
            ("policy", policy),
            ("outcome", outcome),
            ("reason", reason),
        ],
    ) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_exactly_the_verdicts_the_client_saw_and_is_never_limited() {
    let clock = ManualClock::new();
    let handle = gateway::handle(Limits::from_toml(LIMITS).unwrap(), clock.clone().into());
    let (limited, _layer) = gateway::app(Arc::clone(&handle)).unwrap();
    let router = gateway::serve_metrics(limited, &handle).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });

    // Before any traffic, every series of both policies exists at zero.
    let first = parse(&get(addr, "/metrics", &[]).await.body);
    for policy in ["free", "paid"] {
        assert_eq!(checks(&first, policy, "allow", "none"), 0);
        assert_eq!(checks(&first, policy, "deny", "quota"), 0);
        assert_eq!(checks(&first, policy, "pass_through", "shadow"), 0);
    }

    // Traffic: free customers enforced (allowed, then 429), paid ones in shadow (passed
    // through), the clock moved once so some free keys are allowed again.
    let (mut ok, mut denied, mut passed) = (0u64, 0u64, 0u64);
    for round in 0..2 {
        for i in 0..40 {
            let (tier, key) = if i % 3 == 0 {
                ("paid", format!("p{}", i % 4))
            } else {
                ("free", format!("f{}", i % 5))
            };
            let r = get(addr, "/search/q", &[("x-api-key", &key), ("x-tier", tier)]).await;
            match (r.status, r.headers.get(gateway::PASS_THROUGH)) {
                (200, Some(v)) => {
                    assert_eq!(v.to_str().unwrap(), "paid; reason=Shadow");
                    passed += 1
                }
                (200, None) => ok += 1,
                (429, None) => denied += 1,
                (s, _) => panic!("unexpected {s} in round {round}: {}", r.body),
            }
        }
        clock.advance(Duration::from_secs(2));
    }
    assert!(ok > 0 && denied > 0 && passed > 0, "{ok} {denied} {passed}");
    assert_eq!(ok + denied + passed, 80);

    // Many scrapes with no key: all 200 (a limited request without a key would be 401),
    // and none of them is counted as a check.
    let mut last = String::new();
    for _ in 0..50 {
        let r = get(addr, "/metrics", &[]).await;
        assert_eq!(r.status, 200);
        assert!(r.headers.get(gateway::PASS_THROUGH).is_none());
        last = r.body;
    }
    println!(
        "--- /metrics after {ok} allowed, {denied} denied, {passed} passed through ---\n{last}"
    );

    let s = parse(&last);
    assert_eq!(checks(&s, "free", "allow", "none"), ok);
    assert_eq!(checks(&s, "free", "deny", "quota"), denied);
    assert_eq!(checks(&s, "free", "pass_through", "shadow"), 0);
    assert_eq!(checks(&s, "paid", "pass_through", "shadow"), passed);
    assert_eq!(checks(&s, "paid", "allow", "none"), 0);
    assert_eq!(checks(&s, "paid", "deny", "quota"), 0);
    // Every check series of the gateway sums to the requests sent: nothing else was counted.
    let total: f64 = s
        .iter()
        .filter(|((name, labels), _)| {
            name == "tollgate_checks_total"
                && labels.contains(&("limiter".to_owned(), "gateway".to_owned()))
        })
        .map(|(_, v)| v)
        .sum();
    assert_eq!(total as u64, 80);
    // The paid customers' shadow denials: what enforcing would have refused, at most every
    // pass-through and at least one (4 keys, burst 2, 14 requests per round).
    let shadow_denied = sample(
        &s,
        "tollgate_shadow_denied_total",
        &[("limiter", "gateway"), ("policy", "paid")],
    ) as u64;
    assert!(
        shadow_denied > 0 && shadow_denied <= passed,
        "{shadow_denied}"
    );
    assert_eq!(
        sample(
            &s,
            "tollgate_detector_mode",
            &[("limiter", "gateway"), ("mode", "enforcing")]
        ),
        1.0
    );
}
