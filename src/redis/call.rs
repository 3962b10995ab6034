//! One guarded call to Redis, the same for every shared limiter (rate and concurrency): the
//! breaker's permit, the script under the deadline — on one server, one retry on a connection
//! found lost and the switch to cluster mode on a cluster reply; on a cluster, redirections
//! followed until the deadline — and its outcome classified and counted.

use core::future::Future;
use core::time::Duration;

use redis::aio::ConnectionLike;
use redis::RedisError;

use super::breaker::{self, Breakers, Permit};
use super::conn::{self, Backend, Con};
use super::error::BackendError;
use super::key;
use super::stats::{bump, Counters};
use crate::engine::clock::Clock;
use crate::sync::atomic::AtomicU64;

/// A script call that can run on either kind of connection.
pub(crate) trait Eval: Sync {
    /// What a well-formed reply reads as.
    type Out: Send;
    /// Runs the call once on `con` (`EVALSHA`, and `EVAL` after `NOSCRIPT`, setting
    /// `reloaded`): the reply, or why it is not one the script gives, or the client's error.
    fn run<C: ConnectionLike + Send>(
        &self,
        con: &mut C,
        reloaded: &mut bool,
    ) -> impl Future<Output = Result<Result<Self::Out, String>, RedisError>> + Send;
}

/// What a guarded call came to, when it was not an error.
pub(crate) enum Called<T> {
    /// The breaker is open: nothing was sent.
    Rejected,
    /// Redis answered, with a reply the script gives.
    Answered(T),
    /// Sent, and Redis did not decide: the deadline, a fault, a reply the script never gives.
    Failed,
}

/// The parts of a shared limiter a call needs.
pub(crate) struct Guard<'a> {
    pub(crate) backend: &'a Backend,
    pub(crate) breakers: &'a Breakers,
    pub(crate) counters: &'a Counters,
    pub(crate) deadline: Duration,
}

