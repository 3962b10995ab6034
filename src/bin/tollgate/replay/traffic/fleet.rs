//! `--instances N`: a fleet of N gateway instances, each with an in-memory limiter holding
//! the full quota, requests spread round-robin per request — beside the side's one shared
//! limit (what `SharedRateLimiter` gives every instance). Round-robin per request, not by
//! key: spreading by key would give each key one instance and hide the N× admission.

use serde::Serialize;
use tollgate::limits::{Limits, LimitsHandle};
use tollgate::{Check, ManualClock};

use super::record::Record;
use super::tally::{HashSet64, MAX_EVER_DENIED};

/// The most instances a fleet may have.
pub(crate) const MAX_INSTANCES: usize = 1_000;

/// N local limiters, one per instance.
pub(super) struct Fleet {
    handles: Vec<LimitsHandle>,
    next: usize,
    pub(super) totals: FleetTotals,
    ever_denied: HashSet64,
}

/// What the fleet of local limiters let through.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct FleetTotals {
    pub(super) instances: usize,
    pub(super) allowed: u64,
    pub(super) denied: u64,
    pub(super) keys_ever_denied: u64,
}

impl Fleet {
    pub(super) fn new(limits: &Limits, instances: usize, clock: &ManualClock) -> Fleet {
        let handles = (0..instances)
            .map(|_| {
                LimitsHandle::builder(limits.clone())
                    .clock(clock.clone())
                    .build()
            })
            .collect();
        Fleet {
            handles,
            next: 0,
            totals: FleetTotals {
                instances,
                ..FleetTotals::default()
            },
            ever_denied: HashSet64::default(),
        }
    }

    /// Checks `rec` on the next instance.
    pub(super) fn check(&mut self, rec: &Record, check: Check, hash: u64) {
        let Some(handle) = self.handles.get(self.next) else {
            return;
        };
        self.next = (self.next + 1) % self.handles.len();
        // Unmatched requests are counted nowhere, as on the shared side.
        match handle.check_all(&rec.tier, &rec.category, &rec.route, &rec.key, check) {
            Ok(d) if d.verdicts().is_empty() => {}
            Ok(d) if d.is_permitted() => self.totals.allowed += 1,
            _ => {
                self.totals.denied += 1;
                if self.ever_denied.len() < MAX_EVER_DENIED {
                    self.ever_denied.insert(hash);
                }
                self.totals.keys_ever_denied = self.ever_denied.len() as u64;
            }
        }
    }
}
