//! The fault detector: when the limiter itself is the fault, stand aside — visibly, briefly,
//! and never for an attacker.
//!
//! Incident 000: a limiter read a clock lagging 45 s behind and denied everyone for hours; its
//! fail-open fallback waited for an error that never came, because a flood of well-formed
//! denials is not an error. The detector watches the *deny measure* against a trailing
//! [`Baseline`] and, when it jumps far above it, turns verdicts into
//! [`PassThrough`](crate::PassThrough)s with [`PassReason::DenyAnomaly`] and the shadow
//! verdict, for a bounded time, under a ceiling.
//!
//! The measure is chosen so that floods cannot trip it:
//!
//! * keyed limiters measure **breadth**: the share of a seeded sample of previously conforming
//!   keys (the panel) that are now mostly denied. A flood from a few keys moves breadth by the
//!   share of the panel they hold; a key-cardinality flood adds conforming keys; new keys in
//!   the overflow cell are left out (they raise an [`AlertKind::OverflowCell`] instead).
//! * direct limiters need both a deny ratio far above the baseline **and** allowed throughput
//!   far below it: a healthy limiter under a flood still admits its rate; a lagging clock or a
//!   60× tightening does not.

mod attached;
mod baseline;
mod builder;
mod eval;
#[cfg(feature = "tracing")]
mod events;
mod panel;

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::fmt;
use core::hash::Hash;
use core::time::Duration;
use std::sync::Arc;

use crate::sync::Mutex;

pub use baseline::{Baseline, HourSample};
pub use builder::FaultDetectorBuilder;

use crate::engine::clock::{saturating_nanos, Clock};
use crate::engine::fingerprint::Fingerprinter;
use crate::engine::stats::{Counters, Stats, ALLOWED, COUNTERS};
use crate::engine::verdict::{DenyReason, PassReason, Verdict};
pub(crate) use attached::AttachedCounters;
use eval::Eval;
use panel::Panel;

/// A callback for [`FaultEvent`]s.
pub type EventCallback = Arc<dyn Fn(&FaultEvent) + Send + Sync>;

/// What the detector reports to its callbacks.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum FaultEvent {
    /// The deny measure jumped far above the baseline: the limiter now passes traffic through.
    Tripped(FaultFigures),
    /// The shadow measure stayed under the threshold for a full window (or the pass-through
    /// ran out): the limiter enforces again.
    Recovered(FaultFigures),
    /// Something worth a look that does not warrant passing traffic through.
    Alert(AlertKind, FaultFigures),
}

/// Why the detector alerted without tripping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AlertKind {
    /// The measure is anomalous, but there is no baseline yet (cold start): alert only.
    ColdStart,
    /// The measure is far above the baseline, but it rose gradually (over more than the
    /// recent span), which looks like real traffic changing, not a fault.
    Drift,
    /// An anomaly within the cool-down after the last trip: not tripped again.
    CoolDown,
    /// New keys are being denied in the overflow cell of a full key table.
    OverflowCell,
    /// The pass-through reached its longest allowed duration while the anomaly persisted:
    /// the limiter enforces again. Look at the limiter.
    PassThroughExhausted,
}

/// The figures behind an event.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct FaultFigures {
    /// The deny measure over the window: breadth (keyed) or deny ratio (direct), in `0..=1`.
    pub measure: f64,
    /// The baseline's value of the same measure, if there is a baseline.
    pub baseline: Option<f64>,
    /// Allowed checks per second over the window (pass-throughs with an allow shadow count).
    pub allowed_per_sec: f64,
    /// Checks in the window (keyed: eligible panel keys).
    pub samples: u64,
    /// The evaluation window.
    pub window: Duration,
    /// When, on the detector's clock.
    pub at: Duration,
}

/// Where the detector stands.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum DetectorMode {
    /// Verdicts are enforced.
    Enforcing,
    /// Verdicts pass through until `until` (the detector's clock) at the latest.
    PassingThrough {
        /// Why.
        reason: PassReason,
        /// The latest end.
        until: Duration,
    },
}

/// A snapshot of the detector, for dashboards and tests.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct DetectorState {
    /// Enforcing or passing through.
    pub mode: DetectorMode,
    /// `true` while an operator override is in force.
    pub overridden: bool,
    /// The figures of the last evaluation.
    pub last: FaultFigures,
    /// The config revision in force.
    pub revision: u64,
    /// Callbacks that panicked (counted, never propagated).
    pub callback_panics: u64,
}

