//! The FIFO queue of waiters of one counter (the direct limiter's, or one key's).
//!
//! Always under its owner's lock. A waiter is a ticket number, handed out in arrival order;
//! a release (or a raised limit) *grants* slots to the oldest waiters whose class has one
//! open: the slot is taken on the waiter's behalf under the lock, and the ticket moves to
//! `granted` until its future claims it as a [`Permit`](super::Permit). A future dropped
//! (or timed out) first takes its ticket out under the same lock: still waiting, it held
//! nothing; already granted, its owner gives the slot back. So a cancelled waiter never holds
//! a slot, even when the grant and the drop race.

use core::task::{Poll, Waker};
use std::collections::{BTreeMap, BTreeSet};

use super::Saturated;

/// One counter's waiters.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    next: u64,
    waiting: BTreeMap<u64, Waiter>,
    granted: BTreeSet<u64>,
}

#[derive(Debug)]
struct Waiter {
    class: u8,
    waker: Option<Waker>,
}

/// What taking a ticket out of the queue found.
#[cfg_attr(not(feature = "tokio"), allow(dead_code))] // reason: the waits' (feature tokio)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Left {
    /// It was still waiting: it held nothing.
    Waiting,
    /// It had been granted a slot, which its caller now owns.
    Granted,
    /// Not in the queue (already claimed or taken out).
    Absent,
}

#[cfg_attr(not(feature = "tokio"), allow(dead_code))] // reason: the waits' (feature tokio)
impl WaitQueue {
    /// Waiters not yet granted.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// No waiter and no unclaimed grant.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.granted.is_empty()
    }

    /// A new waiter of `class`, behind every earlier one.
    pub(crate) fn push(&mut self, class: u8) -> u64 {
        let id = self.next;
        self.next += 1;
        self.waiting.insert(id, Waiter { class, waker: None });
        id
    }

    /// Grants slots to waiters, oldest first: `take(class)` takes a slot for a waiter of
    /// that class or says why not. A waiter whose class has no slot open is skipped (a more
    /// critical waiter behind it may still have one); the scan stops at the first refusal
    /// with the whole limit in use, where no class has a slot.
    pub(crate) fn grant(&mut self, mut take: impl FnMut(u8) -> Result<(), Saturated>) {
        let mut from = 0;
        while let Some((&id, w)) = self.waiting.range(from..).next() {
            from = id + 1;
            match take(w.class) {
                Ok(()) => {
                    if let Some(w) = self.waiting.remove(&id) {
                        self.granted.insert(id);
                        if let Some(waker) = w.waker {
                            waker.wake();
                        }
                    }
                }
                Err(s) if s.in_flight() >= s.limit() => return,
                Err(_) => {}
            }
        }
    }

    /// A waiter's poll: ready once granted (the caller then owns the slot), else the waker
    /// is kept for the grant.
    pub(crate) fn poll(&mut self, id: u64, waker: &Waker) -> Poll<()> {
        if self.granted.remove(&id) {
            return Poll::Ready(());
        }
        if let Some(w) = self.waiting.get_mut(&id) {
            match &w.waker {
                Some(old) if old.will_wake(waker) => {}
                _ => w.waker = Some(waker.clone()),
            }
        }
        Poll::Pending
    }

    /// Takes a ticket out: see [`Left`].
    pub(crate) fn leave(&mut self, id: u64) -> Left {
        if self.waiting.remove(&id).is_some() {
            Left::Waiting
        } else if self.granted.remove(&id) {
            Left::Granted
        } else {
            Left::Absent
        }
    }
}
