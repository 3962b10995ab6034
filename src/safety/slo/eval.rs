//! The lazy evaluator: a ring of per-tier sub-bucket counts, rolled forward once per
//! sub-bucket, and the comparison of each tier's window with its reference period.

use crate::sync::atomic::Ordering;
use core::time::Duration;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::report::{drop_exceeds, Tally};
use super::{Counts, SloAlert, SuccessRate, BP, MAX_QUEUED, SUB_BUCKETS};

/// The evaluator's view, behind a lock taken once per sub-bucket.
pub(super) struct EvalState {
    /// The sub-bucket in progress at the last evaluation; its counts so far are the counters'
    /// growth since `seen`.
    pub(super) bucket: u64,
    /// Counter totals per tier at the last evaluation.
    pub(super) seen: Box<[Counts]>,
    /// Counts of the complete sub-buckets `[bucket − len, bucket)`: sub-bucket `i` of tier `t`
    /// at `(i % len) · tiers + t`.
    pub(super) ring: Box<[Counts]>,
    /// Per tier: an alert fired and the rate has not recovered yet.
    pub(super) firing: Box<[bool]>,
}

impl EvalState {
    fn len(&self) -> u64 {
        (self.ring.len() / self.firing.len()) as u64
    }

    fn slot(&self, bucket: u64, tier: usize) -> usize {
        (bucket % self.len()) as usize * self.firing.len() + tier
    }

    /// Counts of `tier` over the sub-buckets `[lo, hi)`; `pending` is the in-progress bucket's.
    pub(super) fn sum(&self, tier: usize, lo: u64, hi: u64, pending: Counts) -> Counts {
        let mut out = [0; 4];
        let start = lo.max(self.bucket.saturating_sub(self.len()));
        for i in start..hi.min(self.bucket) {
            add(&mut out, self.ring[self.slot(i, tier)]);
        }
        if (lo..hi).contains(&self.bucket) {
            add(&mut out, pending);
        }
        out
    }

    /// Closes the sub-buckets before `now_bucket` (> `self.bucket`) given the current totals.
    fn roll(&mut self, now_bucket: u64, totals: &[Counts]) {
        for (tier, total) in totals.iter().enumerate() {
            let pending = growth(*total, self.seen[tier]);
            for i in (self.bucket..now_bucket).rev().take(self.len() as usize) {
                let slot = self.slot(i, tier);
                self.ring[slot] = if i == self.bucket { pending } else { [0; 4] };
            }
        }
        self.seen.copy_from_slice(totals);
        self.bucket = now_bucket;
    }
}

fn add(into: &mut Counts, c: Counts) {
    for (a, b) in into.iter_mut().zip(c) {
        *a = a.saturating_add(b);
    }
}

pub(super) fn growth(now: Counts, then: Counts) -> Counts {
    core::array::from_fn(|i| now[i].wrapping_sub(then[i]))
}

impl SuccessRate {
    pub(super) fn bucket_end(&self, now: u64) -> u64 {
        (now / self.bucket_ns + 1).saturating_mul(self.bucket_ns)
    }

    pub(super) fn totals(&self) -> Vec<Counts> {
        let mut totals = vec![[0; 4]; self.tiers.len()];
        for (i, cell) in self.counters.iter().enumerate() {
            let c = cell.0.each_ref().map(|a| a.load(Ordering::Relaxed));
            add(&mut totals[i % self.tiers.len()], c);
        }
        totals
    }

    #[cold]
    #[inline(never)]
    pub(super) fn evaluate(&self) {
        let raised = {
            let mut st = self.state.lock();
            // Read under the lock: evaluations then see time in order.
            let now = self.clock.now_nanos();
            self.next_eval
                .fetch_max(self.bucket_end(now), Ordering::Relaxed);
            let bucket = now / self.bucket_ns;
            if bucket <= st.bucket {
                return;
            }
            st.roll(bucket, &self.totals());
            self.judge(&mut st, now)
        };
        self.deliver(raised);
    }

    /// Compares each tier's last window with its reference period, and updates the episodes.
    fn judge(&self, st: &mut EvalState, now: u64) -> Vec<SloAlert> {
        let hi = st.bucket;
        let mid = hi.saturating_sub(SUB_BUCKETS);
        let lo = mid.saturating_sub(self.reference_buckets);
        let bp = u128::from(self.threshold_bp);
        let mut raised = Vec::new();
        for (t, tier) in self.tiers.iter().enumerate() {
            let current = Tally::of(st.sum(t, mid, hi, [0; 4]));
            let reference = Tally::of(st.sum(t, lo, mid, [0; 4]));
            let min = self.min_samples.max(1);
            if current.total() < min || reference.total() < min {
                continue;
            }
            if !st.firing[t] && drop_exceeds(reference, current, BP, bp) {
                st.firing[t] = true;
                raised.push(SloAlert {
                    tier: Arc::clone(tier),
                    current: current.rate().unwrap_or(0.0),
                    reference: reference.rate().unwrap_or(0.0),
                    current_requests: current.total(),
                    reference_requests: reference.total(),
                    window: self.window(),
                    window_end: Duration::from_nanos(hi.saturating_mul(self.bucket_ns)),
                    at: Duration::from_nanos(now),
                });
            } else if st.firing[t] && !drop_exceeds(reference, current, 2 * BP, bp) {
                st.firing[t] = false;
            }
        }
        raised
    }

    /// Queues the alerts, then runs the callback on each, outside every lock.
    fn deliver(&self, raised: Vec<SloAlert>) {
        if raised.is_empty() {
            return;
        }
        #[cfg(feature = "tracing")]
        for alert in &raised {
            tracing::warn!(
                target: "tollgate::success_rate",
                tier = alert.tier(),
                current = alert.current(),
                reference = alert.reference(),
                drop_pp = alert.drop_pp(),
                current_requests = alert.current_requests(),
                reference_requests = alert.reference_requests(),
                window_secs = alert.window().as_secs_f64(),
                "customer success rate dropped"
            );
        }
        {
            let mut queue = self.queue.lock();
            for alert in &raised {
                if queue.len() == MAX_QUEUED {
                    queue.pop_front();
                    self.dropped_alerts.fetch_add(1, Ordering::Relaxed);
                }
                queue.push_back(alert.clone());
            }
        }
        let Some(callback) = &self.on_alert else {
            return;
        };
        for alert in &raised {
            if catch_unwind(AssertUnwindSafe(|| callback(alert))).is_err() {
                self.callback_panics.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_len_buckets_and_the_pending_one() {
        let mut st = EvalState {
            bucket: 0,
            seen: vec![[0; 4]].into(),
            ring: vec![[0; 4]; 3].into(),
            firing: vec![false].into(),
        };
        st.roll(1, &[[5, 0, 0, 0]]); // bucket 0 holds 5
        st.roll(2, &[[7, 1, 0, 0]]); // bucket 1 holds 2 + 1
        assert_eq!(st.sum(0, 0, 2, [0; 4]), [7, 1, 0, 0]);
        assert_eq!(st.sum(0, 1, 3, [4, 0, 0, 0]), [6, 1, 0, 0]);
        st.roll(10, &[[9, 1, 0, 0]]); // bucket 2 holds 2; buckets 3..10 are empty
        assert_eq!(st.sum(0, 0, 10, [0; 4]), [0; 4]); // 0..=2 fell out of the ring
        st.roll(11, &[[9, 1, 0, 0]]);
        assert_eq!(st.sum(0, 0, 11, [0; 4]), [0; 4]);
    }
}
