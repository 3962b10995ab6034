//! What the layer answers: the IETF `RateLimit` fields, `Retry-After`, problem bodies, gRPC
//! trailers-only responses, and the body type that carries either the inner service's body
//! or ours.

use core::pin::Pin;
use core::task::{ready, Context, Poll};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};

use super::inflight::Held;
use super::trailers;

use crate::engine::verdict::{Denied, DenyReason, PassReason};

/// Which rate-limit fields an allowed response carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderMode {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers, as of its
    /// editor's copy after -10), the default: `"per-key";q=600;w=60;tollgate-burst=50` — the
    /// policy's name as a String, the written rate as `q` units per `w` whole seconds, `qu` for
    /// a byte budget, and the burst as the vendor parameter `tollgate-burst` when it differs
    /// from `q` — then `"per-key";r=49;t=1`: what the cell admits now, and the seconds until
    /// it is full again (until the retry, on a denial). No partition key (`pk`): the layer's
    /// keys are API keys and client addresses, which the draft asks servers not to send back.
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
    /// The server put no peer address in the request for a [`PeerIp`](super::PeerIp) or
    /// [`ForwardedIp`](super::ForwardedIp) key: its set-up, not the client's request
    /// (`500`; gRPC `INTERNAL`, 13). The detail names the fix.
    NoPeerAddress,
    /// A concurrency limit ([`RateLimitLayerBuilder::concurrency`](super::RateLimitLayerBuilder::concurrency))
    /// had no slot open for the request: `429` with no `Retry-After` (when a slot frees
    /// depends on how long the requests in flight take).
    Concurrency,
}

