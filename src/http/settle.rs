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
use super::source::{PolicySource, Subject};
use super::stats::Counters;
use super::trailers;

/// What to do with a request's charge once its response is known: the answer of a
/// [`settle`](super::RateLimitLayerBuilder::settle) function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Settle {
    /// The charge stands.
    Keep,
    /// Give back this many units of what the request was charged (at most what it still
    /// owes: its charge plus what settles charged since, less what they gave back; a refund
    /// never lifts a limit above full).
    Refund(u64),
    /// Give back all the request still owes: the request counts for nothing (a login that
    /// succeeded).
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

/// The limits of a layer (by index) whose check did not count an allowed request (no policy
/// of theirs applied): a settle leaves them alone. Kept only by a layer that settles, and
/// empty for most requests, which needs no allocation.
#[derive(Debug, Default)]
pub(crate) struct Uncounted(Vec<usize>);

impl Uncounted {
    pub(crate) fn push(&mut self, limit: usize) {
        self.0.push(limit);
    }
}

/// One request's running account with each limit of the layer, in units: what its check
/// charged, plus what its settles charged later, minus what they gave back. Every settle the
/// request meets (its head's, its trailers') is applied against it, so the request is never
/// given back more than it was charged, however many settles refund it. `None`: the limit
/// did not count the request, and is never settled.
enum Owed {
    /// A layer of one limit (most layers): no allocation.
    One(Option<u64>),
    Many(Box<[Option<u64>]>),
}

impl Owed {
    fn new(limits: usize, units: u64, uncounted: &Uncounted) -> Self {
        let owed = |i| (!uncounted.0.contains(&i)).then_some(units);
        match limits {
            1 => Owed::One(owed(0)),
            n => Owed::Many((0..n).map(owed).collect()),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Option<u64>] {
        match self {
            Owed::One(o) => core::slice::from_mut(o),
            Owed::Many(v) => v,
        }
    }
}

/// What an allowed request carries to its response, to settle its charge there.
pub(crate) struct Pending {
    pub(crate) shared: Arc<Shared>,
    pub(crate) subject: Subject,
    /// What the request owes each limit: the most a settle may still give back.
    owed: Owed,
}

impl Pending {
    /// The charge to settle after the response, if the layer settles and the request was
    /// `enforced` (a pass-through charged nothing that counts): `units` on every limit but
    /// the `uncounted` ones.
    pub(crate) fn of(
        shared: &Arc<Shared>,
        enforced: bool,
        subject: Subject,
        units: u64,
        uncounted: &Uncounted,
    ) -> Option<Self> {
        (!shared.settle.is_none() && enforced).then(|| Self {
            shared: Arc::clone(shared),
            subject,
            owed: Owed::new(shared.limits.len(), units, uncounted),
        })
    }

    /// Settles from the response head: asks the head function (if any) and applies its
    /// answer; then, with a trailer function, hands the charge to the body (with `held`,
    /// what the body holds until it ends), to settle again from its trailers.
    pub(crate) fn settle(
        mut self,
        status: StatusCode,
        headers: &HeaderMap,
        held: Option<Box<Held>>,
    ) -> Option<Box<Held>> {
        self.answer(false, status, headers);
        if self.shared.settle.trailers.is_none() {
            return held;
        }
        Some(trailers::carry(self, status, held))
    }

    /// Asks the layer's head (or `trailers`) function, if it has one, about the response
    /// (`headers`: the head's, or the trailers) and applies its answer. A function that
    /// panics settles nothing (contained, counted).
    pub(crate) fn answer(&mut self, trailers: bool, status: StatusCode, headers: &HeaderMap) {
        let settlers = &self.shared.settle;
        let f = if trailers {
            &settlers.trailers
        } else {
            &settlers.head
        };
        let Some(f) = f else { return };
        match catch_unwind(AssertUnwindSafe(|| f(status, headers))) {
            Ok(answer) => apply(&self.shared, &self.subject, &mut self.owed, answer),
            Err(_) => Counters::bump(&self.shared.counters.settle_panics),
        }
    }
}

/// Applies a settle function's answer to every limit that counted the request, against its
/// account `owed`: a refund gives back at most what the request still owes that limit, a
/// charge adds to it what stood.
fn apply(shared: &Shared, subject: &Subject, owed: &mut Owed, answer: Settle) {
    let counters = &shared.counters;
    let (refund, n) = match answer {
        Settle::Keep => return,
        Settle::Unreadable => {
            Counters::bump(&counters.settle_unreadable);
            return;
        }
        Settle::Refund(n) => (true, n),
        Settle::RefundAll => (true, u64::MAX),
        Settle::Charge(n) => (false, n),
    };
    let mut done = false;
    for (limit, owed) in shared.limits.iter().zip(owed.as_mut_slice()) {
        let Some(owed) = owed else { continue };
        let n = if refund { n.min(*owed) } else { n };
        if n == 0 {
            continue;
        }
        match settle_one(&*limit.source, subject, refund, n) {
            Ok(0) => Counters::bump(&counters.settle_lost),
            Ok(units) if refund => {
                done = true;
                *owed -= units;
            }
            Ok(units) => {
                done = true;
                *owed = owed.saturating_add(units);
            }
            Err(()) => Counters::bump(&counters.settle_panics),
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

/// Refunds (`refund`) or charges `source` `n` units for `subject`: the units it did (a
/// refund all or nothing, a charge what stood), 0 if none; `Err` if the source panicked.
/// Polled once, as the judging's own refunds: the built-in sources settle in memory and are
/// done at once; an async one still pending is dropped (0).
fn settle_one(
    source: &dyn PolicySource,
    subject: &Subject,
    refund: bool,
    n: u64,
) -> Result<u64, ()> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut cx = Context::from_waker(Waker::noop());
        if refund {
            let done = source.refund(subject, n).as_mut().poll(&mut cx);
            if matches!(done, Poll::Ready(true)) {
                n
            } else {
                0
            }
        } else {
            match source.charge(subject, n).as_mut().poll(&mut cx) {
                // A source reporting more than it was asked for is held to what it was asked.
                Poll::Ready(stood) => stood.min(n),
                Poll::Pending => 0,
            }
        }
    }))
    .map_err(|_| ())
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
