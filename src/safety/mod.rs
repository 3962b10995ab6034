//! The limiter watching itself: the fault detector and its baseline (incident 000), the clock
//! watchdog, and the customer success rate that counts a 429 as a failure (incident 001).
//! Uses only the engine.

pub(crate) mod fault;
pub(crate) mod slo;
pub(crate) mod watchdog;
