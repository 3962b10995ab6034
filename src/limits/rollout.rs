//! Staged rollout (feature `config`): a new [`Limits`] document goes to 1 % of
//! keys, then 10 %, then all of them, and halts and reverts by itself when the keys on it are
//! denied far more broadly than the keys still on the old one.

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use core::fmt;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::sync::Mutex;

use crate::engine::check::Check;
use crate::engine::clock::Clock;
use crate::engine::error::InsufficientCapacity;
use crate::limiter::keyed::KeyedRateLimiter;
use crate::limits::document::{Diff, Limits};
use crate::limits::reload::{Decision, LimitsHandle, Policies, Settings, DEFAULT_KNOWN_GOOD_AFTER};

mod builder;
mod cohort;
mod multi;
mod state;
mod transitions;
mod window;

pub use builder::{RolloutBuilder, RolloutStage};
pub use state::RolloutState;
pub use window::WindowFigures;

use cohort::{Cohort, BUCKETS};
use window::Tallies;

/// The comparison settings; see [`RolloutBuilder`].
#[derive(Clone, Copy, Debug)]
struct Config {
    window: u64,
    threshold: f64,
    min_cohort_keys: usize,
    max_tracked_keys: usize,
    guard: f64,
}

/// What only a transition touches.
#[derive(Debug)]
struct Control {
    state: RolloutState,
    /// The stage in force (the number of stages once complete).
    stage: usize,
    stage_since: u64,
    window_start: u64,
    last_window: Option<WindowFigures>,
    events: VecDeque<RolloutState>,
}

/// A staged rollout of a new [`Limits`] document: per key, the new document's policy for keys
/// in the cohort and the old one's for the rest.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Check, ManualClock};
/// use tollgate::limits::{Limits, Rollout, RolloutState};
///
/// let doc = |quota: &str, revision: u64| Limits::from_toml(&format!(
///     "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
/// ));
/// let clock = ManualClock::new();
/// let rollout = Rollout::new(doc("10/s", 1)?, doc("20/s", 2)?, clock.clone())?;
/// assert_eq!(rollout.basis_points(), 100); // 1 % of keys
/// let d = rollout.check("free", "search", "/api/x", "alice", Check::cost(1))?;
/// assert_eq!(d.revision(), if rollout.is_in_cohort("alice") { 2 } else { 1 });
///
/// clock.advance(Duration::from_secs(300));
/// rollout.tick();
/// assert_eq!(rollout.basis_points(), 1_000); // 10 %
/// clock.advance(Duration::from_secs(300));
/// rollout.tick();
/// assert!(matches!(rollout.state(), RolloutState::Complete { .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Cohorts
///
/// A key's bucket is SipHash-1-3 of its UTF-8 bytes under a 128-bit seed, modulo 10,000
/// ([`RolloutBuilder::seed`]); the key is in the cohort iff its bucket is below the stage's
/// basis points. The hash is fixed (SipHash-1-3 as specified, not `std`'s hasher, which may
/// change), so every process (and every version of this crate) puts a key in the same
/// cohort. A later stage's cohort contains the earlier one's.
///
/// Each document has its own limiters (one per policy). A key that joins the cohort (at a
/// stage change, or when the rollout completes) carries its place in time to the same-named
/// policy of the new document at its first check there: the share of the old burst it had
/// used becomes the same share of the new one, so promotion never hands out a fresh burst
/// (a policy with no same-named one in the old document starts fresh). From then on the new
/// document's cell is the key's state, refilled at the new rate, and its checks take no
/// lock. A revert does not carry state back: the new document's charges
/// may be the very fault being reverted, so a reverted key resumes its old-document state,
/// which lets it through at most one old-document burst sooner and never prolongs the
/// incident.
///
/// # Comparison and automatic halt
///
/// Every window (default 60 s on the rollout's clock; windows restart at each stage change)
/// the rollout compares the *deny breadth* of cohort and control keys: the share of keys
/// active in the window that were mostly denied (more denials than allowed checks; checks
/// that no policy matched are left out). With at least 10 active cohort keys, if the
/// cohort's breadth exceeds the control's by more than the threshold (default 5 percentage
/// points) the rollout halts and reverts by itself: every key goes back on the old
/// document, and [`RolloutState::Halted`] records the figures and why. A stage whose time
/// passes without a halt (its last, partial window compared too) is promoted.
///
/// Breadth counts keys, not requests, so one key flooding the new policy moves it by one
/// key; but keys are the caller's, and many keys denied on purpose can halt a rollout. A
/// halt only ever reverts to the old document, so that is the safe direction.
///
/// Per window, at most [`max_tracked_keys`](RolloutBuilder::max_tracked_keys) keys are
/// tallied on each side (default 4,096 each, about 32 bytes per key); checks of further
/// keys are enforced but left out of the figures.
///
/// # Evaluation
///
/// There is no thread: a check that finds a window or stage due closes it (under a lock,
/// off the fast path), and [`tick`](Rollout::tick) does the same for an idle rollout. Under
/// a [`ManualClock`](crate::ManualClock) everything is deterministic.
pub struct Rollout {
    old: Policies,
    new: Policies,
    diff: Diff,
    clock: Clock,
    /// How the limiters were built: for [`to_handle`](Rollout::to_handle).
    settings: Settings,
    stages: Vec<RolloutStage>,
    cohort: Cohort,
    cfg: Config,
    /// Keys whose bucket is below this use the new document: 0 once reverted, 10,000 once
    /// complete. Relaxed: a check one step late to see a stage change is harmless.
    basis_points: AtomicU32,
    /// The next instant a window or a stage is due (`u64::MAX`: never). Relaxed: it only
    /// gates the cold path, which rechecks under `control`.
    due: AtomicU64,
    tallies: Tallies,
    control: Mutex<Control>,
    /// By position of the new document's policies: the position of the old document's
    /// same-named policy, whose limiter a key joining the cohort carries its state from
    /// (`None`: the old document has no such policy, and its keys start fresh). Built once:
    /// both documents are fixed for the rollout's life. Positions, not limiters: limiters
    /// are built on their first check, and an old one never built has nothing to carry.
    carry: Box<[Option<usize>]>,
}

