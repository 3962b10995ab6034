//! Beyond one machine (feature `redis`): [`SharedRateLimiter`], a
//! GCRA in one Lua script per check, behind a per-call deadline, a circuit breaker, a local
//! deny cache and a failure policy; and [`SharedConcurrencyLimiter`], requests in flight per
//! customer as leased slots that a crashed instance cannot leak. Uses the engine (quotas, verdicts, clocks) and the
//! in-memory keyed limiter (the local fallback).

pub(crate) mod breaker;
pub(crate) mod builder;
pub(crate) mod cache;
pub(crate) mod call;
pub(crate) mod concurrency;
pub(crate) mod conn;
pub(crate) mod decide;
pub(crate) mod error;
pub(crate) mod key;
pub(crate) mod lease;
pub(crate) mod limit;
pub(crate) mod limiter;
pub(crate) mod renew;
pub(crate) mod script;
pub(crate) mod settle;
pub(crate) mod stats;
pub(crate) mod tls;

pub use breaker::BreakerConfig;
pub use builder::{FailurePolicy, SharedRateLimiterBuilder};
pub use concurrency::{
    AcquireError, SharedConcurrencyLimiter, SharedConcurrencyLimiterBuilder,
    SharedConcurrencyStats, SharedPermit,
};
pub use error::BackendError;
pub use limiter::SharedRateLimiter;
pub use settle::Settled;
pub use stats::SharedStats;
