//! [`MetricsRegistry`]: named sources, read on [`publish`](MetricsRegistry::publish).

use core::fmt;
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use crate::sync::Mutex;

use super::export::*;
use super::names;
#[cfg(feature = "config")]
use super::names::{RELOADS, REVISION};
#[cfg(feature = "config")]
use super::track::policies;
use super::track::{track, Track};
use crate::concurrency::ConcurrencyLimiter;
use crate::engine::stats::{Counters, COUNTERS};
use crate::limiter::direct::RateLimiter;
use crate::limiter::keyed::KeyedRateLimiter;
#[cfg(feature = "config")]
use crate::limits::{reload::LimitsHandle, rollout::Rollout};
#[cfg(feature = "redis")]
use crate::redis::limiter::SharedRateLimiter;
use crate::safety::fault::FaultDetector;
use crate::safety::slo::SuccessRate;
use crate::safety::watchdog::Watchdog;
use concurrency::KeyedConcurrencyView;

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
/// use tollgate::KeyedRateLimiter;
/// use tollgate::metrics::MetricsRegistry;
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

mod concurrency;

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
    Concurrency(Weak<ConcurrencyLimiter>),
    KeyedConcurrency(Weak<dyn KeyedConcurrencyView>),
    #[cfg(feature = "redis")]
    Shared(Weak<SharedRateLimiter>),
}

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
    /// let registry = tollgate::metrics::MetricsRegistry::new();
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
    /// let registry = tollgate::metrics::MetricsRegistry::new();
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
    /// let registry = tollgate::metrics::MetricsRegistry::new();
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
    /// use tollgate::limits::{Limits, LimitsHandle};
    /// use tollgate::metrics::MetricsRegistry;
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
    /// use tollgate::ManualClock;
    /// use tollgate::limits::{Limits, Rollout};
    /// use tollgate::metrics::MetricsRegistry;
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
    /// let slo = Arc::new(tollgate::safety::SuccessRate::builder().tiers(["free", "paid"]).build()?);
    /// tollgate::metrics::MetricsRegistry::new().register_success_rate("customers", &slo)?;
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
    /// assert_eq!(tollgate::metrics::MetricsRegistry::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// `true` if nothing is registered.
    ///
    /// ```
    /// assert!(tollgate::metrics::MetricsRegistry::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads every registered source and sets its series through the [`metrics`] facade (the
    /// recorder installed, or the local one of [`metrics::with_local_recorder`]): counters to
    /// their absolute values, gauges to their current ones. Call it right before rendering a
    /// scrape. Sources that were dropped are removed. It first runs what is due on each
    /// source, as its next check would (`tick()` of detectors, success rates and rollouts:
    /// an expired pass-through ends, a closed window is evaluated, and any callbacks run on
    /// the caller's thread), so an idle source's gauges are current. Takes the registry's lock, and briefly
    /// each source's (a limits handle's read guard, a rollout's, a detector's): never on a
    /// check's path, but not free either — call it per scrape, not per request.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    /// use tollgate::RateLimiter;
    /// use tollgate::metrics::MetricsRegistry;
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

    /// Registers a [`SharedRateLimiter`] (feature `redis`) as `name`: its checks by how they
    /// were decided (`tollgate_redis_checks_total{limiter, outcome}`, outcome `allowed`,
    /// `denied`, `denied_cached`, `denied_clock_overflow`, `fallback_local_allowed`,
    /// `fallback_local_denied`, `fallback_open`, `fallback_closed`), its calls to Redis
    /// (`tollgate_redis_calls_total{limiter, result}`, result `sent`, `timeout`, `error`,
    /// `refused` (no server: connection refused, reset or lost), `tls_failure`, `auth_failure`,
    /// `permission_denied` (misconfigurations, returned as errors), `breaker_rejected`,
    /// `script_reload`, `corrupt_value`), the breaker
    /// (`tollgate_redis_breaker_open`, `tollgate_redis_breaker_opened_total`), and its fault
    /// detector's state if one is attached.
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn register_shared(
        &self,
        name: &str,
        limiter: &Arc<SharedRateLimiter>,
    ) -> Result<(), MetricsError> {
        self.add(name, Source::Shared(Arc::downgrade(limiter)))
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
                rollout_state(name, &rollout);
                policies(name, &mut self.tracks, rollout.policy_limiters());
            }
            Source::SuccessRate(w) => {
                let Some(slo) = w.upgrade() else { return false };
                success_rate(name, &slo);
            }
            Source::Concurrency(w) => {
                let Some(lim) = w.upgrade() else { return false };
                concurrency::publish_direct(name, &lim);
            }
            Source::KeyedConcurrency(w) => {
                let Some(lim) = w.upgrade() else { return false };
                concurrency::publish_keyed(name, &*lim);
            }
            #[cfg(feature = "redis")]
            Source::Shared(w) => {
                let Some(lim) = w.upgrade() else { return false };
                shared(name, &lim);
            }
        }
        true
    }
}

/// A shared limiter's series (see [`MetricsRegistry::register_shared`]).
#[cfg(feature = "redis")]
fn shared(name: &str, lim: &SharedRateLimiter) {
    use names::{
        REDIS_BREAKER_OPEN, REDIS_BREAKER_OPENED, REDIS_CALLS, REDIS_CHECKS, REDIS_LEASES,
        REDIS_LEASE_CELLS, REDIS_SETTLES,
    };
    let s = lim.stats();
    for (outcome, v) in [
        ("allowed", s.allowed),
        ("denied", s.denied),
        ("denied_cached", s.denied_cached),
        ("denied_clock_overflow", s.denied_clock_overflow),
        ("leased_allowed", s.leased_allowed),
        ("leased_denied", s.leased_denied),
        ("fallback_local_allowed", s.fallback_local_allowed),
        ("fallback_local_denied", s.fallback_local_denied),
        ("fallback_open", s.fallback_open),
        ("fallback_closed", s.fallback_closed),
    ] {
        counter(REDIS_CHECKS, labels(name, [("outcome", outcome)]), v);
    }
    for (result, v) in [
        ("sent", s.round_trips),
        ("timeout", s.timeouts),
        ("error", s.errors),
        ("refused", s.refused),
        ("tls_failure", s.tls_failures),
        ("auth_failure", s.auth_failures),
        ("permission_denied", s.permission_denied),
        ("breaker_rejected", s.breaker_rejected),
        ("script_reload", s.script_reloads),
        ("corrupt_value", s.corrupt_values),
    ] {
        counter(REDIS_CALLS, labels(name, [("result", result)]), v);
    }
    gauge(
        REDIS_BREAKER_OPEN,
        labels(name, []),
        f64::from(u8::from(lim.breaker_open())),
    );
    counter(REDIS_BREAKER_OPENED, labels(name, []), s.breaker_opened);
    counter(REDIS_LEASES, labels(name, []), s.leases_taken);
    for (event, v) in [("leased", s.cells_leased), ("lapsed", s.cells_lapsed)] {
        counter(REDIS_LEASE_CELLS, labels(name, [("event", event)]), v);
    }
    for (result, v) in [
        ("refund", s.refunds),
        ("charge", s.charges),
        ("reset", s.resets),
        ("repeated", s.settles_repeated),
        ("lost", s.settles_lost),
    ] {
        counter(REDIS_SETTLES, labels(name, [("result", result)]), v);
    }
    safety(name, lim.detector(), None);
}
