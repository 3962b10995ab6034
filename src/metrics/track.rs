//! Monotonic counts for one series group across limiter replacements: a reload may give a
//! policy a fresh limiter (its classes or retry budget changed) or flip its shadow flag; the
//! counts the old limiter (or the old flag) produced are carried, so an exported counter
//! never goes down.

use crate::engine::stats::{Counters, COUNTERS};
use crate::metrics::names::as_served;

/// What was last seen for one policy (or one limiter).
#[derive(Debug, Default)]
pub(super) struct Track {
    /// The limiter's counters last seen, and its shadow flag then.
    current: Option<(Counters, bool)>,
    /// The current counters' sums when they were first seen under this flag (zero for a
    /// limiter first seen new; a flag flip on the same limiter starts from its sums then).
    base: [u64; COUNTERS],
    /// Counts served by earlier limiters (or under the earlier flag), as served.
    carried: [u64; COUNTERS],
}

impl Track {
    /// Updates with what is in force now (`None`: the policy is gone) and returns every count
    /// as served so far.
    pub(super) fn read(&mut self, now: Option<(&Counters, bool)>) -> [u64; COUNTERS] {
        let unchanged = match (&self.current, now) {
            (Some((c, flag)), Some((n, nflag))) => c.same(n) && *flag == nflag,
            _ => false,
        };
        if !unchanged {
            let mut same_limiter = None;
            if let Some((c, flag)) = self.current.take() {
                let sums = c.sum();
                add(
                    &mut self.carried,
                    &as_served(minus(&sums, &self.base), flag),
                );
                if now.is_some_and(|(n, _)| n.same(&c)) {
                    same_limiter = Some(sums);
                }
            }
            self.base = same_limiter.unwrap_or([0; COUNTERS]);
            self.current = now.map(|(n, flag)| (n.share(), flag));
        }
        let mut total = self.carried;
        if let Some((c, flag)) = &self.current {
            add(&mut total, &as_served(minus(&c.sum(), &self.base), *flag));
        }
        total
    }
}

fn minus(a: &[u64; COUNTERS], b: &[u64; COUNTERS]) -> [u64; COUNTERS] {
    std::array::from_fn(|i| a[i].saturating_sub(b[i]))
}

pub(super) fn add(total: &mut [u64; COUNTERS], more: &[u64; COUNTERS]) {
    for (t, m) in total.iter_mut().zip(more) {
        *t = t.wrapping_add(*m);
    }
}
