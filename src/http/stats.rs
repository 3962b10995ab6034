//! The counters of a layer, shared by all its clones and services.

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::response::{RejectReason, Rejection};

/// The counters of a layer (shared by all its clones), read with [`RateLimitLayer::stats`](super::RateLimitLayer::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStats {
    /// Requests passed on to the inner service (including passed-through ones).
    pub allowed: u64,
    /// Requests rejected because a limit denied them (including after a wait).
    pub denied: u64,
    /// Requests passed through (shadow policy, tripped detector, failed source): marked with
    /// [`PassedThrough`](super::PassedThrough) in the response extensions.
    pub passed_through: u64,
    /// Requests no policy matched: passed on with no `RateLimit` field.
    pub unmatched: u64,
    /// Requests rejected for a missing or malformed key or header.
    pub bad_requests: u64,
    /// Requests that waited in queue mode (whatever the end).
    pub queued: u64,
    /// Denied requests rejected at once because the queue was full.
    pub queue_full: u64,
    /// Requests one limit allowed and a later one denied after the peek said all would
    /// allow, where the allowing source could not refund (the built-in sources refund; see
    /// [`PolicySource::refund`](super::PolicySource::refund)). Also counted: a charge of a
    /// request whose judging stopped early (a panicking source, a dropped future) that could
    /// not be given back at once (a refund that panics, or an async one still pending on
    /// its first poll).
    pub races: u64,
    /// Policy source failures (passed through).
    pub source_errors: u64,
    /// Requests answered `500` because the server put no peer address in them
    /// ([`KeyError::NoPeerAddress`](super::KeyError::NoPeerAddress): a [`PeerIp`](super::PeerIp)
    /// or [`ForwardedIp`](super::ForwardedIp) key under a server not set up to pass the
    /// connection's address). Not counted in `bad_requests`, and never charged to a key.
    pub no_peer_address: u64,
    /// Requests answered `429` because a concurrency limit
    /// ([`RateLimitLayerBuilder::concurrency`](super::RateLimitLayerBuilder::concurrency)) had no slot open: not counted in `denied`,
    /// and charged to no rate limit.
    pub saturated: u64,
    /// Requests an exemption ([`RateLimitLayerBuilder::exempt`](super::RateLimitLayerBuilder::exempt),
    /// [`exempt_ips`](super::RateLimitLayerBuilder::exempt_ips),
    /// [`exempt_preflight`](super::RateLimitLayerBuilder::exempt_preflight)) handed straight
    /// to the inner service: judged by no limit, and not counted in `allowed`.
    pub exempt: u64,
    /// Exemption rules that panicked (a predicate, or the peer-address lookup of
    /// `exempt_ips`): the panic was contained and the rule did not exempt the request,
    /// which was then judged as usual.
    pub exempt_panics: u64,
    /// Allowed requests whose charge a [`settle`](super::RateLimitLayerBuilder::settle)
    /// function gave back, whole or in part, after their response.
    pub settle_refunds: u64,
    /// Allowed requests a settle function charged more after their response.
    pub settle_charges: u64,
    /// Settle functions (or a limit's refund or charge) that panicked: contained, the
    /// charge stands.
    pub settle_panics: u64,
    /// Responses whose cost could not be read ([`Settle::Unreadable`](super::Settle::Unreadable):
    /// a negative, non-numeric or huge header value): ignored, the charge stands.
    pub settle_unreadable: u64,
    /// Settlements a limit could not apply (a source without refunds or charges, or an async
    /// one not done on its first poll): never retried, so never applied twice. Also counted:
    /// a trailer settle under [`OwnBody`](super::OwnBody), whose body the layer cannot read
    /// (once per response).
    pub settle_lost: u64,
    /// Responses whose body did not end, so a
    /// [`settle_trailers`](super::RateLimitLayerBuilder::settle_trailers) function was never
    /// asked: the body was dropped first (the client hung up) or failed with an error. The
    /// charge stands.
    pub settle_hangups: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) allowed: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) passed_through: AtomicU64,
    pub(crate) unmatched: AtomicU64,
    pub(crate) bad_requests: AtomicU64,
    pub(crate) queued: AtomicU64,
    pub(crate) queue_full: AtomicU64,
    pub(crate) races: AtomicU64,
    pub(crate) source_errors: AtomicU64,
    pub(crate) no_peer_address: AtomicU64,
    pub(crate) saturated: AtomicU64,
    pub(crate) exempt: AtomicU64,
    pub(crate) exempt_panics: AtomicU64,
    pub(crate) settle_refunds: AtomicU64,
    pub(crate) settle_charges: AtomicU64,
    pub(crate) settle_panics: AtomicU64,
    pub(crate) settle_unreadable: AtomicU64,
    pub(crate) settle_lost: AtomicU64,
    pub(crate) settle_hangups: AtomicU64,
    /// Whether the warning for a request without a peer address was given (once a layer).
    pub(crate) warned_no_peer: AtomicBool,
}

impl Counters {
    // Relaxed: independent monotonic counters, read for reporting only.
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LayerStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LayerStats {
            allowed: r(&self.allowed),
            denied: r(&self.denied),
            passed_through: r(&self.passed_through),
            unmatched: r(&self.unmatched),
            bad_requests: r(&self.bad_requests),
            queued: r(&self.queued),
            queue_full: r(&self.queue_full),
            races: r(&self.races),
            source_errors: r(&self.source_errors),
            no_peer_address: r(&self.no_peer_address),
            saturated: r(&self.saturated),
            exempt: r(&self.exempt),
            exempt_panics: r(&self.exempt_panics),
            settle_refunds: r(&self.settle_refunds),
            settle_charges: r(&self.settle_charges),
            settle_panics: r(&self.settle_panics),
            settle_unreadable: r(&self.settle_unreadable),
            settle_lost: r(&self.settle_lost),
            settle_hangups: r(&self.settle_hangups),
        }
    }

    /// Counts a request rejected before any limit was asked: a server without peer
    /// addresses apart from the clients' bad requests.
    pub(crate) fn rejected_early(&self, rejection: &Rejection) {
        if rejection.reason() == RejectReason::NoPeerAddress {
            Self::bump(&self.no_peer_address);
            self.warn_no_peer();
        } else {
            Self::bump(&self.bad_requests);
        }
    }

    /// Warns (target `tollgate::http`, feature `tracing`) the first time only: every request
    /// of a server set up this way lacks the address, and one line names the fix. `true` if
    /// this call was the first.
    pub(crate) fn warn_no_peer(&self) -> bool {
        // Relaxed: a flag for one log line; nothing else is ordered by it.
        let first = !self.warned_no_peer.swap(true, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        if first {
            tracing::warn!(
                target: "tollgate::http",
                fix = super::key::NO_PEER_ADDRESS,
                "rate limit layer: requests carry no peer address, answering 500 (this warning is given once)"
            );
        }
        first
    }
}
