//! [`SharedRateLimiterBuilder`] and [`FailurePolicy`].

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use super::breaker::{BreakerConfig, Breakers};
use super::cache::DenyCache;
use super::conn::{self, Backend};
use super::error::BackendError;
use super::key;
use super::limit::Limit;
use super::limiter::{Inner, Policy, SharedRateLimiter, Watch};
use super::script::GcraScript;
use super::stats::Counters;
use super::tls::TlsConfig;
use crate::engine::clock::Clock;
use crate::engine::gcra::Per;
use crate::engine::quota::Quota;
use crate::limiter::keyed::KeyedRateLimiter;
use crate::safety::fault::FaultDetector;
use crate::sync::RwLock;

/// What a check answers when Redis cannot decide it: the server is down (connection refused
/// or lost), slower than the deadline, or the breaker is open; or it answered an error (a
/// server or script error, a write refused under `maxmemory`) or a reply the script never
/// gives. Every such verdict says so, and is counted in [`SharedStats`](crate::redis::SharedStats).
///
/// | policy | allowed | refused |
/// |---|---|---|
/// | `Local` (default) | [`PassThrough`](crate::Verdict::PassThrough) with [`PassReason::BackendUnavailable`](crate::PassReason::BackendUnavailable) and shadow [`Shadow::Allow`](crate::Shadow::Allow) (the local share's verdict) | [`Deny`](crate::Verdict::Deny) with [`DenyReason::LocalShare`](crate::DenyReason::LocalShare) and the local retry-after |
/// | `Open` | [`PassThrough`](crate::Verdict::PassThrough) with [`PassReason::BackendUnavailable`](crate::PassReason::BackendUnavailable) and shadow [`Shadow::Unknown`](crate::Shadow::Unknown) | never |
/// | `Closed` | never | [`Deny`](crate::Verdict::Deny) with [`DenyReason::BackendUnavailable`](crate::DenyReason::BackendUnavailable), retry-after the breaker's first cool-down |
///
/// ```
/// use tollgate::redis::FailurePolicy;
/// assert_eq!(FailurePolicy::default(), FailurePolicy::Local);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Enforce this node's share of each limit locally (see
    /// [`local_share`](SharedRateLimiterBuilder::local_share)).
    #[default]
    Local,
    /// Let everything through, visibly.
    Open,
    /// Refuse everything.
    Closed,
}

/// Builds a [`SharedRateLimiter`]; see [`SharedRateLimiter::builder`].
#[must_use = "call .build() to get the limiter"]
pub struct SharedRateLimiterBuilder {
    url: String,
    seeds: Vec<String>,
    prefix: String,
    pub(super) limits: Vec<(String, Quota)>,
    clock: Option<Clock>,
    deadline: Duration,
    min_ttl: Option<Duration>,
    breaker: BreakerConfig,
    failure: FailurePolicy,
    share: f64,
    local_max_keys: usize,
    deny_cache: usize,
    detector: Option<FaultDetector>,
    tls: TlsConfig,
    pub(super) lease: Option<u32>,
    pub(super) lease_time: Duration,
    /// The debt cap (its builder method is in `settle.rs`).
    pub(super) max_debt: Duration,
}

impl fmt::Debug for SharedRateLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may carry a password: their count only.
        f.debug_struct("SharedRateLimiterBuilder")
            .field("seeds", &self.seeds.len())
            .field("prefix", &self.prefix)
            .field("limits", &self.limits)
            .field("client_clock", &self.clock.is_some())
            .field("deadline", &self.deadline)
            .field("failure", &self.failure)
            .field("share", &self.share)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_millis(20);

