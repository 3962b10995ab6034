//! [`SharedConcurrencyLimiter`]: a limit on the requests each customer has in flight, shared
//! by every instance through Redis. Slots are leases: a holder renews its own while it holds
//! them, so the slots of an instance that crashed lapse within `lease_time` instead of
//! leaking.

mod builder;
mod permit;
mod script;
mod stats;
mod task;

use core::fmt;
use core::num::NonZeroU32;
use core::time::Duration;
use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

pub use builder::SharedConcurrencyLimiterBuilder;
pub use permit::{AcquireError, SharedPermit};
pub use stats::SharedConcurrencyStats;

use self::script::{Op, SlotCall, SlotReply};
use self::stats::SlotCounters;
use self::task::Msg;
use super::breaker::Breakers;
use super::builder::FailurePolicy;
use super::call::{Called, Guard};
use super::conn::Backend;
use super::error::BackendError;
use super::key::{self, MAX_KEY_BYTES};
use super::stats::{bump, Counters};
use crate::concurrency::{KeyedConcurrencyLimiter, Saturated};
use crate::engine::clock::Clock;
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::Mutex;

/// A concurrency limit per customer, shared by every instance of a service through Redis:
/// at most `limit` requests of one customer in flight across the fleet (Stripe's
/// "concurrent requests limiter").
///
/// Async, on tokio. Each acquire is one script call; a [`SharedPermit`] gives its slot back
/// when dropped, in the background.
///
/// ```no_run
/// use std::num::NonZeroU32;
/// use tollgate::redis::{AcquireError, SharedConcurrencyLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lim = SharedConcurrencyLimiter::builder(NonZeroU32::new(20).unwrap(), "redis://127.0.0.1:6379/")
///     .prefix("api")
///     .policy("in-flight")
///     .build()?;
/// match lim.try_acquire_key("customer-42").await {
///     Ok(permit) => {
///         // ... serve the request; the slot comes back when `permit` drops.
///         drop(permit);
///     }
///     Err(AcquireError::Saturated(s)) => println!("429: {} of {} in flight", s.in_flight(), s.limit()),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Semantics and the bound
///
/// A customer's slots are a sorted set in Redis, `prefix:policy:{customer}:slots`: one member
/// per holder (this instance's random id and a sequence number), scored by the end of its
/// lease. An acquire drops the holders whose lease ended, counts the rest, and adds itself
/// below the limit — one script, so atomic against every other instance's. This instance's
/// background task renews every slot it holds each `lease_time / 3`, and removes a slot when
/// its permit drops.
///
/// * **While every holder is alive** (and reaches Redis at least once a lease), never more
///   than `limit` slots of a customer are held at once.
/// * **After a crash** (an instance killed without releasing), at most the dead instance's
///   slots stay taken, for at most `lease_time` (default 30 s): they are not renewed, and the
///   next acquire after their lease ends drops them. A key whose holders all vanish expires
///   with the last lease.
/// * **Redis unreachable:** the acquire answers by the [`FailurePolicy`] (`Local`: a slot of
///   this node's share, `max(1, ⌊limit · local_share⌋)`; `Open`: a permit holding nothing;
///   `Closed`: [`Saturated`] with
///   [`SaturatedReason::BackendUnavailable`](crate::concurrency::SaturatedReason::BackendUnavailable)),
///   each permit saying so ([`SharedPermit::pass_reason`]). A release Redis does not answer is
///   counted ([`SharedConcurrencyStats::release_failed`]) and lapses with its lease; an acquire
///   whose call got no answer may have landed, so it is released in the background too.
///   Renewals that fail for longer than a lease let this instance's slots lapse in Redis
///   while their permits are still held here ([`SharedConcurrencyStats::lapsed`]): the
///   customer may then briefly hold more than the limit.
///
/// The clock is the server's `TIME` unless [`clock`](SharedConcurrencyLimiterBuilder::clock)
/// sets a client clock (every instance must then read the same time base). Same deadline,
/// breaker, failure policy, Redis Cluster discovery and TLS as the
/// [`SharedRateLimiter`](super::SharedRateLimiter).
#[derive(Clone)]
pub struct SharedConcurrencyLimiter {
    inner: Arc<Inner>,
    tx: UnboundedSender<Msg>,
}

