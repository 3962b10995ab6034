//! Behind a load balancer, a request that reaches the server without `X-Forwarded-For` comes
//! from the balancer's address. `ForwardedIp` keys it by that address by default (all such
//! traffic shares one bucket), or, with `NoForwardedHeader::MissingKey`, answers it as a
//! missing key. A peer outside the trusted ranges is keyed by its own address either way, a
//! forged header from it included. A real axum server and a real client on loopback (the
//! loopback client plays the balancer when 127.0.0.0/8 is trusted); limiters on `ManualClock`s.
#![cfg(all(feature = "axum", not(loom)))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::http::{ForwardedIp, NoForwardedHeader, OnMissingKey, RateLimitLayer};
use tollgate::{KeyedRateLimiter, ManualClock};

/// Every network step is bounded.
const STEP: Duration = Duration::from_secs(10);

type Http = Client<HttpConnector, Empty<Bytes>>;

/// A server on 127.0.0.1:0 with the connection's address in each request, and a client.
async fn serve(layer: RateLimitLayer) -> (SocketAddr, Http) {
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
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    (addr, client)
}

/// `(status, the problem body's reason)` of a GET carrying `xff` as `X-Forwarded-For`.
async fn get(client: &Http, addr: SocketAddr, xff: Option<&str>) -> (u16, String) {
    let mut req = Request::get(format!("http://{addr}/"));
    if let Some(xff) = xff {
        req = req.header("x-forwarded-for", xff);
    }
    let res = tokio::time::timeout(STEP, client.request(req.body(Empty::new()).unwrap()))
        .await
        .expect("an answer in time")
        .expect("a response");
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let reason = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["reason"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (status, reason)
}

/// One request a minute per key.
fn limiter() -> Arc<KeyedRateLimiter<String>> {
    Arc::new(
        KeyedRateLimiter::<String>::builder("1/min".parse().unwrap())
            .clock(ManualClock::new())
            .build(),
    )
}

fn layer(key: ForwardedIp, lim: &Arc<KeyedRateLimiter<String>>) -> RateLimitLayer {
    RateLimitLayer::builder()
        .key(key)
        .limit("per-ip", Arc::clone(lim))
        .build()
        .unwrap()
}

fn behind_loopback() -> ForwardedIp {
    ForwardedIp::trusting(["127.0.0.0/8".parse().unwrap()])
}

#[tokio::test]
async fn by_default_every_request_without_the_header_shares_the_proxys_bucket() {
    let lim = limiter();
    let (addr, c) = serve(layer(behind_loopback(), &lim)).await;
    assert_eq!(get(&c, addr, None).await.0, 200);
    // A second client whose request also lost the header: the same key, the proxy's.
    assert_eq!(get(&c, addr, Some(" , ")).await, (429, "quota".into()));
    assert_eq!(get(&c, addr, Some("203.0.113.9")).await.0, 200);
    assert_eq!(lim.len(), 2, "the proxy's key and the one forwarded client");
    assert_eq!(
        lim.peek_key("127.0.0.1").allowed(),
        None,
        "the proxy's key is spent"
    );
}

#[tokio::test]
async fn missing_key_answers_the_layers_missing_key_and_charges_no_one() {
    let lim = limiter();
    let key = behind_loopback().on_no_header(NoForwardedHeader::MissingKey);
    let layer = layer(key, &lim);
    let (addr, c) = serve(layer.clone()).await;
    for xff in [None, Some(""), Some(" , ,")] {
        // The default missing-key answer, every time: nothing was charged.
        assert_eq!(
            get(&c, addr, xff).await,
            (401, "missing_key".into()),
            "{xff:?}"
        );
    }
    assert_eq!(get(&c, addr, Some("203.0.113.9")).await.0, 200);
    assert_eq!(get(&c, addr, Some("203.0.113.9")).await.0, 429);
    // Every hop trusted is still a chain: its left-most hop is the client.
    assert_eq!(get(&c, addr, Some("127.0.0.9")).await.0, 200);
    assert_eq!(lim.len(), 2, "203.0.113.9 and 127.0.0.9, never the proxy");
    assert!(
        lim.peek_key("127.0.0.1").allowed().is_some(),
        "the proxy was not charged"
    );
    let stats = layer.stats();
    assert_eq!((stats.bad_requests, stats.allowed, stats.denied), (3, 2, 1));
}

#[tokio::test]
async fn missing_key_with_a_fallback_counts_those_requests_under_the_fallback_key() {
    let lim = limiter();
    let layer = RateLimitLayer::builder()
        .key(behind_loopback().on_no_header(NoForwardedHeader::MissingKey))
        .on_missing_key(OnMissingKey::Fallback("unforwarded".into()))
        .limit("per-ip", Arc::clone(&lim))
        .build()
        .unwrap();
    let (addr, c) = serve(layer).await;
    assert_eq!(get(&c, addr, None).await.0, 200);
    assert_eq!(get(&c, addr, None).await.0, 429);
    assert_eq!(lim.peek_key("unforwarded").allowed(), None);
    assert_eq!(lim.len(), 1, "only the fallback key");
}

#[tokio::test]
async fn an_untrusted_peer_is_its_own_key_with_or_without_a_forged_header() {
    let lim = limiter();
    // Only 10/8 is trusted: the loopback client is a stranger.
    let key = ForwardedIp::trusting(["10.0.0.0/8".parse().unwrap()])
        .on_no_header(NoForwardedHeader::MissingKey);
    let (addr, c) = serve(layer(key, &lim)).await;
    // The forged header is not read: charged to the address the request came from.
    assert_eq!(get(&c, addr, Some("198.51.100.7")).await.0, 200);
    // Without a header it is not a missing key either: the same address, now spent.
    assert_eq!(get(&c, addr, None).await, (429, "quota".into()));
    assert_eq!(get(&c, addr, Some("203.0.113.9")).await.0, 429);
    assert_eq!(lim.len(), 1, "127.0.0.1 only");
    assert_eq!(lim.peek_key("127.0.0.1").allowed(), None);
}

#[tokio::test]
async fn missing_key_is_not_exempt_even_when_the_proxy_is() {
    let lim = limiter();
    let layer = RateLimitLayer::builder()
        .key(behind_loopback().on_no_header(NoForwardedHeader::MissingKey))
        .exempt_ips(["127.0.0.0/8".parse().unwrap()])
        .limit("per-ip", Arc::clone(&lim))
        .build()
        .unwrap();
    let (addr, c) = serve(layer.clone()).await;
    // No client address, so no address to exempt: the missing-key answer.
    assert_eq!(get(&c, addr, None).await, (401, "missing_key".into()));
    // A forwarded client inside the exempt range is exempt, as before.
    assert_eq!(get(&c, addr, Some("127.0.0.9")).await.0, 200);
    assert_eq!(get(&c, addr, Some("127.0.0.9")).await.0, 200);
    assert_eq!(layer.stats().exempt, 2);
    assert_eq!(lim.len(), 0);
}
