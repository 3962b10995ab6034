//! The evaluator: runs once per sub-bucket (lazily, on a check or a `tick`), under a lock,
//! off the hot path. Turns counter deltas into the measure, the measure into a mode.

use crate::sync::atomic::Ordering;
use std::collections::VecDeque;

use super::panel::{self, Member};
use super::{
    AlertKind, Baseline, Config, DetectorMode, FaultEvent, FaultFigures, HourSample, Shared,
};
use crate::engine::stats::{Stats, COUNTERS};
use crate::engine::verdict::PassReason;
use core::time::Duration;

const HOUR: u64 = 3_600_000_000_000;
/// Revisions whose counts are kept for `stats_by_revision`.
const KEEP_REVISIONS: usize = 64;

pub(crate) struct Eval {
    cfg: Config,
    last_counts: [u64; COUNTERS],
    /// Counter deltas per sub-bucket of the current window, newest last.
    subs: VecDeque<[u64; COUNTERS]>,
    members: Vec<Member>,
    /// `(when, measure)` per sub-bucket with enough samples, over the recent span and window.
    history: VecDeque<(u64, f64)>,
    hour: Hour,
    pub(crate) baseline: Baseline,
    pub(crate) revision: u64,
    pub(crate) revision_start: Stats,
    pub(crate) past_revisions: Vec<(u64, Stats)>,
    state: State,
    overriding: Option<Override>,
    last_trip: Option<u64>,
    /// Alerts already raised in the current episode (re-armed when the measure is normal).
    raised: Vec<AlertKind>,
    pub(crate) last: FaultFigures,
    events: Vec<FaultEvent>,
}

enum State {
    Enforce,
    Passing {
        since: u64,
        until: u64,
        /// Consecutive sub-buckets under the threshold.
        calm: usize,
    },
}

enum Override {
    Enforce,
    Pass { reason: PassReason, until: u64 },
}

#[derive(Default)]
struct Hour {
    start: u64,
    n: u64,
    sum: HourSample,
    anomalous: bool,
}

impl Default for HourSample {
    fn default() -> Self {
        HourSample {
            breadth: 0.0,
            deny_ratio: 0.0,
            allowed_per_sec: 0.0,
        }
    }
}

/// One sub-bucket's reading of the window.
struct Reading {
    figures: FaultFigures,
    enough: bool,
    above: bool,
    threshold: f64,
    table_full_share: f64,
    ratio: f64,
    breadth: f64,
    /// The same test as `above`, on the last sub-bucket alone: what recovery waits on.
    sub_above: bool,
}

impl Eval {
    pub(crate) fn new(now: u64, cfg: Config, baseline: Baseline, revision: u64) -> Self {
        Self {
            cfg,
            last_counts: [0; COUNTERS],
            subs: VecDeque::new(),
            members: Vec::new(),
            history: VecDeque::new(),
            hour: Hour {
                start: now,
                ..Hour::default()
            },
            baseline,
            revision,
            revision_start: Stats::default(),
            past_revisions: Vec::new(),
            state: State::Enforce,
            overriding: None,
            last_trip: None,
            raised: Vec::new(),
            last: FaultFigures {
                measure: 0.0,
                baseline: None,
                allowed_per_sec: 0.0,
                samples: 0,
                window: Duration::from_nanos(cfg.window),
                at: Duration::from_nanos(now),
            },
            events: Vec::new(),
        }
    }

    pub(crate) fn take_events(&mut self) -> Vec<FaultEvent> {
        std::mem::take(&mut self.events)
    }

    /// Closes one sub-bucket and decides the mode.
    pub(crate) fn evaluate(&mut self, now: u64, sh: &Shared) {
        let r = self.read(now, sh);
        self.last = r.figures;
        self.learn(now, &r);
        self.overflow_alert(&r);
        self.decide(now, &r, sh);
    }

