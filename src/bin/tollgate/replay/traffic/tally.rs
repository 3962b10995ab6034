//! What one side of a traffic replay saw, in bounded memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::OnceLock;

use serde::Serialize;
use tollgate::limits::MultiDecision;
use tollgate::{PassReason, Shadow, Verdict};

use crate::replay::sim::Bucket;

/// Key hashes kept to count keys ever denied.
pub(super) const MAX_EVER_DENIED: usize = 1 << 20;
/// Denied keys kept by name, for the hardest hit and the newly denied.
pub(super) const MAX_HARDEST: usize = 100_000;
/// Keys tallied per minute for the deny breadth.
pub(super) const MAX_MINUTE_KEYS: usize = 100_000;
/// Rows of the policy × tier × route breakdown kept; the rest add up in one "other" row.
pub(super) const MAX_BREAKDOWN: usize = 10_000;
/// Minutes after the first line a log may span (about 69 days).
pub(super) const MAX_MINUTES: u64 = 100_000;

/// Distinct keys seen in the log (by hash), counted exactly up to [`MAX_EVER_DENIED`]
/// keys, a lower bound past that.
#[derive(Debug, Default)]
pub(super) struct Customers {
    seen: HashSet64,
    pub(super) capped: bool,
}

impl Customers {
    pub(super) fn insert(&mut self, hash: u64) {
        if self.seen.len() < MAX_EVER_DENIED {
            self.seen.insert(hash);
        } else if !self.seen.contains(&hash) {
            self.capped = true;
        }
    }

    pub(super) fn count(&self) -> u64 {
        self.seen.len() as u64
    }
}

/// Allowed and denied checks.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct Counts {
    /// Let through (shadow policies' would-be denials included: they enforce nothing).
    pub(super) allowed: u64,
    /// Enforced denials.
    pub(super) denied: u64,
    /// Let through only because the policy denying them is in shadow mode: what it would deny
    /// once enforced (NGINX's `limit_req_dry_run`, Envoy's shadow stats, AWS WAF's Count).
    pub(super) shadow_denied: u64,
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
    pub(super) ever_denied: HashSet64,
    pub(super) ever_denied_capped: bool,
    /// Policy × tier × route, by an FNV-1a hash of the three: the row's index in `rows`.
    pub(super) breakdown: HashMap64<usize>,
    /// Off for the rollout's tally, which feeds only the chart.
    pub(super) no_breakdown: bool,
    pub(super) rows: Vec<(String, String, String, Counts)>,
    /// Denied keys by name: how often, and when first (ms since the epoch).
    pub(super) denials: HashMap<String, (u64, i64)>,
    /// The time of the check being tallied (ms since the epoch), set by the side.
    pub(super) now_ms: i64,
    pub(super) denials_capped: bool,
    pub(super) minutes: Vec<Bucket>,
    pub(super) minute_keys: HashMap64<(u32, u32)>,
    pub(super) minute_keys_capped: bool,
}

/// A key's hash: SipHash under a key drawn once per run, so a log cannot be written to
/// collide in the tables below (they use the hash as it is: [`PreHashed`]).
pub(super) fn key_hash(key: &str) -> u64 {
    static SEED: OnceLock<RandomState> = OnceLock::new();
    SEED.get_or_init(RandomState::new).hash_one(key)
}

/// The hasher of tables keyed by a hash already made ([`key_hash`], [`fnv1a`]): the hash
/// itself, not hashed again (SipHash on every lookup cost ~10 % of a replay).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys reach this hasher; any other input still hashes, FNV-1a style.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Tables keyed by a hash already made.
pub(super) type PreHashed = BuildHasherDefault<Identity>;
/// A set of hashes already made.
pub(super) type HashSet64 = HashSet<u64, PreHashed>;
/// A map from hashes already made.
pub(super) type HashMap64<V> = HashMap<u64, V, PreHashed>;

