//! [`SharedRateLimiter`]: the check path — the deny cache, the breaker, one script call under
//! the deadline, and the failure policy.

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use parking_lot::RwLock;
use redis::aio::ConnectionManager;

use super::breaker::{Breaker, Permit};
use super::builder::{local_quota, FailurePolicy, SharedRateLimiterBuilder};
use super::cache::DenyCache;
use super::error::BackendError;
use super::key::{self, MAX_KEY_BYTES};
use super::limit::{Limit, MAX_NOW_US};
use super::script::{Call, GcraScript, Reply};
use super::stats::{bump, Counters, SharedStats};
use crate::engine::check::Check;
use crate::engine::clock::Clock;
use crate::engine::error::InsufficientCapacity;
use crate::engine::quota::Quota;
use crate::engine::verdict::{Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict};
use crate::limiter::keyed::KeyedRateLimiter;
use crate::safety::fault::FaultDetector;

/// A rate limiter whose state lives in Redis, so that every instance of a service enforces
/// one limit together: the keyed limiter's semantics (GCRA, exact retry-after, the fill level
/// kept across quota changes), one Lua script call per check.
///
/// Async, on tokio; build it inside a runtime with the time driver on. The in-memory
/// limiters stay synchronous and are not affected by this type.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::{SharedRateLimiter, Verdict};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lim = SharedRateLimiter::builder("100/s".parse()?, "redis://127.0.0.1:6379/")
///     .prefix("api")
///     .policy("per-customer")
///     .deadline(Duration::from_millis(20))
///     .build()?;
/// match lim.check_key("customer-42").await? {
///     Verdict::Allow(a) => println!("allowed, {} left", a.remaining()),
///     Verdict::Deny(d) => println!("429, retry after {:?}", d.retry_after()),
///     Verdict::PassThrough(p) => println!("redis unavailable: {:?}", p.reason()),
///     _ => {}
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Semantics
///
/// Each check is one `EVALSHA` of a GCRA script (reloaded transparently after `NOSCRIPT`),
/// with the engine's rules counted in microseconds (see [`MAX_TAU_MICROS`](crate::MAX_TAU_MICROS)
/// for the units and the exactness argument): allowed iff `max(tat, now) + w − now ≤ τ`,
/// `retry_after` exact to the microsecond, `InsufficientCapacity` decided here before any
/// call. The clock is the server's `TIME` unless [`clock`](SharedRateLimiterBuilder::clock)
/// sets a client clock. A key's value is its TAT and the τ it was written under; the first
/// check of a key after a quota change rescales it to keep its fill level,
/// `tat' = now + ⌈min(tat − now, τ_old)·τ_new/τ_old⌉`, and writes that back even if it denies
/// (once per key per change). Otherwise only an allow writes, with a `PX` TTL of `tat − now`.
///
/// Keys are `prefix:policy:{customer}`: every limit of one customer hashes to one cluster
/// slot, so [`limit`](SharedRateLimiterBuilder::limit)s added to the main one are checked in
/// the same call, all or nothing.
///
/// # Caveats
///
/// * **Eviction.** An evicted key reads as a new one: a full burst. Run Redis with
///   `maxmemory-policy volatile-ttl` (keys closest to expiry — the fullest cells — go first,
///   and an evicted cell would have been full within its TTL anyway, so the grant is at
///   most what that cell would have regained by then) or `noeviction` (writes fail, the
///   failure policy answers). Under `allkeys-*` policies an evicted customer gets up to one
///   full burst per eviction.
/// * **Global limits** (one limit for all customers) cannot share a slot with
///   `{customer}` keys. Keep them in an in-memory [`RateLimiter`](crate::RateLimiter) per
///   instance with its share of the limit; this type checks per-customer limits only.
/// * **Local fallback with several limits** checks the local limits one after another: a
///   check one of them denies may have been charged to those before it.
/// * A [`Check`]'s attempt and class are not used: retry budgets and priority classes are
///   in-memory features.
#[derive(Clone)]
pub struct SharedRateLimiter {
    pub(crate) inner: Arc<Inner>,
}

/// A limit's fixed parts: its name, the head of its keys, its local fallback.
pub(crate) struct Policy {
    pub(crate) name: String,
    pub(crate) head: Vec<u8>,
    pub(crate) local: Option<KeyedRateLimiter<Vec<u8>>>,
}

