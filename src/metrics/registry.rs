//! [`MetricsRegistry`]: named sources, read on [`publish`](MetricsRegistry::publish).

use core::fmt;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use metrics::Label;
use parking_lot::Mutex;

use super::names::{self, *};
#[cfg(feature = "config")]
use super::track::add;
use super::track::{InForce, Track};
use crate::engine::stats::{Counters, COUNTERS};
use crate::limiter::direct::RateLimiter;
use crate::limiter::keyed::KeyedRateLimiter;
#[cfg(feature = "config")]
use crate::limits::{reload::LimitsHandle, rollout::Rollout, rollout::RolloutState};
use crate::safety::fault::{FaultDetector, Mode};
use crate::safety::slo::SuccessRate;
use crate::safety::watchdog::Watchdog;

/// Why a source could not be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The name is empty, longer than 64 bytes, or has a character other than ASCII letters,
    /// digits and `_ - . : /`.
    #[error("invalid metrics name {name:?}: use 1 to 64 ASCII letters, digits or _ - . : /")]
    InvalidName {
        /// The name, cut to 64 characters.
        name: String,
    },
    /// A source of this registry already has the name.
    #[error("metrics name {name:?} is already registered")]
    Duplicate {
        /// The name.
        name: String,
    },
}

/// A registry of named limiters, limits handles, rollouts and success rates, exported through
/// the [`metrics`] facade when [`publish`](Self::publish) is called — by a `/metrics` handler
/// right before it renders, so a scrape right after traffic sees every verdict.
///
/// `publish` reads the counters every limiter keeps anyway (no call per check, no periodic
/// flush) and sets counters to their absolute values and gauges to their current ones. Every
/// series of a source exists from its first publish, at zero if nothing happened yet. The
/// registry holds weak references: dropping a limiter removes it from the registry, and its
/// series keep the last values published (the facade cannot remove a series; exporters such
/// as `metrics-exporter-prometheus` can be told to forget idle ones). The name given at
/// registration is the `limiter` label; labels never carry a key. Clones share the registry.
///
/// ```
/// use std::sync::Arc;
/// use metrics_util::debugging::DebuggingRecorder;
/// use tollgate::{KeyedRateLimiter, MetricsRegistry};
///
/// let registry = MetricsRegistry::new();
/// let lim = Arc::new(KeyedRateLimiter::<String>::new("1/s".parse()?));
/// registry.register_keyed("api", &lim)?;
/// let _ = lim.check_key("alice");
/// let _ = lim.check_key("alice");
///
/// let recorder = DebuggingRecorder::new();
/// let snapshot = recorder.snapshotter();
/// metrics::with_local_recorder(&recorder, || registry.publish());
/// let checks = snapshot.snapshot().into_vec().into_iter()
///     .filter(|(k, ..)| k.key().name() == "tollgate_checks_total").count();
/// assert_eq!(checks, 11); // allow, 5 deny reasons, 5 pass-through reasons
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct MetricsRegistry {
    inner: Arc<Mutex<Vec<Entry>>>,
}

struct Entry {
    name: Arc<str>,
    source: Source,
    /// Per policy (and document, for a rollout): the counts carried across limiter changes.
    tracks: BTreeMap<(Arc<str>, usize), Track>,
}

enum Source {
    Direct(Weak<RateLimiter>),
    Keyed(Weak<dyn KeyedView>),
    #[cfg(feature = "config")]
    Limits(Weak<LimitsHandle>),
    #[cfg(feature = "config")]
    Rollout(Weak<Rollout>),
    SuccessRate(Weak<SuccessRate>),
}

/// What metrics read of a keyed limiter, whatever its key type.
trait KeyedView: Send + Sync {
    fn counters(&self) -> &Counters;
    fn len(&self) -> usize;
    fn max_keys(&self) -> usize;
    fn table_bytes(&self) -> usize;
    fn safety(&self) -> (Option<&FaultDetector>, Option<&Watchdog>);
}

