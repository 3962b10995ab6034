//! Settling a charge from the response body's trailers, over real HTTP on loopback: a
//! streamed body whose trailer reports its cost is charged it (into a capped debt, with the
//! exact Retry-After it leaves), a body without trailers keeps its charge, a client hanging
//! up mid-stream keeps it and is counted, unreadable trailer values are ignored and counted,
//! a panicking trailer function is contained. The limiters run on `ManualClock`s; nothing
//! sleeps for time to pass (a hang-up is waited for, bounded, as the server notices it).
#![cfg(all(feature = "axum", not(loom)))]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use http_body_util::{BodyExt, Empty};
use hyper::body::Frame;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;
use tollgate::http::{LayerStats, RateLimitLayer, Settle};
use tollgate::{ManualClock, RateLimiter};

const STEP: Duration = Duration::from_secs(10);

type Item = Result<Frame<Bytes>, std::io::Error>;

/// A response body fed by the test, frame by frame.
struct ChanBody(mpsc::UnboundedReceiver<Item>);

impl hyper::body::Body for ChanBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        self.0.poll_recv(cx)
    }
}

/// The bodies the next requests get, in order; a request finding none gets a plain `ok`.
#[derive(Clone, Default)]
struct Plans(Arc<Mutex<VecDeque<mpsc::UnboundedReceiver<Item>>>>);

impl Plans {
    /// A streamed body for the next request: its sender, to feed it.
    fn next(&self) -> mpsc::UnboundedSender<Item> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.0.lock().unwrap().push_back(rx);
        tx
    }

    /// A body of two data frames, then `trailer` (if any) as `x-tokens-used`, then its end.
    fn stream(&self, trailer: Option<&str>) {
        let tx = self.next();
        tx.send(Ok(Frame::data(Bytes::from_static(b"tok "))))
            .unwrap();
        tx.send(Ok(Frame::data(Bytes::from_static(b"tok"))))
            .unwrap();
        if let Some(v) = trailer {
            let mut t = HeaderMap::new();
            t.insert("x-tokens-used", HeaderValue::from_str(v).unwrap());
            tx.send(Ok(Frame::trailers(t))).unwrap();
        }
    }
}

async fn app(State(plans): State<Plans>) -> Response {
    let next = plans.0.lock().unwrap().pop_front();
    match next {
        Some(rx) => Response::new(Body::new(ChanBody(rx))),
        None => "ok".into_response(),
    }
}

async fn serve(layer: RateLimitLayer, plans: Plans) -> SocketAddr {
    let router = axum::Router::new()
        .fallback(app)
        .with_state(plans)
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A request sent and its head read: the response, and the client that must stay alive while
/// its body is read.
async fn open(
    addr: SocketAddr,
) -> (
    Client<HttpConnector, Empty<Bytes>>,
    http::Response<hyper::body::Incoming>,
) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(format!("http://{addr}/"))
        .header("te", "trailers")
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(STEP, client.request(req))
        .await
        .expect("bounded")
        .unwrap();
    (client, res)
}

/// A request whose body is read to its end: the status, the head's fields, and whether the
/// body was read whole.
async fn get(addr: SocketAddr) -> (u16, HeaderMap, bool) {
    let (_client, res) = open(addr).await;
    let (parts, body) = res.into_parts();
    let whole = tokio::time::timeout(STEP, body.collect())
        .await
        .expect("bounded")
        .is_ok();
    (parts.status.as_u16(), parts.headers, whole)
}

/// Waits, bounded, until `done` holds of the layer's counters (the server side settles as it
/// sends the body's end, or notices a hang-up, a moment after the client sees it).
async fn until(layer: &RateLimitLayer, done: impl Fn(&LayerStats) -> bool) -> LayerStats {
    for _ in 0..500 {
        let s = layer.stats();
        if done(&s) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not settled in 5 s: {:?}", layer.stats());
}

fn limiter(quota: &str, clock: &ManualClock, debt: Duration) -> Arc<RateLimiter> {
    Arc::new(
        RateLimiter::builder(quota.parse().unwrap())
            .clock(clock.clone())
            .max_debt(debt)
            .build(),
    )
}

fn tokens() -> impl Fn(http::StatusCode, &HeaderMap) -> Settle + Send + Sync + 'static {
    Settle::charge_from_trailer(HeaderName::from_static("x-tokens-used"))
}

#[tokio::test]
async fn a_streamed_body_is_charged_what_its_trailer_reports() {
    let clock = ManualClock::new();
    let lim = limiter("10/s", &clock, Duration::from_secs(5));
    let layer = RateLimitLayer::builder()
        .limit("tokens", Arc::clone(&lim))
        .settle_trailers(tokens())
        .build()
        .unwrap();
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    // 1 unit for the request, 29 more from the trailer: 30 units, 2 s past a drained cell.
    plans.stream(Some("29"));
    let (status, _, whole) = get(addr).await;
    assert_eq!((status, whole), (200, true));
    let s = until(&layer, |s| s.settle_charges == 1).await;
    assert_eq!(
        (s.settle_hangups, s.settle_unreadable, s.settle_lost),
        (0, 0, 0)
    );
    let (status, headers, _) = get(addr).await;
    assert_eq!(status, 429, "in debt");
    assert_eq!(headers["retry-after"], "3", "2.1 s, rounded up");
    clock.advance(Duration::from_millis(2_100));
    assert_eq!(get(addr).await.0, 200, "the debt is paid off");
    assert_eq!(layer.stats().settle_charges, 1, "settled once");
}

