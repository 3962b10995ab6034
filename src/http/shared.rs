//! [`SharedRateLimiter`] as a [`PolicySource`] (features `tower` and `redis`): the layer's
//! limit shared by every gateway instance through one Redis.

use core::future::Future;
use core::pin::Pin;

use super::source::{Checked, Judgement, PolicySource, SourceError, Subject};
use crate::engine::check::Check;
use crate::redis::error::BackendError;
use crate::redis::limiter::SharedRateLimiter;

/// A [`SharedRateLimiter`] judges each request by its [`Subject::key`], in one Redis round
/// trip ([`Checked::Later`]); every instance of the gateway that points at the same Redis
/// and prefix enforces one limit together.
///
/// * **Verdicts.** An allowance or a denial is reported under the layer's name for the
///   limit, with the main limit's quota in `RateLimit-Policy`. A denial's retry-after is the
///   latest of the limits that denied (with several [`limit`](crate::redis::SharedRateLimiterBuilder::limit)s,
///   `remaining` is the tightest one's).
/// * **Redis unavailable or at fault** is the [`FailurePolicy`](crate::redis::FailurePolicy)'s
///   verdict, not an error: a timeout, a refused or lost connection, a server or script error,
///   a reply the script never gives. `Open` and an allowed `Local` check pass the request
///   through, marked ([`PassReason::BackendUnavailable`](crate::PassReason::BackendUnavailable))
///   and counted; `Closed` and a used-up local share answer `429` with the reason
///   `backend_unavailable` / `local_share` and the fallback's retry-after. `Closed` never
///   passes a request through.
/// * **Errors.** [`BackendError::InsufficientCapacity`] (a cost above the burst) is
///   [`SourceError::InsufficientCapacity`] (`413`). A key longer than
///   [`SharedRateLimiter::MAX_KEY_BYTES`] (512) is the client's error, decided before any
///   call: the source tells the layer its limit ([`PolicySource::max_key_bytes`]), and the
///   layer answers a longer key as a malformed one (`400`, reason `malformed_key`, or the
///   [`OnMissingKey::Fallback`](super::OnMissingKey::Fallback) key), whatever the failure
///   policy. (Asked directly, the source answers [`SourceError::KeyTooLong`].) The
///   layer's extractors cap keys at [`DEFAULT_MAX_KEY_BYTES`](super::HeaderKey::DEFAULT_MAX_KEY_BYTES)
///   (256) by default, so this matters with a [`HeaderKey::max_len`](super::HeaderKey::max_len)
///   above 512 or a custom extractor.
/// * **Misconfiguration** — a certificate not verified, a wrong or missing password, an ACL
///   without a needed command ([`BackendError::CertificateVerification`],
///   [`BackendError::Authentication`], [`BackendError::Permission`], …) — is
///   [`SourceError::Backend`]: the layer passes the request through, marked and counted as a
///   source error, and the limiter counts each in its [`SharedStats`](crate::redis::SharedStats)
///   (`tls_failures`, `auth_failures`, `permission_denied`). Alert on those: no waiting
///   repairs them.
/// * **Peek** asks Redis for a cost of 0 without writing (the local fallback peeks too).
/// * **Refund and charge** ([`SharedRateLimiter::refund_key`], [`charge_key`](SharedRateLimiter::charge_key))
///   go to Redis from a task of their own, so the response does not wait for them. The
///   layer counts a charge as standing whole once the task is started: a charge the Redis
///   debt cap cuts short is not known to the layer when it settles that request again. Two
///   settles of one request (its head, then its trailers) are two tasks, each one script
///   call; Redis applies them in the order they arrive.
/// * The [`Check`]'s attempt and priority class are not used (see [`SharedRateLimiter`]).
///
/// ```no_run
/// use std::time::Duration;
/// use http::HeaderName;
/// use tollgate::http::{HeaderKey, RateLimitLayer};
/// use tollgate::redis::{FailurePolicy, SharedRateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shared = SharedRateLimiter::builder("100/min".parse()?, "redis://127.0.0.1:6379/")
///     .prefix("gateway")
///     .policy("per-key")
///     .deadline(Duration::from_millis(20))
///     .failure_policy(FailurePolicy::Local)
///     .build()?;
/// let layer = RateLimitLayer::builder()
///     .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
///     .limit("per-key", shared)
///     .build()?;
/// // axum: Router::new().route(..).layer(layer)
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(all(feature = "tower", feature = "redis"))))]
impl PolicySource for SharedRateLimiter {
    fn check<'a>(&'a self, subject: &'a Subject, check: Check) -> Checked<'a> {
        Checked::Later(Box::pin(async move {
            let v = self.check_key_with(subject.key(), check).await;
            self.judgement(v)
        }))
    }

    fn peek<'a>(&'a self, subject: &'a Subject, _check: Check) -> Checked<'a> {
        Checked::Later(Box::pin(async move {
            let v = self.decide(subject.key().as_bytes(), 0, false).await;
            self.judgement(v)
        }))
    }

    fn reads_route(&self) -> bool {
        false
    }

    fn max_key_bytes(&self) -> Option<usize> {
        Some(Self::MAX_KEY_BYTES)
    }

    /// Sent to Redis from a task of its own (the layer does not wait for it): `true` once
    /// handed to the runtime. What came of it is counted in the limiter's
    /// [`stats`](SharedRateLimiter::stats) (`refunds`, `settles_lost`, `settles_repeated`).
    fn refund<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(core::future::ready(self.spawn_settle(subject, cost, false)))
    }

    /// As [`refund`](Self::refund): from a task of its own, counted in `charges`; `cost` once
    /// handed to the runtime (0 outside one).
    fn charge<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
        let spawned = self.spawn_settle(subject, cost, true);
        Box::pin(core::future::ready(if spawned { cost } else { 0 }))
    }
}

impl SharedRateLimiter {
    /// Refunds (or charges) `subject` from a task on the current runtime, so that the
    /// response need not wait for Redis; `false` outside a runtime.
    fn spawn_settle(&self, subject: &Subject, cost: u64, charge: bool) -> bool {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let (lim, key) = (self.clone(), subject.key().to_owned());
        rt.spawn(async move {
            // Counted in the limiter's stats whatever comes of it; a key too long was refused
            // by the check already.
            let _ = if charge {
                lim.charge_key(&key, cost).await
            } else {
                lim.refund_key(&key, cost).await
            };
        });
        true
    }

    fn judgement(
        &self,
        v: Result<crate::engine::verdict::Verdict, BackendError>,
    ) -> Result<Judgement, SourceError> {
        match v {
            Ok(v) => Ok(Judgement::new(v, None, Some(self.quota()))),
            Err(BackendError::InsufficientCapacity(ic)) => {
                Err(SourceError::InsufficientCapacity(ic))
            }
            Err(BackendError::KeyTooLong { len, max }) => Err(SourceError::KeyTooLong { len, max }),
            // Backend faults are the failure policy's verdicts, not errors; what else comes out
            // of a check is configuration no retry fixes: a certificate, credentials or an ACL
            // that Redis refuses, or a cluster behind a URL that cannot reach one
            // (`BackendError::Cluster`).
            Err(e) => Err(SourceError::Backend(Box::new(e))),
        }
    }
}
