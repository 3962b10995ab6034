//! NEW against OLD: the customers newly denied, the diff, the rollout as it would have run,
//! and the fault detector's verdict.

use std::time::Duration;

use serde::Serialize;
use tollgate::limits::{Diff, Limits, Rollout, RolloutState};
use tollgate::safety::{Baseline, FaultDetector, FaultEvent, HourSample};
use tollgate::ManualClock;

use super::tally::{key_hash, Tally};
use super::time::rfc3339;
use super::Side;
use crate::replay::sim::Bucket;

/// What the comparison of NEW with OLD found.
#[derive(Debug, Serialize)]
pub(super) struct Against {
    pub(super) newly_denied_keys: u64,
    pub(super) newly_denied_at_least: bool,
    pub(super) newly_denied_sample: Vec<String>,
    /// `Limits::diff`'s report, as `tollgate diff --format json` writes it.
    pub(super) diff: Diff,
    pub(super) tightening_factors: Vec<Factor>,
    pub(super) guard: Guard,
    /// `None` when nothing was replayed, or the rollout refused the documents.
    pub(super) rollout: Option<RolloutReport>,
    /// `None` when nothing was replayed.
    pub(super) detector: Option<DetectorReport>,
}

/// A policy NEW tightens.
#[derive(Debug, Serialize)]
pub(super) struct Factor {
    pub(super) policy: String,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) factor: f64,
}

/// The guard's verdict on the transition ([`Limits::check_transition`]).
#[derive(Debug, Serialize)]
pub(super) struct Guard {
    pub(super) accepts: bool,
    pub(super) errors: Vec<String>,
}

/// The staged rollout, as it would have run from the first line.
#[derive(Debug, Serialize)]
pub(super) struct RolloutReport {
    pub(super) events: Vec<RolloutEvent>,
}

/// One of the rollout's decisions.
#[derive(Debug, Serialize)]
pub(super) struct RolloutEvent {
    /// `staged`, `complete` or `halted`.
    pub(super) event: &'static str,
    /// RFC 3339, on the log's clock.
    pub(super) at: String,
    pub(super) after_secs: f64,
    /// The share of keys on NEW, in percent (at the halt, for `halted`).
    pub(super) percent: f64,
    pub(super) reverted: bool,
    pub(super) reason: Option<String>,
}

/// The fault detector's verdict on NEW's run.
#[derive(Debug, Serialize)]
pub(super) struct DetectorReport {
    pub(super) tripped: bool,
    /// When it tripped, RFC 3339 on the log's clock.
    pub(super) at: Option<String>,
    pub(super) after_secs: Option<f64>,
    /// The deny breadth it tripped on, or its last reading (a share, 0 to 1).
    pub(super) deny_breadth: f64,
    pub(super) baseline: Option<f64>,
    pub(super) summary: String,
}

/// A detector with OLD's run as its baseline, on the replay's clock.
pub(super) fn detector(
    old: &Tally,
    span_ms: u64,
    clock: &ManualClock,
    revision: u64,
) -> (FaultDetector, Events) {
    let mut breadths: Vec<f64> = old.minutes.iter().map(Bucket::breadth).collect();
    breadths.sort_by(f64::total_cmp);
    let median = breadths.get(breadths.len() / 2).copied().unwrap_or(0.0);
    let total = old.overall.allowed + old.overall.denied;
    let hour = HourSample {
        breadth: median,
        deny_ratio: if total == 0 {
            0.0
        } else {
            old.overall.denied as f64 / total as f64
        },
        allowed_per_sec: old.overall.allowed as f64 * 1000.0 / span_ms.max(1) as f64,
    };
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&events);
    let c = clock.clone();
    let d = FaultDetector::builder()
        .clock(clock.clone())
        .baseline(Baseline::from_hours(
            revision,
            std::iter::repeat_n(hour, 24),
        ))
        .on_event(move |e| {
            if let Ok(mut v) = sink.lock() {
                v.push((c.now(), *e));
            }
        })
        .build();
    (d, events)
}

pub(super) type Events = std::sync::Arc<std::sync::Mutex<Vec<(Duration, FaultEvent)>>>;