pub(crate) struct Inner {
    pub(crate) con: ConnectionManager,
    pub(crate) script: GcraScript,
    pub(crate) prefix: String,
    pub(crate) policies: Vec<Policy>,
    /// Each limit's quota and µs parameters, in the order of `policies`.
    pub(crate) limits: RwLock<Vec<(Quota, Limit)>>,
    /// The client clock, if decisions use it instead of the server's `TIME`.
    pub(crate) clock: Option<Clock>,
    /// The clock of the deny cache and of the local fallback.
    pub(crate) local_clock: Clock,
    pub(crate) deadline: Duration,
    /// The least PX TTL (ms): 0 on server time, a floor with a client clock.
    pub(crate) min_ttl_ms: u64,
    pub(crate) retry_closed: Duration,
    pub(crate) breaker: Breaker,
    pub(crate) failure: FailurePolicy,
    pub(crate) share: f64,
    pub(crate) cache: DenyCache,
    pub(crate) counters: Counters,
    /// The fault detector, if one is attached, with this instance's ceiling cells.
    pub(crate) detector: Option<Watch>,
}

/// A fault detector watching a shared limiter, and the local cells that bound what it lets
/// through beyond the quota (see [`SharedRateLimiterBuilder::detector`]).
pub(crate) struct Watch {
    pub(crate) detector: FaultDetector,
    /// The main limit's quota times `factor − 1`, on this instance's clock: a shadow-denied
    /// check of `n` units costs `n` here.
    pub(crate) ceiling: KeyedRateLimiter<Vec<u8>>,
}

impl SharedRateLimiter {
    /// The longest customer key accepted, in bytes; longer keys are an error, never
    /// truncated (two long keys could then share a limit).
    pub const MAX_KEY_BYTES: usize = MAX_KEY_BYTES;