/// Watches a limiter's verdicts and passes traffic through when the limiter is the fault.
///
/// Attach one detector to one limiter through its builder. Clones share state.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, RateLimiter};
/// use tollgate::safety::{Baseline, FaultDetector, HourSample};
///
/// let clock = ManualClock::new();
/// let normal = HourSample { breadth: 0.0, deny_ratio: 0.01, allowed_per_sec: 10.0 };
/// let detector = FaultDetector::builder()
///     .clock(clock.clone())
///     .baseline(Baseline::from_hours(1, std::iter::repeat(normal).take(24)))
///     .build();
/// let lim = RateLimiter::builder("10/s".parse()?).detector(detector.clone()).build();
/// assert!(lim.check().is_permitted());
/// assert_eq!(detector.stats().allowed, 1);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone)]
pub struct FaultDetector {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    /// 0: enforce; otherwise the [`PassReason`] code + 1. Read on every check (Relaxed: a
    /// verdict one check late in either direction is harmless); written by the evaluator.
    mode: AtomicU64,
    /// The counts fed through [`FaultDetector::record`] (standalone use).
    pub(crate) counters: Counters,
    /// The counters of the limiters built with this detector, and what dropped ones counted.
    pub(crate) attached: Mutex<AttachedCounters>,
    panel: Panel,
    keyed: AtomicBool,
    fingerprinter: Fingerprinter,
    /// Detector-clock instant of the next sub-bucket close.
    next_eval: AtomicU64,
    /// When a forced pass-through ends (`u64::MAX`: none), checked on its own so it ends on
    /// time rather than at the next sub-bucket close.
    pub(crate) override_until: AtomicU64,
    clock: Clock,
    cfg: Config,
    eval: Mutex<Eval>,
    callbacks: Vec<EventCallback>,
    callback_panics: AtomicU64,
}

/// The detector's settings; see [`FaultDetectorBuilder`] for their meaning and defaults.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) multiplier: f64,
    pub(crate) floor: f64,
    pub(crate) window: u64,
    pub(crate) sub: u64,
    pub(crate) min_samples: u64,
    pub(crate) min_panel: usize,
    pub(crate) pass_for: u64,
    pub(crate) max_pass: u64,
    pub(crate) cooldown: u64,
    pub(crate) recent: u64,
    pub(crate) memory: u64,
    pub(crate) ceiling: Option<u32>,
}

/// How often (in checks per thread) a check looks at the detector clock to see whether a
/// sub-bucket should close.
const EVAL_EVERY: u32 = 32;

impl FaultDetector {
    /// A detector with the defaults, on the monotonic clock, without a baseline (so it only
    /// alerts until it has learned 24 hours).
    ///
    /// # Panics
    ///
    /// On `wasm32-unknown-unknown`, which has no monotonic clock: there, give the
    /// [`builder`](Self::builder) a clock.
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// A builder for the settings.
    pub fn builder() -> FaultDetectorBuilder {
        FaultDetectorBuilder::default()
    }

    /// Counts in force for the current config revision.
    pub fn stats(&self) -> Stats {
        let now = Stats::from_counts(&self.shared.sum());
        now.since(&self.shared.eval.lock().revision_start)
    }

    /// Counts per config revision seen, oldest first, the current one last.
    pub fn stats_by_revision(&self) -> Vec<(u64, Stats)> {
        let now = Stats::from_counts(&self.shared.sum());
        let eval = self.shared.eval.lock();
        let mut v = eval.past_revisions.clone();
        v.push((eval.revision, now.since(&eval.revision_start)));
        v
    }

    /// The baseline learned so far (to export; it serialises with the `serde` feature).
    pub fn baseline(&self) -> Baseline {
        self.shared.eval.lock().baseline.clone()
    }

    /// Tells the detector which config revision is in force. Counts restart for it, and the
    /// baseline keeps learning only while the revision it is pinned to is in force.
    pub fn set_revision(&self, revision: u64) {
        let now = Stats::from_counts(&self.shared.sum());
        self.shared.eval.lock().set_revision(revision, now);
    }

    /// Marks `revision` as known-good: the baseline is pinned to it and learns under it.
    pub fn mark_known_good(&self, revision: u64) {
        self.shared.eval.lock().baseline.set_revision(revision);
    }

    /// Enforces whatever the measure says, until [`clear_override`](Self::clear_override).
    pub fn force_enforce(&self) {
        self.with_eval(|e, now, sh| e.force_enforce(now, sh));
    }

