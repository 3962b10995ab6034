//! Exemptions over real HTTP on loopback: a request the layer exempts (a predicate, an
//! address range, the CORS-preflight preset) goes straight to the inner service — no limit
//! charged, no rate-limit fields — on the lean path and the general one; a forged
//! forwarded header from an untrusted peer exempts nothing; a panicking predicate is
//! contained. The limiters run on `ManualClock`s; nothing sleeps.
#![cfg(all(feature = "tower", not(loom)))]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Method, Request};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::http::{ForwardedHeader, ForwardedIp, KeyError, RateLimitLayer};
use tollgate::{KeyedRateLimiter, ManualClock, RateLimiter};

/// Every network step is bounded.
const STEP: Duration = Duration::from_secs(10);

/// The fields an exempt response must not carry.
const FIELDS: [&str; 3] = ["ratelimit", "ratelimit-policy", "retry-after"];

/// Serves `layer` in front of an "ok" for every method and path on 127.0.0.1:0, with the
/// peer address in each request (axum's `ConnectInfo`).
async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let router = axum::Router::new().fallback(|| async { "ok" }).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    addr
}

/// One request; its status and headers.
async fn send(
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, HeaderMap) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = tokio::time::timeout(STEP, client.request(req.body(Empty::new()).unwrap()))
        .await
        .expect("bounded")
        .unwrap();
    (res.status().as_u16(), res.headers().clone())
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, HeaderMap) {
    send(addr, Method::GET, path, headers).await
}

fn assert_no_fields(headers: &HeaderMap, case: &str) {
    for f in FIELDS {
        assert!(!headers.contains_key(f), "{case}: {f} in {headers:?}");
    }
}

fn ratelimit(headers: &HeaderMap) -> &str {
    headers
        .get("ratelimit")
        .expect("a RateLimit field")
        .to_str()
        .unwrap()
}

fn health(parts: &Parts) -> bool {
    parts.uri.path() == "/health"
}

#[tokio::test]
async fn an_exempt_health_route_stays_up_and_leaves_the_limit_untouched_on_both_paths() {
    // The lean path: one in-memory limit, the global key. The general path: a key of the
    // application's own (a closure), which the lean path does not cover.
    let lean = RateLimitLayer::builder()
        .limit(
            "global",
            RateLimiter::builder("1/min".parse().unwrap())
                .clock(ManualClock::new())
                .build(),
        )
        .exempt(health)
        .build()
        .unwrap();
    let key = |_: &Parts| -> Result<String, KeyError> { Ok("everyone".to_owned()) };
    let general = RateLimitLayer::builder()
        .key(key)
        .limit(
            "global",
            KeyedRateLimiter::<String>::builder("1/min".parse().unwrap())
                .clock(ManualClock::new())
                .build(),
        )
        .exempt(health)
        .build()
        .unwrap();
    for (name, layer) in [("lean", lean), ("general", general)] {
        let addr = serve(layer.clone()).await;
        // Exempt requests before the limit is used take nothing from it…
        for _ in 0..3 {
            let (status, h) = get(addr, "/health", &[]).await;
            assert_eq!(status, 200, "{name}");
            assert_no_fields(&h, name);
        }
        // …so the first limited request still finds the whole budget.
        let (status, h) = get(addr, "/api", &[]).await;
        assert_eq!(status, 200, "{name}");
        assert!(ratelimit(&h).contains(";r=0;"), "{name}: {h:?}");
        // Spent: the health route stays 200, everything else is 429.
        for _ in 0..3 {
            let (status, h) = get(addr, "/health", &[]).await;
            assert_eq!(status, 200, "{name}");
            assert_no_fields(&h, name);
        }
        let (status, h) = get(addr, "/api", &[]).await;
        assert_eq!(status, 429, "{name}");
        assert!(ratelimit(&h).contains(";r=0;"), "{name}: {h:?}");
        assert!(h.contains_key("retry-after"), "{name}");
        let s = layer.stats();
        assert_eq!(
            (s.exempt, s.allowed, s.denied, s.exempt_panics),
            (6, 1, 1, 0),
            "{name}: {s:?}"
        );
    }
}

