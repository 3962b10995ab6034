//! The layer (a factory), its builder, and the shared state every clone of the service
//! uses. The behaviour lives in `service.rs`.

use core::fmt;
use core::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use http::header::HeaderName;
use http::request::Parts;
use http::Response;
use tower_layer::Layer;

use super::body::{OwnBody, WrappedBody};
use super::exempt::{Exemptions, Rules};
use super::inflight::{InFlightEntry, InFlightLimit};
use super::key::{GlobalKey, KeyExtractor, OnMissingKey};
use super::lean::{Lean, LeanKey, LeanLimit};
use super::queue::{Queue, Waiters};
use super::request::{AttemptHeader, Classifier, Cost, TierFrom};
use super::response::{HeaderMode, Rejection};
use super::service::RateLimit;
use super::settle::Settlers;
use super::source::PolicySource;
pub(crate) use super::stats::Counters;
pub use super::stats::LayerStats;
use crate::safety::slo::SuccessRate;

/// Which requests may wait in queue mode.
pub(crate) type Predicate = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

pub(crate) type Hook = Arc<dyn Fn(&Rejection) -> Response<Bytes> + Send + Sync>;

/// One limit of the layer: a name (used when the source names no policy) and its source.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) name: Arc<str>,
    pub(crate) source: Arc<dyn PolicySource>,
}

/// Everything a request needs, shared by the layer and every service it made.
pub(crate) struct Shared {
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) on_missing: OnMissingKey,
    pub(crate) limits: Vec<Entry>,
    /// The concurrency limits, asked before `limits` (see `inflight.rs`).
    pub(crate) concurrency: Vec<InFlightEntry>,
    pub(crate) classifier: Classifier,
    pub(crate) headers: HeaderMode,
    pub(crate) attempts: Vec<AttemptHeader>,
    pub(crate) cost: Cost,
    pub(crate) queue: Option<Arc<Waiters>>,
    pub(crate) queue_if: Option<Predicate>,
    pub(crate) hook: Option<Hook>,
    pub(crate) success: Option<Arc<SuccessRate>>,
    /// Whether any limit reads the category and route (else they are left empty).
    pub(crate) classify: bool,
    /// Whether every limit answers at once (the decision is then made inside `call`).
    pub(crate) answers_now: bool,
    /// The lean path, for the common setup it covers (see `lean.rs`).
    pub(crate) lean: Option<Lean>,
    pub(crate) policy_cache: super::response::PolicyCache,
    pub(crate) counters: Counters,
    /// The exemptions, asked before anything else (see `exempt.rs`); `None` if there are none.
    pub(crate) exempt: Option<Exemptions>,
    /// The settle functions, asked about each allowed response (see `settle.rs`).
    pub(crate) settle: Settlers,
}

