//! How a rollout moves: windows closing (and the automatic halt), stages promoted, halts.

use crate::sync::atomic::Ordering;
use core::time::Duration;

use super::cohort::BUCKETS;
use super::{Control, Rollout, RolloutState};
use crate::engine::clock::saturating_nanos;

/// State transitions kept for [`Rollout::events`].
const KEEP_EVENTS: usize = 64;

impl Rollout {
    #[cold]
    pub(super) fn evaluate(&self, now: u64) {
        let mut c = self.control.lock();
        let window_due = now >= c.window_start.saturating_add(self.cfg.window);
        let stage_due = self.stage_end(&c).is_some_and(|end| now >= end);
        if c.state.is_comparing() && (window_due || stage_due) {
            self.close_window(&mut c, now);
        }
        if stage_due && matches!(c.state, RolloutState::Staged { .. }) {
            let next = c.stage + 1;
            self.enter_stage(&mut c, next, now);
        }
        self.set_due(&c);
    }

    /// Closes the window: its figures, and the automatic halt if they fail.
    fn close_window(&self, c: &mut Control, now: u64) {
        let bp = self.basis_points.load(Ordering::Relaxed);
        let w = self.tallies.figures(c.window_start, now, bp, true);
        c.last_window = Some(w);
        c.window_start = now;
        let gap = w.cohort_breadth - w.control_breadth;
        if w.cohort_keys >= self.cfg.min_cohort_keys && gap > self.cfg.threshold {
            let reason = format!(
                "cohort keys mostly denied: {:.1} % of {} on revision {} vs {:.1} % of {} \
                 control keys on revision {}, more than {:.1} points apart",
                w.cohort_breadth * 100.0,
                w.cohort_keys,
                self.new.limits.revision(),
                w.control_breadth * 100.0,
                w.control_keys,
                self.old.limits.revision(),
                self.cfg.threshold * 100.0,
            );
            self.stop(c, reason, now, true);
        }
    }

    /// Enters stage `index` (complete past the last), with a fresh window.
    pub(super) fn enter_stage(&self, c: &mut Control, index: usize, now: u64) {
        let since = Duration::from_nanos(now);
        let (state, bp) = match self.stages.get(index) {
            Some(s) => {
                let bp = s.basis_points();
                let state = RolloutState::Staged {
                    stage: index,
                    basis_points: bp,
                    since,
                };
                (state, bp)
            }
            None => (RolloutState::Complete { since }, BUCKETS as u32),
        };
        c.stage = index.min(self.stages.len());
        c.stage_since = now;
        let _discarded = self.tallies.figures(now, now, bp, true);
        c.window_start = now;
        self.basis_points.store(bp, Ordering::Relaxed);
        self.enter(c, state);
        self.set_due(c);
    }

    /// Halts, keeping the cohort on the new document or reverting every key.
    pub(super) fn stop(&self, c: &mut Control, reason: String, now: u64, reverted: bool) {
        let figures = match c.last_window {
            Some(w) if w.end == Duration::from_nanos(now) => w,
            _ => {
                let bp = self.basis_points.load(Ordering::Relaxed);
                self.tallies.figures(c.window_start, now, bp, false)
            }
        };
        let state = RolloutState::Halted {
            reason,
            cohort_breadth: figures.cohort_breadth,
            control_breadth: figures.control_breadth,
            stage: c.stage,
            basis_points: self.basis_points.load(Ordering::Relaxed),
            at: Duration::from_nanos(now),
            reverted,
        };
        if reverted {
            self.basis_points.store(0, Ordering::Relaxed);
        }
        self.enter(c, state);
        self.set_due(c);
    }

    fn enter(&self, c: &mut Control, state: RolloutState) {
        if c.events.len() == KEEP_EVENTS {
            c.events.pop_front();
        }
        #[cfg(feature = "tracing")]
        self.trace_state(&state);
        c.events.push_back(state.clone());
        c.state = state;
    }

    /// The `tracing` event for a state the rollout enters (target `tollgate::rollout`): a
    /// stage or the completion at INFO, a halt at WARN, with the revisions and figures.
    #[cfg(feature = "tracing")]
    fn trace_state(&self, state: &RolloutState) {
        let (from, to) = (self.old.limits.revision(), self.new.limits.revision());
        match state {
            RolloutState::Staged {
                stage,
                basis_points,
                ..
            } => tracing::info!(
                target: "tollgate::rollout",
                from_revision = from,
                to_revision = to,
                stage,
                basis_points,
                "rollout stage entered"
            ),
            RolloutState::Complete { .. } => tracing::info!(
                target: "tollgate::rollout",
                from_revision = from,
                to_revision = to,
                "rollout complete: every key on the new document"
            ),
            RolloutState::Halted {
                reason,
                cohort_breadth,
                control_breadth,
                stage,
                basis_points,
                reverted,
                ..
            } => tracing::warn!(
                target: "tollgate::rollout",
                from_revision = from,
                to_revision = to,
                stage,
                basis_points,
                cohort_breadth,
                control_breadth,
                reverted,
                reason = reason.as_str(),
                "rollout halted"
            ),
        }
    }

    fn stage_end(&self, c: &Control) -> Option<u64> {
        match c.state {
            RolloutState::Staged { stage, .. } => {
                let d = saturating_nanos(self.stages[stage].duration());
                Some(c.stage_since.saturating_add(d))
            }
            _ => None,
        }
    }

    fn set_due(&self, c: &Control) {
        let due = if c.state.is_comparing() {
            let window_end = c.window_start.saturating_add(self.cfg.window);
            self.stage_end(c)
                .map_or(window_end, |end| end.min(window_end))
        } else {
            u64::MAX
        };
        self.due.store(due, Ordering::Relaxed);
    }
}
