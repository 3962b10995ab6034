//! Settling a shared limiter's charge after the fact: [`SharedRateLimiter::refund_key`],
//! [`charge_key`](SharedRateLimiter::charge_key) and [`reset_key`](SharedRateLimiter::reset_key),
//! each one script call (`gcra.lua`'s settle modes) under the deadline, the breaker and the
//! failure policy; and the debt cap that charges may run into
//! ([`SharedRateLimiterBuilder::max_debt`]).
//!
//! A refund or a charge carries a token unique to the call, which the script sets with `NX`:
//! the same call sent twice (the client resending it after a dropped connection) is applied
//! once. A call that does not reach Redis is counted and never sent again, so a refund can be
//! lost but never doubled.

use core::fmt;
use core::time::Duration;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::builder::{FailurePolicy, SharedRateLimiterBuilder};
use super::cache::DenyCache;
use super::call::{Called, Guard};
use super::error::BackendError;
use super::key::MAX_KEY_BYTES;
use super::limit::{Limit, MAX_NOW_US, MAX_TAU_US};
use super::limiter::SharedRateLimiter;
use super::script::{Call, Gcra, Op, Reply};
use super::stats::bump;
use crate::engine::charge::Charged;

/// What a [`refund_key`](SharedRateLimiter::refund_key),
/// [`charge_key`](SharedRateLimiter::charge_key) or [`reset_key`](SharedRateLimiter::reset_key)
/// came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a settle may not have reached Redis"]
#[non_exhaustive]
pub enum Settled {
    /// Redis applied it. For a charge, what did not fit under the debt cap and how deep in
    /// debt it left the customer (the largest over the limits); a refund or a reset reports
    /// nothing unpaid and the debt left.
    Applied(Charged),
    /// Redis had applied this very call already (the client sent it twice): applied once.
    Repeated,
    /// Not applied in Redis: the breaker was open, or the call failed or met its deadline.
    /// Counted in [`SharedStats::settles_lost`](super::SharedStats::settles_lost) and never
    /// sent again (a refund sent again after a reply was lost could be applied twice). With
    /// [`FailurePolicy::Local`] it was applied to the local fallback instead.
    Lost,
}

impl Settled {
    /// `true` unless the call was lost.
    pub fn reached_redis(&self) -> bool {
        !matches!(self, Settled::Lost)
    }
}

impl fmt::Display for Settled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Settled::Applied(c) if c.is_paid() => write!(f, "applied, {:?} of debt", c.debt()),
            Settled::Applied(c) => write!(f, "applied, {} units unpaid", c.unpaid()),
            Settled::Repeated => f.write_str("applied before"),
            Settled::Lost => f.write_str("lost"),
        }
    }
}

/// The debt cap in µs, within the script's range.
pub(crate) fn debt_us(max: Duration) -> u64 {
    u64::try_from(max.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_TAU_US)
}

impl SharedRateLimiterBuilder {
    /// How far past drained a [`charge_key`](SharedRateLimiter::charge_key) may push a
    /// customer: its **debt**, which every later check waits out (default zero: a charge fills
    /// at most the burst). The same cap for every limit of the limiter, at most 2^50 µs
    /// (35.7 years); the local fallback gets it too. Every instance sharing the keys should
    /// use the same cap: a check from an instance with a smaller one cuts the debt down to its
    /// own cap (the check's clamp), as it would a TAT a fast client clock wrote. A key's TTL
    /// covers its debt (it is `tat − now`), so a key in debt never expires early.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::redis::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("100000/h".parse()?, "redis://127.0.0.1:6379/")
    ///     .policy("tokens")
    ///     .max_debt(Duration::from_secs(3_600))
    ///     .build()?; // connects lazily
    /// # let _ = lim;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_debt(mut self, max: Duration) -> Self {
        self.max_debt = max;
        self
    }
}

