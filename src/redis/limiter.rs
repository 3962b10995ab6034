//! [`SharedRateLimiter`]: the type, its public checks and settings, and the fault detector's
//! watch over its verdicts; the check path itself is in `decide.rs`.

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use super::breaker::Breakers;
use super::builder::{local_quota, FailurePolicy, SharedRateLimiterBuilder};
use super::cache::DenyCache;
use super::conn::Backend;
use super::error::BackendError;
use super::key::{self, MAX_KEY_BYTES};
use super::lease::Leases;
use super::limit::Limit;
use super::script::GcraScript;
use super::stats::{Counters, SharedStats};
use crate::engine::check::Check;
use crate::engine::clock::Clock;
use crate::engine::quota::Quota;
use crate::engine::verdict::{Denied, DenyReason, PassThrough, Shadow, Verdict};
use crate::limiter::keyed::KeyedRateLimiter;
use crate::safety::fault::FaultDetector;
use crate::sync::RwLock;

/// A rate limiter whose state lives in Redis, so that every instance of a service enforces
/// one limit together: the keyed limiter's semantics (GCRA, exact retry-after, the fill level
/// kept across quota changes), one Lua script call per check.
///
/// Async, on tokio; build it inside a runtime with the time driver on. The in-memory
/// limiters stay synchronous and are not affected by this type.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::Verdict;
/// use tollgate::redis::SharedRateLimiter;
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
/// with the engine's rules counted in microseconds (see [`MAX_TAU_MICROS`](crate::redis::SharedRateLimiter::MAX_TAU_MICROS)
/// for the units and the exactness argument): allowed iff `max(tat, now) + w − now ≤ τ`,
/// `retry_after` exact to the microsecond, `InsufficientCapacity` decided here before any
/// call. The clock is the server's `TIME` unless [`clock`](SharedRateLimiterBuilder::clock)
/// sets a client clock. A key's value is its TAT and the τ it was written under; the first
/// check of a key after a quota change rescales it to keep its fill level,
/// `tat' = now + ⌈min(tat − now, τ_old)·τ_new/τ_old⌉`, and writes that back even if it denies
/// (once per key per change). Otherwise only an allow writes, with a `PX` TTL of `tat − now`.
///
/// With [`lease`](SharedRateLimiterBuilder::lease), a hot customer's checks are mostly
/// answered from cells reserved in one call (see there for the rules and the bounds).
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
    /// One server, or a cluster once one answered (see `conn.rs`).
    pub(crate) backend: Backend,
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
    /// The debt cap, µs (at most 2^50): see `settle.rs`.
    pub(crate) debt_us: u64,
    pub(crate) retry_closed: Duration,
    /// One per slot range in cluster mode; one server uses the first.
    pub(crate) breakers: Breakers,
    pub(crate) failure: FailurePolicy,
    pub(crate) share: f64,
    pub(crate) cache: DenyCache,
    pub(crate) counters: Counters,
    /// The fault detector, if one is attached, with this instance's ceiling cells.
    pub(crate) detector: Option<Watch>,
    /// Leases for hot customers, if [`lease`](SharedRateLimiterBuilder::lease) turned them on.
    pub(crate) leases: Option<Leases>,
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
    /// use tollgate::redis::{FailurePolicy, SharedRateLimiter};
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
    /// # use tollgate::redis::SharedRateLimiter;
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
    /// # use tollgate::Check;
    /// # use tollgate::redis::{BackendError, SharedRateLimiter};
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
    /// # use tollgate::redis::SharedRateLimiter;
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
    /// each key keeps its fill level from its first check under the new quota. With
    /// [`lease`](SharedRateLimiterBuilder::lease), every lease of this instance ends here
    /// (other instances keep theirs until their own change: see there).
    ///
    /// ```
    /// # use tollgate::redis::SharedRateLimiter;
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
    /// # use tollgate::redis::SharedRateLimiter;
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
        if let Some(leases) = &inner.leases {
            leases.end_all();
        }
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
    /// # use tollgate::redis::SharedRateLimiter;
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
    /// # use tollgate::redis::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/").build()?;
    /// assert_eq!(lim.stats().total(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stats(&self) -> SharedStats {
        self.inner.counters.snapshot(self.inner.breakers.opened())
    }

    /// The fault detector attached with [`SharedRateLimiterBuilder::detector`], if any (to
    /// read its state, or to force or end a pass-through).
    pub fn detector(&self) -> Option<&FaultDetector> {
        self.inner.detector.as_ref().map(|w| &w.detector)
    }

    /// `true` while the circuit breaker is open or half-open (checks answer by the failure
    /// policy, but for one probe at a time). In cluster mode, while the breaker of any slot
    /// range is: each range of 256 slots has its own, so one sick shard sends only its own
    /// customers to the failure policy.
    pub fn breaker_open(&self) -> bool {
        self.inner.breakers.is_open()
    }

    /// `true` once this limiter talks to a Redis Cluster: from its first call with
    /// [`seed_urls`](SharedRateLimiterBuilder::seed_urls), else from the first cluster reply
    /// (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) its one URL gave. The mode is discovered,
    /// never configured, and never switches back.
    ///
    /// ```
    /// # use tollgate::redis::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:7000/")
    ///     .seed_urls(&["redis://127.0.0.1:7001/", "redis://127.0.0.1:7002/"])
    ///     .build()?; // connects lazily
    /// assert!(lim.cluster_mode(), "seeds: a cluster from the start");
    /// # Ok(())
    /// # }
    /// ```
    pub fn cluster_mode(&self) -> bool {
        self.inner.backend.is_cluster()
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
            .field("cluster", &inner.backend.is_cluster())
            .field("cluster_renewals", &inner.backend.renewals())
            .field("breakers_open", &inner.breakers.open_count())
            .field("detector", &inner.detector.is_some())
            .field("leases", &inner.leases.as_ref().map(|l| l.max_cells))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl SharedRateLimiter {
    /// The default per-call deadline: 20 ms.
    pub const DEFAULT_DEADLINE: Duration = crate::redis::builder::DEFAULT_DEADLINE;
    /// The latest clock reading the script accepts: 2^52 µs (Unix time: the year 2112). A reading
    /// past it is denied with [`DenyReason::ClockOverflow`](crate::DenyReason::ClockOverflow).
    pub const MAX_NOW_MICROS: u64 = crate::redis::limit::MAX_NOW_MICROS;
    /// The largest tolerance a shared limit may have: 2^50 µs (about 35.7 years).
    pub const MAX_TAU_MICROS: u64 = crate::redis::limit::MAX_TAU_MICROS;
}