pub(crate) struct Inner {
    backend: Backend,
    breakers: Breakers,
    calls: Counters,
    counts: SlotCounters,
    script: redis::Script,
    prefix: String,
    policy: String,
    head: Vec<u8>,
    limit: AtomicU32,
    lease_time: Duration,
    clock: Option<Clock>,
    /// The key's TTL floor beyond its last lease (ms).
    floor_ms: u64,
    deadline: Duration,
    failure: FailurePolicy,
    share: f64,
    local: Option<KeyedConcurrencyLimiter<Vec<u8>>>,
    /// This instance's id, the first part of its holder ids.
    instance: String,
    seq: AtomicU64,
    /// The slots this instance holds, per Redis key: what the renewer renews.
    held: Mutex<HashMap<Vec<u8>, Vec<u64>>>,
    /// Releases Redis did not answer, with when they first failed: sent again at each
    /// renewal while their lease may still run.
    unreleased: Mutex<Vec<(Vec<u8>, u64, tokio::time::Instant)>>,
}

impl Inner {
    fn holder(&self, seq: u64) -> String {
        format!("{}:{seq}", self.instance)
    }

    /// The renewer's period: a third of the lease, so two renewals may fail before it lapses.
    fn renew_every(&self) -> Duration {
        (self.lease_time / 3).max(Duration::from_millis(1))
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease_time.as_millis()).unwrap_or(u64::MAX)
    }

    /// This instance no longer holds slot `seq` of `key`: it is not renewed again.
    fn forget(&self, key: &[u8], seq: u64) {
        let mut held = self.held.lock();
        if let Some(seqs) = held.get_mut(key) {
            if let Some(i) = seqs.iter().position(|&s| s == seq) {
                seqs.swap_remove(i);
            }
            if seqs.is_empty() {
                held.remove(key);
            }
        }
    }

    /// One guarded script call on `key`; a client clock past the script's range answers
    /// `ClockOutOfRange` without a call.
    async fn call(&self, key: &[u8], op: Op<'_>) -> Result<Called<SlotReply>, BackendError> {
        let now_ms = match &self.clock {
            Some(c) => {
                let ms = c.now_nanos() / 1_000_000;
                if ms > MAX_NOW_MS {
                    return Ok(Called::Answered(SlotReply::ClockOutOfRange));
                }
                Some(ms)
            }
            None => None,
        };
        let call = SlotCall {
            script: &self.script,
            key,
            now_ms,
            lease_ms: self.lease_ms(),
            floor_ms: self.floor_ms,
            op,
        };
        let guard = Guard {
            backend: &self.backend,
            breakers: &self.breakers,
            counters: &self.calls,
            deadline: self.deadline,
        };
        guard.call(key, &call).await
    }
}

/// The latest client clock reading the script accepts: 2^52 ms.
const MAX_NOW_MS: u64 = 1 << 52;

/// Sends a release for an acquire whose call went out unanswered, unless disarmed: on every
/// way out of the acquire, a dropped future included.
struct Pending<'a> {
    lim: &'a SharedConcurrencyLimiter,
    key: &'a [u8],
    seq: u64,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            bump(&self.lim.inner.counts.abandoned, 1);
            let _ = self.lim.tx.send(Msg::Release {
                key: self.key.to_vec(),
                seq: self.seq,
            });
        }
    }
}

impl SharedConcurrencyLimiter {
    /// The longest customer key accepted, in bytes; longer keys are an error, never
    /// truncated.
    pub const MAX_KEY_BYTES: usize = MAX_KEY_BYTES;
    /// The default lease of a slot: 30 s, renewed every 10 s.
    pub const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(30);

