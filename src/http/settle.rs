//! Settling a request's charge once its response is known: keep it, give it back, or charge
//! more ([`RateLimitLayerBuilder::settle`](super::RateLimitLayerBuilder::settle)).
//!
//! The settle function sees the response's status and headers when the inner service answers
//! (before the layer adds its own fields) and returns a [`Settle`]; the layer then asks every
//! limit of the layer to [`refund`](super::PolicySource::refund) or
//! [`charge`](super::PolicySource::charge). A function that panics is contained: the charge
//! stands, and the panic is counted ([`LayerStats::settle_panics`](super::LayerStats::settle_panics)).
//! Settling from the body's trailers is in `trailers.rs`.

use core::task::{Context, Poll, Waker};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use http::header::HeaderName;
use http::{HeaderMap, StatusCode};

use super::inflight::Held;
use super::layer::{RateLimitLayerBuilder, Shared};
use super::source::Subject;
use super::stats::Counters;
use super::trailers;

/// What to do with a request's charge once its response is known: the answer of a
/// [`settle`](super::RateLimitLayerBuilder::settle) function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Settle {
    /// The charge stands.
    Keep,
    /// Give back this many units of what the request was charged (at most its charge; a
    /// refund never lifts a limit above full).
    Refund(u64),
    /// Give back the whole charge: the request counts for nothing (a login that succeeded).
    RefundAll,
    /// Charge this many units more, whatever room the limit has: a limit built with
    /// `max_debt` goes into debt, up to its cap, and its next requests wait the debt out
    /// (their `RateLimit` fields and `Retry-After` show it).
    Charge(u64),
    /// The response named a cost that could not be read (a negative, non-numeric or huge
    /// value): the charge stands, and the layer counts it in
    /// [`LayerStats::settle_unreadable`](super::LayerStats::settle_unreadable).
    Unreadable,
}

/// A settle function, as the layer holds it.
pub(crate) type SettleFn = Arc<dyn Fn(StatusCode, &HeaderMap) -> Settle + Send + Sync>;

/// The layer's settle functions: from the response head, and from the body's trailers.
#[derive(Clone, Default)]
pub(crate) struct Settlers {
    /// Asked when the response head is ready ([`RateLimitLayerBuilder::settle`]).
    pub(crate) head: Option<SettleFn>,
    /// Asked when the body ends (`RateLimitLayerBuilder::settle_trailers`, in `trailers.rs`).
    pub(crate) trailers: Option<SettleFn>,
}

impl Settlers {
    /// `true` if the layer settles nothing.
    pub(crate) fn is_none(&self) -> bool {
        self.head.is_none() && self.trailers.is_none()
    }
}

impl Settle {
    /// Gives the whole charge back for a `2xx` response, keeps it otherwise: only failures
    /// count (a login route: `"5/15min"` of failed attempts per client).
    ///
    /// ```
    /// use http::{HeaderMap, StatusCode};
    /// use tollgate::http::Settle;
    ///
    /// let f = Settle::refund_on_success();
    /// assert_eq!(f(StatusCode::OK, &HeaderMap::new()), Settle::RefundAll);
    /// assert_eq!(f(StatusCode::UNAUTHORIZED, &HeaderMap::new()), Settle::Keep);
    /// ```
    pub fn refund_on_success() -> impl Fn(StatusCode, &HeaderMap) -> Settle + Send + Sync + 'static
    {
        |status, _| {
            if status.is_success() {
                Settle::RefundAll
            } else {
                Settle::Keep
            }
        }
    }

