//! The rate-limit header fields: IETF `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers), or the legacy `X-RateLimit-*`.
//!
//! Followed: the working group's editor's copy after draft -10 (September 2025; the newest
//! text that could be read here), whose fields are unchanged in this respect since -09:
//!
//! * A policy item is a String (`"per-key"`), never a Token, with the parameters `q` (a
//!   non-negative Integer, in quota units), `w` (a window in whole seconds, at least 1: "sub-
//!   second precision is not supported") and `qu` (`"content-bytes"` for a byte budget; the
//!   default unit, `"requests"`, is left out).
//! * `q`/`w` say the written rate: `600/min` is `q=600;w=60`, `5/ms` is `q=5000;w=1` (scaled to
//!   one second), a byte budget's bytes per window. A GCRA's burst is not a window's quota, so
//!   when it differs from `q` it travels as the vendor parameter `tollgate-burst` — the form
//!   the draft asks of "implementation- or service-specific parameters" ("prefixed ... with a
//!   vendor identifier, e.g. `acme-burst`"), which clients that do not know it "can regard as
//!   comments". `r` is what the cell admits now, so with a burst above `q` it can exceed `q`.
//! * `t` is the seconds until the cell is full again on an allowed response (not only until
//!   the next unit: a client that waits `t` has the whole burst back) and the retry-after on
//!   a denial, rounded up; the draft lets a server choose ("MUST NOT assume that all its
//!   service limit will be fully restored", "MAY arbitrarily alter the reset").
//! * `pk`, the partition key, is not sent. It is optional; the draft asks servers to "avoid
//!   returning partition keys that contain sensitive information" and to document how a key
//!   is made "so that clients can predict" it. The layer's keys are API keys and client
//!   addresses: sent back raw they would leak, and a keyed hash of them is something no client
//!   can predict. A client already knows which key its request carried.
//!
//! The legacy fields (`HeaderMode::Legacy`) stay for clients that parse only
//! `X-RateLimit-Limit`, `-Remaining` and `-Reset`.
//!
//! Built on every allowed response, so they are written with a per-thread scratch buffer
//! and hand-rolled integer formatting: one allocation per field value (its `Bytes`).

use core::cell::RefCell;
use core::time::Duration;
use std::sync::Arc;

use crate::sync::RwLock;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use super::response::HeaderMode;
use crate::engine::gcra::Per;
use crate::engine::quota::Quota;

/// One matched limit's figures for the headers.
#[derive(Clone, Debug)]
pub(crate) struct Figures {
    pub(crate) policy: Arc<str>,
    pub(crate) quota: Option<Quota>,
    /// Remaining units; 0 on a denial.
    pub(crate) remaining: u64,
    /// Seconds until full (allow) or until the retry (deny), rounded up.
    pub(crate) reset_secs: u64,
}

