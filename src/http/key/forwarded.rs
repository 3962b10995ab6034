//! The client's address behind trusted reverse proxies.

use std::net::IpAddr;

use http::header::{HeaderName, FORWARDED};
use http::request::Parts;

use super::{ip, malformed, IpRange, KeyError, KeyExtractor, PeerIp};

/// The most trusted hops [`ForwardedIp`] walks past: one per proxy of ours, with room to
/// spare.
const MAX_TRUSTED_HOPS: usize = 32;
/// The most header bytes (all lines together) [`ForwardedIp`] accepts. Only the hops it
/// walks are read, so this is not a bound on its work; it refuses chains no proxy set-up
/// writes, and nothing is charged for them.
const MAX_FORWARDED_BYTES: usize = 64 << 10;

/// Which header carries the forwarded chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (only the `for` parameters are read).
    Forwarded,
}

/// What [`ForwardedIp`] answers for a request from a trusted proxy that carries no forwarded
/// chain: no header line, or lines with no element (`X-Forwarded-For: `).
///
/// Behind a load balancer that is every request the balancer did not forward for a client —
/// its own health checks, a listener not set to add the header, an internal caller going
/// through it — and they all come from the balancer's few addresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoForwardedHeader {
    /// The proxy is the client: the request is keyed by the proxy's own address (the
    /// default). Every such request shares the proxy's one bucket, so a client whose
    /// requests lose the header is limited together with all the others that do.
    #[default]
    KeyProxy,
    /// No client address: [`KeyError::Missing`], which the layer answers as it answers any
    /// missing key ([`OnMissingKey`](super::OnMissingKey): `401` by default, or the
    /// request is counted under the fallback key). An IP exemption does not apply to it.
    MissingKey,
}

/// The client's address behind trusted reverse proxies: the peer address, unless the peer
/// is one of the configured proxy ranges, in which case the forwarded chain is walked from
/// the right (the hop the nearest proxy saw) past every trusted proxy, and **the right-most
/// untrusted hop is the client, whatever stands to its left.** The result is keyed as by
/// [`PeerIp`] (IPv6 by /64).
///
/// **Nothing is trusted by default.** With no ranges configured, or a peer outside them,
/// forwarded headers are ignored — a spoofed `X-Forwarded-For` from the internet changes
/// nothing.
///
/// From a trusted peer:
///
/// * **Left of the client is the client's to write.** A proxy that appends to the header
///   (nginx's `$proxy_add_x_forwarded_for`) keeps what the client sent; those elements are
///   never parsed, counted or checked, so padding or bytes that are not ASCII there neither
///   fail the request nor move it to another key.
/// * **Empty list elements are ignored** (RFC 9110 §5.6.1.2): `198.51.100.7, , 10.1.1.1`, a
///   trailing comma, `for=…,, for=…`. A chain with no element at all (no header, an empty
///   one) means the peer itself is the client, unless
///   [`on_no_header`](Self::on_no_header) says otherwise: behind a load balancer, all
///   traffic that arrives without the header then shares the balancer's one key.
/// * **Repeated header lines are one list**, joined in order (RFC 9110 §5.3): the right-most
///   hop is the last one of the last line.
/// * **At most 32 trusted hops are passed**, so the client may stand 33rd from the right. A
///   chain of at most 32 hops, all trusted, names its left-most hop as the client (a client
///   inside the trusted ranges).
/// * **[`KeyError::Malformed`]** (the layer answers `400`, or counts the request under the
///   [`OnMissingKey::Fallback`] key) when a hop the walk reaches is not an address
///   (`unknown`, an obfuscated `_node` identifier, text that is not visible ASCII, a
///   `Forwarded` element without `for=`): the client's position holds no address, and
///   guessing one would be somebody else's key; when the walk meets a 33rd trusted hop (no
///   deployment has that many proxies of its own, and what is further left is nobody's to
///   believe); and when the header lines together exceed 64 KiB.
///
/// The walk is linear in the header's size, reads from the right and stops at the client.
///
/// [`OnMissingKey::Fallback`]: super::OnMissingKey::Fallback
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::http::{ForwardedIp, KeyExtractor};
///
/// let key = ForwardedIp::trusting(["10.0.0.0/8".parse()?]);
/// let request = |peer: &str| -> Result<http::request::Parts, Box<dyn std::error::Error>> {
///     let mut req = http::Request::get("/")
///         .header("x-forwarded-for", "198.51.100.7, 10.1.2.3")
///         .body(())?;
///     req.extensions_mut().insert(peer.parse::<SocketAddr>()?);
///     Ok(req.into_parts().0)
/// };
/// // Through two of our proxies: the client is the first address outside 10/8.
/// assert_eq!(key.extract(&request("10.9.9.9:1234")?)?, "198.51.100.7");
/// // Straight from the internet: the header is a lie and is ignored.
/// assert_eq!(key.extract(&request("203.0.113.5:1234")?)?, "203.0.113.5");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct ForwardedIp {
    peer: PeerIp,
    trusted: Vec<IpRange>,
    header: ForwardedHeader,
    no_header: NoForwardedHeader,
}

