//! The breadth panel: a seeded bottom-k sample of keys, watched one by one.
//!
//! Breadth is the share of *previously conforming* panel keys that are now mostly denied. A
//! flood from a few keys moves it by the share of the panel those keys hold, which an attacker
//! cannot raise: membership goes by a seeded hash of the key's fingerprint, under a threshold
//! that halves whenever the panel holds more than k keys (a bottom-k sample of the active
//! keys), so the panel is a uniform sample that nobody can aim at.

use crate::sync::atomic::{AtomicU64, Ordering};

/// A member idle this long (1 h) leaves the panel, making room for an active key.
const FORGET_IDLE: u64 = 3_600_000_000_000;

/// Slots per panel key: the panel is direct-mapped, so two members may want one slot; then the
/// later one simply stays out.
const SLOTS_PER_KEY: usize = 2;

/// The hot half: the members and their increase-only counters.
#[derive(Debug)]
pub(crate) struct Panel {
    seed: u64,
    /// Keys whose panel hash is above this are not sampled (the one compare on the hot path).
    threshold: AtomicU64,
    /// `[fingerprint, allowed, denied]` per slot; fingerprint 0 = free. A power of two long,
    /// so a key's slot is a mask of its hash, not a division: until the threshold has come
    /// down to the panel's size (one halving per evaluation), every check of every key looks
    /// its slot up, and a 64-bit division there cost more time than the rest of the check.
    slots: Box<[[AtomicU64; 3]]>,
    /// `slots.len() - 1`.
    mask: u64,
    k: usize,
}

impl Panel {
    pub(crate) fn new(k: usize, seed: u64) -> Self {
        let k = k.max(1);
        let len = k.saturating_mul(SLOTS_PER_KEY).next_power_of_two();
        Self {
            seed,
            threshold: AtomicU64::new(u64::MAX),
            slots: (0..len).map(|_| Default::default()).collect(),
            mask: len as u64 - 1,
            k,
        }
    }

