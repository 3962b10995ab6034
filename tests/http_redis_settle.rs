//! The layer's settle with a `SharedRateLimiter` as its limit: real axum servers and a real
//! hyper client on loopback, a real `redis-server`, a `ManualClock`. The shared limiter
//! settles from a task of its own, so each test waits (bounded) for its stats to show the
//! settle before the next request.
#![cfg(all(feature = "tower", feature = "redis", not(loom)))]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use redis_server::{prefix, shared};
use tollgate::http::{HeaderKey, RateLimitLayer, Settle};
use tollgate::redis::{SharedRateLimiter, SharedStats};
use tollgate::ManualClock;

async fn serve(layer: RateLimitLayer) -> SocketAddr {
    // `/ok` answers 200, `/bad` 401, `/tokens` 200 reporting 19 tokens used.
    let router = axum::Router::new()
        .fallback(|uri: http::Uri| async move {
            let mut res = Response::new(axum::body::Body::from("done"));
            match uri.path() {
                "/bad" => *res.status_mut() = StatusCode::UNAUTHORIZED,
                "/tokens" => {
                    res.headers_mut()
                        .insert("x-tokens-used", http::HeaderValue::from_static("19"));
                }
                _ => {}
            }
            res
        })
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

async fn get(
    client: &Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    path: &str,
) -> (StatusCode, http::HeaderMap) {
    let req = Request::get(format!("http://{addr}{path}"))
        .header("x-api-key", "k")
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), client.request(req))
        .await
        .expect("answered within 10 s")
        .unwrap();
    let (parts, body) = res.into_parts();
    let _ = body.collect().await.unwrap();
    (parts.status, parts.headers)
}

/// Waits (at most 10 s) until `done(stats)` holds.
async fn until(lim: &SharedRateLimiter, done: impl Fn(&SharedStats) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !done(&lim.stats()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the settle never landed: {:?}",
            lim.stats()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn limiter(url: &str, test: &str, quota: &str, clock: &ManualClock) -> SharedRateLimiter {
    SharedRateLimiter::builder(quota.parse().unwrap(), url)
        .prefix(&prefix(test))
        .policy("per-key")
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .max_debt(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_login_limit_counts_only_failures() {
    let Some(r) = shared("http_redis_settle_login") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = limiter(&r.url, "http_redis_settle_login", "2/min", &clock);
    let layer = RateLimitLayer::builder()
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
        .limit("logins", lim.clone())
        .settle(Settle::refund_on_success())
        .build()
        .unwrap();
    let (addr, c) = (serve(layer).await, client());
    for i in 1..=5 {
        assert_eq!(get(&c, addr, "/ok").await.0, StatusCode::OK, "success {i}");
        until(&lim, |s| s.refunds == i).await;
    }
    assert_eq!(get(&c, addr, "/bad").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get(&c, addr, "/bad").await.0, StatusCode::UNAUTHORIZED);
    let (status, headers) = get(&c, addr, "/ok").await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "two failures spend the burst"
    );
    assert_eq!(headers["retry-after"], "30");
    assert_eq!(lim.stats().settles_lost, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_token_limit_is_charged_into_debt_by_the_response() {
    let Some(r) = shared("http_redis_settle_tokens") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = limiter(&r.url, "http_redis_settle_tokens", "10/s", &clock);
    let layer = RateLimitLayer::builder()
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
        .limit("tokens", lim.clone())
        .settle(Settle::charge_from_header(HeaderName::from_static(
            "x-tokens-used",
        )))
        .build()
        .unwrap();
    let (addr, c) = (serve(layer).await, client());
    assert_eq!(get(&c, addr, "/tokens").await.0, StatusCode::OK);
    until(&lim, |s| s.charges == 1).await;
    // 1 + 19 units against a burst of 10: one second of debt, 1.1 s until the next unit.
    let (status, headers) = get(&c, addr, "/ok").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "2", "1.1 s, rounded up");
    clock.advance(Duration::from_millis(1_100));
    assert_eq!(
        get(&c, addr, "/ok").await.0,
        StatusCode::OK,
        "the debt is paid"
    );
}
