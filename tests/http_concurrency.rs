//! Concurrency limits in the gateway layer: a slot taken with the rate limits (all or
//! nothing), held until the response body ends or is dropped, over a real server and client
//! on loopback; a saturated request is a 429 with reason `concurrency` and no `Retry-After`.
//! Rate limiters run on `ManualClock`s; nothing sleeps for time to pass (the hang-up test
//! polls, bounded, for the server to notice a closed connection).
#![cfg(all(feature = "tower", not(loom)))]

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Empty, Full};
use tokio::sync::mpsc;
use tollgate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter};
use tollgate::http::{HeaderKey, LayerError, RateLimitLayer};
use tollgate::{KeyedRateLimiter, ManualClock, RateLimiter};
use tower::{Layer, ServiceExt};

const WAIT: Duration = Duration::from_secs(5);

fn n(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).unwrap()
}

fn api_key() -> HeaderKey {
    HeaderKey::new(HeaderName::from_static("x-api-key"))
}

/// A response body the test ends: one frame per chunk sent, the end when the sender drops.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

/// Serves `layer` over an axum app whose every response streams a [`ChannelBody`]; the
/// test gets each admitted request's sender (its first chunk already sent, so the head is
/// on the wire).
async fn serve(layer: RateLimitLayer) -> (String, mpsc::UnboundedReceiver<mpsc::Sender<Bytes>>) {
    let (senders_tx, senders) = mpsc::unbounded_channel();
    let handler = move || {
        let senders_tx = senders_tx.clone();
        async move {
            let (tx, rx) = mpsc::channel(4);
            tx.send(Bytes::from_static(b"first")).await.unwrap();
            senders_tx.send(tx).unwrap();
            axum::body::Body::new(ChannelBody(rx))
        }
    };
    let app = axum::Router::new().fallback(handler).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/"), senders)
}

type Client = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    Empty<Bytes>,
>;

fn client() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<Bytes>>()
}

async fn get(client: &Client, uri: &str, key: &str) -> Response<hyper::body::Incoming> {
    let req = Request::get(uri)
        .header("x-api-key", key)
        .body(Empty::new())
        .unwrap();
    tokio::time::timeout(WAIT, client.request(req))
        .await
        .expect("the server answers in time")
        .expect("a response")
}

/// Waits (bounded) until `cond` holds: for the server to see what the client did.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_key_holds_its_slots_until_the_bodies_end_over_real_http() {
    let in_flight = Arc::new(KeyedConcurrencyLimiter::<String>::new(n(2)));
    let rate = Arc::new(
        KeyedRateLimiter::<String>::builder("100/s".parse().unwrap())
            .clock(ManualClock::new())
            .build(),
    );
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit("rate", Arc::clone(&rate))
        .concurrency("in-flight", Arc::clone(&in_flight))
        .build()
        .unwrap();
    let (uri, mut senders) = serve(layer.clone()).await;
    let client = client();

    let a1 = get(&client, &uri, "alice").await;
    let a2 = get(&client, &uri, "alice").await;
    assert_eq!((a1.status(), a2.status()), (StatusCode::OK, StatusCode::OK));
    let (s1, s2) = (senders.recv().await.unwrap(), senders.recv().await.unwrap());
    assert_eq!(
        in_flight.in_flight_key("alice"),
        2,
        "both bodies are streaming"
    );

    // A third for alice: no slot. 429, reason concurrency, no Retry-After, no rate charge.
    let a3 = get(&client, &uri, "alice").await;
    assert_eq!(a3.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(a3.headers().get("retry-after").is_none());
    let body = a3.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["reason"], "concurrency");
    assert_eq!(problem["policy"], "in-flight");
    assert_eq!(problem["retry_after"], serde_json::Value::Null);
    assert_eq!(
        rate.stats().allowed,
        2,
        "the saturated request charged no rate limit"
    );
    let stats = layer.stats();
    assert_eq!((stats.allowed, stats.saturated, stats.denied), (2, 1, 0));

    // Another key has its own slots.
    let b = get(&client, &uri, "bob").await;
    assert_eq!(b.status(), StatusCode::OK);
    let sb = senders.recv().await.unwrap();

    // Alice's first body ends: its slot comes back once the client has read it all.
    drop(s1);
    let read = a1.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&read[..], b"first");
    eventually("alice's first slot is back", || {
        in_flight.in_flight_key("alice") == 1
    })
    .await;
    let a4 = get(&client, &uri, "alice").await;
    assert_eq!(a4.status(), StatusCode::OK);
    let s4 = senders.recv().await.unwrap();

    drop((s2, sb, s4));
    for res in [a2, a4, b] {
        res.into_body().collect().await.unwrap();
    }
    eventually("every slot is back", || {
        in_flight.in_flight_key("alice") + in_flight.in_flight_key("bob") == 0
    })
    .await;
    assert_eq!(
        in_flight.keys(),
        0,
        "keys with nothing in flight are forgotten"
    );
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_body_gives_the_slot_back() {
    let in_flight = Arc::new(ConcurrencyLimiter::new(n(1)));
    let layer = RateLimitLayer::builder()
        .concurrency("in-flight", Arc::clone(&in_flight))
        .build()
        .unwrap();
    let (uri, mut senders) = serve(layer.clone()).await;
    let client = client();

    let res = get(&client, &uri, "any").await;
    assert_eq!(res.status(), StatusCode::OK);
    let tx = senders.recv().await.unwrap();
    assert_eq!(in_flight.in_flight(), 1);
    assert_eq!(get(&client, &uri, "any").await.status(), 429);

    // The client drops the response mid-body: the connection closes. The server notices
    // when it writes the next chunk, drops the body, and the permit with it.
    drop(res);
    let deadline = tokio::time::Instant::now() + WAIT;
    while in_flight.in_flight() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slot never came back"
        );
        if tx.send(Bytes::from_static(b"more")).await.is_err() {
            break; // the body is gone
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eventually("the slot is back", || in_flight.in_flight() == 0).await;
    assert_eq!(get(&client, &uri, "any").await.status(), 200);
    assert_eq!(layer.stats().saturated, 1);
}