#[tokio::test]
async fn exempt_ips_read_the_client_as_the_key_does_and_ignore_a_forged_chain() {
    let per_ip = || {
        KeyedRateLimiter::<String>::builder("1/min".parse().unwrap())
            .clock(ManualClock::new())
            .build()
    };
    let range = |s: &str| s.parse().unwrap();
    // Loopback is not a trusted proxy: the peer itself is the client.
    let untrusted = |exempt: &str| {
        RateLimitLayer::builder()
            .key(ForwardedIp::trusting([range("10.0.0.0/8")]))
            .limit("per-ip", per_ip())
            .exempt_ips([range(exempt)])
            .build()
            .unwrap()
    };

    // A direct loopback peer in the range is exempt, whatever its header claims.
    let layer = untrusted("127.0.0.0/8");
    let addr = serve(layer.clone()).await;
    for xff in ["", "198.51.100.7"] {
        for _ in 0..2 {
            let (status, h) = get(addr, "/", &[("x-forwarded-for", xff)]).await;
            assert_eq!(status, 200, "{xff:?}");
            assert_no_fields(&h, "loopback peer");
        }
    }
    assert_eq!((layer.stats().exempt, layer.stats().allowed), (4, 0));

    // An untrusted peer claiming an exempt address is judged as itself.
    let layer = untrusted("198.51.100.0/24");
    let addr = serve(layer.clone()).await;
    let forged = [("x-forwarded-for", "198.51.100.7")];
    assert_eq!(get(addr, "/", &forged).await.0, 200);
    assert_eq!(get(addr, "/", &forged).await.0, 429);
    let forged = [("forwarded", "for=198.51.100.7")];
    assert_eq!(get(addr, "/", &forged).await.0, 429);
    let s = layer.stats();
    assert_eq!((s.exempt, s.allowed, s.denied), (0, 1, 2), "{s:?}");

    // The same header through a trusted proxy (loopback trusted, `Forwarded` read) names
    // the client, who is exempt; a client outside the range is limited.
    let layer = RateLimitLayer::builder()
        .exempt_ips([range("198.51.100.0/24")])
        .key(ForwardedIp::trusting([range("127.0.0.0/8")]).header(ForwardedHeader::Forwarded))
        .limit("per-ip", per_ip())
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    for _ in 0..2 {
        let (status, h) = get(addr, "/", &[("forwarded", "for=198.51.100.7")]).await;
        assert_eq!(status, 200);
        assert_no_fields(&h, "behind the proxy");
    }
    let other = [("forwarded", "for=203.0.113.9")];
    assert_eq!(get(addr, "/", &other).await.0, 200);
    assert_eq!(get(addr, "/", &other).await.0, 429);
    // A chain the key cannot read exempts nothing either (a 400, as the key answers it).
    assert_eq!(get(addr, "/", &[("forwarded", "for=unknown")]).await.0, 400);
    let s = layer.stats();
    assert_eq!((s.exempt, s.allowed, s.denied), (2, 1, 1), "{s:?}");
}

#[tokio::test]
async fn the_preflight_preset_exempts_options_with_a_request_method_only() {
    let layer = RateLimitLayer::builder()
        .limit(
            "global",
            RateLimiter::builder("1/min".parse().unwrap())
                .clock(ManualClock::new())
                .build(),
        )
        .exempt_preflight()
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    let preflight = [
        ("origin", "https://app.example"),
        ("access-control-request-method", "POST"),
    ];
    let bare = [("origin", "https://app.example")];
    assert_eq!(send(addr, Method::OPTIONS, "/", &bare).await.0, 200);
    for _ in 0..3 {
        let (status, h) = send(addr, Method::OPTIONS, "/", &preflight).await;
        assert_eq!(status, 200);
        assert_no_fields(&h, "preflight");
    }
    assert_eq!(send(addr, Method::OPTIONS, "/", &bare).await.0, 429);
    // The header on another method is no preflight.
    let (status, _) = send(addr, Method::POST, "/", &preflight).await;
    assert_eq!(status, 429);
    let s = layer.stats();
    assert_eq!((s.exempt, s.allowed, s.denied), (3, 1, 2), "{s:?}");
}

#[tokio::test]
async fn a_panicking_predicate_is_contained_and_the_request_judged() {
    let layer = RateLimitLayer::builder()
        .limit(
            "global",
            RateLimiter::builder("1/min".parse().unwrap())
                .clock(ManualClock::new())
                .build(),
        )
        .exempt(|p: &Parts| {
            assert_ne!(p.uri.path(), "/boom", "a predicate's bug");
            p.uri.path() == "/health"
        })
        .exempt_preflight()
        .build()
        .unwrap();
    let addr = serve(layer.clone()).await;
    assert_eq!(get(addr, "/boom", &[]).await.0, 200);
    assert_eq!(get(addr, "/boom", &[]).await.0, 429);
    // The service is still up, and the predicate still exempts.
    assert_eq!(get(addr, "/health", &[]).await.0, 200);
    let s = layer.stats();
    assert_eq!(
        (s.exempt, s.exempt_panics, s.allowed, s.denied),
        (1, 2, 1, 1),
        "{s:?}"
    );
}