impl RejectReason {
    /// The reason as written in problem bodies: `quota`, `retry_budget`, `key_table_full`,
    /// `ceiling`, `clock_overflow`, `backend_unavailable`, `local_share` (a shared limit's
    /// fallbacks), `queue_full`, `insufficient_capacity`, `missing_key`,
    /// `malformed_key`, `malformed_header`, `no_peer_address`, `concurrency`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RejectReason::Denied(DenyReason::Quota) => "quota",
            RejectReason::Denied(DenyReason::RetryBudget) => "retry_budget",
            RejectReason::Denied(DenyReason::KeyTableFull) => "key_table_full",
            RejectReason::Denied(DenyReason::Ceiling) => "ceiling",
            RejectReason::Denied(DenyReason::ClockOverflow) => "clock_overflow",
            RejectReason::Denied(DenyReason::BackendUnavailable) => "backend_unavailable",
            RejectReason::Denied(DenyReason::LocalShare) => "local_share",
            RejectReason::QueueFull => "queue_full",
            RejectReason::InsufficientCapacity => "insufficient_capacity",
            RejectReason::MissingKey => "missing_key",
            RejectReason::MalformedKey => "malformed_key",
            RejectReason::MalformedHeader => "malformed_header",
            RejectReason::NoPeerAddress => "no_peer_address",
            RejectReason::Concurrency => "concurrency",
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
    /// The HTTP status the default response has (`429`, `413`, `401`, `400`, or `500` for a
    /// server that passes no peer address).
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

pub(crate) use super::fields::{Fields, Figures, PolicyCache};

/// The default response for a rejection: problem+json, or a trailers-only gRPC response.
pub(crate) fn default_response(r: &Rejection) -> Response<Bytes> {
    if r.grpc {
        return grpc_response(r);
    }
    let body = problem_body(r);
    let mut res = Response::new(Bytes::from(body));
    *res.status_mut() = r.status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}

/// The problem document (RFC 9457) of a rejection, its members in name order, written by
/// hand: the layer needs no JSON library for one flat object (feature `tower` alone builds
/// no serializer). `null` for an absent policy or wait.
fn problem_body(r: &Rejection) -> String {
    use core::fmt::Write as _;
    let mut out = String::with_capacity(160 + r.detail.len());
    out.push_str("{\"detail\":");
    json_string(&mut out, &r.detail);
    out.push_str(",\"policy\":");
    match r.policy.as_deref() {
        Some(p) => json_string(&mut out, p),
        None => out.push_str("null"),
    }
    out.push_str(",\"reason\":");
    json_string(&mut out, r.reason.as_str());
    out.push_str(",\"retry_after\":");
    match r.retry_after {
        Some(d) => {
            let _ = write!(out, "{}", d.retry_after_secs());
        }
        None => out.push_str("null"),
    }
    let _ = write!(out, ",\"status\":{},\"title\":", r.status.as_u16());
    json_string(&mut out, r.status.canonical_reason().unwrap_or("Rejected"));
    out.push_str(",\"type\":\"about:blank\"}");
    out
}

/// `s` as a JSON string: `"` and `\\` escaped, control characters as `\n`-style or `\u00XX`
/// escapes (as serde_json writes them), everything else as it is (UTF-8).
fn json_string(out: &mut String, s: &str) {
    use core::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// gRPC status codes for rejections: RESOURCE_EXHAUSTED (8) for limits, UNAUTHENTICATED
/// (16) for a missing key, INVALID_ARGUMENT (3) for malformed input, INTERNAL (13) for a
/// server that passes no peer address.
fn grpc_status(reason: RejectReason) -> &'static str {
    match reason {
        RejectReason::MissingKey => "16",
        RejectReason::NoPeerAddress => "13",
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

/// Adds `Retry-After` and the rate-limit fields to a rejection's response, unless a hook
/// set them. A denial always carries the fields (IETF, or legacy in
/// [`HeaderMode::Legacy`]), whatever the mode says for allowed responses.
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
    let mode = match mode {
        HeaderMode::Legacy => HeaderMode::Legacy,
        _ => HeaderMode::Ietf,
    };
    let fields = Fields::allowed(mode, all, denying, None);
    if !fields.any_present(headers) {
        fields.insert_into(headers);
    }
}

pin_project_lite::pin_project! {
    /// The body of a response through [`RateLimit`](super::RateLimit): the inner service's
    /// body, or the layer's own (a problem document, or empty for gRPC).
    ///
    /// An inner body also holds the request's concurrency permits
    /// ([`RateLimitLayerBuilder::concurrency`](super::RateLimitLayerBuilder::concurrency)) and
    /// gives them back when it ends (its last frame, or an error) or is dropped (the client
    /// hung up). With a trailer settle
    /// ([`RateLimitLayerBuilder::settle_trailers`](super::RateLimitLayerBuilder::settle_trailers)),
    /// it also holds the request's charge and settles it at its trailers or its end.
    #[derive(Debug)]
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
        held: Option<Box<Held>>,
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
            held: None,
        }
    }

    /// The inner body, holding `held` until it ends or is dropped.
    pub(crate) fn holding(body: B, held: Option<Box<Held>>) -> Self {
        Self {
            kind: Kind::Inner { body },
            held,
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            held: None,
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
        let this = self.project();
        match this.kind.project() {
            KindProj::Inner { mut body } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                if let Some(held) = this.held.as_deref_mut() {
                    // A charge to settle from the trailers: at the trailers, or the end.
                    trailers::seen(held, frame.as_ref(), body.is_end_stream());
                }
                // The body has ended (no more frames, an error, or its last frame): the
                // request is no longer in flight.
                if this.held.is_some() && (!matches!(frame, Some(Ok(_))) || body.is_end_stream()) {
                    *this.held = None;
                }
                Poll::Ready(frame)
            }
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

    #[test]
    fn pushback_is_rounded_up_and_never_zero() {
        let d = |ns| Denied::new(ns, DenyReason::Quota);
        assert_eq!(pushback_ms(&d(1)), 1);
        assert_eq!(pushback_ms(&d(1_000_001)), 2);
        assert_eq!(pushback_ms(&d(250_000_000)), 250);
        assert_eq!(pushback_ms(&d(u64::MAX)), 86_400_000);
        assert_eq!(
            pushback_ms(&Denied::new(5, DenyReason::ClockOverflow)),
            86_400_000
        );
    }
}
