//! What one side of a traffic replay saw, in bounded memory.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use serde::Serialize;

use crate::replay::sim::Bucket;

/// Key hashes kept to count keys ever denied.
pub(super) const MAX_EVER_DENIED: usize = 1 << 20;
/// Denied keys kept by name, for the hardest hit and the newly denied.
pub(super) const MAX_HARDEST: usize = 100_000;
/// Keys tallied per minute for the deny breadth.
pub(super) const MAX_MINUTE_KEYS: usize = 100_000;
/// Minutes after the first line a log may span (about 69 days).
pub(super) const MAX_MINUTES: u64 = 100_000;

/// Allowed and denied checks.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct Counts {
    pub(super) allowed: u64,
    pub(super) denied: u64,
}

/// What one side saw.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) policies: BTreeMap<String, Counts>,
    pub(super) overall: Counts,
    /// Requests no policy matched (unlimited by the document).
    pub(super) unmatched: u64,
    /// Requests whose cost exceeded their policy's burst.
    pub(super) oversized: u64,
    pub(super) ever_denied: HashSet<u64>,
    pub(super) ever_denied_capped: bool,
    pub(super) denials: HashMap<String, u64>,
    pub(super) denials_capped: bool,
    pub(super) minutes: Vec<Bucket>,
    pub(super) minute_keys: HashMap<u64, (u32, u32)>,
    pub(super) minute_keys_capped: bool,
}

pub(super) fn key_hash(key: &str) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl Tally {
    pub(super) fn record(
        &mut self,
        minute: usize,
        key: &str,
        hash: u64,
        policy: Option<&str>,
        permitted: bool,
    ) {
        let Some(policy) = policy else {
            self.unmatched += 1;
            return;
        };
        let c = match self.policies.get_mut(policy) {
            Some(c) => c,
            None => self.policies.entry(policy.to_owned()).or_default(),
        };
        let slot = if permitted {
            &mut c.allowed
        } else {
            &mut c.denied
        };
        *slot += 1;
        let slot = if permitted {
            &mut self.overall.allowed
        } else {
            &mut self.overall.denied
        };
        *slot += 1;
        while self.minutes.len() <= minute {
            self.close_minute();
            self.minutes.push(Bucket::default());
        }
        let b = &mut self.minutes[minute];
        b.requests += 1;
        b.failed += u64::from(!permitted);
        let room = self.minute_keys.len() < MAX_MINUTE_KEYS;
        match self.minute_keys.get_mut(&hash) {
            Some(t) => bump(t, permitted),
            None if room => bump(self.minute_keys.entry(hash).or_default(), permitted),
            None => self.minute_keys_capped = true,
        }
        if permitted {
            return;
        }
        if self.ever_denied.len() < MAX_EVER_DENIED {
            self.ever_denied.insert(hash);
        } else if !self.ever_denied.contains(&hash) {
            self.ever_denied_capped = true;
        }
        let room = self.denials.len() < MAX_HARDEST;
        match self.denials.get_mut(key) {
            Some(n) => *n += 1,
            None if room => {
                self.denials.insert(key.to_owned(), 1);
            }
            None => self.denials_capped = true,
        }
    }

    pub(super) fn close_minute(&mut self) {
        if let Some(b) = self.minutes.last_mut() {
            for (ok, denied) in self.minute_keys.values() {
                b.active_keys += 1;
                b.denied_keys += u64::from(denied > ok);
            }
        }
        self.minute_keys.clear();
    }

    pub(super) fn hardest(&self, n: usize) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self.denials.iter().map(|(k, c)| (k.clone(), *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }
}

fn bump(t: &mut (u32, u32), permitted: bool) {
    if permitted {
        t.0 = t.0.saturating_add(1);
    } else {
        t.1 = t.1.saturating_add(1);
    }
}
