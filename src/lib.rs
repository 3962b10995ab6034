//! tollgate: a rate limiter built so that it cannot silently lose its units or its clock.
//!
//! * Quotas cannot be written without a unit: `"10/s"`, `"600/min"`, `"2Gbit/s;burst=64MiB"`;
//!   a bare `"10"` is an error with a hint ([`Quota`]).
//! * A lock-free GCRA engine reads a monotonic clock on every check ([`Clock`]) and returns a
//!   typed [`Verdict`]: allow, deny with an exact retry-after, or pass-through with a reason.
//! * A direct limiter ([`RateLimiter`]) and a keyed one ([`KeyedRateLimiter`]) bounded to
//!   `max_keys` live keys, whatever an attacker sends.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{KeyedRateLimiter, ManualClock, Quota, QuotaErrorKind, RateLimiter, Verdict};
//!
//! let quota: Quota = "2/s".parse()?;
//! let clock = ManualClock::new();
//! let lim = RateLimiter::builder(quota).clock(clock.clone()).build();
//! assert!(lim.check().is_permitted());
//! assert!(lim.check().is_permitted());
//! match lim.check() {
//!     Verdict::Deny(d) => assert_eq!(d.retry_after(), Duration::from_millis(500)),
//!     other => panic!("expected a denial, got {other:?}"),
//! }
//!
//! let per_customer: KeyedRateLimiter<String> = KeyedRateLimiter::new("100/min".parse()?);
//! assert!(per_customer.check_key("customer-42").is_permitted());
//!
//! let err = "10".parse::<Quota>().unwrap_err();
//! assert_eq!(err.kind(), QuotaErrorKind::MissingUnit);
//! assert_eq!(err.to_string(), r#"missing unit in "10": write "10/s" or "10/min""#);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Semantics
//!
//! A quota `C/P` has interval `T = ⌈P/C⌉` ns and tolerance `τ = burst·T`. A check of cost `n`
//! weighs `n·T` and is allowed iff `max(tat, now) + n·T − now ≤ τ`; over any window of length
//! `L` the allowed weight is at most `τ + L`, under any number of threads. A denial's
//! [`retry_after`](Denied::retry_after) is exact: one nanosecond earlier the same check is
//! still denied, at `retry_after` it is allowed. Byte budgets weigh a chunk of `n` bytes
//! `⌈n·P/C⌉` ns.
//!
//! # Caveats
//!
//! * **Clock.** Every check reads the clock; nothing is cached. The default clock is quanta's
//!   TSC clock, calibrated once against the OS clock: a TSC that stalls or drifts gives wrong
//!   readings (use [`Clock::os`] where the TSC is not trustworthy). Manual and custom clocks
//!   that step backwards are absorbed: the step counts as zero elapsed time.
//! * **Rounding.** `T` is rounded up to whole nanoseconds, so the effective rate never
//!   exceeds the written one; below 10^6 per second the error is under 0.1 %. Request rates
//!   faster than one per nanosecond are rejected. τ is capped at 2^62 ns (about 146 years):
//!   a larger burst is reduced, and [`Quota::burst`] reports the effective one.
//! * **Overflow.** A clock reading so close to `u64::MAX` ns that the new TAT would not fit
//!   is denied ([`DenyReason::ClockOverflow`], retry-after [`Duration::MAX`]), never allowed.
//! * **Overflow cell.** When a [`KeyedRateLimiter`] holds `max_keys` live keys, new keys share
//!   one overflow cell, and its denials say [`DenyReason::KeyTableFull`]. Tracked keys are
//!   never reset to make room; idle ones (whose cell is full again) are swept as new keys
//!   arrive.
//! * **Fingerprints.** Keyed limiters store a seeded 64-bit fingerprint per key, never the
//!   key: integer keys never collide; other keys collide with probability about n²/2^65.
//!
//! [`Duration::MAX`]: core::time::Duration::MAX
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cell;
mod check;
mod clock;
mod error;
mod fault;
mod fingerprint;
mod gcra;
mod guard;
mod keyed;
mod limiter;
mod quota;
mod slo;
mod stats;
mod verdict;
mod watchdog;

pub use check::Check;
pub use clock::{Clock, ManualClock};
pub use error::{InsufficientCapacity, QuotaError, QuotaErrorKind};
pub use fault::{
    AlertKind, Baseline, DetectorState, EventCallback, FaultDetector, FaultDetectorBuilder,
    FaultEvent, Figures, HourSample, Mode, BASELINE_HOURS, BASELINE_MIN_HOURS,
};
pub use keyed::{KeyedRateLimiter, KeyedRateLimiterBuilder, DEFAULT_MAX_KEYS, MAX_KEYS_LIMIT};
pub use limiter::{RateLimiter, RateLimiterBuilder};
pub use quota::Quota;
pub use slo::{
    Outcome, SloAlert, SloConfigError, SuccessRate, SuccessRateBuilder, TierSnapshot, MAX_TIERS,
    OTHER_TIER,
};
pub use stats::Stats;
pub use verdict::{Allowed, Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict};
pub use watchdog::{ClockFault, Watchdog};
