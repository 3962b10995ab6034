//! Monotonic counts for one series group across limiter replacements: a reload may give a
//! policy a fresh limiter (its classes or retry budget changed) or flip its shadow flag; the
//! counts the old limiter (or the old flag) produced are carried, so an exported counter
//! never goes down.

use crate::engine::stats::{Counters, COUNTERS};
use crate::metrics::names::as_served;

/// What was last seen for one policy (or one limiter).
#[derive(Debug, Default)]
pub(super) struct Track {
    /// The limiter's counters last seen, its shadow flag then, and its counts when that
    /// flag took effect.
    current: Option<(Counters, bool, [u64; COUNTERS])>,
    /// Counts served by earlier limiters (or under an earlier flag), as served.
    carried: [u64; COUNTERS],
}

/// What is in force for a policy: its limiter's counters, its shadow flag, and the counters'
/// sums when that flag took effect (zero for a limiter that started with it).
pub(super) type InForce<'a> = (&'a Counters, bool, [u64; COUNTERS]);

impl Track {
    /// Updates with what is in force now (`None`: the policy is gone) and returns every count
    /// as served so far.
    pub(super) fn read(&mut self, now: Option<InForce<'_>>) -> [u64; COUNTERS] {
        let unchanged = match (&self.current, now) {
            (Some((c, flag, from)), Some((n, nflag, nfrom))) => {
                c.same(n) && *flag == nflag && *from == nfrom
            }
            _ => false,
        };
        if !unchanged {
            if let Some((c, flag, from)) = self.current.take() {
                // Where the old flag's counts end: at the flip on the same limiter, or at
                // the old limiter's last count.
                let end = match now {
                    Some((n, _, nfrom)) if n.same(&c) => nfrom,
                    _ => c.sum(),
                };
                add(&mut self.carried, &as_served(minus(&end, &from), flag));
            }
            self.current = now.map(|(n, flag, from)| (n.share(), flag, from));
        }
        let mut total = self.carried;
        if let Some((c, flag, from)) = &self.current {
            add(&mut total, &as_served(minus(&c.sum(), from), *flag));
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
