//! Hot reload (feature `config`): [`LimitsHandle`] serves one [`Limits`] document at a time
//! and swaps in the next one atomically, keeping every key's state.
//!
//! A check holds a read guard on the current document for its whole duration and a reload
//! takes the write guard for the swap, so a check sees exactly one revision: the document it
//! resolved its policy in is the one whose quota judged it, even though a changed policy's
//! limiter is shared by both documents and re-quoted in place. The guard is a
//! `parking_lot::RwLock`: a check takes it shared (one atomic add); a reload waits for the
//! checks in flight, and new checks wait behind it (writers are not starved) for the few
//! microseconds the swap takes. Everything slow (validation, the diff, building limiters)
//! happens before the write guard is taken.

use crate::sync::atomic::{AtomicU64, Ordering};
use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use crate::sync::{Mutex, RwLock};

use crate::engine::check::Check;
use crate::engine::clock::saturating_nanos;
use crate::engine::error::InsufficientCapacity;
use crate::engine::verdict::Verdict;
use crate::limiter::keyed::KeyedRateLimiter;
use crate::limits::document::{ConfigErrors, Diff, Limits};

mod builder;
mod events;
mod multi;
mod policies;

pub use builder::LimitsHandleBuilder;
pub use multi::{MultiDecision, PolicyVerdict};
#[cfg(feature = "metrics")]
pub(crate) use policies::Entry;
pub(crate) use policies::{Policies, Settings};

pub(crate) const DEFAULT_KNOWN_GOOD_AFTER: Duration = Duration::from_secs(3600);

/// What a check of a [`LimitsHandle`] (or a [`Rollout`](crate::limits::Rollout)) decided, and under
/// which document.
///
/// ```
/// use tollgate::Check;
/// use tollgate::limits::{Limits, LimitsHandle};
///
/// let handle = LimitsHandle::new(Limits::from_path("examples/limits/valid.toml")?);
/// let d = handle.check("paid", "checkout", "/v1/checkout/cart", "customer-42", Check::cost(1))?;
/// assert!(d.is_permitted());
/// assert_eq!((d.revision(), d.policy()), (41, Some("paid-checkout")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a decision that is not looked at enforces nothing"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    verdict: Verdict,
    revision: u64,
    policy: Option<Arc<str>>,
}

impl Decision {
    pub(crate) fn new(verdict: Verdict, revision: u64, policy: Option<Arc<str>>) -> Self {
        Self {
            verdict,
            revision,
            policy,
        }
    }

    /// The verdict. When no policy matched it is an [`Allow`](Verdict::Allow) whose
    /// [`remaining`](crate::Allowed::remaining) is `u64::MAX`: the document does not limit the
    /// request.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// The revision of the document that judged the check.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The name of the policy that judged the check, or `None` if no policy matched.
    pub fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// `true` if the request may proceed ([`Verdict::is_permitted`]).
    pub fn is_permitted(&self) -> bool {
        self.verdict.is_permitted()
    }
}

