//! A shared limiter's faults go through its `FailurePolicy`, in the layer too: a
//! reply the script never gives and a script error are backend faults (`Closed` never passes
//! a request through), and a key over `SharedRateLimiter::MAX_KEY_BYTES` is the client's
//! error, answered by the layer before any call to Redis.
//!
//! The unexpected reply comes from a fake server (a proxy in between answering nonsense: a real
//! server runs the real script, which never does); the script error and the long key use a
//! real `redis-server` (see `common/redis_server.rs`). Limiters run on `ManualClock`s.
#![cfg(all(feature = "tower", feature = "redis", not(loom)))]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use redis_server::{connection, own, prefix, shared};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate::http::{HeaderKey, OnMissingKey, PassedThrough, RateLimitLayer};
use tollgate::redis::{BreakerConfig, FailurePolicy, SharedRateLimiter};
use tollgate::{Check, DenyReason, ManualClock, PassReason, Quota, Shadow, Verdict};
use tower::{Layer, ServiceExt};

type Res = Response<tollgate::http::RateLimitBody<Full<Bytes>>>;

const POLICIES: [FailurePolicy; 3] = [
    FailurePolicy::Open,
    FailurePolicy::Closed,
    FailurePolicy::Local,
];

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// A limiter whose every check reaches the server: the breaker never opens, and the
/// deadline leaves room on a loaded machine (these are not latency tests).
fn limiter(url: &str, policy: FailurePolicy, clock: &ManualClock) -> SharedRateLimiter {
    SharedRateLimiter::builder(q("10/min;burst=3"), url)
        .prefix(&prefix("policy"))
        .policy("per-key")
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .breaker(
            BreakerConfig::new()
                .consecutive_failures(u32::MAX)
                .error_ratio(2.0, 1),
        )
        .failure_policy(policy)
        .build()
        .unwrap()
}

fn layer(lim: &SharedRateLimiter) -> RateLimitLayer {
    RateLimitLayer::builder()
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")).max_len(4096))
        .limit("per-key", lim.clone())
        .build()
        .unwrap()
}

async fn inner(_: Request<Empty<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

async fn get(layer: &RateLimitLayer, key: Option<&str>) -> Res {
    let mut req = Request::get("/items");
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    let fut = layer
        .layer(tower::service_fn(inner))
        .oneshot(req.body(Empty::new()).unwrap());
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .expect("answered within 20 s")
        .unwrap()
}

async fn reason(res: Res) -> serde_json::Value {
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    problem["reason"].clone()
}

fn passed(res: &Res) -> Option<Option<PassReason>> {
    res.extensions().get::<PassedThrough>().map(|p| p.reason())
}

/// What the failure policy answers, as a verdict (`Local`: this node's share, which allows or
/// denies).
fn fallback_verdict(policy: FailurePolicy, v: &Verdict) -> bool {
    match (policy, v) {
        (FailurePolicy::Open, Verdict::PassThrough(p)) => {
            (p.reason(), p.shadow()) == (PassReason::BackendUnavailable, Shadow::Unknown)
        }
        (FailurePolicy::Closed, Verdict::Deny(d)) => d.reason() == DenyReason::BackendUnavailable,
        (FailurePolicy::Local, Verdict::PassThrough(p)) => {
            (p.reason(), p.shadow()) == (PassReason::BackendUnavailable, Shadow::Allow)
        }
        (FailurePolicy::Local, Verdict::Deny(d)) => d.reason() == DenyReason::LocalShare,
        _ => false,
    }
}

/// A server speaking just enough RESP: `+OK` to every command (the client's connection
/// setup), `reply` to `EVALSHA`. Returns its URL and how many `EVALSHA`s it answered.
async fn fake_redis(reply: &'static [u8]) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    let evalshas = Arc::new(AtomicU64::new(0));
    let count = evalshas.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some((name, used)) = command(&buf) {
                        buf.drain(..used);
                        let answer: &[u8] = if name.eq_ignore_ascii_case(b"EVALSHA") {
                            count.fetch_add(1, Ordering::Relaxed);
                            reply
                        } else {
                            b"+OK\r\n"
                        };
                        if sock.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (url, evalshas)
}

/// The first complete RESP command in `buf` (an array of bulk strings): its name, and the
/// bytes it takes.
fn command(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
        let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
        Some((n, end + 2))
    }
    let (n, mut at) = line(buf, 0)?;
    let mut name = None;
    for _ in 0..n {
        let (len, start) = line(buf, at)?;
        if buf.len() < start + len + 2 {
            return None;
        }
        name.get_or_insert_with(|| buf[start..start + len].to_vec());
        at = start + len + 2;
    }
    Some((name?, at))
}

/// `{3, 0}`: "the script refused its arguments", which this client's script never answers.
const NONSENSE: &[u8] = b"*2\r\n:3\r\n:0\r\n";

/// A former bug: the script's unexpected reply was `Err(BackendError::Protocol)`, which the layer
/// passed through whatever the policy. It is a backend fault: the policy answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unexpected_script_reply_is_answered_by_the_failure_policy() {
    let (url, evalshas) = fake_redis(NONSENSE).await;
    let clock = ManualClock::new();
    for policy in POLICIES {
        let lim = limiter(&url, policy, &clock);
        let checked = lim.check_key("k").await;
        let with = lim.check_key_with("k", Check::cost(2)).await;
        let peeked = lim.peek_key("k").await;
        for v in [checked, with, peeked] {
            let v = v.unwrap_or_else(|e| panic!("{policy:?}: an error, not a verdict: {e}"));
            assert!(fallback_verdict(policy, &v), "{policy:?}: {v:?}");
        }
        let s = lim.stats();
        assert_eq!(
            (s.round_trips, s.errors, s.timeouts, s.fallbacks()),
            (3, 3, 0, 3),
            "{policy:?}: {s:?}"
        );
    }
    assert!(
        evalshas.load(Ordering::Relaxed) >= 9,
        "the script was called"
    );
}

