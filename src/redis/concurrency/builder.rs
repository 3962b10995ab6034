//! [`SharedConcurrencyLimiterBuilder`].

use core::fmt;
use core::num::NonZeroU32;
use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use super::stats::SlotCounters;
use super::{task, Inner, SharedConcurrencyLimiter};
use crate::concurrency::KeyedConcurrencyLimiter;
use crate::engine::clock::Clock;
use crate::redis::breaker::{BreakerConfig, Breakers};
use crate::redis::builder::{backend, check_settings, FailurePolicy, DEFAULT_DEADLINE};
use crate::redis::error::BackendError;
use crate::redis::key;
use crate::redis::stats::Counters;
use crate::redis::tls::TlsConfig;
use crate::sync::atomic::{AtomicU32, AtomicU64};
use crate::sync::Mutex;

/// The longest lease: 2^40 ms (about 35 years), within the script's range.
const MAX_LEASE_MS: u128 = 1 << 40;

/// Builds a [`SharedConcurrencyLimiter`]; see [`SharedConcurrencyLimiter::builder`].
#[must_use = "call .build() to get the limiter"]
pub struct SharedConcurrencyLimiterBuilder {
    limit: NonZeroU32,
    url: String,
    seeds: Vec<String>,
    prefix: String,
    policy: String,
    clock: Option<Clock>,
    min_ttl: Option<Duration>,
    deadline: Duration,
    breaker: BreakerConfig,
    failure: FailurePolicy,
    share: f64,
    local_max_keys: usize,
    lease_time: Duration,
    tls: TlsConfig,
}

impl fmt::Debug for SharedConcurrencyLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may carry a password: their count only.
        f.debug_struct("SharedConcurrencyLimiterBuilder")
            .field("limit", &self.limit)
            .field("seeds", &self.seeds.len())
            .field("prefix", &self.prefix)
            .field("policy", &self.policy)
            .field("lease_time", &self.lease_time)
            .field("deadline", &self.deadline)
            .field("failure", &self.failure)
            .field("share", &self.share)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// This node's share of `limit`: `max(1, ⌊limit · share⌋)`.
pub(crate) fn local_limit(limit: u32, share: f64) -> NonZeroU32 {
    let scaled = (f64::from(limit) * share) as u32; // saturates; share is in (0, 1]
    NonZeroU32::new(scaled.min(limit)).unwrap_or(NonZeroU32::MIN)
}

impl SharedConcurrencyLimiterBuilder {
    pub(crate) fn new(limit: NonZeroU32, url: &str) -> Self {
        Self {
            limit,
            url: url.to_owned(),
            seeds: Vec::new(),
            prefix: "tollgate".to_owned(),
            policy: "in-flight".to_owned(),
            clock: None,
            min_ttl: None,
            deadline: DEFAULT_DEADLINE,
            breaker: BreakerConfig::default(),
            failure: FailurePolicy::default(),
            share: 1.0,
            local_max_keys: 1 << 16,
            lease_time: SharedConcurrencyLimiter::DEFAULT_LEASE_TIME,
            tls: TlsConfig::default(),
        }
    }

    /// More nodes of the same Redis Cluster to start from (see
    /// [`SharedRateLimiterBuilder::seed_urls`](crate::redis::SharedRateLimiterBuilder::seed_urls)).
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

    /// The name of this limit (default `"in-flight"`), the second part of its keys: 1 to 64
    /// bytes without `{`, `}` or `:`. Its keys end in `:slots`, so they never meet a rate
    /// limit's, whatever the names.
    pub fn policy(mut self, name: &str) -> Self {
        name.clone_into(&mut self.policy);
        self
    }

    /// How long a slot stays taken without renewal (default 30 s): the longest a crashed
    /// instance's slots stay taken. Each instance renews its slots every third of it, one
    /// call per customer it holds slots of. At least three deadlines (so a renewal has time
    /// to answer), at most 2^40 ms.
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// Lease on this clock instead of the server's `TIME`, in ms (see
    /// [`SharedRateLimiterBuilder::clock`](crate::redis::SharedRateLimiterBuilder::clock)):
    /// every instance sharing a prefix must read the same time base. A
    /// [`ManualClock`](crate::ManualClock) lets a test end a lease without waiting for it.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// How long a key is kept beyond its last lease (default: nothing on the server's clock,
    /// 60 s with a client clock, whose time need not pass at the server's pace).
    pub fn min_ttl(mut self, ttl: Duration) -> Self {
        self.min_ttl = Some(ttl);
        self
    }

