//! The layer's lean path: the common gateway setup decided without the general machinery.
//!
//! One built-in in-memory limit ([`KeyedRateLimiter<String>`] or [`RateLimiter`], owned or
//! in an `Arc`), keyed by a [`HeaderKey`] or the [`GlobalKey`], one unit per request, no tier
//! source, no queue. For such a layer, a request whose key header is well-formed and which
//! carries no attempt header is checked with the key borrowed from its header (no `String`),
//! on the limiter's steady path, and handed to the inner service as it came (no split into
//! parts and back). Anything else — a missing or malformed key, an attempt header, a denial,
//! a pass-through — is answered exactly as the general path answers it: the lean path either
//! returns an allowance or the limit's verdict for the general path's response code, having
//! charged only what the general path would have.

use core::any::Any;
use std::sync::Arc;

use http::HeaderMap;

use http::HeaderValue;

use super::fields::Figures;
use super::fields::{self, Fields, PolicyCache};
use super::judge::secs_up;
use super::key::{GlobalKey, HeaderKey};
use super::request::{AttemptHeader, Cost, TierFrom};
use super::response::HeaderMode;
use super::source::PolicySource;
use crate::engine::quota::Quota;
use crate::engine::verdict::Allowed;
use crate::engine::verdict::Verdict;
use crate::limiter::direct::RateLimiter;
use crate::limiter::keyed::KeyedRateLimiter;

/// Where the lean path reads a key.
#[derive(Clone)]
pub(crate) enum LeanKey {
    Header(HeaderKey),
    Global,
}

impl LeanKey {
    /// The lean form of the layer's extractor, if it has one.
    pub(crate) fn of<K: Any>(key: &K) -> Option<Self> {
        let any: &dyn Any = key;
        if let Some(h) = any.downcast_ref::<HeaderKey>() {
            return Some(LeanKey::Header(h.clone()));
        }
        any.downcast_ref::<GlobalKey>().map(|_| LeanKey::Global)
    }
}

/// A limit the lean path can check directly.
#[derive(Clone)]
pub(crate) enum LeanLimit {
    Keyed(Arc<KeyedRateLimiter<String>>),
    Direct(Arc<RateLimiter>),
}

impl LeanLimit {
    /// The source as the layer stores it, and its lean form if it is a built-in in-memory
    /// limiter (owned or in an `Arc`).
    pub(crate) fn split<S: PolicySource>(source: S) -> (Arc<dyn PolicySource>, Option<Self>) {
        let arc = Arc::new(source);
        let any: Arc<dyn Any + Send + Sync> = arc.clone();
        let any = match any.downcast::<KeyedRateLimiter<String>>() {
            Ok(k) => return (arc, Some(LeanLimit::Keyed(k))),
            Err(any) => any,
        };
        let any = match any.downcast::<RateLimiter>() {
            Ok(d) => return (arc, Some(LeanLimit::Direct(d))),
            Err(any) => any,
        };
        let any = match any.downcast::<Arc<KeyedRateLimiter<String>>>() {
            Ok(k) => return (arc, Some(LeanLimit::Keyed(Arc::clone(&k)))),
            Err(any) => any,
        };
        let lean = any
            .downcast::<Arc<RateLimiter>>()
            .ok()
            .map(|d| LeanLimit::Direct(Arc::clone(&d)));
        (arc, lean)
    }
}

/// A layer's lean path: its key, its one limit and that limit's name.
#[derive(Clone)]
pub(crate) struct Lean {
    key: LeanKey,
    limit: LeanLimit,
    name: Arc<str>,
    /// The attempt headers, looked for (not parsed) on every request.
    attempts: Vec<AttemptHeader>,
    /// Bit `n` set if an attempt header's name has `n` bytes (`n` < 63; bit 63 for every
    /// longer name): most request headers are passed over on their length alone.
    attempt_lens: u64,
    /// The start of the `RateLimit` value: the name as a structured string, then `;r=`.
    limit_prefix: Vec<u8>,
    /// `RateLimit-Policy` for the quota the limit had when the layer was built; a quota
    /// changed since is written the general way (and cached there).
    policy: (Quota, Option<HeaderValue>),
}

