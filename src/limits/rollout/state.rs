//! [`RolloutState`]: where a rollout stands.

use core::time::Duration;

/// Where a rollout stands.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RolloutState {
    /// RolloutStage `stage` (0-based) runs: `basis_points` of the keys are on the new document.
    Staged {
        /// The stage's index in the rollout's stages.
        stage: usize,
        /// The share of keys on the new document, in basis points.
        basis_points: u32,
        /// When the stage began, on the rollout's clock.
        since: Duration,
    },
    /// Every key is on the new document.
    Complete {
        /// When the last stage ended.
        since: Duration,
    },
    /// Stopped: no further promotion.
    Halted {
        /// Why: the comparison that failed, or what the operator said.
        reason: String,
        /// The deny breadth of cohort keys in the window that decided (or the window so far,
        /// for an operator's halt).
        cohort_breadth: f64,
        /// The deny breadth of control keys in the same window.
        control_breadth: f64,
        /// The stage it halted at (the number of stages if it was complete).
        stage: usize,
        /// The share of keys on the new document at that stage, in basis points.
        basis_points: u32,
        /// When, on the rollout's clock.
        at: Duration,
        /// `true` if every key is back on the old document (an automatic halt, or
        /// [`Rollout::revert`](super::Rollout::revert)); `false` after
        /// [`Rollout::halt`](super::Rollout::halt), which holds the cohort on the new document
        /// and keeps comparing.
        reverted: bool,
    },
}

impl RolloutState {
    /// Whether windows are compared: a stage runs, or an operator holds one.
    pub(super) fn is_comparing(&self) -> bool {
        matches!(
            self,
            RolloutState::Staged { .. }
                | RolloutState::Halted {
                    reverted: false,
                    ..
                }
        )
    }
}