#[tokio::test]
async fn a_body_without_trailers_keeps_its_charge() {
    let clock = ManualClock::new();
    let lim = limiter("1/min", &clock, Duration::ZERO);
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&asked);
    let f = tokens();
    let layer = RateLimitLayer::builder()
        .limit("one", Arc::clone(&lim))
        .settle_trailers(move |status, trailers: &HeaderMap| {
            assert!(trailers.is_empty(), "no trailers: an empty map");
            seen.fetch_add(1, Ordering::Relaxed);
            f(status, trailers)
        })
        .build()
        .unwrap();
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    plans.stream(None);
    let (status, _, whole) = get(addr).await;
    assert_eq!((status, whole), (200, true));
    // The body's end asked the function once (with an empty map): Keep.
    for _ in 0..500 {
        if asked.load(Ordering::Relaxed) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(asked.load(Ordering::Relaxed), 1);
    let (status, headers, _) = get(addr).await;
    assert_eq!(status, 429, "the request's own unit stands");
    assert_eq!(headers["retry-after"], "60");
    let s = layer.stats();
    assert_eq!(
        (
            s.settle_charges,
            s.settle_refunds,
            s.settle_hangups,
            s.settle_panics
        ),
        (0, 0, 0, 0)
    );
}

#[tokio::test]
async fn a_client_hanging_up_mid_stream_keeps_the_charge() {
    let clock = ManualClock::new();
    let lim = limiter("1/min", &clock, Duration::ZERO);
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&asked);
    let layer = RateLimitLayer::builder()
        .limit("one", Arc::clone(&lim))
        // Were it asked, it would give the charge back.
        .settle_trailers(move |_, _: &HeaderMap| {
            seen.fetch_add(1, Ordering::Relaxed);
            Settle::RefundAll
        })
        .build()
        .unwrap();
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    let tx = plans.next();
    tx.send(Ok(Frame::data(Bytes::from_static(b"first"))))
        .unwrap();
    let (client, res) = open(addr).await;
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    let first = tokio::time::timeout(STEP, body.frame())
        .await
        .expect("bounded");
    assert!(first.is_some_and(|f| f.is_ok()), "the stream started");
    drop(body);
    drop(client);
    // The server notices as it writes the next frames into the closed connection.
    let mut s = layer.stats();
    for _ in 0..500 {
        s = layer.stats();
        if s.settle_hangups > 0 {
            break;
        }
        let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"more"))));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(s.settle_hangups, 1, "the hang-up is counted: {s:?}");
    assert_eq!(asked.load(Ordering::Relaxed), 0, "nothing was settled");
    let (status, headers, _) = get(addr).await;
    assert_eq!(status, 429, "the charge stands");
    assert_eq!(headers["retry-after"], "60");
    assert_eq!(layer.stats().settle_refunds, 0);
}

#[tokio::test]
async fn a_body_error_keeps_the_charge() {
    let clock = ManualClock::new();
    let lim = limiter("1/min", &clock, Duration::ZERO);
    let layer = RateLimitLayer::builder()
        .limit("one", Arc::clone(&lim))
        .settle_trailers(|_, _: &HeaderMap| Settle::RefundAll)
        .build()
        .unwrap();
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    let tx = plans.next();
    tx.send(Ok(Frame::data(Bytes::from_static(b"first"))))
        .unwrap();
    let (_client, res) = open(addr).await;
    assert_eq!(res.status(), 200);
    // Once the head is out: the upstream breaks mid-stream.
    tx.send(Err(std::io::Error::other("upstream broke")))
        .unwrap();
    let body = tokio::time::timeout(STEP, res.into_body().collect()).await;
    assert!(body.expect("bounded").is_err(), "the body failed");
    let s = until(&layer, |s| s.settle_hangups == 1).await;
    assert_eq!(s.settle_refunds, 0);
    assert_eq!(get(addr).await.0, 429, "the charge stands");
}

