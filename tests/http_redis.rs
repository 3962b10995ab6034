//! The layer with a `SharedRateLimiter` as its policy source: real axum servers and a real
//! hyper client on loopback, a real `redis-server` (`TOLLGATE_REDIS_URL`, or one started for
//! the test; see `common/redis_server.rs`). The limiters run on a `ManualClock`; nothing
//! sleeps.
#![cfg(all(feature = "tower", feature = "redis", not(loom)))]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use redis_server::{prefix, shared, Redis};
use tollgate::http::{HeaderKey, RateLimitLayer};
use tollgate::redis::{FailurePolicy, SharedRateLimiter};
use tollgate::{ManualClock, Quota};

fn api_key() -> HeaderKey {
    HeaderKey::new(HeaderName::from_static("x-api-key"))
}

fn limiter(url: &str, prefix: &str, quota: Quota, clock: &ManualClock) -> SharedRateLimiter {
    SharedRateLimiter::builder(quota, url)
        .prefix(prefix)
        .policy("per-key")
        .clock(clock.clone())
        // A loaded test machine: room per call; this is not a latency test.
        .deadline(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// Serves `layer` around an `ok` handler on a fresh loopback port.
async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let router = axum::Router::new().fallback(|| async { "ok" }).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: serde_json::Value,
}

async fn get(client: &Client<HttpConnector, Empty<Bytes>>, addr: SocketAddr, key: &str) -> Reply {
    let req = Request::get(format!("http://{addr}/items"))
        .header("x-api-key", key)
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("answered within 10 s")
        .unwrap();
    let (parts, body) = res.into_parts();
    let bytes = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .unwrap()
        .unwrap()
        .to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    }
}

fn header<'a>(r: &'a Reply, name: &str) -> &'a str {
    r.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

fn server(test: &str) -> Option<Redis> {
    shared(test)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_passes_then_429_with_retry_after_and_ratelimit_fields() {
    let Some(r) = server("http_burst") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = limiter(
        &r.url,
        &prefix("http_burst"),
        "3/min".parse().unwrap(),
        &clock,
    );
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("per-key", lim)
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    let c = client();
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let ok = get(&c, addr, "alice").await;
        assert_eq!(ok.status, StatusCode::OK);
        assert_eq!(header(&ok, "ratelimit-policy"), r#""per-key";q=3;w=60"#);
        remaining.push(header(&ok, "ratelimit").to_owned());
    }
    assert_eq!(
        remaining,
        [
            r#""per-key";r=2;t=20"#,
            r#""per-key";r=1;t=40"#,
            r#""per-key";r=0;t=60"#
        ]
    );
    let denied = get(&c, addr, "alice").await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&denied, "retry-after"), "20");
    assert_eq!(header(&denied, "ratelimit"), r#""per-key";r=0;t=20"#);
    assert_eq!(header(&denied, "ratelimit-policy"), r#""per-key";q=3;w=60"#);
    assert_eq!(denied.body["reason"], "quota");
    assert_eq!(denied.body["policy"], "per-key");
    // Another key has its own limit.
    assert_eq!(get(&c, addr, "bob").await.status, StatusCode::OK);
    // 20 s later (client clock) one unit is back, and only one.
    clock.advance(Duration::from_secs(20));
    assert_eq!(get(&c, addr, "alice").await.status, StatusCode::OK);
    assert_eq!(
        get(&c, addr, "alice").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let s = layer.stats();
    assert_eq!((s.allowed, s.denied, s.source_errors), (5, 2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateway_instances_share_one_limit_through_redis() {
    let Some(r) = server("http_two") else {
        return;
    };
    let p = prefix("http_two");
    let clock = ManualClock::new();
    let burst = 5;
    let quota: Quota = "5/min".parse().unwrap();
    // Two instances: separate limiters (separate connections, deny caches), separate layers,
    // separate servers, the same Redis and prefix.
    let layers: Vec<RateLimitLayer> = (0..2)
        .map(|_| {
            RateLimitLayer::builder()
                .key(api_key())
                .limit("per-key", limiter(&r.url, &p, quota, &clock))
                .build()
                .unwrap()
        })
        .collect();
    let addrs = [
        serve(layers[0].clone()).await,
        serve(layers[1].clone()).await,
    ];
    let c = client();
    let mut allowed = [0u64; 2];
    for i in 0..4 * burst {
        let which = i % 2;
        let reply = get(&c, addrs[which], "carol").await;
        match reply.status {
            StatusCode::OK => allowed[which] += 1,
            StatusCode::TOO_MANY_REQUESTS => assert!(reply.headers.contains_key("retry-after")),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(
        allowed.iter().sum::<u64>(),
        burst as u64,
        "the aggregate is one burst, not one per instance: {allowed:?}"
    );
    assert!(
        allowed.iter().all(|&a| a > 0),
        "both instances served: {allowed:?}"
    );
    let (a, b) = (layers[0].stats(), layers[1].stats());
    assert_eq!(a.allowed + b.allowed, burst as u64);
    assert_eq!(a.denied + b.denied, 3 * burst as u64);

    // Concurrent requests to both instances at once: still one burst in aggregate.
    let fresh = "dave";
    let mut tasks = Vec::new();
    for i in 0..4 * burst {
        let c = c.clone();
        let addr = addrs[i % 2];
        tasks.push(tokio::spawn(
            async move { get(&c, addr, fresh).await.status },
        ));
    }
    let mut ok = 0;
    for t in tasks {
        if t.await.unwrap() == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, burst, "concurrent requests across instances");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_answers_by_the_failure_policy() {
    // A loopback port nothing listens on (bound, then released): connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}/");
    let clock = ManualClock::new();
    let build = |policy: FailurePolicy| {
        SharedRateLimiter::builder("3/min".parse().unwrap(), &url)
            .policy("per-key")
            .clock(clock.clone())
            .deadline(Duration::from_secs(2))
            .failure_policy(policy)
            .build()
            .unwrap()
    };
    let c = client();

    let open = RateLimitLayer::builder()
        .key(api_key())
        .limit("per-key", build(FailurePolicy::Open))
        .build()
        .unwrap();
    let addr = serve(open.clone()).await;
    for _ in 0..4 {
        assert_eq!(get(&c, addr, "erin").await.status, StatusCode::OK);
    }
    let s = open.stats();
    assert_eq!((s.passed_through, s.denied, s.source_errors), (4, 0, 0));

    let closed = RateLimitLayer::builder()
        .key(api_key())
        .limit("per-key", build(FailurePolicy::Closed))
        .build()
        .unwrap();
    let addr = serve(closed.clone()).await;
    let denied = get(&c, addr, "erin").await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.body["reason"], "backend_unavailable");
    assert!(denied.headers.contains_key("retry-after"));
    assert_eq!(closed.stats().denied, 1);
}
