//! A user's own `PolicySource` that cannot take a key (`SourceError::KeyTooLong`, e.g. a
//! wrapper around a `SharedRateLimiter` that does not forward `max_key_bytes`) is answered as
//! the client's error: `400 malformed_key`, never a pass-through, with what the other limits
//! charged given back.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use tollgate::http::{Checked, HeaderKey, PolicySource, RateLimitLayer, SourceError, Subject};
use tollgate::{Check, ManualClock, RateLimiter};
use tower::{Layer, ServiceExt};

/// Takes keys of at most `max` bytes, as a backend with a key cap would, without telling the
/// layer through `max_key_bytes`; otherwise the in-memory limiter inside.
struct Capped {
    inner: Arc<RateLimiter>,
    max: usize,
}

impl Capped {
    fn judge<'a>(&'a self, s: &'a Subject, check: Check, peek: bool) -> Checked<'a> {
        if s.key().len() > self.max {
            let e = SourceError::KeyTooLong {
                len: s.key().len(),
                max: self.max,
            };
            return Checked::Now(Err(e));
        }
        if peek {
            self.inner.peek(s, check)
        } else {
            PolicySource::check(&*self.inner, s, check)
        }
    }
}

impl PolicySource for Capped {
    fn check<'a>(&'a self, s: &'a Subject, check: Check) -> Checked<'a> {
        self.judge(s, check, false)
    }

    fn peek<'a>(&'a self, s: &'a Subject, check: Check) -> Checked<'a> {
        self.judge(s, check, true)
    }

    fn reads_route(&self) -> bool {
        false
    }

    fn refund<'a>(
        &'a self,
        s: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        self.inner.refund(s, cost)
    }
}

async fn inner(_: Request<Empty<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

fn limiter(quota: &str, clock: &ManualClock) -> Arc<RateLimiter> {
    Arc::new(
        RateLimiter::builder(quota.parse().unwrap())
            .clock(clock.clone())
            .build(),
    )
}

fn left(l: &RateLimiter) -> u64 {
    l.check_n(0).unwrap().allowed().unwrap().remaining()
}

#[tokio::test]
async fn a_key_a_source_cannot_take_is_a_400_never_a_pass() {
    let clock = ManualClock::new();
    let (global, capped) = (limiter("5/min", &clock), limiter("5/min", &clock));
    // The global limit comes first, so it has charged by the time the capped one refuses.
    let layer = RateLimitLayer::builder()
        .key(HeaderKey::new(HeaderName::from_static("x-api-key")).max_len(1024))
        .limit("global", Arc::clone(&global))
        .limit(
            "capped",
            Capped {
                inner: Arc::clone(&capped),
                max: 16,
            },
        )
        .build()
        .unwrap();
    let call = |key: String| {
        let svc = layer.layer(tower::service_fn(inner));
        let req = Request::get("/")
            .header("x-api-key", key)
            .body(Empty::new())
            .unwrap();
        async move { svc.oneshot(req).await.unwrap() }
    };

    let res = call("k".repeat(17)).await;
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("malformed_key"), "{body}");
    assert!(body.contains("17 bytes"), "{body}");
    assert_eq!(
        (left(&global), left(&capped)),
        (5, 5),
        "nothing stays charged"
    );
    assert_eq!(layer.stats().passed_through, 0);

    // A key the source takes is judged as usual.
    assert_eq!(call("k".repeat(16)).await.status(), StatusCode::OK);
    assert_eq!((left(&global), left(&capped)), (4, 4));
}