impl Guard<'_> {
    /// Sends `eval`, whose first key is `first_key` (it routes the call, and picks the breaker
    /// of its slot range on a cluster).
    ///
    /// # Errors
    ///
    /// A misconfiguration the call met (a certificate, the credentials, the ACL, a cluster
    /// these URLs cannot reach): no waiting repairs it, so it is the caller's error, and the
    /// breaker hears a success (Redis answered).
    pub(crate) async fn call<S: Eval>(
        &self,
        first_key: &[u8],
        eval: &S,
    ) -> Result<Called<S::Out>, BackendError> {
        let (backend, c) = (self.backend, self.counters);
        let real = Clock::os();
        let slot = backend.is_cluster().then(|| key::slot(first_key));
        let (breaker, range) = (self.breakers.of(slot), breaker::range_of(slot));
        let permit = breaker.permit(real.now_nanos());
        if permit == Permit::Reject {
            bump(&c.breaker_rejected, 1);
            return Ok(Called::Rejected);
        }
        let mut reloaded = false;
        let mut routed = false;
        bump(&c.round_trips, 1);
        let attempt = self.attempt(eval, &mut reloaded, &mut routed);
        let outcome = tokio::time::timeout(self.deadline, attempt).await;
        if reloaded {
            bump(&c.script_reloads, 1);
        }
        if backend.is_cluster() {
            match &outcome {
                Ok(Ok(_)) => backend.cluster_ok(range),
                // A fresh connection: every open breaker probes at once rather than after
                // its cool-down, so customers come back as soon as the new client finds
                // their shard.
                Err(_) => {
                    if backend.cluster_timed_out(range) {
                        self.breakers.probe_now(real.now_nanos());
                    }
                }
                Ok(Err(_)) => {}
            }
        }
        let fault = match outcome {
            Ok(Ok(Ok(reply))) => {
                breaker.success(real.now_nanos(), permit);
                return Ok(Called::Answered(reply));
            }
            Ok(Err(Attempt::Config(e))) => return Err(e),
            // A reply the script never gives (a proxy in between, another script under the
            // same SHA) decides nothing: a backend fault, answered like Redis being down.
            Ok(Ok(Err(_unexpected))) => &c.errors,
            Ok(Err(Attempt::Redis(e))) => {
                if let Some((err, count)) = misconfigured(c, &e) {
                    if e.kind() == redis::ErrorKind::AuthenticationFailed {
                        backend.renew();
                    }
                    // Redis is there and answered: no outage, so the breaker hears a success
                    // (a probe closes it, and every later call meets the error too) and the
                    // failure policy is not asked — its verdicts would hide a fault that no
                    // waiting repairs.
                    breaker.success(real.now_nanos(), permit);
                    bump(count, 1);
                    return Err(err);
                }
                fault_counter(c, &e)
            }
            // Still being redirected at the deadline (a slot in migration): Redis did not
            // decide in time, but no node failed, so the breaker is not told.
            Err(_) if routed => {
                bump(&c.timeouts, 1);
                return Ok(Called::Failed);
            }
            Err(_) => &c.timeouts,
        };
        breaker.failure(real.now_nanos(), permit);
        bump(fault, 1);
        Ok(Called::Failed)
    }

    /// One call, until Redis decides or fails, with no deadline of its own (the caller's cuts
    /// it). One server: a call that finds the connection lost starts a reconnect and fails at
    /// once, so it tries once more on the new connection, and the first probe after a restart
    /// succeeds rather than the one after it (the reconnect is one attempt with no backoff: with
    /// no server, the retry is refused at once too); a cluster reply switches to cluster mode
    /// and sends the call again there. A cluster: the client follows redirections itself, and
    /// one that outlives its retries (`routed`) is sent again, as routing is not failure.
    async fn attempt<S: Eval>(
        &self,
        eval: &S,
        reloaded: &mut bool,
        routed: &mut bool,
    ) -> Result<Result<S::Out, String>, Attempt> {
        let backend = self.backend;
        let mut cluster = match backend.con().map_err(Attempt::Config)? {
            Con::Cluster(c) => c,
            Con::Standalone(mut con) => {
                let first = match eval.run(&mut con, reloaded).await {
                    Err(e)
                        if (e.is_io_error() || e.is_connection_dropped())
                            && BackendError::misconfiguration(&e).is_none() =>
                    {
                        eval.run(&mut con, reloaded).await
                    }
                    other => other,
                };
                match first {
                    Err(e) if conn::is_cluster_reply(&e) => {
                        backend.to_cluster().map_err(Attempt::Config)?
                    }
                    Err(e) if conn::select_refused(&e).is_some() => {
                        let refused = conn::select_refused(&e);
                        return Err(Attempt::Config(backend.no_cluster(refused)));
                    }
                    other => return other.map_err(Attempt::Redis),
                }
            }
        };
        loop {
            match eval.run(&mut cluster, reloaded).await {
                Err(e) if conn::is_routing(&e) => {
                    *routed = true;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                other => return other.map_err(Attempt::Redis),
            }
        }
    }
}

/// Why an attempt ended without a reply.
enum Attempt {
    /// A fault of Redis (or of the way to it): the failure policy answers.
    Redis(RedisError),
    /// A configuration that cannot work (a cluster behind a URL that cannot reach one).
    Config(BackendError),
}

/// The counter of a call the client failed: `timeouts` for an I/O timeout (a connect that got
/// no answer), `refused` for any other I/O error — no server to talk to: the connection
/// refused, reset, aborted or closed under the call (what a killed server looks like), the
/// host unreachable — and `errors` for what a server answered (a server or script error, a
/// reply of the wrong type).
fn fault_counter<'a>(c: &'a Counters, e: &RedisError) -> &'a AtomicU64 {
    if e.is_timeout() {
        &c.timeouts
    } else if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() {
        &c.refused
    } else {
        &c.errors
    }
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
