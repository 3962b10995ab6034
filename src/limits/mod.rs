//! Limits as code (feature `config`): the limits document with its strict
//! validation and diffs, hot reload through [`LimitsHandle`], and the
//! staged [`Rollout`]. Uses the limiters and every layer below them.

pub(crate) mod document;
pub(crate) mod reload;
pub(crate) mod rollout;

pub use crate::engine::error::{ConfigError, ConfigErrorKind};
pub use document::{
    Acknowledgement, Change, ConfigErrors, Diff, Direction, Format, Limits, Matcher, Policy,
    PolicyChange, QuotaChange, Tightening, TrafficMove,
};
pub use reload::{Decision, LimitsHandle, LimitsHandleBuilder, MultiDecision, PolicyVerdict};
pub use rollout::{Rollout, RolloutBuilder, RolloutStage, RolloutState, WindowFigures};
