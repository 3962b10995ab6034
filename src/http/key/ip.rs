//! Addresses as keys, address ranges, and forwarded hops.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// An address range in CIDR form, `10.0.0.0/8` or `2001:db8::/32` (a bare address is a
/// range of one). IPv4-mapped IPv6 addresses are compared as IPv4.
///
/// ```
/// use tollgate::http::IpRange;
/// let r: IpRange = "10.0.0.0/8".parse()?;
/// assert!(r.contains("10.200.1.1".parse()?));
/// assert!(r.contains("::ffff:10.0.0.1".parse()?));
/// assert!(!r.contains("11.0.0.1".parse()?));
/// assert!("10.0.0.0/33".parse::<IpRange>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpRange {
    addr: IpAddr,
    prefix: u8,
}

/// A range that does not parse: the input, escaped and cut to 64 characters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid address range {input:?}: write an address and a prefix length, like \"10.0.0.0/8\" or \"2001:db8::/32\"")]
pub struct IpRangeError {
    input: String,
}

impl IpRange {
    /// `true` if `ip` lies in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask32(u32::from(net), self.prefix) == mask32(u32::from(ip), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask128(u128::from(net), self.prefix) == mask128(u128::from(ip), self.prefix)
            }
            _ => false,
        }
    }
}

impl FromStr for IpRange {
    type Err = IpRangeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || IpRangeError {
            input: s.chars().take(64).collect(),
        };
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => {
                if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                (a, Some(p.parse::<u8>().map_err(|_| err())?))
            }
            None => (s, None),
        };
        let addr = canonical(addr.parse::<IpAddr>().map_err(|_| err())?);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(err());
        }
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for IpRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask32(v: u32, prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p if p >= 32 => v,
        p => v & (u32::MAX << (32 - u32::from(p))),
    }
}

fn mask128(v: u128, prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p if p >= 128 => v,
        p => v & (u128::MAX << (128 - u32::from(p))),
    }
}

/// IPv4-mapped IPv6 as IPv4; everything else as is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The key for an address: IPv4 as is, IPv6 masked to `v6_prefix` bits and written with
/// the prefix length, IPv4-mapped IPv6 as IPv4.
pub(crate) fn ip_key(ip: IpAddr, v6_prefix: u8) -> String {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let masked = Ipv6Addr::from(mask128(u128::from(v6), v6_prefix));
            format!("{masked}/{v6_prefix}")
        }
    }
}

/// One `X-Forwarded-For` hop: an address, optionally with a port (`1.2.3.4:80`,
/// `[2001:db8::1]:80`).
pub(crate) fn parse_hop(hop: &str) -> Option<IpAddr> {
    if hop.len() > 64 {
        return None;
    }
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    hop.parse::<SocketAddr>().ok().map(|s| s.ip())
}

/// One RFC 7239 element's `for=` parameter: `for=192.0.2.60`, `for="[2001:db8::1]:4711"`,
/// `for=192.0.2.60;proto=http`. `unknown` and obfuscated identifiers are not addresses.
pub(crate) fn parse_forwarded_for(element: &str) -> Option<IpAddr> {
    let value = element.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        k.trim().eq_ignore_ascii_case("for").then_some(v.trim())
    })?;
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    if let Some(inner) = value.strip_prefix('[') {
        let (addr, _) = inner.split_once(']')?;
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    match value.split_once(':') {
        Some((v4, _port)) => v4.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        None => value.parse::<IpAddr>().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_at_every_prefix_length() {
        let all: IpRange = "0.0.0.0/0".parse().unwrap(); // test
        assert!(all.contains("255.1.2.3".parse().unwrap())); // test
        let one: IpRange = "192.0.2.1/32".parse().unwrap(); // test
        assert!(one.contains("192.0.2.1".parse().unwrap())); // test
        assert!(!one.contains("192.0.2.2".parse().unwrap())); // test
        let v6: IpRange = "2001:db8::/32".parse().unwrap(); // test
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap())); // test
        assert!(!v6.contains("2001:db9::1".parse().unwrap())); // test
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "10.0.0.0/33",
            "::/129",
            "x/1",
        ] {
            assert!(bad.parse::<IpRange>().is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_ipv6_by_prefix_and_mapped_as_ipv4() {
        let k = |s: &str| ip_key(s.parse().unwrap(), 64); // test
        assert_eq!(k("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(k("2001:db8:1:2:bbbb::9"), "2001:db8:1:2::/64");
        assert_ne!(k("2001:db8:1:3::1"), k("2001:db8:1:2::1"));
        assert_eq!(k("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(k("192.0.2.1"), "192.0.2.1");
    }

    #[test]
    fn parses_forwarded_elements() {
        let f = parse_forwarded_for;
        assert_eq!(f("for=192.0.2.60;proto=http"), "192.0.2.60".parse().ok());
        assert_eq!(f("for=\"[2001:db8::1]:4711\""), "2001:db8::1".parse().ok());
        assert_eq!(f("For=\"192.0.2.1:80\""), "192.0.2.1".parse().ok());
        assert_eq!(f("for=unknown"), None);
        assert_eq!(f("for=_hidden"), None);
        assert_eq!(f("by=192.0.2.1"), None);
        assert_eq!(parse_hop("[2001:db8::1]:80"), "2001:db8::1".parse().ok());
        assert_eq!(parse_hop("198.51.100.1:8080"), "198.51.100.1".parse().ok());
        assert_eq!(parse_hop("not-an-ip"), None);
    }
}
