//! Observability (feature `metrics`): a [`MetricsRegistry`] of named
//! limiters, limits handles, rollouts, success rates and (feature `redis`) shared limiters that, when a scrape asks, reads their
//! always-on counters and state and hands them to the [`metrics`] facade as absolute counter
//! values and gauges. Nothing runs per check and nothing is flushed on a timer: the counts a
//! scrape renders are the counts at the moment it ran. Uses every layer below it.
//!
//! The `tracing` feature's events are emitted where they happen (the detector, the watchdog,
//! the success rate, reloads, rollouts, the Redis circuit breaker); their targets are listed on the crate's front page.

//!
//! # What is exported
//!
//! With the `metrics` feature, a [`MetricsRegistry`] exports what the limiters count anyway —
//! `tollgate_checks_total{limiter, policy, outcome, reason}`, retries, live keys, the
//! detector's mode and deny breadth, reloads, rollout stages, the success rate per tier —
//! through the [`metrics`](https://docs.rs/metrics) facade when a scrape calls
//! [`publish`](crate::metrics::MetricsRegistry::publish): nothing per check, nothing on a timer, and labels
//! that never carry a key. With the `tracing` feature, detector trips, recoveries and alerts
//! (target `tollgate::detector`), clock faults (`tollgate::watchdog`), success-rate alerts
//! (`tollgate::success_rate`), reloads (`tollgate::reload`) and rollout stages and halts
//! (`tollgate::rollout`) are [`tracing`](https://docs.rs/tracing) events with their figures;
//! none is emitted per check. The metrics guide lists every metric, label and event field, with dashboard queries.
//!

mod export;
pub(crate) mod names;
pub(crate) mod registry;
mod track;

pub use registry::{MetricsError, MetricsRegistry};
