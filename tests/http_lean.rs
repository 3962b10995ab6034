//! The layer's lean path (one built-in in-memory limit keyed by a header or globally, one
//! unit per request) answers exactly as the general path does: the same statuses, fields,
//! bodies, extensions, layer counters and limiter state, for well-formed keys, missing,
//! malformed and repeated ones, attempt headers (valid and malformed), denials, gRPC,
//! pass-throughs and the success-rate feed, in every header mode. Each case runs one request
//! sequence through a layer that takes the lean path and through a twin that cannot (its
//! extractor is a closure around the same `HeaderKey`), each with its own limiter on one
//! shared `ManualClock`; and the lean layer again with `own_body()` (responses keep the inner
//! service's body type), against the same wrapped twin. Nothing sleeps.
#![cfg(all(feature = "tower", not(loom)))]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Empty, Full};
use tollgate::http::{
    BodyMode, HeaderKey, HeaderMode, KeyExtractor, PassedThrough, RateLimitLayer,
};
use tollgate::safety::{FaultDetector, SuccessRate};
use tollgate::{KeyedRateLimiter, ManualClock, PassReason, RateLimiter};
use tower::{Layer, ServiceExt};

async fn inner(req: Request<Empty<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    let status = if req.uri().path() == "/fail" {
        500
    } else {
        200
    };
    let mut res = Response::new(Full::new(Bytes::from_static(b"ok")));
    *res.status_mut() = StatusCode::from_u16(status).expect("a valid status"); // test
    Ok(res)
}

/// What a client (and an operator) sees of one response.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    headers: Vec<(String, String)>,
    body: Bytes,
    passed: Option<(String, Option<PassReason>)>,
}

async fn see<M>(layer: &RateLimitLayer<M>, req: Request<Empty<Bytes>>) -> Seen
where
    M: BodyMode<Full<Bytes>>,
    M::Body: Body<Data = Bytes>,
    <M::Body as Body>::Error: std::fmt::Debug,
{
    let res = layer
        .layer(tower::service_fn(inner))
        .oneshot(req)
        .await
        .expect("the inner service never fails"); // test
    let mut headers: Vec<(String, String)> = res
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    headers.sort();
    let passed = res
        .extensions()
        .get::<PassedThrough>()
        .map(|p| (p.policy().to_owned(), p.reason()));
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.expect("a body").to_bytes(); // test
    Seen {
        status,
        headers,
        body,
        passed,
    }
}

fn x_api_key() -> HeaderName {
    HeaderName::from_static("x-api-key")
}

/// The same extractor the general way: a closure is not one the lean path knows.
fn general_key() -> impl KeyExtractor {
    let h = HeaderKey::new(x_api_key());
    move |parts: &Parts| h.extract(parts)
}

