//! [`SharedConcurrencyStats`]: what a shared concurrency limiter did.

use crate::redis::stats::Counters;
use crate::sync::atomic::{AtomicU64, Ordering};

/// Counts of a [`SharedConcurrencyLimiter`](crate::redis::SharedConcurrencyLimiter)'s acquires,
/// releases and renewals, and of its calls to Redis. Every acquire is counted once, by how it
/// was decided.
///
/// ```
/// use tollgate::redis::SharedConcurrencyStats;
///
/// let s = SharedConcurrencyStats::default();
/// assert_eq!((s.acquired, s.fallbacks()), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SharedConcurrencyStats {
    /// Slots taken in Redis.
    pub acquired: u64,
    /// Acquires Redis refused: the customer held as many slots as the limit.
    pub saturated: u64,
    /// Acquires refused before any call: the client clock read past the script's range.
    pub clock_overflow: u64,
    /// Fallback (`FailurePolicy::Local`): a slot of this node's share taken.
    pub fallback_local_acquired: u64,
    /// Fallback (`FailurePolicy::Local`): refused by this node's share.
    pub fallback_local_saturated: u64,
    /// Fallback (`FailurePolicy::Open`): let through holding no slot.
    pub fallback_open: u64,
    /// Fallback (`FailurePolicy::Closed`): refused.
    pub fallback_closed: u64,
    /// Slots given back in Redis (one per holder in a release call that Redis answered).
    pub released: u64,
    /// Release calls Redis did not answer (down, slow, the breaker open), per slot: each is
    /// sent again at the next renewals, and lapses when its lease ends if none lands.
    pub release_failed: u64,
    /// Acquires whose call went out and got no answer: released in the background (the slot
    /// may have been taken), and if that fails too, lapsing with their lease.
    pub abandoned: u64,
    /// Leases extended by the renewer.
    pub renewed: u64,
    /// Renewals that found the holder gone from Redis: its lease had ended (Redis unreachable
    /// for longer than a lease, a flush, a failover that lost the write). The permit stays
    /// valid here, but its slot no longer counts in Redis, so the customer may briefly hold
    /// more than the limit.
    pub lapsed: u64,
    /// Renewals Redis did not answer.
    pub renew_failed: u64,
    /// Calls to Redis past the deadline.
    pub timeouts: u64,
    /// Calls the server answered with an error, or with a reply the script never gives.
    pub errors: u64,
    /// Calls that found no server (connection refused, reset or lost).
    pub refused: u64,
    /// Calls whose TLS handshake failed, whose credentials or ACL Redis refused: each
    /// returned as an error, never a fallback.
    pub misconfigured: u64,
    /// Calls not sent because the breaker was open.
    pub breaker_rejected: u64,
    /// Times the breaker opened.
    pub breaker_opened: u64,
    /// `NOSCRIPT` replies answered by sending the script again.
    pub script_reloads: u64,
    /// Calls sent to Redis.
    pub round_trips: u64,
}

impl SharedConcurrencyStats {
    /// Acquires answered by the failure policy.
    pub fn fallbacks(&self) -> u64 {
        self.fallback_local_acquired
            + self.fallback_local_saturated
            + self.fallback_open
            + self.fallback_closed
    }
}

/// The live counters beside the call counters ([`Counters`]) the guarded call bumps.
/// Relaxed: tallies that order nothing.
#[derive(Debug, Default)]
pub(crate) struct SlotCounters {
    pub(crate) acquired: AtomicU64,
    pub(crate) saturated: AtomicU64,
    pub(crate) clock_overflow: AtomicU64,
    pub(crate) fallback_local_acquired: AtomicU64,
    pub(crate) fallback_local_saturated: AtomicU64,
    pub(crate) fallback_open: AtomicU64,
    pub(crate) fallback_closed: AtomicU64,
    pub(crate) released: AtomicU64,
    pub(crate) release_failed: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) renewed: AtomicU64,
    pub(crate) lapsed: AtomicU64,
    pub(crate) renew_failed: AtomicU64,
}

impl SlotCounters {
    pub(crate) fn snapshot(&self, calls: &Counters, breaker_opened: u64) -> SharedConcurrencyStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SharedConcurrencyStats {
            acquired: r(&self.acquired),
            saturated: r(&self.saturated),
            clock_overflow: r(&self.clock_overflow),
            fallback_local_acquired: r(&self.fallback_local_acquired),
            fallback_local_saturated: r(&self.fallback_local_saturated),
            fallback_open: r(&self.fallback_open),
            fallback_closed: r(&self.fallback_closed),
            released: r(&self.released),
            release_failed: r(&self.release_failed),
            abandoned: r(&self.abandoned),
            renewed: r(&self.renewed),
            lapsed: r(&self.lapsed),
            renew_failed: r(&self.renew_failed),
            timeouts: r(&calls.timeouts),
            errors: r(&calls.errors),
            refused: r(&calls.refused),
            misconfigured: r(&calls.tls_failures)
                + r(&calls.auth_failures)
                + r(&calls.permission_denied),
            breaker_rejected: r(&calls.breaker_rejected),
            breaker_opened,
            script_reloads: r(&calls.script_reloads),
            round_trips: r(&calls.round_trips),
        }
    }
}
