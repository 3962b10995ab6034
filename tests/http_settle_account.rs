//! One request, several settles: whatever its head and its trailers answer, a request is given
//! back at most what it was charged (by its check, and by its settles' charges). Over real
//! HTTP on loopback (an axum server, a hyper client): head and trailer refunds that each ask
//! for the whole charge, a head charge then a trailer refund, a head refund then a trailer
//! charge, a refund larger than the charge, a charge the debt cap cuts short on one limit of
//! two, and a request denied by its second limit (the first's charge given back by the
//! judging) that waits in queue mode and is then settled. The limiters run on `ManualClock`s
//! (queue mode's sleep advances the clock); nothing sleeps for time to pass. Each test runs on
//! one thread, so once a settle function has been asked, its answer has been applied.
#![cfg(all(feature = "axum", not(loom)))]

use std::collections::VecDeque;
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
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::http::{HeaderKey, Queue, RateLimitLayer, RateLimitLayerBuilder, Settle};
use tollgate::{KeyedRateLimiter, ManualClock, Verdict};

const STEP: Duration = Duration::from_secs(10);
const KEY: &str = "k";

type Item = Result<Frame<Bytes>, std::io::Error>;

/// A response body of frames the test queued: data, then trailers.
struct Frames(VecDeque<Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Item>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// What the next responses answer: `x-settle` in the head, `x-settle` in the trailers.
#[derive(Clone, Default)]
struct Plans(Arc<Mutex<VecDeque<(&'static str, &'static str)>>>);

impl Plans {
    fn next(&self, head: &'static str, trailer: &'static str) {
        self.0.lock().unwrap().push_back((head, trailer));
    }
}

async fn app(State(plans): State<Plans>) -> Response {
    let Some((head, trailer)) = plans.0.lock().unwrap().pop_front() else {
        return "ok".into_response();
    };
    let mut trailers = HeaderMap::new();
    trailers.insert("x-settle", HeaderValue::from_static(trailer));
    let frames = [
        Frame::data(Bytes::from_static(b"done")),
        Frame::trailers(trailers),
    ];
    let mut res = Response::new(Body::new(Frames(frames.into())));
    res.headers_mut()
        .insert("x-settle", HeaderValue::from_static(head));
    res
}

/// `x-settle` read as a settle: `keep`, `all`, `refund=N` or `charge=N`.
fn read(map: &HeaderMap) -> Settle {
    let v = map.get("x-settle").map(|v| v.to_str().unwrap());
    match v.unwrap_or("keep").split_once('=') {
        None if v == Some("all") => Settle::RefundAll,
        Some(("refund", n)) => Settle::Refund(n.parse().unwrap()),
        Some(("charge", n)) => Settle::Charge(n.parse().unwrap()),
        _ => Settle::Keep,
    }
}

/// A layer keyed by `x-api-key`, settling from the head and the trailers as the response
/// says; `asked` counts the trailer settles.
fn layer(b: RateLimitLayerBuilder, asked: &Arc<AtomicUsize>) -> RateLimitLayer {
    let seen = Arc::clone(asked);
    b.key(HeaderKey::new(HeaderName::from_static("x-api-key")))
        .settle(|_, head: &HeaderMap| read(head))
        .settle_trailers(move |_, trailers: &HeaderMap| {
            seen.fetch_add(1, Ordering::Relaxed);
            read(trailers)
        })
        .build()
        .unwrap()
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

/// A request of key `k` to `path`, its body read to its end: the status.
async fn get(addr: SocketAddr, path: &str) -> StatusCode {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = Request::get(format!("http://{addr}{path}"))
        .header("x-api-key", KEY)
        .header("te", "trailers")
        .body(Empty::new())
        .unwrap();
    let res = tokio::time::timeout(STEP, client.request(req))
        .await
        .expect("bounded")
        .unwrap();
    let (parts, body) = res.into_parts();
    let body = tokio::time::timeout(STEP, body.collect()).await;
    assert!(body.expect("bounded").is_ok(), "the body is read whole");
    parts.status
}

/// Waits, bounded, until the trailer settle has been asked `n` times in all.
async fn asked(asked: &AtomicUsize, n: usize) {
    for _ in 0..500 {
        if asked.load(Ordering::Relaxed) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the trailer settle was not asked in 5 s");
}

fn keyed(quota: &str, clock: &ManualClock) -> Arc<KeyedRateLimiter<String>> {
    Arc::new(
        KeyedRateLimiter::builder(quota.parse().unwrap())
            .clock(clock.clone())
            .build(),
    )
}

/// What `lim` has left for the key now (a check of cost 0 writes nothing).
fn left(lim: &KeyedRateLimiter<String>) -> u64 {
    match lim.check_key_n(KEY, 0).unwrap() {
        Verdict::Allow(a) => a.remaining(),
        other => panic!("a cost of 0 is allowed: {other:?}"),
    }
}

/// A "100/min" limit with 5 units spent directly, served: the limiter, the server, its
/// plans, the trailer settles' count and the layer.
async fn hundred() -> (
    Arc<KeyedRateLimiter<String>>,
    SocketAddr,
    Plans,
    Arc<AtomicUsize>,
    RateLimitLayer,
) {
    let lim = keyed("100/min", &ManualClock::new());
    assert!(lim.check_key_n(KEY, 5).unwrap().is_permitted());
    let count = Arc::new(AtomicUsize::new(0));
    let layer = layer(
        RateLimitLayer::builder().limit("per-key", Arc::clone(&lim)),
        &count,
    );
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    (lim, addr, plans, count, layer)
}

#[tokio::test]
async fn a_head_and_a_trailer_refunding_all_give_back_one_charge() {
    let (lim, addr, plans, count, layer) = hundred().await;
    plans.next("all", "all");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 1).await;
    assert_eq!(
        left(&lim),
        95,
        "the request counts for nothing, and no more"
    );
    let s = layer.stats();
    assert_eq!(
        (s.settle_refunds, s.settle_lost, s.settle_panics),
        (1, 0, 0)
    );
    // Again, and with a partial refund first: at most one unit back per request.
    plans.next("refund=1", "all");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 2).await;
    assert_eq!(left(&lim), 95);
    assert_eq!(layer.stats().settle_refunds, 2);
}

#[tokio::test]
async fn a_head_charge_then_a_trailer_refunding_all_gives_back_both() {
    let (lim, addr, plans, count, layer) = hundred().await;
    plans.next("charge=10", "all");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 1).await;
    assert_eq!(left(&lim), 95, "1 + 10 charged, 1 + 10 given back");
    let s = layer.stats();
    assert_eq!((s.settle_charges, s.settle_refunds), (1, 1));
}

