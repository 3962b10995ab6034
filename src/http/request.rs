//! Reading what the limits need from a request's head: tier, category, route, the attempt
//! number and the cost.

use core::fmt;
use std::sync::Arc;

use http::header::{HeaderName, CONTENT_LENGTH};
use http::request::Parts;
use http::HeaderMap;

use super::key::single_header;

/// The longest tier name read from a header.
const MAX_TIER_BYTES: usize = 64;
/// The most digits read from an attempt or length header.
const MAX_DIGITS: usize = 20;

type PartsFn = Arc<dyn Fn(&Parts) -> String + Send + Sync>;

/// Where the tier comes from.
#[derive(Clone, Default)]
pub(crate) enum TierFrom {
    /// No tier: the empty string.
    #[default]
    None,
    Header(HeaderName),
    Fn(PartsFn),
}

/// How the tier, category and route are read.
#[derive(Clone, Default)]
pub(crate) struct Classifier {
    pub(crate) tier: TierFrom,
    pub(crate) category: Option<PartsFn>,
    pub(crate) route: Option<PartsFn>,
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tier = match &self.tier {
            TierFrom::None => "none".to_owned(),
            TierFrom::Header(h) => format!("header {h}"),
            TierFrom::Fn(_) => "closure".to_owned(),
        };
        f.debug_struct("Classifier")
            .field("tier", &tier)
            .field(
                "category",
                &self
                    .category
                    .as_ref()
                    .map_or("first path segment", |_| "closure"),
            )
            .field("route", &self.route.as_ref().map_or("path", |_| "closure"))
            .finish()
    }
}

/// A header the layer reads is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadHeader(pub(crate) String);

impl Classifier {
    /// The tier: empty when absent. A tier header that is repeated, longer than 64 bytes or
    /// not visible ASCII is an error (answered 400), never silently another tier.
    pub(crate) fn tier(&self, parts: &Parts) -> Result<String, BadHeader> {
        match &self.tier {
            TierFrom::None => Ok(String::new()),
            TierFrom::Fn(f) => Ok(f(parts)),
            TierFrom::Header(name) => {
                let what = || format!("header {name}");
                let v = single_header(&parts.headers, name, what)
                    .map_err(|e| BadHeader(e.to_string()))?;
                let Some(v) = v else { return Ok(String::new()) };
                let b = v.as_bytes();
                if b.len() > MAX_TIER_BYTES || !b.iter().all(u8::is_ascii_graphic) {
                    return Err(BadHeader(format!(
                        "header {name}: not a tier (1 to 64 visible ASCII characters)"
                    )));
                }
                Ok(String::from_utf8_lossy(b).into_owned())
            }
        }
    }

    /// The category: by default the first path segment (`/checkout/cart` → `checkout`).
    pub(crate) fn category(&self, parts: &Parts) -> String {
        match &self.category {
            Some(f) => f(parts),
            None => first_segment(parts.uri.path()).to_owned(),
        }
    }

    /// The route: by default the path as received.
    pub(crate) fn route(&self, parts: &Parts) -> String {
        match &self.route {
            Some(f) => f(parts),
            None => parts.uri.path().to_owned(),
        }
    }
}

fn first_segment(path: &str) -> &str {
    let path = path.strip_prefix('/').unwrap_or(path);
    path.split('/').next().unwrap_or_default()
}

/// A header carrying the attempt number, and the number it has on an original request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptHeader {
    pub(crate) name: HeaderName,
    first: u32,
}

impl AttemptHeader {
    /// `name` carries a count whose value on the original request is `first`: 0 for
    /// `grpc-previous-rpc-attempts` (retries made before this one) and tollgate's own
    /// `tollgate-attempt`, 1 for `x-envoy-attempt-count` (attempts including this one).
    ///
    /// ```
    /// use http::HeaderName;
    /// use tollgate::http::AttemptHeader;
    /// let envoy = AttemptHeader::new(HeaderName::from_static("x-envoy-attempt-count"), 1);
    /// # let _ = envoy;
    /// ```
    pub fn new(name: HeaderName, first: u32) -> Self {
        Self { name, first }
    }

    /// The defaults, in the order they are read (the first present one counts):
    /// `grpc-previous-rpc-attempts` (0), `x-envoy-attempt-count` (1), `tollgate-attempt` (0).
    pub fn defaults() -> Vec<AttemptHeader> {
        vec![
            Self::new(HeaderName::from_static("grpc-previous-rpc-attempts"), 0),
            Self::new(HeaderName::from_static("x-envoy-attempt-count"), 1),
            Self::new(HeaderName::from_static("tollgate-attempt"), 0),
        ]
    }
}