/// A tower [`Layer`] that rate-limits `http` services: it reads a key from each request,
/// asks its limits, and answers denials itself — `429` with `Retry-After`, the IETF
/// `RateLimit-Policy` and `RateLimit` fields and an `application/problem+json` body, or for
/// gRPC a `grpc-status: 8` with `grpc-retry-pushback-ms`.
///
/// All clones of the layer, and every [`RateLimit`] service it makes, share one state: the
/// same limiters, queue and counters (tower's own `RateLimit` gives each clone its own).
///
/// ```
/// use std::sync::Arc;
/// use http::HeaderName;
/// use tollgate::http::{HeaderKey, RateLimitLayer};
/// use tollgate::{KeyedRateLimiter, RateLimiter};
///
/// let layer = RateLimitLayer::builder()
///     .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
///     .limit("per-key", KeyedRateLimiter::<String>::new("10/s".parse()?))
///     .limit("global", RateLimiter::new("1000/s".parse()?))
///     .build()?;
/// assert_eq!(layer.stats().allowed, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # What a request goes through
///
/// 0. The exemptions ([`exempt`](RateLimitLayerBuilder::exempt),
///    [`exempt_ips`](RateLimitLayerBuilder::exempt_ips),
///    [`exempt_preflight`](RateLimitLayerBuilder::exempt_preflight)), if any: an exempt
///    request goes straight to the inner service, judged by nothing, with no field added
///    (see [Exemptions](RateLimitLayerBuilder#exemptions)).
/// 1. The key ([`key`](RateLimitLayerBuilder::key); by default [`GlobalKey`]): missing or
///    malformed → the [`OnMissingKey`] choice.
/// 2. The tier, category and route, the attempt number and the cost: a malformed header
///    the layer reads → `400`.
/// 3. Every limit, **all or nothing**: if any denies, none is charged (they are peeked
///    first, then checked; a denial never consumes). A limit with no matching policy does
///    not limit the request, and a request no limit matches passes with no `RateLimit`
///    field at all.
/// 4. Allowed → the inner service, with `RateLimit` added for the tightest limit (fewest
///    remaining) and `RateLimit-Policy` listing all matched ones ([`HeaderMode`]).
///    Passed through → the same, marked with [`PassedThrough`](super::PassedThrough).
///    Denied → the rejection, or in [queue mode](Queue) a bounded wait first.
/// 5. The response status (the inner service's or the layer's) goes to the
///    [`SuccessRate`], by tier, if one is attached.
///
/// # Races
///
/// With several limits, another request can take the last capacity of a later limit
/// between this request's peek and its check. The earlier limits have then been charged
/// for a request that is rejected: the layer asks each to
/// [`refund`](super::PolicySource::refund) (the built-in sources do), and counts
/// [`LayerStats::races`] where a source cannot. This needs two requests racing for the last
/// unit of a limit in the same few hundred nanoseconds.
///
/// # Panics and hang-ups
///
/// A request that is never served keeps no unit: if a [`PolicySource`] of your own panics
/// (in its check, its future or its refund) after another limit charged the request, or
/// the response future is dropped mid-judging (the client hung up), the limits charged so
/// far are refunded at once as the judging unwinds (a source's refund future is polled
/// once; the built-in sources complete on it). A request waiting in [queue mode](Queue)
/// holds no charge, and its waiter slot is freed however the wait ends. The panic itself
/// goes on to the caller. Callbacks that run before any limit is asked (the key extractor,
/// the tier, category and route functions, the queue predicate) or after the refunds (the
/// [`on_reject`](RateLimitLayerBuilder::on_reject) hook) have nothing to give back.
///
/// # Response bodies
///
/// By default a response's body is a [`RateLimitBody`](super::RateLimitBody), which holds the
/// inner service's body or the layer's own ([`WrappedBody`]): it works with any body. Where
/// the inner service's body can be built from bytes (axum's `Body`, `Full<Bytes>`),
/// [`own_body`](Self::own_body) keeps the inner service's response type as it is
/// ([`OwnBody`](super::OwnBody)): nothing to unwrap, and under axum one allocation less per
/// request.
pub struct RateLimitLayer<M = WrappedBody> {
    shared: Arc<Shared>,
    mode: PhantomData<fn() -> M>,
}

impl<M> Clone for RateLimitLayer<M> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            mode: PhantomData,
        }
    }
}

impl RateLimitLayer {
    /// A builder.
    pub fn builder() -> RateLimitLayerBuilder {
        RateLimitLayerBuilder::default()
    }

    /// The same layer (the same state: limiters, queue and counters), with services whose
    /// responses keep the inner service's body type ([`OwnBody`](super::OwnBody)), for inner
    /// services whose body can be built from bytes. A trailer settle
    /// ([`settle_trailers`](RateLimitLayerBuilder::settle_trailers)) is then never applied: the
    /// layer cannot see the body (counted in [`LayerStats::settle_lost`]).
    pub fn own_body(self) -> RateLimitLayer<OwnBody> {
        RateLimitLayer {
            shared: self.shared,
            mode: PhantomData,
        }
    }
}

