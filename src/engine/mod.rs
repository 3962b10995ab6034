//! The GCRA engine: quotas and their strict parser, the pure GCRA step, the cell (one TAT
//! word), clocks and the process-wide epoch, verdicts, checks, key fingerprints, the always-on
//! counters and the error types. The bottom layer: it uses nothing else in the crate.

pub(crate) mod cell;
pub(crate) mod charge;
pub(crate) mod check;
pub(crate) mod clock;
pub(crate) mod error;
pub(crate) mod fingerprint;
pub(crate) mod gcra;
pub(crate) mod params;
pub(crate) mod quota;
pub(crate) mod refund;
pub(crate) mod stats;
pub(crate) mod tagged;
pub(crate) mod verdict;