    fn read(&mut self, now: u64, sh: &Shared) -> Reading {
        let counts = sh.sum();
        let mut delta = [0; COUNTERS];
        for i in 0..COUNTERS {
            delta[i] = counts[i].wrapping_sub(self.last_counts[i]);
        }
        self.last_counts = counts;
        let per_window = self.per_window();
        self.subs.push_back(delta);
        while self.subs.len() > per_window {
            self.subs.pop_front();
        }
        let mut w = [0u64; COUNTERS];
        for s in &self.subs {
            for i in 0..COUNTERS {
                w[i] = w[i].saturating_add(s[i]);
            }
        }
        let keyed = sh.is_keyed();
        let b = if keyed {
            panel::close_sub(
                sh.panel(),
                &mut self.members,
                now,
                per_window,
                self.cfg.memory,
            )
        } else {
            panel::Breadth::default()
        };
        let stats = Stats::from_counts(&w);
        let secs = (self.subs.len() as u64 * self.cfg.sub) as f64 / 1e9;
        let (ratio, allowed_per_sec, checks) = direct_measure(&stats, secs);
        let sub_secs = self.cfg.sub as f64 / 1e9;
        let (sub_ratio, sub_allowed, sub_checks) =
            direct_measure(&Stats::from_counts(&delta), sub_secs);
        let base = if keyed {
            self.baseline.breadth()
        } else {
            self.baseline.deny_ratio()
        };
        let threshold = (self.cfg.multiplier * base.unwrap_or(0.0)).max(self.cfg.floor);
        let base_allowed = self.baseline.allowed_per_sec();
        let starved =
            |allowed: f64| keyed || base_allowed.is_none_or(|b| allowed < b / self.cfg.multiplier);
        let (measure, samples, enough, sub_above) = if keyed {
            let sub_enough = b.sub_eligible >= self.cfg.min_panel;
            let sub_above = sub_enough && b.sub_share() > threshold;
            (
                b.share(),
                b.eligible as u64,
                b.eligible >= self.cfg.min_panel,
                sub_above,
            )
        } else {
            let sub_enough =
                sub_checks.saturating_mul(self.subs.len() as u64) >= self.cfg.min_samples;
            let sub_above = sub_enough && sub_ratio > threshold && starved(sub_allowed);
            (ratio, checks, checks >= self.cfg.min_samples, sub_above)
        };
        let total = stats.total();
        Reading {
            figures: FaultFigures {
                measure,
                baseline: base,
                allowed_per_sec,
                samples,
                window: Duration::from_nanos(self.cfg.window),
                at: Duration::from_nanos(now),
            },
            enough,
            above: enough && measure > threshold && starved(allowed_per_sec),
            threshold,
            table_full_share: if total == 0 {
                0.0
            } else {
                stats.denied_key_table_full as f64 / total as f64
            },
            ratio,
            breadth: b.share(),
            sub_above,
        }
    }

    /// Hourly samples for the baseline: normal hours only, under the pinned revision.
    fn learn(&mut self, now: u64, r: &Reading) {
        if r.enough {
            self.history.push_back((now, r.figures.measure));
            self.hour.n += 1;
            self.hour.sum.breadth += r.breadth;
            self.hour.sum.deny_ratio += r.ratio;
            self.hour.sum.allowed_per_sec += r.figures.allowed_per_sec;
        }
        let horizon = now.saturating_sub(self.cfg.window.saturating_add(self.cfg.recent));
        while self.history.front().is_some_and(|&(t, _)| t < horizon) {
            self.history.pop_front();
        }
        self.hour.anomalous |= r.above || !matches!(self.state, State::Enforce);
        if now.saturating_sub(self.hour.start) >= HOUR {
            let h = &self.hour;
            if h.n > 0 && !h.anomalous && self.revision == self.baseline.revision() {
                let n = h.n as f64;
                self.baseline.push(HourSample {
                    breadth: h.sum.breadth / n,
                    deny_ratio: h.sum.deny_ratio / n,
                    allowed_per_sec: h.sum.allowed_per_sec / n,
                });
            }
            self.hour = Hour {
                start: now,
                ..Hour::default()
            };
        }
    }

    /// `true` if the measure was low (under threshold ÷ multiplier) somewhere in the recent
    /// span before the window, or there is no history to say otherwise.
    fn sudden(&self, now: u64, threshold: f64) -> bool {
        let before_window = now.saturating_sub(self.cfg.window);
        let mut earlier = self
            .history
            .iter()
            .filter(|&&(t, _)| t < before_window)
            .peekable();
        if earlier.peek().is_none() {
            return true;
        }
        earlier.any(|&(_, m)| m <= threshold / self.cfg.multiplier)
    }

    fn overflow_alert(&mut self, r: &Reading) {
        if r.table_full_share >= 0.1 {
            self.raise(AlertKind::OverflowCell, r.figures);
        } else {
            self.raised.retain(|k| *k != AlertKind::OverflowCell);
        }
    }

    fn raise(&mut self, kind: AlertKind, figures: FaultFigures) {
        if !self.raised.contains(&kind) {
            self.raised.push(kind);
            self.events.push(FaultEvent::Alert(kind, figures));
        }
    }

    fn decide(&mut self, now: u64, r: &Reading, sh: &Shared) {
        match self.overriding {
            Some(Override::Enforce) => {
                sh.set_mode(None);
                return;
            }
            Some(Override::Pass { reason, until }) if now < until => {
                sh.set_mode(Some(reason));
                return;
            }
            Some(Override::Pass { .. }) => self.overriding = None,
            None => {}
        }
        match self.state {
            State::Enforce => self.decide_enforcing(now, r),
            State::Passing { since, until, calm } => {
                self.decide_passing(now, r, since, until, calm)
            }
        }
        let passing = matches!(self.state, State::Passing { .. });
        sh.set_mode(passing.then_some(PassReason::DenyAnomaly));
    }

