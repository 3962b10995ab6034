//! A request whose judging stops half-way: user code that panics after a
//! limit was charged — a `PolicySource` of the user's own, its refund, a callback while the
//! request waits in queue mode — or a response future dropped mid-judging (a client that hung
//! up) leaves no unit charged and no queue slot taken. Callbacks that run before any limit
//! is charged or after the refunds (the key extractor, the tier function, the queue
//! predicate, the rejection hook) are checked too. Limiters run on `ManualClock`s; nothing
//! sleeps.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{Empty, Full};
use tollgate::http::{
    Checked, HeaderKey, KeyError, PolicySource, Queue, RateLimitLayer, RateLimitLayerBuilder,
    Subject,
};
use tollgate::{Check, KeyedRateLimiter, ManualClock, RateLimiter};
use tower::{Layer, ServiceExt};

async fn inner(_: Request<Empty<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

fn req(key: &str) -> Request<Empty<Bytes>> {
    Request::get("/")
        .header("x-api-key", key)
        .body(Empty::new())
        .unwrap()
}

fn api_key() -> HeaderKey {
    HeaderKey::new(HeaderName::from_static("x-api-key"))
}

/// The status of a request through `layer`, or `None` if serving it panicked.
async fn status(layer: &RateLimitLayer, req: Request<Empty<Bytes>>) -> Option<StatusCode> {
    let svc = layer.layer(tower::service_fn(inner));
    match tokio::spawn(svc.oneshot(req)).await {
        Ok(res) => Some(res.unwrap().status()),
        Err(e) => {
            assert!(e.is_panic(), "{e}");
            None
        }
    }
}

fn left(l: &RateLimiter) -> u64 {
    l.check_n(0).unwrap().allowed().unwrap().remaining()
}

fn left_key(l: &KeyedRateLimiter<String>, key: &str) -> u64 {
    l.check_key_n(key, 0)
        .unwrap()
        .allowed()
        .unwrap()
        .remaining()
}

fn global(quota: &str, clock: &ManualClock) -> Arc<RateLimiter> {
    Arc::new(
        RateLimiter::builder(quota.parse().unwrap())
            .clock(clock.clone())
            .build(),
    )
}

fn per_key(quota: &str, clock: &ManualClock) -> Arc<KeyedRateLimiter<String>> {
    Arc::new(
        KeyedRateLimiter::<String>::builder(quota.parse().unwrap())
            .clock(clock.clone())
            .build(),
    )
}

/// What a [`Trapped`] source does once armed, on a check of a real cost (never on a peek).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trap {
    /// Panics in `check`.
    PanicOnCheck,
    /// Answers `check` with a future that never completes.
    StallOnCheck,
    /// Panics in `refund`.
    PanicOnRefund,
    /// A rival takes a unit just before the check: the peek said allow, the check denies.
    RivalFirst,
}

/// A user's own source around a built-in one, with a trap.
struct Trapped {
    inner: Arc<dyn PolicySource>,
    trap: Trap,
    armed: Arc<AtomicBool>,
    now: bool,
    reached: Arc<tokio::sync::Notify>,
}

impl Trapped {
    fn new(inner: impl PolicySource, trap: Trap, now: bool) -> Self {
        Self {
            inner: Arc::new(inner),
            trap,
            armed: Arc::new(AtomicBool::new(true)),
            now,
            reached: Arc::new(tokio::sync::Notify::new()),
        }
    }

    fn springs(&self, trap: Trap) -> bool {
        self.trap == trap && self.armed.load(Ordering::SeqCst)
    }
}

impl PolicySource for Trapped {
    fn check<'a>(&'a self, s: &'a Subject, check: Check) -> Checked<'a> {
        if check.units() > 0 {
            if self.springs(Trap::PanicOnCheck) {
                panic!("trap: the user's source panics in check");
            }
            if self.springs(Trap::StallOnCheck) {
                self.reached.notify_one();
                return Checked::Later(Box::pin(std::future::pending()));
            }
            if self.springs(Trap::RivalFirst) {
                let Checked::Now(rival) = self.inner.check(s, Check::cost(1)) else {
                    unreachable!("built-in sources answer now");
                };
                assert!(rival.unwrap().verdict().is_permitted());
            }
        }
        self.inner.check(s, check)
    }

    fn peek<'a>(&'a self, s: &'a Subject, check: Check) -> Checked<'a> {
        self.inner.peek(s, check)
    }

    fn answers_now(&self) -> bool {
        self.now
    }

    fn reads_route(&self) -> bool {
        false
    }