impl SharedRateLimiterBuilder {
    pub(crate) fn new(quota: Quota, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            seeds: Vec::new(),
            prefix: "tollgate".to_owned(),
            limits: vec![("default".to_owned(), quota)],
            clock: None,
            deadline: DEFAULT_DEADLINE,
            min_ttl: None,
            breaker: BreakerConfig::default(),
            failure: FailurePolicy::default(),
            share: 1.0,
            local_max_keys: 1 << 16,
            deny_cache: 4096,
            detector: None,
            tls: TlsConfig::default(),
            lease: None,
            lease_time: Duration::from_secs(1),
            max_debt: Duration::ZERO,
        }
    }

    /// More nodes of the same Redis Cluster to start from, beside the builder's URL: with
    /// seeds the limiter is in cluster mode from its first call, and finds the cluster as
    /// long as one of the URLs answers. Without seeds, one URL suffices for a cluster too:
    /// any node, master or replica (the first cluster reply switches the limiter to cluster
    /// mode, see [`SharedRateLimiter::cluster_mode`]). All URLs share the password, user and
    /// TLS mode, and select database 0.
    ///
    /// ```
    /// use tollgate::redis::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("100/s".parse()?, "redis://10.0.0.5:6379/")
    ///     .seed_urls(&["redis://10.0.0.6:6379/", "redis://10.0.0.7:6379/"])
    ///     .build()?; // connects lazily
    /// assert!(lim.cluster_mode());
    /// # Ok(())
    /// # }
    /// ```
    pub fn seed_urls(mut self, urls: &[&str]) -> Self {
        self.seeds.extend(urls.iter().map(|u| (*u).to_owned()));
        self
    }

    /// The first part of every key (default `"tollgate"`): 1 to 64 bytes without `{` or `}`.
    /// Instances that share limits use the same prefix.
    pub fn prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// The policy name of the main limit (default `"default"`), the second part of its keys:
    /// 1 to 64 bytes without `{`, `}` or `:` (a `:` would let another prefix share its keys).
    /// It is not versioned: a reload that changes the quota keeps every customer's state.
    pub fn policy(mut self, name: &str) -> Self {
        name.clone_into(&mut self.limits[0].0);
        self
    }

    /// Another limit that every check of a customer must also pass, in the same script call
    /// (all or nothing): `"100/s"` and `"10000/d"` for the same customer, say. Its policy
    /// name follows the rules of [`policy`](Self::policy).
    pub fn limit(mut self, policy: &str, quota: Quota) -> Self {
        self.limits.push((policy.to_owned(), quota));
        self
    }

    /// Decide on this clock instead of the server's `TIME`: the client passes its reading (µs)
    /// to the script. Every instance sharing a prefix must then read the same time base — a
    /// [`ManualClock`](crate::ManualClock) shared by a test's limiters, or a
    /// [`Clock::from_fn`] reading wall time since the Unix epoch. Without it the server's
    /// clock decides, which needs no agreement between instances.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// The least TTL a key is written with (default: none on the server's clock, 60 s with a
    /// client clock). A key expires when its cell is full again, `tat − now` after the write
    /// — in the *server's* time. A client clock need not run at the server's pace (a
    /// [`ManualClock`](crate::ManualClock) does not run at all), so with one a key is kept at
    /// least this long, lest it expire while the client's time says it is still in use.
    pub fn min_ttl(mut self, ttl: Duration) -> Self {
        self.min_ttl = Some(ttl);
        self
    }

    /// The longest a check waits for Redis (default 20 ms), a `NOSCRIPT` reload included;
    /// past it the check answers by the [`FailurePolicy`].
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// When the circuit breaker opens and for how long (see [`BreakerConfig`]).
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// What to answer when Redis cannot (default [`FailurePolicy::Local`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }

    /// This node's share of each limit under [`FailurePolicy::Local`], in `(0, 1]` (default
    /// 1: each node alone enforces the whole limit, so N nodes together admit up to N times
    /// it while Redis is away). With N gateways behind a balancer, `1.0 / N` keeps the sum.
    pub fn local_share(mut self, share: f64) -> Self {
        self.share = share;
        self
    }

    /// How many keys the local fallback tracks per limit (default 2^16).
    pub fn local_max_keys(mut self, max_keys: usize) -> Self {
        self.local_max_keys = max_keys;
        self
    }

    /// Attaches a [`FaultDetector`]: every verdict Redis decides for the main
    /// limit is recorded with its key ([`FaultDetector::record_key`]), so a deny storm that the
    /// limiter itself causes trips the detector like an in-memory limiter's would. While the
    /// detector passes traffic through, a quota denial becomes a
    /// [`PassThrough`](crate::Verdict::PassThrough) with the detector's reason and shadow
    /// [`Shadow::Deny`](crate::Shadow::Deny), and an allow a pass-through with shadow
    /// [`Shadow::Allow`](crate::Shadow::Allow) — bounded by the detector's ceiling, so a
    /// pass-through never becomes a bypass: a key admits at most `factor` times its quota in all
    /// (the extra `factor − 1` times counted on a local cell of this instance, so N instances
    /// admit at most `1 + N·(factor − 1)` times it; [`DenyReason::Ceiling`](crate::DenyReason::Ceiling)
    /// beyond). Fallback verdicts (Redis unreachable) are neither recorded nor changed: they say
    /// so already. A peek during a pass-through reports it without consulting the ceiling.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::PassReason;
    /// use tollgate::redis::SharedRateLimiter;
    /// use tollgate::safety::FaultDetector;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let detector = FaultDetector::new();
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .detector(detector.clone())
    ///     .build()?;
    /// assert!(lim.detector().is_some());
    /// // An operator's override: pass traffic through for 30 s, bounded by the ceiling.
    /// detector.force_pass_through(PassReason::Forced, Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    pub fn detector(mut self, detector: FaultDetector) -> Self {
        self.detector = Some(detector);
        self
    }

    /// How many denied keys the local deny cache remembers (default 4096; 0 turns it off).
    pub fn deny_cache(mut self, capacity: usize) -> Self {
        self.deny_cache = capacity;
        self
    }

    /// Trust this CA (PEM, one or more certificates) for the server's certificate instead of
    /// the platform's roots: a private CA, a managed service's own. Needs a `rediss://` URL;
    /// checked at [`build`](Self::build).
    ///
    /// ```
    /// use tollgate::redis::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ca_pem: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/doc-ca.pem"));
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "rediss://redis.internal:6380/")
    ///     .tls_root_ca(ca_pem) // std::fs::read("ca.pem")?, say
    ///     .build()?;
    /// # drop(lim);
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls_root_ca(mut self, pem: &[u8]) -> Self {
        self.tls.set_root_ca(pem);
        self
    }

    /// Present this certificate chain and private key (both PEM) to a server that asks for
    /// one (`tls-auth-clients yes`). Needs a `rediss://` URL; checked at
    /// [`build`](Self::build), the key against the certificate too.
    pub fn tls_client_cert(mut self, cert_pem: &[u8], key_pem: &[u8]) -> Self {
        self.tls.set_client_cert(cert_pem, key_pem);
        self
    }

    /// Builds the limiter. It connects lazily, so Redis need not be up yet: until it is,
    /// checks answer by the failure policy. Whether Redis is one server or a cluster is found
    /// on the first calls (see [`seed_urls`](Self::seed_urls)).
    ///
    /// # Errors
    ///
    /// [`BackendError::InvalidName`], [`BackendError::ColonInPolicy`],
    /// [`BackendError::DuplicatePolicy`],
    /// [`BackendError::InvalidShare`], [`BackendError::InvalidSetting`] for bad settings,
    /// [`BackendError::Client`] for a URL that does not parse, [`BackendError::Cluster`] for
    /// seeds that cannot reach a cluster, [`BackendError::InvalidTls`] for a certificate or key
    /// that does not parse, [`BackendError::NoRuntime`] outside a tokio runtime. A wrong CA,
    /// password or ACL shows at the first check, as its error (see
    /// [`BackendError::CertificateVerification`]).
    pub fn build(self) -> Result<SharedRateLimiter, BackendError> {
        let names: Vec<&str> = self.limits.iter().map(|(n, _)| n.as_str()).collect();
        check_settings(&self.prefix, &names, self.share, self.deadline)?;
        let leases = self.leases()?;
        let backend = backend(self.url, self.seeds, &self.tls, self.deadline)?;
        let local_clock = self.clock.clone().unwrap_or_default();
        let default_ttl = match self.clock {
            Some(_) => Duration::from_secs(60),
            None => Duration::ZERO,
        };
        // At most 2^40 ms (35 years), within the script's range.
        let min_ttl_ms = u64::try_from(self.min_ttl.unwrap_or(default_ttl).as_millis())
            .unwrap_or(u64::MAX)
            .min(1 << 40);
        let policies = self
            .limits
            .iter()
            .map(|(name, quota)| Policy {
                name: name.clone(),
                head: key::head(&self.prefix, name),
                local: (self.failure == FailurePolicy::Local).then(|| {
                    KeyedRateLimiter::builder(local_quota(quota, self.share))
                        .clock(local_clock.clone())
                        .max_keys(self.local_max_keys)
                        .max_debt(self.max_debt)
                        .build()
                }),
            })
            .collect();
        let limits = self
            .limits
            .iter()
            .map(|(_, q)| (*q, Limit::of(q)))
            .collect();
        // The main limit is the first (the builder's quota).
        let watch = match (self.detector, self.limits.first()) {
            (Some(detector), Some((_, main))) => Some(Watch {
                ceiling: KeyedRateLimiter::builder(scaled_quota(
                    main,
                    detector
                        .shared()
                        .ceiling()
                        .map_or(1, |f| f.saturating_sub(1)),
                ))
                .clock(local_clock.clone())
                .max_keys(self.local_max_keys)
                .build(),
                detector,
            }),
            _ => None,
        };
        Ok(SharedRateLimiter {
            inner: Arc::new(Inner {
                backend,
                script: GcraScript::new(),
                prefix: self.prefix,
                policies,
                limits: RwLock::new(limits),
                clock: self.clock,
                local_clock,
                deadline: self.deadline,
                min_ttl_ms,
                debt_us: super::settle::debt_us(self.max_debt),
                retry_closed: self.breaker.first_cool_down(),
                breakers: Breakers::new(self.breaker),
                failure: self.failure,
                share: self.share,
                cache: DenyCache::new(self.deny_cache),
                counters: Counters::default(),
                detector: watch,
                leases,
            }),
        })
    }
}

