//! Exemptions: requests the layer hands straight to the inner service, unjudged.
//!
//! The builder collects the rules ([`Rules`]); the built layer holds them as [`Exemptions`]
//! and asks them first, before the lean path and before any key is read. An exempt request
//! is counted ([`LayerStats::exempt`](super::LayerStats::exempt)) and nothing else: no limit
//! asked or charged, no concurrency slot taken, no field added, no success-rate feed.

use core::any::Any;
use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use http::header::HeaderName;
use http::request::Parts;
use http::Method;

use super::key::{ForwardedIp, IpRange, PeerIp};
use super::layer::RateLimitLayerBuilder;
use super::stats::Counters;

/// A predicate exempting requests ([`RateLimitLayerBuilder::exempt`](super::RateLimitLayerBuilder::exempt)).
pub(crate) type ExemptFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// How the client's address is found for [`Exemptions::ips`]: as the layer's key extractor
/// finds it when that is a [`PeerIp`] or a [`ForwardedIp`], else the direct peer as
/// [`PeerIp::new`] reads it (no proxy trusted).
#[derive(Clone, Debug)]
pub(crate) enum ClientIp {
    Peer(PeerIp),
    Forwarded(ForwardedIp),
}

impl ClientIp {
    /// The address source of the layer's extractor `key`, if it reads addresses.
    pub(crate) fn of<K: Any>(key: &K) -> Option<Self> {
        let any: &dyn Any = key;
        if let Some(p) = any.downcast_ref::<PeerIp>() {
            return Some(ClientIp::Peer(p.clone()));
        }
        (any.downcast_ref::<ForwardedIp>()).map(|f| ClientIp::Forwarded(f.clone()))
    }

    /// The client's address, or `None` where the extractor finds none (no peer address, a
    /// malformed forwarded chain).
    fn resolve(&self, parts: &Parts) -> Option<IpAddr> {
        match self {
            ClientIp::Peer(p) => p.peer(parts).ok(),
            ClientIp::Forwarded(f) => f.client(parts).ok(),
        }
    }
}

/// The exemption rules as the builder collects them.
#[derive(Default)]
pub(crate) struct Rules {
    preds: Vec<ExemptFn>,
    ranges: Vec<IpRange>,
    preflight: bool,
    /// The address source of the layer's key, if it has one (see [`ClientIp`]).
    client: Option<ClientIp>,
}

impl Rules {
    pub(crate) fn pred(&mut self, f: ExemptFn) {
        self.preds.push(f);
    }

    pub(crate) fn ranges(&mut self, ranges: impl IntoIterator<Item = IpRange>) {
        self.ranges.extend(ranges);
    }

    pub(crate) fn preflight(&mut self) {
        self.preflight = true;
    }

    /// The layer's key changed to `key`: its address source, if any, resolves clients.
    pub(crate) fn key_is<K: Any>(&mut self, key: &K) {
        self.client = ClientIp::of(key);
    }

    /// The layer's exemptions, `None` if there are none (then nothing is asked at all).
    pub(crate) fn build(self) -> Option<Exemptions> {
        let none = self.preds.is_empty() && self.ranges.is_empty() && !self.preflight;
        (!none).then(|| Exemptions {
            preds: self.preds,
            client: (!self.ranges.is_empty())
                .then(|| self.client.unwrap_or_else(|| ClientIp::Peer(PeerIp::new()))),
            ranges: self.ranges,
            preflight: self.preflight,
        })
    }
}