/// A [`Limits`] document in force, with one [`KeyedRateLimiter`](crate::KeyedRateLimiter)
/// per policy (keys are customer ids, looked up as `&str`), swapped atomically by
/// [`reload`](LimitsHandle::reload).
///
/// A policy's limiter is built on the policy's first check: a handle costs a few hundred
/// bytes a policy (under 1 KiB with its document, at 20,000 policies) plus about 15 KiB for
/// each policy that traffic has reached.
///
/// ```
/// use tollgate::Check;
/// use tollgate::limits::{Limits, LimitsHandle};
///
/// let doc = |quota: &str, revision: u64| Limits::from_toml(&format!(
///     "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
/// ));
/// let handle = LimitsHandle::new(doc("1/s", 1)?);
/// assert!(handle.check("free", "search", "/api/x", "alice", Check::cost(1))?.is_permitted());
/// assert!(!handle.check("free", "search", "/api/x", "alice", Check::cost(1))?.is_permitted());
///
/// let diff = handle.reload(doc("1/s;burst=2", 2)?)?;
/// assert_eq!(diff.changed()[0].policy, "api");
/// assert_eq!(handle.revision(), 2);
/// // alice keeps her fill level: she had used all of a burst of 1, so she has used all of
/// // the burst of 2 too — no free request for a raised burst.
/// assert!(!handle.check("free", "search", "/api/x", "alice", Check::cost(1))?.is_permitted());
///
/// let tighter = doc("1/min", 3)?; // 60× tighter and not acknowledged
/// assert!(handle.reload(tighter).is_err());
/// assert_eq!(handle.revision(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Reload
///
/// A reload runs [`Limits::check_transition`] against the document in force: a rejected
/// document leaves the old one serving. An accepted one is swapped in at once:
///
/// * unchanged policies keep their limiter, state untouched;
/// * changed policies (same name) keep their limiter and every key's fill level; the new
///   quota is set as by [`set_quota`](crate::KeyedRateLimiter::set_quota): a key that had
///   used a share of its burst has used the same share of the new one, so no lockout and no
///   free burst. Checks wait while the changed policies' tables are rescaled (a few
///   milliseconds per million tracked keys), so each check sees one revision;
/// * **state is kept only for quota, burst and matcher changes**: a policy whose priority
///   `classes` or `retry_budget` change gets a new limiter (a limiter's classes and budget
///   are fixed when it is built), so every key of that policy starts with a full burst and
///   the budget's window starts empty — ship such a change when a burst per key is
///   acceptable, or together with a quota change you can afford. The same holds for a
///   shadow flag that flips while a detector is attached;
/// * removed policies are dropped; added ones start fresh.
///
/// Each policy's limiter gets the policy's [`classes`](crate::limits::Policy::classes) (choose one
/// per check with [`Check::class`]) and [`retry_budget`](crate::limits::Policy::retry_budget)
/// (retries are checks with [`Check::attempt`] ≥ 1), shared by all the policy's keys.
///
/// # Fault detector and known-good revisions
///
/// A [`FaultDetector`](crate::safety::FaultDetector) given to the builder watches the limiters of
/// every enforcing policy together (shadow policies are left out: their denials are never
/// served). Every accepted reload tells it the new revision
/// ([`set_revision`](crate::safety::FaultDetector::set_revision)); its baseline stays pinned to the
/// last known-good revision, so a bad document cannot become the new normal:
///
/// * at build, the first document is marked known-good if the detector has learned nothing
///   yet (an imported baseline keeps the revision it was learned under);
/// * a revision becomes known-good once it has served for
///   [`known_good_after`](LimitsHandleBuilder::known_good_after) (default 1 h, on the
///   handle's clock) with the detector enforcing and no deny-anomaly pass-through under it;
///   this is checked lazily on checks and on [`tick`](LimitsHandle::tick). A revision that
///   tripped the detector is never marked automatically;
/// * [`mark_known_good`](LimitsHandle::mark_known_good) marks the revision in force now.
///
/// Detector callbacks run inside a check, while it holds the document: a callback must not
/// call [`reload`](LimitsHandle::reload) on the same handle (it would wait for itself).
pub struct LimitsHandle {
    current: RwLock<Arc<Policies>>,
    /// Serialises reloads, so each diff is taken against the document it replaces.
    reloading: Mutex<()>,
    settings: Settings,
    guard: f64,
    known_good_after: u64,
    /// When the revision on probation becomes known-good (`u64::MAX`: none on probation).
    /// Relaxed: it only gates the cold path, which rechecks under `probation`.
    probation_until: AtomicU64,
    /// The revision on probation, if any.
    probation: Mutex<Option<u64>>,
    /// Reloads accepted and refused, for metrics.
    reloads: [AtomicU64; 2],
}

impl LimitsHandle {
    /// A handle serving `limits` on the monotonic clock, with the default guard
    /// ([`DEFAULT_GUARD`](crate::limits::Limits::DEFAULT_GUARD)) and no detector.
    pub fn new(limits: Limits) -> Self {
        Self::builder(limits).build()
    }

    /// A builder, to choose the clock, the key bound, the guard and a detector.
    pub fn builder(limits: Limits) -> LimitsHandleBuilder {
        LimitsHandleBuilder::new(limits)
    }

