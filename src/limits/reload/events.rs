//! The `tracing` events of a reload (target `tollgate::reload`): an accepted document at
//! INFO with its revisions and a summary of the diff, a refused one at WARN with why. Without
//! the `tracing` feature these do nothing.

use crate::limits::document::{ConfigErrors, Diff};

/// An accepted reload from revision `from`.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(super) fn reloaded(from: u64, diff: &Diff) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "tollgate::reload",
        from_revision = from,
        revision = diff.revisions().1,
        added = diff.added().len(),
        removed = diff.removed().len(),
        changed = diff.changed().len(),
        moved = diff.moves().len(),
        diff = %diff,
        "limits reloaded"
    );
}

/// A refused reload: the document in force (`from`) keeps serving.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(super) fn reload_refused(from: u64, revision: u64, errors: &ConfigErrors) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        target: "tollgate::reload",
        from_revision = from,
        revision,
        errors = errors.len(),
        first = %errors.iter().next().map(ToString::to_string).unwrap_or_default(),
        "limits reload refused: the document in force keeps serving"
    );
}