impl Tally {
    /// Tallies a decision of every policy that applied: each policy's verdict, then the
    /// request's overall one.
    pub(super) fn decision(
        &mut self,
        minute: usize,
        (key, tier, route): (&str, &str, &str),
        hash: u64,
        d: &MultiDecision,
    ) {
        let mut shadow_denied = false;
        let place = fnv1a(FNV_START, &[tier, route]);
        for v in d.verdicts() {
            if !self.no_breakdown {
                let row = self.row(place, v.policy(), tier, route);
                count(row, v.verdict());
            }
            let c = match self.policies.get_mut(v.policy()) {
                Some(c) => c,
                None => self.policies.entry(v.policy().to_owned()).or_default(),
            };
            shadow_denied |= count(c, v.verdict());
        }
        let matched = !d.verdicts().is_empty();
        self.record(minute, key, hash, matched, d.is_permitted(), shadow_denied);
    }

    /// The breakdown row of `policy` × `tier` × `route` (the "other" row past the bound).
    fn row(&mut self, place: u64, policy: &str, tier: &str, route: &str) -> &mut Counts {
        let h = fnv1a(place, &[policy]);
        let i = match self.breakdown.get(&h) {
            Some(&i) => i,
            None if self.rows.len() < MAX_BREAKDOWN => {
                let row = (policy.to_owned(), tier.to_owned(), route.to_owned());
                self.rows.push((row.0, row.1, row.2, Counts::default()));
                self.breakdown.insert(h, self.rows.len() - 1);
                self.rows.len() - 1
            }
            None => {
                let other = fnv1a(FNV_START, &["(other)"]);
                match self.breakdown.get(&other) {
                    Some(&i) => i,
                    None => {
                        let row = (String::new(), String::new(), "(other)".to_owned());
                        self.rows.push((row.0, row.1, row.2, Counts::default()));
                        self.breakdown.insert(other, self.rows.len() - 1);
                        self.rows.len() - 1
                    }
                }
            }
        };
        &mut self.rows[i].3
    }

    /// A request denied because its cost exceeds `policy`'s burst.
    pub(super) fn oversized(&mut self, minute: usize, key: &str, hash: u64, policy: Option<&str>) {
        self.oversized += 1;
        if let Some(policy) = policy {
            self.policies.entry(policy.to_owned()).or_default().denied += 1;
        }
        self.record(minute, key, hash, true, false, false);
    }

    /// Tallies a request's overall verdict: `matched` if a policy applied, `shadow_denied`
    /// if a shadow policy would have denied it.
    pub(super) fn record(
        &mut self,
        minute: usize,
        key: &str,
        hash: u64,
        matched: bool,
        permitted: bool,
        shadow_denied: bool,
    ) {
        if !matched {
            self.unmatched += 1;
            return;
        }
        let slot = if permitted {
            &mut self.overall.allowed
        } else {
            &mut self.overall.denied
        };
        *slot += 1;
        self.overall.shadow_denied += u64::from(shadow_denied);
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
            Some((n, _)) => *n += 1,
            None if room => {
                self.denials.insert(key.to_owned(), (1, self.now_ms));
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
        let mut v: Vec<(String, u64)> =
            self.denials.iter().map(|(k, c)| (k.clone(), c.0)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }
}

/// Counts one policy's verdict; `true` if it is a shadow policy's would-be denial.
fn count(c: &mut Counts, v: Verdict) -> bool {
    match v {
        Verdict::Deny(_) => c.denied += 1,
        Verdict::PassThrough(p)
            if p.reason() == PassReason::Shadow && p.shadow() == Shadow::Deny =>
        {
            c.allowed += 1;
            c.shadow_denied += 1;
            return true;
        }
        _ => c.allowed += 1,
    }
    false
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over strings, from `start`, each ended by a 0xff byte (which UTF-8 never holds), so
/// ("ab", "c") and ("a", "bc") differ. Fast on the short strings of a row's name.
fn fnv1a(start: u64, parts: &[&str]) -> u64 {
    let mut h = start;
    for p in parts {
        for &b in p.as_bytes().iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn bump(t: &mut (u32, u32), permitted: bool) {
    if permitted {
        t.0 = t.0.saturating_add(1);
    } else {
        t.1 = t.1.saturating_add(1);
    }
}