    /// Charges the number the response's header `name` carries, on top of the request's own
    /// charge (tokens a model server reported: `x-tokens-used: 1200`). A response without the
    /// header keeps the charge; a value that is not a plain decimal number of at most 19
    /// digits (a sign, spaces, `1e3`, text) is [`Settle::Unreadable`]: ignored and counted,
    /// never a panic. Only the head is read here: for a cost in a trailer, see
    /// [`charge_from_trailer`](Settle::charge_from_trailer) with
    /// [`settle_trailers`](RateLimitLayerBuilder::settle_trailers).
    ///
    /// ```
    /// use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
    /// use tollgate::http::Settle;
    ///
    /// let f = Settle::charge_from_header(HeaderName::from_static("x-tokens-used"));
    /// let mut h = HeaderMap::new();
    /// assert_eq!(f(StatusCode::OK, &h), Settle::Keep);
    /// h.insert("x-tokens-used", HeaderValue::from_static("1200"));
    /// assert_eq!(f(StatusCode::OK, &h), Settle::Charge(1200));
    /// h.insert("x-tokens-used", HeaderValue::from_static("-5"));
    /// assert_eq!(f(StatusCode::OK, &h), Settle::Unreadable);
    /// ```
    pub fn charge_from_header(
        name: HeaderName,
    ) -> impl Fn(StatusCode, &HeaderMap) -> Settle + Send + Sync + 'static {
        move |_, headers| match headers.get(&name) {
            None => Settle::Keep,
            Some(v) => parse_cost(v.as_bytes()).map_or(Settle::Unreadable, Settle::Charge),
        }
    }
}

impl RateLimitLayerBuilder {
    /// Settles each allowed request's charge once its response is known: `f` sees the
    /// response's status and headers (the inner service's, before the layer adds its fields)
    /// and says whether the charge stands ([`Settle::Keep`]), is given back
    /// ([`Settle::RefundAll`], [`Settle::Refund`]) or grows ([`Settle::Charge`]: a cost in
    /// the limits' units, such as tokens). The answer is applied to every rate limit of the
    /// layer, at once, before the response goes on; the next request sees it (a charge into
    /// debt shows in its `RateLimit` fields and `Retry-After`).
    ///
    /// Contained: `f` panicking keeps the charge (counted in
    /// [`LayerStats::settle_panics`](super::LayerStats::settle_panics)); an unreadable cost is
    /// ignored and counted. Not settled: passed-through requests (nothing was enforced),
    /// rejections, exempt requests, and a response that never comes (the client hung up, the
    /// service failed: the charge stands). Sources settle through
    /// [`PolicySource::refund`](super::PolicySource::refund) and
    /// [`charge`](super::PolicySource::charge): the in-memory limiters at once; a
    /// [`SharedRateLimiter`](crate::redis::SharedRateLimiter) from a task of its own, so the
    /// response does not wait for Redis (one script call each, counted in its
    /// [`SharedStats`](crate::redis::SharedStats): `refunds`, `charges`, `settles_lost`). A layer with a settle function
    /// takes the general path, never the lean one. `f` sees the head only: for a cost the
    /// body reports in its trailers, see [`settle_trailers`](Self::settle_trailers) (with
    /// both set, both apply, this one first).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::http::{RateLimitLayer, Settle};
    /// use tollgate::KeyedRateLimiter;
    ///
    /// // Logins: five failures per 15 minutes per client; a success costs nothing.
    /// let logins = RateLimitLayer::builder()
    ///     .limit("login-failures", KeyedRateLimiter::<String>::new("5/15min".parse()?))
    ///     .settle(Settle::refund_on_success())
    ///     .build()?;
    /// // A model API: charged by the tokens the response reports, up to an hour of debt.
    /// let tokens = KeyedRateLimiter::<String>::builder("100000/h".parse()?)
    ///     .max_debt(Duration::from_secs(3_600))
    ///     .build();
    /// let metered = RateLimitLayer::builder()
    ///     .limit("tokens", tokens)
    ///     .settle(Settle::charge_from_header(http::HeaderName::from_static("x-tokens-used")))
    ///     .build()?;
    /// # let _ = (logins, metered);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn settle(
        mut self,
        f: impl Fn(StatusCode, &HeaderMap) -> Settle + Send + Sync + 'static,
    ) -> Self {
        self.settle.head = Some(Arc::new(f));
        self
    }
}

