//! Policy sources: where the layer gets its verdicts. The extension point for async
//! limiters (a Redis-backed one implements [`PolicySource`] with [`Checked::Later`]).

use core::fmt;
use core::future::Future;
use core::pin::Pin;
use std::sync::Arc;

use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::engine::quota::Quota;
use crate::engine::verdict::Verdict;
use crate::limiter::direct::RateLimiter;
use crate::limiter::keyed::KeyedRateLimiter;
#[cfg(feature = "config")]
use crate::limits::reload::LimitsHandle;

/// What a policy source is asked about: the request's key and where it goes.
///
/// ```
/// use tollgate::http::Subject;
/// let s = Subject::new("customer-42", "paid", "checkout", "/checkout/cart");
/// assert_eq!((s.key(), s.tier(), s.category(), s.route()), ("customer-42", "paid", "checkout", "/checkout/cart"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Subject {
    key: String,
    tier: String,
    category: String,
    route: String,
}

impl Subject {
    /// A subject: the limiter key, the tier, the category and the route.
    pub fn new(
        key: impl Into<String>,
        tier: impl Into<String>,
        category: impl Into<String>,
        route: impl Into<String>,
    ) -> Self {
        Self {
            key: key.into(),
            tier: tier.into(),
            category: category.into(),
            route: route.into(),
        }
    }

    /// The limiter key (from the layer's [`KeyExtractor`](super::KeyExtractor)).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The tier (empty when the layer has no tier source or the request names none).
    pub fn tier(&self) -> &str {
        &self.tier
    }

    /// The category (by default the first path segment).
    pub fn category(&self) -> &str {
        &self.category
    }

    /// The route (by default the request's path, as received: not percent-decoded).
    pub fn route(&self) -> &str {
        &self.route
    }
}

/// A source's answer for one request.
///
/// ```
/// use tollgate::http::Judgement;
/// use tollgate::RateLimiter;
/// let lim = RateLimiter::new("10/s".parse()?);
/// let j = Judgement::new(lim.check(), None, Some(lim.quota()));
/// assert!(j.is_matched() && j.verdict().is_permitted());
/// assert!(!Judgement::unmatched().is_matched());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    verdict: Option<Verdict>,
    policy: Option<Arc<str>>,
    quota: Option<Quota>,
}

impl Judgement {
    /// A verdict under `policy` (`None`: the name the layer gave the source) and its quota
    /// (`None`: not advertised in `RateLimit-Policy`).
    pub fn new(verdict: Verdict, policy: Option<Arc<str>>, quota: Option<Quota>) -> Self {
        Self {
            verdict: Some(verdict),
            policy,
            quota,
        }
    }

    /// No policy of this source applies to the request: it is not limited by it, and no
    /// `RateLimit` field is sent for it.
    pub fn unmatched() -> Self {
        Self {
            verdict: None,
            policy: None,
            quota: None,
        }
    }

    /// `false` if no policy applied.
    pub fn is_matched(&self) -> bool {
        self.verdict.is_some()
    }

    /// The verdict; an unmatched judgement is an allowance with nothing counted, reported
    /// as [`Verdict::Allow`] with `u64::MAX` remaining.
    pub fn verdict(&self) -> Verdict {
        self.verdict
            .unwrap_or(Verdict::Allow(crate::engine::verdict::Allowed::new(
                u64::MAX,
                0,
                0,
            )))
    }

    /// The policy's name, if the source names it.
    pub fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    pub(crate) fn policy_arc(&self) -> Option<&Arc<str>> {
        self.policy.as_ref()
    }

    /// The policy's quota, if the source tells it.
    pub fn quota(&self) -> Option<Quota> {
        self.quota
    }
}