    /// Checks a request: resolves its policy in the document in force and checks `key`
    /// against that policy's limiter, under one revision.
    ///
    /// No matching policy: an [`Allow`](Verdict::Allow) with `remaining() == u64::MAX` and
    /// [`Decision::policy`] `None` (unlimited by this document; nothing is counted). A shadow
    /// policy: a [`PassThrough`](crate::PassThrough) with
    /// [`PassReason::Shadow`](crate::PassReason::Shadow) and the verdict it would have given
    /// (evaluated and counted, never denying).
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
        let decision = self
            .current
            .read()
            .check(tier, category, route, key, check)?;
        self.maybe_known_good();
        Ok(decision)
    }

    /// Checks a request against **every** policy that applies to it — the most specific one
    /// and each policy marked `also = true` that matches ([`Limits::resolve_all`], in that
    /// order) — under one revision, all or nothing: if one denies, the policies checked before
    /// it are refunded ([`KeyedRateLimiter::refund_key`]) and the ones after it are not
    /// checked, so a denied request consumes nothing from any limit. Each limit on its own
    /// is never exceeded, under any concurrency: a refund only gives back what the same
    /// request took.
    ///
    /// No applicable policy, shadow policies and pass-throughs keep the meaning they have in
    /// [`check`](Self::check): nothing applies — an allow with `remaining() == u64::MAX` and
    /// no policy; a shadow policy never denies (its verdict is a pass-through, charged like
    /// an enforcing one and refunded with the others); a limiter passing through (its fault
    /// detector tripped) lets the request on to the next policy. [`MultiDecision`] says
    /// which verdict is the overall one.
    ///
    /// Not given back on a denial: a retry's debit of a policy's
    /// [`RetryBudget`](crate::shaping::RetryBudget), a pass-through's charge to its ceiling, and a
    /// key's charge to a full table's shared overflow cell (conservative: the request may
    /// have cost something there, never more than a check).
    ///
    /// ```
    /// use tollgate::Check;
    /// use tollgate::limits::{Limits, LimitsHandle};
    ///
    /// let handle = LimitsHandle::new(Limits::from_toml(r#"
    /// schema = 1
    /// revision = 1
    /// [[policies]]
    /// name = "search"
    /// match = { route = "/v1/search" }
    /// quota = "10/s"
    /// [[policies]]
    /// name = "customer"
    /// match = { route = "/*" }
    /// quota = "1/min;burst=2"
    /// also = true
    /// "#)?);
    /// let search = || handle.check_all("free", "api", "/v1/search", "alice", Check::cost(1));
    /// assert!(search()?.is_permitted());
    /// assert!(search()?.is_permitted());
    /// let d = search()?;
    /// assert_eq!((d.is_permitted(), d.policy()), (false, Some("customer")));
    /// // the denied request took nothing from "search": 8 of 10 remain
    /// let left = handle.check_all("free", "api", "/v1/search", "alice", Check::cost(0))?;
    /// assert_eq!(left.verdicts()[0].verdict().allowed().map(|a| a.remaining()), Some(8));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds a policy's burst (nothing is consumed).
    pub fn check_all(
        &self,
        tier: &str,
        category: &str,
        route: &str,
        key: &str,
        check: Check,
    ) -> Result<MultiDecision, InsufficientCapacity> {
        let decision = self
            .current
            .read()
            .check_all(tier, category, route, key, check)?;
        self.maybe_known_good();
        Ok(decision)
    }

    /// Replaces the document in force with `new`, if [`Limits::check_transition`] accepts
    /// it, and returns what changed.
    ///
    /// # Errors
    ///
    /// Why the transition was refused (an unacknowledged tightening beyond the guard, a stale
    /// revision); the old document keeps serving.
    pub fn reload(&self, new: Limits) -> Result<Diff, ConfigErrors> {
        let _one_at_a_time = self.reloading.lock();
        let old = Arc::clone(&*self.current.read());
        let diff = match Limits::check_transition(&old.limits, &new, self.guard) {
            Ok(diff) => diff,
            Err(errors) => {
                self.reloads[1].fetch_add(1, Ordering::Relaxed);
                events::reload_refused(old.limits.revision(), new.revision(), &errors);
                return Err(errors);
            }
        };
        let revision = new.revision();
        let moved_on = revision != old.limits.revision();
        let (mut next, handover) = old.successor(Arc::new(new), &self.settings);
        {
            // Under the write guard, so a check sees one revision: the quota change walks the
            // policy's key table once (rescaling each key's cell to its fill level under the
            // new quota, a few milliseconds per million keys), and checks wait for it.
            let mut current = self.current.write();
            handover.apply();
            next.settle();
            *current = Arc::new(next);
        }
        if let Some(d) = self.settings.detector.as_ref().filter(|_| moved_on) {
            d.set_revision(revision);
            if d.baseline().revision() != revision {
                self.start_probation(revision);
            }
        }
        self.reloads[0].fetch_add(1, Ordering::Relaxed);
        events::reloaded(old.limits.revision(), &diff);
        Ok(diff)
    }

    /// The revision in force.
    pub fn revision(&self) -> u64 {
        self.current.read().limits.revision()
    }

    /// The document in force.
    pub fn limits(&self) -> Arc<Limits> {
        Arc::clone(&self.current.read().limits)
    }

    /// The limiter of the policy named `policy` in the document in force (built now if no
    /// check has needed it yet): to read its [`len`](crate::KeyedRateLimiter::len) or
    /// [`quota`](crate::KeyedRateLimiter::quota), or to see that a reload kept it
    /// ([`Arc::ptr_eq`]). Check through
    /// [`check`](Self::check), which holds the revision steady; a check made directly on
    /// the limiter may be judged by the next revision's quota.
    ///
    /// ```
    /// # let handle = tollgate::limits::LimitsHandle::new(tollgate::limits::Limits::from_path("examples/limits/valid.toml")?);
    /// assert_eq!(handle.limiter("free").unwrap().quota(), "10/s;burst=20".parse()?);
    /// assert!(handle.limiter("gold").is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self, policy: &str) -> Option<Arc<KeyedRateLimiter<String>>> {
        self.current.read().limiter(policy).cloned()
    }

    /// Marks the revision in force as known-good now: the detector's baseline is pinned to
    /// it. Does nothing without a detector.
    pub fn mark_known_good(&self) {
        let Some(d) = &self.settings.detector else {
            return;
        };
        let mut probation = self.probation.lock();
        d.mark_known_good(self.revision());
        *probation = None;
        self.probation_until.store(u64::MAX, Ordering::Relaxed);
    }

    /// Reloads accepted and refused since the handle was built.
    #[cfg(feature = "metrics")]
    pub(crate) fn reload_counts(&self) -> (u64, u64) {
        (
            self.reloads[0].load(Ordering::Relaxed),
            self.reloads[1].load(Ordering::Relaxed),
        )
    }

    /// The names of the policies in force with their shadow flags and limiters, in the
    /// document's order.
    #[cfg(feature = "metrics")]
    pub(crate) fn policy_limiters(&self) -> Vec<Entry> {
        self.current.read().entries()
    }

    /// The detector attached, if any.
    #[cfg(feature = "metrics")]
    pub(crate) fn detector(&self) -> Option<&crate::safety::fault::FaultDetector> {
        self.settings.detector.as_ref()
    }

    /// Runs any due known-good check now: for idle handles, where no check arrives to run it.
    pub fn tick(&self) {
        self.maybe_known_good();
    }

    pub(crate) fn from_parts(
        policies: Policies,
        settings: Settings,
        guard: f64,
        known_good_after: Duration,
    ) -> Self {
        let handle = Self {
            current: RwLock::new(Arc::new(policies)),
            reloading: Mutex::new(()),
            settings,
            guard,
            known_good_after: saturating_nanos(known_good_after),
            probation_until: AtomicU64::new(u64::MAX),
            probation: Mutex::new(None),
            reloads: [AtomicU64::new(0), AtomicU64::new(0)],
        };
        if let Some(d) = &handle.settings.detector {
            let revision = handle.revision();
            d.set_revision(revision);
            let baseline = d.baseline();
            if baseline.hours().is_empty() {
                d.mark_known_good(revision);
            } else if baseline.revision() != revision {
                handle.start_probation(revision);
            }
        }
        handle
    }

    fn start_probation(&self, revision: u64) {
        let mut probation = self.probation.lock();
        *probation = Some(revision);
        let now = self.settings.clock.now_nanos();
        let until = now.saturating_add(self.known_good_after);
        self.probation_until.store(until, Ordering::Relaxed);
    }

    #[inline]
    fn maybe_known_good(&self) {
        let until = self.probation_until.load(Ordering::Relaxed);
        if until != u64::MAX && self.settings.clock.now_nanos() >= until {
            self.end_probation();
        }
    }

    #[cold]
    fn end_probation(&self) {
        let (Some(d), mut probation) = (&self.settings.detector, self.probation.lock()) else {
            return;
        };
        let now = self.settings.clock.now_nanos();
        let Some(revision) = *probation else { return };
        if now < self.probation_until.load(Ordering::Relaxed) || revision != self.revision() {
            return;
        }
        let state = d.state();
        let calm = d.stats().passed_deny_anomaly == 0
            && state.revision == revision
            && matches!(state.mode, crate::safety::fault::DetectorMode::Enforcing);
        if calm {
            d.mark_known_good(revision);
        }
        *probation = None;
        self.probation_until.store(u64::MAX, Ordering::Relaxed);
    }
}

impl fmt::Debug for LimitsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.current.read();
        f.debug_struct("LimitsHandle")
            .field("revision", &current.limits.revision())
            .field("policies", &current.limits.policies().len())
            .field("guard", &self.guard)
            .field("clock", &self.settings.clock)
            .field("detector", &self.settings.detector.is_some())
            .finish_non_exhaustive()
    }
}

impl LimitsHandle {
    /// How long a new revision serves without a deny anomaly before it becomes known-good, by
    /// default: one hour.
    pub const DEFAULT_KNOWN_GOOD_AFTER: Duration = crate::limits::reload::DEFAULT_KNOWN_GOOD_AFTER;
}
