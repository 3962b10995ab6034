//! Before and after the limits: reading what they need from the request head (or the
//! reason the request is rejected before any limit is asked), and the layer's own
//! responses to rejected requests.

use std::sync::Arc;

use bytes::Bytes;

use http::request::Parts;
use http::{Response, StatusCode};

use super::judge::Outcome;
use super::key::{KeyError, OnMissingKey};
use super::layer::{Counters, Shared};
use super::response::{self, RejectReason, Rejection};
use super::source::Subject;
use crate::engine::check::Check;
use crate::engine::verdict::Denied;

/// The subject and the check, or the tier and why the request is rejected before any limit
/// is asked.
pub(crate) fn prepare(
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
    let malformed = |e: super::request::BadHeader| {
        bad(StatusCode::BAD_REQUEST, RejectReason::MalformedHeader, e.0)
    };
    let tier = shared
        .classifier
        .tier(parts)
        .map_err(|e| (String::new(), malformed(e)))?;
    let extracted = shared.key.extract(parts).and_then(|k| fits(shared, k));
    let key = match (extracted, &shared.on_missing) {
        (Ok(k), _) => k,
        // The server's set-up, not the client's request: no fallback key hides it.
        (Err(e @ KeyError::NoPeerAddress), _) => {
            let r = bad(
                StatusCode::INTERNAL_SERVER_ERROR,
                RejectReason::NoPeerAddress,
                e.to_string(),
            );
            return Err((tier, r));
        }
        (Err(_), OnMissingKey::Fallback(k)) => match fits(shared, k.clone()) {
            Ok(k) => k,
            Err(e) => {
                let r = bad(
                    StatusCode::BAD_REQUEST,
                    RejectReason::MalformedKey,
                    e.to_string(),
                );
                return Err((tier, r));
            }
        },
        (Err(e @ KeyError::Missing { .. }), OnMissingKey::Reject(status)) => {
            return Err((tier, bad(*status, RejectReason::MissingKey, e.to_string())));
        }
        (Err(e), _) => {
            let r = bad(
                StatusCode::BAD_REQUEST,
                RejectReason::MalformedKey,
                e.to_string(),
            );
            return Err((tier, r));
        }
    };
    let attempt = match super::request::attempt(&parts.headers, &shared.attempts) {
        Ok(a) => a,
        Err(e) => return Err((tier, malformed(e))),
    };
    let cost = match shared.cost.of(parts) {
        Ok(c) => c,
        Err(e) => return Err((tier, malformed(e))),
    };
    let (category, route) = if shared.classify {
        (
            shared.classifier.category(parts),
            shared.classifier.route(parts),
        )
    } else {
        (String::new(), String::new())
    };
    let subject = Subject::new(key, tier, category, route);
    Ok((subject, Check::cost(cost).attempt(attempt)))
}

/// `key`, or why a limit cannot judge it. A source whose backend caps its keys
/// ([`PolicySource::max_key_bytes`](super::PolicySource::max_key_bytes)) is never asked about
/// a longer one: it could not judge it, and an unjudged request would pass whatever the
/// source's failure policy. The client's error, answered as the extractors' malformed keys are.
fn fits(shared: &Shared, key: String) -> Result<String, KeyError> {
    let max = shared
        .limits
        .iter()
        .filter_map(|e| e.source.max_key_bytes())
        .min();
    match max {
        Some(max) if key.len() > max => Err(KeyError::Malformed {
            what: format!("key of {} bytes (a limit takes at most {max})", key.len()),
            why: "too long",
        }),
        _ => Ok(key),
    }
}

/// The layer's response to a denied (or too costly) request.
pub(crate) fn rejected(
    shared: &Shared,
    subject: &Subject,
    outcome: Outcome,
    grpc: bool,
) -> Response<Bytes> {
    Counters::bump(&shared.counters.denied);
    match outcome {
        Outcome::Denied {
            figures,
            denying,
            denied,
            queue_full,
        } => {
            let all = figures.as_slice();
            let Some(denier) = all.get(denying) else {
                // The index comes from the same list; an allowance is the only other case.
                return reject(
                    shared,
                    subject.tier(),
                    &too_many(None, denied, grpc, false),
                    all,
                    None,
                );
            };
            let rejection = too_many(Some(Arc::clone(&denier.policy)), denied, grpc, queue_full);
            reject(shared, subject.tier(), &rejection, all, Some(denying))
        }
        Outcome::TooBig {
            policy,
            cost,
            capacity,
        } => {
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
            reject(shared, subject.tier(), &rejection, &[], None)
        }
        Outcome::KeyTooLong { policy, len, max } => {
            let rejection = Rejection {
                status: StatusCode::BAD_REQUEST,
                reason: RejectReason::MalformedKey,
                detail: format!(
                    "key of {len} bytes is longer than policy {policy:?} takes ({max} bytes)"
                ),
                policy: Some(policy),
                retry_after: None,
                grpc,
            };
            reject(shared, subject.tier(), &rejection, &[], None)
        }
        Outcome::Allowed { .. } => {
            // Not reached: callers pass denials only. Answer as a plain denial of nothing.
            let rejection = too_many(None, Denied::new(0, crate::DenyReason::Quota), grpc, false);
            reject(shared, subject.tier(), &rejection, &[], None)
        }
    }
}

fn too_many(policy: Option<Arc<str>>, denied: Denied, grpc: bool, queue_full: bool) -> Rejection {
    let name = policy.as_deref().unwrap_or("(unnamed)");
    let (reason, detail) = if queue_full {
        let detail = format!(
            "rate limited by policy {name:?} and the wait queue is full; retry after {} s",
            denied.retry_after_secs()
        );
        (RejectReason::QueueFull, detail)
    } else {
        let reason = RejectReason::Denied(denied.reason());
        let detail = format!(
            "rate limited by policy {name:?} ({}); retry after {} s",
            reason.as_str(),
            denied.retry_after_secs()
        );
        (reason, detail)
    };
    Rejection {
        status: StatusCode::TOO_MANY_REQUESTS,
        reason,
        policy,
        retry_after: Some(denied),
        detail,
        grpc,
    }
}

/// The layer's response to a rejected request.
pub(crate) fn reject(
    shared: &Shared,
    tier: &str,
    rejection: &Rejection,
    figures: &[response::Figures],
    denying: Option<usize>,
) -> Response<Bytes> {
    let mut res = match &shared.hook {
        Some(hook) => hook(rejection),
        None => response::default_response(rejection),
    };
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
