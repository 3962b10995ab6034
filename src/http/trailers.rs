//! Settling a request's charge from its response body's trailers
//! ([`RateLimitLayerBuilder::settle_trailers`](super::RateLimitLayerBuilder::settle_trailers)):
//! a streaming API that reports its cost when the stream ends (`x-tokens-used: 1200` in the
//! trailers).
//!
//! The charge to settle goes with the body ([`RateLimitBody`](super::RateLimitBody), in what
//! it holds until it ends) and is settled once: at the body's trailers frame, or at its end
//! without trailers (an empty map). A body dropped before its end (the client hung up) or
//! failing with an error settles nothing and is counted
//! ([`LayerStats::settle_hangups`](super::LayerStats::settle_hangups)).

use core::fmt;
use std::sync::Arc;

use http::header::HeaderName;
use http::{HeaderMap, StatusCode};
use http_body::Frame;

use super::inflight::Held;
use super::layer::RateLimitLayerBuilder;
use super::settle::{parse_cost, Pending, Settle};
use super::stats::Counters;

impl Settle {
    /// Charges the number the response's **trailer** `name` carries, on top of the request's
    /// own charge, for [`settle_trailers`](RateLimitLayerBuilder::settle_trailers): the same
    /// rules as [`charge_from_header`](Settle::charge_from_header). A body without the
    /// trailer (or without trailers at all) keeps the charge; a value that is not a plain
    /// decimal number of 1 to 19 digits is [`Settle::Unreadable`]: ignored and counted.
    ///
    /// ```
    /// use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
    /// use tollgate::http::Settle;
    ///
    /// let f = Settle::charge_from_trailer(HeaderName::from_static("x-tokens-used"));
    /// let mut trailers = HeaderMap::new();
    /// assert_eq!(f(StatusCode::OK, &trailers), Settle::Keep);
    /// trailers.insert("x-tokens-used", HeaderValue::from_static("1200"));
    /// assert_eq!(f(StatusCode::OK, &trailers), Settle::Charge(1200));
    /// trailers.insert("x-tokens-used", HeaderValue::from_static("1e3"));
    /// assert_eq!(f(StatusCode::OK, &trailers), Settle::Unreadable);
    /// ```
    pub fn charge_from_trailer(
        name: HeaderName,
    ) -> impl Fn(StatusCode, &HeaderMap) -> Settle + Send + Sync + 'static {
        move |_, trailers| match trailers.get(&name) {
            None => Settle::Keep,
            Some(v) => parse_cost(v.as_bytes()).map_or(Settle::Unreadable, Settle::Charge),
        }
    }
}

impl RateLimitLayerBuilder {
    /// Settles each allowed request's charge once its response body ends: `f` sees the
    /// response's status and the body's **trailers** (an empty map if the body ends without
    /// any) and answers as a [`settle`](Self::settle) function does; the answer is applied
    /// to every rate limit of the layer, once, as the body yields its trailers or its end,
    /// so the next request sees it. For a streaming API that reports its cost when the
    /// stream is done ([`Settle::charge_from_trailer`]).
    ///
    /// With [`settle`](Self::settle) too, both apply: the head's answer first (as the
    /// response head is ready), then the trailers' (as the body ends), against one account
    /// per request and limit: all of a request's refunds together give back at most what its
    /// check charged plus what its settles charged since (a head [`Settle::RefundAll`] leaves
    /// nothing for the trailers to refund; a head `Charge(n)` then a trailer `RefundAll`
    /// gives back `1 + n` for a one-unit request).
    ///
    /// A body already over when the inner service answers (empty: a `204`,
    /// `Content-Length: 0`) is settled at once, with no trailers. Not settled, the charge
    /// standing: a body dropped before its end (the client hung up; also a body the server
    /// never sends, as for a `HEAD` request) or ending in an error, both counted in
    /// [`LayerStats::settle_hangups`](super::LayerStats::settle_hangups); and the requests
    /// [`settle`](Self::settle) does not settle (pass-throughs, rejections, exempt requests).
    /// `f` panicking is contained and counted in
    /// [`settle_panics`](super::LayerStats::settle_panics). Under
    /// [`own_body`](super::RateLimitLayer::own_body) the layer cannot see the body, so the
    /// trailer settle is never applied: each such response is counted in
    /// [`settle_lost`](super::LayerStats::settle_lost). A layer with a trailer settle takes the
    /// general path, never the lean one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::http::{RateLimitLayer, Settle};
    /// use tollgate::KeyedRateLimiter;
    ///
    /// // A streaming model API: charged the tokens its last frame reports, up to an hour of
    /// // debt.
    /// let tokens = KeyedRateLimiter::<String>::builder("100000/h".parse()?)
    ///     .max_debt(Duration::from_secs(3_600))
    ///     .build();
    /// let layer = RateLimitLayer::builder()
    ///     .limit("tokens", tokens)
    ///     .settle_trailers(Settle::charge_from_trailer(
    ///         http::HeaderName::from_static("x-tokens-used"),
    ///     ))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn settle_trailers(
        mut self,
        f: impl Fn(StatusCode, &HeaderMap) -> Settle + Send + Sync + 'static,
    ) -> Self {
        self.settle.trailers = Some(Arc::new(f));
        self
    }
}

/// A charge waiting for its response body's end, to settle from the trailers.
pub(crate) struct Trailing {
    /// `None` once settled (or given up on): settled at most once.
    pending: Option<Pending>,
    /// The response's status, for the settle function.
    status: StatusCode,
}

impl fmt::Debug for Trailing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trailing")
            .field("status", &self.status)
            .field("settled", &self.pending.is_none())
            .finish()
    }
}

/// What the body holds: `held` (a request's permits, if any) with `pending` to settle at the
/// body's end.
pub(crate) fn carry(pending: Pending, status: StatusCode, held: Option<Box<Held>>) -> Box<Held> {
    let mut held = held.unwrap_or_default();
    held.trailers = Some(Box::new(Trailing {
        pending: Some(pending),
        status,
    }));
    held
}

/// Settles `held`'s charge if `frame` (the body's latest, `end` if the body says it has
/// ended) ends the body cleanly: a trailers frame, the end of the frames, or a last data
/// frame. An error settles nothing (the charge stands, counted when `held` is dropped).
pub(crate) fn seen<D, E>(held: &mut Held, frame: Option<&Result<Frame<D>, E>>, end: bool) {
    let Some(t) = held.trailers.as_mut() else {
        return;
    };
    let trailers = match frame {
        Some(Ok(f)) => match f.trailers_ref() {
            Some(map) => Some(map),
            None if end => None,
            None => return,
        },
        Some(Err(_)) => return,
        None => None,
    };
    let Some(mut pending) = t.pending.take() else {
        return;
    };
    let empty = HeaderMap::new();
    pending.answer(true, t.status, trailers.unwrap_or(&empty));
}

/// The body cannot be read (an [`OwnBody`](super::OwnBody) response): the trailer settle is
/// never applied, counted in `settle_lost`.
pub(crate) fn unseen(held: &mut Held) {
    if let Some(pending) = held.trailers.as_mut().and_then(|t| t.pending.take()) {
        Counters::bump(&pending.shared.counters.settle_lost);
    }
}

impl Drop for Trailing {
    fn drop(&mut self) {
        // Dropped unsettled: the body never ended (the client hung up, or it failed).
        if let Some(pending) = self.pending.take() {
            Counters::bump(&pending.shared.counters.settle_hangups);
        }
    }
}
