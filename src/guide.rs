//! The guides: longer walkthroughs than the API pages, one per concern, with examples that run
//! as doctests. The same pages are in the repository's `docs/` folder.
//!
//! | guide | what |
//! |---|---|
//! | [`limiter`] | the limiters in depth: quota strings, keyed tables and admission, live quota changes, refunds, waiting |
//! | [`concurrency`] | rate or concurrency limits, and limits on requests in flight, per key |
//! | [`gateway`] | the tower/axum layer: keys, several limits, responses, gRPC, queue mode (feature `tower`) |
//! | [`limits`] | limits as code: the document, validation, diffs, the CLI (feature `config`) |
//! | [`ci_gate`] | refusing an unacknowledged tightening in CI |
//! | [`replay`] | `tollgate replay`: the three outages, and your own access log against your limits |
//! | [`metrics`] | every metric, label and tracing event, with dashboard queries (feature `metrics`) |
//! | [`redis`] | shared limits: semantics, failure policies, leases and their proof, concurrency limits across instances, TLS and auth, Cluster (feature `redis`) |
//! | [`development`] | the CI script and the Redis tests |
//! | [`model_checking`] | the loom models of the lock-free core, and how to run them |
//! | [`incidents`] | the outages tollgate was built around, and how the replay models them |
//! | [`msrv`] | the minimum Rust version of each feature |
//!
//! A guide whose examples need a feature is here when the feature is on (docs.rs builds with
//! all of them).

#[doc = include_str!("../docs/limiter.md")]
pub mod limiter {}

#[doc = include_str!("../docs/concurrency.md")]
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod concurrency {}

#[doc = include_str!("../docs/gateway.md")]
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod gateway {}

#[doc = include_str!("../docs/limits.md")]
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod limits {}

#[doc = include_str!("../docs/ci-gate.md")]
pub mod ci_gate {}

#[doc = include_str!("../docs/replay.md")]
pub mod replay {}

#[doc = include_str!("../docs/metrics.md")]
#[cfg(all(feature = "metrics", feature = "config"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "metrics", feature = "config"))))]
pub mod metrics {}

#[doc = include_str!("../docs/redis.md")]
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis {}

#[doc = include_str!("../docs/development.md")]
pub mod development {}

#[doc = include_str!("../docs/model-checking.md")]
pub mod model_checking {}

#[doc = include_str!("../docs/incidents.md")]
pub mod incidents {}

#[doc = include_str!("../docs/msrv.md")]
pub mod msrv {}