    /// Passes everything through for `duration` (under the ceiling), with `reason`.
    pub fn force_pass_through(&self, reason: PassReason, duration: Duration) {
        let d = saturating_nanos(duration);
        self.with_eval(|e, now, sh| e.force_pass(reason, now.saturating_add(d), sh));
    }

    /// Ends an operator override: the detector decides again.
    pub fn clear_override(&self) {
        self.with_eval(|e, _, sh| e.clear_override(sh));
    }

    /// Runs any due evaluation now: for idle limiters, where no check arrives to run it.
    pub fn tick(&self) {
        self.shared.maybe_evaluate();
    }

    /// Where the detector stands.
    pub fn state(&self) -> DetectorState {
        let eval = self.shared.eval.lock();
        DetectorState {
            mode: eval.mode(),
            overridden: eval.overridden(),
            last: eval.last,
            revision: eval.revision,
            callback_panics: self.shared.callback_panics.load(Ordering::Relaxed),
        }
    }

    /// Feeds a verdict from a direct limiter not built with this detector (standalone use).
    pub fn record(&self, verdict: &Verdict) {
        self.shared.observe(&self.shared.counters, verdict, None);
    }

    /// Feeds a verdict for `key` from a keyed limiter not built with this detector.
    pub fn record_key<Q: Hash + ?Sized>(&self, key: &Q, verdict: &Verdict) {
        self.shared.keyed.store(true, Ordering::Relaxed);
        let fp = self.shared.fingerprinter.fingerprint(key);
        self.shared
            .observe(&self.shared.counters, verdict, Some(fp));
    }

    fn with_eval(&self, f: impl FnOnce(&mut Eval, u64, &Shared)) {
        let sh = &*self.shared;
        let now = sh.clock.now_nanos();
        let events = {
            let mut eval = sh.eval.lock();
            f(&mut eval, now, sh);
            eval.take_events()
        };
        sh.deliver(&events);
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    pub(crate) fn attach_keyed(&self) {
        self.shared.keyed.store(true, Ordering::Relaxed);
    }
}

impl Default for FaultDetector {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for FaultDetector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultDetector")
            .field("state", &self.state())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// The pass-through reason in force, if any: one load.
    #[inline]
    pub(crate) fn pass_reason(&self) -> Option<PassReason> {
        match self.mode.load(Ordering::Relaxed) {
            0 => None,
            code => self.passing(code),
        }
    }

    /// While passing through: a forced pass-through ends at its instant, whatever the
    /// traffic (one read of the detector clock per check, only while passing through).
    #[cold]
    fn passing(&self, code: u64) -> Option<PassReason> {
        let until = self.override_until.load(Ordering::Relaxed);
        if until != u64::MAX {
            let now = self.clock.now_nanos();
            if now >= until {
                self.eval.lock().expire_override(now, self);
                return match self.mode.load(Ordering::Relaxed) {
                    0 => None,
                    code => Some(reason_from_code(code - 1)),
                };
            }
        }
        Some(reason_from_code(code - 1))
    }

    pub(crate) fn ceiling(&self) -> Option<u32> {
        self.cfg.ceiling
    }

    pub(crate) fn set_mode(&self, reason: Option<PassReason>) {
        let code = reason.map_or(0, |r| reason_code(r) + 1);
        self.mode.store(code, Ordering::Relaxed);
    }

    /// Hands the detector a limiter's counters, to sum with the others it watches.
    pub(crate) fn attach(&self, counters: Counters) {
        self.attached.lock().attach(counters);
    }

    /// Every check counted: fed through [`FaultDetector::record`] or by an attached limiter.
    pub(crate) fn sum(&self) -> [u64; COUNTERS] {
        let mut total = self.counters.sum();
        self.attached.lock().sum_into(&mut total);
        total
    }

    /// [`observe`](Self::observe) for a direct limiter's steady-state verdict, known by its
    /// counter (`ALLOWED` or `DENIED_QUOTA`): no verdict to classify, no breadth panel.
    #[inline(always)]
    pub(crate) fn observe_index(&self, counters: &Counters, index: usize) {
        if counters.record_index(index, EVAL_EVERY) {
            self.maybe_evaluate();
        }
    }

    /// [`observe_index`](Self::observe_index) on the detector's own clock, read by the check
    /// at `now`: the sub-bucket close is due when `now` reaches it (one load, one compare; no
    /// tick, no clock read), so it runs on time even at a check a minute.
    #[inline(always)]
    pub(crate) fn observe_index_at(&self, counters: &Counters, index: usize, now: u64) {
        counters.bump(index);
        if now >= self.next_eval.load(Ordering::Relaxed) {
            self.evaluate_at(now);
        }
    }