static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Up to three fields to add to a response.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    slots: [Option<(&'static HeaderName, HeaderValue)>; 3],
}

impl Fields {
    /// The fields for `all` matched limits in `mode`, reporting `tightest` in `RateLimit`;
    /// `RateLimit-Policy` from `cache` when it holds it.
    pub(crate) fn allowed(
        mode: HeaderMode,
        all: &[Figures],
        tightest: &Figures,
        cache: Option<&PolicyCache>,
    ) -> Self {
        let slots = match mode {
            HeaderMode::Off => [None, None, None],
            HeaderMode::Ietf => [
                cache
                    .map_or_else(|| policy_field(all), |c| c.field(all))
                    .map(|v| (&RATELIMIT_POLICY, v)),
                limit_field(tightest).map(|v| (&RATELIMIT, v)),
                None,
            ],
            HeaderMode::Legacy => [
                tightest
                    .quota
                    .map(|q| (&X_LIMIT, HeaderValue::from(quota_window(&q).0))),
                Some((&X_REMAINING, HeaderValue::from(tightest.remaining))),
                Some((&X_RESET, HeaderValue::from(tightest.reset_secs))),
            ],
        };
        Self { slots }
    }

    /// `RateLimit-Policy` and `RateLimit` with these values (the lean path's, see
    /// `lean.rs`).
    pub(crate) fn ietf(policy: Option<HeaderValue>, limit: Option<HeaderValue>) -> Self {
        Self {
            slots: [
                policy.map(|v| (&RATELIMIT_POLICY, v)),
                limit.map(|v| (&RATELIMIT, v)),
                None,
            ],
        }
    }

    /// `true` if there is no field to add.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// `true` if `headers` already has one of these fields (a hook set its own).
    pub(crate) fn any_present(&self, headers: &HeaderMap) -> bool {
        self.slots
            .iter()
            .flatten()
            .any(|(name, _)| headers.contains_key(*name))
    }

    /// Sets the fields, replacing values of the same names.
    pub(crate) fn insert_into(self, headers: &mut HeaderMap) {
        for (name, value) in self.slots.into_iter().flatten() {
            headers.insert(name.clone(), value);
        }
    }
}

/// The last one-policy `RateLimit-Policy` value built, with the policy and quota it names:
/// the field is the same for every request of a policy, so most requests clone it (a
/// reference count) instead of writing it.
#[derive(Debug, Default)]
pub(crate) struct PolicyCache(RwLock<Option<(Arc<str>, Quota, HeaderValue)>>);

impl PolicyCache {
    pub(crate) fn field(&self, all: &[Figures]) -> Option<HeaderValue> {
        let [one] = all else { return policy_field(all) };
        let quota = one.quota?;
        if let Some((name, q, value)) = &*self.0.read() {
            if *q == quota && (Arc::ptr_eq(name, &one.policy) || **name == *one.policy) {
                return Some(value.clone());
            }
        }
        let value = policy_field(all)?;
        *self.0.write() = Some((Arc::clone(&one.policy), quota, value.clone()));
        Some(value)
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(128));
}

/// A header value written by `write` into the thread's scratch buffer.
fn with_scratch(write: impl FnOnce(&mut Vec<u8>)) -> Option<HeaderValue> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            write(&mut buf);
            HeaderValue::from_bytes(&buf).ok()
        }
        Err(_) => {
            let mut buf = Vec::new();
            write(&mut buf);
            HeaderValue::from_bytes(&buf).ok()
        }
    })
}

fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        // v % 10 < 10: the cast keeps it.
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// A structured-field string: `"name"`, with `"` and `\` escaped and anything outside
/// visible ASCII and space replaced by `?`.
fn sf_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push(b'\\');
                out.push(c as u8);
            }
            // ASCII: the cast keeps it.
            ' '..='~' => out.push(c as u8),
            _ => out.push(b'?'),
        }
    }
    out.push(b'"');
}

/// `q` and `w` for a quota: the count (in bytes for a byte budget) over the period in whole
/// seconds when the period is at least a second, else scaled to one second.
fn quota_window(q: &Quota) -> (u64, u64) {
    let period = q.period();
    let period_ns = period.as_nanos().max(1);
    let per_period = match q.params().per {
        Per::Request { .. } => u128::from(q.count()),
        // num/den is the exact number of ns per byte.
        Per::Byte { num, den } => period_ns.saturating_mul(den) / u128::from(num.max(1)),
    };
    const SEC: u128 = 1_000_000_000;
    let (quota, window) = if period_ns % SEC == 0 {
        (per_period, period_ns / SEC)
    } else if period >= Duration::from_secs(1) {
        // `1/1500ms`: whole seconds only, so the window is rounded up and the quota scaled
        // down to it (never more than the rate admits).
        let w = period_ns.div_ceil(SEC);
        (per_period.saturating_mul(w * SEC) / period_ns, w)
    } else {
        (per_period.saturating_mul(SEC) / period_ns, 1)
    };
    let fit = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
    (fit(quota), fit(window))
}

/// `RateLimit-Policy` for all matched limits that tell their quota.
pub(crate) fn policy_field(all: &[Figures]) -> Option<HeaderValue> {
    if all.iter().all(|f| f.quota.is_none()) {
        return None;
    }
    with_scratch(|out| {
        for f in all {
            let Some(q) = &f.quota else { continue };
            if !out.is_empty() {
                out.extend_from_slice(b", ");
            }
            sf_string(&f.policy, out);
            let (quota, window) = quota_window(q);
            out.extend_from_slice(b";q=");
            push_u64(out, quota);
            out.extend_from_slice(b";w=");
            push_u64(out, window);
            if q.is_bytes() {
                out.extend_from_slice(b";qu=\"content-bytes\"");
            }
            // The burst, when `q` alone would suggest another: a client reads `q` as what a
            // window admits, and a burst other than `q` admits another number at once.
            if q.burst() != quota {
                out.extend_from_slice(b";tollgate-burst=");
                push_u64(out, q.burst());
            }
        }
    })
}

