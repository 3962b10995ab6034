//! The check path of [`SharedRateLimiter`]: the deny cache, the breaker, one script call under
//! the deadline, its outcome classified, and the failure policy's verdict when Redis cannot
//! decide.

use crate::sync::atomic::AtomicU64;

use redis::RedisError;

use super::breaker::{self, Permit};
use super::builder::FailurePolicy;
use super::conn::{self, Con};
use super::error::BackendError;
use super::key::{self, MAX_KEY_BYTES};
use super::lease::{Ask, Lease, Leases, Spend};
use super::limit::{Limit, MAX_NOW_US};
use super::limiter::SharedRateLimiter;
use super::script::{Call, Reply};
use super::stats::{bump, Counters};
use crate::engine::check::Check;
use crate::engine::clock::{saturating_nanos, Clock};
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
        let keys = self.keys(key);
        let real = Clock::os();
        let cluster = inner.backend.is_cluster();
        let slot = cluster.then(|| key::slot(&keys[0]));
        let (breaker, range) = (inner.breakers.of(slot), breaker::range_of(slot));
        let permit = breaker.permit(real.now_nanos());
        if permit == Permit::Reject {
            bump(&inner.counters.breaker_rejected, 1);
            return Ok(self.fallback(key, n, charge));
        }
        let call = Call {
            keys: &keys,
            now,
            charge,
            min_ttl_ms: inner.min_ttl_ms,
            limits: &args,
            lease: ask.map(|a| (a.cells, a.after)),
            horizon: inner.leases.as_ref().map_or(0, |l| l.horizon),
        };
        let mut reloaded = false;
        let mut routed = false;
        bump(&inner.counters.round_trips, 1);
        if let Some(s) = &mut settle {
            s.sent = true;
        }
        let attempt = self.attempt(&call, &mut reloaded, &mut routed);
        let outcome = tokio::time::timeout(inner.deadline, attempt).await;
        if reloaded {
            bump(&inner.counters.script_reloads, 1);
        }
        if inner.backend.is_cluster() {
            match &outcome {
                Ok(Ok(_)) => inner.backend.cluster_ok(range),
                // A fresh connection: every open breaker probes at once rather than after
                // its cool-down, so customers come back as soon as the new client finds
                // their shard.
                Err(_) => {
                    if inner.backend.cluster_timed_out(range) {
                        inner.breakers.probe_now(real.now_nanos());
                    }
                }
                Ok(Err(_)) => {}
            }
        }
        let fault = match outcome {
            Ok(Ok(Ok(reply))) => {
                if let Some(s) = &mut settle {
                    s.answered = true;
                }
                breaker.success(real.now_nanos(), permit);
                return Ok(self.verdict(key, (&limits, &args), reply, local_now, ask.as_ref()));
            }
            Ok(Err(Attempt::Config(e))) => return Err(e),
            // A reply the script never gives (a proxy in between, another script under the
            // same SHA) decides nothing: a backend fault, answered like Redis being down.
            Ok(Ok(Err(_unexpected))) => &inner.counters.errors,
            Ok(Err(Attempt::Redis(e))) => {
                if let Some((err, count)) = misconfigured(&inner.counters, &e) {
                    if e.kind() == redis::ErrorKind::AuthenticationFailed {
                        inner.backend.renew();
                    }
                    // Redis is there and answered: no outage, so the breaker hears a success
                    // (a probe closes it, and every later check meets the error too) and the
                    // failure policy is not asked — its verdicts would hide a fault that no
                    // waiting repairs.
                    breaker.success(real.now_nanos(), permit);
                    bump(count, 1);
                    return Err(err);
                }
                fault(&inner.counters, &e)
            }
            // Still being redirected at the deadline (a slot in migration): Redis did not
            // decide in time, but no node failed, so the breaker is not told.
            Err(_) if routed => {
                bump(&inner.counters.timeouts, 1);
                return Ok(self.fallback(key, n, charge));
            }
            Err(_) => &inner.counters.timeouts,
        };
        breaker.failure(real.now_nanos(), permit);
        bump(fault, 1);
        Ok(self.fallback(key, n, charge))
    }

    /// One call, until Redis decides or fails, with no deadline of its own (the caller's cuts
    /// it). One server: a call that finds the connection lost starts a reconnect and fails at
    /// once, so it tries once more on the new connection, and the first probe after a restart
    /// succeeds rather than the one after it (the reconnect is one attempt with no backoff: with
    /// no server, the retry is refused at once too); a cluster reply switches to cluster mode
    /// and sends the call again there. A cluster: the client follows redirections itself, and
    /// one that outlives its retries (`routed`) is sent again, as routing is not failure.
    async fn attempt(
        &self,
        call: &Call<'_>,
        reloaded: &mut bool,
        routed: &mut bool,
    ) -> Result<Result<Reply, String>, Attempt> {
        let inner = &*self.inner;
        let script = &inner.script;
        let mut cluster = match inner.backend.con().map_err(Attempt::Config)? {
            Con::Cluster(c) => c,
            Con::Standalone(mut con) => {
                let first = match script.run(&mut con, call, reloaded).await {
                    Err(e)
                        if (e.is_io_error() || e.is_connection_dropped())
                            && BackendError::misconfiguration(&e).is_none() =>
                    {
                        script.run(&mut con, call, reloaded).await
                    }
                    other => other,
                };
                match first {
                    Err(e) if conn::is_cluster_reply(&e) => {
                        inner.backend.to_cluster().map_err(Attempt::Config)?
                    }
                    Err(e) if conn::is_select_refused(&e) => {
                        return Err(Attempt::Config(inner.backend.no_cluster()));
                    }
                    other => return other.map_err(Attempt::Redis),
                }
            }
        };
        loop {
            match script.run(&mut cluster, call, reloaded).await {
                Err(e) if conn::is_routing(&e) => {
                    *routed = true;
                    tokio::time::sleep(core::time::Duration::from_millis(1)).await;
                }
                other => return other.map_err(Attempt::Redis),
            }
        }
    }

    /// The verdict for the script's reply to a check (or to the lease call `ask`),
    /// remembering denials in the deny cache.
    fn verdict(
        &self,
        key: &[u8],
        (limits, args): (&[Limit], &[(u64, u64)]),
        reply: Reply,
        local_now: u64,
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
                inner
                    .cache
                    .remember(i, key, local_now + (a - w), tau, unit, local_now);
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

/// The counter of a call the client failed: `timeouts` for an I/O timeout (a connect that got
/// no answer), `refused` for any other I/O error — no server to talk to: the connection
/// refused, reset, aborted or closed under the call (what a killed server looks like), the
/// host unreachable — and `errors` for what a server answered (a server or script error, a
/// reply of the wrong type).
fn fault<'a>(c: &'a Counters, e: &RedisError) -> &'a AtomicU64 {
    if e.is_timeout() {
        &c.timeouts
    } else if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() {
        &c.refused
    } else {
        &c.errors
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

/// Why an attempt ended without a reply.
enum Attempt {
    /// A fault of Redis (or of the way to it): the failure policy answers.
    Redis(RedisError),
    /// A configuration that cannot work (a cluster behind a URL that cannot reach one).
    Config(BackendError),
}

/// The error and the counter of a call that met a misconfiguration (a certificate, TLS, the
/// credentials, the ACL), or `None` for a fault the failure policy answers.
fn misconfigured<'a>(c: &'a Counters, e: &RedisError) -> Option<(BackendError, &'a AtomicU64)> {
    let err = BackendError::misconfiguration(e)?;
    let count = match err {
        BackendError::Authentication(_) => &c.auth_failures,
        BackendError::Permission(_) => &c.permission_denied,
        _ => &c.tls_failures,
    };
    Some((err, count))
}

fn deny_us(retry_us: u64, reason: DenyReason) -> Verdict {
    Verdict::Deny(Denied::new(retry_us.saturating_mul(1000), reason))
}

fn overflow() -> Verdict {
    Verdict::Deny(Denied::new(u64::MAX, DenyReason::ClockOverflow))
}
