//! Key extractors: which limiter key a request is counted under.
//!
//! Everything here reads attacker-controlled input (headers, forwarded chains). Each
//! extractor bounds what it reads and answers a typed [`KeyError`] for input it will not
//! trust; the layer then applies its [`OnMissingKey`] choice (reject, or a fallback key).

use core::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::HeaderName;
use http::request::Parts;
use http::Extensions;

mod forwarded;
mod ip;

pub use forwarded::{ForwardedHeader, ForwardedIp, NoForwardedHeader};
pub use ip::{IpRange, IpRangeError};

/// Why no key could be read from a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The request does not carry the key (no header, no peer address).
    #[error("missing key: {what}")]
    Missing {
        /// What was looked for, e.g. `header x-api-key`.
        what: String,
    },
    /// The request carries something in the key's place that is not a usable key: not
    /// visible ASCII, too long, given twice, or a forwarded chain that does not parse.
    #[error("malformed key: {what}: {why}")]
    Malformed {
        /// What was read, e.g. `header x-api-key`.
        what: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The server put no peer address in the request at all ([`PeerIp`], [`ForwardedIp`]):
    /// not the client's doing but the server's set-up, so the layer answers it `500` with
    /// the fix named, whatever its [`OnMissingKey`] choice, and charges no key (see
    /// [`RateLimitLayer`](super::RateLimitLayer)).
    #[error("{}", NO_PEER_ADDRESS)]
    NoPeerAddress,
}

/// What a request without a peer address is answered (the problem body's `detail`).
pub(crate) const NO_PEER_ADDRESS: &str = "no peer address: the server does not pass the \
    connection's address to the rate limiter. Under axum, serve with \
    `app.into_make_service_with_connect_info::<SocketAddr>()` and enable tollgate's `axum` \
    feature; otherwise insert the `SocketAddr` into the request's extensions, or say where it \
    is with `PeerIp::from_extensions`";

impl KeyError {
    /// `true` for [`KeyError::Missing`].
    pub fn is_missing(&self) -> bool {
        matches!(self, KeyError::Missing { .. })
    }

    /// `true` for [`KeyError::NoPeerAddress`]: the server's configuration, not the client's
    /// request.
    pub fn is_no_peer_address(&self) -> bool {
        matches!(self, KeyError::NoPeerAddress)
    }
}

/// What the layer does with a request whose key cannot be read.
///
/// ```
/// use http::StatusCode;
/// use tollgate::http::OnMissingKey;
///
/// let reject = OnMissingKey::Reject(StatusCode::UNAUTHORIZED);
/// let shared = OnMissingKey::Fallback("anonymous".into());
/// assert_ne!(reject, shared);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnMissingKey {
    /// Answer with this status and an `application/problem+json` body saying why (reason
    /// `missing_key` or `malformed_key`); nothing is counted against any limit.
    Reject(http::StatusCode),
    /// Count the request under this key instead: every keyless request shares it. Malformed
    /// keys go to the same key, so garbling a header buys nothing.
    Fallback(String),
}

impl Default for OnMissingKey {
    /// [`Reject`](OnMissingKey::Reject) with `401 Unauthorized` for a missing key; a
    /// malformed key is always answered `400 Bad Request`.
    fn default() -> Self {
        OnMissingKey::Reject(http::StatusCode::UNAUTHORIZED)
    }
}

/// Reads the limiter key from a request's head.
///
/// Built-ins: [`HeaderKey`] (an API key or customer id), [`PeerIp`] (the connection's
/// address, IPv6 by /64), [`ForwardedIp`] (the client behind trusted proxies only),
/// [`GlobalKey`] (one key for everything). Any `Fn(&Parts) -> Result<String, KeyError>` is
/// an extractor too:
///
/// ```
/// use http::request::Parts;
/// use tollgate::http::{KeyError, KeyExtractor};
///
/// let by_host = |parts: &Parts| -> Result<String, KeyError> {
///     parts.uri.host().map(str::to_owned).ok_or(KeyError::Missing { what: "host".into() })
/// };
/// let (parts, ()) = http::Request::get("http://example.com/").body(())?.into_parts();
/// assert_eq!(by_host.extract(&parts)?, "example.com");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key for this request.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when the request carries no usable key.
    fn extract(&self, parts: &Parts) -> Result<String, KeyError>;
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Result<String, KeyError> + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts) -> Result<String, KeyError> {
        self(parts)
    }
}

