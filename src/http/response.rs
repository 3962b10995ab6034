//! What the layer answers: the IETF `RateLimit` fields, `Retry-After`, problem bodies, gRPC
//! trailers-only responses, and the body type that carries either the inner service's body
//! or ours.

use core::fmt::Write as _;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};

use crate::engine::quota::Quota;
use crate::engine::verdict::{Denied, DenyReason, PassReason};

/// Which rate-limit fields an allowed response carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderMode {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers), the
    /// default.
    #[default]
    Ietf,
    /// The legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`, for
    /// clients that expect them (denials carry them too).
    Legacy,
    /// Nothing on allowed responses (denials still carry the IETF fields and `Retry-After`).
    Off,
}

/// Why the layer answered instead of the inner service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// A limit denied the request (the [`DenyReason`] says which way).
    Denied(DenyReason),
    /// Queue mode was on, but the waiters for this key or in total were at their cap.
    QueueFull,
    /// The request costs more than the policy's burst ever admits.
    InsufficientCapacity,
    /// No key could be read from the request.
    MissingKey,
    /// The key header (or the forwarded chain) is not a usable key.
    MalformedKey,
    /// A header the layer reads (the tier, an attempt count, `Content-Length`) is malformed.
    MalformedHeader,
}

impl RejectReason {
    /// The reason as written in problem bodies: `quota`, `retry_budget`, `key_table_full`,
    /// `ceiling`, `clock_overflow`, `queue_full`, `insufficient_capacity`, `missing_key`,
    /// `malformed_key`, `malformed_header`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RejectReason::Denied(DenyReason::Quota) => "quota",
            RejectReason::Denied(DenyReason::RetryBudget) => "retry_budget",
            RejectReason::Denied(DenyReason::KeyTableFull) => "key_table_full",
            RejectReason::Denied(DenyReason::Ceiling) => "ceiling",
            RejectReason::Denied(DenyReason::ClockOverflow) => "clock_overflow",
            RejectReason::QueueFull => "queue_full",
            RejectReason::InsufficientCapacity => "insufficient_capacity",
            RejectReason::MissingKey => "missing_key",
            RejectReason::MalformedKey => "malformed_key",
            RejectReason::MalformedHeader => "malformed_header",
        }
    }
}

/// A rejection, as given to a custom response hook
/// ([`RateLimitLayerBuilder::on_reject`](super::RateLimitLayerBuilder::on_reject)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub(crate) status: StatusCode,
    pub(crate) reason: RejectReason,
    pub(crate) policy: Option<Arc<str>>,
    pub(crate) retry_after: Option<Denied>,
    pub(crate) detail: String,
    pub(crate) grpc: bool,
}

impl Rejection {
    /// The HTTP status the default response has (`429`, `413`, `401`, `400`).
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Why.
    pub fn reason(&self) -> RejectReason {
        self.reason
    }

    /// The policy that denied, if one did.
    pub fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// The denial, with the exact wait, if a limit denied.
    pub fn denied(&self) -> Option<Denied> {
        self.retry_after
    }

    /// A sentence for humans (the problem body's `detail`).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// `true` if the request was gRPC (`content-type: application/grpc…`).
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }
}

/// The marker an allowed response carries in its extensions when a limit passed the request
/// through rather than judging it (a tripped fault detector, a shadow policy, a source that
/// failed). Also counted in [`LayerStats::passed_through`](super::LayerStats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassedThrough {
    pub(crate) policy: Arc<str>,
    pub(crate) reason: Option<PassReason>,
}

impl PassedThrough {
    /// The policy that passed the request through.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// Why: a [`PassReason`], or `None` when the source failed to judge.
    pub fn reason(&self) -> Option<PassReason> {
        self.reason
    }
}

/// One matched limit's figures for the headers.
#[derive(Clone, Debug)]
pub(crate) struct Figures {
    pub(crate) policy: Arc<str>,
    pub(crate) quota: Option<Quota>,
    /// Remaining units; 0 on a denial.
    pub(crate) remaining: u64,
    /// Seconds until full (allow) or until the retry (deny), rounded up.
    pub(crate) reset_secs: u64,
}

