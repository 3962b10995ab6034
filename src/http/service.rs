//! The service: one request from its head to its response.
//!
//! When every limit answers at once (the in-memory limiters), the decision is made inside
//! `call` and an allowed request goes straight to the inner service: the response future
//! only adds the fields, nothing is boxed and the inner service is not cloned. An async
//! limit or a wait in queue mode takes the boxed path.

use core::fmt;
use core::future::Future;
use core::marker::PhantomData;
use core::pin::{pin, Pin};
use core::task::{ready, Context, Poll, Waker};
use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{Request, Response};
use tower_service::Service;

use super::body::{BodyMode, WrappedBody};
use super::inflight::{self, Held};
use super::judge::{judge, wait, Figs, Outcome};
use super::layer::{Counters, LayerStats, Shared};
use super::lean::{Decided, Lean};
use super::reject::{prepare, reject, rejected};
use super::response::{Fields, HeaderMode, PassedThrough};
use super::settle::Pending;
use super::source::Subject;
use crate::engine::verdict::{Allowed, Verdict};
use crate::safety::slo::SuccessRate;

/// The service made by [`RateLimitLayer`](super::RateLimitLayer): see there for what it
/// does. Clones share the layer's state. `M` is how its responses carry their bodies
/// ([`WrappedBody`], the default, or [`OwnBody`](super::OwnBody)).
pub struct RateLimit<S, M = WrappedBody> {
    inner: S,
    shared: Arc<Shared>,
    mode: PhantomData<fn() -> M>,
}

impl<S, M> RateLimit<S, M> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self {
            inner,
            shared,
            mode: PhantomData,
        }
    }

    /// The layer's counters (shared with every clone).
    pub fn stats(&self) -> LayerStats {
        self.shared.counters.snapshot()
    }
}

impl<S: Clone, M> Clone for RateLimit<S, M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
            mode: PhantomData,
        }
    }
}

impl<S: fmt::Debug, M> fmt::Debug for RateLimit<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limits", &self.shared.limits.len())
            .finish_non_exhaustive()
    }
}

/// The inner service's response (its fields added) with the request's concurrency permits,
/// or the layer's own (a rejection).
type Answer<RB> = Result<(Response<RB>, Option<Box<Held>>), Response<Bytes>>;

