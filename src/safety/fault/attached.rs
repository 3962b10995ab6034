//! The counters of the limiters a detector watches: each limiter counts its own checks, the
//! detector sums them.

use crate::engine::stats::{Counters, COUNTERS};

/// The counters of the limiters a detector watches: they count their own checks, the detector
/// sums them (on evaluation and on `stats()`, never per check).
#[derive(Debug, Default)]
pub(crate) struct AttachedCounters {
    live: Vec<Counters>,
    /// The last sums of limiters since dropped, so totals never go down.
    retired: [u64; COUNTERS],
}

impl AttachedCounters {
    /// One more limiter's counters.
    pub(super) fn attach(&mut self, counters: Counters) {
        self.live.push(counters);
    }

    /// The sums over every limiter attached, dropped ones included; drops the counters of
    /// limiters that are gone, keeping what they counted.
    pub(super) fn sum_into(&mut self, total: &mut [u64; COUNTERS]) {
        let retired = &mut self.retired;
        self.live.retain(|c| {
            if c.is_orphaned() {
                add(retired, &c.sum());
                false
            } else {
                true
            }
        });
        add(total, retired);
        for c in &self.live {
            add(total, &c.sum());
        }
    }
}

fn add(total: &mut [u64; COUNTERS], more: &[u64; COUNTERS]) {
    for (t, m) in total.iter_mut().zip(more) {
        *t = t.wrapping_add(*m);
    }
}
