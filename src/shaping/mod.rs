//! Traffic shaping: retry budgets, client backoff with jitter, and priority classes with
//! reserved capacity.
//!
//! # Retries, priorities and bandwidth
//!
//! A link shared by bulk recovery and heartbeats, and clients that retry a failed write at once
//! and again, starve what matters most. Two things attach through the limiter's builder and are
//! chosen per check with [`Check`](crate::Check) (through [`RateLimiter::check_with`](crate::RateLimiter::check_with) and
//! [`KeyedRateLimiter::check_key_with`](crate::KeyedRateLimiter::check_key_with)); a limiter without them pays nothing for them.
//!
//! * [`Priorities`]: classes share one cell, and each class leaves a share of the burst to the
//!   classes above it, so heartbeats (class 0) always find capacity while recovery (a lower
//!   class) is capped. A plain `check` is class 0.
//! * [`RetryBudget`]: a retry ([`Check::attempt`](crate::Check::attempt) ≥ 1) must fit the budget — 10 % of the
//!   originals over a sliding 10 s, plus 10 retries per second — as well as the quota; over it,
//!   [`DenyReason::RetryBudget`](crate::DenyReason::RetryBudget). A retry the quota denies costs no budget; originals are
//!   never denied by it. [`Stats`](crate::Stats) counts originals and retries apart.
//! * [`Backoff`], for clients: exponential with full jitter, never a zero delay, bounded
//!   attempts, and after a denial `retry_after` plus a jitter window of at least
//!   `retry_after / 2`, so denied clients do not come back in lockstep.
//! * Byte budgets (`"2Gbit/s;burst=64MiB"`) charge chunks by their size in bytes and change
//!   live with `set_quota` — 8 Gbit/s to 2 Gbit/s without a restart and without a free burst.
//!

pub(crate) mod priority;
pub(crate) mod retry;

pub use priority::{Priorities, PriorityError};
pub use retry::{
    AttemptFailure, Backoff, BackoffBuilder, BackoffDelays, BackoffError, RetryBudget, RetryError,
};
