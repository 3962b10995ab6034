//! tollgate: a rate limiter that cannot silently lose its units or its clock.
//!
//! Quotas cannot be written without a unit (`"10/s"`, `"600/min"`, `"2Gbit/s;burst=64MiB"`;
//! a bare `"10"` is an error with a hint). A lock-free GCRA engine reads a monotonic clock on
//! every check and returns a typed [`Verdict`]: allow, deny with an exact retry-after, or
//! pass-through with a reason.
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
//! # What to use for what
//!
//! | You want | Use | Feature |
//! |---|---|---|
//! | one limit for a whole process or link | [`RateLimiter`] | |
//! | a limit per customer, API key or IP, bounded in memory | [`KeyedRateLimiter`] | |
//! | a quota from a string or config, with its unit | [`Quota`] | |
//! | per-check cost, retry flag, priority class | [`Check`] | |
//! | to wait instead of being denied | [`Wait`] | `tokio` for async |
//! | builders, key-table bounds, admission of new keys | [`limiter`] | |
//! | the limiter to stand aside when *it* is the fault; a clock watchdog; a success rate that counts 429s | [`safety`] | |
//! | retry budgets, client backoff with jitter, priority classes | [`shaping`] | |
//! | a limit on requests in flight (per key, or one counter) | [`concurrency`] | `tokio` to wait |
//! | limits as a document: validation, diffs, hot reload, staged rollout | [`limits`] | `config` |
//! | tower / axum middleware: keys, 429s, `Retry-After`, IETF `RateLimit` fields | [`http`] | `tower`, `axum` |
//! | one limit shared by every instance, through Redis (Cluster, TLS) | [`redis`] | `redis` |
//! | counters and gauges for a scrape | [`metrics`] | `metrics` |
//! | events for trips, clock faults, reloads, rollouts | (`tracing` events) | `tracing` |
//! | the guides: gateway, Redis, limits, metrics, replay, model checking | [`guide`] | |
//!
//! Modules behind a feature are linked when it is on (docs.rs builds with every feature).
//!
//! # Features
//!
//! | Feature | Gives | Pulls in |
//! |---|---|---|
//! | `serde` (default) | `Serialize`/`Deserialize` for [`Quota`] (as its string) | serde |
//! | `config` | `tollgate::limits`: limits documents in TOML, YAML or JSON | toml, saphyr-parser, serde_json |
//! | `tower` | `tollgate::http`: the gateway layer | tower-layer, tower-service, http, http-body |
//! | `axum` | `tower`, and peer addresses from axum's `ConnectInfo` | axum (no default features) |
//! | `tokio` | async waits ([`Wait`], `concurrency` queues) | tokio |
//! | `redis` | `tollgate::redis`: `SharedRateLimiter` | redis, tokio, rustls (ring) |
//! | `metrics` | `tollgate::metrics`: `MetricsRegistry` | metrics |
//! | `tracing` | events from the detector, watchdog, reloads, rollouts | tracing |
//! | `cli` | the `tollgate` binary (`check`, `diff`, `replay`) | clap and friends |
//!
//! With `tracing`, detector trips, recoveries and alerts (target `tollgate::detector`), clock
//! faults (`tollgate::watchdog`), success-rate alerts (`tollgate::success_rate`), reloads
//! (`tollgate::reload`), rollout stages and halts (`tollgate::rollout`), the Redis breaker
//! (`tollgate::redis`) and a missing peer address in the layer (`tollgate::http`) are [`tracing`](https://docs.rs/tracing) events with their figures;
//! none is emitted per check.
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
//! use tollgate::{Check, ManualClock, RateLimiter};
//! use tollgate::shaping::{Priorities, RetryBudget};
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
//! * **Overflow cell.** When a [`KeyedRateLimiter`] tracks `max_keys` keys (active, or idle and
//!   not yet swept) and no idle one may make way, new keys share
//!   one overflow cell, and its denials say [`DenyReason::KeyTableFull`]. A key whose cell is
//!   not full is never reset to make room; idle ones (whose cell is full again) are swept as
//!   new keys arrive. At the cap, [`Admission`](limiter::Admission) (on by default) lets a key seen only once displace
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

/// The README's examples run as doctests (they use the gateway layer and Redis).
#[cfg(all(doctest, feature = "axum", feature = "redis"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The layers, bottom to top: engine (private: its types are re-exported here), safety, shaping,
// limiter and concurrency, limits; then, each behind its feature, `redis` (limits shared across
// instances), `metrics` (observability) and, on top, `http` (tower middleware). The CLI lives in
// `bin/`.
mod engine;
// Every atomic, lock and thread-local: std's and parking_lot's, or loom's under `cfg(loom)`.
mod sync;

/// The quota parameters' sequence lock and a gate on their own, for `tests/loom.rs` (under `cfg(loom)`).
#[cfg(loom)]
#[doc(hidden)]
pub use engine::params::{LoomGate, LoomSeqlock};

pub mod concurrency;
pub mod guide;
pub mod limiter;
pub mod safety;
pub mod shaping;

#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod limits;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

// Reads every layer below it, `redis` included (a shared limiter's counts).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;

#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod http;

pub use engine::check::Check;
pub use engine::clock::{Clock, ManualClock};
pub use engine::error::{ClockError, InsufficientCapacity, QuotaError, QuotaErrorKind};
pub use engine::quota::Quota;
pub use engine::stats::Stats;
pub use engine::verdict::{Allowed, Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict};
pub use limiter::direct::RateLimiter;
pub use limiter::keyed::KeyedRateLimiter;
pub use limiter::wait::Wait;