impl<K: 'static> KeyedView for KeyedRateLimiter<K> {
    fn counters(&self) -> &Counters {
        KeyedRateLimiter::counters(self)
    }
    fn len(&self) -> usize {
        KeyedRateLimiter::len(self)
    }
    fn max_keys(&self) -> usize {
        KeyedRateLimiter::max_keys(self)
    }
    fn table_bytes(&self) -> usize {
        KeyedRateLimiter::table_bytes(self)
    }
    fn safety(&self) -> (Option<&FaultDetector>, Option<&Watchdog>) {
        KeyedRateLimiter::safety(self)
    }
}

impl MetricsRegistry {
    /// An empty registry.
    ///
    /// ```
    /// let registry = tollgate::MetricsRegistry::new();
    /// assert!(registry.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a direct limiter as `name`: its checks (`policy=""`), and its detector's
    /// and watchdog's state if it has them.
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let registry = tollgate::MetricsRegistry::new();
    /// let lim = Arc::new(tollgate::RateLimiter::new("10/s".parse()?));
    /// registry.register_limiter("login", &lim)?;
    /// assert!(registry.register_limiter("login", &lim).is_err()); // taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_limiter(
        &self,
        name: &str,
        limiter: &Arc<RateLimiter>,
    ) -> Result<(), MetricsError> {
        self.add(name, Source::Direct(Arc::downgrade(limiter)))
    }

    /// Registers a keyed limiter as `name`: its checks (`policy=""`), live keys and table
    /// bytes, and its detector's and watchdog's state if it has them.
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let registry = tollgate::MetricsRegistry::new();
    /// let lim = Arc::new(tollgate::KeyedRateLimiter::<u64>::new("10/s".parse()?));
    /// registry.register_keyed("per-customer", &lim)?;
    /// assert!(registry.register_keyed("per customer", &lim).is_err()); // a space
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_keyed<K: 'static>(
        &self,
        name: &str,
        limiter: &Arc<KeyedRateLimiter<K>>,
    ) -> Result<(), MetricsError> {
        let weak: Weak<dyn KeyedView> = Arc::downgrade(limiter) as Weak<dyn KeyedView>;
        self.add(name, Source::Keyed(weak))
    }

    /// Registers a limits handle as `name`: each policy's checks (`policy` = its name, as
    /// served: a shadow policy's checks are pass-throughs with reason `shadow`), live keys and
    /// table bytes; reloads; the revision; the detector's state if it has one.
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Limits, LimitsHandle, MetricsRegistry};
    /// let handle = Arc::new(LimitsHandle::new(Limits::from_path("examples/limits/valid.toml")?));
    /// MetricsRegistry::new().register_limits("gateway", &handle)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "config")]
    #[cfg_attr(docsrs, doc(cfg(feature = "config")))]
    pub fn register_limits(
        &self,
        name: &str,
        handle: &Arc<LimitsHandle>,
    ) -> Result<(), MetricsError> {
        self.add(name, Source::Limits(Arc::downgrade(handle)))
    }

    /// Registers a staged rollout as `name`: each policy's checks (both documents' limiters
    /// summed per policy name), the stage, the share of keys on the new document, the state
    /// and the last window's deny breadth of cohort and control keys.
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Limits, ManualClock, MetricsRegistry, Rollout};
    /// let doc = Limits::from_path("examples/limits/valid.toml")?;
    /// let rollout = Arc::new(Rollout::new(doc.clone(), doc, ManualClock::new())?);
    /// MetricsRegistry::new().register_rollout("gateway-rollout", &rollout)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "config")]
    #[cfg_attr(docsrs, doc(cfg(feature = "config")))]
    pub fn register_rollout(&self, name: &str, rollout: &Arc<Rollout>) -> Result<(), MetricsError> {
        self.add(name, Source::Rollout(Arc::downgrade(rollout)))
    }

    /// Registers a success rate as `name`: per declared tier (and `other`), the success rate
    /// over the last complete window and the responses counted by outcome.
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let slo = Arc::new(tollgate::SuccessRate::builder().tiers(["free", "paid"]).build()?);
    /// tollgate::MetricsRegistry::new().register_success_rate("customers", &slo)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_success_rate(
        &self,
        name: &str,
        success_rate: &Arc<SuccessRate>,
    ) -> Result<(), MetricsError> {
        self.add(name, Source::SuccessRate(Arc::downgrade(success_rate)))
    }

    /// How many sources are registered (and still alive at the last publish).
    ///
    /// ```
    /// assert_eq!(tollgate::MetricsRegistry::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// `true` if nothing is registered.
    ///
    /// ```
    /// assert!(tollgate::MetricsRegistry::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads every registered source and sets its series through the [`metrics`] facade (the
    /// recorder installed, or the local one of [`metrics::with_local_recorder`]): counters to
    /// their absolute values, gauges to their current ones. Call it right before rendering a
    /// scrape. Sources that were dropped are removed. Takes the registry's lock, and briefly
    /// each source's (a limits handle's read guard, a rollout's, a detector's): never on a
    /// check's path, but not free either — call it per scrape, not per request.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    /// use tollgate::{MetricsRegistry, RateLimiter};
    ///
    /// let registry = MetricsRegistry::new();
    /// let lim = Arc::new(RateLimiter::new("1/s".parse()?));
    /// registry.register_limiter("login", &lim)?;
    /// let _ = lim.check();
    /// let _ = lim.check();
    ///
    /// let recorder = PrometheusBuilder::new().build_recorder();
    /// let handle = recorder.handle();
    /// metrics::with_local_recorder(&recorder, || registry.publish());
    /// let text = handle.render();
    /// assert!(text.contains(r#"tollgate_checks_total{limiter="login",policy="",outcome="deny",reason="quota"} 1"#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn publish(&self) {
        describe();
        let mut entries = self.inner.lock();
        entries.retain_mut(|e| e.publish());
    }

    fn add(&self, name: &str, source: Source) -> Result<(), MetricsError> {
        if !names::is_valid_name(name) {
            return Err(MetricsError::InvalidName {
                name: name.chars().take(64).collect(),
            });
        }
        let mut entries = self.inner.lock();
        if entries.iter().any(|e| &*e.name == name) {
            return Err(MetricsError::Duplicate {
                name: name.to_owned(),
            });
        }
        entries.push(Entry {
            name: Arc::from(name),
            source,
            tracks: BTreeMap::new(),
        });
        Ok(())
    }
}