impl SharedRateLimiter {
    /// Gives `n` units back to `key` on every limit: a request that turned out to cost less
    /// than it was charged (a login that succeeded). Never past full. One script call.
    ///
    /// With [`lease`](SharedRateLimiterBuilder::lease): this instance first drops its leased
    /// cells of `key` (at most the lease size times four: charged in Redis and never admitted,
    /// counted as lapsed), so the refund is not spent twice. Other instances keep theirs and
    /// their deny caches: a refund made elsewhere is seen here once this instance's cached
    /// denial of the key (if any) expires, at most one retry-after later; this instance's own
    /// deny cache forgets the key at once.
    ///
    /// # Errors
    ///
    /// [`BackendError::KeyTooLong`], and a misconfiguration (as
    /// [`check_key`](Self::check_key)). A backend fault is [`Settled::Lost`].
    ///
    /// ```no_run
    /// # use tollgate::redis::{Settled, SharedRateLimiter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("1/min".parse()?, "redis://127.0.0.1:6379/").build()?;
    /// assert!(lim.check_key("dave").await?.is_permitted());
    /// assert!(lim.refund_key("dave", 1).await?.reached_redis());
    /// assert!(lim.check_key("dave").await?.is_permitted(), "the refund gave the unit back");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn refund_key<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
        n: u64,
    ) -> Result<Settled, BackendError> {
        self.settle(key.as_ref(), Op::Refund, n).await
    }

    /// Charges `key` `n` units more on every limit, whatever room it has: a cost known only
    /// after the request ran (tokens a response reported). Past drained the customer is in
    /// debt, up to [`max_debt`](SharedRateLimiterBuilder::max_debt); its checks are denied
    /// with an exact retry-after that covers the debt. What does not fit is reported in
    /// [`Settled::Applied`]'s [`Charged::unpaid`]. Unlike the in-memory limiter, a key Redis
    /// does not hold is charged too (it is created, with a TTL that covers the charge). One
    /// script call; a charge never lowers a TAT.
    ///
    /// # Errors
    ///
    /// As [`refund_key`](Self::refund_key).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tollgate::redis::{Settled, SharedRateLimiter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("10/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .max_debt(Duration::from_secs(5))
    ///     .build()?;
    /// assert!(lim.check_key("erin").await?.is_permitted());
    /// match lim.charge_key("erin", 19).await? {
    ///     Settled::Applied(c) => assert!(c.is_paid() && c.debt() > Duration::ZERO),
    ///     other => println!("not applied: {other}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn charge_key<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
        n: u64,
    ) -> Result<Settled, BackendError> {
        self.settle(key.as_ref(), Op::Charge, n).await
    }

    /// Resets `key` to full on every limit, debt forgiven, as if it had never been checked
    /// (an operator clearing one customer after an incident): its keys are deleted. One
    /// script call. With leases, this instance drops its cells of `key` first (see
    /// [`refund_key`](Self::refund_key)); another instance still holding cells of the
    /// customer may admit them on top of the fresh burst, at most one lease per instance.
    ///
    /// # Errors
    ///
    /// As [`refund_key`](Self::refund_key).
    pub async fn reset_key<Q: AsRef<[u8]> + ?Sized>(
        &self,
        key: &Q,
    ) -> Result<Settled, BackendError> {
        self.settle(key.as_ref(), Op::Reset, u64::MAX).await
    }

    async fn settle(&self, key: &[u8], op: Op, n: u64) -> Result<Settled, BackendError> {
        let inner = &*self.inner;
        if key.len() > MAX_KEY_BYTES {
            return Err(BackendError::KeyTooLong {
                len: key.len(),
                max: MAX_KEY_BYTES,
            });
        }
        if n == 0 {
            return Ok(Settled::Applied(Charged::new(0, 0)));
        }
        let limits: Vec<Limit> = inner.limits.read().iter().map(|(_, l)| *l).collect();
        let horizon = inner.leases.as_ref().map_or(0, |l| l.horizon);
        let debt = inner.debt_us;
        // Each weight within what the script accepts: a refund beyond the cell's reach is a
        // refund to full, a charge beyond the cap is unpaid either way.
        let args: Vec<(u64, u64)> = limits
            .iter()
            .map(|l| {
                let reach = match op {
                    Op::Charge => l.tau() + debt,
                    Op::Refund | Op::Reset => l.tau() + horizon + debt,
                };
                let w = match op {
                    Op::Reset => 0,
                    _ => l.p.weight_uncapped(n).min(reach),
                };
                (w, l.tau())
            })
            .collect();
        if let Some(leases) = &inner.leases {
            if op != Op::Charge {
                bump(&inner.counters.cells_lapsed, leases.forget(key));
            }
        }
        // Forgets the key now and again when the settle ends, however it ends (a reply, a
        // fault, the deadline, this future dropped while the call is out): a check that read
        // the cache's epoch after the first forget may still reach Redis before this call.
        let _forget = Forget::new(&inner.cache, key);
        let now = inner.clock.as_ref().map(|c| c.now_nanos() / 1000);
        if now.is_some_and(|us| us > MAX_NOW_US) {
            // A client clock past the script's range: no step can be taken (a check denies).
            bump(&inner.counters.settles_lost, 1);
            return Ok(Settled::Lost);
        }
        let mut keys = self.keys(key);
        if op != Op::Reset {
            let mut token = keys[0].clone();
            token.extend_from_slice(format!(":settle:{}", next_token()).as_bytes());
            keys.push(token);
        }
        let call = Call {
            keys: &keys,
            now,
            charge: false,
            min_ttl_ms: inner.min_ttl_ms,
            limits: &args,
            lease: None,
            horizon,
            debt,
            op: Some(op),
        };
        let guard = Guard {
            backend: &inner.backend,
            breakers: &inner.breakers,
            counters: &inner.counters,
            deadline: inner.deadline,
        };
        let gcra = Gcra {
            script: &inner.script,
            call: &call,
        };
        let c = &inner.counters;
        let reply = match guard.call(&keys[0], &gcra).await? {
            Called::Answered(reply) => reply,
            Called::Rejected | Called::Failed => {
                bump(&c.settles_lost, 1);
                self.settle_locally(key, op, n);
                return Ok(Settled::Lost);
            }
        };
        match reply {
            Reply::Settled {
                aheads,
                moved,
                corrupt,
                ..
            } => {
                bump(&c.corrupt_values, corrupt);
                bump(
                    match op {
                        Op::Refund => &c.refunds,
                        Op::Charge => &c.charges,
                        Op::Reset => &c.resets,
                    },
                    1,
                );
                let mut out = (0, 0);
                for ((l, &(_, tau)), (&ahead, &moved)) in
                    limits.iter().zip(&args).zip(aheads.iter().zip(&moved))
                {
                    // `w` may have been cut to the reach already: compare with the whole cost.
                    let unpaid = if op == Op::Charge && moved < l.p.weight_uncapped(n) {
                        n.saturating_sub(l.p.units_for(moved))
                    } else {
                        0
                    };
                    let debt = ahead.saturating_sub(tau).saturating_mul(1000);
                    out = (out.0.max(unpaid), out.1.max(debt));
                }
                Ok(Settled::Applied(Charged::new(out.0, out.1)))
            }
            Reply::Duplicate => {
                bump(&c.settles_repeated, 1);
                Ok(Settled::Repeated)
            }
            // A reply a settle never gets (a proxy, another script under the SHA): Redis did
            // not say it applied anything.
            Reply::Decided { .. } | Reply::Leased { .. } | Reply::ClockOutOfRange => {
                bump(&c.errors, 1);
                bump(&c.settles_lost, 1);
                Ok(Settled::Lost)
            }
        }
    }

    /// A settle that did not reach Redis, applied where the failure policy answered checks:
    /// the local fallback, if there is one.
    fn settle_locally(&self, key: &[u8], op: Op, n: u64) {
        let inner = &*self.inner;
        if inner.failure != FailurePolicy::Local {
            return;
        }
        for local in inner.policies.iter().filter_map(|p| p.local.as_ref()) {
            match op {
                Op::Refund => local.refund_key(key, n),
                Op::Charge => {
                    let _ = local.charge_key(key, n);
                }
                Op::Reset => local.reset_key(key),
            }
        }
    }
}

/// The deny cache's forgets of a settled key: one when made, one when dropped.
struct Forget<'a> {
    cache: &'a DenyCache,
    key: &'a [u8],
}

impl<'a> Forget<'a> {
    fn new(cache: &'a DenyCache, key: &'a [u8]) -> Self {
        cache.forget(key);
        Self { cache, key }
    }
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.cache.forget(self.key);
    }
}

/// A token no other call of any instance uses: a per-process random part (std's keyed hasher
/// seeds) and a counter.
fn next_token() -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        std::hash::RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()))
    });
    format!("{seed:016x}{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}