/// A plain decimal count: 1 to 19 ASCII digits, nothing else (so it always fits u64).
pub(super) fn parse_cost(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    core::str::from_utf8(b).ok()?.parse().ok()
}

/// What an allowed request carries to its response, to settle its charge there.
pub(crate) struct Pending {
    pub(crate) shared: Arc<Shared>,
    pub(crate) subject: Subject,
    /// The units the check charged every limit.
    pub(crate) units: u64,
}

impl Pending {
    /// The charge to settle after the response, if the layer settles and the request was
    /// `enforced` (a pass-through charged nothing that counts).
    pub(crate) fn of(
        shared: &Arc<Shared>,
        enforced: bool,
        subject: Subject,
        units: u64,
    ) -> Option<Self> {
        (!shared.settle.is_none() && enforced).then(|| Self {
            shared: Arc::clone(shared),
            subject,
            units,
        })
    }

    /// Settles from the response head: asks the head function (if any) and applies its
    /// answer; then, with a trailer function, hands the charge to the body (with `held`,
    /// what the body holds until it ends), to settle again from its trailers.
    pub(crate) fn settle(
        self,
        status: StatusCode,
        headers: &HeaderMap,
        held: Option<Box<Held>>,
    ) -> Option<Box<Held>> {
        if let Some(f) = &self.shared.settle.head {
            if let Some(answer) = self.ask(f, status, headers) {
                self.apply(answer);
            }
        }
        if self.shared.settle.trailers.is_none() {
            return held;
        }
        Some(trailers::carry(self, status, held))
    }

    /// Asks `f` about the response; `None` if it panicked (contained, counted).
    pub(crate) fn ask(
        &self,
        f: &SettleFn,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Option<Settle> {
        match catch_unwind(AssertUnwindSafe(|| f(status, headers))) {
            Ok(a) => Some(a),
            Err(_) => {
                Counters::bump(&self.shared.counters.settle_panics);
                None
            }
        }
    }

    /// Applies a settle function's answer to every limit of the layer.
    pub(crate) fn apply(&self, answer: Settle) {
        let counters = &self.shared.counters;
        let (refund, n) = match answer {
            Settle::Keep => return,
            Settle::Unreadable => {
                Counters::bump(&counters.settle_unreadable);
                return;
            }
            Settle::Refund(n) => (true, n.min(self.units)),
            Settle::RefundAll => (true, self.units),
            Settle::Charge(n) => (false, n),
        };
        if n == 0 {
            return;
        }
        let mut done = false;
        for limit in &self.shared.limits {
            let source = &limit.source;
            // Polled once, as the judging's own refunds: the built-in sources settle in
            // memory and are done at once; an async one still pending is dropped, counted.
            let ok = catch_unwind(AssertUnwindSafe(|| {
                let mut fut = if refund {
                    source.refund(&self.subject, n)
                } else {
                    source.charge(&self.subject, n)
                };
                let mut cx = Context::from_waker(Waker::noop());
                matches!(fut.as_mut().poll(&mut cx), Poll::Ready(true))
            }));
            match ok {
                Ok(true) => done = true,
                Ok(false) => Counters::bump(&counters.settle_lost),
                Err(_) => Counters::bump(&counters.settle_panics),
            }
        }
        if done {
            Counters::bump(if refund {
                &counters.settle_refunds
            } else {
                &counters.settle_charges
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_decimal_costs_are_read() {
        assert_eq!(parse_cost(b"0"), Some(0));
        assert_eq!(parse_cost(b"1200"), Some(1200));
        assert_eq!(
            parse_cost(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b"-5",
            b"+5",
            b" 5",
            b"5 ",
            b"1e3",
            b"12a",
            b"99999999999999999999",
            b"\xff",
        ] {
            assert_eq!(parse_cost(bad), None, "{bad:?}");
        }
        let huge = vec![b'9'; 100_000];
        assert_eq!(parse_cost(&huge), None, "a huge value is rejected at once");
    }
}