impl<M> RateLimitLayer<M> {
    /// The counters, shared by every clone and service of this layer.
    pub fn stats(&self) -> LayerStats {
        self.shared.counters.snapshot()
    }

    /// How many requests wait in queue mode now, and for how many keys.
    pub fn waiting(&self) -> (usize, usize) {
        self.shared
            .queue
            .as_ref()
            .map_or((0, 0), |w| (w.len(), w.keys()))
    }
}

impl<S, M> Layer<S> for RateLimitLayer<M> {
    type Service = RateLimit<S, M>;

    fn layer(&self, inner: S) -> RateLimit<S, M> {
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}

impl<M> fmt::Debug for RateLimitLayer<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        let names: Vec<&str> = s.limits.iter().map(|e| &*e.name).collect();
        f.debug_struct("RateLimitLayer")
            .field("limits", &names)
            .field(
                "concurrency",
                &s.concurrency.iter().map(|e| &*e.name).collect::<Vec<_>>(),
            )
            .field("on_missing_key", &s.on_missing)
            .field("classifier", &s.classifier)
            .field("headers", &s.headers)
            .field("cost", &s.cost)
            .field("lean", &s.lean.is_some())
            .field("exempt", &s.exempt)
            .field("queue", &s.queue.as_ref().map(|w| &w.config))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// A layer that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayerError {
    /// No [`limit`](RateLimitLayerBuilder::limit) or
    /// [`concurrency`](RateLimitLayerBuilder::concurrency) limit was given: the layer would
    /// limit nothing.
    #[error("a rate-limit layer needs at least one limit")]
    NoLimit,
    /// Two limits have the same name.
    #[error("two limits are named {0:?}")]
    DuplicateName(String),
}

/// Builds a [`RateLimitLayer`].
#[derive(Default)]
pub struct RateLimitLayerBuilder {
    key: Option<Arc<dyn KeyExtractor>>,
    /// The key's lean form (see `lean.rs`); `None` with a key set means it has none.
    lean_key: Option<LeanKey>,
    /// Each limit's lean form, beside `limits`.
    lean_limits: Vec<Option<LeanLimit>>,
    on_missing: OnMissingKey,
    limits: Vec<Entry>,
    concurrency: Vec<InFlightEntry>,
    classifier: Classifier,
    headers: HeaderMode,
    attempts: Option<Vec<AttemptHeader>>,
    cost: Cost,
    queue: Option<Queue>,
    queue_if: Option<Predicate>,
    hook: Option<Hook>,
    success: Option<Arc<SuccessRate>>,
    /// The exemptions (their builder methods are in `exempt.rs`).
    pub(super) exempt: Rules,
    /// The settle functions (builder methods in `settle.rs` and `trailers.rs`).
    pub(super) settle: Settlers,
}

impl RateLimitLayerBuilder {
    /// How the key is read (default [`GlobalKey`]: one key for every request). A
    /// [`PeerIp`](super::PeerIp) or [`ForwardedIp`](super::ForwardedIp) key is also how
    /// [`exempt_ips`](Self::exempt_ips) finds the client's address.
    pub fn key(mut self, key: impl KeyExtractor) -> Self {
        self.lean_key = LeanKey::of(&key);
        self.exempt.key_is(&key);
        self.key = Some(Arc::new(key));
        self
    }

    /// What to do when the key is missing or malformed (default: `401` for missing, `400`
    /// for malformed).
    pub fn on_missing_key(mut self, choice: OnMissingKey) -> Self {
        self.on_missing = choice;
        self
    }