/// What the lean path decided.
pub(crate) enum Decided<'a> {
    /// Not decided, nothing charged: take the general path.
    General,
    /// The limit's verdict for the key (borrowed from the request: visible ASCII).
    Verdict { key: &'a [u8], verdict: Verdict },
}

impl Lean {
    /// The lean path of a layer set up as this module describes, if it is one.
    pub(crate) fn new(
        key: Option<LeanKey>,
        limits: &[(Arc<str>, Option<LeanLimit>)],
        tier: &TierFrom,
        cost: Cost,
        queued: bool,
        attempts: &[AttemptHeader],
    ) -> Option<Self> {
        let [(name, Some(limit))] = limits else {
            return None;
        };
        let plain = matches!(tier, TierFrom::None) && cost == Cost::One && !queued;
        let key = key.filter(|_| plain)?;
        let quota = match limit {
            LeanLimit::Keyed(k) => k.quota(),
            LeanLimit::Direct(d) => d.quota(),
        };
        let figures = Figures {
            policy: Arc::clone(name),
            quota: Some(quota),
            remaining: 0,
            reset_secs: 0,
        };
        Some(Lean {
            key,
            limit: limit.clone(),
            name: Arc::clone(name),
            attempts: attempts.to_vec(),
            attempt_lens: (attempts.iter()).fold(0, |m, a| m | len_bit(a.name.as_str().len())),
            limit_prefix: fields::limit_prefix(name),
            policy: (quota, fields::policy_field(core::slice::from_ref(&figures))),
        })
    }

    /// Checks the request with head `headers`, if the lean path can.
    #[inline]
    pub(crate) fn decide<'a>(&self, headers: &'a HeaderMap) -> Decided<'a> {
        let key = match &self.key {
            LeanKey::Header(h) => match h.borrowed(headers) {
                Some(k) => k,
                None => return Decided::General,
            },
            LeanKey::Global => b"global",
        };
        // An attempt header is parsed (and may be malformed) the general way.
        if self.attempted(headers) {
            return Decided::General;
        }
        let verdict = match &self.limit {
            LeanLimit::Keyed(k) => k.check_utf8(key),
            LeanLimit::Direct(d) => RateLimiter::check(d),
        };
        Decided::Verdict { key, verdict }
    }

    /// `true` if the request carries one of the attempt headers.
    #[inline]
    fn attempted(&self, headers: &HeaderMap) -> bool {
        match &self.attempts[..] {
            [] => false,
            // A request usually carries a few headers and none of these: one pass over them
            // rather than a hashed lookup per name.
            names => headers.keys().any(|k| {
                self.attempt_lens & len_bit(k.as_str().len()) != 0
                    && names.iter().any(|a| a.name == *k)
            }),
        }
    }

    /// The limit's name (the policy in the fields).
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn quota(&self) -> Quota {
        match &self.limit {
            LeanLimit::Keyed(k) => k.quota(),
            LeanLimit::Direct(d) => d.quota(),
        }
    }

    /// The figures of a verdict of the limit, as the general path reports them.
    pub(crate) fn figures(&self, remaining: u64, reset_secs: u64) -> Figures {
        Figures {
            policy: Arc::clone(&self.name),
            quota: Some(self.quota()),
            remaining,
            reset_secs,
        }
    }

    /// The fields of an allowance `a` in `mode`, as the general path writes them.
    pub(crate) fn fields(&self, mode: HeaderMode, a: &Allowed, cache: &PolicyCache) -> Fields {
        let reset = secs_up(a.reset_after());
        match mode {
            HeaderMode::Off => Fields::default(),
            HeaderMode::Ietf => {
                let quota = self.quota();
                let policy = if quota == self.policy.0 {
                    self.policy.1.clone()
                } else {
                    let f = self.figures(a.remaining(), reset);
                    cache.field(core::slice::from_ref(&f))
                };
                let limit = fields::limit_value(&self.limit_prefix, a.remaining(), reset);
                Fields::ietf(policy, limit)
            }
            mode => {
                let f = self.figures(a.remaining(), reset);
                Fields::allowed(mode, core::slice::from_ref(&f), &f, Some(cache))
            }
        }
    }
}

/// The bit of a header name's length in [`Lean::attempt_lens`].
#[inline]
fn len_bit(len: usize) -> u64 {
    1 << len.min(63)
}
