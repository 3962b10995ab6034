//! Gateway middleware (feature `tower`): a tower [`Layer`](tower_layer::Layer) that
//! rate-limits `http` services and turns verdicts into correct HTTP.
//!
//! ```
//! use std::sync::Arc;
//! use http::HeaderName;
//! use tollgate::http::{HeaderKey, OnMissingKey, RateLimitLayer};
//! use tollgate::KeyedRateLimiter;
//!
//! // One limit per API key; requests without a key get 401 problem+json.
//! let layer = RateLimitLayer::builder()
//!     .key(HeaderKey::new(HeaderName::from_static("x-api-key")))
//!     .on_missing_key(OnMissingKey::Reject(http::StatusCode::UNAUTHORIZED))
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
//!   proxies), [`GlobalKey`], or a closure ([`KeyExtractor`]).
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
    KeyExtractor, OnMissingKey, PeerIp,
};
pub use layer::{LayerError, LayerStats, RateLimitLayer, RateLimitLayerBuilder};
pub use queue::{Queue, Sleep};
pub use request::{AttemptHeader, Cost};
pub use response::{HeaderMode, PassedThrough, RateLimitBody, RejectReason, Rejection};
pub use service::{RateLimit, ResponseFuture};
pub use settle::Settle;
pub use source::{Checked, Judgement, JudgementFuture, PolicySource, SourceError, Subject};
