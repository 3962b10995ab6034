//! [`SharedPermit`] and [`AcquireError`].

use core::fmt;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use super::task::Msg;
use super::Inner;
use crate::concurrency::{Permit, Saturated};
use crate::engine::verdict::PassReason;
use crate::redis::error::BackendError;

/// One slot of a [`SharedConcurrencyLimiter`](super::SharedConcurrencyLimiter), held until
/// dropped.
///
/// Dropping it gives the slot back on every path (a normal return, a panic, a dropped
/// future): this instance stops renewing it at once, and its background task removes it from
/// Redis a moment later, so dropping never waits on the network. [`release`](Self::release)
/// does the same by name. `Send + 'static`: it may move to another task and outlive its
/// limiter (the background task then lives until the last permit is gone).
///
/// A permit handed out by the failure policy while Redis is unreachable says so:
/// [`pass_reason`](Self::pass_reason) is `Some`, and [`is_shared`](Self::is_shared) `false`.
#[must_use = "a permit gives its slot back as soon as it is dropped"]
pub struct SharedPermit {
    held: Held,
}

enum Held {
    /// A slot in Redis.
    Redis {
        inner: Arc<Inner>,
        tx: UnboundedSender<Msg>,
        key: Vec<u8>,
        seq: u64,
    },
    /// A slot of this node's share (`FailurePolicy::Local`), given back when dropped.
    Local(#[allow(dead_code)] Permit), // reason: held for its drop, never read
    /// No slot at all (`FailurePolicy::Open`).
    Open,
    Released,
}

impl SharedPermit {
    pub(super) fn redis(
        inner: Arc<Inner>,
        tx: UnboundedSender<Msg>,
        key: Vec<u8>,
        seq: u64,
    ) -> Self {
        Self {
            held: Held::Redis {
                inner,
                tx,
                key,
                seq,
            },
        }
    }

    pub(super) fn local(p: Permit) -> Self {
        Self {
            held: Held::Local(p),
        }
    }

    pub(super) fn open() -> Self {
        Self { held: Held::Open }
    }

    /// `true` if the slot is held in Redis, so counted by every instance.
    pub fn is_shared(&self) -> bool {
        matches!(self.held, Held::Redis { .. })
    }

    /// Why this permit holds no slot in Redis, if it does not:
    /// [`PassReason::BackendUnavailable`] for a permit the failure policy gave (a slot of this
    /// node's share under `Local`, none at all under `Open`).
    pub fn pass_reason(&self) -> Option<PassReason> {
        match self.held {
            Held::Local(_) | Held::Open => Some(PassReason::BackendUnavailable),
            Held::Redis { .. } | Held::Released => None,
        }
    }

    /// Gives the slot back now (what dropping the permit does).
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for SharedPermit {
    fn drop(&mut self) {
        if let Held::Redis {
            inner,
            tx,
            key,
            seq,
        } = core::mem::replace(&mut self.held, Held::Released)
        {
            inner.forget(&key, seq);
            // No receiver: the runtime that ran the background task is gone, and the slot
            // lapses with its lease.
            let _ = tx.send(Msg::Release { key, seq });
        }
    }
}

impl fmt::Debug for SharedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = match &self.held {
            Held::Redis { seq, .. } => format!("redis #{seq}"),
            Held::Local(_) => "local share".to_owned(),
            Held::Open => "nothing (failure policy Open)".to_owned(),
            Held::Released => "released".to_owned(),
        };
        f.debug_struct("SharedPermit")
            .field("holds", &held)
            .finish()
    }
}

/// An acquire that gave no permit: no slot was open ([`Saturated`], with
/// [`SaturatedReason::BackendUnavailable`](crate::concurrency::SaturatedReason::BackendUnavailable)
/// when Redis could not decide and the failure policy is `Closed`), or the call could not be
/// made ([`BackendError`]: a key too long, a misconfiguration — never Redis being slow or
/// down, which the failure policy answers).
///
/// ```
/// use tollgate::concurrency::Saturated;
/// use tollgate::redis::AcquireError;
///
/// fn status(e: &AcquireError) -> u16 {
///     match e {
///         AcquireError::Saturated(_) => 429,
///         _ => 500,
///     }
/// }
/// # let _ = status;
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// No slot open.
    #[error(transparent)]
    Saturated(#[from] Saturated),
    /// The acquire could not be carried out.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl AcquireError {
    /// The refusal, if it was one.
    pub fn saturated(&self) -> Option<&Saturated> {
        match self {
            Self::Saturated(s) => Some(s),
            Self::Backend(_) => None,
        }
    }
}