/// The longest key [`HeaderKey`] accepts by default, in bytes.
pub(crate) const DEFAULT_MAX_KEY_BYTES: usize = 256;

/// The key is a header's value: an API key, a customer id.
///
/// Accepted: one header line, 1 to [`max_len`](Self::max_len) bytes (default
/// [`DEFAULT_MAX_KEY_BYTES`](Self::DEFAULT_MAX_KEY_BYTES)) of visible ASCII (`!` to `~`). Absent or empty:
/// [`KeyError::Missing`]. Anything else — non-ASCII or control bytes, spaces, too long, the
/// header given twice — is [`KeyError::Malformed`]: never truncated or cleaned up into
/// another customer's key.
///
/// ```
/// use http::HeaderName;
/// use tollgate::http::{HeaderKey, KeyExtractor};
///
/// let key = HeaderKey::new(HeaderName::from_static("x-api-key"));
/// let req = http::Request::get("/").header("x-api-key", "k-42").body(())?;
/// assert_eq!(key.extract(&req.into_parts().0)?, "k-42");
///
/// let twice = http::Request::get("/").header("x-api-key", "a").header("x-api-key", "b").body(())?;
/// assert!(key.extract(&twice.into_parts().0).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    max_len: usize,
}

impl HeaderKey {
    /// The longest key accepted by default, in bytes: 256.
    pub const DEFAULT_MAX_KEY_BYTES: usize = DEFAULT_MAX_KEY_BYTES;

    /// Keys from the header `name`.
    pub fn new(name: HeaderName) -> Self {
        Self {
            name,
            max_len: DEFAULT_MAX_KEY_BYTES,
        }
    }

    /// The longest accepted key, in bytes (at least 1).
    pub fn max_len(mut self, bytes: usize) -> Self {
        self.max_len = bytes.max(1);
        self
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, parts: &Parts) -> Result<String, KeyError> {
        let what = || format!("header {}", self.name);
        let value = single_header(&parts.headers, &self.name, what)?
            .ok_or_else(|| KeyError::Missing { what: what() })?;
        let bytes = value.as_bytes();
        if bytes.is_empty() {
            return Err(KeyError::Missing { what: what() });
        }
        if bytes.len() > self.max_len {
            return Err(malformed(what(), "longer than the key limit"));
        }
        if !bytes.iter().all(|b| b.is_ascii_graphic()) {
            return Err(malformed(what(), "not visible ASCII"));
        }
        // Visible ASCII is valid UTF-8.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
}

impl HeaderKey {
    /// The bytes of the key [`extract`](KeyExtractor::extract) would return (visible ASCII,
    /// so the key's UTF-8), borrowed from `headers`, or `None` where it would not return one
    /// (an error, or a value to check again the long way). For the layer's lean path, which
    /// then takes the general one.
    #[inline]
    pub(crate) fn borrowed<'a>(&self, headers: &'a http::HeaderMap) -> Option<&'a [u8]> {
        let mut values = headers.get_all(&self.name).iter();
        let (value, None) = (values.next()?, values.next()) else {
            return None;
        };
        let key = value.as_bytes();
        let ok =
            !key.is_empty() && key.len() <= self.max_len && key.iter().all(u8::is_ascii_graphic);
        ok.then_some(key)
    }
}

/// The value of a header that must appear at most once.
pub(crate) fn single_header<'a>(
    headers: &'a http::HeaderMap,
    name: &HeaderName,
    what: impl Fn() -> String,
) -> Result<Option<&'a http::HeaderValue>, KeyError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(malformed(what(), "given more than once"));
    }
    Ok(first)
}

fn malformed(what: String, why: &'static str) -> KeyError {
    KeyError::Malformed { what, why }
}

/// Every request under one key, `"global"`: a limit for the whole service.
///
/// ```
/// use tollgate::http::{GlobalKey, KeyExtractor};
/// let (parts, ()) = http::Request::get("/").body(())?.into_parts();
/// assert_eq!(GlobalKey.extract(&parts)?, "global");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalKey;

impl KeyExtractor for GlobalKey {
    fn extract(&self, _: &Parts) -> Result<String, KeyError> {
        Ok("global".to_owned())
    }
}

type PeerLookup = Arc<dyn Fn(&Extensions) -> Option<IpAddr> + Send + Sync>;

