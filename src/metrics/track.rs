//! Monotonic counts for one series group across limiter replacements: a reload may give a
//! policy a fresh limiter (its classes or retry budget changed) or flip its shadow flag; the
//! counts the old limiter (or the old flag) produced are carried, so an exported counter
//! never goes down.

use std::collections::BTreeMap;
use std::sync::Arc;

#[cfg(feature = "config")]
use super::export::{checks, keys};
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

/// The counts of `policy` in document `doc` as served so far, given what is in force now.
pub(super) fn track(
    tracks: &mut BTreeMap<(Arc<str>, usize), Track>,
    policy: &str,
    doc: usize,
    now: Option<InForce<'_>>,
) -> [u64; COUNTERS] {
    let key = (Arc::from(policy), doc);
    tracks.entry(key).or_default().read(now)
}

/// Every policy of one or two documents: checks summed by policy name (policies gone since
/// keep their last counts), and each policy's keys.
#[cfg(feature = "config")]
pub(super) fn policies(
    name: &str,
    tracks: &mut BTreeMap<(Arc<str>, usize), Track>,
    docs: [Vec<crate::limits::reload::Entry>; 2],
) {
    let mut by_policy: BTreeMap<Arc<str>, [u64; COUNTERS]> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for (doc, entries) in docs.iter().enumerate() {
        for e in entries {
            // A limiter not built yet (no check of its policy so far) counts nothing; the
            // counts of an earlier one stay carried.
            let now = e
                .limiter
                .as_ref()
                .map(|l| (l.counters(), e.shadow, e.counted_from));
            let counts = track(tracks, &e.name, doc, now);
            add(by_policy.entry(Arc::clone(&e.name)).or_default(), &counts);
            seen.insert((Arc::clone(&e.name), doc));
        }
    }
    for (key, t) in tracks.iter_mut().filter(|(k, _)| !seen.contains(*k)) {
        add(
            by_policy.entry(Arc::clone(&key.0)).or_default(),
            &t.read(None),
        );
    }
    for (policy, counts) in &by_policy {
        checks(name, policy, counts);
    }
    let mut keyed: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new();
    for e in docs.iter().flatten() {
        let k = keyed.entry(&e.name).or_default();
        k.1 += e.max_keys;
        if let Some(lim) = &e.limiter {
            k.0 += lim.len();
            k.2 += lim.table_bytes();
        }
    }
    for (policy, (len, max, bytes)) in keyed {
        keys(name, policy, len, max, bytes);
    }
}