    /// The longest a call waits for Redis (default 20 ms); past it the acquire answers by
    /// the [`FailurePolicy`].
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// When the circuit breaker opens and for how long (see [`BreakerConfig`]).
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// What an acquire answers when Redis cannot (default [`FailurePolicy::Local`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }

    /// This node's share of the limit under [`FailurePolicy::Local`], in `(0, 1]` (default 1):
    /// `max(1, ⌊limit · share⌋)` slots per customer here while Redis is away.
    pub fn local_share(mut self, share: f64) -> Self {
        self.share = share;
        self
    }

    /// How many customers the local fallback tracks at once (default 2^16).
    pub fn local_max_keys(mut self, max_keys: usize) -> Self {
        self.local_max_keys = max_keys;
        self
    }

    /// Trust this CA (PEM) for the server's certificate (see
    /// [`SharedRateLimiterBuilder::tls_root_ca`](crate::redis::SharedRateLimiterBuilder::tls_root_ca)).
    pub fn tls_root_ca(mut self, pem: &[u8]) -> Self {
        self.tls.set_root_ca(pem);
        self
    }

    /// Present this certificate chain and private key (both PEM) to a server that asks for
    /// one.
    pub fn tls_client_cert(mut self, cert_pem: &[u8], key_pem: &[u8]) -> Self {
        self.tls.set_client_cert(cert_pem, key_pem);
        self
    }

    /// Builds the limiter and starts its background task (releases and renewals). It
    /// connects lazily: until Redis is up, acquires answer by the failure policy.
    ///
    /// # Errors
    ///
    /// As [`SharedRateLimiterBuilder::build`](crate::redis::SharedRateLimiterBuilder::build),
    /// and [`BackendError::InvalidSetting`] for a lease shorter than three deadlines or
    /// longer than 2^40 ms.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tollgate::redis::{BackendError, SharedConcurrencyLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let err = SharedConcurrencyLimiter::builder(NonZeroU32::new(5).unwrap(), "redis://127.0.0.1:6379/")
    ///     .lease_time(Duration::from_millis(30))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(matches!(err, BackendError::InvalidSetting(_)));
    /// # }
    /// ```
    pub fn build(self) -> Result<SharedConcurrencyLimiter, BackendError> {
        check_settings(&self.prefix, &[&self.policy], self.share, self.deadline)?;
        if self.lease_time < self.deadline.saturating_mul(3) {
            return Err(BackendError::InvalidSetting(
                "lease_time must be at least three deadlines: a renewal every third of a lease must have time to answer",
            ));
        }
        if self.lease_time.as_millis() > MAX_LEASE_MS {
            return Err(BackendError::InvalidSetting(
                "lease_time must be at most 2^40 ms",
            ));
        }
        let backend = backend(self.url, self.seeds, &self.tls, self.deadline)?;
        let default_floor = match self.clock {
            Some(_) => Duration::from_secs(60),
            None => Duration::ZERO,
        };
        let floor_ms = u64::try_from(self.min_ttl.unwrap_or(default_floor).as_millis())
            .unwrap_or(u64::MAX)
            .min(1 << 40);
        let local = (self.failure == FailurePolicy::Local).then(|| {
            KeyedConcurrencyLimiter::builder(local_limit(self.limit.get(), self.share))
                .max_keys(self.local_max_keys)
                .build()
        });
        // Unique per limiter: two instances' holders never share an id.
        let instance = format!(
            "{:016x}",
            RandomState::new().hash_one((std::process::id(), Clock::os().now_nanos()))
        );
        let inner = Arc::new(Inner {
            backend,
            breakers: Breakers::new(self.breaker),
            calls: Counters::default(),
            counts: SlotCounters::default(),
            script: redis::Script::new(super::script::SOURCE),
            head: key::head(&self.prefix, &self.policy),
            prefix: self.prefix,
            policy: self.policy,
            limit: AtomicU32::new(self.limit.get()),
            lease_time: self.lease_time,
            clock: self.clock,
            floor_ms,
            deadline: self.deadline,
            failure: self.failure,
            share: self.share,
            local,
            instance,
            seq: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
            unreleased: Mutex::new(Vec::new()),
        });
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(task::run(Arc::clone(&inner), rx));
        Ok(SharedConcurrencyLimiter { inner, tx })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_share_is_at_least_one_slot_and_never_above_the_limit() {
        assert_eq!(local_limit(20, 0.25).get(), 5);
        assert_eq!(local_limit(20, 1.0).get(), 20);
        assert_eq!(local_limit(3, 0.1).get(), 1);
        assert_eq!(local_limit(u32::MAX, 1.0).get(), u32::MAX);
        assert_eq!(local_limit(7, f64::MIN_POSITIVE).get(), 1);
    }
}
