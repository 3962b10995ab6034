//! What a limiter carries when a fault detector or a clock watchdog is attached: kept behind
//! one `Option<Box<_>>` so a bare limiter pays one predictable branch for it.

use crate::cell;
use crate::clock::Clock;
use crate::fault::FaultDetector;
use crate::gcra::Params;
use crate::verdict::{DenyReason, PassReason, PassThrough, Shadow, Verdict};
use crate::watchdog::Watchdog;

/// The ceiling factor when only a watchdog is attached.
const DEFAULT_CEILING: u32 = 10;

#[derive(Debug, Default)]
pub(crate) struct Guard {
    pub(crate) detector: Option<FaultDetector>,
    pub(crate) watchdog: Option<Watchdog>,
}

impl Guard {
    /// `None` if nothing is attached.
    pub(crate) fn boxed(
        detector: Option<FaultDetector>,
        watchdog: Option<Watchdog>,
    ) -> Option<Box<Self>> {
        (detector.is_some() || watchdog.is_some()).then(|| Box::new(Self { detector, watchdog }))
    }

    /// The clock reading: the watchdog's (fast, or the reference after a fault) if attached.
    #[inline]
    pub(crate) fn now(&self, clock: &Clock) -> u64 {
        match &self.watchdog {
            Some(w) => w.now_nanos(),
            None => clock.now_nanos(),
        }
    }

    /// Why verdicts pass through right now, if they do.
    #[inline]
    pub(crate) fn pass_reason(&self) -> Option<PassReason> {
        if self.watchdog.as_ref().is_some_and(Watchdog::is_faulted) {
            return Some(PassReason::ClockFault);
        }
        self.detector
            .as_ref()
            .and_then(|d| d.shared().pass_reason())
    }

    /// The ceiling `(weight, tolerance)` for a check of weight `w` during pass-through.
    #[inline]
    pub(crate) fn ceiling(&self, p: &Params, w: u64) -> Option<(u64, u64)> {
        let factor = match &self.detector {
            Some(d) => d.shared().ceiling()?,
            None => DEFAULT_CEILING,
        };
        Some(cell::ceiling(p, w, factor))
    }

    /// Counts the verdict and runs any due sampling or evaluation.
    #[inline]
    pub(crate) fn observe(&self, v: &Verdict, fp: Option<u64>) {
        if let Some(w) = &self.watchdog {
            w.on_check();
        }
        if let Some(d) = &self.detector {
            d.shared().observe(v, fp);
        }
    }
}

/// A verdict reached without the ceiling (a new key, a peek) while passing through: an allow
/// or a quota denial becomes a pass-through carrying it as the shadow.
pub(crate) fn pass(v: Verdict, reason: PassReason) -> Verdict {
    match v {
        Verdict::Allow(_) => Verdict::PassThrough(PassThrough::new(reason, Shadow::Allow)),
        Verdict::Deny(d) if d.reason() == DenyReason::Quota => {
            Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny))
        }
        other => other,
    }
}
