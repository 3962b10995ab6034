//! Concurrency limits in the layer: the permits a request takes before its rate limits are
//! asked, and holds until its response body ends or is dropped.

use core::future::Future;
use core::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::layer::Shared;
use super::queue::Waiters;
use super::reject::reject;
use super::response::{RejectReason, Rejection};
use super::source::Subject;
use super::stats::Counters;
use super::trailers::Trailing;
use crate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter, NoSlot, Permit, Saturated};

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

    /// A permit for `key`, waiting for one (in queue mode) until `deadline` completes. The
    /// default waits not at all: it is [`try_acquire_for`](Self::try_acquire_for).
    ///
    /// # Errors
    ///
    /// [`Saturated`]: no slot freed before the deadline (or none can: a full key table).
    fn acquire_for_until<'a>(
        &'a self,
        key: &'a str,
        _deadline: Pin<&'a mut (dyn Future<Output = ()> + Send)>,
    ) -> Pin<Box<dyn Future<Output = Result<Permit, Saturated>> + Send + 'a>> {
        Box::pin(async move { self.try_acquire_for(key) })
    }
}

impl InFlightLimit for ConcurrencyLimiter {
    #[inline]
    fn try_acquire_for(&self, _key: &str) -> Result<Permit, Saturated> {
        self.try_acquire()
    }

    fn in_flight_for(&self, _key: &str) -> u32 {
        self.in_flight()
    }

    fn acquire_for_until<'a>(
        &'a self,
        _key: &'a str,
        deadline: Pin<&'a mut (dyn Future<Output = ()> + Send)>,
    ) -> Pin<Box<dyn Future<Output = Result<Permit, Saturated>> + Send + 'a>> {
        Box::pin(async move {
            (self.acquire_class_until(0, deadline).await).map_err(NoSlot::into_saturated)
        })
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

    fn acquire_for_until<'a>(
        &'a self,
        key: &'a str,
        deadline: Pin<&'a mut (dyn Future<Output = ()> + Send)>,
    ) -> Pin<Box<dyn Future<Output = Result<Permit, Saturated>> + Send + 'a>> {
        Box::pin(async move {
            (self.acquire_key_class_until(key, 0, deadline).await).map_err(NoSlot::into_saturated)
        })
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

    fn acquire_for_until<'a>(
        &'a self,
        key: &'a str,
        deadline: Pin<&'a mut (dyn Future<Output = ()> + Send)>,
    ) -> Pin<Box<dyn Future<Output = Result<Permit, Saturated>> + Send + 'a>> {
        (**self).acquire_for_until(key, deadline)
    }
}

/// One concurrency limit of the layer.
#[derive(Clone)]
pub(crate) struct InFlightEntry {
    pub(crate) name: Arc<str>,
    pub(crate) limit: Arc<dyn InFlightLimit>,
}

/// What one request's response body holds until it ends: the permits, one per concurrency
/// limit of the layer, given back when dropped (with the response body, or with the request
/// if it is not served); and the charge to settle from the body's trailers, if the layer
/// settles from trailers (see `trailers.rs`).
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Never read: held for its `Drop`, which gives the slots back.
    _permits: Vec<Permit>,
    /// The charge a trailer settle function decides on when the body ends.
    pub(crate) trailers: Option<Box<Trailing>>,
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
    Ok(Held {
        _permits: held,
        trailers: None,
    })
}

/// [`acquire`] in queue mode: a saturated limit is waited for, FIFO among the key's waiters,
/// until one deadline of `max_wait` for all the limits together; the request takes a waiter
/// slot of the queue while it waits (none left: rejected at once, counted `queue_full`).
pub(crate) async fn acquire_waiting(
    limits: &[InFlightEntry],
    waiters: &Arc<Waiters>,
    subject: &Subject,
    grpc: bool,
    counters: &Counters,
) -> Result<Held, Rejection> {
    let mut held = Vec::with_capacity(limits.len());
    let mut slot = None;
    let mut deadline = None;
    for e in limits {
        let s = match e.limit.try_acquire_for(subject.key()) {
            Ok(p) => {
                held.push(p);
                continue;
            }
            Err(s) => s,
        };
        if slot.is_none() {
            slot = Some(waiters.enter(subject.key()).ok_or_else(|| {
                Counters::bump(&counters.queue_full);
                saturated(&e.name, &s, grpc)
            })?);
            Counters::bump(&counters.queued);
        }
        let d = deadline.get_or_insert_with(|| waiters.sleep(waiters.config.max_wait()));
        match e.limit.acquire_for_until(subject.key(), d.as_mut()).await {
            Ok(p) => held.push(p),
            Err(s) => return Err(saturated(&e.name, &s, grpc)),
        }
    }
    Ok(Held {
        _permits: held,
        trailers: None,
    })
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

/// The concurrency slots of a request in queue mode, waited for; the rejection (counted) if
/// they did not free in time.
pub(crate) async fn queued_slots(
    shared: &Shared,
    subject: &Subject,
    grpc: bool,
) -> Result<Box<Held>, Response<Bytes>> {
    let Some(waiters) = shared.queue.as_ref() else {
        // Queue mode applies only with a queue.
        let r = acquire(&shared.concurrency, subject, grpc);
        return r.map(Box::new).map_err(|rej| {
            Counters::bump(&shared.counters.saturated);
            reject(shared, subject.tier(), &rej, &[], None)
        });
    };
    let c = &shared.counters;
    match acquire_waiting(&shared.concurrency, waiters, subject, grpc, c).await {
        Ok(h) => Ok(Box::new(h)),
        Err(rejection) => {
            Counters::bump(&shared.counters.saturated);
            Err(reject(shared, subject.tier(), &rejection, &[], None))
        }
    }
}
