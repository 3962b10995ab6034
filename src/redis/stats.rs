//! [`SharedStats`]: what a shared limiter did, fallbacks included, as a metrics exporter
//! reads it.

use crate::sync::atomic::{AtomicU64, Ordering};

/// Counts of a [`SharedRateLimiter`](crate::redis::SharedRateLimiter)'s checks and of its calls to
/// Redis. Every check is counted once by how it was decided; every fallback verdict is
/// counted by the policy that gave it.
///
/// ```
/// use tollgate::redis::SharedStats;
///
/// let s = SharedStats::default();
/// assert_eq!((s.total(), s.fallbacks()), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SharedStats {
    /// Allowed by Redis.
    pub allowed: u64,
    /// Denied by Redis (over quota).
    pub denied: u64,
    /// Denied from the local deny cache, with no round trip.
    pub denied_cached: u64,
    /// Denied before any call: the client clock read past the script's range.
    pub denied_clock_overflow: u64,
    /// Fallback (`FailurePolicy::Local`): allowed by this node's share.
    pub fallback_local_allowed: u64,
    /// Fallback (`FailurePolicy::Local`): denied by this node's share.
    pub fallback_local_denied: u64,
    /// Fallback (`FailurePolicy::Open`): passed through.
    pub fallback_open: u64,
    /// Fallback (`FailurePolicy::Closed`): denied.
    pub fallback_closed: u64,
    /// Calls to Redis that ran past the deadline: a slow or paused server, and what cannot be
    /// told from one — a host that answers nothing at all (powered off or partitioned away
    /// without a reset, packets dropped by a firewall), a refusal that arrives after the
    /// deadline.
    pub timeouts: u64,
    /// Calls to Redis that the server answered with an error (a server or script error, a
    /// write refused under `maxmemory`) or with a reply the script never gives.
    pub errors: u64,
    /// Calls to Redis that found no server: the connection refused, reset or lost under the
    /// call, the host unreachable (a killed server, a wrong port). Answered by the failure
    /// policy as soon as the client reports it, not at the deadline.
    pub refused: u64,
    /// Calls whose TLS handshake failed: a certificate not verified (ours or the server's) or
    /// no TLS on the other end. Each check that met one returned
    /// [`BackendError::CertificateVerification`](crate::redis::BackendError::CertificateVerification)
    /// or [`BackendError::Tls`](crate::redis::BackendError::Tls), not a fallback verdict.
    pub tls_failures: u64,
    /// Calls whose credentials Redis refused or asked for (`WRONGPASS`, `NOAUTH`), each
    /// returned as [`BackendError::Authentication`](crate::redis::BackendError::Authentication).
    pub auth_failures: u64,
    /// Calls the ACL refused (`NOPERM`), each returned as
    /// [`BackendError::Permission`](crate::redis::BackendError::Permission).
    pub permission_denied: u64,
    /// Checks not sent because the breaker was open.
    pub breaker_rejected: u64,
    /// Times the breaker opened.
    pub breaker_opened: u64,
    /// Calls that found the script missing (`NOSCRIPT`) and loaded it again.
    pub script_reloads: u64,
    /// Values the script could not read (another type, garbage): treated as an empty cell
    /// and overwritten on the next allow.
    pub corrupt_values: u64,
    /// Round trips to Redis (calls sent, whatever their outcome).
    pub round_trips: u64,
    /// Allowed from a lease, with no round trip.
    pub leased_allowed: u64,
    /// Denied from a lease (its next cell conforms later), with no round trip.
    pub leased_denied: u64,
    /// Leases taken (script calls that reserved at least one cell).
    pub leases_taken: u64,
    /// Cells reserved by those leases.
    pub cells_leased: u64,
    /// Leased cells that lapsed unspent: no check came before their TAT, a quota change ended
    /// the lease, or the customer's slot was reused for another.
    pub cells_lapsed: u64,
    /// Refunds Redis applied ([`refund_key`](crate::redis::SharedRateLimiter::refund_key)).
    pub refunds: u64,
    /// Charges Redis applied ([`charge_key`](crate::redis::SharedRateLimiter::charge_key)).
    pub charges: u64,
    /// Resets Redis applied ([`reset_key`](crate::redis::SharedRateLimiter::reset_key)).
    pub resets: u64,
    /// Refunds, charges and resets that did not reach Redis (the breaker open, the deadline,
    /// a fault): not applied there, and never sent again.
    pub settles_lost: u64,
    /// Refunds and charges Redis had applied already: the same call sent twice (a client's
    /// retry after a dropped connection), applied once.
    pub settles_repeated: u64,
}

