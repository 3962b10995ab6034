//! tollgate: a rate limiter built so that it cannot silently lose its units or its clock.
//!
//! * Quotas cannot be written without a unit: `"10/s"`, `"600/min"`, `"2Gbit/s;burst=64MiB"`;
//!   a bare `"10"` is an error with a hint ([`Quota`]).
//! * A lock-free GCRA engine reads a monotonic clock on every check ([`Clock`]) and returns a
//!   typed [`Verdict`]: allow, deny with an exact retry-after, or pass-through with a reason.
//! * A direct limiter ([`RateLimiter`]) and a keyed one ([`KeyedRateLimiter`]) bounded to
//!   `max_keys` live keys, whatever an attacker sends.
//! * A cost admitted earlier can be given back ([`RateLimiter::refund`],
//!   [`KeyedRateLimiter::refund_key`]: never past a full cell), and callers that would rather
//!   wait than be denied can ([`Wait`]: `until_ready`, `until_key_ready`, …, with jitter, a
//!   `max_wait` and no reservation held, so a dropped wait leaves nothing behind).
//! * With the feature `redis`, `SharedRateLimiter`: one limit shared by every instance of a
//!   service, one Lua script call per check, behind a deadline, a circuit breaker and a
//!   failure policy that says so in its verdicts.
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
//! still denied, at `retry_after` it is allowed. For an HTTP `Retry-After` header use
//! [`retry_after_secs`](Denied::retry_after_secs): whole seconds rounded up, never 0, at most
//! a day. Byte budgets weigh a chunk of `n` bytes `⌈n·P/C⌉` ns.
//!
//! # Fault detection
//!
//! Incident 000 was a limiter that denied everyone for hours because its clock lagged, while
//! its fail-open fallback waited for an error that never came. Attach a [`FaultDetector`] (and
//! a clock [`Watchdog`]) through the limiter's builder and a limiter that has become the fault
//! stands aside — visibly, briefly, and never for an attacker.
//!
//! **When it trips.** Every sub-bucket (10 s by default) the detector measures the window
//! (60 s): for a keyed limiter the *breadth* — the share of a seeded sample of up to 1,024
//! *previously conforming* keys (keys with a mostly-allowed sub-bucket in the last 24 h) that
//! are now mostly denied; for a direct limiter the deny ratio together with the allowed
//! throughput. It trips when all of these hold:
//!
//! * a [`Baseline`] exists (24 hourly samples, imported or learned; without one it only raises
//!   [`AlertKind::ColdStart`]);
//! * there are enough samples (20 eligible panel keys, or 100 checks);
//! * the measure exceeds `max(5 × baseline, 0.2)` and, for a direct limiter, the allowed
//!   throughput fell below the baseline's ÷ 5;
//! * the rise was sudden: within the 10 minutes before the window the measure was under a
//!   fifth of the threshold (a slow ramp raises [`AlertKind::Drift`] instead);
//! * the last trip was more than the cool-down (5 min) ago.
//!
//! Then checks return [`Verdict::PassThrough`] with [`PassReason::DenyAnomaly`] and the shadow
//! verdict — exactly what an enforcing limiter fed the same requests would say, because the
//! shadow step writes what an enforcing step writes and nothing else — under a ceiling of 10×
//! the quota, kept on a cell of its own (past it: [`DenyReason::Ceiling`]). It enforces again after a full window of
//! calm sub-buckets, or after 15 min, extended while the anomaly persists up to 1 h
//! ([`AlertKind::PassThroughExhausted`]). Every pass-through is counted ([`Stats`]) and every
//! transition is a [`FaultEvent`].
//!
//! **Why floods cannot trip it.** A flood from a few keys makes *those* keys denied: breadth
//! moves by their share of the panel, and the panel is a bottom-k sample by a seeded hash that
//! an attacker can neither see nor aim at; 1 % of keys flooding at 100× moves breadth by about
//! 1 %, far under the 0.2 floor. A key-cardinality flood adds keys that conform (or that land
//! in the overflow cell, whose verdicts are left out of breadth and raise
//! [`AlertKind::OverflowCell`] instead). A single client flooding a direct limiter raises the
//! deny ratio but not the allowed throughput, which stays at the quota — and both must move.
//!
//! The [`Watchdog`] compares the fast clock's rate with a reference clock every N checks
//! (never on the fast clock's own time) and, on a stall, lag or backward step, passes traffic
//! through with [`PassReason::ClockFault`] for one window, then enforces on the reference
//! clock. A [`SuccessRate`] tracks the customer's view per tier, counting 429s as failures.
//!
//! # Retries, priorities and bandwidth
//!
//! Incident 003 was a link shared by replica recovery and heartbeats, and clients that retried
//! failed writes at once, ten times. Two things attach through the limiter's builder and are
//! chosen per check with [`Check`] (through [`RateLimiter::check_with`] and
//! [`KeyedRateLimiter::check_key_with`]); a limiter without them pays nothing for them.
//!
//! * [`Priorities`]: classes share one cell, and each class leaves a share of the burst to the
//!   classes above it, so heartbeats (class 0) always find capacity while recovery (a lower
//!   class) is capped. A plain `check` is class 0.
//! * [`RetryBudget`]: a retry ([`Check::attempt`] ≥ 1) must fit the budget — 10 % of the
//!   originals over a sliding 10 s, plus 10 retries per second — as well as the quota; over it,
//!   [`DenyReason::RetryBudget`]. A retry the quota denies costs no budget; originals are
//!   never denied by it. [`Stats`] counts originals and retries apart.
//! * [`Backoff`], for clients: exponential with full jitter, never a zero delay, bounded
//!   attempts, and after a denial `retry_after` plus a jitter window of at least
//!   `retry_after / 2`, so denied clients do not come back in lockstep.
//! * Byte budgets (`"2Gbit/s;burst=64MiB"`) charge chunks by their size in bytes and change
//!   live with `set_quota` — 8 Gbit/s to 2 Gbit/s without a restart and without a free burst.
//!
//! # Changing a quota live
//!
//! [`RateLimiter::set_quota`], [`KeyedRateLimiter::set_quota`], a `LimitsHandle` reload and
//! a `Rollout` stage keep each cell's *fill level*: a cell that has used the share
//! `u = clamp((tat − now)/τ_old, 0, 1)` of its burst has used the same share of the new burst,
//! `tat' = now + ⌈u·τ_new⌉`, rounded toward "used". Empty stays empty, full stays full, half
//! stays half; switching back and forth grants nothing; loosening never locks anyone out and
//! tightening never grants. Checks racing a change never apply one quota to a cell written
//! under the other: at one instant at most the looser burst, plus one check in flight per
//! thread, passes. A keyed limiter rescales its table in one walk (in groups of 64 slots),
//! while checks of tracked keys go on lock-free.
//!
//! The share is what carries over, so alternating quickly between a small τ and a large
//! burst can admit more than either quota alone would over the same time (the cell refills
//! at the small τ's pace and spends in the large burst); each single change grants nothing.
//!
//! ```
//! use tollgate::{Check, ManualClock, Priorities, RateLimiter, RetryBudget};
//!
//! let link = RateLimiter::builder("2Gbit/s;burst=64MiB".parse()?)
//!     .clock(ManualClock::new())
//!     .priorities(Priorities::new([(0, 0.0), (2, 0.5)])?)
//!     .retry_budget(RetryBudget::new())
//!     .build();
//! let chunk = Check::cost(64 << 10).class(2); // recovery: at most half the burst
//! assert!(link.check_with(chunk)?.is_permitted());
//! assert!(link.check_with(Check::cost(512).attempt(1))?.is_permitted()); // the floor
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Metrics and tracing
//!
//! With the `metrics` feature, a [`MetricsRegistry`] exports what the limiters count anyway —
//! `tollgate_checks_total{limiter, policy, outcome, reason}`, retries, live keys, the
//! detector's mode and deny breadth, reloads, rollout stages, the success rate per tier —
//! through the [`metrics`](https://docs.rs/metrics) facade when a scrape calls
//! [`publish`](MetricsRegistry::publish): nothing per check, nothing on a timer, and labels
//! that never carry a key. With the `tracing` feature, detector trips, recoveries and alerts
//! (target `tollgate::detector`), clock faults (`tollgate::watchdog`), success-rate alerts
//! (`tollgate::success_rate`), reloads (`tollgate::reload`) and rollout stages and halts
//! (`tollgate::rollout`) are [`tracing`](https://docs.rs/tracing) events with their figures;
//! none is emitted per check. The README's "Metrics and tracing" lists every metric, label
//! and event field, with dashboard queries.
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
//!   is denied ([`DenyReason::ClockOverflow`], retry-after [`Duration::MAX`], a `Retry-After`
//!   of one day), never allowed.
//! * **Overflow cell.** When a [`KeyedRateLimiter`] holds `max_keys` live keys, new keys share
//!   one overflow cell, and its denials say [`DenyReason::KeyTableFull`]. Tracked keys are
//!   never reset to make room; idle ones (whose cell is full again) are swept as new keys
//!   arrive. At the cap, [`Admission`] (on by default) lets a key seen only once displace
//!   only a key idle for τ; finding none, it shares the overflow cell.
//! * **Fingerprints.** Keyed limiters store a seeded 64-bit fingerprint per key, never the
//!   key: integer keys never collide; other keys collide with probability about n²/2^65.
//! * **Pass-through and the clock.** The detector's windows run on its own clock; give it one
//!   independent of the limiter's where you can. The ceiling during a pass-through runs on the
//!   limiter's clock: on a frozen clock it admits 10 bursts and then denies. Event callbacks
//!   run inside `catch_unwind`, which does nothing under `panic = abort`.
//! * **New keys take a lock.** Checks of tracked keys are lock-free; a key's first check (and
//!   sweeping) takes one mutex per limiter.
//!
//! [`Duration::MAX`]: core::time::Duration::MAX
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The layers, bottom to top: engine, safety, shaping, limiter, limits; then, each behind its
// feature and in a folder of its own, `redis` (limits shared across instances), `metrics`
// (observability) and, on top, `http` (tower middleware). The CLI lives in `bin/`.
// Concurrency limits: permits in flight, direct and per key (issue 31).
pub mod concurrency;
mod engine;
mod limiter;
// Every atomic, lock and thread-local: std's and parking_lot's, or loom's under `cfg(loom)`.
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
mod limits;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
mod redis;
mod sync;
// Reads every layer below it, `redis` included (a shared limiter's counts).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
mod metrics;
mod safety;
mod shaping;

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;

