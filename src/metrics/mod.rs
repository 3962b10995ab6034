//! Observability (feature `metrics`): a [`MetricsRegistry`](crate::MetricsRegistry) of named
//! limiters, limits handles, rollouts, success rates and (feature `redis`) shared limiters that, when a scrape asks, reads their
//! always-on counters and state and hands them to the [`metrics`] facade as absolute counter
//! values and gauges. Nothing runs per check and nothing is flushed on a timer: the counts a
//! scrape renders are the counts at the moment it ran. Uses every layer below it.
//!
//! The `tracing` feature's events are emitted where they happen (the detector, the watchdog,
//! the success rate, reloads, rollouts, the Redis circuit breaker); their list is in the crate documentation.

mod export;
pub(crate) mod names;
pub(crate) mod registry;
mod track;
