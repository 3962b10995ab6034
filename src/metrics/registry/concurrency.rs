//! The concurrency limiters' sources: their registration and what a publish sets.

use std::sync::{Arc, Weak};

use super::super::export::{counter, gauge, labels};
use super::super::names::{CONCURRENCY_LIMIT, IN_FLIGHT, IN_FLIGHT_KEYS, SATURATIONS};
use super::{MetricsError, MetricsRegistry, Source};
use crate::concurrency::{ConcurrencyLimiter, KeyedConcurrencyLimiter};

pub(super) trait KeyedConcurrencyView: Send + Sync {
    fn in_flight_total(&self) -> u64;
    fn limit(&self) -> u32;
    fn keys(&self) -> usize;
    fn saturations(&self) -> u64;
}

impl<K: 'static> KeyedConcurrencyView for KeyedConcurrencyLimiter<K> {
    fn in_flight_total(&self) -> u64 {
        KeyedConcurrencyLimiter::in_flight_total(self)
    }
    fn limit(&self) -> u32 {
        KeyedConcurrencyLimiter::limit(self)
    }
    fn keys(&self) -> usize {
        KeyedConcurrencyLimiter::keys(self)
    }
    fn saturations(&self) -> u64 {
        KeyedConcurrencyLimiter::saturations(self)
    }
}

/// What metrics read of a keyed limiter, whatever its key type.
impl MetricsRegistry {
    /// Registers a concurrency limiter as `name`: `tollgate_in_flight{limiter}` (permits out),
    /// `tollgate_concurrency_limit{limiter}` and `tollgate_saturations_total{limiter}`
    /// (acquires refused).
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    /// use tollgate::concurrency::ConcurrencyLimiter;
    /// use tollgate::metrics::MetricsRegistry;
    ///
    /// let registry = MetricsRegistry::new();
    /// let lim = Arc::new(ConcurrencyLimiter::new(NonZeroU32::new(1).unwrap()));
    /// registry.register_concurrency("uploads", &lim)?;
    /// let _held = lim.try_acquire()?;
    /// assert!(lim.try_acquire().is_err());
    ///
    /// let recorder = PrometheusBuilder::new().build_recorder();
    /// let handle = recorder.handle();
    /// metrics::with_local_recorder(&recorder, || registry.publish());
    /// let text = handle.render();
    /// assert!(text.contains(r#"tollgate_in_flight{limiter="uploads"} 1"#));
    /// assert!(text.contains(r#"tollgate_saturations_total{limiter="uploads"} 1"#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn register_concurrency(
        &self,
        name: &str,
        limiter: &Arc<ConcurrencyLimiter>,
    ) -> Result<(), MetricsError> {
        self.add(name, Source::Concurrency(Arc::downgrade(limiter)))
    }

    /// Registers a keyed concurrency limiter as `name`: `tollgate_in_flight{limiter}` (permits
    /// out, summed over the keys: the scrape walks the table), `tollgate_in_flight_keys`,
    /// `tollgate_concurrency_limit` (per key) and `tollgate_saturations_total`. No label
    /// carries a key.
    ///
    /// # Errors
    ///
    /// [`MetricsError`] if the name is invalid or taken.
    pub fn register_keyed_concurrency<K: 'static>(
        &self,
        name: &str,
        limiter: &Arc<KeyedConcurrencyLimiter<K>>,
    ) -> Result<(), MetricsError> {
        let weak = Arc::downgrade(limiter) as Weak<dyn KeyedConcurrencyView>;
        self.add(name, Source::KeyedConcurrency(weak))
    }
}

pub(super) fn publish_direct(name: &str, lim: &ConcurrencyLimiter) {
    gauge(IN_FLIGHT, labels(name, []), f64::from(lim.in_flight()));
    gauge(CONCURRENCY_LIMIT, labels(name, []), f64::from(lim.limit()));
    counter(SATURATIONS, labels(name, []), lim.saturations());
}

pub(super) fn publish_keyed(name: &str, lim: &dyn KeyedConcurrencyView) {
    gauge(IN_FLIGHT, labels(name, []), lim.in_flight_total() as f64);
    gauge(IN_FLIGHT_KEYS, labels(name, []), lim.keys() as f64);
    gauge(CONCURRENCY_LIMIT, labels(name, []), f64::from(lim.limit()));
    counter(SATURATIONS, labels(name, []), lim.saturations());
}