/// Why a source gave no judgement.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The request costs more than the policy's burst: no wait will do (answered
    /// `413 Content Too Large`, reason `insufficient_capacity`).
    #[error(transparent)]
    InsufficientCapacity(#[from] InsufficientCapacity),
    /// The source's backend failed (a limiter of the user's own that neither answered nor
    /// degraded, or a [`SharedRateLimiter`](crate::redis::SharedRateLimiter) misconfigured: its
    /// certificate, credentials or ACL). The layer passes the request through,
    /// marked and counted: a limiter that cannot judge must not become the outage
    /// (a limiter on a lagging clock once denied everyone for hours).
    #[error("policy source failed: {0}")]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// The key is longer than the source's backend takes (its
    /// [`max_key_bytes`](PolicySource::max_key_bytes)): the client's error, never a reason to
    /// let the request through. The layer answers such a key itself before asking any source
    /// that declares its `max_key_bytes`, as a malformed key (`400`, reason `malformed_key`);
    /// a source that returns this error anyway (a wrapper that does not forward
    /// `max_key_bytes`) gets the same answer, with what it charged given back.
    #[error("key of {len} bytes is longer than the limit of {max} bytes")]
    KeyTooLong {
        /// The key's length in bytes.
        len: usize,
        /// The longest the source takes.
        max: usize,
    },
}

/// A future of a judgement, borrowing the source and the subject.
pub type JudgementFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Judgement, SourceError>> + Send + 'a>>;

/// A judgement now (in-memory limiters), or later (an async backend).
pub enum Checked<'a> {
    /// Decided without waiting.
    Now(Result<Judgement, SourceError>),
    /// To be awaited.
    Later(JudgementFuture<'a>),
}

impl fmt::Debug for Checked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checked::Now(r) => f.debug_tuple("Now").field(r).finish(),
            Checked::Later(_) => f.write_str("Later(..)"),
        }
    }
}

impl Checked<'_> {
    /// The judgement, awaiting it if it is not there yet.
    pub async fn resolve(self) -> Result<Judgement, SourceError> {
        match self {
            Checked::Now(r) => r,
            Checked::Later(f) => f.await,
        }
    }
}