type BoxedResponse<RB, E> = Pin<Box<dyn Future<Output = Result<Answer<RB>, E>> + Send>>;

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`]: the inner service's future with the fields to
    /// add, the layer's own response, or (async limits, queue mode) a boxed future.
    pub struct ResponseFuture<F, RB, E, M = WrappedBody> {
        #[pin]
        kind: Kind<F, RB, E>,
        mode: PhantomData<fn() -> M>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<F, RB, E> {
        Inner { #[pin] fut: F, extra: Option<Box<Extra>> },
        Ready { res: Option<Box<Response<Bytes>>> },
        Boxed { fut: BoxedResponse<RB, E> },
    }
}

impl<F, RB, E, M> fmt::Debug for ResponseFuture<F, RB, E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Ready { .. } => "ready",
            Kind::Boxed { .. } => "boxed",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}

impl<F, RB, E, M> ResponseFuture<F, RB, E, M> {
    fn of(kind: Kind<F, RB, E>) -> Self {
        Self {
            kind,
            mode: PhantomData,
        }
    }

    fn inner(fut: F, extra: Option<Box<Extra>>) -> Self {
        Self::of(Kind::Inner { fut, extra })
    }

    fn ready(res: Response<Bytes>) -> Self {
        Self::of(Kind::Ready {
            res: Some(Box::new(res)),
        })
    }

    fn boxed(fut: BoxedResponse<RB, E>) -> Self {
        Self::of(Kind::Boxed { fut })
    }
}

impl<F, RB, E, M> Future for ResponseFuture<F, RB, E, M>
where
    F: Future<Output = Result<Response<RB>, E>>,
    M: BodyMode<RB>,
{
    type Output = Result<Response<M::Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { fut, extra } => {
                let mut res = ready!(fut.poll(cx))?;
                match extra.take().and_then(|extra| extra.apply(&mut res)) {
                    None => Poll::Ready(Ok(res.map(M::inner))),
                    held => Poll::Ready(Ok(res.map(|b| M::holding(b, held)))),
                }
            }
            // Polled again after completing: a caller's mistake; never completes again.
            KindProj::Ready { res } => res
                .take()
                .map_or(Poll::Pending, |r| Poll::Ready(Ok(r.map(M::own)))),
            KindProj::Boxed { fut } => Poll::Ready(match ready!(fut.as_mut().poll(cx))? {
                Ok((res, None)) => Ok(res.map(M::inner)),
                Ok((res, held)) => Ok(res.map(|b| M::holding(b, held))),
                Err(rejection) => Ok(rejection.map(M::own)),
            }),
        }
    }
}

/// What an allowed response gets once the inner service answers.
struct Extra {
    fields: Fields,
    passed: Option<PassedThrough>,
    slo: Option<(Arc<SuccessRate>, String)>,
    /// The concurrency permits, handed to the response body.
    held: Option<Box<Held>>,
    /// The charge to settle once the response is known (a layer with a settle function).
    settle: Option<Pending>,
}

impl Extra {
    /// What the response future carries: nothing when there is nothing to add (no fields,
    /// no pass-through, no success-rate feed), else the extra on the heap, so that the
    /// future stays small (it is moved by value several times on its way out).
    fn boxed(self) -> Option<Box<Extra>> {
        let empty = self.fields.is_empty()
            && self.passed.is_none()
            && self.slo.is_none()
            && self.held.is_none()
            && self.settle.is_none();
        (!empty).then(|| Box::new(self))
    }

    /// Adds the fields, the mark and the success-rate feed; the permits are what is left
    /// for the body to hold.
    fn apply<RB>(self, res: &mut Response<RB>) -> Option<Box<Held>> {
        // Before the fields: the settle function sees the inner service's own headers; a
        // trailer settle goes on with the body, in what it holds.
        let held = match self.settle {
            Some(pending) => pending.settle(res.status(), res.headers(), self.held),
            None => self.held,
        };
        self.fields.insert_into(res.headers_mut());
        if let Some(p) = self.passed {
            res.extensions_mut().insert(p);
        }
        if let Some((slo, tier)) = self.slo {
            slo.record(&tier, res.status().as_u16());
        }
        held
    }
}

impl<S, B, RB, M> Service<Request<B>> for RateLimit<S, M>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
    M: BodyMode<RB>,
{
    type Response = Response<M::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, RB, S::Error, M>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if let Some(exempt) = &self.shared.exempt {
            // Before anything else: an exempt request goes on as it came, with nothing added.
            let (parts, body) = req.into_parts();
            let free = exempt.applies(&parts, &self.shared.counters);
            req = Request::from_parts(parts, body);
            if free {
                return ResponseFuture::inner(self.inner.call(req), None);
            }
        }
        if let Some(lean) = &self.shared.lean {
            if let Decided::Verdict { key, verdict } = lean.decide(req.headers()) {
                let shared = &*self.shared;
                let extra = match verdict {
                    Verdict::Allow(a) => {
                        Counters::bump(&shared.counters.allowed);
                        match (shared.headers, &shared.success) {
                            // Nothing to add: no extra at all.
                            (HeaderMode::Off, None) => None,
                            _ => lean_extra(shared, lean, &a),
                        }
                    }
                    Verdict::PassThrough(p) => {
                        let passed = PassedThrough {
                            policy: Arc::clone(lean.name()),
                            reason: Some(p.reason()),
                        };
                        allowed(shared, &Figs::None, Some(passed), "").boxed()
                    }
                    Verdict::Deny(d) => {
                        let outcome = Outcome::Denied {
                            figures: Figs::One(lean.figures(0, d.retry_after_secs())),
                            denying: 0,
                            denied: d,
                            queue_full: false,
                        };
                        // Visible ASCII: the key as the extractor reads it.
                        let subject = Subject::new(String::from_utf8_lossy(key), "", "", "");
                        let grpc = is_grpc(req.headers());
                        return ResponseFuture::ready(rejected(shared, &subject, outcome, grpc));
                    }
                };
                return ResponseFuture::inner(self.inner.call(req), extra);
            }
        }
        let shared = Arc::clone(&self.shared);
        let (parts, body) = req.into_parts();
        let grpc = is_grpc(&parts.headers);
        let (subject, check) = match prepare(&shared, &parts, grpc) {
            Ok(p) => p,
            Err((tier, rejection)) => {
                shared.counters.rejected_early(&rejection);
                return ResponseFuture::ready(reject(&shared, &tier, &rejection, &[], None));
            }
        };
        // Concurrency first: a saturated request is then charged to no rate limit.
        let held = if shared.concurrency.is_empty() {
            None
        } else {
            match inflight::acquire(&shared.concurrency, &subject, grpc) {
                Ok(h) => Some(Box::new(h)),
                Err(_) if queue_applies(&shared, &parts) => {
                    // Queue mode: wait for the slots on the boxed path, then judge.
                    let inner = self.take_inner();
                    return ResponseFuture::boxed(Box::pin(async move {
                        let held = match inflight::queued_slots(&shared, &subject, grpc).await {
                            Ok(h) => h,
                            Err(res) => return Ok(Err(res)),
                        };
                        let mut outcome = judge(&shared, &subject, check).await;
                        if outcome.is_denied() {
                            outcome = wait(&shared, &subject, check, outcome).await;
                        }
                        let req = Request::from_parts(parts, body);
                        finish(
                            &shared,
                            inner,
                            req,
                            (subject, outcome, check.units()),
                            grpc,
                            Some(held),
                        )
                        .await
                    }));
                }
                Err(rejection) => {
                    Counters::bump(&shared.counters.saturated);
                    let res = reject(&shared, subject.tier(), &rejection, &[], None);
                    return ResponseFuture::ready(res);
                }
            }
        };
        if shared.answers_now {
            // Every limit answers at once, so the judging future completes on its first
            // poll; a source that breaks that promise is treated as a failed source (the
            // judging is dropped, which refunds the limits it had charged).
            let judged = {
                let fut = pin!(judge(&shared, &subject, check));
                fut.poll(&mut Context::from_waker(Waker::noop()))
            };
            let outcome = match judged {
                Poll::Ready(o) => o,
                Poll::Pending => {
                    Counters::bump(&shared.counters.source_errors);
                    let policy = (shared.limits.first())
                        .map_or_else(|| Arc::from("(unnamed)"), |e| Arc::clone(&e.name));
                    let passed = Some(PassedThrough {
                        policy,
                        reason: None,
                    });
                    Outcome::Allowed {
                        figures: Figs::None,
                        passed,
                        uncounted: Default::default(),
                    }
                }
            };
            if !(outcome.is_denied() && queue_applies(&shared, &parts)) {
                return match outcome {
                    Outcome::Allowed {
                        figures,
                        passed,
                        uncounted,
                    } => {
                        let mut extra = allowed(&shared, &figures, passed, subject.tier());
                        extra.held = held;
                        let (enforced, units) = (extra.passed.is_none(), check.units());
                        extra.settle = Pending::of(&shared, enforced, subject, units, &uncounted);
                        let fut = self.inner.call(Request::from_parts(parts, body));
                        ResponseFuture::inner(fut, extra.boxed())
                    }
                    denied => ResponseFuture::ready(rejected(&shared, &subject, denied, grpc)),
                };
            }
            // Denied, and queue mode applies: wait on the boxed path.
            let inner = self.take_inner();
            return ResponseFuture::boxed(Box::pin(async move {
                let outcome = wait(&shared, &subject, check, outcome).await;
                let req = Request::from_parts(parts, body);
                finish(
                    &shared,
                    inner,
                    req,
                    (subject, outcome, check.units()),
                    grpc,
                    held,
                )
                .await
            }));
        }
        let inner = self.take_inner();
        ResponseFuture::boxed(Box::pin(async move {
            let mut outcome = judge(&shared, &subject, check).await;
            if outcome.is_denied() && queue_applies(&shared, &parts) {
                outcome = wait(&shared, &subject, check, outcome).await;
            }
            let req = Request::from_parts(parts, body);
            finish(
                &shared,
                inner,
                req,
                (subject, outcome, check.units()),
                grpc,
                held,
            )
            .await
        }))
    }
}

impl<S: Clone, M> RateLimit<S, M> {
    /// The service polled ready, for a request served later; a fresh clone takes its place.
    fn take_inner(&mut self) -> S {
        let fresh = self.inner.clone();
        core::mem::replace(&mut self.inner, fresh)
    }
}

/// The boxed path's end: the inner service for an allowed request, the rejection otherwise.
async fn finish<S, B, RB>(
    shared: &Arc<Shared>,
    mut inner: S,
    req: Request<B>,
    // The judged request: its subject, the outcome, the units its check charged.
    (subject, outcome, units): (Subject, Outcome, u64),
    grpc: bool,
    held: Option<Box<Held>>,
) -> Result<Answer<RB>, S::Error>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    match outcome {
        Outcome::Allowed {
            figures,
            passed,
            uncounted,
        } => {
            let mut extra = allowed(shared, &figures, passed, subject.tier());
            extra.held = held;
            extra.settle = Pending::of(shared, extra.passed.is_none(), subject, units, &uncounted);
            let mut res = inner.call(req).await?;
            let held = extra.apply(&mut res);
            Ok(Ok((res, held)))
        }
        denied => Ok(Err(rejected(shared, &subject, denied, grpc))),
    }
}

/// What the lean path's allowance `a` adds to the response (see `lean.rs`): what
/// [`allowed`] makes of the one limit's figures, counted by the caller.
fn lean_extra(shared: &Shared, lean: &Lean, a: &Allowed) -> Option<Box<Extra>> {
    let fields = lean.fields(shared.headers, a, &shared.policy_cache);
    let slo = (shared.success.as_ref()).map(|s| (Arc::clone(s), String::new()));
    Extra {
        fields,
        passed: None,
        slo,
        held: None,
        settle: None,
    }
    .boxed()
}

/// Counts an allowed request and prepares what its response gets.
fn allowed(shared: &Shared, figures: &Figs, passed: Option<PassedThrough>, tier: &str) -> Extra {
    Counters::bump(&shared.counters.allowed);
    let all = figures.as_slice();
    let fields = match all.iter().min_by_key(|f| f.remaining) {
        Some(tightest) => {
            Fields::allowed(shared.headers, all, tightest, Some(&shared.policy_cache))
        }
        None => {
            // A layer of concurrency limits only has no policy to match.
            if passed.is_none() && !shared.limits.is_empty() {
                Counters::bump(&shared.counters.unmatched);
            }
            Fields::default()
        }
    };
    if passed.is_some() {
        Counters::bump(&shared.counters.passed_through);
    }
    let slo = (shared.success.as_ref()).map(|s| (Arc::clone(s), tier.to_owned()));
    Extra {
        fields,
        passed,
        slo,
        held: None,
        settle: None,
    }
}

fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

fn queue_applies(shared: &Shared, parts: &Parts) -> bool {
    shared.queue.is_some() && shared.queue_if.as_ref().is_none_or(|f| f(parts))
}
