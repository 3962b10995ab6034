//! NEW against OLD: the customers newly denied, the diff, the rollout as it would have run,
//! and the fault detector's verdict.

use std::time::Duration;

use serde::Serialize;
use tollgate::{
    Baseline, FaultDetector, FaultEvent, HourSample, Limits, ManualClock, Rollout, RolloutState,
};

use super::tally::{key_hash, Tally};
use super::Side;
use crate::replay::report::clock_label;
use crate::replay::sim::Bucket;

/// What the comparison of NEW with OLD found.
#[derive(Debug, Serialize)]
pub(super) struct Against {
    pub(super) newly_denied_keys: u64,
    pub(super) newly_denied_at_least: bool,
    pub(super) newly_denied_sample: Vec<String>,
    pub(super) diff: String,
    pub(super) tightening_factors: Vec<(String, String, String, f64)>,
    pub(super) transition: Result<(), Vec<String>>,
    pub(super) rollout: Vec<String>,
    pub(super) detector: String,
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

pub(super) fn detector_verdict((d, events): &(FaultDetector, Events), start: Duration) -> String {
    d.tick();
    let list = events.lock().map(|v| v.clone()).unwrap_or_default();
    let trip = list
        .iter()
        .find(|(_, e)| matches!(e, FaultEvent::Tripped(_)));
    match trip {
        Some((at, FaultEvent::Tripped(f))) => format!(
            "the fault detector would trip {} after the first line (deny breadth {:.0} % against a baseline of {:.0} %) and pass traffic through",
            crate::replay::report::secs(at.saturating_sub(start).as_secs_f64()),
            f.measure * 100.0,
            f.baseline.unwrap_or(0.0) * 100.0
        ),
        _ => {
            let last = d.state().last;
            format!(
                "the fault detector would stay enforcing (last deny breadth {:.1} %, baseline {:.1} %)",
                last.measure * 100.0,
                last.baseline.unwrap_or(0.0) * 100.0
            )
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
    transition: Result<tollgate::Diff, tollgate::ConfigErrors>,
    rollout: Option<&Rollout>,
    detector: Option<&(FaultDetector, Events)>,
    start: Duration,
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
        .map(|k| {
            (
                (*k).clone(),
                new.tally.denials.get(*k).copied().unwrap_or(0),
            )
        })
        .collect();
    sample.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let diff = Limits::diff(&old.limits, &new.limits);
    let factors = diff
        .tightenings_beyond(1.0)
        .iter()
        .map(|t| {
            (
                t.policy.clone(),
                t.from.to_string(),
                t.to.to_string(),
                t.factor,
            )
        })
        .collect();
    let rollout_lines = match rollout {
        Some(r) => r
            .events()
            .into_iter()
            .map(|e| match e {
                RolloutState::Staged {
                    basis_points,
                    since,
                    ..
                } => format!(
                    "{}: stage {} % of keys",
                    clock_label(0, since.saturating_sub(start).as_millis() as u64),
                    f64::from(basis_points) / 100.0
                ),
                RolloutState::Complete { since } => format!(
                    "{}: complete",
                    clock_label(0, since.saturating_sub(start).as_millis() as u64)
                ),
                RolloutState::Halted {
                    at,
                    basis_points,
                    reverted,
                    reason,
                    ..
                } => format!(
                    "{}: halted at {} %{}: {reason}",
                    clock_label(0, at.saturating_sub(start).as_millis() as u64),
                    f64::from(basis_points) / 100.0,
                    if reverted { " and reverted" } else { "" }
                ),
                other => format!("{other:?}"),
            })
            .collect(),
        None => vec!["not run: the rollout refused the documents".to_owned()],
    };
    Against {
        newly_denied_keys: newly_count,
        newly_denied_at_least: new.tally.ever_denied_capped,
        newly_denied_sample: sample.into_iter().take(10).map(|(k, _)| k).collect(),
        diff: diff.to_string(),
        tightening_factors: factors,
        transition: transition
            .map(|_| ())
            .map_err(|e| e.iter().map(|x| x.to_string()).collect()),
        rollout: rollout_lines,
        detector: detector.map_or_else(String::new, |d| detector_verdict(d, start)),
    }
}
