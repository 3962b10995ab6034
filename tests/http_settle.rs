//! Settling a charge after the response, over real HTTP on loopback: refund-on-success for a
//! login route, charge-from-header for a token-metered route (into a capped debt, with the
//! exact Retry-After it leaves), unreadable costs ignored and counted, a panicking settle
//! function contained. The limiters run on `ManualClock`s; nothing sleeps.
#![cfg(all(feature = "axum", not(loom)))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::http::{RateLimitLayer, Settle};
use tollgate::{ManualClock, RateLimiter};

const STEP: Duration = Duration::from_secs(10);

/// `/login/ok` answers 200, `/login/bad` 401; `/tokens/N` answers 200 with `x-tokens-used: N`.
async fn app(uri: Uri) -> Response {
    let path = uri.path();
    if path == "/login/bad" {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let mut res = "ok".into_response();
    if let Some(n) = path.strip_prefix("/tokens/") {
        let v = HeaderValue::from_str(n).unwrap();
        res.headers_mut().insert("x-tokens-used", v);
    }
    res
}

async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let router = axum::Router::new().fallback(app).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

async fn get(addr: SocketAddr, path: &str) -> (u16, HeaderMap) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(format!("http://{addr}{path}"))
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(STEP, client.request(req))
        .await
        .expect("bounded")
        .unwrap();
    (res.status().as_u16(), res.headers().clone())
}

fn limiter(quota: &str, clock: &ManualClock, debt: Duration) -> Arc<RateLimiter> {
    Arc::new(
        RateLimiter::builder(quota.parse().unwrap())
            .clock(clock.clone())
            .max_debt(debt)
            .build(),
    )
}

#[tokio::test]
async fn a_login_route_counts_only_failures() {
    let clock = ManualClock::new();
    let lim = limiter("2/min", &clock, Duration::ZERO);
    let layer = RateLimitLayer::builder()
        .limit("login-failures", Arc::clone(&lim))
        .settle(Settle::refund_on_success())
        .build()
        .unwrap();
    let stats = layer.clone();
    let addr = serve(layer).await;
    for _ in 0..5 {
        assert_eq!(
            get(addr, "/login/ok").await.0,
            200,
            "successes cost nothing"
        );
    }
    assert_eq!(get(addr, "/login/bad").await.0, 401);
    assert_eq!(get(addr, "/login/bad").await.0, 401);
    let (status, headers) = get(addr, "/login/ok").await;
    assert_eq!(status, 429, "two failures spent the limit");
    assert_eq!(headers["retry-after"], "30");
    let s = stats.stats();
    assert_eq!((s.settle_refunds, s.allowed, s.denied), (5, 7, 1));
}

#[tokio::test]
async fn a_token_route_is_charged_what_the_response_reports() {
    let clock = ManualClock::new();
    let lim = limiter("10/s", &clock, Duration::from_secs(5));
    let layer = RateLimitLayer::builder()
        .limit("tokens", Arc::clone(&lim))
        .settle(Settle::charge_from_header(HeaderName::from_static(
            "x-tokens-used",
        )))
        .build()
        .unwrap();
    let stats = layer.clone();
    let addr = serve(layer).await;
    // Unreadable costs: ignored, counted, the request's own unit stands.
    for bad in ["-5", "abc", "1e3", "99999999999999999999999"] {
        assert_eq!(get(addr, &format!("/tokens/{bad}")).await.0, 200, "{bad}");
    }
    assert_eq!(stats.stats().settle_unreadable, 4);
    lim.reset();
    // 1 unit for the request, 29 more from the response: 30 units, 2 s past a drained cell.
    assert_eq!(get(addr, "/tokens/29").await.0, 200);
    assert_eq!(stats.stats().settle_charges, 1);
    let (status, headers) = get(addr, "/tokens/0").await;
    assert_eq!(status, 429, "in debt");
    assert_eq!(headers["retry-after"], "3", "2.1 s, rounded up");
    clock.advance(Duration::from_millis(2_100));
    assert_eq!(get(addr, "/tokens/0").await.0, 200, "the debt is paid off");
    // A charge beyond the cap stops at it: 5 s of debt at most.
    lim.reset();
    assert_eq!(get(addr, "/tokens/1000000").await.0, 200);
    match lim.check() {
        tollgate::Verdict::Deny(d) => assert_eq!(d.retry_after(), Duration::from_millis(5_100)),
        other => panic!("capped debt: {other:?}"),
    }
}

#[tokio::test]
async fn a_panicking_settle_function_keeps_the_charge() {
    let clock = ManualClock::new();
    let lim = limiter("1/min", &clock, Duration::ZERO);
    let layer = RateLimitLayer::builder()
        .limit("one", Arc::clone(&lim))
        .settle(|status, _: &HeaderMap| {
            if status.is_success() {
                panic!("a settle function's bug");
            }
            Settle::Keep
        })
        .build()
        .unwrap();
    let stats = layer.clone();
    let addr = serve(layer).await;
    assert_eq!(get(addr, "/login/ok").await.0, 200, "the service stays up");
    assert_eq!(get(addr, "/login/ok").await.0, 429, "the charge stood");
    assert_eq!(stats.stats().settle_panics, 1);
}