/// A structured-field string: `"name"`, with `"` and `\` escaped and anything outside
/// visible ASCII and space replaced by `?`.
fn sf_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

/// `q` and `w` for a quota: the count over the period in whole seconds when the period is
/// at least a second, else the count scaled to one second.
fn quota_window(q: &Quota) -> (u64, u64) {
    let period = q.period();
    if period >= Duration::from_secs(1) {
        (q.count(), period.as_secs())
    } else {
        let per_sec = u128::from(q.count()) * 1_000_000_000 / period.as_nanos().max(1);
        (u64::try_from(per_sec).unwrap_or(u64::MAX), 1)
    }
}

/// `RateLimit-Policy` for all matched limits.
pub(crate) fn policy_field(all: &[Figures]) -> Option<HeaderValue> {
    let mut out = String::with_capacity(48 * all.len());
    for f in all {
        let Some(q) = &f.quota else { continue };
        if !out.is_empty() {
            out.push_str(", ");
        }
        sf_string(&f.policy, &mut out);
        let (quota, window) = quota_window(q);
        // Writing to a String cannot fail.
        let _ = write!(out, ";q={quota};w={window}");
        if q.is_bytes() {
            out.push_str(";qu=\"content-bytes\"");
        }
        if q.burst() != q.count() {
            let _ = write!(out, ";tollgate-burst={}", q.burst());
        }
    }
    header_value(out)
}

/// `RateLimit` for one limit.
pub(crate) fn limit_field(f: &Figures) -> Option<HeaderValue> {
    let mut out = String::with_capacity(32);
    sf_string(&f.policy, &mut out);
    // Writing to a String cannot fail.
    let _ = write!(out, ";r={};t={}", f.remaining, f.reset_secs);
    header_value(out)
}

/// A header value from a string we built (visible ASCII), without copying it.
fn header_value(s: String) -> Option<HeaderValue> {
    if s.is_empty() {
        return None;
    }
    HeaderValue::from_maybe_shared(Bytes::from(s)).ok()
}

pub(crate) static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
pub(crate) static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Adds the rate-limit fields for `all` matched limits, reporting `tightest` in `RateLimit`.
pub(crate) fn add_fields(
    headers: &mut HeaderMap,
    mode: HeaderMode,
    all: &[Figures],
    tightest: &Figures,
) {
    match mode {
        HeaderMode::Off => {}
        HeaderMode::Ietf => {
            if let Some(v) = policy_field(all) {
                headers.insert(RATELIMIT_POLICY.clone(), v);
            }
            if let Some(v) = limit_field(tightest) {
                headers.insert(RATELIMIT.clone(), v);
            }
        }
        HeaderMode::Legacy => {
            if let Some(q) = &tightest.quota {
                headers.insert(X_LIMIT.clone(), HeaderValue::from(quota_window(q).0));
            }
            headers.insert(X_REMAINING.clone(), HeaderValue::from(tightest.remaining));
            headers.insert(X_RESET.clone(), HeaderValue::from(tightest.reset_secs));
        }
    }
}

/// The default response for a rejection: problem+json, or a trailers-only gRPC response.
pub(crate) fn default_response(r: &Rejection) -> Response<Bytes> {
    if r.grpc {
        return grpc_response(r);
    }
    let body = serde_json::json!({
        "type": "about:blank",
        "title": r.status.canonical_reason().unwrap_or("Rejected"),
        "status": r.status.as_u16(),
        "detail": r.detail,
        "policy": r.policy.as_deref(),
        "reason": r.reason.as_str(),
        "retry_after": r.retry_after.map(|d| d.retry_after_secs()),
    });
    let mut res = Response::new(Bytes::from(body.to_string()));
    *res.status_mut() = r.status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}

/// gRPC status codes for rejections: RESOURCE_EXHAUSTED (8) for limits, UNAUTHENTICATED
/// (16) for a missing key, INVALID_ARGUMENT (3) for malformed input.
fn grpc_status(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::MissingKey => "16",
        RejectReason::MalformedKey | RejectReason::MalformedHeader => "3",
        _ => "8",
    }
}

