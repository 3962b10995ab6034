//! [`LimitsHandleBuilder`].

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use super::{LimitsHandle, Policies, Settings, DEFAULT_KNOWN_GOOD_AFTER};
use crate::engine::clock::Clock;
use crate::limits::document::{Limits, DEFAULT_GUARD};
use crate::safety::fault::FaultDetector;

/// Builds a [`LimitsHandle`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::ManualClock;
/// use tollgate::limits::{Limits, LimitsHandle};
/// use tollgate::safety::FaultDetector;
///
/// let clock = ManualClock::new();
/// let detector = FaultDetector::builder().clock(clock.clone()).build();
/// let handle = LimitsHandle::builder(Limits::from_path("examples/limits/valid.toml")?)
///     .clock(clock.clone())
///     .max_keys(10_000)
///     .guard(10.0)
///     .detector(detector.clone())
///     .known_good_after(Duration::from_secs(600))
///     .build();
/// assert_eq!(detector.state().revision, 41);
/// assert_eq!(detector.baseline().revision(), 41);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "call .build() to get the handle"]
pub struct LimitsHandleBuilder {
    limits: Limits,
    /// `None`: the default, [`Clock::monotonic`], taken when the handle is built.
    clock: Option<Clock>,
    max_keys: Option<usize>,
    guard: f64,
    detector: Option<FaultDetector>,
    known_good_after: Duration,
}

impl LimitsHandleBuilder {
    pub(super) fn new(limits: Limits) -> Self {
        Self {
            limits,
            clock: None,
            max_keys: None,
            guard: DEFAULT_GUARD,
            detector: None,
            known_good_after: DEFAULT_KNOWN_GOOD_AFTER,
        }
    }

    /// The clock every policy's limiter reads (default: [`Clock::monotonic`]).
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// The bound on tracked keys of each policy's limiter (default
    /// [`DEFAULT_MAX_KEYS`](crate::limiter::DEFAULT_MAX_KEYS)); see
    /// [`KeyedRateLimiterBuilder::max_keys`](crate::limiter::KeyedRateLimiterBuilder::max_keys).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// The tightening factor beyond which a reload needs an acknowledgement (default
    /// [`DEFAULT_GUARD`](crate::limits::Limits::DEFAULT_GUARD): 10×). A value that is not finite or below 1 keeps the default.
    pub fn guard(mut self, guard: f64) -> Self {
        self.guard = if guard.is_finite() && guard >= 1.0 {
            guard
        } else {
            DEFAULT_GUARD
        };
        self
    }

    /// Attaches a fault detector to the limiters of every enforcing policy, and keeps it told
    /// of the revision in force (see [`LimitsHandle`]'s *Fault detector* section).
    pub fn detector(mut self, detector: FaultDetector) -> Self {
        self.detector = Some(detector);
        self
    }

    /// How long a new revision must serve calmly before it becomes known-good (default
    /// [`DEFAULT_KNOWN_GOOD_AFTER`](crate::limits::LimitsHandle::DEFAULT_KNOWN_GOOD_AFTER): 1 h).
    pub fn known_good_after(mut self, after: Duration) -> Self {
        self.known_good_after = after;
        self
    }

    /// Builds the handle, with a fresh limiter per policy, each built on its policy's first
    /// check.
    ///
    /// # Panics
    ///
    /// Without a [`clock`](Self::clock) on `wasm32-unknown-unknown`, which has no default
    /// clock ([`Clock::monotonic`]).
    pub fn build(self) -> LimitsHandle {
        let settings = Settings {
            clock: self.clock.unwrap_or_else(Clock::monotonic),
            max_keys: self.max_keys,
            detector: self.detector,
        };
        let policies = Policies::new(Arc::new(self.limits), &settings);
        LimitsHandle::from_parts(policies, settings, self.guard, self.known_good_after)
    }
}

impl fmt::Debug for LimitsHandleBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitsHandleBuilder")
            .field("revision", &self.limits.revision())
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .field("guard", &self.guard)
            .field("detector", &self.detector.is_some())
            .field("known_good_after", &self.known_good_after)
            .finish()
    }
}
