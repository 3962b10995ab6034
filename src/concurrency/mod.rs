//! Concurrency limits: how many requests may be *in flight* at once, rather than how many may
//! start per second.
//!
//! * [`ConcurrencyLimiter`]: one counter of permits out against one limit.
//! * [`KeyedConcurrencyLimiter`]: one counter per key, for at most `max_keys` keys with
//!   permits out; a key with nothing in flight is forgotten.
//!
//! A successful acquire returns a [`Permit`]; dropping it gives the slot back — on a normal
//! return, on a panic that unwinds past it, and when the future holding it is dropped.
//! A refused one is [`Saturated`], with the limit and the count in flight. With feature
//! `tokio`, `acquire().await` waits in a FIFO queue (one per key) for at most a `max_wait`.
//!
//! See the [guide](crate::guide::concurrency) (feature `tower`) for when to limit the rate and
//! when the concurrency.
//!
//! # Exactness
//!
//! A direct limiter keeps the limit and the count in flight in **one** 64-bit word
//! (`limit << 32 | in_flight`, with one bit of the lower half saying waiters are queued, so
//! that a release learns it from its own subtraction and no wake-up is lost). An acquire is one compare-and-swap of that word that succeeds
//! only if the count it replaces is below the slots open to its class *under the limit in
//! the same word*; a release is one `fetch_sub`; [`set_limit`](ConcurrencyLimiter::set_limit)
//! is a compare-and-swap of the upper half. Every acquire is therefore ordered against every
//! other acquire, release and limit change on one word, and each one saw a count below the
//! limit in force at the instant it took its slot: never more permits out than the limit,
//! under any number of threads. Lowering the limit revokes nothing (the count may stay above
//! the new limit until the excess drains); raising it hands the new slots to waiters.
//!
//! A keyed limiter keeps each key's count under the lock of its shard (a sharded table of
//! fingerprints), with the limit read under that lock: an entry exists exactly while its key
//! has permits out or waiters, and it is removed under the same lock that takes its last
//! count to zero, so an acquire racing the removal finds either the live entry or none
//! (and inserts a fresh one): a count is never lost and a key never has two entries.
//! `tests/loom.rs` models both protocols (`concurrency_*`, `permit_*`).
//!
//! A permit orders memory as a semaphore's does: what its holder wrote before giving it
//! back happens before the acquire that takes the slot next (the release's `fetch_sub` is a
//! Release, the acquire's compare-and-swap an Acquire; a keyed limiter's shard lock orders
//! the same). With a limit of 1 a permit can guard data; the model
//! `permit_release_happens_before_the_next_acquire` fails if either side is weakened.
//!
//! # Priorities
//!
//! [`Priorities`](crate::shaping::Priorities) attach as they do to a rate limiter: a class with
//! reserve `r` may take a slot only while the count is below `max(1, ⌊limit·(1 − r)⌋)`, so
//! the last slots are kept for the classes above it. Class 0 (no reserve) has the whole
//! limit.
//!
//! ```
//! use std::num::NonZeroU32;
//! use tollgate::concurrency::ConcurrencyLimiter;
//!
//! let lim = ConcurrencyLimiter::new(NonZeroU32::new(2).unwrap());
//! let a = lim.try_acquire()?;
//! let b = lim.try_acquire()?;
//! let full = lim.try_acquire().unwrap_err();
//! assert_eq!((full.limit(), full.in_flight()), (2, 2));
//! drop(a);
//! assert_eq!(lim.in_flight(), 1);
//! b.release(); // early, explicitly
//! assert_eq!(lim.in_flight(), 0);
//! # Ok::<(), tollgate::concurrency::Saturated>(())
//! ```

use core::fmt;
use core::time::Duration;

mod direct;
mod keyed;
mod permit;
mod queue;
#[cfg(any(feature = "tokio", feature = "tower"))]
mod wait;

pub use direct::{ConcurrencyLimiter, ConcurrencyLimiterBuilder};
pub use keyed::{KeyedConcurrencyLimiter, KeyedConcurrencyLimiterBuilder};
pub use permit::Permit;
#[cfg(feature = "tower")]
pub(crate) use wait::NoSlot;