    /// Adds a limit: a [`RateLimiter`](crate::RateLimiter), a
    /// [`KeyedRateLimiter<String>`](crate::KeyedRateLimiter), a
    /// [`LimitsHandle`](crate::limits::LimitsHandle) (each also in an `Arc`, to keep a handle for
    /// reloads or stats), or any [`PolicySource`]. `name` is the policy name in the headers
    /// when the source names none (a `LimitsHandle` names the document's policy).
    pub fn limit(mut self, name: &str, source: impl PolicySource) -> Self {
        let (source, lean) = LeanLimit::split(source);
        self.limits.push(Entry {
            name: Arc::from(name),
            source,
        });
        self.lean_limits.push(lean);
        self
    }

    /// Adds a limit on requests **in flight**: a
    /// [`ConcurrencyLimiter`](crate::concurrency::ConcurrencyLimiter) (one count for all
    /// requests) or a [`KeyedConcurrencyLimiter<String>`](crate::concurrency::KeyedConcurrencyLimiter)
    /// (a count per key: the layer's key), each also in an `Arc` to read its counts.
    ///
    /// A request takes a slot of every concurrency limit before its rate limits are asked,
    /// all or nothing: if one has no slot open, the slots taken are given back, no rate limit
    /// is charged, and the answer is `429` with reason `concurrency` and no `Retry-After`
    /// (when a slot frees depends on how long the requests in flight take), counted in
    /// [`LayerStats::saturated`]. A request the rate limits then reject gives its slots back
    /// at once. An admitted one holds them until its response body ends or is dropped (the
    /// client hung up) — with the default body mode; under [`own_body`](RateLimitLayer::own_body)
    /// the body's type cannot carry them and they are given back when the response head is
    /// ready. A request waiting in [queue mode](Queue) for a rate limit holds its slots while
    /// it waits. In queue mode a request that finds no slot waits for one (FIFO per key, at
    /// most the queue's `max_wait` for all concurrency limits together, in one of the queue's
    /// waiter places) rather than being rejected at once.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use http::HeaderName;
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    /// use tollgate::http::{HeaderKey, RateLimitLayer};
    /// use tollgate::KeyedRateLimiter;
    ///
    /// // 100 requests a minute per API key, and at most 20 in progress at once.
    /// let in_flight = Arc::new(KeyedConcurrencyLimiter::<String>::new(NonZeroU32::new(20).unwrap()));
    /// let layer = RateLimitLayer::builder()
    ///     .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
    ///     .limit("per-key", KeyedRateLimiter::<String>::new("100/min".parse()?))
    ///     .concurrency("in-flight", Arc::clone(&in_flight))
    ///     .build()?;
    /// assert_eq!(in_flight.in_flight_key("k-1"), 0);
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn concurrency(mut self, name: &str, limit: impl InFlightLimit) -> Self {
        self.concurrency.push(InFlightEntry {
            name: Arc::from(name),
            limit: Arc::new(limit),
        });
        self
    }

    /// The tier is this header's value (missing: the empty tier). Set it only from a
    /// component you trust (your auth proxy), never from clients: a client choosing its own
    /// tier chooses its own limits. A repeated or malformed tier header is answered `400`.
    pub fn tier_header(mut self, name: HeaderName) -> Self {
        self.classifier.tier = TierFrom::Header(name);
        self
    }

    /// The tier is computed from the request head.
    pub fn tier_fn(mut self, f: impl Fn(&Parts) -> String + Send + Sync + 'static) -> Self {
        self.classifier.tier = TierFrom::Fn(Arc::new(f));
        self
    }

    /// The category is computed from the request head (default: the first path segment).
    pub fn category_fn(mut self, f: impl Fn(&Parts) -> String + Send + Sync + 'static) -> Self {
        self.classifier.category = Some(Arc::new(f));
        self
    }

    /// The route is computed from the request head (default: the path as received, not
    /// percent-decoded — give limits keyed on routes a catch-all policy too).
    pub fn route_fn(mut self, f: impl Fn(&Parts) -> String + Send + Sync + 'static) -> Self {
        self.classifier.route = Some(Arc::new(f));
        self
    }

