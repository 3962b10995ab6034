//! What a limiter carries when a fault detector, a clock watchdog, priority classes or a
//! retry budget is attached: kept behind one `Option<Box<_>>` so a bare limiter pays one
//! predictable branch for it.

use crate::sync::atomic::AtomicU64;
use std::collections::HashMap;

use crate::sync::Mutex;

use crate::engine::cell::{Attempt, Ceiling, Padded};
use crate::engine::clock::{Clock, FastClock};
use crate::engine::gcra;
use crate::engine::stats::{Counters, Stats};
use crate::engine::verdict::{Denied, DenyReason, PassReason, PassThrough, Shadow, Verdict};
use crate::safety::fault::FaultDetector;
use crate::safety::watchdog::Watchdog;
use crate::shaping::priority::{Priorities, Reserve};
use crate::shaping::retry::{RetryBudget, Window};

/// The ceiling factor when only a watchdog is attached.
const DEFAULT_CEILING: u32 = 10;
/// The most keys with a ceiling cell of their own during a pass-through; beyond it (after
/// dropping idle cells) keys share one cell.
const MAX_CEILING_KEYS: usize = 1 << 16;

#[derive(Debug)]
pub(crate) struct Guard {
    pub(crate) detector: Option<FaultDetector>,
    pub(crate) watchdog: Option<Watchdog>,
    pub(crate) priorities: Option<Priorities>,
    pub(crate) budget: Option<Window>,
    /// The ceiling cell of a direct limiter (see [`Ceiling`]).
    ceiling_cell: Padded<AtomicU64>,
    /// The ceiling cells of a keyed limiter's keys, by fingerprint; used only while passing
    /// through, and only by checks the shadow denies.
    ceiling_keys: Mutex<CeilingKeys>,
}