pub(super) fn detector_verdict(
    (d, events): &(FaultDetector, Events),
    start: Duration,
    first_ms: i64,
) -> DetectorReport {
    d.tick();
    let list = events.lock().map(|v| v.clone()).unwrap_or_default();
    let trip = list.iter().find_map(|(at, e)| match e {
        FaultEvent::Tripped(f) => Some((*at, *f)),
        _ => None,
    });
    match trip {
        Some((at, f)) => {
            let after = at.saturating_sub(start);
            DetectorReport {
                tripped: true,
                at: Some(rfc3339(first_ms + after.as_millis() as i64)),
                after_secs: Some(after.as_secs_f64()),
                deny_breadth: f.measure,
                baseline: f.baseline,
                summary: format!(
                    "the fault detector would trip {} after the first line (deny breadth {:.0} % against a baseline of {:.0} %) and pass traffic through",
                    crate::replay::report::secs(after.as_secs_f64()),
                    f.measure * 100.0,
                    f.baseline.unwrap_or(0.0) * 100.0
                ),
            }
        }
        None => {
            let last = d.state().last;
            DetectorReport {
                tripped: false,
                at: None,
                after_secs: None,
                deny_breadth: last.measure,
                baseline: last.baseline,
                summary: format!(
                    "the fault detector would stay enforcing (last deny breadth {:.1} %, baseline {:.1} %)",
                    last.measure * 100.0,
                    last.baseline.unwrap_or(0.0) * 100.0
                ),
            }
        }
    }
}

pub(super) fn rollout_marks(r: &Rollout, start: Duration) -> Vec<(f64, usize, String)> {
    r.events()
        .into_iter()
        .filter_map(|e| {
            let (at, text) = match e {
                RolloutState::Staged {
                    basis_points,
                    since,
                    ..
                } => (
                    since,
                    format!("rollout stage {} %", f64::from(basis_points) / 100.0),
                ),
                RolloutState::Complete { since } => (since, "rollout complete".to_owned()),
                RolloutState::Halted {
                    at,
                    basis_points,
                    reverted,
                    ..
                } => (
                    at,
                    format!(
                        "rollout halted at {} %{}",
                        f64::from(basis_points) / 100.0,
                        if reverted { ", reverted" } else { "" }
                    ),
                ),
                _ => return None,
            };
            Some((at.saturating_sub(start).as_secs_f64(), 2, text))
        })
        .collect()
}

pub(super) fn compare(
    old: &Side,
    new: &Side,
    transition: Result<tollgate::limits::Diff, tollgate::limits::ConfigErrors>,
    rollout: Option<&Rollout>,
    detector: Option<&(FaultDetector, Events)>,
    start: Duration,
    first_ms: i64,
) -> Against {
    let newly: Vec<&String> = new
        .tally
        .denials
        .keys()
        .filter(|k| !old.tally.ever_denied.contains(&key_hash(k)))
        .collect();
    let newly_count = new
        .tally
        .ever_denied
        .iter()
        .filter(|h| !old.tally.ever_denied.contains(h))
        .count() as u64;
    let mut sample: Vec<(String, u64)> = newly
        .iter()
        .map(|k| ((*k).clone(), new.tally.denials.get(*k).map_or(0, |d| d.0)))
        .collect();
    sample.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let diff = Limits::diff(&old.limits, &new.limits);
    let factors = diff
        .tightenings_beyond(1.0)
        .iter()
        .map(|t| Factor {
            policy: t.policy.clone(),
            from: t.from.to_string(),
            to: t.to.to_string(),
            factor: t.factor,
        })
        .collect();
    let guard = match transition {
        Ok(_) => Guard {
            accepts: true,
            errors: Vec::new(),
        },
        Err(e) => Guard {
            accepts: false,
            errors: e.iter().map(|x| x.to_string()).collect(),
        },
    };
    Against {
        newly_denied_keys: newly_count,
        newly_denied_at_least: new.tally.ever_denied_capped,
        newly_denied_sample: sample.into_iter().take(10).map(|(k, _)| k).collect(),
        diff,
        tightening_factors: factors,
        guard,
        rollout: rollout.map(|r| RolloutReport {
            events: rollout_events(r, start, first_ms),
        }),
        detector: detector.map(|d| detector_verdict(d, start, first_ms)),
    }
}

/// The rollout's decisions, on the log's clock.
fn rollout_events(r: &Rollout, start: Duration, first_ms: i64) -> Vec<RolloutEvent> {
    let event = |name, at: Duration, bp: u32, reverted, reason| {
        let after = at.saturating_sub(start);
        RolloutEvent {
            event: name,
            at: rfc3339(first_ms + after.as_millis() as i64),
            after_secs: after.as_secs_f64(),
            percent: f64::from(bp) / 100.0,
            reverted,
            reason,
        }
    };
    r.events()
        .into_iter()
        .filter_map(|e| match e {
            RolloutState::Staged {
                basis_points,
                since,
                ..
            } => Some(event("staged", since, basis_points, false, None)),
            RolloutState::Complete { since } => Some(event("complete", since, 10_000, false, None)),
            RolloutState::Halted {
                at,
                basis_points,
                reverted,
                reason,
                ..
            } => Some(event(
                "halted",
                at,
                basis_points,
                reverted,
                Some(reason.to_string()),
            )),
            _ => None,
        })
        .collect()
}
