//! Under axum, with feature `axum`, `ForwardedIp` and `PeerIp` read the connection's address
//! axum stores (`ConnectInfo<SocketAddr>`) with no extra code; served without it, every
//! request is a 500 naming the fix, counted, warned once, and charged to no key. A real axum
//! server and a real client on loopback; limiters on `ManualClock`s.
#![cfg(all(feature = "axum", not(loom)))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use tollgate::http::{ForwardedIp, PeerIp, RateLimitLayer};
use tollgate::{KeyedRateLimiter, ManualClock};

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Empty<Bytes>,
>;

fn client() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<Bytes>>()
}

/// `(status, Retry-After, body)` of a GET with the given `X-Forwarded-For`.
async fn get(client: &Client, addr: SocketAddr, xff: Option<&str>) -> (u16, Option<u64>, Bytes) {
    let mut req = Request::get(format!("http://{addr}/"));
    if let Some(xff) = xff {
        req = req.header("x-forwarded-for", xff);
    }
    let res = tokio::time::timeout(
        Duration::from_secs(5),
        client.request(req.body(Empty::new()).unwrap()),
    )
    .await
    .expect("an answer in time")
    .expect("a response");
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (
        status,
        retry,
        res.into_body().collect().await.unwrap().to_bytes(),
    )
}

fn limiter(clock: &ManualClock) -> Arc<KeyedRateLimiter<String>> {
    Arc::new(
        KeyedRateLimiter::<String>::builder("2/min".parse().unwrap())
            .clock(clock.clone())
            .build(),
    )
}

/// Serves `layer` as the README does: with the connection's address in each request.
async fn serve_with_connect_info(layer: RateLimitLayer) -> SocketAddr {
    let app = axum::Router::new().fallback(|| async { "ok" }).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    addr
}

#[tokio::test]
async fn forwarded_ip_behind_a_trusted_proxy_limits_each_client_with_nothing_else() {
    let clock = ManualClock::new();
    let lim = limiter(&clock);
    // The proxy is this loopback client: trusted, so the client is the header's address.
    let layer = RateLimitLayer::builder()
        .key(ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]))
        .limit("per-ip", Arc::clone(&lim))
        .build()
        .unwrap();
    let addr = serve_with_connect_info(layer.clone()).await;
    let c = client();
    let one = Some("203.0.113.7");
    assert_eq!(get(&c, addr, one).await.0, 200);
    assert_eq!(get(&c, addr, one).await.0, 200);
    let (status, retry, _) = get(&c, addr, one).await;
    assert_eq!(status, 429);
    assert!(retry.is_some_and(|s| s >= 1), "Retry-After {retry:?}");
    // Another client behind the same proxy is its own key.
    assert_eq!(get(&c, addr, Some("198.51.100.2")).await.0, 200);
    clock.advance(Duration::from_secs(30));
    assert_eq!(get(&c, addr, one).await.0, 200, "a slot back after 30 s");
    assert_eq!(lim.len(), 2, "two keys: the two clients, not the proxy");
    assert_eq!(layer.stats().no_peer_address, 0);
}

#[tokio::test]
async fn peer_ip_keys_on_the_connection_under_axum() {
    let clock = ManualClock::new();
    let lim = limiter(&clock);
    let layer = RateLimitLayer::builder()
        .key(PeerIp::new())
        .limit("per-ip", Arc::clone(&lim))
        .build()
        .unwrap();
    let addr = serve_with_connect_info(layer).await;
    let c = client();
    // A client's X-Forwarded-For is not read by PeerIp: the loopback peer is the key.
    let statuses = [
        get(&c, addr, None).await.0,
        get(&c, addr, Some("198.51.100.1")).await.0,
        get(&c, addr, Some("198.51.100.2")).await.0,
    ];
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(
        lim.peek_key("127.0.0.1").allowed(),
        None,
        "the peer's key is spent"
    );
}

/// Serves `layer` with plain `axum::serve(listener, app)`: no connection address anywhere.
async fn serve_without_connect_info(layer: RateLimitLayer) -> SocketAddr {
    let app = axum::Router::new().fallback(|| async { "ok" }).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[tokio::test]
async fn without_connect_info_every_request_is_a_500_naming_the_fix_and_charges_no_key() {
    let clock = ManualClock::new();
    let lim = limiter(&clock);
    let layer = RateLimitLayer::builder()
        .key(ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()]))
        .limit("per-ip", Arc::clone(&lim))
        .build()
        .unwrap();
    let addr = serve_without_connect_info(layer.clone()).await;
    let c = client();
    for _ in 0..5 {
        let (status, retry, body) = get(&c, addr, Some("203.0.113.7")).await;
        assert_eq!(status, 500);
        assert_eq!(retry, None);
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["reason"], "no_peer_address");
        assert_eq!(problem["status"], 500);
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "{detail}"
        );
    }
    let stats = layer.stats();
    assert_eq!((stats.no_peer_address, stats.bad_requests), (5, 0));
    assert_eq!((stats.allowed, stats.denied), (0, 0));
    assert_eq!(lim.len(), 0, "no key was charged");
    assert_eq!(lim.stats().total(), 0, "the limiter was never asked");
}