#[tokio::test]
async fn a_head_refunding_all_then_a_trailer_charge_charges_on_top() {
    let (lim, addr, plans, count, _layer) = hundred().await;
    plans.next("all", "charge=7");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 1).await;
    assert_eq!(left(&lim), 88, "the request's unit back, 7 charged");
    // Refunded once already, a later refund of the same request gives nothing more.
    plans.next("all", "refund=3");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 2).await;
    assert_eq!(left(&lim), 88);
}

#[tokio::test]
async fn a_refund_larger_than_the_charge_gives_back_the_charge() {
    let (lim, addr, plans, count, layer) = hundred().await;
    plans.next("keep", "refund=50");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 1).await;
    assert_eq!(left(&lim), 95, "1 unit charged, 1 given back, not 50");
    plans.next("charge=3", "refund=50");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 2).await;
    assert_eq!(left(&lim), 95, "1 + 3 charged, 4 given back");
    plans.next("refund=50", "refund=50");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 3).await;
    assert_eq!(
        left(&lim),
        95,
        "the head gave the unit back; the trailers, nothing more"
    );
    let s = layer.stats();
    assert_eq!((s.settle_refunds, s.settle_charges), (3, 1));
}

#[tokio::test]
async fn each_limit_gives_back_what_it_was_charged() {
    // "per-key" has no debt: a charge of 200 fills its 94 units left and stops there.
    // "tenant" takes all of it.
    let clock = ManualClock::new();
    let per_key = keyed("100/min", &clock);
    let tenant = keyed("1000/min", &clock);
    assert!(per_key.check_key_n(KEY, 5).unwrap().is_permitted());
    let count = Arc::new(AtomicUsize::new(0));
    let b = RateLimitLayer::builder()
        .limit("per-key", Arc::clone(&per_key))
        .limit("tenant", Arc::clone(&tenant));
    let plans = Plans::default();
    let addr = serve(layer(b, &count), plans.clone()).await;
    plans.next("charge=200", "all");
    assert_eq!(get(addr, "/").await, 200);
    asked(&count, 1).await;
    assert_eq!(left(&per_key), 95, "1 + 94 that stood, given back");
    assert_eq!(left(&tenant), 1000, "1 + 200, given back");
}

#[tokio::test]
async fn a_request_denied_by_its_second_limit_is_given_back_once_then_settled_once() {
    // Two limits over one limiter (one budget counted under two names): a request costs a
    // unit on each, and the second's check sees the first's charge. With one unit left,
    // both peeks allow, the first check takes the unit, the second is denied, and the
    // judging gives the first its unit back: a race after the peek, at a frozen instant.
    let clock = ManualClock::new();
    let lim = keyed("100/min", &clock);
    assert!(lim.check_key_n(KEY, 99).unwrap().is_permitted());
    let tick = clock.clone();
    let queue = Queue::new(Duration::from_secs(5), move |d| {
        tick.advance(d);
        Box::pin(async {})
    });
    let count = Arc::new(AtomicUsize::new(0));
    let b = RateLimitLayer::builder()
        .limit("first", Arc::clone(&lim))
        .limit("second", Arc::clone(&lim))
        .queue_when(queue, |p| p.uri.path() == "/wait");
    let layer = layer(b, &count);
    let plans = Plans::default();
    let addr = serve(layer.clone(), plans.clone()).await;
    plans.next("all", "all");
    assert_eq!(get(addr, "/").await, 429, "denied by the second limit");
    assert_eq!(left(&lim), 1, "the first limit's unit given back, once");
    let s = layer.stats();
    assert_eq!((s.denied, s.races, s.settle_refunds), (1, 0, 0));
    assert_eq!(
        count.load(Ordering::Relaxed),
        0,
        "a rejection is not settled"
    );
    // Queued: denied the same way, given back, then judged again once the wait (0.6 s and
    // a jitter of at most 0.3 s) has refilled a unit: 2 units left, one charged per limit.
    assert_eq!(get(addr, "/wait").await, 200);
    asked(&count, 1).await;
    assert_eq!(
        left(&lim),
        2,
        "each limit given back its one unit, once (head and trailers refunding all)"
    );
    let s = layer.stats();
    assert_eq!((s.queued, s.races, s.settle_refunds), (1, 0, 1));
}