/// The requests of every case: keys rotating, missing, empty, malformed, repeated, too
/// long, attempt headers (valid, malformed, repeated), gRPC, and a failing route.
fn requests() -> Vec<(Vec<(&'static str, String)>, &'static str)> {
    let k = |s: &str| ("x-api-key", s.to_owned());
    let mut out = Vec::new();
    for i in 0..6 {
        out.push((vec![k(&format!("key-{}", i % 3))], "/"));
    }
    out.push((vec![], "/"));
    out.push((vec![k("")], "/"));
    out.push((vec![k("has space")], "/"));
    out.push((vec![k("a"), k("b")], "/"));
    out.push((vec![k(&"x".repeat(300))], "/"));
    out.push((vec![k("key-0"), ("x-envoy-attempt-count", "2".into())], "/"));
    out.push((vec![k("key-1"), ("tollgate-attempt", "0".into())], "/"));
    out.push((vec![k("key-1"), ("tollgate-attempt", "x".into())], "/"));
    out.push((
        vec![k("key-2"), ("content-type", "application/grpc".into())],
        "/",
    ));
    out.push((vec![k("key-0")], "/fail"));
    out.push((vec![k("key-0"), ("x-other", "1".into())], "/"));
    out
}

fn build(r: &[(&'static str, String)], path: &str) -> Request<Empty<Bytes>> {
    let mut b = Request::get(path);
    for (name, value) in r {
        b = b.header(*name, value.as_str());
    }
    b.body(Empty::new()).expect("a valid request") // test
}

/// Runs the requests through both layers, three rounds with the clock moving between them,
/// and compares everything seen.
async fn same<M>(lean: &RateLimitLayer<M>, general: &RateLimitLayer, clock: &ManualClock)
where
    M: BodyMode<Full<Bytes>>,
    M::Body: Body<Data = Bytes>,
    <M::Body as Body>::Error: std::fmt::Debug,
{
    assert!(format!("{lean:?}").contains("lean: true"), "{lean:?}");
    assert!(
        format!("{general:?}").contains("lean: false"),
        "{general:?}"
    );
    for round in 0..3 {
        for (i, (headers, path)) in requests().iter().enumerate() {
            let a = see(lean, build(headers, path)).await;
            let b = see(general, build(headers, path)).await;
            assert_eq!(a, b, "round {round}, request {i}: {headers:?}");
        }
        clock.advance(Duration::from_millis(700));
    }
    assert_eq!(lean.stats(), general.stats());
}

fn keyed(clock: &ManualClock) -> Arc<KeyedRateLimiter<String>> {
    Arc::new(
        KeyedRateLimiter::<String>::builder("2/s".parse().expect("a quota")) // test
            .clock(clock)
            .build(),
    )
}

#[tokio::test]
async fn a_keyed_limit_answers_as_the_general_path_in_every_header_mode() {
    for mode in [HeaderMode::Ietf, HeaderMode::Legacy, HeaderMode::Off] {
        let clock = ManualClock::new();
        let (a, b) = (keyed(&clock), keyed(&clock));
        let lean = RateLimitLayer::builder()
            .key(HeaderKey::new(x_api_key()))
            .headers(mode)
            .limit("per-key", Arc::clone(&a))
            .build()
            .expect("a valid layer"); // test
        let general = RateLimitLayer::builder()
            .key(general_key())
            .headers(mode)
            .limit("per-key", Arc::clone(&b))
            .build()
            .expect("a valid layer"); // test
        same(&lean, &general, &clock).await;
        // The same through services that keep the inner service's body type.
        same(&lean.clone().own_body(), &general, &clock).await;
        assert_eq!(a.len(), b.len(), "{mode:?}");
        assert_eq!(a.stats(), b.stats(), "{mode:?}");
    }
}

#[tokio::test]
async fn a_quota_change_and_the_success_rate_feed_are_seen_the_same_way() {
    let clock = ManualClock::new();
    let (a, b) = (keyed(&clock), keyed(&clock));
    let slo = || {
        Arc::new(
            SuccessRate::builder()
                .tiers(["free"])
                .build()
                .expect("an SLO"),
        )
    }; // test
    let (sa, sb) = (slo(), slo());
    let lean = RateLimitLayer::builder()
        .key(HeaderKey::new(x_api_key()))
        .limit("per-key", Arc::clone(&a))
        .success_rate(Arc::clone(&sa))
        .build()
        .expect("a valid layer"); // test
    let general = RateLimitLayer::builder()
        .key(general_key())
        .limit("per-key", Arc::clone(&b))
        .success_rate(Arc::clone(&sb))
        .build()
        .expect("a valid layer"); // test
    same(&lean, &general, &clock).await;
    // The layer's `RateLimit-Policy` was written at build: a changed quota must show.
    for l in [&a, &b] {
        l.set_quota("5/s".parse().expect("a quota")); // test
    }
    same(&lean, &general, &clock).await;
    assert_eq!(sa.snapshot(), sb.snapshot());
}

#[tokio::test]
async fn a_direct_limit_with_a_forced_pass_through_answers_the_same() {
    let clock = ManualClock::new();
    let direct = |d: &FaultDetector| {
        Arc::new(
            RateLimiter::builder("3/s".parse().expect("a quota")) // test
                .clock(&clock)
                .detector(d.clone())
                .build(),
        )
    };
    let (da, db) = (FaultDetector::new(), FaultDetector::new());
    let (a, b) = (direct(&da), direct(&db));
    let lean = RateLimitLayer::builder()
        .limit("global", Arc::clone(&a))
        .build()
        .expect("a valid layer"); // test
    let general = RateLimitLayer::builder()
        .key(|_: &Parts| Ok("global".to_owned()))
        .limit("global", Arc::clone(&b))
        .build()
        .expect("a valid layer"); // test
    same(&lean, &general, &clock).await;
    for d in [&da, &db] {
        d.force_pass_through(PassReason::Forced, Duration::from_secs(3600));
    }
    same(&lean, &general, &clock).await;
    // And back to enforcing: the pass-through's end is seen the same way.
    for d in [&da, &db] {
        d.clear_override();
    }
    same(&lean, &general, &clock).await;
}
