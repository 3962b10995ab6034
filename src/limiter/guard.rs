//! What a limiter carries when a fault detector, a clock watchdog, priority classes or a
//! retry budget is attached: kept behind one `Option<Box<_>>` so a bare limiter pays one
//! predictable branch for it.

use crate::engine::cell;
use crate::engine::clock::Clock;
use crate::engine::gcra::Params;
use crate::engine::stats::RETRIES;
use crate::engine::verdict::{Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict};
use crate::safety::fault::FaultDetector;
use crate::safety::watchdog::Watchdog;
use crate::shaping::priority::{Priorities, Reserve};
use crate::shaping::retry::{RetryBudget, Window};

/// The ceiling factor when only a watchdog is attached.
const DEFAULT_CEILING: u32 = 10;

#[derive(Debug)]
pub(crate) struct Guard {
    pub(crate) detector: Option<FaultDetector>,
    pub(crate) watchdog: Option<Watchdog>,
    pub(crate) priorities: Option<Priorities>,
    pub(crate) budget: Option<Window>,
}

/// What a limiter builder may attach.
#[derive(Debug, Default)]
pub(crate) struct Attached {
    pub(crate) detector: Option<FaultDetector>,
    pub(crate) watchdog: Option<Watchdog>,
    pub(crate) priorities: Option<Priorities>,
    pub(crate) budget: Option<RetryBudget>,
}

impl Guard {
    /// `None` if nothing is attached.
    pub(crate) fn boxed(a: Attached) -> Option<Box<Self>> {
        let any = a.detector.is_some()
            || a.watchdog.is_some()
            || a.priorities.is_some()
            || a.budget.is_some();
        any.then(|| {
            Box::new(Self {
                detector: a.detector,
                watchdog: a.watchdog,
                priorities: a.priorities,
                budget: a.budget.map(Window::new),
            })
        })
    }

    /// The reserve of priority class `class` (none without classes).
    #[inline]
    pub(crate) fn reserve(&self, class: u8) -> Reserve {
        self.priorities
            .as_ref()
            .map_or(Reserve::NONE, |p| p.reserve_of(class))
    }

    /// For a retry at `now`: the denial if the retry budget has no room (the peek; the debit
    /// comes with [`observe`](Self::observe) once the quota has permitted it).
    #[inline]
    pub(crate) fn over_budget(&self, now: u64) -> Option<Verdict> {
        let after = self.budget.as_ref()?.peek(now)?;
        Some(Verdict::Deny(Denied::new(after, DenyReason::RetryBudget)))
    }

    /// The retry budget in force, if any.
    pub(crate) fn retry_budget(&self) -> Option<RetryBudget> {
        self.budget.as_ref().map(Window::config)
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

    /// Counts the verdict (and whether it was a retry), credits or debits the retry budget
    /// if it was permitted, and runs any due sampling or evaluation. `now` is read only with
    /// a budget attached.
    #[inline]
    pub(crate) fn observe(&self, v: &Verdict, fp: Option<u64>, retry: bool, now: impl Fn() -> u64) {
        if let Some(w) = &self.watchdog {
            w.on_check();
        }
        if let Some(b) = &self.budget {
            if v.is_permitted() {
                b.record(now(), retry);
            }
        }
        if let Some(d) = &self.detector {
            // A budget denial says nothing about the key's own conformance: kept out of the
            // breadth panel (counted all the same).
            let budget_denial = v
                .denied()
                .is_some_and(|d| d.reason() == DenyReason::RetryBudget);
            d.shared().observe(v, fp.filter(|_| !budget_denial));
            if retry {
                d.shared().counters.bump(RETRIES);
            }
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