    /// A builder for a limit of `limit` requests in flight per customer, on the Redis at
    /// `url`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tollgate::redis::{FailurePolicy, SharedConcurrencyLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedConcurrencyLimiter::builder(NonZeroU32::new(20).unwrap(), "redis://127.0.0.1:6379/")
    ///     .lease_time(Duration::from_secs(10))
    ///     .failure_policy(FailurePolicy::Local)
    ///     .local_share(0.25)
    ///     .build()?; // connects lazily
    /// assert_eq!((lim.limit(), lim.lease_time()), (20, Duration::from_secs(10)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(limit: NonZeroU32, url: &str) -> SharedConcurrencyLimiterBuilder {
        SharedConcurrencyLimiterBuilder::new(limit, url)
    }

    /// A slot for `key` if it holds fewer than the limit across every instance, in one round
    /// trip. Never waits for a slot to free.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Saturated`] when no slot is open (or Redis could not decide and the
    /// failure policy is `Closed`); [`AcquireError::Backend`] for a key longer than
    /// [`MAX_KEY_BYTES`](Self::MAX_KEY_BYTES) and for a misconfiguration the call met (a
    /// certificate, the credentials, the ACL). Redis slow or down is not an error: the
    /// failure policy answers.
    pub async fn try_acquire_key<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
    ) -> Result<SharedPermit, AcquireError> {
        let customer = key.as_ref();
        let inner = &*self.inner;
        if customer.len() > MAX_KEY_BYTES {
            return Err(BackendError::KeyTooLong {
                len: customer.len(),
                max: MAX_KEY_BYTES,
            }
            .into());
        }
        let rkey = self.key(customer);
        let limit = inner.limit.load(Ordering::Relaxed);
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed);
        let holder = inner.holder(seq);
        let mut pending = Pending {
            lim: self,
            key: &rkey,
            seq,
            armed: true,
        };
        let c = &inner.counts;
        let called = inner
            .call(
                &rkey,
                Op::Acquire {
                    holder: &holder,
                    slots: limit,
                },
            )
            .await;
        let reply = match called {
            Ok(Called::Answered(reply)) => reply,
            Ok(Called::Rejected) => {
                pending.armed = false;
                return self.fallback(customer, limit);
            }
            // The call may have landed: `pending` releases it.
            Ok(Called::Failed) => return self.fallback(customer, limit),
            Err(e) => return Err(e.into()),
        };
        pending.armed = false;
        drop(pending);
        match reply {
            SlotReply::Taken { .. } => {
                // Held before the permit exists: a drop always finds it.
                inner.held.lock().entry(rkey.clone()).or_default().push(seq);
                bump(&c.acquired, 1);
                Ok(SharedPermit::redis(
                    Arc::clone(&self.inner),
                    self.tx.clone(),
                    rkey,
                    seq,
                ))
            }
            SlotReply::Refused { count } => {
                bump(&c.saturated, 1);
                Err(Saturated::limit_reached(limit, count, limit).into())
            }
            SlotReply::ClockOutOfRange => {
                bump(&c.clock_overflow, 1);
                Err(Saturated::limit_reached(limit, 0, limit).into())
            }
            // A reply the script gives to other calls only.
            SlotReply::Count { .. } | SlotReply::Renewed { .. } => self.fallback(customer, limit),
        }
    }

    /// The failure policy's answer, counted.
    fn fallback(&self, customer: &[u8], limit: u32) -> Result<SharedPermit, AcquireError> {
        let c = &self.inner.counts;
        match (&self.inner.failure, &self.inner.local) {
            (FailurePolicy::Open, _) => {
                bump(&c.fallback_open, 1);
                Ok(SharedPermit::open())
            }
            (FailurePolicy::Local, Some(local)) => match local.try_acquire_key(customer) {
                Ok(p) => {
                    bump(&c.fallback_local_acquired, 1);
                    Ok(SharedPermit::local(p))
                }
                Err(s) => {
                    bump(&c.fallback_local_saturated, 1);
                    Err(s.into())
                }
            },
            _ => {
                bump(&c.fallback_closed, 1);
                Err(Saturated::backend_unavailable(limit).into())
            }
        }
    }

    /// How many slots `key` holds across every instance now (leases ended not counted), or
    /// `None` if Redis could not answer.
    ///
    /// # Errors
    ///
    /// As [`try_acquire_key`](Self::try_acquire_key), for a key too long or a
    /// misconfiguration.
    pub async fn in_flight_key<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
    ) -> Result<Option<u32>, BackendError> {
        let customer = key.as_ref();
        if customer.len() > MAX_KEY_BYTES {
            return Err(BackendError::KeyTooLong {
                len: customer.len(),
                max: MAX_KEY_BYTES,
            });
        }
        let rkey = self.key(customer);
        Ok(match self.inner.call(&rkey, Op::Count).await? {
            Called::Answered(SlotReply::Count { count }) => Some(count),
            _ => None,
        })
    }

    /// The slots this instance holds in Redis now (its permits not yet dropped), over every
    /// customer.
    pub fn held(&self) -> usize {
        self.inner.held.lock().values().map(Vec::len).sum()
    }

    /// Waits until every permit dropped before this call has been released in Redis (or its
    /// release failed, counted): for a graceful shutdown, and for tests.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Renews every slot this instance holds now, as the background task does each third of
    /// a lease; returns how many leases were extended. For a caller that knows a pause is
    /// coming, and for tests.
    pub async fn renew(&self) -> u64 {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Renew(tx)).is_err() {
            return 0;
        }
        rx.await.unwrap_or(0)
    }

    /// The limit per customer.
    pub fn limit(&self) -> u32 {
        self.inner.limit.load(Ordering::Relaxed)
    }

    /// Changes the limit for this instance's acquires, live (and its local share under
    /// `FailurePolicy::Local`). Lowering it revokes no slot: a customer above the new limit
    /// drains to it. Every instance checks against the limit it was given: change it on all
    /// of them (a limits reload does).
    pub fn set_limit(&self, limit: NonZeroU32) {
        self.inner.limit.store(limit.get(), Ordering::Relaxed);
        if let Some(local) = &self.inner.local {
            local.set_limit(builder::local_limit(limit.get(), self.inner.share));
        }
    }

    /// How long a slot stays taken without renewal.
    pub fn lease_time(&self) -> Duration {
        self.inner.lease_time
    }

    /// The Redis key of `customer`'s slots: `prefix:policy:{customer}:slots`, the customer
    /// escaped as in [`SharedRateLimiter::keys`](super::SharedRateLimiter::keys) (one hash
    /// tag, so one cluster slot; never the key of a rate limit).
    ///
    /// ```
    /// # use std::num::NonZeroU32;
    /// # use tollgate::redis::SharedConcurrencyLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedConcurrencyLimiter::builder(NonZeroU32::new(5).unwrap(), "redis://127.0.0.1:6379/")
    ///     .prefix("gw")
    ///     .build()?;
    /// assert_eq!(lim.key("c}7"), b"gw:in-flight:{c%7D7}:slots".to_vec());
    /// # Ok(())
    /// # }
    /// ```
    pub fn key<Q: AsRef<[u8]> + ?Sized>(&self, customer: &Q) -> Vec<u8> {
        let mut k = key::key(&self.inner.head, customer.as_ref());
        k.extend_from_slice(b":slots");
        k
    }

    /// What this limiter has done so far.
    pub fn stats(&self) -> SharedConcurrencyStats {
        self.inner
            .counts
            .snapshot(&self.inner.calls, self.inner.breakers.opened())
    }

    /// `true` while the circuit breaker is open or half-open.
    pub fn breaker_open(&self) -> bool {
        self.inner.breakers.is_open()
    }

    /// `true` once this limiter talks to a Redis Cluster (see
    /// [`SharedRateLimiter::cluster_mode`](super::SharedRateLimiter::cluster_mode)).
    pub fn cluster_mode(&self) -> bool {
        self.inner.backend.is_cluster()
    }

    /// The SHA1 of the slots script, as `EVALSHA` names it.
    pub fn script_sha(&self) -> &str {
        self.inner.script.get_hash()
    }

    /// The slots script's source.
    pub fn script_source() -> &'static str {
        script::SOURCE
    }
}

impl fmt::Debug for SharedConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("SharedConcurrencyLimiter")
            .field("prefix", &inner.prefix)
            .field("policy", &inner.policy)
            .field("limit", &self.limit())
            .field("lease_time", &inner.lease_time)
            .field("client_clock", &inner.clock.is_some())
            .field("deadline", &inner.deadline)
            .field("failure", &inner.failure)
            .field("cluster", &inner.backend.is_cluster())
            .field("held", &self.held())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