impl Rollout {
    /// A rollout from `old` to `new` on `clock` with the defaults: 1 % of keys for 5 min,
    /// 10 % for 5 min, then all of them; 60 s windows; a halt at 5 points.
    ///
    /// # Errors
    ///
    /// As [`RolloutBuilder::build`]: the transition must pass [`Limits::check_transition`].
    pub fn new(
        old: Limits,
        new: Limits,
        clock: impl Into<Clock>,
    ) -> Result<Self, crate::limits::document::ConfigErrors> {
        Self::builder(old, new).clock(clock).build()
    }

    /// A builder, for the stages, the seed, the window and the threshold.
    pub fn builder(old: Limits, new: Limits) -> RolloutBuilder {
        RolloutBuilder::new(old, new)
    }

    fn from_parts(
        (old, new): (Policies, Policies),
        diff: Diff,
        settings: Settings,
        stages: Vec<RolloutStage>,
        cohort: Cohort,
        cfg: Config,
    ) -> Self {
        let now = settings.clock.now_nanos();
        let carry = new
            .limits
            .policies()
            .iter()
            .map(|p| old.limits.position(p.name()))
            .collect();
        let rollout = Self {
            old,
            new,
            diff,
            clock: settings.clock.clone(),
            settings,
            stages,
            cohort,
            cfg,
            basis_points: AtomicU32::new(0),
            due: AtomicU64::new(u64::MAX),
            tallies: Tallies::new(cfg.max_tracked_keys),
            control: Mutex::new(Control {
                state: RolloutState::Complete {
                    since: Duration::ZERO,
                },
                stage: 0,
                stage_since: now,
                window_start: now,
                last_window: None,
                events: VecDeque::new(),
            }),
            carry,
        };
        rollout.enter_stage(&mut rollout.control.lock(), 0, now);
        rollout
    }