/// The connection's peer address: IPv4 as is, IPv6 by its /64 (one customer's prefix, so
/// rotating addresses inside it buys nothing), IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as the
/// IPv4 address.
///
/// The address is read from the request's extensions, where the server puts it. By default
/// ([`PeerIp::new`]) the first of:
///
/// * axum's `ConnectInfo<SocketAddr>` (feature `axum`), which axum stores when the app is
///   served with `into_make_service_with_connect_info::<SocketAddr>()`:
///
///   ```rust,ignore
///   let app = axum::Router::new().fallback(|| async { "ok" }).layer(layer);
///   let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
///   axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
///   ```
/// * a [`SocketAddr`], or an [`IpAddr`] (a hyper server of your own: insert the address
///   `accept` returned into each request).
///
/// Anywhere else, say where with [`from_extensions`](Self::from_extensions). Under tonic
/// (whose server stores a `TcpConnectInfo`, or a `TlsConnectInfo` over TLS):
///
/// ```rust,ignore
/// use tonic::transport::server::TcpConnectInfo;
/// let peer = PeerIp::from_extensions(|e| e.get::<TcpConnectInfo>()?.remote_addr().map(|a| a.ip()));
/// ```
///
/// **No address at all** is [`KeyError::NoPeerAddress`]: the server is not set up to pass
/// it, which no client can fix. The layer answers `500` naming the fix (whatever its
/// [`OnMissingKey`] choice), counts it in
/// [`LayerStats::no_peer_address`](super::LayerStats::no_peer_address) and charges no key;
/// with feature `tracing`, it also logs one warning (target `tollgate::http`, to the
/// application's subscriber) for the first such request. Only requests whose key needs the
/// address get the `500`: a closure that keys on an API key first serves the requests that
/// carry one.
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::http::{KeyExtractor, PeerIp};
///
/// let mut req = http::Request::get("/").body(())?;
/// req.extensions_mut().insert("[2001:db8:1:2:3:4:5:6]:443".parse::<SocketAddr>()?);
/// assert_eq!(PeerIp::new().extract(&req.into_parts().0)?, "2001:db8:1:2::/64");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct PeerIp {
    lookup: PeerLookup,
    v6_prefix: u8,
}

impl PeerIp {
    /// The peer from axum's `ConnectInfo<SocketAddr>` (feature `axum`), a [`SocketAddr`] or
    /// an [`IpAddr`] extension, IPv6 by /64.
    pub fn new() -> Self {
        Self::from_extensions(default_peer)
    }

    /// The peer from wherever `lookup` finds it in the extensions.
    ///
    /// ```
    /// # use std::net::{IpAddr, SocketAddr};
    /// #[derive(Clone)]
    /// struct ConnectInfo(SocketAddr); // as axum's `ConnectInfo<SocketAddr>`
    /// let peer = tollgate::http::PeerIp::from_extensions(|ext| {
    ///     ext.get::<ConnectInfo>().map(|c| c.0.ip())
    /// });
    /// # let _ = peer;
    /// ```
    pub fn from_extensions(
        lookup: impl Fn(&Extensions) -> Option<IpAddr> + Send + Sync + 'static,
    ) -> Self {
        Self {
            lookup: Arc::new(lookup),
            v6_prefix: 64,
        }
    }

    /// The IPv6 prefix length that makes one key (default 64; at most 128).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.v6_prefix = bits.min(128);
        self
    }

    pub(crate) fn peer(&self, parts: &Parts) -> Result<IpAddr, KeyError> {
        (self.lookup)(&parts.extensions).ok_or(KeyError::NoPeerAddress)
    }
}

/// Where servers put the peer address: axum's `ConnectInfo` (feature `axum`), else a plain
/// [`SocketAddr`] or [`IpAddr`].
fn default_peer(ext: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        ext.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip());
    }
    ext.get::<SocketAddr>()
        .map(SocketAddr::ip)
        .or_else(|| ext.get::<IpAddr>().copied())
}

impl Default for PeerIp {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for PeerIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIp")
            .field("ipv6_prefix", &self.v6_prefix)
            .finish_non_exhaustive()
    }
}

impl KeyExtractor for PeerIp {
    fn extract(&self, parts: &Parts) -> Result<String, KeyError> {
        Ok(ip::ip_key(self.peer(parts)?, self.v6_prefix))
    }
}