    fn refund<'a>(
        &'a self,
        s: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        if self.springs(Trap::PanicOnRefund) {
            panic!("trap: the user's source panics in refund");
        }
        self.inner.refund(s, cost)
    }
}

fn builder() -> RateLimitLayerBuilder {
    RateLimitLayer::builder().key(api_key())
}

#[tokio::test]
async fn a_source_panicking_after_another_limit_charged_leaves_nothing_charged() {
    // Both paths: decided inside `call` (every source answers now) and the boxed future.
    for now in [true, false] {
        let clock = ManualClock::new();
        let (g, k) = (global("3/min", &clock), per_key("2/min", &clock));
        let trapped = Trapped::new(Arc::clone(&k), Trap::PanicOnCheck, now);
        let armed = Arc::clone(&trapped.armed);
        let layer = builder()
            .limit("global", Arc::clone(&g))
            .limit("per-key", trapped)
            .build()
            .unwrap();
        assert_eq!(status(&layer, req("a")).await, None, "now = {now}");
        assert_eq!(left(&g), 3, "now = {now}: the global unit is refunded");
        assert_eq!(left_key(&k, "a"), 2, "now = {now}");
        assert_eq!(layer.stats().races, 0, "now = {now}");
        // Disarmed, the same request is charged to both limits as usual.
        armed.store(false, Ordering::SeqCst);
        assert_eq!(status(&layer, req("a")).await, Some(StatusCode::OK));
        assert_eq!((left(&g), left_key(&k, "a")), (2, 1), "now = {now}");
    }
}

#[tokio::test]
async fn a_request_dropped_while_a_later_limit_judges_leaves_nothing_charged() {
    let clock = ManualClock::new();
    let g = global("3/min", &clock);
    let trapped = Trapped::new(per_key("2/min", &clock), Trap::StallOnCheck, false);
    let reached = Arc::clone(&trapped.reached);
    let layer = builder()
        .limit("global", Arc::clone(&g))
        .limit("per-key", trapped)
        .build()
        .unwrap();
    let svc = layer.layer(tower::service_fn(inner));
    let task = tokio::spawn(svc.oneshot(req("a")));
    // The global limit has charged the request; the per-key source has not answered.
    tokio::time::timeout(Duration::from_secs(10), reached.notified())
        .await
        .expect("the stalling check is reached");
    assert_eq!(left(&g), 2, "charged while the request is judged");
    // The client hangs up.
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(left(&g), 3, "the dropped request's unit is refunded");
}

#[tokio::test]
async fn a_source_whose_refund_panics_does_not_keep_the_others_charged() {
    let clock = ManualClock::new();
    let (a, b, c) = (
        global("3/min", &clock),
        per_key("3/min", &clock),
        global("1/min", &clock),
    );
    // a and b charge the request; c's peek allows, then a rival takes its last unit and it
    // denies; refunding a panics.
    let layer = builder()
        .limit("a", Trapped::new(Arc::clone(&a), Trap::PanicOnRefund, true))
        .limit("b", Arc::clone(&b))
        .limit("c", Trapped::new(Arc::clone(&c), Trap::RivalFirst, true))
        .build()
        .unwrap();
    assert_eq!(status(&layer, req("k")).await, None);
    assert_eq!(
        left_key(&b, "k"),
        3,
        "b is refunded although a's refund panicked"
    );
    assert_eq!(left(&a), 2, "a's refund panicked: nobody can give it back");
    assert_eq!(left(&c), 0, "the rival's unit");
}

#[tokio::test]
async fn a_refund_that_panics_while_unwinding_neither_aborts_nor_keeps_the_others_charged() {
    let clock = ManualClock::new();
    let (a, b) = (global("3/min", &clock), per_key("3/min", &clock));
    // a and b charge the request, the third source panics, and refunding a panics too.
    let layer = builder()
        .limit("a", Trapped::new(Arc::clone(&a), Trap::PanicOnRefund, true))
        .limit("b", Arc::clone(&b))
        .limit(
            "c",
            Trapped::new(global("3/min", &clock), Trap::PanicOnCheck, true),
        )
        .build()
        .unwrap();
    assert_eq!(status(&layer, req("k")).await, None);
    assert_eq!(left_key(&b, "k"), 3);
    assert_eq!(left(&a), 2);
    assert_eq!(
        layer.stats().races,
        1,
        "a's unit is counted as not given back"
    );
}