impl fmt::Debug for MetricsRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.inner.lock();
        let names: Vec<&str> = entries.iter().map(|e| &*e.name).collect();
        f.debug_struct("MetricsRegistry")
            .field("sources", &names)
            .finish()
    }
}

impl Entry {
    /// Publishes this source's series; `false` if the source is gone.
    fn publish(&mut self) -> bool {
        let name = &self.name;
        match &self.source {
            Source::Direct(w) => {
                let Some(lim) = w.upgrade() else { return false };
                let now = Some((lim.counters(), false, [0; COUNTERS]));
                checks(name, "", &track(&mut self.tracks, "", 0, now));
                let (d, w) = lim.safety();
                safety(name, d, w);
            }
            Source::Keyed(w) => {
                let Some(lim) = w.upgrade() else { return false };
                let now = Some((lim.counters(), false, [0; COUNTERS]));
                checks(name, "", &track(&mut self.tracks, "", 0, now));
                keys(name, "", lim.len(), lim.max_keys(), lim.table_bytes());
                let (d, w) = lim.safety();
                safety(name, d, w);
            }
            #[cfg(feature = "config")]
            Source::Limits(w) => {
                let Some(handle) = w.upgrade() else {
                    return false;
                };
                policies(
                    name,
                    &mut self.tracks,
                    [handle.policy_limiters(), Vec::new()],
                );
                let (accepted, refused) = handle.reload_counts();
                counter(RELOADS, labels(name, [("result", "accepted")]), accepted);
                counter(RELOADS, labels(name, [("result", "refused")]), refused);
                gauge(REVISION, labels(name, []), handle.revision() as f64);
                safety(name, handle.detector(), None);
            }
            #[cfg(feature = "config")]
            Source::Rollout(w) => {
                let Some(rollout) = w.upgrade() else {
                    return false;
                };
                policies(name, &mut self.tracks, rollout.policy_limiters());
                rollout_state(name, &rollout);
            }
            Source::SuccessRate(w) => {
                let Some(slo) = w.upgrade() else { return false };
                success_rate(name, &slo);
            }
        }
        true
    }
}