async fn ok(_req: Request<Empty<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

fn keyed(key: &str) -> Request<Empty<Bytes>> {
    Request::get("/")
        .header("x-api-key", key)
        .body(Empty::new())
        .unwrap()
}

#[tokio::test]
async fn a_request_the_rate_limit_denies_gives_its_slot_back_at_once() {
    let in_flight = Arc::new(KeyedConcurrencyLimiter::<String>::new(n(5)));
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .limit(
            "rate",
            RateLimiter::builder("1/s".parse().unwrap())
                .clock(ManualClock::new())
                .build(),
        )
        .concurrency("in-flight", Arc::clone(&in_flight))
        .build()
        .unwrap();
    let svc = layer.layer(tower::service_fn(ok));
    let first = svc.clone().oneshot(keyed("k")).await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(in_flight.in_flight_key("k"), 1, "held by the unread body");
    let denied = svc.clone().oneshot(keyed("k")).await.unwrap();
    assert_eq!(denied.status(), 429);
    assert!(
        denied.headers().get("retry-after").is_some(),
        "a rate denial"
    );
    assert_eq!(
        in_flight.in_flight_key("k"),
        1,
        "the denied request holds nothing"
    );
    drop(first);
    assert_eq!(
        in_flight.in_flight_key("k"),
        0,
        "a dropped body gives it back"
    );
    assert_eq!((layer.stats().denied, layer.stats().saturated), (1, 0));
}

#[tokio::test]
async fn clones_of_a_layer_share_one_count() {
    // tower's ConcurrencyLimit gives each clone of its layer its own semaphore (tower #794).
    let in_flight = Arc::new(ConcurrencyLimiter::new(n(2)));
    let layer = RateLimitLayer::builder()
        .concurrency("in-flight", Arc::clone(&in_flight))
        .build()
        .unwrap();
    let (a, b) = (
        layer.clone().layer(tower::service_fn(ok)),
        layer.clone().layer(tower::service_fn(ok)),
    );
    let r1 = a.clone().oneshot(keyed("x")).await.unwrap();
    let r2 = b.clone().oneshot(keyed("y")).await.unwrap();
    let r3 = a.oneshot(keyed("z")).await.unwrap();
    assert_eq!(
        [r1.status(), r2.status(), r3.status()],
        [200, 200, 429].map(|s| StatusCode::from_u16(s).unwrap())
    );
    assert_eq!(in_flight.in_flight(), 2);
    drop((r1, r2));
    assert_eq!(in_flight.in_flight(), 0);
    assert_eq!(layer.stats().saturated, 1);
}

#[tokio::test]
async fn own_body_gives_the_slot_back_with_the_response_head() {
    let in_flight = Arc::new(ConcurrencyLimiter::new(n(1)));
    let layer = RateLimitLayer::builder()
        .concurrency("in-flight", Arc::clone(&in_flight))
        .build()
        .unwrap()
        .own_body();
    let svc = layer.layer(tower::service_fn(ok));
    let res: Response<Full<Bytes>> = svc.clone().oneshot(keyed("k")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        in_flight.in_flight(),
        0,
        "the body's own type cannot carry it"
    );
}

#[tokio::test]
async fn every_concurrency_limit_or_none() {
    let global = Arc::new(ConcurrencyLimiter::new(n(10)));
    let per_key = Arc::new(KeyedConcurrencyLimiter::<String>::new(n(1)));
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .concurrency("global", Arc::clone(&global))
        .concurrency("per-key", Arc::clone(&per_key))
        .build()
        .unwrap();
    let svc = layer.layer(tower::service_fn(ok));
    let held = svc.clone().oneshot(keyed("k")).await.unwrap();
    assert_eq!((global.in_flight(), per_key.in_flight_key("k")), (1, 1));
    let refused = svc.clone().oneshot(keyed("k")).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["policy"], "per-key");
    assert_eq!(
        global.in_flight(),
        1,
        "the global slot taken first was given back"
    );
    drop(held);
    assert_eq!((global.in_flight(), per_key.in_flight_key("k")), (0, 0));
}