impl SharedStats {
    /// Every check counted.
    pub fn total(&self) -> u64 {
        self.allowed
            + self.denied
            + self.denied_cached
            + self.denied_clock_overflow
            + self.leased_allowed
            + self.leased_denied
            + self.fallbacks()
    }

    /// Every fallback verdict, whatever the policy.
    pub fn fallbacks(&self) -> u64 {
        self.fallback_local_allowed
            + self.fallback_local_denied
            + self.fallback_open
            + self.fallback_closed
    }
}

/// The live counters behind [`SharedStats`]. Relaxed: tallies that order nothing.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) allowed: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) denied_cached: AtomicU64,
    pub(crate) denied_clock_overflow: AtomicU64,
    pub(crate) fallback_local_allowed: AtomicU64,
    pub(crate) fallback_local_denied: AtomicU64,
    pub(crate) fallback_open: AtomicU64,
    pub(crate) fallback_closed: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) tls_failures: AtomicU64,
    pub(crate) auth_failures: AtomicU64,
    pub(crate) permission_denied: AtomicU64,
    pub(crate) breaker_rejected: AtomicU64,
    pub(crate) script_reloads: AtomicU64,
    pub(crate) corrupt_values: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) leased_allowed: AtomicU64,
    pub(crate) leased_denied: AtomicU64,
    pub(crate) leases_taken: AtomicU64,
    pub(crate) cells_leased: AtomicU64,
    pub(crate) cells_lapsed: AtomicU64,
    pub(crate) refunds: AtomicU64,
    pub(crate) charges: AtomicU64,
    pub(crate) resets: AtomicU64,
    pub(crate) settles_lost: AtomicU64,
    pub(crate) settles_repeated: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self, breaker_opened: u64) -> SharedStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SharedStats {
            allowed: r(&self.allowed),
            denied: r(&self.denied),
            denied_cached: r(&self.denied_cached),
            denied_clock_overflow: r(&self.denied_clock_overflow),
            fallback_local_allowed: r(&self.fallback_local_allowed),
            fallback_local_denied: r(&self.fallback_local_denied),
            fallback_open: r(&self.fallback_open),
            fallback_closed: r(&self.fallback_closed),
            timeouts: r(&self.timeouts),
            errors: r(&self.errors),
            refused: r(&self.refused),
            tls_failures: r(&self.tls_failures),
            auth_failures: r(&self.auth_failures),
            permission_denied: r(&self.permission_denied),
            breaker_rejected: r(&self.breaker_rejected),
            breaker_opened,
            script_reloads: r(&self.script_reloads),
            corrupt_values: r(&self.corrupt_values),
            round_trips: r(&self.round_trips),
            leased_allowed: r(&self.leased_allowed),
            leased_denied: r(&self.leased_denied),
            leases_taken: r(&self.leases_taken),
            cells_leased: r(&self.cells_leased),
            cells_lapsed: r(&self.cells_lapsed),
            refunds: r(&self.refunds),
            charges: r(&self.charges),
            resets: r(&self.resets),
            settles_lost: r(&self.settles_lost),
            settles_repeated: r(&self.settles_repeated),
        }
    }
}