    /// [`observe_key`](Self::observe_key) at `now`, as [`observe_index_at`](Self::observe_index_at).
    #[inline(always)]
    pub(crate) fn observe_key_at(&self, counters: &Counters, index: usize, fp: u64, now: u64) {
        self.panel.record(fp, index != ALLOWED);
        self.observe_index_at(counters, index, now);
    }

    /// `true` if this detector runs on the fast monotonic clock, whose readings every fast
    /// clock in the process shares (one epoch): a limiter on it can hand the detector its own
    /// reading.
    pub(crate) fn on_fast_clock(&self) -> bool {
        self.clock.fast().is_some()
    }

    /// [`observe`](Self::observe) of a key's verdict known by its counter `index` (an allow
    /// or a quota denial: neither a pass-through nor a full table's denial), counted in the
    /// limiter's `counters`.
    #[inline(always)]
    pub(crate) fn observe_key(&self, counters: &Counters, index: usize, fp: u64) {
        let due = counters.record_index(index, EVAL_EVERY);
        // A quota denial is a denial for the breadth panel, as `is_shadow_denied` says.
        self.panel.record(fp, index != ALLOWED);
        if due {
            self.maybe_evaluate();
        }
    }

    /// Counts a verdict in `counters` (the limiter's own, or the detector's for a standalone
    /// record), records a key's panel sample, and now and then runs a due evaluation.
    #[inline]
    pub(crate) fn observe(&self, counters: &Counters, v: &Verdict, fp: Option<u64>) {
        let due = counters.record(v, EVAL_EVERY);
        if let Some(fp) = fp {
            match v {
                Verdict::Deny(d) if d.reason() == DenyReason::KeyTableFull => {}
                _ => self.panel.record(fp, is_shadow_denied(v)),
            }
        }
        if due {
            self.maybe_evaluate();
        }
    }

    #[cold]
    fn maybe_evaluate(&self) {
        self.evaluate_at(self.clock.now_nanos());
    }

    /// Closes the sub-bucket if it is due at `now` (a detector-clock reading), and ends a
    /// forced pass-through whose time is up.
    #[cold]
    #[inline(never)]
    fn evaluate_at(&self, now: u64) {
        if now >= self.override_until.load(Ordering::Relaxed) {
            self.eval.lock().expire_override(now, self);
        }
        let due = self.next_eval.load(Ordering::Relaxed);
        if now < due {
            return;
        }
        // Whoever wins the CAS evaluates; the others go on with their checks.
        let next = now.saturating_add(self.cfg.sub);
        if self
            .next_eval
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let events = {
            let Some(mut eval) = self.eval.try_lock() else {
                return;
            };
            eval.evaluate(now, self);
            eval.take_events()
        };
        self.deliver(&events);
    }

    /// Runs the callbacks outside every lock, each inside `catch_unwind`: a panicking callback
    /// is counted and never reaches the check that ran the evaluation.
    fn deliver(&self, events: &[FaultEvent]) {
        for event in events {
            #[cfg(feature = "tracing")]
            events::trace(event);
            for cb in &self.callbacks {
                let call = std::panic::AssertUnwindSafe(|| cb(event));
                if std::panic::catch_unwind(call).is_err() {
                    self.callback_panics.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    pub(crate) fn is_keyed(&self) -> bool {
        self.keyed.load(Ordering::Relaxed)
    }

    pub(crate) fn panel(&self) -> &Panel {
        &self.panel
    }
}

/// `true` if the verdict counts as a denial for the measure: a denial, or a pass-through whose
/// shadow was one.
#[inline]
fn is_shadow_denied(v: &Verdict) -> bool {
    match v {
        Verdict::Allow(_) => false,
        Verdict::Deny(_) => true,
        Verdict::PassThrough(p) => p.shadow() == crate::engine::verdict::Shadow::Deny,
    }
}

fn reason_code(r: PassReason) -> u64 {
    match r {
        PassReason::DenyAnomaly => 0,
        PassReason::ClockFault => 1,
        PassReason::Forced => 2,
        PassReason::BackendUnavailable => 3,
        PassReason::Shadow => 4,
    }
}

fn reason_from_code(c: u64) -> PassReason {
    match c {
        0 => PassReason::DenyAnomaly,
        1 => PassReason::ClockFault,
        3 => PassReason::BackendUnavailable,
        4 => PassReason::Shadow,
        _ => PassReason::Forced,
    }
}
