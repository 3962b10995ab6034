//! What a publish sets for each kind of source: the series of the documented list, with
//! their labels (see the README's "Metrics and tracing").

use metrics::Label;

use super::names::*;
use crate::engine::stats::COUNTERS;
#[cfg(feature = "config")]
use crate::limits::rollout::{Rollout, RolloutState};
use crate::safety::fault::{DetectorMode, FaultDetector};
use crate::safety::slo::SuccessRate;
use crate::safety::watchdog::Watchdog;

pub(super) fn checks(name: &str, policy: &str, c: &[u64; COUNTERS]) {
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
    let l = labels(name, [("policy", policy)]);
    counter(ADMISSIONS_REFUSED_TOTAL, l, c[ADMISSIONS_REFUSED_INDEX]);
}

pub(super) fn keys(name: &str, policy: &str, len: usize, max: usize, bytes: usize) {
    gauge(LIVE_KEYS, labels(name, [("policy", policy)]), len as f64);
    gauge(MAX_KEYS, labels(name, [("policy", policy)]), max as f64);
    gauge(
        TABLE_BYTES,
        labels(name, [("policy", policy)]),
        bytes as f64,
    );
}

pub(super) fn safety(name: &str, detector: Option<&FaultDetector>, watchdog: Option<&Watchdog>) {
    if let Some(d) = detector {
        // What is due runs first (an expired forced pass-through ends, a closed sub-bucket is
        // evaluated), as the next check would: an idle limiter's gauges are current.
        d.tick();
        let st = d.state();
        let current = match st.mode {
            DetectorMode::PassingThrough { .. } if st.overridden => "forced",
            DetectorMode::PassingThrough { .. } => "pass_through",
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

pub(super) fn success_rate(name: &str, slo: &SuccessRate) {
    slo.tick();
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
pub(super) fn rollout_state(name: &str, rollout: &Rollout) {
    rollout.tick();
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

pub(super) fn labels<const N: usize>(name: &str, more: [(&'static str, &str); N]) -> Vec<Label> {
    let mut v = Vec::with_capacity(N + 1);
    v.push(Label::new("limiter", name.to_owned()));
    v.extend(
        more.iter()
            .map(|(k, val)| Label::new(*k, (*val).to_owned())),
    );
    v
}

pub(super) fn counter(name: &'static str, labels: Vec<Label>, value: u64) {
    metrics::counter!(name, labels).absolute(value);
}

pub(super) fn gauge(name: &'static str, labels: Vec<Label>, value: f64) {
    metrics::gauge!(name, labels).set(value);
}

/// The help text of every metric (what the README lists).
pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    #[cfg(feature = "redis")]
    {
        describe_counter!(
            REDIS_CHECKS,
            "Shared-limiter checks by how they were decided: by Redis, from the deny cache, or by a fallback"
        );
        describe_counter!(
            REDIS_CALLS,
            "Calls to Redis by result: sent, then timeout, error, refused (no server), tls_failure, auth_failure or permission_denied, or not sent (breaker open)"
        );
        describe_gauge!(
            REDIS_BREAKER_OPEN,
            "1 while the Redis circuit breaker is open or half-open"
        );
        describe_counter!(
            REDIS_BREAKER_OPENED,
            "Times the Redis circuit breaker opened"
        );
        describe_counter!(
            REDIS_LEASES,
            "Leases taken for hot customers (script calls that reserved at least one cell)"
        );
        describe_counter!(
            REDIS_LEASE_CELLS,
            "Leased cells by event: leased (reserved), lapsed (unspent by their TAT, or ended by a quota change)"
        );
        describe_counter!(
            REDIS_SETTLES,
            "Refunds, charges and resets by result: refund, charge, reset (applied), repeated (applied once already), lost (never reached Redis)"
        );
    }
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
    describe_counter!(
        ADMISSIONS_REFUSED_TOTAL,
        "Newcomers a full key table's admission filter sent to the overflow cell"
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
    describe_gauge!(
        IN_FLIGHT,
        "Permits out now on a concurrency limiter (a keyed one: summed over its keys)"
    );
    describe_gauge!(
        CONCURRENCY_LIMIT,
        "A concurrency limiter's limit (a keyed one: per key)"
    );
    describe_gauge!(
        IN_FLIGHT_KEYS,
        "Keys with permits out (or waiters) on a keyed concurrency limiter"
    );
    describe_counter!(
        SATURATIONS,
        "Acquires a concurrency limiter refused, at once or after a wait"
    );
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