    /// Checks a request: `key` in the cohort is judged by the new document's policy, the rest
    /// by the old one's. The [`Decision`] says which revision judged it; no matching policy
    /// and shadow policies behave as in [`LimitsHandle::check`](crate::limits::LimitsHandle::check).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds the policy's burst.
    pub fn check(
        &self,
        tier: &str,
        category: &str,
        route: &str,
        key: &str,
        check: Check,
    ) -> Result<Decision, InsufficientCapacity> {
        let Side {
            hash,
            bp,
            in_cohort,
            doc,
        } = self.side(key);
        let at = doc.limits.resolve_position(tier, category, route);
        // A key that joined the cohort (a stage change, the completion) keeps its place in
        // time: no fresh burst under the new document. Lock-free once it has joined.
        let from = at
            .filter(|_| in_cohort)
            .and_then(|i| self.carried_from(i))
            .map(|from| &**from);
        let decision = doc.check_at(at, key, check, from)?;
        self.tally(
            hash,
            bp,
            in_cohort,
            decision.policy().is_some(),
            decision.is_permitted(),
        );
        Ok(decision)
    }

    /// The old document's limiter that a cohort key of the new policy at position `i`
    /// carries its state from, if that policy exists there and has been checked.
    #[inline]
    fn carried_from(&self, i: usize) -> Option<&Arc<KeyedRateLimiter<String>>> {
        self.old.built(self.carry.get(i).copied().flatten()?)
    }

