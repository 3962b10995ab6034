//! Per-key tallies of one comparison window, and the figures they add up to.

use crate::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::HashMap;

use crate::sync::Mutex;

/// Shards of the tally map: checks of different keys rarely wait on each other.
const SHARDS: usize = 16;

/// One comparison window's figures: how broadly cohort keys (on the new document) and
/// control keys (on the old one) were denied.
///
/// A key is *active* if it was checked in the window, and *mostly denied* if it had more
/// denials than allowed checks; a side's breadth is the share of its active keys that were
/// mostly denied (0 when it had no active key).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct WindowFigures {
    /// When the window opened, on the rollout's clock.
    pub start: Duration,
    /// When it was closed (or read, for a window still open).
    pub end: Duration,
    /// The share of keys on the new document when the window ran, in basis points.
    pub basis_points: u32,
    /// Active cohort keys tracked.
    pub cohort_keys: usize,
    /// Of those, the mostly denied.
    pub cohort_denied_keys: usize,
    /// `cohort_denied_keys / cohort_keys`.
    pub cohort_breadth: f64,
    /// Active control keys tracked.
    pub control_keys: usize,
    /// Of those, the mostly denied.
    pub control_denied_keys: usize,
    /// `control_denied_keys / control_keys`.
    pub control_breadth: f64,
    /// Checks of keys that found no room in the tallies (see
    /// [`RolloutBuilder::max_tracked_keys`](crate::limits::RolloutBuilder::max_tracked_keys)):
    /// enforced as usual, left out of the figures.
    pub untracked_checks: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    allowed: u32,
    denied: u32,
}

#[derive(Debug, Default)]
struct Shard {
    cohort: HashMap<u64, Tally>,
    control: HashMap<u64, Tally>,
}

/// The current window's tallies, keyed by the key's cohort hash. Each side (cohort, control)
/// tracks at most `cap` keys per window, so a flood of control keys cannot crowd the few
/// cohort keys out of the comparison, and memory stays under about 2 × `cap` × 32 bytes.
#[derive(Debug)]
pub(crate) struct Tallies {
    shards: [Mutex<Shard>; SHARDS],
    per_shard: usize,
    untracked: AtomicU64,
}

impl Tallies {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            shards: core::array::from_fn(|_| Mutex::default()),
            per_shard: cap.div_ceil(SHARDS).max(1),
            untracked: AtomicU64::new(0),
        }
    }

    /// Counts one check of the key with cohort hash `hash`.
    #[inline]
    pub(crate) fn record(&self, hash: u64, cohort: bool, denied: bool) {
        let mut shard = self.shards[(hash >> 60) as usize % SHARDS].lock();
        let map = if cohort {
            &mut shard.cohort
        } else {
            &mut shard.control
        };
        let full = map.len() >= self.per_shard;
        let tally = match map.get_mut(&hash) {
            Some(t) => t,
            None if full => {
                // Relaxed: a count read when the window closes, guarding nothing.
                self.untracked.fetch_add(1, Ordering::Relaxed);
                return;
            }
            None => map.entry(hash).or_default(),
        };
        if denied {
            tally.denied = tally.denied.saturating_add(1);
        } else {
            tally.allowed = tally.allowed.saturating_add(1);
        }
    }

    /// The figures so far; with `close`, the tallies are also cleared for the next window.
    pub(crate) fn figures(
        &self,
        start: u64,
        now: u64,
        basis_points: u32,
        close: bool,
    ) -> WindowFigures {
        let (mut cohort, mut control) = ((0, 0), (0, 0));
        for shard in &self.shards {
            let mut shard = shard.lock();
            add(&mut cohort, &shard.cohort);
            add(&mut control, &shard.control);
            if close {
                shard.cohort.clear();
                shard.control.clear();
            }
        }
        let untracked = if close {
            self.untracked.swap(0, Ordering::Relaxed)
        } else {
            self.untracked.load(Ordering::Relaxed)
        };
        let share = |(denied, keys): (usize, usize)| match keys {
            0 => 0.0,
            n => denied as f64 / n as f64,
        };
        WindowFigures {
            start: Duration::from_nanos(start),
            end: Duration::from_nanos(now),
            basis_points,
            cohort_keys: cohort.1,
            cohort_denied_keys: cohort.0,
            cohort_breadth: share(cohort),
            control_keys: control.1,
            control_denied_keys: control.0,
            control_breadth: share(control),
            untracked_checks: untracked,
        }
    }
}

/// Adds a side's (mostly denied, active) key counts.
fn add(acc: &mut (usize, usize), side: &HashMap<u64, Tally>) {
    acc.0 += side.values().filter(|t| t.denied > t.allowed).count();
    acc.1 += side.len();
}