/// A queue whose sleep advances `clock` and then runs `then` (a callback of the user's).
fn queue(clock: &ManualClock, then: impl Fn() + Send + Sync + 'static) -> Queue {
    let clock = clock.clone();
    Queue::new(Duration::from_secs(2), move |d| {
        clock.advance(d);
        then();
        Box::pin(async {})
    })
}

#[tokio::test]
async fn a_panic_while_waiting_in_the_queue_frees_the_slot_and_the_charges() {
    let clock = ManualClock::new();
    let (g, k) = (global("1/s", &clock), per_key("10/min", &clock));
    let trapped = Trapped::new(Arc::clone(&k), Trap::PanicOnCheck, true);
    let armed = Arc::clone(&trapped.armed);
    armed.store(false, Ordering::SeqCst);
    // The wait arms the per-key source: the judging after the wait charges the global limit,
    // then panics.
    let arm = Arc::clone(&armed);
    let layer = builder()
        .limit("global", Arc::clone(&g))
        .limit("per-key", trapped)
        .queue(queue(&clock, move || arm.store(true, Ordering::SeqCst)))
        .build()
        .unwrap();
    assert_eq!(status(&layer, req("a")).await, Some(StatusCode::OK));
    assert_eq!(status(&layer, req("a")).await, None);
    assert_eq!(layer.stats().queued, 1);
    assert_eq!(layer.waiting(), (0, 0), "the waiter slot is freed");
    assert_eq!(left(&g), 1, "the unit taken after the wait is refunded");
    assert_eq!(left_key(&k, "a"), 9, "only the first request");

    // The sleep itself panics: the slot is freed too.
    let clock = ManualClock::new();
    let g = global("1/s", &clock);
    let layer = builder()
        .limit("global", Arc::clone(&g))
        .limit("per-key", per_key("10/s", &clock))
        .queue(queue(&clock, || panic!("trap: the sleep panics")))
        .build()
        .unwrap();
    assert_eq!(status(&layer, req("a")).await, Some(StatusCode::OK));
    assert_eq!(status(&layer, req("a")).await, None);
    assert_eq!(layer.waiting(), (0, 0));
    assert_eq!(left(&g), 1, "refilled during the wait, nothing charged");
}

/// The callbacks that run before any limit is asked (key, tier, the queue predicate) or
/// after a rejected request's refunds (the rejection hook): a panic there leaves the limits
/// as they were.
#[tokio::test]
async fn panics_in_callbacks_outside_the_judging_leave_nothing_charged() {
    let clock = ManualClock::new();
    let (g, k) = (global("5/min", &clock), per_key("5/min", &clock));
    let two = || {
        builder()
            .limit("global", Arc::clone(&g))
            .limit("per-key", Arc::clone(&k))
    };
    let key = two()
        .key(|p: &Parts| -> Result<String, KeyError> {
            if p.headers.contains_key("x-boom") {
                panic!("trap: the key extractor panics");
            }
            Ok("a".into())
        })
        .build()
        .unwrap();
    let mut boom = req("a");
    boom.headers_mut()
        .insert("x-boom", http::HeaderValue::from_static("1"));
    assert_eq!(status(&key, boom).await, None);
    let tier = two()
        .tier_fn(|_| panic!("trap: the tier function panics"))
        .build()
        .unwrap();
    assert_eq!(status(&tier, req("a")).await, None);
    assert_eq!((left(&g), left_key(&k, "a")), (5, 5));

    // The hook runs after the charged limits are refunded: a race after the peek (a rival
    // takes the per-key limit's last unit) charges the global limit, then is rejected.
    let tight = per_key("1/min", &clock);
    let hook = builder()
        .limit("global", Arc::clone(&g))
        .limit(
            "per-key",
            Trapped::new(Arc::clone(&tight), Trap::RivalFirst, true),
        )
        .on_reject(|_| panic!("trap: the rejection hook panics"))
        .build()
        .unwrap();
    assert_eq!(status(&hook, req("a")).await, None);
    assert_eq!(left(&g), 5, "refunded before the hook ran");

    // The queue predicate runs on a denied request, which holds no charge.
    let gate = global("1/min", &clock);
    let queued = builder()
        .limit("gate", Arc::clone(&gate))
        .limit("global", Arc::clone(&g))
        .queue_when(queue(&clock, || {}), |_| {
            panic!("trap: the queue predicate panics")
        })
        .build()
        .unwrap();
    assert_eq!(status(&queued, req("a")).await, Some(StatusCode::OK));
    assert_eq!(status(&queued, req("a")).await, None);
    assert_eq!(queued.waiting(), (0, 0));
    assert_eq!(left(&g), 4, "only the first request");
}
