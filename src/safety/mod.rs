//! The limiter watching itself: the fault [`FaultDetector`] and its [`Baseline`], the clock
//! [`Watchdog`], and the customer [`SuccessRate`] that counts a 429 as a failure. Each attaches
//! through a limiter's builder
//! ([`RateLimiterBuilder::detector`](crate::limiter::RateLimiterBuilder::detector),
//! [`watchdog`](crate::limiter::RateLimiterBuilder::watchdog)); a limiter without them pays
//! nothing for them.
//!
//! # Fault detection
//!
//! A limiter that denies everyone because its own clock lagged is an outage, and a fail-open
//! fallback that waits for an error never sees one. Attach a [`FaultDetector`] (and
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
//! Then checks return [`Verdict::PassThrough`](crate::Verdict::PassThrough) with [`PassReason::DenyAnomaly`](crate::PassReason::DenyAnomaly) and the shadow
//! verdict — exactly what an enforcing limiter fed the same requests would say, because the
//! shadow step writes what an enforcing step writes and nothing else — under a ceiling of 10×
//! the quota, kept on a cell of its own (past it: [`DenyReason::Ceiling`](crate::DenyReason::Ceiling)). It enforces again after a full window of
//! calm sub-buckets, or after 15 min, extended while the anomaly persists up to 1 h
//! ([`AlertKind::PassThroughExhausted`]). Every pass-through is counted ([`Stats`](crate::Stats)) and every
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
//! through with [`PassReason::ClockFault`](crate::PassReason::ClockFault) for one window, then enforces on the reference
//! clock. A [`SuccessRate`] tracks the customer's view per tier, counting 429s as failures.
//!

pub(crate) mod fault;
pub(crate) mod slo;
pub(crate) mod watchdog;

pub use fault::{
    AlertKind, Baseline, DetectorMode, DetectorState, EventCallback, FaultDetector,
    FaultDetectorBuilder, FaultEvent, FaultFigures, HourSample,
};
pub use slo::{
    RequestOutcome, SloAlert, SloConfigError, SuccessRate, SuccessRateBuilder, TierSnapshot,
};
pub use watchdog::{ClockFault, Watchdog, WatchdogSampler};