/// The settings every shared limiter checks alike: the prefix and the policy names (valid,
/// distinct), the local share, the deadline.
pub(crate) fn check_settings(
    prefix: &str,
    policies: &[&str],
    share: f64,
    deadline: Duration,
) -> Result<(), BackendError> {
    if !key::valid_name(prefix) {
        return Err(BackendError::InvalidName {
            what: "prefix",
            name: prefix.to_owned(),
        });
    }
    for (i, name) in policies.iter().enumerate() {
        if !key::valid_name(name) {
            return Err(BackendError::InvalidName {
                what: "policy",
                name: (*name).to_owned(),
            });
        }
        if !key::valid_policy(name) {
            return Err(BackendError::ColonInPolicy((*name).to_owned()));
        }
        if policies[..i].contains(name) {
            return Err(BackendError::DuplicatePolicy((*name).to_owned()));
        }
    }
    if !(share > 0.0 && share <= 1.0) {
        return Err(BackendError::InvalidShare(share));
    }
    if deadline.is_zero() {
        return Err(BackendError::InvalidSetting(
            "the deadline must be above zero",
        ));
    }
    Ok(())
}

/// The backend for the builder's URL and seeds (connecting nothing), inside a tokio runtime.
pub(crate) fn backend(
    url: String,
    seeds: Vec<String>,
    tls: &TlsConfig,
    deadline: Duration,
) -> Result<Backend, BackendError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(BackendError::NoRuntime);
    }
    let mut urls = vec![url];
    urls.extend(seeds);
    Backend::new(conn::clients(&urls, tls, deadline)?)
}