#[cfg(feature = "redis")]
pub use crate::redis::breaker::BreakerConfig;
#[cfg(feature = "redis")]
pub use crate::redis::builder::{FailurePolicy, SharedRateLimiterBuilder, DEFAULT_DEADLINE};
#[cfg(feature = "redis")]
pub use crate::redis::error::BackendError;
#[cfg(feature = "redis")]
pub use crate::redis::limit::{MAX_NOW_MICROS, MAX_TAU_MICROS};
#[cfg(feature = "redis")]
pub use crate::redis::limiter::SharedRateLimiter;
#[cfg(feature = "redis")]
pub use crate::redis::stats::SharedStats;
pub use engine::check::Check;
pub use engine::clock::{Clock, ManualClock};
#[cfg(feature = "config")]
pub use engine::error::{ConfigError, ConfigErrorKind};
pub use engine::error::{InsufficientCapacity, QuotaError, QuotaErrorKind};
pub use engine::quota::Quota;
pub use engine::stats::Stats;
pub use engine::verdict::{Allowed, Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict};
pub use limiter::direct::{RateLimiter, RateLimiterBuilder};
pub use limiter::keyed::{
    Admission, KeyedRateLimiter, KeyedRateLimiterBuilder, DEFAULT_FILTER_BYTES, DEFAULT_MAX_KEYS,
    MAX_KEYS_LIMIT,
};
#[cfg(feature = "tokio")]
pub use limiter::wait::TokioSleep;
pub use limiter::wait::Wait;
#[cfg(feature = "config")]
pub use limits::document::{
    Acknowledgement, Change, ConfigErrors, Diff, Direction, Format, Limits, Matcher, Policy,
    PolicyChange, QuotaChange, Tightening, TrafficMove, DEFAULT_GUARD, MAX_ALSO_POLICIES,
    MAX_DEPTH, MAX_DOCUMENT_BYTES, MAX_LISTED_ERRORS, MAX_POLICIES,
};
#[cfg(feature = "config")]
pub use limits::reload::{
    Decision, LimitsHandle, LimitsHandleBuilder, MultiDecision, PolicyVerdict,
    DEFAULT_KNOWN_GOOD_AFTER,
};
#[cfg(feature = "config")]
pub use limits::rollout::{
    Rollout, RolloutBuilder, RolloutState, Stage, WindowFigures, DEFAULT_STAGES,
};
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metrics::registry::{MetricsError, MetricsRegistry};
pub use safety::fault::{
    AlertKind, Baseline, DetectorState, EventCallback, FaultDetector, FaultDetectorBuilder,
    FaultEvent, Figures, HourSample, Mode, BASELINE_HOURS, BASELINE_MIN_HOURS,
};
pub use safety::slo::{
    Outcome, SloAlert, SloConfigError, SuccessRate, SuccessRateBuilder, TierSnapshot, MAX_TIERS,
    OTHER_TIER,
};
pub use safety::watchdog::{ClockFault, Sampler, Watchdog};
pub use shaping::priority::{Priorities, PriorityError};
pub use shaping::retry::{
    Backoff, BackoffBuilder, BackoffError, Delays, Failure, RetryBudget, RetryError,
};