/// A decimal header value: digits only, at most 20 of them, saturating at `u64::MAX`.
fn decimal(headers: &HeaderMap, name: &HeaderName) -> Result<Option<u64>, BadHeader> {
    let what = || format!("header {name}");
    let v = single_header(headers, name, what).map_err(|e| BadHeader(e.to_string()))?;
    let Some(v) = v else { return Ok(None) };
    let b = v.as_bytes();
    if b.is_empty() || b.len() > MAX_DIGITS || !b.iter().all(u8::is_ascii_digit) {
        return Err(BadHeader(format!("header {name}: not a decimal number")));
    }
    let n = b.iter().fold(0u64, |n, d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Ok(Some(n))
}

/// The attempt number from the first present header of `headers`: 0 when none is present;
/// malformed (not digits, repeated, over 20 digits) is an error, answered 400. Counts past
/// `u32::MAX` saturate.
pub(crate) fn attempt(head: &HeaderMap, headers: &[AttemptHeader]) -> Result<u32, BadHeader> {
    // One pass over the request's few headers rather than a hashed lookup per configured
    // name: a request usually carries none of them.
    const MAX_TRACKED: usize = 8;
    if headers.is_empty() || headers.len() > MAX_TRACKED {
        return attempt_by_lookup(head, headers);
    }
    let mut seen = [0u8; MAX_TRACKED];
    for (name, _) in head.iter() {
        if let Some(i) = headers.iter().position(|h| h.name == *name) {
            seen[i] = seen[i].saturating_add(1);
        }
    }
    match seen.iter().position(|&n| n > 0) {
        None => Ok(0),
        Some(i) => attempt_by_lookup(head, &headers[i..=i]),
    }
}

fn attempt_by_lookup(head: &HeaderMap, headers: &[AttemptHeader]) -> Result<u32, BadHeader> {
    for h in headers {
        if let Some(n) = decimal(head, &h.name)? {
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            return Ok(n.saturating_sub(h.first));
        }
    }
    Ok(0)
}

/// What a request costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cost {
    /// One unit per request, the default.
    #[default]
    One,
    /// Its `Content-Length` in bytes, for byte budgets (`"100Mbit/s;burst=16MiB"`). A body
    /// without a length (chunked) is charged `unknown_length` bytes up front — an estimate,
    /// not the streamed size: size it to your typical chunked upload, or reject chunked
    /// uploads upstream. A body of 0 bytes is charged 1 (the request still happened).
    ContentLength {
        /// The charge for a body without `Content-Length`.
        unknown_length: u64,
    },
}

impl Cost {
    pub(crate) fn of(&self, parts: &Parts) -> Result<u64, BadHeader> {
        match *self {
            Cost::One => Ok(1),
            Cost::ContentLength { unknown_length } => Ok(decimal(&parts.headers, &CONTENT_LENGTH)?
                .unwrap_or(unknown_length)
                .max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &[u8])]) -> Parts {
        let mut b = http::Request::get("/v1/x");
        for (k, v) in headers {
            b = b.header(*k, http::HeaderValue::from_bytes(v).unwrap()); // test
        }
        b.body(()).unwrap().into_parts().0 // test
    }

    #[test]
    fn attempts_from_the_first_present_header() {
        let d = AttemptHeader::defaults();
        assert_eq!(attempt(&parts(&[]).headers, &d), Ok(0));
        assert_eq!(
            attempt(&parts(&[("x-envoy-attempt-count", b"1")]).headers, &d),
            Ok(0)
        );
        assert_eq!(
            attempt(&parts(&[("x-envoy-attempt-count", b"3")]).headers, &d),
            Ok(2)
        );
        assert_eq!(
            attempt(&parts(&[("grpc-previous-rpc-attempts", b"2")]).headers, &d),
            Ok(2)
        );
        let huge = parts(&[("tollgate-attempt", b"99999999999999999999")]);
        assert_eq!(attempt(&huge.headers, &d), Ok(u32::MAX));
        for bad in [
            &b"-1"[..],
            b"1.5",
            b"",
            b" 1",
            b"123456789012345678901",
            b"\xff",
        ] {
            assert!(
                attempt(&parts(&[("tollgate-attempt", bad)]).headers, &d).is_err(),
                "{bad:?}"
            );
        }
        let twice = parts(&[("tollgate-attempt", b"1"), ("tollgate-attempt", b"1")]);
        assert!(attempt(&twice.headers, &d).is_err());
    }

    #[test]
    fn category_is_the_first_segment() {
        assert_eq!(first_segment("/checkout/cart"), "checkout");
        assert_eq!(first_segment("/"), "");
        assert_eq!(first_segment("checkout"), "checkout");
    }
}