/// `q` times `factor` (rate and burst; at least 1): the quota of the cells that bound a
/// pass-through beyond the quota (`factor − 1` times it). Rounded down, as [`local_quota`]; a
/// scaled quota the parser refuses keeps `q` (tighter, never looser).
pub(crate) fn scaled_quota(q: &Quota, factor: u32) -> Quota {
    let factor = u64::from(factor.max(1));
    if factor == 1 {
        return *q;
    }
    let day = 86_400_000_000_000f64;
    let per_day = match q.params().per {
        Per::Request { .. } => day / q.period().as_nanos() as f64 * q.count() as f64,
        Per::Byte { num, den } => day * den as f64 / num as f64,
    };
    let count = ((per_day * factor as f64) as u64).max(1);
    let burst = q.burst().saturating_mul(factor);
    let text = if q.is_bytes() {
        format!("{count}B/d;burst={burst}B")
    } else {
        format!("{count}/d;burst={burst}")
    };
    text.parse().unwrap_or(*q)
}

/// `q` scaled to `share`: the rate written per day (the finest count a quota string can
/// carry), the rate and the burst both times `share`, rounded down but never to 0. A share of
/// 1 is `q` itself; a scaled quota the parser refuses (faster than one request per ns) keeps `q`.
pub(crate) fn local_quota(q: &Quota, share: f64) -> Quota {
    if share >= 1.0 {
        return *q;
    }
    let day = 86_400_000_000_000f64;
    // Per day: requests are day/T' with the exact rate C/P; bytes are day·den/num (num/den ns
    // per byte). Float to integer `as` saturates.
    let per_day = match q.params().per {
        Per::Request { .. } => day / q.period().as_nanos() as f64 * q.count() as f64,
        Per::Byte { num, den } => day * den as f64 / num as f64,
    };
    let count = ((per_day * share) as u64).max(1);
    let burst = ((q.burst() as f64 * share) as u64).max(1);
    let text = if q.is_bytes() {
        format!("{count}B/d;burst={burst}B")
    } else {
        format!("{count}/d;burst={burst}")
    };
    text.parse().unwrap_or(*q)
}