    /// The panel hash: the fingerprint under the panel's own seed, multiplied by an odd
    /// constant. The fingerprint is already a uniform seeded hash, so one bijective mix is
    /// enough: the product's high bits, which decide membership (`h ≤ threshold`), depend on
    /// every bit of it, while the table places keys by its low bits — membership stays
    /// independent of placement, and nobody who cannot see the seeds can aim at it. (A full
    /// finalizer here cost ten instructions on every keyed check with a detector.)
    #[inline(always)]
    fn hash(&self, fp: u64) -> u64 {
        (fp ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    /// Records one verdict of the key with fingerprint `fp`: cheap unless the key is sampled.
    /// Always inlined: it runs on every check of a keyed limiter with a detector attached.
    #[inline(always)]
    pub(crate) fn record(&self, fp: u64, denied: bool) {
        let h = self.hash(fp);
        // Relaxed: the threshold is a sampling hint; a stale value only samples one key more
        // or less.
        if fp == 0 || h > self.threshold.load(Ordering::Relaxed) {
            return;
        }
        self.record_sampled(h, fp, denied);
    }

    #[cold]
    fn record_sampled(&self, h: u64, fp: u64, denied: bool) {
        // The low bits of `h`: membership is decided by its high bits.
        let slot = &self.slots[(h & self.mask) as usize];
        let cur = slot[0].load(Ordering::Relaxed);
        let member = cur == fp
            || (cur == 0
                && slot[0]
                    .compare_exchange(0, fp, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok());
        if member {
            slot[1 + usize::from(denied)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Evaluator side: reads slot `i` as `(fingerprint, allowed, denied)`.
    pub(crate) fn read(&self, i: usize) -> (u64, u64, u64) {
        let s = &self.slots[i];
        (
            s[0].load(Ordering::Relaxed),
            s[1].load(Ordering::Relaxed),
            s[2].load(Ordering::Relaxed),
        )
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Evaluator side: frees slot `i` if it still holds `fp`.
    pub(crate) fn evict(&self, i: usize, fp: u64) {
        let _ = self.slots[i][0].compare_exchange(fp, 0, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Evaluator side: keeps about k members. More than k: lower the threshold to where about
    /// k of the keys under it would remain, and evict the members above it. Fewer than k/2:
    /// double it, to sample more keys.
    ///
    /// The keys under the threshold are counted from how many slots they fill, `members` of
    /// them once [`close_sub`] has dropped the idle (linear counting: the panel is
    /// direct-mapped, so `n` keys fill `S·(1 − e^(−n/S))` of `S` slots). A panel that starts
    /// out sampling every key thus comes down to its size at the first sub-bucket close when
    /// it is not saturated (10k active keys, k = 1024), and by a factor of `S·ln 2S / k` or
    /// more per close when it is, rather than by one halving per close (a minute at 10k keys,
    /// every check sampled meanwhile).
    pub(crate) fn rebalance(&self, members: usize) {
        let t = self.threshold.load(Ordering::Relaxed);
        if members > self.k {
            let (slots, taken) = (self.slots.len() as f64, members as f64);
            let keys = slots * (slots / (slots - taken).max(0.5)).ln();
            let share = (self.k as f64 / keys.max(taken)).min(0.5);
            // An f64 product, then truncated: the threshold is a sampling bound, not a count.
            let t = (t as f64 * share) as u64;
            self.threshold.store(t, Ordering::Relaxed);
            for i in 0..self.slots.len() {
                let fp = self.slots[i][0].load(Ordering::Relaxed);
                if fp != 0 && self.hash(fp) > t {
                    self.evict(i, fp);
                }
            }
        } else if members < self.k / 2 && t < u64::MAX {
            self.threshold
                .store(t.saturating_mul(2).max(1), Ordering::Relaxed);
        }
    }
}

/// The evaluator's memory of one slot.
#[derive(Clone, Debug, Default)]
pub(crate) struct Member {
    fp: u64,
    seen_allowed: u64,
    seen_denied: u64,
    /// `(allowed, denied)` per sub-bucket of the current window, newest last.
    recent: Vec<(u64, u64)>,
    /// When this key last had a mostly-allowed sub-bucket (detector ns); `None`: never.
    last_conforming: Option<u64>,
    last_active: u64,
}

/// What the panel says about the current window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Breadth {
    /// Previously conforming members active in the window.
    pub(crate) eligible: usize,
    /// Of those, the ones mostly denied in the window.
    pub(crate) denied: usize,
    /// Members of the panel.
    pub(crate) members: usize,
    /// Previously conforming members active in the last sub-bucket alone.
    pub(crate) sub_eligible: usize,
    /// Of those, the ones mostly denied in it.
    pub(crate) sub_denied: usize,
}

impl Breadth {
    /// The breadth over the window.
    pub(crate) fn share(&self) -> f64 {
        ratio(self.denied, self.eligible)
    }

    /// The breadth over the last sub-bucket alone.
    pub(crate) fn sub_share(&self) -> f64 {
        ratio(self.sub_denied, self.sub_eligible)
    }
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Closes one sub-bucket: folds each slot's counter deltas into its member's history and
/// returns the breadth over the last `subs` sub-buckets. A member counts as previously
/// conforming for `memory` ns after its last mostly-allowed sub-bucket; members idle for an
/// hour leave the panel.
pub(crate) fn close_sub(
    panel: &Panel,
    members: &mut Vec<Member>,
    now: u64,
    subs: usize,
    memory: u64,
) -> Breadth {
    members.resize_with(panel.len(), Member::default);
    let mut b = Breadth::default();
    for (i, m) in members.iter_mut().enumerate() {
        let (fp, allowed, denied) = panel.read(i);
        // The slot's counters are never reset (a racing check of an old member could undo a
        // reset): what was last read of them stays with the slot across members, free or not,
        // so a new member's first delta holds its own checks, never an old member's.
        if fp == 0 {
            *m = Member {
                seen_allowed: allowed,
                seen_denied: denied,
                ..Member::default()
            };
            continue;
        }
        if m.fp != fp {
            *m = Member {
                fp,
                seen_allowed: m.seen_allowed,
                seen_denied: m.seen_denied,
                last_active: now,
                ..Member::default()
            };
        }
        let (da, dd) = (
            allowed.wrapping_sub(m.seen_allowed),
            denied.wrapping_sub(m.seen_denied),
        );
        (m.seen_allowed, m.seen_denied) = (allowed, denied);
        let previously_conforming = m
            .last_conforming
            .is_some_and(|t| now.saturating_sub(t) <= memory);
        m.recent.push((da, dd));
        if m.recent.len() > subs {
            m.recent.remove(0);
        }
        if da + dd > 0 {
            m.last_active = now;
            if da > 0 && dd <= da {
                m.last_conforming = Some(now);
            }
        } else if now.saturating_sub(m.last_active) > FORGET_IDLE {
            panel.evict(i, fp);
            *m = Member {
                seen_allowed: allowed,
                seen_denied: denied,
                ..Member::default()
            };
            continue;
        }
        b.members += 1;
        let (wa, wd) = m
            .recent
            .iter()
            .fold((0, 0), |(a, d), &(x, y)| (a + x, d + y));
        if previously_conforming && da + dd > 0 {
            b.sub_eligible += 1;
            b.sub_denied += usize::from(dd > da);
        }
        if previously_conforming && wa + wd > 0 {
            b.eligible += 1;
            if wd > wa {
                b.denied += 1;
            }
        }
    }
    panel.rebalance(b.members);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_is_a_fair_sample_in_every_placement_class() {
        // Keys fingerprinted as a keyed table does, split by the low bits that place them in
        // the table: under a threshold of 1/8 of the hash space, each class keeps ~1/8 of its
        // keys, so the panel neither favours nor avoids any region of the table.
        let fpr = crate::engine::fingerprint::Fingerprinter::new();
        let panel = Panel::new(8, 0x5eed);
        let t = u64::MAX / 8;
        let (mut kept, mut seen) = ([0u32; 16], [0u32; 16]);
        for key in 0..64_000u64 {
            let fp = fpr.fingerprint(&key);
            let class = (fp & 15) as usize;
            seen[class] += 1;
            kept[class] += u32::from(panel.hash(fp) <= t);
        }
        for (k, n) in kept.iter().zip(seen) {
            let share = f64::from(*k) / f64::from(n);
            assert!((0.10..0.15).contains(&share), "{k} of {n}: {share}");
        }
        // Sequential fingerprints (no table mixing at all) are spread as well.
        let low = (1..=8_000u64).filter(|fp| panel.hash(*fp) <= t).count();
        assert!((800..1_200).contains(&low), "{low} of 8000");
    }

    #[test]
    fn breadth_counts_previously_conforming_keys_now_denied() {
        let panel = Panel::new(64, 12345);
        let mut members = Vec::new();
        let sec = 1_000_000_000;
        for fp in 1..=40u64 {
            panel.record(fp, false);
        }
        let b = close_sub(&panel, &mut members, 10 * sec, 6, 3600 * sec);
        assert_eq!(b.eligible, 0, "nobody conformed *before* this window");
        for fp in 1..=40u64 {
            panel.record(fp, fp <= 10);
        }
        let b = close_sub(&panel, &mut members, 20 * sec, 1, 3600 * sec);
        // Direct-mapped: a key whose slot is taken stays out.
        let inside: Vec<u64> = (0..panel.len())
            .map(|i| panel.read(i).0)
            .filter(|&fp| fp != 0)
            .collect();
        assert!(inside.len() >= 30, "{} members", inside.len());
        assert_eq!(b.members, inside.len());
        assert_eq!(b.eligible, inside.len());
        assert_eq!(b.denied, inside.iter().filter(|&&fp| fp <= 10).count());
    }

    #[test]
    fn the_threshold_halves_to_keep_about_k_members() {
        let panel = Panel::new(16, 99);
        let mut members = Vec::new();
        for fp in 1..=1000u64 {
            panel.record(fp, false);
        }
        let first = close_sub(&panel, &mut members, 1, 6, u64::MAX).members;
        assert!(first > 16);
        for round in 2..20 {
            for fp in 1..=1000u64 {
                panel.record(fp, false);
            }
            close_sub(&panel, &mut members, round, 6, u64::MAX);
        }
        let last = close_sub(&panel, &mut members, 30, 6, u64::MAX).members;
        assert!((4..=32).contains(&last), "{last} members");
    }

    #[test]
    fn a_full_panel_comes_down_to_k_in_a_few_closes() {
        // Every key sampled at first (threshold u64::MAX). Unsaturated (10k keys in 2,048
        // slots, k = 1024): down to k at the first close. Saturated: a few closes, where one
        // halving per close would take log2(keys / k) of them. Never far below k.
        for (k, keys, closes) in [(1024usize, 10_000u64, 1), (16, 1_000, 3), (64, 50_000, 4)] {
            let panel = Panel::new(k, 7);
            let mut members = Vec::new();
            let mut now = 0;
            let mut counts = Vec::new();
            for _ in 0..=closes {
                for fp in 1..=keys {
                    panel.record(fp, false);
                }
                now += 1;
                counts.push(close_sub(&panel, &mut members, now, 6, u64::MAX).members);
            }
            assert!(counts[0] > k, "k = {k}: {counts:?}");
            let last = counts[closes];
            assert!(
                last <= k && last >= k / 4,
                "k = {k}, {keys} keys: {counts:?}"
            );
        }
    }

    /// Two fingerprints the panel places in one slot, and that slot.
    fn two_keys_in_one_slot(panel: &Panel) -> (u64, u64, usize) {
        let slot_of = |fp: u64| (panel.hash(fp) & panel.mask) as usize;
        let old = 1u64;
        let new = (2..)
            .find(|&fp| slot_of(fp) == slot_of(old))
            .unwrap_or_default();
        assert_ne!(new, 0);
        (old, new, slot_of(old))
    }

    #[test]
    fn a_reused_slot_passes_none_of_its_counts_to_a_new_member() {
        let panel = Panel::new(8, 3);
        let mut members = Vec::new();
        let (old, new, i) = two_keys_in_one_slot(&panel);
        for _ in 0..1_000 {
            panel.record(old, true);
        }
        close_sub(&panel, &mut members, 1, 6, u64::MAX);
        // More denials after the close, then the slot is freed and taken by another key
        // before the next close.
        for _ in 0..500 {
            panel.record(old, true);
        }
        panel.evict(i, old);
        for _ in 0..3 {
            panel.record(new, false);
        }
        close_sub(&panel, &mut members, 2, 6, u64::MAX);
        assert_eq!(members[i].fp, new);
        let (a, d) = members[i].recent.last().copied().unwrap_or_default();
        // The new member is charged with what the slot counted since the last close: its own
        // 3 allows, and the old member's 500 late denials at most — never the 1,000 before.
        assert_eq!(a, 3);
        assert!(d <= 500, "{d} denials charged to the new member");
        // At the next close it starts clean.
        for _ in 0..4 {
            panel.record(new, false);
        }
        close_sub(&panel, &mut members, 3, 6, u64::MAX);
        assert_eq!(members[i].recent.last().copied(), Some((4, 0)));
    }

    #[test]
    fn a_slot_freed_and_retaken_between_closes_starts_from_its_last_reading() {
        let panel = Panel::new(8, 3);
        let mut members = Vec::new();
        let (old, new, i) = two_keys_in_one_slot(&panel);
        for _ in 0..1_000 {
            panel.record(old, true);
        }
        panel.evict(i, old);
        // The evaluator sees the slot free: it notes the counts, charging them to nobody.
        close_sub(&panel, &mut members, 1, 6, u64::MAX);
        for _ in 0..2 {
            panel.record(new, false);
        }
        close_sub(&panel, &mut members, 2, 6, u64::MAX);
        assert_eq!(members[i].fp, new);
        assert_eq!(members[i].recent.last().copied(), Some((2, 0)));
    }
}
