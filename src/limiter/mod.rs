//! The limiters users hold: the direct [`RateLimiter`](crate::RateLimiter) (one cell), the
//! keyed [`KeyedRateLimiter`](crate::KeyedRateLimiter) (a table of cells) and the guard that
//! attaches the safety and shaping layers to a check. Uses the engine, safety and shaping.

pub(crate) mod direct;
pub(crate) mod guard;
pub(crate) mod keyed;
pub(crate) mod wait;

pub use crate::engine::charge::Charged;
pub use direct::RateLimiterBuilder;
pub use keyed::{Admission, KeyedRateLimiterBuilder, DEFAULT_MAX_KEYS, MAX_KEYS};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use wait::TokioSleep;
