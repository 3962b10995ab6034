//! Gateway middleware (feature `tower`): a tower [`Layer`](tower_layer::Layer) that
//! rate-limits `http` services and turns verdicts into correct HTTP.
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::http::{HeaderKey, HeaderName, OnMissingKey, RateLimitLayer, StatusCode};
//! use tollgate::KeyedRateLimiter;
//!
//! // One limit per API key; requests without a key get 401 problem+json.
//! let layer = RateLimitLayer::builder()
//!     .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
//!     .on_missing_key(OnMissingKey::Reject(StatusCode::UNAUTHORIZED))
//!     .limit("per-key", KeyedRateLimiter::<String>::new("100/min".parse()?))
//!     // Health checks and CORS preflights are never limited.
//!     .exempt(|parts| parts.uri.path() == "/healthz")
//!     .exempt_preflight()
//!     .build()?;
//! // axum: Router::new().route(..).layer(layer)
//! # let _ = layer;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What a denied request gets (a real response from the loopback tests):
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! content-type: application/problem+json
//! retry-after: 1
//! ratelimit-policy: "per-key";q=2;w=1
//! ratelimit: "per-key";r=0;t=1
//!
//! {"detail":"rate limited by policy \"per-key\" (quota); retry after 1 s","policy":"per-key",
//!  "reason":"quota","retry_after":1,"status":429,"title":"Too Many Requests","type":"about:blank"}
//! ```
//!
//! * Keys: [`HeaderKey`], [`PeerIp`] (IPv6 by /64), [`ForwardedIp`] (only behind trusted
//!   proxies; [`NoForwardedHeader`] for what a proxy's request without the header is keyed
//!   by), [`GlobalKey`], or a closure ([`KeyExtractor`]) over the request's [`Parts`].
//! * Limits: [`RateLimiter`](crate::RateLimiter), [`KeyedRateLimiter`](crate::KeyedRateLimiter),
//!   [`LimitsHandle`](crate::limits::LimitsHandle), or your own [`PolicySource`] — the extension
//!   point for async limiters. Several limits per request are all or nothing.
//! * Responses: `429` + `Retry-After` (whole seconds rounded up, never 0) + IETF
//!   `RateLimit-Policy`/`RateLimit` + a problem body; gRPC gets `grpc-status: 8` and
//!   `grpc-retry-pushback-ms`; [`Queue`] mode waits a bounded time instead.
//! * Exemptions: requests a predicate accepts
//!   ([`exempt`](RateLimitLayerBuilder::exempt)), from client addresses in given ranges
//!   (found as the key finds them, trusted proxies included:
//!   [`exempt_ips`](RateLimitLayerBuilder::exempt_ips)), and CORS preflights
//!   ([`exempt_preflight`](RateLimitLayerBuilder::exempt_preflight)) go straight to the
//!   inner service: no limit charged, no rate-limit field, counted in
//!   [`LayerStats::exempt`].

mod body;
mod exempt;
mod fields;
mod inflight;
mod judge;
mod key;
mod layer;
mod lean;
mod queue;
mod reject;
mod request;
mod response;
mod service;
mod settle;
#[cfg(feature = "redis")]
mod shared;
mod source;
mod stats;
mod trailers;

pub use body::{BodyMode, OwnBody, WrappedBody};
pub use inflight::InFlightLimit;
pub use key::{
    ForwardedHeader, ForwardedIp, GlobalKey, HeaderKey, IpRange, IpRangeError, KeyError,
    KeyExtractor, NoForwardedHeader, OnMissingKey, PeerIp,
};
pub use layer::{LayerError, LayerStats, RateLimitLayer, RateLimitLayerBuilder};
pub use queue::{Queue, Sleep};
pub use request::{AttemptHeader, Cost};
pub use response::{HeaderMode, PassedThrough, RateLimitBody, RejectReason, Rejection};
pub use service::{RateLimit, ResponseFuture};
pub use settle::Settle;
pub use source::{Checked, Judgement, JudgementFuture, PolicySource, SourceError, Subject};

/// The `http` crate's types that this module's API takes and gives (a key extractor's
/// [`Parts`], a header's [`HeaderName`], a status), so that code written against the layer
/// needs no `http` dependency of its own. They are `http` 1.x's own types, the ones axum
/// re-exports as `axum::http`.
#[doc(no_inline)]
pub use ::http::{request::Parts, Extensions, HeaderMap, HeaderName, StatusCode};
