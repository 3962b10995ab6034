//! Concurrency limits in the layer: the permits a request takes before its rate limits are
//! asked, and holds until its response body ends or is dropped.

use std::sync::Arc;

use http::StatusCode;

use super::response::{RejectReason, Rejection};
use super::source::Subject;
use crate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter, Permit, Saturated};

/// A limit on requests in flight that the layer can hold a slot of: a
/// [`ConcurrencyLimiter`] (one count for every request) or a
/// [`KeyedConcurrencyLimiter<String>`] (a count per key, the layer's key), each also in an
/// `Arc`. Given to [`RateLimitLayerBuilder::concurrency`](super::RateLimitLayerBuilder::concurrency).
pub trait InFlightLimit: Send + Sync + 'static {
    /// A permit for the request whose key is `key`, at once, or why not.
    ///
    /// # Errors
    ///
    /// [`Saturated`]: every slot open to the request is taken.
    fn try_acquire_for(&self, key: &str) -> Result<Permit, Saturated>;

    /// The permits out now for `key` (for every request, on a direct limiter).
    fn in_flight_for(&self, key: &str) -> u32;
}

impl InFlightLimit for ConcurrencyLimiter {
    #[inline]
    fn try_acquire_for(&self, _key: &str) -> Result<Permit, Saturated> {
        self.try_acquire()
    }

    fn in_flight_for(&self, _key: &str) -> u32 {
        self.in_flight()
    }
}

impl InFlightLimit for KeyedConcurrencyLimiter<String> {
    #[inline]
    fn try_acquire_for(&self, key: &str) -> Result<Permit, Saturated> {
        self.try_acquire_key(key)
    }

    fn in_flight_for(&self, key: &str) -> u32 {
        self.in_flight_key(key)
    }
}

impl<T: InFlightLimit> InFlightLimit for Arc<T> {
    #[inline]
    fn try_acquire_for(&self, key: &str) -> Result<Permit, Saturated> {
        (**self).try_acquire_for(key)
    }

    fn in_flight_for(&self, key: &str) -> u32 {
        (**self).in_flight_for(key)
    }
}

/// One concurrency limit of the layer.
#[derive(Clone)]
pub(crate) struct InFlightEntry {
    pub(crate) name: Arc<str>,
    pub(crate) limit: Arc<dyn InFlightLimit>,
}

/// The permits one request holds, one per concurrency limit of the layer: given back when
/// dropped (with the response body, or with the request if it is not served).
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Never read: held for its `Drop`, which gives the slots back.
    _permits: Vec<Permit>,
}

/// Takes a slot of every concurrency limit for `subject`, all or nothing: at the first
/// saturated one, the permits taken so far are given back (dropped) and the rejection says
/// which limit. No rate limit has been asked yet, so nothing else is charged.
pub(crate) fn acquire(
    limits: &[InFlightEntry],
    subject: &Subject,
    grpc: bool,
) -> Result<Held, Rejection> {
    let mut held = Vec::with_capacity(limits.len());
    for e in limits {
        match e.limit.try_acquire_for(subject.key()) {
            Ok(p) => held.push(p),
            Err(s) => return Err(saturated(&e.name, &s, grpc)),
        }
    }
    Ok(Held { _permits: held })
}

/// `429`, reason `concurrency`, and no `Retry-After`: when a slot frees depends on how long
/// the requests in flight take, which the layer cannot know.
fn saturated(name: &Arc<str>, s: &Saturated, grpc: bool) -> Rejection {
    Rejection {
        status: StatusCode::TOO_MANY_REQUESTS,
        reason: RejectReason::Concurrency,
        policy: Some(Arc::clone(name)),
        retry_after: None,
        detail: format!("too many requests in flight for policy {name:?}: {s}"),
        grpc,
    }
}