fn grpc_response(r: &Rejection) -> Response<Bytes> {
    let mut res = Response::new(Bytes::new());
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(
        "grpc-status",
        HeaderValue::from_static(grpc_status(r.reason)),
    );
    // grpc-message is percent-encoded; ours is ASCII without '%' apart from the policy
    // name, which `detail` quotes escaped.
    let message: String = r
        .detail
        .bytes()
        .map(|b| match b {
            b' '..=b'~' if b != b'%' => char::from(b).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&message) {
        h.insert("grpc-message", v);
    }
    if let Some(d) = r.retry_after {
        h.insert("grpc-retry-pushback-ms", HeaderValue::from(pushback_ms(&d)));
    }
    res
}

/// The wait in whole milliseconds, rounded up, never 0, at most a day.
pub(crate) fn pushback_ms(d: &Denied) -> u64 {
    let ms = d.retry_after().as_nanos().div_ceil(1_000_000);
    u64::try_from(ms)
        .unwrap_or(u64::MAX)
        .clamp(1, Denied::MAX_RETRY_AFTER_SECS * 1000)
}

/// Adds `Retry-After` and the IETF fields to a rejection's response, unless a hook set them.
pub(crate) fn add_reject_fields(
    headers: &mut HeaderMap,
    r: &Rejection,
    mode: HeaderMode,
    all: &[Figures],
    denying: Option<&Figures>,
) {
    if let Some(d) = r.retry_after {
        if !r.grpc && !headers.contains_key(RETRY_AFTER) {
            headers.insert(RETRY_AFTER, HeaderValue::from(d.retry_after_secs()));
        }
    }
    let Some(denying) = denying else { return };
    let mode = if mode == HeaderMode::Legacy {
        mode
    } else {
        HeaderMode::Ietf
    };
    if !headers.contains_key(&RATELIMIT) && !headers.contains_key(&X_REMAINING) {
        add_fields(headers, mode, all, denying);
    }
}

pin_project_lite::pin_project! {
    /// The body of a response through [`RateLimit`](super::RateLimit): the inner service's
    /// body, or the layer's own (a problem document, or empty for gRPC).
    #[derive(Debug)]
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

impl<B> RateLimitBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// `true` if the body is the layer's own (a rejection), not the inner service's.
    pub fn is_rejection(&self) -> bool {
        matches!(self.kind, Kind::Full { .. })
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::verdict::DenyReason;

    fn figures(policy: &str, quota: &str) -> Figures {
        Figures {
            policy: Arc::from(policy),
            quota: Some(quota.parse().unwrap()), // test
            remaining: 3,
            reset_secs: 2,
        }
    }

    #[test]
    fn policy_names_are_escaped_structured_strings() {
        let f = figures("a \"b\" \\ é", "10/s");
        let v = limit_field(&f).unwrap(); // test
        assert_eq!(v, r#""a \"b\" \\ ?";r=3;t=2"#);
    }

    #[test]
    fn windows_are_whole_seconds() {
        let v = |q: &str| policy_field(&[figures("p", q)]).unwrap(); // test
        assert_eq!(v("100/s"), r#""p";q=100;w=1"#);
        assert_eq!(v("600/min;burst=50"), r#""p";q=600;w=60;tollgate-burst=50"#);
        assert_eq!(v("5/ms"), r#""p";q=5000;w=1"#);
        assert_eq!(v("1/d"), r#""p";q=1;w=86400"#);
        assert_eq!(v("1MB/s"), r#""p";q=1000000;w=1;qu="content-bytes""#);
        let two = policy_field(&[figures("a", "1/s"), figures("b", "2/s")]).unwrap(); // test
        assert_eq!(two, r#""a";q=1;w=1, "b";q=2;w=1"#);
    }

    #[test]
    fn pushback_is_rounded_up_and_never_zero() {
        let d = |ns| Denied::new(ns, DenyReason::Quota);
        assert_eq!(pushback_ms(&d(1)), 1);
        assert_eq!(pushback_ms(&d(1_000_001)), 2);
        assert_eq!(pushback_ms(&d(250_000_000)), 250);
        assert_eq!(pushback_ms(&d(u64::MAX)), 86_400_000);
        assert_eq!(pushback_ms(&Denied::new(5, DenyReason::ClockOverflow)), 86_400_000);
    }
}