    /// Which document judges `key` now (ticking the rollout first): the new one for the
    /// cohort, the old one for the rest.
    #[inline]
    fn side(&self, key: &str) -> Side<'_> {
        self.tick();
        let hash = self.cohort.hash(key);
        let bp = self.basis_points.load(Ordering::Relaxed);
        let in_cohort = u32::from(Cohort::bucket_of(hash)) < bp;
        let doc = if in_cohort { &self.new } else { &self.old };
        Side {
            hash,
            bp,
            in_cohort,
            doc,
        }
    }

    /// Counts a check a policy judged in the current window's tallies, while a stage is
    /// running (`bp`, the basis points the check was judged under, neither 0 nor all).
    fn tally(&self, hash: u64, bp: u32, in_cohort: bool, judged: bool, permitted: bool) {
        if judged && 0 < bp && u64::from(bp) < BUCKETS {
            self.tallies.record(hash, in_cohort, !permitted);
        }
    }

    /// Closes any due window and promotes any due stage now: for idle rollouts, where no
    /// check arrives to do it.
    #[inline]
    pub fn tick(&self) {
        let now = self.clock.now_nanos();
        if now >= self.due.load(Ordering::Relaxed) {
            self.evaluate(now);
        }
    }

    /// Moves to the next stage now (from a running stage, or from an operator's
    /// [`halt`](Self::halt)). Returns `false` if there is none to move to: the rollout is
    /// complete or reverted.
    pub fn promote(&self) -> bool {
        let mut c = self.control.lock();
        let now = self.clock.now_nanos();
        if !c.state.is_comparing() {
            return false;
        }
        let next = c.stage + 1;
        self.enter_stage(&mut c, next, now);
        true
    }

    /// Holds the rollout where it is: no further promotion, the cohort stays on the new
    /// document, and the comparison still runs (a failing window still reverts). Returns
    /// `false` unless a stage was running.
    pub fn halt(&self, reason: impl Into<String>) -> bool {
        let mut c = self.control.lock();
        if !matches!(c.state, RolloutState::Staged { .. }) {
            return false;
        }
        let now = self.clock.now_nanos();
        self.stop(&mut c, reason.into(), now, false);
        true
    }

    /// Puts every key back on the old document, from any state (a completed rollout
    /// included). Returns `false` if it was already reverted.
    pub fn revert(&self) -> bool {
        let mut c = self.control.lock();
        if matches!(c.state, RolloutState::Halted { reverted: true, .. }) {
            return false;
        }
        let now = self.clock.now_nanos();
        self.stop(&mut c, "reverted by the operator".to_owned(), now, true);
        true
    }

    /// Where the rollout stands.
    pub fn state(&self) -> RolloutState {
        self.control.lock().state.clone()
    }

    /// The states the rollout entered, oldest first (the last 64).
    pub fn events(&self) -> Vec<RolloutState> {
        self.control.lock().events.iter().cloned().collect()
    }

    /// The figures of the last closed window, if one has closed.
    pub fn last_window(&self) -> Option<WindowFigures> {
        self.control.lock().last_window
    }

    /// The figures of the window still open, so far.
    pub fn current_window(&self) -> WindowFigures {
        let c = self.control.lock();
        let bp = self.basis_points.load(Ordering::Relaxed);
        let now = self.clock.now_nanos();
        self.tallies.figures(c.window_start, now, bp, false)
    }

    /// The share of keys on the new document now, in basis points (0 once reverted, 10,000
    /// once complete).
    pub fn basis_points(&self) -> u32 {
        self.basis_points.load(Ordering::Relaxed)
    }

    /// The key's bucket in `0..10_000`: it is in the cohort while the bucket is below
    /// [`basis_points`](Self::basis_points).
    pub fn bucket(&self, key: &str) -> u16 {
        Cohort::bucket_of(self.cohort.hash(key))
    }

    /// Whether the new document judges `key` now.
    pub fn is_in_cohort(&self, key: &str) -> bool {
        u32::from(self.bucket(key)) < self.basis_points()
    }

    /// What changes from the old document to the new one.
    pub fn diff(&self) -> &Diff {
        &self.diff
    }

    /// The old document.
    pub fn old_limits(&self) -> Arc<Limits> {
        Arc::clone(&self.old.limits)
    }

    /// The new document.
    pub fn new_limits(&self) -> Arc<Limits> {
        Arc::clone(&self.new.limits)
    }

    /// A handle to serve from once the rollout is over, sharing its limiters so every key
    /// keeps its state: the new document's once complete, the old one's once reverted;
    /// `None` while a stage runs or is held. The handle has no fault detector.
    ///
    /// ```
    /// # let doc = |quota: &str, revision: u64| tollgate::limits::Limits::from_toml(&format!(
    /// #     "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
    /// # ));
    /// let rollout = tollgate::limits::Rollout::new(doc("10/s", 1)?, doc("20/s", 2)?, tollgate::ManualClock::new())?;
    /// assert!(rollout.to_handle().is_none()); // still at 1 %
    /// rollout.promote();
    /// rollout.promote();
    /// let handle = rollout.to_handle().expect("complete");
    /// assert_eq!(handle.revision(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_handle(&self) -> Option<LimitsHandle> {
        let policies = match self.state() {
            RolloutState::Complete { .. } => self.new.clone(),
            RolloutState::Halted { reverted: true, .. } => self.old.clone(),
            _ => return None,
        };
        Some(LimitsHandle::from_parts(
            policies,
            self.settings.clone(),
            self.cfg.guard,
            DEFAULT_KNOWN_GOOD_AFTER,
        ))
    }

    /// The stages before 100 %.
    pub fn stages(&self) -> &[RolloutStage] {
        &self.stages
    }

    /// Every policy's name, shadow flag and limiter, the old document's then the new one's.
    #[cfg(feature = "metrics")]
    pub(crate) fn policy_limiters(&self) -> [Vec<crate::limits::reload::Entry>; 2] {
        [self.old.entries(), self.new.entries()]
    }
}

impl fmt::Debug for Rollout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rollout")
            .field("old", &self.old.limits.revision())
            .field("new", &self.new.limits.revision())
            .field("state", &self.state())
            .field("basis_points", &self.basis_points())
            .field("stages", &self.stages)
            .field("cfg", &self.cfg)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// What [`Rollout::side`] found for a key.
struct Side<'a> {
    hash: u64,
    /// The basis points read for this check.
    bp: u32,
    in_cohort: bool,
    doc: &'a Policies,
}

impl Rollout {
    /// The default stages: 1 % for 5 minutes, then 10 % for 5 minutes; then every key (100 %).
    pub const DEFAULT_STAGES: [RolloutStage; 2] = crate::limits::rollout::builder::DEFAULT_STAGES;
}
