//! The layer's rules: shared state across clones (over loopback), keys (IPv6 /64, trusted
//! proxies), several limits all or nothing, queue mode, pass-through marking, the response
//! hook, legacy headers, costs in bytes, retries and the success-rate feed. Limiters run on
//! `ManualClock`s; nothing sleeps.
#![cfg(all(feature = "tower", not(loom)))]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use tollgate::http::{
    Cost, ForwardedIp, HeaderKey, HeaderMode, OnMissingKey, PeerIp, Queue, RateLimitLayer,
    RejectReason,
};
use tollgate::safety::SuccessRate;
use tollgate::shaping::RetryBudget;
#[cfg(feature = "config")]
use tollgate::{
    http::PassedThrough,
    limits::{Limits, LimitsHandle},
    PassReason,
};
use tollgate::{KeyedRateLimiter, ManualClock, RateLimiter};
use tower::{Layer, Service, ServiceExt};

type Res = Response<tollgate::http::RateLimitBody<Full<Bytes>>>;

/// The inner service: `ok`, or a 500 for `/fail`.
async fn inner(req: Request<Empty<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let status = if req.uri().path() == "/fail" {
        500
    } else {
        200
    };
    let mut res = Response::new(Full::new(Bytes::from_static(b"ok")));
    *res.status_mut() = StatusCode::from_u16(status).unwrap();
    Ok(res)
}

async fn call(layer: &RateLimitLayer, req: Request<Empty<Bytes>>) -> Res {
    layer
        .layer(tower::service_fn(inner))
        .oneshot(req)
        .await
        .unwrap()
}

fn req(path: &str, headers: &[(&str, &str)]) -> Request<Empty<Bytes>> {
    let mut b = Request::get(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Empty::new()).unwrap()
}

fn from(peer: &str, headers: &[(&str, &str)]) -> Request<Empty<Bytes>> {
    let mut r = req("/", headers);
    r.extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    r
}

fn api_key() -> HeaderKey {
    HeaderKey::new(HeaderName::from_static("x-api-key"))
}

