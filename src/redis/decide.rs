//! The check path of [`SharedRateLimiter`]: the deny cache, the breaker, one script call under
//! the deadline, its outcome classified, and the failure policy's verdict when Redis cannot
//! decide.

use super::builder::FailurePolicy;
use super::cache::{Cached, Epoch};
use super::call::{Called, Guard};
use super::error::BackendError;
use super::key::MAX_KEY_BYTES;
use super::lease::{Ask, Lease, Leases, Spend};
use super::limit::{Limit, MAX_NOW_US};
use super::limiter::SharedRateLimiter;
use super::script::{Call, Gcra, Reply};
use super::stats::bump;
use crate::engine::check::Check;
use crate::engine::clock::saturating_nanos;
use crate::engine::error::InsufficientCapacity;
use crate::engine::verdict::{Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict};

impl SharedRateLimiter {
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
        // A lease applies to one-unit checks of one limit; peeks and costs go to Redis.
        let leases = inner
            .leases
            .as_ref()
            .filter(|_| n == 1 && charge && limits.len() == 1);
        let mut ask = None;
        if let Some(leases) = leases {
            let c = &inner.counters;
            match leases.spend(key, local_now, args[0].0) {
                Spend::Allow { ahead, lapsed } => {
                    bump(&c.cells_lapsed, lapsed);
                    bump(&c.leased_allowed, 1);
                    return Ok(Verdict::Allow(limits[0].allowed(ahead)));
                }
                Spend::Deny { retry, lapsed } => {
                    bump(&c.cells_lapsed, lapsed);
                    bump(&c.leased_denied, 1);
                    return Ok(deny_us(retry, DenyReason::Quota));
                }
                Spend::Call { ask: a, lapsed } => {
                    bump(&c.cells_lapsed, lapsed);
                    ask = a;
                }
            }
        }
        // Every way out of this check, the call sent or not (the deny cache, the breaker, a
        // dropped future), lets the next check of the key ask for a lease.
        let mut settle = leases.filter(|_| ask.is_some()).map(|leases| Settle {
            leases,
            key,
            sent: false,
            answered: false,
        });
        // A cost of 0 reports what remains: Redis answers it, the cache only gives the epoch.
        let ws: Vec<u64> = match n {
            0 => Vec::new(),
            _ => args.iter().map(|a| a.0).collect(),
        };
        // Read before the call is sent: a denial is remembered only if no settle of this
        // instance forgot the key since (see `cache.rs`).
        let epoch = match inner.cache.lookup(key, &ws, local_now) {
            Cached::Denied(retry) => {
                bump(&inner.counters.denied_cached, 1);
                return Ok(deny_us(retry, DenyReason::Quota));
            }
            Cached::Ask(epoch) => epoch,
        };
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
        let keys = self.keys(key);
        let call = Call {
            keys: &keys,
            now,
            charge,
            min_ttl_ms: inner.min_ttl_ms,
            limits: &args,
            lease: ask.map(|a| (a.cells, a.after)),
            horizon: inner.leases.as_ref().map_or(0, |l| l.horizon),
            debt: inner.debt_us,
            op: None,
        };
        let guard = Guard {
            backend: &inner.backend,
            breakers: &inner.breakers,
            counters: &inner.counters,
            deadline: inner.deadline,
        };
        // Sent unless the breaker rejects it (decided before the first await): a future
        // dropped while the call is out leaves the lease run ended.
        if let Some(s) = &mut settle {
            s.sent = true;
        }
        let gcra = Gcra {
            script: &inner.script,
            call: &call,
        };
        match guard.call(&keys[0], &gcra).await? {
            Called::Answered(reply) => {
                if let Some(s) = &mut settle {
                    s.answered = true;
                }
                let sent = (local_now, epoch);
                Ok(self.verdict(key, (&limits, &args), reply, sent, ask.as_ref()))
            }
            Called::Rejected => {
                if let Some(s) = &mut settle {
                    s.sent = false;
                }
                Ok(self.fallback(key, n, charge))
            }
            Called::Failed => Ok(self.fallback(key, n, charge)),
        }
    }

    /// The verdict for the script's reply to a check (or to the lease call `ask`) sent at
    /// `local_now` after the deny cache gave `epoch`, remembering denials in the deny cache.
    fn verdict(
        &self,
        key: &[u8],
        (limits, args): (&[Limit], &[(u64, u64)]),
        reply: Reply,
        (local_now, epoch): (u64, Epoch),
        ask: Option<&Ask>,
    ) -> Verdict {
        let inner = &*self.inner;
        let (conforms, aheads, corrupt) = match reply {
            Reply::ClockOutOfRange => {
                bump(&inner.counters.denied_clock_overflow, 1);
                return overflow();
            }
            Reply::Leased {
                now,
                cells,
                tat0,
                corrupt,
            } => {
                bump(&inner.counters.corrupt_values, corrupt);
                if let Some(ask) = ask {
                    let grant = (now, cells, tat0);
                    return self.leased(key, &limits[0], args[0], grant, local_now, ask);
                }
                // A grant no call asked for (a reply the script never gives): no cell is
                // stored, and the check is denied rather than let through unjudged.
                return deny_us(0, DenyReason::Quota);
            }
            Reply::Decided {
                conforms,
                aheads,
                corrupt,
                ..
            } => (conforms, aheads, corrupt),
            // A settle's reply to a check (the script never gives one): denied, not let
            // through unjudged.
            Reply::Settled { .. } | Reply::Duplicate => return deny_us(0, DenyReason::Quota),
        };
        if let (Some(ask), Some(leases)) = (ask, &inner.leases) {
            leases.refused(key, ask);
        }
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
                let bound = (local_now + (a - w), tau, unit);
                inner.cache.remember(i, key, bound, local_now, epoch);
            }
        }
        deny_us(retry, DenyReason::Quota)
    }

    /// The verdict of a check that took a lease of `cells` from `tat0` at the script's `now`:
    /// its first cell if due, else a denial until it is.
    fn leased(
        &self,
        key: &[u8],
        limit: &Limit,
        (w, tau): (u64, u64),
        (now, cells, tat0): (u64, u64, u64),
        sent: u64,
        ask: &Ask,
    ) -> Verdict {
        let inner = &*self.inner;
        let c = &inner.counters;
        let Some(leases) = &inner.leases else {
            return deny_us(0, DenyReason::Quota);
        };
        // With a client clock the script's `now` is the local clock's reading; on the
        // server's clock, place it between the readings before and after the call.
        let (sent, got) = match inner.clock {
            Some(_) => (now, now),
            None => (sent, inner.local_clock.now_nanos() / 1000),
        };
        let lease = Lease::new(now, tat0, cells, w, tau, sent, got);
        bump(&c.leases_taken, 1);
        bump(&c.cells_leased, cells);
        let (first, lapsed) = leases.grant(key, lease, got, ask);
        bump(&c.cells_lapsed, lapsed);
        match first {
            Spend::Allow { ahead, .. } => {
                bump(&c.allowed, 1);
                Verdict::Allow(limit.allowed(ahead))
            }
            Spend::Deny { retry, .. } => {
                bump(&c.denied, 1);
                deny_us(retry, DenyReason::Quota)
            }
            // A grant holds at least one cell, not lapsed at its own call.
            Spend::Call { .. } => {
                bump(&c.denied, 1);
                deny_us(0, DenyReason::Quota)
            }
        }
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
                let retry = saturating_nanos(inner.retry_closed);
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
                            let r = saturating_nanos(inner.retry_closed);
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

/// Marks the lease call of `key` settled when dropped.
struct Settle<'a> {
    leases: &'a Leases,
    key: &'a [u8],
    /// The lease call went out.
    sent: bool,
    /// Its reply was read.
    answered: bool,
}

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        // A call sent and never answered (the deadline, a fault, a dropped future) may have
        // reserved cells in Redis that this instance will never hold: that ends the run.
        self.leases.settle(self.key, self.sent && !self.answered);
    }
}

fn deny_us(retry_us: u64, reason: DenyReason) -> Verdict {
    Verdict::Deny(Denied::new(retry_us.saturating_mul(1000), reason))
}

fn overflow() -> Verdict {
    Verdict::Deny(Denied::new(u64::MAX, DenyReason::ClockOverflow))
}
