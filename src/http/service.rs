//! The service: one request from its head to its response.

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::sync::Arc;

use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::key::{KeyError, OnMissingKey};
use super::layer::{Counters, LayerStats, Shared};
use super::response::{self, Figures, PassedThrough, RateLimitBody, RejectReason, Rejection};
use super::source::{Judgement, SourceError, Subject};
use crate::engine::check::Check;
use crate::engine::verdict::{Denied, Verdict};

/// The service made by [`RateLimitLayer`](super::RateLimitLayer): see there for what it
/// does. Clones share the layer's state.
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// The layer's counters (shared with every clone).
    pub fn stats(&self) -> LayerStats {
        self.shared.counters.snapshot()
    }
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limits", &self.shared.limits.len())
            .finish_non_exhaustive()
    }
}

/// The response future of [`RateLimit`].
pub type ResponseFuture<RB, E> =
    Pin<Box<dyn Future<Output = Result<Response<RateLimitBody<RB>>, E>> + Send>>;

impl<S, B, RB> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RateLimitBody<RB>>;
    type Error = S::Error;
    type Future = ResponseFuture<RB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The service polled ready is the one that serves this request; a fresh clone
        // takes its place for the next one.
        let fresh = self.inner.clone();
        let inner = core::mem::replace(&mut self.inner, fresh);
        Box::pin(run(Arc::clone(&self.shared), inner, req))
    }
}

/// What all limits together decided.
enum Outcome {
    Allowed {
        figures: Vec<Figures>,
        passed: Option<PassedThrough>,
    },
    Denied {
        figures: Vec<Figures>,
        denying: usize,
        denied: Denied,
        /// Queue mode was on but its caps were reached.
        queue_full: bool,
    },
    TooBig {
        policy: Arc<str>,
        cost: u64,
        capacity: u64,
    },
}

async fn run<S, B, RB>(
    shared: Arc<Shared>,
    mut inner: S,
    req: Request<B>,
) -> Result<Response<RateLimitBody<RB>>, S::Error>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    let (parts, body) = req.into_parts();
    let grpc = is_grpc(&parts);
    let (subject, check) = match prepare(&shared, &parts, grpc) {
        Ok(p) => p,
        Err((tier, rejection)) => {
            Counters::bump(&shared.counters.bad_requests);
            return Ok(reject(&shared, &tier, &rejection, &[], None));
        }
    };
    let mut outcome = judge(&shared, &subject, check).await;
    if matches!(outcome, Outcome::Denied { .. }) && queue_applies(&shared, &parts) {
        outcome = wait(&shared, &subject, check, outcome).await;
    }
    match outcome {
        Outcome::Allowed { figures, passed } => {
            Counters::bump(&shared.counters.allowed);
            let mut res = inner.call(Request::from_parts(parts, body)).await?;
            if let Some(tightest) = figures.iter().min_by_key(|f| f.remaining) {
                response::add_fields(res.headers_mut(), shared.headers, &figures, tightest);
            } else if passed.is_none() {
                Counters::bump(&shared.counters.unmatched);
            }
            if let Some(p) = passed {
                Counters::bump(&shared.counters.passed_through);
                res.extensions_mut().insert(p);
            }
            if let Some(slo) = &shared.success {
                slo.record(subject.tier(), res.status().as_u16());
            }
            Ok(res.map(RateLimitBody::inner))
        }
        Outcome::Denied {
            figures,
            denying,
            denied,
            queue_full,
        } => {
            Counters::bump(&shared.counters.denied);
            let policy = Arc::clone(&figures[denying].policy);
            let reason = if queue_full {
                RejectReason::QueueFull
            } else {
                RejectReason::Denied(denied.reason())
            };
            let rejection = denial(policy, denied, grpc, reason);
            Ok(reject(
                &shared,
                subject.tier(),
                &rejection,
                &figures,
                Some(denying),
            ))
        }
        Outcome::TooBig {
            policy,
            cost,
            capacity,
        } => {
            Counters::bump(&shared.counters.denied);
            let rejection = Rejection {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                reason: RejectReason::InsufficientCapacity,
                detail: format!(
                    "the request costs {cost}, more than policy {policy:?} ever admits at once ({capacity})"
                ),
                policy: Some(policy),
                retry_after: None,
                grpc,
            };
            Ok(reject(&shared, subject.tier(), &rejection, &[], None))
        }
    }
}