#[derive(Debug, Default)]
struct CeilingKeys {
    tats: HashMap<u64, u64>,
    /// The cell keys share when `tats` is full of live cells.
    shared: u64,
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
    /// `None` if nothing is attached. An attached detector is handed the limiter's `own`
    /// counters, to sum with those of the other limiters it watches.
    pub(crate) fn boxed(a: Attached, own: &Counters) -> Option<Box<Self>> {
        if let Some(d) = &a.detector {
            d.shared().attach(own.share());
        }
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
                ceiling_cell: Padded(AtomicU64::new(0)),
                ceiling_keys: Mutex::default(),
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

    /// The detector, if it is all that acts on a plain check (no watchdog, no retry budget;
    /// priority classes do not apply to [`check`](crate::RateLimiter::check)).
    #[inline]
    pub(crate) fn detector_only(&self) -> Option<&FaultDetector> {
        match (&self.watchdog, &self.budget) {
            (None, None) => self.detector.as_ref(),
            _ => None,
        }
    }

    /// The clock reading: the watchdog's (fast, or the reference after a fault) if attached.
    #[inline]
    pub(crate) fn now(&self, clock: &Clock) -> u64 {
        match &self.watchdog {
            Some(w) => w.now_nanos(),
            None => clock.now_nanos(),
        }
    }

    /// Why verdicts pass through at `now` (a reading of [`now`](Self::now)), if they do. A
    /// clock fault's pass-through ends on time here, whatever the traffic: after a fault the
    /// limiter reads the watchdog's reference clock, the one the window is measured on.
    #[inline]
    pub(crate) fn pass_reason(&self, now: u64) -> Option<PassReason> {
        if self.watchdog.as_ref().is_some_and(|w| w.is_faulted_at(now)) {
            return Some(PassReason::ClockFault);
        }
        self.detector
            .as_ref()
            .and_then(|d| d.shared().pass_reason())
    }

    /// The ceiling in force during a pass-through, if any.
    #[inline]
    pub(crate) fn ceiling(&self) -> Option<Ceiling> {
        let factor = match &self.detector {
            Some(d) => d.shared().ceiling()?,
            None => DEFAULT_CEILING,
        };
        Some(Ceiling { factor })
    }

    /// A direct limiter's shadow-denied check against the ceiling (see [`Ceiling`]).
    pub(crate) fn ceiling_direct(
        &self,
        a: Attempt<'_>,
        reason: PassReason,
        retry_after: u64,
        fresh: impl Fn() -> u64,
    ) -> Verdict {
        match self.ceiling() {
            None => Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny)),
            Some(c) => c.admit(&self.ceiling_cell.0, a, reason, retry_after, fresh),
        }
    }

    /// A keyed limiter's shadow-denied check of key `fp` against its own ceiling cell (see
    /// [`Ceiling`]). Cells whose TAT has passed are dropped when the map is full; if it is
    /// still full, the key shares one cell with the others that found no room.
    pub(crate) fn ceiling_key(
        &self,
        fp: u64,
        a: Attempt<'_>,
        reason: PassReason,
        retry_after: u64,
    ) -> Verdict {
        let Some(c) = self.ceiling() else {
            return Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny));
        };
        let Some(wc) = c.weight(a.w) else {
            return Verdict::Deny(Denied::new(retry_after, DenyReason::Ceiling));
        };
        let (now, tau) = (a.now, a.p.tau);
        let mut cells = self.ceiling_keys.lock();
        if cells.tats.len() >= MAX_CEILING_KEYS && !cells.tats.contains_key(&fp) {
            cells.tats.retain(|_, tat| *tat > now);
        }
        let CeilingKeys { tats, shared } = &mut *cells;
        let tat = if tats.len() < MAX_CEILING_KEYS || tats.contains_key(&fp) {
            tats.entry(fp).or_insert(0)
        } else {
            shared
        };
        match gcra::step(gcra::clamp(*tat, now, tau), now, wc, tau) {
            gcra::Outcome::Allow { tat: next, .. } => {
                *tat = next;
                Verdict::PassThrough(PassThrough::new(reason, Shadow::Deny))
            }
            gcra::Outcome::Deny { retry_after } => {
                Verdict::Deny(Denied::new(retry_after, DenyReason::Ceiling))
            }
            gcra::Outcome::Overflow => {
                Verdict::Deny(Denied::new(u64::MAX, DenyReason::ClockOverflow))
            }
        }
    }

    /// Counts the verdict (and whether it was a retry) in the limiter's `own` counters (with
    /// the detector's tick if one is attached, which reads them), credits or debits the retry budget if it was
    /// permitted, and runs any due sampling or evaluation. `now` is read only with a budget
    /// attached.
    #[inline]
    pub(crate) fn observe(
        &self,
        own: &Counters,
        v: &Verdict,
        fp: Option<u64>,
        retry: bool,
        now: impl Fn() -> u64,
    ) {
        if let Some(w) = &self.watchdog {
            w.on_check();
        }
        if let Some(b) = &self.budget {
            if v.is_permitted() {
                b.record(now(), retry);
            }
        }
        // Counted once, in the limiter's own counters; an attached detector sums them with
        // those of the other limiters it watches.
        match &self.detector {
            Some(d) => {
                // A budget denial says nothing about the key's own conformance: kept out of
                // the breadth panel (counted all the same).
                let budget_denial = v
                    .denied()
                    .is_some_and(|d| d.reason() == DenyReason::RetryBudget);
                d.shared().observe(own, v, fp.filter(|_| !budget_denial));
            }
            None => own.count(v),
        }
        if retry {
            own.retry(v.is_permitted());
        }
    }
}

/// What a limiter's plain check (`check`, `check_key`) can do inline, fixed when the limiter
/// is built.
pub(crate) enum Hot {
    /// The fast clock, nothing attached.
    Bare(FastClock),
    /// The fast clock and a detector (a clone of the attached one) on the fast clock too,
    /// nothing else that acts on a plain check: the bare step while the detector enforces.
    /// The detector reads the time the check already read: whether its sub-bucket is due is
    /// one compare, with no tick and no clock read of its own.
    Detected(FastClock, FaultDetector),
    /// Another clock, or more attached, or a detector on another clock (a `ManualClock` in
    /// tests, read by every 32nd check of a thread to see whether it is due): the limiter's
    /// general dispatch. (Three variants: a fourth costs the bare check a tag compare.)
    Other,
}

impl Hot {
    pub(crate) fn new(clock: &Clock, guard: Option<&Guard>) -> Self {
        match (clock.fast(), guard) {
            (Some(c), None) => Hot::Bare(c),
            (Some(c), Some(g)) => match g.detector_only() {
                Some(d) if d.shared().on_fast_clock() => Hot::Detected(c, d.clone()),
                _ => Hot::Other,
            },
            (None, _) => Hot::Other,
        }
    }
}

/// A limiter's counts as `stats()` reports them: its detector's if one is attached (the sum
/// over every limiter it watches, since its last revision), else the limiter's own.
pub(crate) fn stats(guard: Option<&Guard>, own: &Counters) -> Stats {
    match guard.and_then(|g| g.detector.as_ref()) {
        Some(d) => d.stats(),
        None => own.stats(),
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