#[test]
fn names_are_unique_across_rate_and_concurrency_limits() {
    let err = RateLimitLayer::builder()
        .limit("a", RateLimiter::new("1/s".parse().unwrap()))
        .concurrency("a", ConcurrencyLimiter::new(n(1)))
        .build()
        .unwrap_err();
    assert_eq!(err, LayerError::DuplicateName("a".into()));
    assert_eq!(
        RateLimitLayer::builder().build().unwrap_err(),
        LayerError::NoLimit
    );
}

/// A queue whose every wait ends when the test says (`gate.notify_waiters()`), or after
/// `WAIT` as a backstop: the deadline is the test's, never the machine's speed.
fn gated_queue(gate: &Arc<tokio::sync::Notify>, per_key: usize) -> tollgate::http::Queue {
    let gate = Arc::clone(gate);
    tollgate::http::Queue::new(WAIT, move |d| {
        let gate = Arc::clone(&gate);
        Box::pin(async move {
            tokio::select! {
                () = gate.notified() => {}
                () = tokio::time::sleep(d) => {}
            }
        })
    })
    .max_waiters_per_key(per_key)
}

#[tokio::test]
async fn queue_mode_waits_for_a_slot_and_serves_when_a_body_ends() {
    let in_flight = Arc::new(KeyedConcurrencyLimiter::<String>::new(n(1)));
    let gate = Arc::new(tokio::sync::Notify::new());
    let layer = RateLimitLayer::builder()
        .key(api_key())
        .concurrency("in-flight", Arc::clone(&in_flight))
        .queue(gated_queue(&gate, 1))
        .build()
        .unwrap();
    let (uri, mut senders) = serve(layer.clone()).await;
    let client = client();

    let first = get(&client, &uri, "alice").await;
    assert_eq!(first.status(), 200);
    let first_body = senders.recv().await.unwrap();
    // The second waits for alice's slot instead of a 429.
    let waiting = tokio::spawn({
        let (client, uri) = (client.clone(), uri.clone());
        async move { get(&client, &uri, "alice").await.status() }
    });
    eventually("the second request queues", || layer.stats().queued == 1).await;
    // A third finds the key's one waiter place taken: 429 at once, counted.
    let third = get(&client, &uri, "alice").await;
    assert_eq!(third.status(), 429);
    assert!(third.headers().get("retry-after").is_none());
    assert_eq!(layer.stats().queue_full, 1);
    // Another key is not behind alice.
    assert_eq!(get(&client, &uri, "bob").await.status(), 200);
    drop(first_body); // alice's first body ends: the slot goes to the waiter
    drop(first);
    assert_eq!(waiting.await.unwrap(), StatusCode::OK);
    let s = layer.stats();
    assert_eq!((s.queued, s.saturated), (1, 1), "{s:?}");
}

#[tokio::test]
async fn queue_mode_gives_up_at_its_deadline_holding_nothing() {
    let in_flight = Arc::new(ConcurrencyLimiter::new(n(1)));
    let gate = Arc::new(tokio::sync::Notify::new());
    let layer = RateLimitLayer::builder()
        .concurrency("in-flight", Arc::clone(&in_flight))
        .queue(gated_queue(&gate, 8))
        .build()
        .unwrap();
    let svc = layer.clone().layer(tower::service_fn(ok));
    let held = svc.clone().oneshot(keyed("k")).await.unwrap();
    let waiting = tokio::spawn(svc.clone().oneshot(keyed("k")));
    eventually("the request queues", || in_flight.waiting() == 1).await;
    gate.notify_waiters(); // its max_wait is over
    let res = waiting.await.unwrap().unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(in_flight.waiting(), 0, "the ticket left the queue");
    assert_eq!(in_flight.in_flight(), 1, "only the first holds a slot");
    drop(held);
    assert_eq!(in_flight.in_flight(), 0);
    assert_eq!(svc.oneshot(keyed("k")).await.unwrap().status(), 200);
    assert_eq!(layer.stats().saturated, 1);
}