/// Through the layer: `Closed` answers 429 `backend_unavailable`, never 200; `Open` passes
/// through, marked with the reason, not as a failed source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_layer_closed_never_passes_an_unexpected_reply() {
    let (url, _) = fake_redis(NONSENSE).await;
    let clock = ManualClock::new();

    let closed = layer(&limiter(&url, FailurePolicy::Closed, &clock));
    for _ in 0..3 {
        let res = get(&closed, Some("alice")).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(res.headers().contains_key("retry-after"));
        assert_eq!(reason(res).await, "backend_unavailable");
    }
    let s = closed.stats();
    assert_eq!((s.denied, s.passed_through, s.source_errors), (3, 0, 0));

    let open = layer(&limiter(&url, FailurePolicy::Open, &clock));
    let res = get(&open, Some("alice")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(passed(&res), Some(Some(PassReason::BackendUnavailable)));
    let s = open.stats();
    assert_eq!((s.passed_through, s.source_errors), (1, 0));
}

/// A real server whose script errors (a write refused under `maxmemory`: `OOM` inside the
/// script): `Closed` answers 429, `Open` passes through marked; Redis decides again once the
/// memory is back. (A key of another type does not make the script error: it reads it as an
/// empty cell and overwrites it, see `redis_faults.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_error_on_a_real_server_is_answered_by_the_failure_policy() {
    let Some(r) = own("script_error") else { return };
    let clock = ManualClock::new();
    let closed_lim = limiter(&r.url, FailurePolicy::Closed, &clock);
    let open_lim = limiter(&r.url, FailurePolicy::Open, &clock);
    let (closed, open) = (layer(&closed_lim), layer(&open_lim));
    assert_eq!(get(&closed, Some("bob")).await.status(), StatusCode::OK);
    assert_eq!(closed_lim.stats().allowed, 1, "decided by Redis");
    let mut con = connection(&r.url);
    let set = |con: &mut redis::Connection, bytes: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .query(con)
            .unwrap();
    };
    set(&mut con, "1");
    let res = get(&closed, Some("bob")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reason(res).await, "backend_unavailable");
    let res = get(&open, Some("bob")).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(passed(&res), Some(Some(PassReason::BackendUnavailable)));
    assert_eq!(closed_lim.stats().errors, 1, "{:?}", closed_lim.stats());
    assert_eq!(open_lim.stats().errors, 1, "{:?}", open_lim.stats());
    set(&mut con, "0");
    assert_eq!(get(&closed, Some("bob")).await.status(), StatusCode::OK);
    assert_eq!(closed_lim.stats().allowed, 2, "Redis decides again");
}

/// A former bug: a key over `MAX_KEY_BYTES` (512) reached the source, which answered
/// `KeyTooLong`, and the layer passed the request through unlimited. It is the client's
/// error, like the extractors' own limit: `400 malformed_key`, decided before any call, under
/// every failure policy. A key of exactly 512 bytes is still judged by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_the_backend_limit_is_a_400_before_any_call() {
    let Some(r) = shared("long_key") else { return };
    let clock = ManualClock::new();
    let max = SharedRateLimiter::MAX_KEY_BYTES;
    for policy in POLICIES {
        let lim = limiter(&r.url, policy, &clock);
        let layer = layer(&lim);
        for len in [max + 1, 4096] {
            let res = get(&layer, Some(&"k".repeat(len))).await;
            assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{policy:?}, {len}");
            assert_eq!(passed(&res), None);
            assert_eq!(reason(res).await, "malformed_key");
        }
        let s = lim.stats();
        assert_eq!((s.round_trips, s.total()), (0, 0), "{policy:?}: no call");
        let l = layer.stats();
        assert_eq!(
            (l.bad_requests, l.passed_through, l.allowed),
            (2, 0, 0),
            "{policy:?}"
        );
        let res = get(&layer, Some(&"k".repeat(max))).await;
        assert_eq!(res.status(), StatusCode::OK, "{policy:?}");
        assert_eq!(passed(&res), None, "{policy:?}: decided by Redis");
        assert_eq!((lim.stats().round_trips, lim.stats().allowed), (1, 1));
    }
}

/// With `OnMissingKey::Fallback`, a key too long for the backend goes where the extractor's
/// own malformed keys go: to the shared fallback key, so a long key buys nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_fallback_key_a_long_key_is_charged_to_it() {
    let Some(r) = shared("long_key_fallback") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = SharedRateLimiter::builder(q("1/min"), &r.url)
        .prefix(&prefix("long-key-fallback"))
        .clock(clock.clone())
        .deadline(Duration::from_secs(5))
        .failure_policy(FailurePolicy::Closed)
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder()
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")).max_len(4096))
        .on_missing_key(OnMissingKey::Fallback("anonymous".into()))
        .limit("per-key", lim.clone())
        .build()
        .unwrap();
    let long = "k".repeat(SharedRateLimiter::MAX_KEY_BYTES + 1);
    assert_eq!(get(&layer, Some(&long)).await.status(), StatusCode::OK);
    let res = get(&layer, None).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "anonymous");
    assert_eq!(reason(res).await, "quota");
    assert_eq!(
        get(&layer, Some(&long)).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let s = lim.stats();
    assert_eq!((s.allowed, s.fallbacks()), (1, 0), "{s:?}");
}