/// Where [`RateLimitLayer`](super::RateLimitLayer) gets its verdicts: a limiter, a keyed
/// limiter, a [`LimitsHandle`] — or anything else that can judge a [`Subject`], including an
/// async limiter (a shared, Redis-backed one) that answers [`Checked::Later`].
///
/// Implemented for [`RateLimiter`] (one cell for every request), [`KeyedRateLimiter<String>`]
/// (a cell per [`Subject::key`]), [`LimitsHandle`] (the policy resolved from the tier,
/// category and route, checked per key, so a reload applies to the next request), and
/// `Arc<T>` of each.
///
/// # Contract
///
/// * [`check`](Self::check) judges and, on an allowance, consumes; **a denial consumes
///   nothing** (as every tollgate limiter guarantees). The layer relies on this for several
///   limits per request: it [`peek`](Self::peek)s them all, and only if all would allow does
///   it check them; a source that denied is then checked once to get its exact verdict.
/// * [`peek`](Self::peek) must consume nothing. The default checks a cost of 0, which the
///   in-memory limiters answer with the remaining capacity, writing nothing.
/// * [`refund`](Self::refund) gives back what an allowed check consumed, when a later limit
///   of the same request denied it in a race after the peek. The built-in sources refund
///   ([`RateLimiter::refund`], [`KeyedRateLimiter::refund_key`]); the default gives back
///   nothing and returns `false` (the layer counts these races).
/// * An error is a fault, not a denial: see [`SourceError`].
///
/// ```
/// use std::sync::Arc;
/// use tollgate::http::{Checked, Judgement, PolicySource, Subject};
/// use tollgate::{Check, RateLimiter};
///
/// /// A source that only limits writes to `/admin`.
/// struct AdminOnly(RateLimiter);
/// impl PolicySource for AdminOnly {
///     fn check<'a>(&'a self, s: &'a Subject, check: Check) -> Checked<'a> {
///         if !s.route().starts_with("/admin") {
///             return Checked::Now(Ok(Judgement::unmatched()));
///         }
///         Checked::Now(self.0.check_with(check)
///             .map(|v| Judgement::new(v, Some(Arc::from("admin")), Some(self.0.quota())))
///             .map_err(Into::into))
///     }
/// }
/// let src = AdminOnly(RateLimiter::new("1/s".parse()?));
/// let s = Subject::new("k", "", "admin", "/admin/users");
/// let Checked::Now(j) = src.check(&s, Check::cost(1)) else { unreachable!() };
/// assert_eq!(j?.policy(), Some("admin"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait PolicySource: Send + Sync + 'static {
    /// Judges `subject` at `check`'s cost, consuming on an allowance.
    fn check<'a>(&'a self, subject: &'a Subject, check: Check) -> Checked<'a>;

    /// What [`check`](Self::check) would say about a cost of 0, consuming nothing: an
    /// allowance's [`remaining`](crate::Allowed::remaining) tells whether the real cost fits.
    fn peek<'a>(&'a self, subject: &'a Subject, check: Check) -> Checked<'a> {
        let zero = Check::cost(0)
            .attempt(check.attempt_number())
            .class(check.priority_class());
        self.check(subject, zero)
    }

    /// `true` if [`check`](Self::check) and [`peek`](Self::peek) always answer
    /// [`Checked::Now`] (in-memory limiters). When every limit of a layer does, the layer
    /// decides inside `call` and hands an allowed request straight to the inner service,
    /// with no boxed future; a source that says so and then answers
    /// [`Checked::Later`] is treated as failed (passed through, counted). The default is
    /// `false`.
    fn answers_now(&self) -> bool {
        false
    }

    /// The longest [`Subject::key`] the source can judge, in bytes, if its backend has a
    /// limit (a [`SharedRateLimiter`](crate::redis::SharedRateLimiter): 512). The layer rejects a
    /// longer key before asking any source, as it does the extractors' malformed keys (`400`,
    /// reason `malformed_key`, or the [`OnMissingKey::Fallback`](super::OnMissingKey) key):
    /// a key a limit cannot judge is the client's error, never a pass. The default is `None`:
    /// no limit.
    ///
    /// ```
    /// use tollgate::http::PolicySource;
    /// use tollgate::RateLimiter;
    ///
    /// assert_eq!(RateLimiter::new("10/s".parse()?).max_key_bytes(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn max_key_bytes(&self) -> Option<usize> {
        None
    }

    /// `true` if the source reads [`Subject::tier`], [`Subject::category`] or
    /// [`Subject::route`]. When no source of a layer does (and no success-rate feed needs
    /// the tier), the layer does not compute them. The default is `true`.
    fn reads_route(&self) -> bool {
        true
    }

    /// Gives back `cost` consumed by an allowed [`check`](Self::check) of `subject`; `true`
    /// if it did. The layer never asks a source to give back more than the request's check
    /// and later [`charge`](Self::charge)s put on it. The default gives back nothing.
    fn refund<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        let _ = (subject, cost);
        Box::pin(core::future::ready(false))
    }

    /// Charges `subject` `cost` more after the fact (a cost its response reported), whatever
    /// room is left: into debt, up to the limiter's `max_debt`. Returns the units of `cost`
    /// that stood (less than `cost` where the debt cap cut the charge short; 0 if nothing
    /// was charged): the layer gives back at most the request's charge plus these, so a
    /// source must not report more than it charged. The default charges nothing (0).
    fn charge<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
        let _ = (subject, cost);
        Box::pin(core::future::ready(0))
    }
}

impl PolicySource for RateLimiter {
    fn answers_now(&self) -> bool {
        true
    }

    fn refund<'a>(
        &'a self,
        _: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        RateLimiter::refund(self, cost);
        Box::pin(core::future::ready(true))
    }

    fn charge<'a>(
        &'a self,
        _: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
        let c = RateLimiter::charge(self, cost);
        Box::pin(core::future::ready(cost.saturating_sub(c.unpaid())))
    }

    fn reads_route(&self) -> bool {
        false
    }

    fn check<'a>(&'a self, _: &'a Subject, check: Check) -> Checked<'a> {
        Checked::Now(
            self.check_with(check)
                .map(|v| Judgement::new(v, None, Some(self.quota())))
                .map_err(SourceError::from),
        )
    }
}