/// # Exemptions
///
/// An exempt request goes straight to the inner service, before the key is read: no limit
/// (rate or concurrency) is asked or charged, its response gets no `RateLimit`,
/// `RateLimit-Policy` or `Retry-After` field and feeds no
/// [`success_rate`](RateLimitLayerBuilder::success_rate); it is counted in
/// [`LayerStats::exempt`](super::LayerStats::exempt) only. Several exemptions combine with
/// OR. They are asked in a fixed order (the preflight preset, then the address ranges, then
/// the predicates in the order given) and the first that exempts ends the asking.
///
/// **A rule that panics** (a predicate, or the peer-address lookup of a
/// [`PeerIp::from_extensions`] key) does not take the service down: the panic is caught,
/// counted in [`LayerStats::exempt_panics`](super::LayerStats::exempt_panics) (and warned
/// through `tracing`), the rule counts as not exempting, and the request is judged as any
/// other. (Under `panic = "abort"` nothing can be caught.)
impl RateLimitLayerBuilder {
    /// Exempts the requests `pred` accepts (a health check, an internal route): they go
    /// straight to the inner service, unjudged and uncounted by every limit (see
    /// [Exemptions](#exemptions)). `pred` sees the request head, as
    /// [`queue_when`](Self::queue_when) does; it runs for every request, before anything
    /// else, so keep it cheap. May be given several times: any one exempts.
    ///
    /// ```
    /// use tollgate::http::RateLimitLayer;
    /// use tollgate::RateLimiter;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .limit("global", RateLimiter::new("100/s".parse()?))
    ///     .exempt(|parts| parts.uri.path() == "/healthz")
    ///     .build()?;
    /// assert_eq!(layer.stats().exempt, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn exempt(mut self, pred: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.exempt.pred(Arc::new(pred));
        self
    }

    /// Exempts requests whose client address lies in one of `ranges` (monitoring, your own
    /// services). The client's address is found exactly as the layer's key finds it when the
    /// key is a [`PeerIp`] or a [`ForwardedIp`] (the same peer-address source, the same
    /// trusted proxies, whichever [`key`](Self::key) call comes last): a forged
    /// `X-Forwarded-For` or `Forwarded` from a peer that is not a trusted proxy is ignored, so
    /// it exempts nothing. With any other key, the address is the direct peer's as
    /// [`PeerIp::new`] reads it (axum's `ConnectInfo`, a `SocketAddr` or an `IpAddr`
    /// extension), no proxy trusted. A request with no address to find (no peer address, a
    /// malformed forwarded chain) is not exempt, and is then judged as usual. May be given
    /// several times: the ranges add up. See [Exemptions](#exemptions).
    ///
    /// ```
    /// use tollgate::http::{ForwardedIp, RateLimitLayer};
    /// use tollgate::KeyedRateLimiter;
    ///
    /// // Clients behind our proxies (10/8) are keyed by address; our monitoring
    /// // (192.0.2.0/24) is never limited, however it reaches us.
    /// let layer = RateLimitLayer::builder()
    ///     .key(ForwardedIp::trusting(["10.0.0.0/8".parse()?]))
    ///     .limit("per-ip", KeyedRateLimiter::<String>::new("100/min".parse()?))
    ///     .exempt_ips(["192.0.2.0/24".parse()?])
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn exempt_ips(mut self, ranges: impl IntoIterator<Item = IpRange>) -> Self {
        self.exempt.ranges(ranges);
        self
    }

    /// Exempts CORS preflights: `OPTIONS` requests carrying an
    /// `Access-Control-Request-Method` header (a bare `OPTIONS` is judged as usual). A
    /// browser sends one before many cross-origin requests; limiting it would reject the real
    /// request for the preflight's sake. See [Exemptions](#exemptions).
    ///
    /// ```
    /// use tollgate::http::RateLimitLayer;
    /// use tollgate::RateLimiter;
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .limit("global", RateLimiter::new("100/s".parse()?))
    ///     .exempt_preflight()
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn exempt_preflight(mut self) -> Self {
        self.exempt.preflight();
        self
    }
}

/// The header that makes an `OPTIONS` request a CORS preflight.
const ACRM: HeaderName = HeaderName::from_static("access-control-request-method");

/// A layer's exemptions: a request is exempt if any rule says so.
pub(crate) struct Exemptions {
    preds: Vec<ExemptFn>,
    ranges: Vec<IpRange>,
    /// Set exactly when `ranges` is not empty.
    client: Option<ClientIp>,
    preflight: bool,
}

impl Exemptions {
    /// `true` if `parts` is exempt, counted in `counters` (also a rule that panicked: the
    /// panic is contained and the rule did not exempt).
    pub(crate) fn applies(&self, parts: &Parts, counters: &Counters) -> bool {
        let exempt = self.preflight_applies(parts)
            || self.ip_applies(parts, counters)
            || (self.preds.iter()).any(|p| contained(counters, || p(parts)));
        if exempt {
            Counters::bump(&counters.exempt);
        }
        exempt
    }

    fn preflight_applies(&self, parts: &Parts) -> bool {
        self.preflight && parts.method == Method::OPTIONS && parts.headers.contains_key(ACRM)
    }

    fn ip_applies(&self, parts: &Parts, counters: &Counters) -> bool {
        let Some(client) = &self.client else {
            return false;
        };
        // The address lookup may be the application's code (`PeerIp::from_extensions`).
        contained(counters, || {
            (client.resolve(parts)).is_some_and(|ip| self.ranges.iter().any(|r| r.contains(ip)))
        })
    }
}