/// The counts of `policy` in document `doc` as served so far, given what is in force now.
fn track(
    tracks: &mut BTreeMap<(Arc<str>, usize), Track>,
    policy: &str,
    doc: usize,
    now: Option<InForce<'_>>,
) -> [u64; COUNTERS] {
    let key = (Arc::from(policy), doc);
    tracks.entry(key).or_default().read(now)
}

/// Every policy of one or two documents: checks summed by policy name (policies gone since
/// keep their last counts), and each policy's keys.
#[cfg(feature = "config")]
fn policies(
    name: &str,
    tracks: &mut BTreeMap<(Arc<str>, usize), Track>,
    docs: [Vec<crate::limits::reload::Entry>; 2],
) {
    let mut by_policy: BTreeMap<Arc<str>, [u64; COUNTERS]> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for (doc, entries) in docs.iter().enumerate() {
        for (policy, shadow, lim, from) in entries {
            let now = Some((lim.counters(), *shadow, *from));
            let counts = track(tracks, policy, doc, now);
            add(by_policy.entry(Arc::clone(policy)).or_default(), &counts);
            seen.insert((Arc::clone(policy), doc));
        }
    }
    for (key, t) in tracks.iter_mut().filter(|(k, _)| !seen.contains(*k)) {
        add(
            by_policy.entry(Arc::clone(&key.0)).or_default(),
            &t.read(None),
        );
    }
    for (policy, counts) in &by_policy {
        checks(name, policy, counts);
    }
    let mut keyed: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    for (policy, _, lim, _) in docs.iter().flatten() {
        let k = keyed.entry(policy).or_default();
        k.0 += lim.len();
        k.1 += lim.max_keys();
        k.2 += lim.table_bytes();
    }
    for (policy, (len, max, bytes)) in keyed {
        keys(name, policy, len, max, bytes);
    }
}

fn checks(name: &str, policy: &str, c: &[u64; COUNTERS]) {
    for (outcome, reason, i) in CHECK_SERIES {
        let l = labels(
            name,
            [("policy", policy), ("outcome", outcome), ("reason", reason)],
        );
        counter(CHECKS, l, c[i]);
    }
    let l = labels(name, [("policy", policy)]);
    counter(SHADOW_DENIED_TOTAL, l, c[SHADOW_DENIED_INDEX]);
    for (flag, i) in RETRY_SERIES {
        let l = labels(name, [("policy", policy), ("admitted", flag)]);
        counter(RETRIES_TOTAL, l, c[i]);
    }
}

fn keys(name: &str, policy: &str, len: usize, max: usize, bytes: usize) {
    gauge(LIVE_KEYS, labels(name, [("policy", policy)]), len as f64);
    gauge(MAX_KEYS, labels(name, [("policy", policy)]), max as f64);
    gauge(
        TABLE_BYTES,
        labels(name, [("policy", policy)]),
        bytes as f64,
    );
}

fn safety(name: &str, detector: Option<&FaultDetector>, watchdog: Option<&Watchdog>) {
    if let Some(d) = detector {
        let st = d.state();
        let current = match st.mode {
            Mode::PassingThrough { .. } if st.overridden => "forced",
            Mode::PassingThrough { .. } => "pass_through",
            _ => "enforcing",
        };
        for mode in ["enforcing", "pass_through", "forced"] {
            let v = if mode == current { 1.0 } else { 0.0 };
            gauge(DETECTOR_MODE, labels(name, [("mode", mode)]), v);
        }
        gauge(DENY_BREADTH, labels(name, []), st.last.measure);
        let baseline = st.last.baseline.unwrap_or(f64::NAN);
        gauge(DENY_BREADTH_BASELINE, labels(name, []), baseline);
    }
    if let Some(w) = watchdog {
        counter(CLOCK_FAULTS, labels(name, []), w.faults());
    }
}

fn success_rate(name: &str, slo: &SuccessRate) {
    for t in slo.snapshot() {
        let tier = t.tier();
        let rate = t.success_rate().unwrap_or(f64::NAN);
        gauge(SUCCESS_RATE, labels(name, [("tier", tier)]), rate);
        let outcomes = [
            ("success", t.successes()),
            ("rate_limited", t.failures_429()),
            ("server_error", t.failures_5xx()),
            ("client_error", t.client_errors()),
        ];
        for (outcome, v) in outcomes {
            let l = labels(name, [("tier", tier), ("outcome", outcome)]);
            counter(RESPONSES, l, v);
        }
    }
}