async fn problem(res: Res) -> serde_json::Value {
    let body = res.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn clones_of_the_layer_share_one_limiter_over_real_http() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("3/s".parse().unwrap())
        .clock(clock)
        .build();
    let layer = RateLimitLayer::builder()
        .limit("global", lim)
        .build()
        .unwrap();
    let mut addrs = Vec::new();
    for l in [layer.clone(), layer.clone()] {
        let router = axum::Router::new().fallback(|| async { "ok" }).layer(l);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let mut statuses = Vec::new();
    for i in 0..4 {
        let uri = format!("http://{}/", addrs[i % 2]);
        let res = tokio::time::timeout(Duration::from_secs(10), client.get(uri.parse().unwrap()))
            .await
            .unwrap()
            .unwrap();
        statuses.push(res.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429], "3/s across both servers");
    assert_eq!((layer.stats().allowed, layer.stats().denied), (3, 1));
}

#[tokio::test]
async fn ipv6_peers_share_a_key_per_64_and_mapped_ipv4_is_ipv4() {
    let lim = KeyedRateLimiter::<String>::builder("1/min".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let lim = Arc::new(lim);
    let layer = RateLimitLayer::builder()
        .key(PeerIp::new())
        .limit("per-ip", Arc::clone(&lim))
        .build()
        .unwrap();
    let status = |r: Res| r.status().as_u16();
    assert_eq!(
        status(call(&layer, from("[2001:db8:1:2::1]:1", &[])).await),
        200
    );
    // Another address in the same /64: the same customer.
    assert_eq!(
        status(call(&layer, from("[2001:db8:1:2:ffff::9]:1", &[])).await),
        429
    );
    // The next /64 is another.
    assert_eq!(
        status(call(&layer, from("[2001:db8:1:3::1]:1", &[])).await),
        200
    );
    assert_eq!(status(call(&layer, from("192.0.2.7:1", &[])).await), 200);
    assert_eq!(
        status(call(&layer, from("[::ffff:192.0.2.7]:1", &[])).await),
        429
    );
    assert_eq!(lim.len(), 3);
    // No peer address: the server's set-up, 500 (not the client's 401), charged to no key.
    let res = call(&layer, req("/", &[])).await;
    assert_eq!(status(res), 500);
    assert_eq!(lim.len(), 3);
    assert_eq!(
        (layer.stats().no_peer_address, layer.stats().bad_requests),
        (1, 0)
    );
}

#[tokio::test]
async fn forwarded_headers_count_only_from_trusted_proxies() {
    let lim = KeyedRateLimiter::<String>::builder("1/min".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder()
        .key(ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]))
        .limit("per-ip", lim)
        .build()
        .unwrap();
    // An untrusted peer rotating X-Forwarded-For is one key: its own address.
    let spoof = |xff: &'static str| from("203.0.113.5:9", &[("x-forwarded-for", xff)]);
    assert_eq!(call(&layer, spoof("198.51.100.1")).await.status(), 200);
    assert_eq!(call(&layer, spoof("198.51.100.2")).await.status(), 429);
    assert_eq!(call(&layer, spoof("198.51.100.3")).await.status(), 429);
    // Through our proxies, each client is its own key; trusted hops are skipped from the right.
    let proxied = |xff: &'static str| from("10.0.0.1:9", &[("x-forwarded-for", xff)]);
    assert_eq!(
        call(&layer, proxied("198.51.100.1, 10.2.2.2"))
            .await
            .status(),
        200
    );
    assert_eq!(
        call(&layer, proxied("1.1.1.1, 198.51.100.1"))
            .await
            .status(),
        429
    );
    assert_eq!(call(&layer, proxied("198.51.100.9")).await.status(), 200);
    // A chain that does not parse, from a trusted proxy: 400, not somebody else's key.
    for bad in ["unknown", "198.51.100.1, not-an-ip", "_hidden"] {
        let res = call(&layer, proxied(bad)).await;
        assert_eq!(res.status(), 400, "{bad}");
        assert_eq!(problem(res).await["reason"], "malformed_key");
    }
    let long: &'static str = Box::leak(vec!["10.1.1.1"; 40].join(", ").into_boxed_str());
    assert_eq!(call(&layer, proxied(long)).await.status(), 400);
}

#[tokio::test]
async fn a_global_deny_leaves_the_per_key_budget_untouched_and_vice_versa() {
    let clock = ManualClock::new();
    let per_key = Arc::new(
        KeyedRateLimiter::<String>::builder("2/s".parse().unwrap())
            .clock(clock.clone())
            .build(),
    );
    let global = Arc::new(
        RateLimiter::builder("3/s".parse().unwrap())
            .clock(clock.clone())
            .build(),
    );
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("per-key", Arc::clone(&per_key))
        .limit("global", Arc::clone(&global))
        .build()
        .unwrap();
    let k = |key: &'static str| req("/", &[("x-api-key", key)]);
    assert_eq!(call(&layer, k("a")).await.status(), 200);
    assert_eq!(call(&layer, k("a")).await.status(), 200);
    // a's own limit denies: the global budget is not charged for it.
    let res = call(&layer, k("a")).await;
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["ratelimit"], r#""per-key";r=0;t=1"#);
    let left = |l: &RateLimiter| l.check_n(0).unwrap().allowed().unwrap().remaining();
    assert_eq!(left(&global), 1, "3 - 2: a's third request was not charged");
    assert_eq!(call(&layer, k("b")).await.status(), 200);
    // The global limit denies c: c's per-key budget stays whole.
    let res = call(&layer, k("c")).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        res.headers()["ratelimit-policy"],
        r#""per-key";q=2;w=1, "global";q=3;w=1"#
    );
    assert_eq!(res.headers()["ratelimit"], r#""global";r=0;t=1"#);
    assert_eq!(problem(res).await["policy"], "global");
    let c_left = per_key
        .check_key_n("c", 0)
        .unwrap()
        .allowed()
        .unwrap()
        .remaining();
    assert_eq!(c_left, 2, "c's per-key budget is whole");
    assert_eq!(left(&global), 0);
    assert_eq!(layer.stats().races, 0);
}

/// A sleep that advances the manual clock instead of waiting, counting the naps; with
/// `rival`, another client takes the capacity freed during the nap.
fn manual_sleep(
    clock: ManualClock,
    naps: Arc<AtomicUsize>,
    rival: Option<Arc<RateLimiter>>,
) -> Queue {
    Queue::new(Duration::from_millis(600), move |d| {
        clock.advance(d);
        naps.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = &rival {
            assert!(
                r.check().is_permitted(),
                "the rival takes the freed capacity"
            );
        }
        Box::pin(async {})
    })
}

#[tokio::test]
async fn queue_mode_waits_with_jitter_then_succeeds() {
    let clock = ManualClock::new();
    let naps = Arc::new(AtomicUsize::new(0));
    let lim = RateLimiter::builder("2/s".parse().unwrap())
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder()
        .limit("global", lim)
        .queue(manual_sleep(clock.clone(), Arc::clone(&naps), None))
        .build()
        .unwrap();
    let t0 = clock.now();
    for _ in 0..3 {
        assert_eq!(call(&layer, req("/", &[])).await.status(), 200);
    }
    // The third waited its 500 ms plus a jitter of at most 250 ms, cut to max_wait 600 ms.
    let waited = clock.now() - t0;
    assert!(
        waited >= Duration::from_millis(500) && waited <= Duration::from_millis(600),
        "{waited:?}"
    );
    assert_eq!(naps.load(Ordering::Relaxed), 1);
    let s = layer.stats();
    assert_eq!((s.queued, s.allowed, s.denied), (1, 3, 0));
    assert_eq!(layer.waiting(), (0, 0));
}

#[tokio::test]
async fn queue_mode_rejects_after_max_wait_and_at_once_when_the_wait_is_longer() {
    let clock = ManualClock::new();
    let naps = Arc::new(AtomicUsize::new(0));
    let lim = Arc::new(
        RateLimiter::builder("2/s".parse().unwrap())
            .clock(clock.clone())
            .build(),
    );
    let layer = RateLimitLayer::builder()
        .limit("global", Arc::clone(&lim))
        .queue(manual_sleep(
            clock.clone(),
            Arc::clone(&naps),
            Some(Arc::clone(&lim)),
        ))
        .build()
        .unwrap();
    for _ in 0..2 {
        assert_eq!(call(&layer, req("/", &[])).await.status(), 200);
    }
    // Waits once; a rival takes what the wait freed; the next wait would pass max_wait.
    let res = call(&layer, req("/", &[])).await;
    assert_eq!(res.status(), 429);
    assert!(res.headers().contains_key("retry-after"));
    assert_eq!(naps.load(Ordering::Relaxed), 1);

    // A wait longer than max_wait from the start: rejected without sleeping.
    let slow = RateLimiter::builder("1/s".parse().unwrap())
        .clock(clock.clone())
        .build();
    let naps2 = Arc::new(AtomicUsize::new(0));
    let layer2 = RateLimitLayer::builder()
        .limit("global", slow)
        .queue(manual_sleep(clock.clone(), Arc::clone(&naps2), None))
        .build()
        .unwrap();
    assert_eq!(call(&layer2, req("/", &[])).await.status(), 200);
    assert_eq!(call(&layer2, req("/", &[])).await.status(), 429);
    assert_eq!(naps2.load(Ordering::Relaxed), 0);
    assert_eq!(layer2.stats().queued, 0);
}

#[tokio::test]
async fn queue_waiters_are_capped_and_a_dropped_request_leaves_nothing() {
    let clock = ManualClock::new();
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = Arc::clone(&gate);
    // A sleep that blocks until the test lets it go.
    let queue = Queue::new(Duration::from_secs(5), move |_| {
        let g = Arc::clone(&g);
        Box::pin(async move { g.notified().await })
    })
    .max_waiters_per_key(1)
    .max_waiters(2);
    let lim = KeyedRateLimiter::<String>::builder("1/s".parse().unwrap())
        .clock(clock.clone())
        .build();
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("per-key", lim)
        .queue(queue)
        .build()
        .unwrap();
    let k = |key: &'static str| req("/", &[("x-api-key", key)]);
    for key in ["a", "b", "c"] {
        assert_eq!(call(&layer, k(key)).await.status(), 200);
    }
    let svc = || layer.layer(tower::service_fn(inner));
    let mut wait_a = tokio::spawn(svc().oneshot(k("a")));
    tokio::task::yield_now().await;
    while layer.waiting().0 < 1 {
        tokio::task::yield_now().await;
    }
    // A second waiter of key a: over the per-key cap, rejected at once.
    let res = call(&layer, k("a")).await;
    assert_eq!(res.status(), 429);
    assert_eq!(
        problem(res).await["reason"],
        RejectReason::QueueFull.as_str()
    );
    let wait_b = tokio::spawn(svc().oneshot(k("b")));
    while layer.waiting().0 < 2 {
        tokio::task::yield_now().await;
    }
    // Total cap reached: c is rejected at once.
    assert_eq!(call(&layer, k("c")).await.status(), 429);
    assert_eq!(layer.stats().queue_full, 2);
    // Dropping a waiting request frees its slot.
    wait_a.abort();
    assert!((&mut wait_a).await.is_err());
    assert_eq!(layer.waiting(), (1, 1));
    // b's wait ends with capacity: it succeeds.
    clock.advance(Duration::from_secs(1));
    gate.notify_waiters();
    let res = tokio::time::timeout(Duration::from_secs(10), wait_b)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(layer.waiting(), (0, 0));
}

#[cfg(feature = "config")]
#[tokio::test]
async fn pass_through_is_marked_and_counted() {
    let doc = r#"
schema = 1
revision = 1
[[policies]]
name = "trial"
match = { route = "/trial/*" }
quota = "1/min"
shadow = true
"#;
    let handle = LimitsHandle::builder(Limits::from_toml(doc).unwrap())
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("limits", handle)
        .build()
        .unwrap();
    let k = || req("/trial/x", &[("x-api-key", "a")]);
    for _ in 0..2 {
        let res = call(&layer, k()).await;
        assert_eq!(res.status(), 200, "a shadow policy never denies");
        let mark = res.extensions().get::<PassedThrough>().unwrap();
        assert_eq!(
            (mark.policy(), mark.reason()),
            ("trial", Some(PassReason::Shadow))
        );
    }
    let plain = call(&layer, req("/other", &[("x-api-key", "a")])).await;
    assert!(plain.extensions().get::<PassedThrough>().is_none());
    let s = layer.stats();
    assert_eq!((s.passed_through, s.unmatched, s.allowed), (2, 1, 3));
}

#[tokio::test]
async fn a_custom_hook_chooses_the_body_and_keeps_the_fields() {
    let lim = RateLimiter::builder("1/min".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder()
        .limit("global", lim)
        .on_reject(|r| {
            let mut res =
                Response::new(Bytes::from(format!("slow down ({})", r.reason().as_str())));
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res
        })
        .build()
        .unwrap();
    assert_eq!(call(&layer, req("/", &[])).await.status(), 200);
    let res = call(&layer, req("/", &[])).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "60");
    assert_eq!(res.headers()["ratelimit"], r#""global";r=0;t=60"#);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"slow down (quota)");
}

#[tokio::test]
async fn legacy_and_off_header_modes() {
    let mk = |mode| {
        let lim = RateLimiter::builder("10/min;burst=5".parse().unwrap())
            .clock(ManualClock::new())
            .build();
        RateLimitLayer::builder()
            .limit("global", lim)
            .headers(mode)
            .build()
            .unwrap()
    };
    let res = call(&mk(HeaderMode::Legacy), req("/", &[])).await;
    assert_eq!(res.headers()["x-ratelimit-limit"], "10");
    assert_eq!(res.headers()["x-ratelimit-remaining"], "4");
    assert_eq!(res.headers()["x-ratelimit-reset"], "6");
    assert!(res.headers().get("ratelimit").is_none());
    let res = call(&mk(HeaderMode::Off), req("/", &[])).await;
    assert!(res.headers().get("ratelimit").is_none());
    assert!(res.headers().get("x-ratelimit-remaining").is_none());
    let res = call(&mk(HeaderMode::Ietf), req("/", &[])).await;
    assert_eq!(
        res.headers()["ratelimit-policy"],
        r#""global";q=10;w=60;tollgate-burst=5"#
    );
    assert_eq!(res.headers()["ratelimit"], r#""global";r=4;t=6"#);
}

#[tokio::test]
async fn content_length_is_charged_to_a_byte_budget() {
    let lim = KeyedRateLimiter::<String>::builder("1000B/s".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("upload", lim)
        .cost(Cost::ContentLength {
            unknown_length: 300,
        })
        .build()
        .unwrap();
    let up = |len: Option<&'static str>| {
        let mut h = vec![("x-api-key", "a")];
        if let Some(l) = len {
            h.push(("content-length", l));
        }
        req("/up", &h)
    };
    let res = call(&layer, up(Some("600"))).await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["ratelimit-policy"],
        r#""upload";q=1000;w=1;qu="content-bytes""#
    );
    assert_eq!(res.headers()["ratelimit"], r#""upload";r=400;t=1"#);
    // Chunked (no length): the estimate, 300 bytes.
    assert_eq!(call(&layer, up(None)).await.status(), 200);
    assert_eq!(call(&layer, up(Some("200"))).await.status(), 429);
    // More than the burst ever admits: 413, not a retry-after that would never come true.
    let res = call(&layer, up(Some("5000"))).await;
    assert_eq!(res.status(), 413);
    assert!(res.headers().get("retry-after").is_none());
    assert_eq!(problem(res).await["reason"], "insufficient_capacity");
}

#[tokio::test]
async fn attempt_headers_feed_the_retry_budget() {
    let lim = Arc::new(
        RateLimiter::builder("1000/s".parse().unwrap())
            .clock(ManualClock::new())
            .retry_budget(
                RetryBudget::new()
                    .with_ratio(0.0)
                    .with_floor(1)
                    .with_period(Duration::from_secs(1)),
            )
            .build(),
    );
    let layer = RateLimitLayer::builder()
        .limit("global", Arc::clone(&lim))
        .build()
        .unwrap();
    assert_eq!(call(&layer, req("/", &[])).await.status(), 200);
    // x-envoy-attempt-count counts the original as 1: not a retry.
    assert_eq!(
        call(&layer, req("/", &[("x-envoy-attempt-count", "1")]))
            .await
            .status(),
        200
    );
    assert_eq!(lim.stats().retries, 0);
    let mut denied = None;
    for n in 1..=5 {
        let res = call(&layer, req("/", &[("grpc-previous-rpc-attempts", "1")])).await;
        if res.status() == 429 {
            denied = Some((n, problem(res).await["reason"].clone()));
            break;
        }
    }
    let (n, reason) = denied.expect("a budget of 1 retry per second runs out");
    assert_eq!(reason, "retry_budget");
    assert_eq!(n, 2, "the floor admits one retry in the period, then none");
    let stats = lim.stats();
    assert_eq!((stats.original, stats.denied_retry_budget), (2, 1));
}

#[tokio::test]
async fn every_status_is_fed_to_the_success_rate_by_tier() {
    let slo = Arc::new(SuccessRate::builder().tiers(["free"]).build().unwrap());
    let lim = RateLimiter::builder("2/min".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder()
        .limit("global", lim)
        .tier_header(HeaderName::from_static("x-tier"))
        .on_missing_key(OnMissingKey::Fallback("anonymous".into()))
        .success_rate(Arc::clone(&slo))
        .build()
        .unwrap();
    let t = [("x-tier", "free")];
    assert_eq!(call(&layer, req("/", &t)).await.status(), 200);
    assert_eq!(call(&layer, req("/fail", &t)).await.status(), 500);
    assert_eq!(call(&layer, req("/", &t)).await.status(), 429);
    let free = &slo.snapshot()[0];
    assert_eq!(free.tier(), "free");
    assert_eq!(
        (free.successes(), free.failures_5xx(), free.failures_429()),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn the_service_is_ready_when_its_inner_service_is() {
    let lim = RateLimiter::new("1/s".parse().unwrap());
    let layer = RateLimitLayer::builder()
        .limit("global", lim)
        .build()
        .unwrap();
    let mut svc = layer.layer(tower::service_fn(inner));
    let ready = svc.ready().await.unwrap();
    assert_eq!(ready.call(req("/", &[])).await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_concurrency_the_global_limit_holds_and_every_overcharge_is_a_counted_race() {
    let clock = ManualClock::new(); // frozen: no capacity comes back during the test
    let per_key = Arc::new(
        KeyedRateLimiter::<String>::builder("5/min".parse().unwrap())
            .clock(clock.clone())
            .build(),
    );
    let global = Arc::new(
        RateLimiter::builder("12/min".parse().unwrap())
            .clock(clock.clone())
            .build(),
    );
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("per-key", Arc::clone(&per_key))
        .limit("global", Arc::clone(&global))
        .build()
        .unwrap();
    let keys = ["a", "b", "c", "d"];
    let mut tasks = Vec::new();
    for t in 0..8 {
        let layer = layer.clone();
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0;
            for i in 0..10 {
                let key = keys[(t + i) % keys.len()];
                if call(&layer, req("/", &[("x-api-key", key)])).await.status() == 200 {
                    allowed += 1;
                }
            }
            allowed
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.unwrap();
    }
    assert_eq!(allowed, 12, "the global limit admits exactly its burst");
    let used: u64 = keys
        .iter()
        .map(|k| {
            5 - per_key
                .check_key_n(*k, 0)
                .unwrap()
                .allowed()
                .unwrap()
                .remaining()
        })
        .sum();
    // A per-key unit spent on a request the global limit then denied in a race is refunded.
    assert_eq!(used, 12, "per-key units left charged");
    assert_eq!(layer.stats().races, 0, "the built-in sources refund");
    assert_eq!(layer.stats().allowed + layer.stats().denied, 80);
}

#[tokio::test]
async fn a_forwarded_chain_far_beyond_normal_is_rejected_without_being_walked() {
    let lim = KeyedRateLimiter::<String>::new("10/s".parse().unwrap());
    let layer = RateLimitLayer::builder()
        .key(ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()]))
        .limit("per-ip", lim)
        .build()
        .unwrap();
    for hops in [1_000, 100_000] {
        let chain = vec!["10.1.1.1"; hops].join(", ");
        let mut r = Request::get("/")
            .header("x-forwarded-for", chain)
            .body(Empty::new())
            .unwrap();
        r.extensions_mut()
            .insert("10.0.0.1:9".parse::<SocketAddr>().unwrap());
        let res = call(&layer, r).await;
        assert_eq!(res.status(), 400, "{hops} hops");
        assert_eq!(problem(res).await["reason"], "malformed_key");
    }
}

#[cfg(feature = "config")]
#[tokio::test]
async fn policies_that_apply_in_addition_are_enforced_all_or_nothing() {
    let doc = r#"
schema = 1
revision = 1
[[policies]]
name = "route"
match = { route = "/v1/*" }
quota = "10/min"
[[policies]]
name = "customer"
match = { route = "/*" }
quota = "2/min"
also = true
"#;
    let handle = Arc::new(
        LimitsHandle::builder(Limits::from_toml(doc).unwrap())
            .clock(ManualClock::new())
            .build(),
    );
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("limits", Arc::clone(&handle))
        .build()
        .unwrap();
    let k = || req("/v1/x", &[("x-api-key", "a")]);
    for _ in 0..2 {
        assert_eq!(call(&layer, k()).await.status(), 200);
    }
    let res = call(&layer, k()).await;
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["ratelimit"], r#""customer";r=0;t=30"#);
    // The route policy was not charged for the denied request: 10 - 2 left.
    let route = handle.limiter("route").unwrap();
    let left = route
        .check_key_n("a", 0)
        .unwrap()
        .allowed()
        .unwrap()
        .remaining();
    assert_eq!(left, 8);
}

/// The problem body is written by hand (no JSON library in feature `tower`): a policy name
/// with quotes, backslashes, control and non-ASCII characters still gives valid JSON that
/// says the same name.
#[tokio::test]
async fn problem_bodies_are_valid_json_whatever_the_policy_name() {
    let name = "we\"ird\\name\n\t\u{1}é→";
    let lim = RateLimiter::builder("1/min".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder().limit(name, lim).build().unwrap();
    assert_eq!(call(&layer, req("/", &[])).await.status(), 200);
    let res = call(&layer, req("/", &[])).await;
    assert_eq!(res.status(), 429);
    let p = problem(res).await;
    assert_eq!(p["policy"], name);
    assert_eq!(p["reason"], "quota");
    assert_eq!(p["retry_after"], 60);
    assert_eq!(p["status"], 429);
    assert_eq!(p["title"], "Too Many Requests");
    assert!(p["detail"].as_str().unwrap().contains("retry after 60 s"));
}

/// The IETF fields never carry the partition key (`pk`): the layer's keys are API keys and
/// client addresses. The policy item is a String, the burst a vendor parameter.
#[tokio::test]
async fn ietf_fields_carry_no_partition_key() {
    let lim = KeyedRateLimiter::<String>::builder("600/min;burst=50".parse().unwrap())
        .clock(ManualClock::new())
        .build();
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("per-key", lim)
        .build()
        .unwrap();
    let res = call(&layer, req("/", &[("x-api-key", "sk-live-secret")])).await;
    let h = |n: &str| res.headers()[n].to_str().unwrap().to_owned();
    assert_eq!(
        h("ratelimit-policy"),
        r#""per-key";q=600;w=60;tollgate-burst=50"#
    );
    assert_eq!(h("ratelimit"), r#""per-key";r=49;t=1"#);
    for (_, v) in res.headers() {
        let v = v.to_str().unwrap();
        assert!(!v.contains("pk=") && !v.contains("secret"), "{v}");
    }
}