/// A limit given as a plain integer that is not a valid concurrency limit.
///
/// ```
/// use tollgate::concurrency::{ConcurrencyLimiter, LimitError};
///
/// let err = ConcurrencyLimiter::try_new(0).unwrap_err();
/// assert_eq!(err, LimitError::Zero);
/// assert_eq!(err.to_string(), "a concurrency limit must be at least 1");
/// assert_eq!(ConcurrencyLimiter::try_new(3)?.limit(), 3);
/// # Ok::<(), LimitError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// A limit of 0: nothing could ever run.
    #[error("a concurrency limit must be at least 1")]
    Zero,
}

/// Why an acquire was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SaturatedReason {
    /// The key (or the limiter) has as many permits out as its class may take.
    Limit,
    /// A keyed limiter's table already holds `max_keys` keys, each with permits out: a new
    /// key is refused rather than tracked past the bound (or let through uncounted).
    TableFull,
    /// A wait ran for its whole `max_wait` without a slot freeing.
    Timeout,
    /// A [shared limiter](crate::redis::SharedConcurrencyLimiter) could not reach Redis, and
    /// its failure policy is [`Closed`](crate::redis::FailurePolicy::Closed).
    BackendUnavailable,
}

/// A refused acquire: no slot was open to it.
///
/// ```
/// use std::num::NonZeroU32;
/// use tollgate::concurrency::{ConcurrencyLimiter, SaturatedReason};
///
/// let lim = ConcurrencyLimiter::new(NonZeroU32::new(1).unwrap());
/// let _held = lim.try_acquire()?;
/// let err = lim.try_acquire().unwrap_err();
/// assert_eq!(err.reason(), SaturatedReason::Limit);
/// assert_eq!((err.limit(), err.in_flight(), err.slots()), (1, 1, 1));
/// assert_eq!(err.to_string(), "1 permits in flight of a limit of 1");
/// # Ok::<(), tollgate::concurrency::Saturated>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Saturated {
    limit: u32,
    in_flight: u32,
    slots: u32,
    reason: SaturatedReason,
    waited: Option<Duration>,
}

impl Saturated {
    pub(crate) fn limit_reached(limit: u32, in_flight: u32, slots: u32) -> Self {
        Self {
            limit,
            in_flight,
            slots,
            reason: SaturatedReason::Limit,
            waited: None,
        }
    }

    pub(crate) fn table_full(limit: u32, slots: u32) -> Self {
        Self {
            reason: SaturatedReason::TableFull,
            ..Self::limit_reached(limit, 0, slots)
        }
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // reason: the shared limiter's
    pub(crate) fn backend_unavailable(limit: u32) -> Self {
        Self {
            reason: SaturatedReason::BackendUnavailable,
            ..Self::limit_reached(limit, 0, limit)
        }
    }

    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // reason: the waits' (feature tokio)
    pub(crate) fn timed_out(self, waited: Duration) -> Self {
        Self {
            reason: SaturatedReason::Timeout,
            waited: Some(waited),
            ..self
        }
    }

    /// The limit in force when the acquire was refused.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The permits in flight (for the key, on a keyed limiter) when it was refused; 0 when
    /// the table was full (the key had none).
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The slots open to the acquire's class: the limit, less the reserve of the classes
    /// above it.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Why it was refused.
    pub fn reason(&self) -> SaturatedReason {
        self.reason
    }

    /// How long the acquire waited before giving up (`None` for a `try_acquire`).
    pub fn waited(&self) -> Option<Duration> {
        self.waited
    }
}

impl fmt::Display for Saturated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            SaturatedReason::TableFull => {
                f.write_str("no room for another key: every tracked key has permits in flight")
            }
            SaturatedReason::BackendUnavailable => {
                f.write_str("Redis could not be reached, and the failure policy refuses (Closed)")
            }
            _ if self.slots < self.limit => write!(
                f,
                "{} permits in flight of the {} open to this class (limit {})",
                self.in_flight, self.slots, self.limit
            ),
            _ => write!(
                f,
                "{} permits in flight of a limit of {}",
                self.in_flight, self.limit
            ),
        }?;
        if let Some(w) = self.waited {
            write!(f, " after waiting {w:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Saturated {}