#[tokio::test]
async fn unreadable_trailer_values_are_ignored_and_counted() {
    let clock = ManualClock::new();
    let lim = limiter("10/s", &clock, Duration::from_secs(5));
    let layer = RateLimitLayer::builder()
        .limit("tokens", Arc::clone(&lim))
        .settle_trailers(tokens())
        .build()
        .unwrap();
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    let huge = "9".repeat(100_000);
    let bad = ["-5", "1e3", "99999999999999999999", huge.as_str()];
    for (i, v) in bad.iter().enumerate() {
        plans.stream(Some(v));
        // The client may refuse a 100 KB trailer; the server has read it before sending it.
        assert_eq!(get(addr).await.0, 200, "{}", &v[..v.len().min(20)]);
        until(&layer, |s| s.settle_unreadable == i as u64 + 1).await;
    }
    // Four requests of one unit each, nothing more: the fifth leaves 5 of the burst of 10.
    let (status, headers, _) = get(addr).await;
    assert_eq!(status, 200);
    let field = headers["ratelimit"].to_str().unwrap();
    assert!(field.contains("r=5"), "{field}");
    let s = layer.stats();
    assert_eq!((s.settle_charges, s.settle_hangups), (0, 0));
}

#[tokio::test]
async fn a_panicking_trailer_function_keeps_the_charge() {
    let clock = ManualClock::new();
    let lim = limiter("1/min", &clock, Duration::ZERO);
    let layer = RateLimitLayer::builder()
        .limit("one", Arc::clone(&lim))
        .settle_trailers(|_, trailers: &HeaderMap| {
            if trailers.contains_key("x-tokens-used") {
                panic!("a trailer settle function's bug");
            }
            Settle::RefundAll
        })
        .build()
        .unwrap();
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    plans.stream(Some("7"));
    let (status, _, whole) = get(addr).await;
    assert_eq!((status, whole), (200, true), "the body still ends");
    let s = until(&layer, |s| s.settle_panics == 1).await;
    assert_eq!((s.settle_refunds, s.settle_hangups), (0, 0));
    let (status, headers, _) = get(addr).await;
    assert_eq!(status, 429, "the charge stands; the server still serves");
    assert_eq!(headers["retry-after"], "60");
}

#[tokio::test]
async fn head_and_trailers_both_settle_head_first() {
    let clock = ManualClock::new();
    let lim = limiter("10/s", &clock, Duration::from_secs(5));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (head, tail) = (Arc::clone(&order), Arc::clone(&order));
    let f = tokens();
    let layer = RateLimitLayer::builder()
        .limit("tokens", Arc::clone(&lim))
        .settle(move |_, _: &HeaderMap| {
            head.lock().unwrap().push("head");
            Settle::Charge(9)
        })
        .settle_trailers(move |status, t: &HeaderMap| {
            tail.lock().unwrap().push("trailers");
            f(status, t)
        })
        .build()
        .unwrap();
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    // 1 + 9 from the head + 20 from the trailer: 30 units, as in the trailer-only test.
    plans.stream(Some("20"));
    assert_eq!(get(addr).await.0, 200);
    until(&layer, |s| s.settle_charges == 2).await;
    assert_eq!(*order.lock().unwrap(), ["head", "trailers"]);
    let (status, headers, _) = get(addr).await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "3");
}

#[tokio::test]
async fn own_body_cannot_settle_from_trailers_and_counts_it() {
    use tower::{Layer, ServiceExt};
    let clock = ManualClock::new();
    let lim = limiter("1/min", &clock, Duration::ZERO);
    let layer = RateLimitLayer::builder()
        .limit("one", Arc::clone(&lim))
        .settle_trailers(|_, _: &HeaderMap| Settle::RefundAll)
        .build()
        .unwrap();
    let stats = layer.clone();
    let svc = layer
        .own_body()
        .layer(tower::service_fn(|_req: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Body::from("ok")))
        }));
    let res = svc.oneshot(Request::new(())).await.unwrap();
    assert_eq!(res.status(), 200);
    drop(res);
    let s = stats.stats();
    assert_eq!(
        (s.settle_lost, s.settle_hangups, s.settle_refunds),
        (1, 0, 0)
    );
    let verdict = lim.check();
    assert!(
        matches!(verdict, tollgate::Verdict::Deny(_)),
        "the charge stands: {verdict:?}"
    );
}

#[tokio::test]
async fn an_empty_body_is_settled_at_its_end_not_counted_a_hang_up() {
    let clock = ManualClock::new();
    let lim = limiter("1/min", &clock, Duration::ZERO);
    let layer = RateLimitLayer::builder()
        .limit("one", Arc::clone(&lim))
        .settle_trailers(|status, t: &HeaderMap| {
            assert!(t.is_empty(), "no trailers: an empty map");
            if status == http::StatusCode::NO_CONTENT {
                Settle::RefundAll
            } else {
                Settle::Keep
            }
        })
        .build()
        .unwrap();
    let router = axum::Router::new()
        .fallback(|| async { http::StatusCode::NO_CONTENT })
        .layer(layer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    // A 204's body is empty from the start; each is settled (refunded), so a 1/min limit
    // serves them all.
    for i in 1..=3u64 {
        assert_eq!(get(addr).await.0, 204, "request {i}");
        until(&layer, |s| s.settle_refunds == i).await;
    }
    assert_eq!(layer.stats().settle_hangups, 0);
}