/// The start of every `RateLimit` value of the policy `name`: its structured string and
/// `;r=` (see [`limit_value`]).
pub(crate) fn limit_prefix(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    sf_string(name, &mut out);
    out.extend_from_slice(b";r=");
    out
}

/// `RateLimit` for one limit whose [`limit_prefix`] is `prefix`: what [`limit_field`] writes.
pub(crate) fn limit_value(prefix: &[u8], remaining: u64, reset_secs: u64) -> Option<HeaderValue> {
    with_scratch(|out| {
        out.extend_from_slice(prefix);
        push_limit_rest(out, remaining, reset_secs);
    })
}

/// `RateLimit` for one limit.
pub(crate) fn limit_field(f: &Figures) -> Option<HeaderValue> {
    with_scratch(|out| {
        sf_string(&f.policy, out);
        out.extend_from_slice(b";r=");
        push_limit_rest(out, f.remaining, f.reset_secs);
    })
}

/// The end of a `RateLimit` value, after `;r=`: the remaining units and the reset.
fn push_limit_rest(out: &mut Vec<u8>, remaining: u64, reset_secs: u64) {
    push_u64(out, remaining);
    out.extend_from_slice(b";t=");
    push_u64(out, reset_secs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(policy: &str, quota: &str) -> Figures {
        Figures {
            policy: Arc::from(policy),
            quota: Some(quota.parse().unwrap()), // test
            remaining: 3,
            reset_secs: 2,
        }
    }

    #[test]
    fn policy_names_are_escaped_structured_strings() {
        let f = figures("a \"b\" \\ é", "10/s");
        let v = limit_field(&f).unwrap(); // test
        assert_eq!(v, r#""a \"b\" \\ ?";r=3;t=2"#);
    }

    #[test]
    fn windows_are_whole_seconds() {
        let v = |q: &str| policy_field(&[figures("p", q)]).unwrap(); // test
        assert_eq!(v("100/s"), r#""p";q=100;w=1"#);
        assert_eq!(v("600/min;burst=50"), r#""p";q=600;w=60;tollgate-burst=50"#);
        assert_eq!(v("5/ms"), r#""p";q=5000;w=1;tollgate-burst=5"#);
        assert_eq!(v("1/d"), r#""p";q=1;w=86400"#);
        assert_eq!(v("1/2d"), r#""p";q=1;w=172800"#);
        assert_eq!(v("1/90ms"), r#""p";q=11;w=1;tollgate-burst=1"#);
        assert_eq!(v("3/1500ms"), r#""p";q=4;w=2;tollgate-burst=3"#);
        assert_eq!(v("1MB/s"), r#""p";q=1000000;w=1;qu="content-bytes""#);
        assert_eq!(v("2Gbit/s"), r#""p";q=250000000;w=1;qu="content-bytes""#);
        assert_eq!(
            v("100Mbit/s;burst=16MiB"),
            r#""p";q=12500000;w=1;qu="content-bytes";tollgate-burst=16777216"#
        );
        assert_eq!(v("3MB/min"), r#""p";q=3000000;w=60;qu="content-bytes""#);
        let two = policy_field(&[figures("a", "1/s"), figures("b", "2/s")]).unwrap(); // test
        assert_eq!(two, r#""a";q=1;w=1, "b";q=2;w=1"#);
    }

    #[test]
    fn the_cache_answers_for_the_policy_and_quota_it_holds() {
        let cache = PolicyCache::default();
        let field = |f: &[Figures]| cache.field(f).unwrap(); // test
        let a = [figures("a", "10/s")];
        assert_eq!(field(&a), r#""a";q=10;w=1"#);
        assert_eq!(field(&a), r#""a";q=10;w=1"#);
        // Another quota under the same name (a reload), another name: rebuilt.
        assert_eq!(field(&[figures("a", "20/s")]), r#""a";q=20;w=1"#);
        assert_eq!(field(&[figures("b", "20/s")]), r#""b";q=20;w=1"#);
        let two = [figures("a", "1/s"), figures("b", "2/s")];
        assert_eq!(field(&two), r#""a";q=1;w=1, "b";q=2;w=1"#);
    }

    #[test]
    fn integers_are_written_exactly() {
        for v in [0, 7, 10, 99, 1_000_000, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, v);
            assert_eq!(out, v.to_string().into_bytes());
        }
    }
}