    /// Which rate-limit fields allowed responses carry (default [`HeaderMode::Ietf`]).
    pub fn headers(mut self, mode: HeaderMode) -> Self {
        self.headers = mode;
        self
    }

    /// The headers read for the attempt number, fed to the limits' retry budgets (default
    /// [`AttemptHeader::defaults`]). An empty list reads none: every request is an
    /// original.
    pub fn attempt_headers(mut self, headers: impl IntoIterator<Item = AttemptHeader>) -> Self {
        self.attempts = Some(headers.into_iter().collect());
        self
    }

    /// What a request costs (default [`Cost::One`]); the same cost is charged to every
    /// limit of the layer.
    pub fn cost(mut self, cost: Cost) -> Self {
        self.cost = cost;
        self
    }

    /// Queue mode for every request (see [`Queue`]).
    pub fn queue(mut self, queue: Queue) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Queue mode only for requests `when` accepts (per route: `|p| p.uri.path() ==
    /// "/upload"`); the others are rejected at once.
    pub fn queue_when(
        mut self,
        queue: Queue,
        when: impl Fn(&Parts) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.queue = Some(queue);
        self.queue_if = Some(Arc::new(when));
        self
    }

    /// A custom rejection response. The layer still adds `Retry-After` and the rate-limit
    /// fields unless the hook set them.
    pub fn on_reject(
        mut self,
        hook: impl Fn(&Rejection) -> Response<Bytes> + Send + Sync + 'static,
    ) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Feeds every response status (the inner service's and the layer's own) to `slo`,
    /// under the request's tier.
    pub fn success_rate(mut self, slo: Arc<SuccessRate>) -> Self {
        self.success = Some(slo);
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`LayerError`] if no limit (rate or concurrency) was given or two share a name.
    pub fn build(self) -> Result<RateLimitLayer, LayerError> {
        if self.limits.is_empty() && self.concurrency.is_empty() {
            return Err(LayerError::NoLimit);
        }
        let names: Vec<&Arc<str>> = (self.limits.iter().map(|e| &e.name))
            .chain(self.concurrency.iter().map(|e| &e.name))
            .collect();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(LayerError::DuplicateName(n.to_string()));
            }
        }
        let classify = self.limits.iter().any(|e| e.source.reads_route());
        let answers_now = self.limits.iter().all(|e| e.source.answers_now());
        let attempts = self.attempts.unwrap_or_else(AttemptHeader::defaults);
        let leans: Vec<_> = (self.limits.iter())
            .zip(self.lean_limits)
            .map(|(e, l)| (Arc::clone(&e.name), l))
            .collect();
        let lean_key = match self.key {
            None => Some(LeanKey::Global),
            Some(_) => self.lean_key,
        };
        // The lean path decides before the key is extracted; concurrency limits need the key.
        // A settled response needs the key and the subject after the response: not lean.
        let lean = (self.concurrency.is_empty() && self.settle.is_none())
            .then(|| {
                Lean::new(
                    lean_key,
                    &leans,
                    &self.classifier.tier,
                    self.cost,
                    self.queue.is_some(),
                    &attempts,
                )
            })
            .flatten();
        let shared = Shared {
            key: self.key.unwrap_or_else(|| Arc::new(GlobalKey)),
            on_missing: self.on_missing,
            limits: self.limits,
            concurrency: self.concurrency,
            classifier: self.classifier,
            headers: self.headers,
            attempts,
            cost: self.cost,
            queue: self.queue.map(|q| Arc::new(Waiters::new(q))),
            queue_if: self.queue_if,
            hook: self.hook,
            success: self.success,
            classify,
            answers_now,
            lean,
            policy_cache: Default::default(),
            counters: Counters::default(),
            exempt: self.exempt.build(),
            settle: self.settle,
        };
        Ok(RateLimitLayer {
            shared: Arc::new(shared),
            mode: PhantomData,
        })
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("limits", &self.limits.len())
            .finish_non_exhaustive()
    }
}