/// `rule()`, or `false` if it panicked (counted in `exempt_panics`).
fn contained(counters: &Counters, rule: impl FnOnce() -> bool) -> bool {
    // AssertUnwindSafe: the rule sees the request head by shared reference only and the
    // layer's state not at all; after a panic the head is read again as it is.
    catch_unwind(AssertUnwindSafe(rule)).unwrap_or_else(|_| {
        Counters::bump(&counters.exempt_panics);
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "tollgate::http",
            "rate limit layer: an exemption rule panicked; the request is judged as not exempt"
        );
        false
    })
}

impl core::fmt::Debug for Exemptions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Exemptions")
            .field("predicates", &self.preds.len())
            .field("ranges", &self.ranges)
            .field("client", &self.client)
            .field("preflight", &self.preflight)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn parts(method: Method, headers: &[(&str, &str)], peer: Option<&str>) -> Parts {
        let mut b = http::Request::builder().method(method).uri("/x");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        // a test: a panic is its failure
        let mut req = b.body(()).unwrap();
        if let Some(p) = peer {
            // a test: a panic is its failure
            req.extensions_mut()
                .insert(p.parse::<SocketAddr>().unwrap());
        }
        req.into_parts().0
    }

    #[test]
    fn preflight_needs_options_and_the_request_method_header() {
        let mut rules = Rules::default();
        rules.preflight();
        // a test: a panic is its failure
        let ex = rules.build().unwrap();
        let c = Counters::default();
        let acrm = [("access-control-request-method", "POST")];
        assert!(ex.applies(&parts(Method::OPTIONS, &acrm, None), &c));
        assert!(!ex.applies(&parts(Method::OPTIONS, &[], None), &c));
        assert!(!ex.applies(&parts(Method::GET, &acrm, None), &c));
        assert_eq!(c.snapshot().exempt, 1);
    }

    #[test]
    fn ips_follow_the_key_extractor_and_no_address_is_not_exempt() {
        // a test: a panic is its failure
        let r = |s: &str| s.parse::<IpRange>().unwrap();
        let mut rules = Rules::default();
        rules.ranges([r("203.0.113.0/24")]);
        rules.key_is(&ForwardedIp::trusting([r("10.0.0.0/8")]));
        // a test: a panic is its failure
        let ex = rules.build().unwrap();
        let c = Counters::default();
        let xff = [("x-forwarded-for", "203.0.113.5")];
        assert!(ex.applies(&parts(Method::GET, &xff, Some("10.0.0.1:1")), &c));
        // From an untrusted peer the header is ignored.
        assert!(!ex.applies(&parts(Method::GET, &xff, Some("198.51.100.1:1")), &c));
        assert!(!ex.applies(&parts(Method::GET, &xff, None), &c));
        let bad = [("x-forwarded-for", "unknown")];
        assert!(!ex.applies(&parts(Method::GET, &bad, Some("10.0.0.1:1")), &c));
        // A key that reads no address: the direct peer.
        let mut rules = Rules::default();
        rules.ranges([r("203.0.113.0/24")]);
        rules.key_is(&super::super::key::GlobalKey);
        // a test: a panic is its failure
        let ex = rules.build().unwrap();
        assert!(ex.applies(&parts(Method::GET, &[], Some("203.0.113.9:1")), &c));
        assert!(!ex.applies(&parts(Method::GET, &xff, Some("10.0.0.1:1")), &c));
    }

    #[test]
    fn a_panicking_predicate_is_not_exempt_and_the_others_still_count() {
        let mut rules = Rules::default();
        rules.pred(Arc::new(|p: &Parts| {
            assert!(p.uri.path() != "/boom", "predicate bug");
            false
        }));
        rules.pred(Arc::new(|p: &Parts| p.method == Method::HEAD));
        // a test: a panic is its failure
        let ex = rules.build().unwrap();
        let c = Counters::default();
        let boom = |m| {
            // a test: a panic is its failure
            let (p, ()) = (http::Request::builder().method(m).uri("/boom").body(()))
                .unwrap()
                .into_parts();
            p
        };
        assert!(!ex.applies(&boom(Method::GET), &c));
        assert!(ex.applies(&boom(Method::HEAD), &c));
        let s = c.snapshot();
        assert_eq!((s.exempt, s.exempt_panics), (1, 2));
        assert!(Rules::default().build().is_none());
    }
}