impl ForwardedIp {
    /// Trusts forwarded headers only from peers inside `proxies`, reading
    /// `X-Forwarded-For`.
    pub fn trusting(proxies: impl IntoIterator<Item = IpRange>) -> Self {
        Self {
            peer: PeerIp::new(),
            trusted: proxies.into_iter().collect(),
            header: ForwardedHeader::XForwardedFor,
            no_header: NoForwardedHeader::KeyProxy,
        }
    }

    /// Reads the chain from `header` instead.
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// What a request from a trusted proxy with no forwarded chain is keyed by: the proxy's
    /// address ([`NoForwardedHeader::KeyProxy`], the default), or nothing
    /// ([`NoForwardedHeader::MissingKey`]: the layer's missing-key answer). A peer outside
    /// the trusted ranges is keyed by its own address either way, whatever it sends.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use tollgate::http::{ForwardedIp, KeyExtractor, NoForwardedHeader};
    ///
    /// let key = ForwardedIp::trusting(["10.0.0.0/8".parse()?])
    ///     .on_no_header(NoForwardedHeader::MissingKey);
    /// let mut req = http::Request::get("/healthz").body(())?;
    /// req.extensions_mut().insert("10.0.0.1:4711".parse::<SocketAddr>()?);
    /// let err = key.extract(&req.into_parts().0).unwrap_err();
    /// assert!(err.is_missing());
    /// assert_eq!(err.to_string(), "missing key: header x-forwarded-for from a trusted proxy");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_no_header(mut self, answer: NoForwardedHeader) -> Self {
        self.no_header = answer;
        self
    }

    /// Where the peer address comes from, and the IPv6 prefix of the key.
    pub fn peer(mut self, peer: PeerIp) -> Self {
        self.peer = peer;
        self
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|r| r.contains(ip))
    }

    /// One hop's address, or why it has none.
    fn parse(&self, hop: &[u8]) -> Result<IpAddr, &'static str> {
        // Spaces and tabs may stand around a `Forwarded` element's `;` and `=`.
        if !hop
            .iter()
            .all(|&b| b.is_ascii_graphic() || b == b' ' || b == b'\t')
        {
            return Err("a hop is not visible ASCII");
        }
        let hop = core::str::from_utf8(hop).map_err(|_| "a hop is not visible ASCII")?;
        match self.header {
            ForwardedHeader::XForwardedFor => ip::parse_hop(hop),
            ForwardedHeader::Forwarded => ip::parse_forwarded_for(hop),
        }
        .ok_or("a hop is not an IP address")
    }

    /// The client's address, as [`extract`](KeyExtractor::extract) keys it (before the
    /// IPv6 prefix); also what the layer's IP exemptions read.
    pub(crate) fn client(&self, parts: &Parts) -> Result<IpAddr, KeyError> {
        let peer = self.peer.peer(parts)?;
        if !self.is_trusted(peer) {
            return Ok(peer);
        }
        let (name, what) = match self.header {
            ForwardedHeader::XForwardedFor => (
                HeaderName::from_static("x-forwarded-for"),
                "header x-forwarded-for",
            ),
            ForwardedHeader::Forwarded => (FORWARDED, "header forwarded"),
        };
        let bad = |why| malformed(what.to_owned(), why);
        let lines = parts.headers.get_all(&name);
        let bytes = lines.iter().fold(0usize, |n, v| n.saturating_add(v.len()));
        if bytes > MAX_FORWARDED_BYTES {
            return Err(bad("longer than 64 KiB"));
        }
        let mut client = peer;
        let mut passed = 0;
        // The right-most hop is the last element of the last line: walk the lines backwards
        // and each from its end, so nothing left of the client is ever looked at.
        for line in lines.iter().rev() {
            for element in line.as_bytes().rsplit(|&b| b == b',') {
                let hop = element.trim_ascii();
                if hop.is_empty() {
                    continue;
                }
                let addr = self.parse(hop).map_err(bad)?;
                if !self.is_trusted(addr) {
                    return Ok(addr);
                }
                if passed == MAX_TRUSTED_HOPS {
                    return Err(bad("more than 32 trusted hops"));
                }
                client = addr;
                passed += 1;
            }
        }
        if passed == 0 && self.no_header == NoForwardedHeader::MissingKey {
            return Err(KeyError::Missing {
                what: format!("{what} from a trusted proxy"),
            });
        }
        Ok(client)
    }
}

impl KeyExtractor for ForwardedIp {
    fn extract(&self, parts: &Parts) -> Result<String, KeyError> {
        Ok(ip::ip_key(self.client(parts)?, self.peer.v6_prefix))
    }
}
