//! The client's address behind trusted reverse proxies.

use std::net::IpAddr;

use http::header::{HeaderName, FORWARDED};
use http::request::Parts;

use super::{ip, malformed, IpRange, KeyError, KeyExtractor, PeerIp};

/// The maximum forwarded hops [`ForwardedIp`] walks, and the most header bytes it reads.
const MAX_HOPS: usize = 32;
const MAX_FORWARDED_BYTES: usize = 4096;

/// Which header carries the forwarded chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (only the `for` parameters are read).
    Forwarded,
}

/// The client's address behind trusted reverse proxies: the peer address, unless the peer
/// is one of the configured proxy ranges, in which case the forwarded chain is walked from
/// the right (the hop the nearest proxy saw) past every trusted proxy, and the first
/// untrusted hop is the client. The result is keyed as by [`PeerIp`] (IPv6 by /64).
///
/// **Nothing is trusted by default.** With no ranges configured, or a peer outside them,
/// forwarded headers are ignored — a spoofed `X-Forwarded-For` from the internet changes
/// nothing. A chain that does not parse (a hop that is not an address, `unknown`, an
/// obfuscated identifier, more than 32 hops or 4 KiB) from a trusted peer is
/// [`KeyError::Malformed`]; an empty chain from a trusted peer means the proxy itself is the
/// client.
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
}

impl ForwardedIp {
    /// Trusts forwarded headers only from peers inside `proxies`, reading
    /// `X-Forwarded-For`.
    pub fn trusting(proxies: impl IntoIterator<Item = IpRange>) -> Self {
        Self {
            peer: PeerIp::new(),
            trusted: proxies.into_iter().collect(),
            header: ForwardedHeader::XForwardedFor,
        }
    }

    /// Reads the chain from `header` instead.
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
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

    fn client(&self, parts: &Parts) -> Result<IpAddr, KeyError> {
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
        // Repeated header lines are one list, in order (RFC 9110 §5.3).
        let mut hops: Vec<&str> = Vec::new();
        let mut bytes = 0;
        for value in parts.headers.get_all(&name) {
            bytes += value.len();
            if bytes > MAX_FORWARDED_BYTES {
                return Err(bad("longer than 4 KiB"));
            }
            let text = value.to_str().map_err(|_| bad("not visible ASCII"))?;
            hops.extend(text.split(',').map(str::trim));
        }
        let mut client = peer;
        for (walked, hop) in hops.iter().rev().enumerate() {
            if walked >= MAX_HOPS {
                return Err(bad("more than 32 hops"));
            }
            let addr = match self.header {
                ForwardedHeader::XForwardedFor => ip::parse_hop(hop),
                ForwardedHeader::Forwarded => ip::parse_forwarded_for(hop),
            }
            .ok_or_else(|| bad("a hop is not an IP address"))?;
            client = addr;
            if !self.is_trusted(addr) {
                break;
            }
        }
        Ok(client)
    }
}

impl KeyExtractor for ForwardedIp {
    fn extract(&self, parts: &Parts) -> Result<String, KeyError> {
        Ok(ip::ip_key(self.client(parts)?, self.peer.v6_prefix))
    }
}