#[cfg(feature = "config")]
fn rollout_state(name: &str, rollout: &Rollout) {
    let state = rollout.state();
    let (current, stage) = match &state {
        RolloutState::Staged { stage, .. } => ("staged", *stage),
        RolloutState::Complete { .. } => ("complete", rollout.stages().len()),
        RolloutState::Halted {
            reverted: false,
            stage,
            ..
        } => ("halted", *stage),
        RolloutState::Halted { stage, .. } => ("reverted", *stage),
    };
    for s in ["staged", "complete", "halted", "reverted"] {
        let v = if s == current { 1.0 } else { 0.0 };
        gauge(ROLLOUT_STATE, labels(name, [("state", s)]), v);
    }
    gauge(ROLLOUT_STAGE, labels(name, []), stage as f64);
    let bp = f64::from(rollout.basis_points());
    gauge(ROLLOUT_BASIS_POINTS, labels(name, []), bp);
    let (cohort, control) = rollout.last_window().map_or((f64::NAN, f64::NAN), |w| {
        (w.cohort_breadth, w.control_breadth)
    });
    gauge(ROLLOUT_BREADTH, labels(name, [("side", "cohort")]), cohort);
    gauge(
        ROLLOUT_BREADTH,
        labels(name, [("side", "control")]),
        control,
    );
}

fn labels<const N: usize>(name: &str, more: [(&'static str, &str); N]) -> Vec<Label> {
    let mut v = Vec::with_capacity(N + 1);
    v.push(Label::new("limiter", name.to_owned()));
    v.extend(
        more.iter()
            .map(|(k, val)| Label::new(*k, (*val).to_owned())),
    );
    v
}

fn counter(name: &'static str, labels: Vec<Label>, value: u64) {
    metrics::counter!(name, labels).absolute(value);
}

fn gauge(name: &'static str, labels: Vec<Label>, value: f64) {
    metrics::gauge!(name, labels).set(value);
}

/// The help text of every metric (what the README lists).
fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(
        CHECKS,
        "Checks by verdict: outcome allow, deny or pass_through, and its reason"
    );
    describe_counter!(
        SHADOW_DENIED_TOTAL,
        "Pass-throughs whose shadow verdict was a denial"
    );
    describe_counter!(
        RETRIES_TOTAL,
        "Retries (attempt >= 1) checked, by whether they were admitted"
    );
    describe_gauge!(
        LIVE_KEYS,
        "Keys tracked (including idle ones not yet swept)"
    );
    describe_gauge!(MAX_KEYS, "The bound on tracked keys");
    describe_gauge!(TABLE_BYTES, Unit::Bytes, "Bytes the key table occupies");
    describe_gauge!(
        DETECTOR_MODE,
        "1 for the fault detector's current mode, 0 for the others"
    );
    describe_gauge!(
        DENY_BREADTH,
        "The detector's deny measure at its last evaluation (keyed: breadth; direct: deny ratio)"
    );
    describe_gauge!(
        DENY_BREADTH_BASELINE,
        "The baseline of the deny measure (NaN without a baseline)"
    );
    describe_counter!(CLOCK_FAULTS, "Clock faults seen by the watchdog");
    describe_counter!(RELOADS, "Limits reloads by result: accepted or refused");
    describe_gauge!(REVISION, "The revision of the limits document in force");
    describe_gauge!(SUCCESS_RATE, "Customer success rate over the last complete window, a 429 counting as a failure (NaN without responses)");
    describe_counter!(
        RESPONSES,
        "Responses recorded by the success rate, by outcome"
    );
    describe_gauge!(
        ROLLOUT_STAGE,
        "The rollout's stage index (the number of stages once complete)"
    );
    describe_gauge!(
        ROLLOUT_BASIS_POINTS,
        "Share of keys on the new document, in basis points"
    );
    describe_gauge!(
        ROLLOUT_STATE,
        "1 for the rollout's current state, 0 for the others"
    );
    describe_gauge!(
        ROLLOUT_BREADTH,
        "Deny breadth of cohort and control keys in the last closed window (NaN before one)"
    );
}