    /// A builder for a limiter of `quota` on the Redis at `url` (`redis://host:port/db`).
    ///
    /// ```
    /// use tollgate::{FailurePolicy, SharedRateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .policy("search")
    ///     .limit("search-daily", "10000/d".parse()?)
    ///     .failure_policy(FailurePolicy::Local)
    ///     .local_share(0.25)
    ///     .build()?; // connects lazily
    /// assert_eq!(lim.quota(), "10/s".parse()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(quota: Quota, url: &str) -> SharedRateLimiterBuilder {
        SharedRateLimiterBuilder::new(quota, url)
    }

    /// Checks one unit for `key` against every limit, in one round trip (or none: a key the
    /// deny cache knows is denied locally).
    ///
    /// # Errors
    ///
    /// [`BackendError::KeyTooLong`] for a key longer than [`MAX_KEY_BYTES`](Self::MAX_KEY_BYTES)
    /// (decided before any call). A backend fault is not an error: Redis slow or down, a
    /// server or script error, or a reply the script never gives is answered by the
    /// [`FailurePolicy`], so that `Closed` denies and never lets a check through unjudged.
    ///
    /// ```no_run
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("1/s".parse()?, "redis://127.0.0.1:6379/").build()?;
    /// assert!(lim.check_key("alice").await?.is_permitted());
    /// let d = lim.check_key("alice").await?.denied().expect("the burst is 1");
    /// assert!(d.retry_after() <= std::time::Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_key<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
    ) -> Result<Verdict, BackendError> {
        let v = self.decide(key.as_ref(), 1, true).await?;
        Ok(self.watch(key.as_ref(), 1, v, true))
    }

    /// Checks `check.units()` units for `key` against every limit. A cost of 0 reports what
    /// remains and charges nothing.
    ///
    /// # Errors
    ///
    /// As [`check_key`](Self::check_key), and [`BackendError::InsufficientCapacity`] for a
    /// cost above a limit's burst (decided here, with no round trip).
    ///
    /// ```no_run
    /// # use tollgate::{BackendError, Check, SharedRateLimiter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/").build()?;
    /// assert!(lim.check_key_with("bob", Check::cost(4)).await?.is_permitted());
    /// let err = lim.check_key_with("bob", Check::cost(11)).await.unwrap_err();
    /// assert!(matches!(err, BackendError::InsufficientCapacity(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_key_with<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
        check: Check,
    ) -> Result<Verdict, BackendError> {
        let n = check.units();
        let v = self.decide(key.as_ref(), n, true).await?;
        Ok(if n == 0 {
            v
        } else {
            self.watch(key.as_ref(), n, v, true)
        })
    }

    /// What [`check_key`](Self::check_key) would say now, charging nothing. (The one write a
    /// peek may make is a key's rescale after a quota change, which any first touch makes.)
    ///
    /// # Errors
    ///
    /// As [`check_key`](Self::check_key).
    ///
    /// ```no_run
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("1/s".parse()?, "redis://127.0.0.1:6379/").build()?;
    /// assert!(lim.peek_key("carol").await?.is_permitted());
    /// assert!(lim.peek_key("carol").await?.is_permitted(), "a peek charges nothing");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn peek_key<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
    ) -> Result<Verdict, BackendError> {
        let v = self.decide(key.as_ref(), 1, false).await?;
        Ok(self.watch(key.as_ref(), 1, v, false))
    }

    /// Changes the main limit's quota, live: no key is reset (keys carry no revision), and
    /// each key keeps its fill level from its first check under the new quota.
    ///
    /// ```
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/").build()?;
    /// lim.set_quota("20/s".parse()?);
    /// assert_eq!(lim.quota(), "20/s".parse()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.set(0, quota);
    }

    /// Changes the quota of the limit named `policy`.
    ///
    /// # Errors
    ///
    /// [`BackendError::UnknownPolicy`] if no limit has that name.
    ///
    /// ```
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .limit("daily", "1000/d".parse()?)
    ///     .build()?;
    /// lim.set_policy_quota("daily", "2000/d".parse()?)?;
    /// assert!(lim.set_policy_quota("weekly", "1/d".parse()?).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_policy_quota(&self, policy: &str, quota: Quota) -> Result<(), BackendError> {
        let i = self
            .inner
            .policies
            .iter()
            .position(|p| p.name == policy)
            .ok_or_else(|| BackendError::UnknownPolicy(policy.to_owned()))?;
        self.set(i, quota);
        Ok(())
    }

    fn set(&self, i: usize, quota: Quota) {
        let inner = &self.inner;
        inner.limits.write()[i] = (quota, Limit::of(&quota));
        if let Some(local) = &inner.policies[i].local {
            local.set_quota(local_quota(&quota, inner.share));
        }
        inner.cache.clear();
    }

    /// The main limit's quota.
    pub fn quota(&self) -> Quota {
        self.inner.limits.read()[0].0
    }

    /// The largest cost one check may ask: the smallest burst of the limits, counted as the
    /// script counts (a burst whose τ exceeds 2^50 µs is lowered).
    pub fn burst(&self) -> u64 {
        let limits = self.inner.limits.read();
        limits.iter().map(|(_, l)| l.burst()).min().unwrap_or(0)
    }

    /// The Redis keys a check of `customer` touches, one per limit, in order: all with one
    /// hash tag (the escaped customer), so one cluster slot.
    ///
    /// ```
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .prefix("gw").policy("api").limit("daily", "1000/d".parse()?)
    ///     .build()?;
    /// assert_eq!(lim.keys("c}7"), [b"gw:api:{c%7D7}".to_vec(), b"gw:daily:{c%7D7}".to_vec()]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn keys<Q: AsRef<[u8]> + ?Sized>(&self, customer: &Q) -> Vec<Vec<u8>> {
        let c = customer.as_ref();
        self.inner
            .policies
            .iter()
            .map(|p| key::key(&p.head, c))
            .collect()
    }

    /// What this limiter has done so far.
    ///
    /// ```
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/").build()?;
    /// assert_eq!(lim.stats().total(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> SharedStats {
        self.inner.counters.snapshot(self.inner.breaker.opened())
    }

    /// The fault detector attached with [`SharedRateLimiterBuilder::detector`], if any (to
    /// read its state, or to force or end a pass-through).
    pub fn detector(&self) -> Option<&FaultDetector> {
        self.inner.detector.as_ref().map(|w| &w.detector)
    }

    /// `true` while the circuit breaker is open or half-open (checks answer by the failure
    /// policy, but for one probe at a time).
    pub fn breaker_open(&self) -> bool {
        self.inner.breaker.is_open()
    }

    /// The local fallback limiter of the limit named `policy`, if the failure policy is
    /// [`FailurePolicy::Local`].
    pub fn local_fallback(&self, policy: &str) -> Option<&KeyedRateLimiter<Vec<u8>>> {
        let p = self.inner.policies.iter().find(|p| p.name == policy)?;
        p.local.as_ref()
    }

    /// The SHA1 of the GCRA script, as `EVALSHA` names it (for `redis-benchmark` and
    /// operators).
    pub fn script_sha(&self) -> &str {
        self.inner.script.hash()
    }

    /// The GCRA script's source.
    pub fn script_source() -> &'static str {
        super::script::SOURCE
    }

    /// With a detector attached: records what Redis decided for `key` (a charged check only)
    /// and, while the detector passes traffic through, turns the verdict into a pass-through
    /// bounded by the ceiling. Fallback verdicts stand as they are.
    fn watch(&self, key: &[u8], n: u64, v: Verdict, charge: bool) -> Verdict {
        let Some(w) = &self.inner.detector else {
            return v;
        };
        let decided = match v {
            Verdict::Allow(_) => true,
            Verdict::Deny(d) => d.reason() == DenyReason::Quota,
            _ => false,
        };
        if !decided {
            return v;
        }
        if charge {
            w.detector.record_key(key, &v);
        }
        let shared = w.detector.shared();
        let Some(reason) = shared.pass_reason() else {
            return v;
        };
        match v {
            Verdict::Allow(_) => Verdict::PassThrough(PassThrough::new(reason, Shadow::Allow)),
            Verdict::Deny(_) if !charge => {
                Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny))
            }
            Verdict::Deny(d) => {
                let ceiling = |d: Denied| {
                    Verdict::Deny(Denied::new(d.retry_after_nanos(), DenyReason::Ceiling))
                };
                let Some(factor) = shared.ceiling() else {
                    return Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny));
                };
                if factor <= 1 {
                    return ceiling(d);
                }
                match w.ceiling.check_key_with(key, Check::cost(n)) {
                    Ok(Verdict::Allow(_)) => {
                        Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny))
                    }
                    _ => ceiling(d),
                }
            }
            other => other,
        }
    }

    pub(crate) async fn decide(
        &self,
        key: &[u8],
        n: u64,
        charge: bool,
    ) -> Result<Verdict, BackendError> {
        let inner = &*self.inner;
        if key.len() > MAX_KEY_BYTES {
            return Err(BackendError::KeyTooLong {
                len: key.len(),
                max: MAX_KEY_BYTES,
            });
        }
        let limits: Vec<Limit> = inner.limits.read().iter().map(|(_, l)| *l).collect();
        let mut args = Vec::with_capacity(limits.len());
        for l in &limits {
            let w = l.weight(n).ok_or(InsufficientCapacity::new(n, l.burst()))?;
            args.push((w, l.tau()));
        }
        let local_now = inner.local_clock.now_nanos() / 1000;
        if n > 0 {
            let ws: Vec<u64> = args.iter().map(|a| a.0).collect();
            if let Some(retry) = inner.cache.lookup(key, &ws, local_now) {
                bump(&inner.counters.denied_cached, 1);
                return Ok(deny_us(retry, DenyReason::Quota));
            }
        }
        let now = match &inner.clock {
            Some(c) => {
                let us = c.now_nanos() / 1000;
                if us > MAX_NOW_US {
                    bump(&inner.counters.denied_clock_overflow, 1);
                    return Ok(overflow());
                }
                Some(us)
            }
            None => None,
        };
        let real = Clock::os();
        let permit = inner.breaker.permit(real.now_nanos());
        if permit == Permit::Reject {
            bump(&inner.counters.breaker_rejected, 1);
            return Ok(self.fallback(key, n, charge));
        }
        let keys = self.keys(key);
        let call = Call {
            keys: &keys,
            now,
            charge,
            min_ttl_ms: inner.min_ttl_ms,
            limits: &args,
        };
        let mut con = inner.con.clone();
        let mut reloaded = false;
        bump(&inner.counters.round_trips, 1);
        // A call that finds the connection lost starts a reconnect and fails at once; it tries
        // once more on the new connection, within the same deadline, so the first probe after
        // a restart succeeds rather than the one after it.
        let attempt = async {
            match inner.script.run(&mut con, &call, &mut reloaded).await {
                Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                    inner.script.run(&mut con, &call, &mut reloaded).await
                }
                other => other,
            }
        };
        let outcome = tokio::time::timeout(inner.deadline, attempt).await;
        if reloaded {
            bump(&inner.counters.script_reloads, 1);
        }
        let reply = match outcome {
            Ok(Ok(Ok(reply))) => reply,
            // A reply the script never gives (a proxy in between, another script under the
            // same SHA) decides nothing: a backend fault, answered like Redis being down.
            Ok(Ok(Err(_unexpected))) => {
                inner.breaker.failure(real.now_nanos(), permit);
                bump(&inner.counters.errors, 1);
                return Ok(self.fallback(key, n, charge));
            }
            Ok(Err(_)) => {
                inner.breaker.failure(real.now_nanos(), permit);
                bump(&inner.counters.errors, 1);
                return Ok(self.fallback(key, n, charge));
            }
            Err(_) => {
                inner.breaker.failure(real.now_nanos(), permit);
                bump(&inner.counters.timeouts, 1);
                return Ok(self.fallback(key, n, charge));
            }
        };
        inner.breaker.success(real.now_nanos(), permit);
        Ok(self.verdict(key, &limits, &args, reply, local_now))
    }

    /// The verdict for the script's reply, remembering denials in the deny cache.
    fn verdict(
        &self,
        key: &[u8],
        limits: &[Limit],
        args: &[(u64, u64)],
        reply: Reply,
        local_now: u64,
    ) -> Verdict {
        let inner = &*self.inner;
        let (conforms, aheads, corrupt) = match reply {
            Reply::ClockOutOfRange => {
                bump(&inner.counters.denied_clock_overflow, 1);
                return overflow();
            }
            Reply::Decided {
                conforms,
                aheads,
                corrupt,
                ..
            } => (conforms, aheads, corrupt),
        };
        bump(&inner.counters.corrupt_values, corrupt);
        if conforms {
            bump(&inner.counters.allowed, 1);
            // The tightest limit speaks: the fewest units left.
            let best = limits
                .iter()
                .zip(&aheads)
                .map(|(l, &a)| l.allowed(a))
                .min_by_key(|a| (a.remaining(), core::cmp::Reverse(a.reset_after())));
            return best.map_or(deny_us(0, DenyReason::Quota), Verdict::Allow);
        }
        bump(&inner.counters.denied, 1);
        let mut retry = 0;
        for (i, (l, (&a, &(w, tau)))) in limits.iter().zip(aheads.iter().zip(args)).enumerate() {
            if a > tau {
                retry = retry.max(a - tau);
                // Denied, so the TAT is ahead of now by a − w.
                let unit = l.weight(1).unwrap_or(tau);
                inner
                    .cache
                    .remember(i, key, local_now + (a - w), tau, unit, local_now);
            }
        }
        deny_us(retry, DenyReason::Quota)
    }

    /// The failure policy's verdict, counted.
    fn fallback(&self, key: &[u8], n: u64, charge: bool) -> Verdict {
        let inner = &*self.inner;
        let c = &inner.counters;
        match inner.failure {
            FailurePolicy::Open => {
                bump(&c.fallback_open, 1);
                Verdict::PassThrough(PassThrough::new(
                    PassReason::BackendUnavailable,
                    Shadow::Unknown,
                ))
            }
            FailurePolicy::Closed => {
                bump(&c.fallback_closed, 1);
                let retry = super::super::engine::clock::saturating_nanos(inner.retry_closed);
                Verdict::Deny(Denied::new(retry, DenyReason::BackendUnavailable))
            }
            FailurePolicy::Local => {
                let mut retry = None;
                for p in &inner.policies {
                    let Some(local) = &p.local else { continue };
                    let v = if charge {
                        local.check_key_with(key, Check::cost(n))
                    } else {
                        Ok(local.peek_key(key))
                    };
                    match v {
                        Ok(Verdict::Deny(d)) => {
                            retry = retry.max(Some(d.retry_after_nanos()));
                        }
                        // The cost exceeds this node's share of the burst: it cannot pass
                        // here; come back when Redis may be back.
                        Err(_) => {
                            let r =
                                super::super::engine::clock::saturating_nanos(inner.retry_closed);
                            retry = retry.max(Some(r));
                        }
                        Ok(_) => {}
                    }
                    if retry.is_some() {
                        break;
                    }
                }
                match retry {
                    Some(r) => {
                        bump(&c.fallback_local_denied, 1);
                        Verdict::Deny(Denied::new(r, DenyReason::LocalShare))
                    }
                    None => {
                        bump(&c.fallback_local_allowed, 1);
                        Verdict::PassThrough(PassThrough::new(
                            PassReason::BackendUnavailable,
                            Shadow::Allow,
                        ))
                    }
                }
            }
        }
    }
}

fn deny_us(retry_us: u64, reason: DenyReason) -> Verdict {
    Verdict::Deny(Denied::new(retry_us.saturating_mul(1000), reason))
}

fn overflow() -> Verdict {
    Verdict::Deny(Denied::new(u64::MAX, DenyReason::ClockOverflow))
}

impl fmt::Debug for SharedRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        let limits = inner.limits.read();
        let named: Vec<(&str, String)> = inner
            .policies
            .iter()
            .zip(limits.iter())
            .map(|(p, (q, _))| (p.name.as_str(), q.to_string()))
            .collect();
        f.debug_struct("SharedRateLimiter")
            .field("prefix", &inner.prefix)
            .field("limits", &named)
            .field("client_clock", &inner.clock.is_some())
            .field("deadline", &inner.deadline)
            .field("failure", &inner.failure)
            .field("breaker_open", &inner.breaker.is_open())
            .field("detector", &inner.detector.is_some())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