impl PolicySource for KeyedRateLimiter<String> {
    fn answers_now(&self) -> bool {
        true
    }

    fn refund<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        self.refund_key(subject.key(), cost);
        Box::pin(core::future::ready(true))
    }

    /// A key that is not tracked is not charged (0).
    fn charge<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
        let c = self.charge_key(subject.key(), cost);
        Box::pin(core::future::ready(cost.saturating_sub(c.unpaid())))
    }

    fn reads_route(&self) -> bool {
        false
    }

    fn check<'a>(&'a self, subject: &'a Subject, check: Check) -> Checked<'a> {
        Checked::Now(
            self.check_key_with(subject.key(), check)
                .map(|v| Judgement::new(v, None, Some(self.quota())))
                .map_err(SourceError::from),
        )
    }
}

/// With feature `config`.
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
impl PolicySource for LimitsHandle {
    fn answers_now(&self) -> bool {
        true
    }

    /// Refunds the key in the limiter of every policy the subject resolves to now
    /// ([`Limits::resolve_all`](crate::limits::Limits::resolve_all); a reload between the check and
    /// the refund refunds under the new document's policies).
    fn refund<'a>(
        &'a self,
        s: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        let any = each_limiter(self, s, |l| {
            l.refund_key(s.key(), cost);
            true
        });
        Box::pin(core::future::ready(any))
    }

    /// Charges the key in the limiter of every policy the subject resolves to now; the units
    /// that stood are the least any of them took (0 if none applies), so that a later refund
    /// of the request gives none of them back more than it took.
    fn charge<'a>(
        &'a self,
        s: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
        let mut least: Option<u64> = None;
        each_limiter(self, s, |l| {
            let stood = cost.saturating_sub(l.charge_key(s.key(), cost).unpaid());
            least = Some(least.map_or(stood, |m| m.min(stood)));
            true
        });
        Box::pin(core::future::ready(least.unwrap_or(0)))
    }

    /// [`LimitsHandle::check_all`]: the most specific policy and every policy that applies
    /// in addition (`also = true`), all or nothing; the judgement is the deciding policy's.
    fn check<'a>(&'a self, s: &'a Subject, check: Check) -> Checked<'a> {
        let decided = self.check_all(s.tier(), s.category(), s.route(), s.key(), check);
        Checked::Now(match decided {
            Err(e) => Err(e.into()),
            Ok(d) => Ok(match d.deciding() {
                None => Judgement::unmatched(),
                Some(p) => {
                    Judgement::new(d.verdict(), Some(Arc::from(p.policy())), Some(p.quota()))
                }
            }),
        })
    }
}

/// Runs `f` on the limiter of every policy `s` resolves to now; `true` if any `f` said so.
#[cfg(feature = "config")]
fn each_limiter(
    h: &LimitsHandle,
    s: &Subject,
    mut f: impl FnMut(&KeyedRateLimiter<String>) -> bool,
) -> bool {
    let limits = h.limits();
    let mut any = false;
    for policy in limits.resolve_all(s.tier(), s.category(), s.route()) {
        if let Some(l) = h.limiter(policy.name()) {
            any |= f(&l);
        }
    }
    any
}

impl<T: PolicySource + ?Sized> PolicySource for Arc<T> {
    fn check<'a>(&'a self, subject: &'a Subject, check: Check) -> Checked<'a> {
        (**self).check(subject, check)
    }

    fn peek<'a>(&'a self, subject: &'a Subject, check: Check) -> Checked<'a> {
        (**self).peek(subject, check)
    }

    fn reads_route(&self) -> bool {
        (**self).reads_route()
    }

    fn answers_now(&self) -> bool {
        (**self).answers_now()
    }

    fn max_key_bytes(&self) -> Option<usize> {
        (**self).max_key_bytes()
    }

    fn refund<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        (**self).refund(subject, cost)
    }

    fn charge<'a>(
        &'a self,
        subject: &'a Subject,
        cost: u64,
    ) -> Pin<Box<dyn Future<Output = u64> + Send + 'a>> {
        (**self).charge(subject, cost)
    }
}