    fn decide_enforcing(&mut self, now: u64, r: &Reading) {
        if !r.above {
            self.raised.retain(|k| *k == AlertKind::OverflowCell);
            return;
        }
        let cooling = self
            .last_trip
            .is_some_and(|t| now.saturating_sub(t) < self.cfg.cooldown);
        if !self.baseline.is_ready() {
            self.raise(AlertKind::ColdStart, r.figures);
        } else if !self.sudden(now, r.threshold) {
            self.raise(AlertKind::Drift, r.figures);
        } else if cooling {
            self.raise(AlertKind::CoolDown, r.figures);
        } else {
            self.state = State::Passing {
                since: now,
                until: now.saturating_add(self.cfg.pass_for.min(self.cfg.max_pass)),
                calm: 0,
            };
            self.last_trip = Some(now);
            self.events.push(FaultEvent::Tripped(r.figures));
        }
    }

    /// While passing through: recover once every sub-bucket of a full window was calm (the
    /// shadow measure under the threshold); past `until`, extend while still anomalous, up to
    /// the longest pass-through.
    fn decide_passing(&mut self, now: u64, r: &Reading, since: u64, until: u64, calm: usize) {
        let calm = if r.sub_above { 0 } else { calm + 1 };
        if calm >= self.per_window() {
            return self.recover(now, r);
        }
        if now < until {
            self.state = State::Passing { since, until, calm };
            return;
        }
        let limit = since.saturating_add(self.cfg.max_pass);
        if r.above && now < limit {
            let until = now.saturating_add(self.cfg.pass_for).min(limit);
            self.state = State::Passing { since, until, calm };
        } else {
            if r.above {
                self.raise(AlertKind::PassThroughExhausted, r.figures);
            }
            self.recover(now, r);
        }
    }

    fn per_window(&self) -> usize {
        (self.cfg.window / self.cfg.sub.max(1)).max(1) as usize
    }

    fn recover(&mut self, now: u64, r: &Reading) {
        self.state = State::Enforce;
        self.last_trip = Some(self.last_trip.unwrap_or(now));
        self.events.push(FaultEvent::Recovered(r.figures));
    }

    pub(crate) fn force_enforce(&mut self, _now: u64, sh: &Shared) {
        self.overriding = Some(Override::Enforce);
        self.state = State::Enforce;
        sh.override_until.store(u64::MAX, Ordering::Relaxed);
        sh.set_mode(None);
    }

    pub(crate) fn force_pass(&mut self, reason: PassReason, until: u64, sh: &Shared) {
        self.overriding = Some(Override::Pass { reason, until });
        sh.override_until.store(until, Ordering::Relaxed);
        sh.set_mode(Some(reason));
    }

    pub(crate) fn clear_override(&mut self, sh: &Shared) {
        self.overriding = None;
        sh.override_until.store(u64::MAX, Ordering::Relaxed);
        let passing = matches!(self.state, State::Passing { .. });
        sh.set_mode(passing.then_some(PassReason::DenyAnomaly));
    }

    /// Ends a forced pass-through whose time is up.
    pub(crate) fn expire_override(&mut self, now: u64, sh: &Shared) {
        if let Some(Override::Pass { until, .. }) = self.overriding {
            if now >= until {
                self.clear_override(sh);
            }
        }
    }

    pub(crate) fn overridden(&self) -> bool {
        self.overriding.is_some()
    }

    pub(crate) fn mode(&self) -> DetectorMode {
        match (&self.overriding, &self.state) {
            (Some(Override::Pass { reason, until }), _) => DetectorMode::PassingThrough {
                reason: *reason,
                until: Duration::from_nanos(*until),
            },
            (Some(Override::Enforce), _) | (None, State::Enforce) => DetectorMode::Enforcing,
            (None, State::Passing { until, .. }) => DetectorMode::PassingThrough {
                reason: PassReason::DenyAnomaly,
                until: Duration::from_nanos(*until),
            },
        }
    }

    pub(crate) fn set_revision(&mut self, revision: u64, now: Stats) {
        let done = now.since(&self.revision_start);
        self.past_revisions.push((self.revision, done));
        if self.past_revisions.len() > KEEP_REVISIONS {
            self.past_revisions.remove(0);
        }
        self.revision = revision;
        self.revision_start = now;
    }
}

/// The direct measure of some counts over `secs`: (deny ratio, allowed per second, checks).
/// A pass-through counts as what its shadow was; the overflow cell is left out.
fn direct_measure(s: &Stats, secs: f64) -> (f64, f64, u64) {
    // Saturating: the counters are read one by one while checks go on, so a snapshot can hold
    // a pass-through without its shadow-denied count, or the other way round.
    // The overflow cell and the retry budget are left out: neither says anything about the
    // limiter's own judgement of conforming traffic.
    let checks = s
        .total()
        .saturating_sub(s.denied_key_table_full)
        .saturating_sub(s.denied_retry_budget);
    let denied = s.denied_quota + s.denied_clock_overflow + s.denied_ceiling + s.shadow_denied;
    let allowed = (s.allowed + s.passed()).saturating_sub(s.shadow_denied);
    let ratio = if checks == 0 {
        0.0
    } else {
        denied as f64 / checks as f64
    };
    let per_sec = if secs > 0.0 {
        allowed as f64 / secs
    } else {
        0.0
    };
    (ratio, per_sec, checks)
}