fn is_grpc(parts: &Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

fn queue_applies(shared: &Shared, parts: &Parts) -> bool {
    shared.queue.is_some() && shared.queue_if.as_ref().is_none_or(|f| f(parts))
}

fn denial(policy: Arc<str>, denied: Denied, grpc: bool, reason: RejectReason) -> Rejection {
    let detail = match reason {
        RejectReason::QueueFull => format!(
            "rate limited by policy {policy:?} and the wait queue is full; retry after {} s",
            denied.retry_after_secs()
        ),
        _ => format!(
            "rate limited by policy {policy:?} ({}); retry after {} s",
            reason.as_str(),
            denied.retry_after_secs()
        ),
    };
    Rejection {
        status: StatusCode::TOO_MANY_REQUESTS,
        reason,
        policy: Some(policy),
        retry_after: Some(denied),
        detail,
        grpc,
    }
}

/// The subject and the check, or the tier and why the request is rejected before any limit
/// is asked.
fn prepare(
    shared: &Shared,
    parts: &Parts,
    grpc: bool,
) -> Result<(Subject, Check), (String, Rejection)> {
    let bad = |status, reason, detail: String| Rejection {
        status,
        reason,
        policy: None,
        retry_after: None,
        detail,
        grpc,
    };
    let tier = shared.classifier.tier(parts).map_err(|e| {
        (
            String::new(),
            bad(StatusCode::BAD_REQUEST, RejectReason::MalformedHeader, e.0),
        )
    })?;
    let key = match (shared.key.extract(parts), &shared.on_missing) {
        (Ok(k), _) => k,
        (Err(_), OnMissingKey::Fallback(k)) => k.clone(),
        (Err(e @ KeyError::Missing { .. }), OnMissingKey::Reject(status)) => {
            return Err((tier, bad(*status, RejectReason::MissingKey, e.to_string())));
        }
        (Err(e), _) => {
            return Err((
                tier,
                bad(
                    StatusCode::BAD_REQUEST,
                    RejectReason::MalformedKey,
                    e.to_string(),
                ),
            ));
        }
    };
    let fail = |tier: &String, e: super::request::BadHeader| {
        (
            tier.clone(),
            bad(StatusCode::BAD_REQUEST, RejectReason::MalformedHeader, e.0),
        )
    };
    let attempt = super::request::attempt(parts, &shared.attempts).map_err(|e| fail(&tier, e))?;
    let cost = shared.cost.of(parts).map_err(|e| fail(&tier, e))?;
    let (category, route) = if shared.classify {
        (
            shared.classifier.category(parts),
            shared.classifier.route(parts),
        )
    } else {
        (String::new(), String::new())
    };
    Ok((
        Subject::new(key, tier, category, route),
        Check::cost(cost).attempt(attempt),
    ))
}

/// A source's judgement, or `None` for a failed source (passed through, counted).
type Judged = Result<Judgement, SourceError>;

/// All limits, all or nothing: peek every limit; if one would deny, check only that one (a
/// denial consumes nothing) and report it; else check them all, refunding on a race.
async fn judge(shared: &Shared, subject: &Subject, check: Check) -> Outcome {
    let limits = &shared.limits;
    let none = || {
        (0..limits.len())
            .map(|_| None)
            .collect::<Vec<Option<Judged>>>()
    };
    let (mut judged, mut peeked) = (none(), none());
    if limits.len() > 1 {
        for (i, e) in limits.iter().enumerate() {
            let p = e.source.peek(subject, check).resolve().await;
            let short = match &p {
                Err(SourceError::InsufficientCapacity(_)) => true,
                Ok(j) => match j.verdict() {
                    Verdict::Deny(_) => true,
                    Verdict::Allow(a) => j.is_matched() && a.remaining() < check.units(),
                    _ => false,
                },
                Err(_) => false,
            };
            peeked[i] = Some(p);
            if short {
                // A denial consumes nothing: checking the short limit alone gets its exact
                // verdict and charges no other limit.
                judged[i] = Some(e.source.check(subject, check).resolve().await);
                if !is_permitted(judged[i].as_ref()) {
                    return outcome(shared, subject, check, judged, peeked).await;
                }
            }
        }
    }
    for (i, e) in limits.iter().enumerate() {
        if judged[i].is_none() {
            let j = e.source.check(subject, check).resolve().await;
            let stop = !is_permitted(Some(&j));
            judged[i] = Some(j);
            if stop {
                break;
            }
        }
    }
    outcome(shared, subject, check, judged, peeked).await
}

fn is_permitted(j: Option<&Judged>) -> bool {
    match j {
        Some(Ok(j)) => j.verdict().is_permitted(),
        Some(Err(SourceError::InsufficientCapacity(_))) => false,
        _ => true,
    }
}

/// Figures and the decision from what each limit said. A limit that was peeked but not
/// checked (another denied first) shows its peeked figures, and was not charged.
async fn outcome(
    shared: &Shared,
    subject: &Subject,
    check: Check,
    judged: Vec<Option<Judged>>,
    peeked: Vec<Option<Judged>>,
) -> Outcome {
    let mut figures = Vec::new();
    let mut passed = None;
    let mut denial: Option<(usize, Denied)> = None;
    let mut charged = Vec::new();
    let peeked = peeked.into_iter().chain(core::iter::repeat_with(|| None));
    for ((e, j), p) in shared.limits.iter().zip(judged).zip(peeked) {
        let j = match (j, p) {
            (None, Some(Ok(p))) if p.is_matched() => {
                if let Verdict::Allow(a) = p.verdict() {
                    let policy = Arc::clone(p.policy_arc().unwrap_or(&e.name));
                    let (remaining, reset_secs) = (a.remaining(), secs_up(a.reset_after()));
                    figures.push(Figures {
                        policy,
                        quota: p.quota(),
                        remaining,
                        reset_secs,
                    });
                }
                continue;
            }
            (None, _) => continue,
            (Some(j), _) => j,
        };
        let j = match j {
            Err(SourceError::InsufficientCapacity(ic)) => {
                refund_all(shared, subject, check, &charged).await;
                return Outcome::TooBig {
                    policy: Arc::clone(&e.name),
                    cost: ic.cost(),
                    capacity: ic.capacity(),
                };
            }
            Err(_) => {
                Counters::bump(&shared.counters.source_errors);
                passed = Some(PassedThrough {
                    policy: Arc::clone(&e.name),
                    reason: None,
                });
                continue;
            }
            Ok(j) if !j.is_matched() => continue,
            Ok(j) => j,
        };
        let policy = Arc::clone(j.policy_arc().unwrap_or(&e.name));
        let (remaining, reset_secs) = match j.verdict() {
            Verdict::Allow(a) => {
                charged.push(Arc::clone(&e.source));
                (a.remaining(), secs_up(a.reset_after()))
            }
            Verdict::Deny(d) => {
                denial = Some((figures.len(), d));
                (0, d.retry_after_secs())
            }
            Verdict::PassThrough(p) => {
                passed = Some(PassedThrough {
                    policy,
                    reason: Some(p.reason()),
                });
                continue;
            }
        };
        figures.push(Figures {
            policy,
            quota: j.quota(),
            remaining,
            reset_secs,
        });
    }
    match denial {
        Some((denying, denied)) => {
            refund_all(shared, subject, check, &charged).await;
            Outcome::Denied {
                figures,
                denying,
                denied,
                queue_full: false,
            }
        }
        None => Outcome::Allowed { figures, passed },
    }
}

/// Gives back what the allowing limits of a rejected request consumed.
async fn refund_all(
    shared: &Shared,
    subject: &Subject,
    check: Check,
    charged: &[Arc<dyn super::PolicySource>],
) {
    for source in charged {
        if !source.refund(subject, check.units()).await {
            Counters::bump(&shared.counters.races);
        }
    }
}

fn secs_up(d: Duration) -> u64 {
    d.as_nanos()
        .div_ceil(1_000_000_000)
        .try_into()
        .unwrap_or(u64::MAX)
}

/// Queue mode: wait for capacity up to `max_wait`, holding a waiter slot.
async fn wait(shared: &Shared, subject: &Subject, check: Check, mut outcome: Outcome) -> Outcome {
    let Some(waiters) = shared.queue.as_ref() else {
        return outcome;
    };
    let max_wait = waiters.config.max_wait();
    let Outcome::Denied { denied, .. } = &outcome else {
        return outcome;
    };
    if denied.retry_after() > max_wait {
        return outcome;
    }
    let Some(_slot) = waiters.enter(subject.key()) else {
        Counters::bump(&shared.counters.queue_full);
        return queue_full(outcome);
    };
    Counters::bump(&shared.counters.queued);
    let mut waited = Duration::ZERO;
    while let Outcome::Denied { denied, .. } = &outcome {
        let left = max_wait.saturating_sub(waited);
        if denied.retry_after() > left || left.is_zero() {
            break;
        }
        let nap = waiters.jittered(denied.retry_after()).min(left);
        waiters.sleep(nap).await;
        waited = waited.saturating_add(nap);
        outcome = judge(shared, subject, check).await;
    }
    outcome
}

fn queue_full(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Denied {
            figures,
            denying,
            denied,
            ..
        } => Outcome::Denied {
            figures,
            denying,
            denied,
            queue_full: true,
        },
        other => other,
    }
}

/// The layer's response to a rejected request.
fn reject<RB>(
    shared: &Shared,
    tier: &str,
    rejection: &Rejection,
    figures: &[Figures],
    denying: Option<usize>,
) -> Response<RateLimitBody<RB>> {
    let res = match &shared.hook {
        Some(hook) => hook(rejection),
        None => response::default_response(rejection),
    };
    let mut res = res.map(RateLimitBody::full);
    let denying = denying.and_then(|i| figures.get(i));
    response::add_reject_fields(
        res.headers_mut(),
        rejection,
        shared.headers,
        figures,
        denying,
    );
    if let Some(slo) = &shared.success {
        // A gRPC rejection travels as HTTP 200: feed the status it stands for.
        let status = if rejection.grpc {
            rejection.status
        } else {
            res.status()
        };
        slo.record(tier, status.as_u16());
    }
    res
}
