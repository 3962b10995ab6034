//! Metric names and label values: the documented, fixed list (see the README's "Metrics and
//! tracing"). Label values come from this file, from names given at registration, from
//! policy names in a limits document and from declared success-rate tiers — never from a key
//! or anything else a client sends.

use crate::engine::stats::{
    ADMISSIONS_REFUSED, ALLOWED, COUNTERS, DENIED_CEILING, DENIED_OVERFLOW, DENIED_QUOTA,
    DENIED_RETRY_BUDGET, DENIED_TABLE_FULL, PASSED_ANOMALY, PASSED_CLOCK, PASSED_FORCED,
    PASSED_OTHER, PASSED_SHADOW, RETRIES_ADMITTED, RETRIES_DENIED, SHADOW_DENIED,
};

pub(crate) const CHECKS: &str = "tollgate_checks_total";
pub(crate) const SHADOW_DENIED_TOTAL: &str = "tollgate_shadow_denied_total";
pub(crate) const RETRIES_TOTAL: &str = "tollgate_retries_total";
pub(crate) const ADMISSIONS_REFUSED_TOTAL: &str = "tollgate_admissions_refused_total";
pub(crate) const LIVE_KEYS: &str = "tollgate_live_keys";
pub(crate) const MAX_KEYS: &str = "tollgate_max_keys";
pub(crate) const TABLE_BYTES: &str = "tollgate_table_bytes";
pub(crate) const DETECTOR_MODE: &str = "tollgate_detector_mode";
pub(crate) const DENY_BREADTH: &str = "tollgate_deny_breadth";
pub(crate) const DENY_BREADTH_BASELINE: &str = "tollgate_deny_breadth_baseline";
pub(crate) const CLOCK_FAULTS: &str = "tollgate_clock_faults_total";
pub(crate) const RELOADS: &str = "tollgate_reloads_total";
pub(crate) const REVISION: &str = "tollgate_limits_revision";
pub(crate) const IN_FLIGHT: &str = "tollgate_in_flight";
pub(crate) const CONCURRENCY_LIMIT: &str = "tollgate_concurrency_limit";
pub(crate) const IN_FLIGHT_KEYS: &str = "tollgate_in_flight_keys";
pub(crate) const SATURATIONS: &str = "tollgate_saturations_total";
pub(crate) const SUCCESS_RATE: &str = "tollgate_success_rate";
pub(crate) const RESPONSES: &str = "tollgate_responses_total";
pub(crate) const ROLLOUT_STAGE: &str = "tollgate_rollout_stage";
pub(crate) const ROLLOUT_BASIS_POINTS: &str = "tollgate_rollout_basis_points";
pub(crate) const ROLLOUT_STATE: &str = "tollgate_rollout_state";
pub(crate) const ROLLOUT_BREADTH: &str = "tollgate_rollout_deny_breadth";
#[cfg(feature = "redis")]
pub(crate) const REDIS_CHECKS: &str = "tollgate_redis_checks_total";
#[cfg(feature = "redis")]
pub(crate) const REDIS_CALLS: &str = "tollgate_redis_calls_total";
#[cfg(feature = "redis")]
pub(crate) const REDIS_BREAKER_OPEN: &str = "tollgate_redis_breaker_open";
#[cfg(feature = "redis")]
pub(crate) const REDIS_BREAKER_OPENED: &str = "tollgate_redis_breaker_opened_total";
#[cfg(feature = "redis")]
pub(crate) const REDIS_LEASES: &str = "tollgate_redis_leases_total";
#[cfg(feature = "redis")]
pub(crate) const REDIS_LEASE_CELLS: &str = "tollgate_redis_lease_cells_total";
#[cfg(feature = "redis")]
pub(crate) const REDIS_SETTLES: &str = "tollgate_redis_settles_total";

/// Every check series: `(outcome, reason, counter index)`. The reasons are
/// [`DenyReason`](crate::DenyReason)'s and [`PassReason`](crate::PassReason)'s, in snake case.
pub(crate) const CHECK_SERIES: [(&str, &str, usize); 11] = [
    ("allow", "none", ALLOWED),
    ("deny", "quota", DENIED_QUOTA),
    ("deny", "key_table_full", DENIED_TABLE_FULL),
    ("deny", "clock_overflow", DENIED_OVERFLOW),
    ("deny", "ceiling", DENIED_CEILING),
    ("deny", "retry_budget", DENIED_RETRY_BUDGET),
    ("pass_through", "deny_anomaly", PASSED_ANOMALY),
    ("pass_through", "clock_fault", PASSED_CLOCK),
    ("pass_through", "forced", PASSED_FORCED),
    ("pass_through", "backend_unavailable", PASSED_OTHER),
    ("pass_through", "shadow", PASSED_SHADOW),
];

/// Every counter index that is a denial.
const DENIALS: [usize; 5] = [
    DENIED_QUOTA,
    DENIED_TABLE_FULL,
    DENIED_OVERFLOW,
    DENIED_CEILING,
    DENIED_RETRY_BUDGET,
];

/// The retry series: `(admitted, counter index)`.
pub(crate) const RETRY_SERIES: [(&str, usize); 2] =
    [("true", RETRIES_ADMITTED), ("false", RETRIES_DENIED)];
pub(crate) const SHADOW_DENIED_INDEX: usize = SHADOW_DENIED;
pub(crate) const ADMISSIONS_REFUSED_INDEX: usize = ADMISSIONS_REFUSED;

/// Counts as the client saw them. A shadow policy's limiter counts the verdicts it gave; the
/// handle served each as a pass-through with [`PassReason::Shadow`](crate::PassReason) and
/// that verdict as its shadow.
pub(crate) fn as_served(mut c: [u64; COUNTERS], shadow: bool) -> [u64; COUNTERS] {
    if shadow {
        let denied: u64 = DENIALS.iter().map(|&i| std::mem::take(&mut c[i])).sum();
        let allowed = std::mem::take(&mut c[ALLOWED]);
        c[PASSED_SHADOW] = c[PASSED_SHADOW].wrapping_add(allowed).wrapping_add(denied);
        c[SHADOW_DENIED] = c[SHADOW_DENIED].wrapping_add(denied);
    }
    c
}

/// A name given at registration: 1 to 64 bytes of ASCII letters, digits and `_ - . : /`.
pub(crate) fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b))
}
