//! Limits as code (feature `config`, incident 001): the limits document with its strict
//! validation and diffs, hot reload through [`LimitsHandle`](crate::LimitsHandle), and the
//! staged [`Rollout`](crate::Rollout). Uses the limiters and every layer below them.

pub(crate) mod document;
pub(crate) mod reload;
pub(crate) mod rollout;
