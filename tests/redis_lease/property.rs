//! Both bounds over random bursty schedules across 2–3 instances, against an exact GCRA on the
//! same merged schedule: no window admits more than burst + rate·Δ + 1, and no prefix of the
//! run (of length D) admits fewer than the exact GCRA's − N · max_cells · (⌊D / lease_time⌋ + 1).
//!
//! A schedule repeats a random motif of bursts. Sizes, paces and gaps are drawn in the
//! quota's own terms (one cell, a lease, the burst, the checks that make a customer hot; T,
//! half and twice T; the time the bucket takes to drain), so that rates above and below the
//! quota, drained and saturated buckets all come up. Half the parts of a motif are
//! "episodes": one instance checks once at a drained bucket while another sends a burst at the
//! same instant, then the first checks `max_cells` times at about the rate — the pattern in
//! which cells held by one instance cost the others their admissions.

use std::time::Duration;

use proptest::prelude::*;

use super::bursty::{replay, Schedule};
use crate::redis_server::shared;

/// (quota, (burst, T µs, τ µs)).
const QUOTAS: [(&str, (u64, u64, u64)); 4] = [
    ("1000/s;burst=200", (200, 1_000, 200_000)),
    ("1000/s;burst=5", (5, 1_000, 5_000)),
    ("100/s;burst=1", (1, 10_000, 10_000)),
    ("300/s;burst=20", (20, 3_334, 66_680)),
];

/// One part of a motif: a burst (`episode` false) or an episode, from small choices and raw
/// random numbers that [`Shape::expand`] turns into µs and counts.
#[derive(Clone, Debug)]
struct Part {
    episode: bool,
    size: usize,
    pace: usize,
    gap: usize,
    to: Option<usize>,
    raw: (u64, u64, u64),
}

fn part() -> impl Strategy<Value = Part> {
    (
        any::<bool>(),
        0..6usize,
        0..5usize,
        0..5usize,
        prop::option::of(0..3usize),
        any::<(u64, u64, u64)>(),
    )
        .prop_map(|(episode, size, pace, gap, to, raw)| Part {
            episode,
            size,
            pace,
            gap,
            to,
            raw,
        })
}

/// The quota and lease in µs and counts, for turning parts into checks.
struct Shape {
    n: usize,
    cells: u64,
    burst: u64,
    t: u64,
    tau: u64,
    /// The checks that make a customer hot on one instance: max(2·max_cells, rate·lease_time).
    hot: u64,
}

impl Shape {
    /// Appends `size` checks `pace` µs apart, the first after `gap`, to instance `to` (or one
    /// after the other).
    fn burst(&self, s: &mut Schedule, size: u64, pace: u64, gap: u64, to: Option<usize>) {
        for k in 0..size.min(1_200) {
            let wait = if k == 0 { gap } else { pace };
            s.push((wait, to.unwrap_or(k as usize) % self.n));
        }
    }

    fn expand(&self, p: &Part, s: &mut Schedule) {
        let (t, cells, burst) = (self.t, self.cells, self.burst);
        let drain = self.tau + cells * t;
        let paces = [0, t / 2, t, 2 * t, p.raw.1 % 5_000];
        if p.episode {
            let holder = p.to.unwrap_or(0) % self.n;
            let other = (holder + 1 + p.gap % (self.n - 1)) % self.n;
            let sizes = [burst, burst + cells, 1 + p.raw.0 % (burst + cells)];
            self.burst(s, 1, 0, drain + p.raw.2 % (2 * t + 1), Some(holder));
            self.burst(s, sizes[p.size % 3], 0, 0, Some(other));
            self.burst(s, cells, paces[1 + p.pace % 3], t, Some(holder));
        } else {
            let sizes = [1, cells, burst, burst + cells, self.hot, 1 + p.raw.0 % 300];
            let gaps = [
                0,
                p.raw.2 % 2_000,
                drain,
                p.raw.2 % (drain + 1),
                60_000 + p.raw.2 % 340_000,
            ];
            self.burst(s, sizes[p.size], paces[p.pace], gaps[p.gap], p.to);
        }
    }
}

#[test]
fn both_bounds_hold_over_bursty_schedules() {
    // One server for every case, dropped (stopped) at the end.
    let Some(r) = shared("lease_property") else {
        return;
    };
    let config = ProptestConfig {
        cases: 40,
        ..ProptestConfig::default()
    };
    proptest!(config, |(
        q in 0..QUOTAS.len(),
        n in 2..=3usize,
        cells in 1u32..=20,
        lease_ms in prop_oneof![Just(1_000u64), Just(100), 2u64..50],
        motif in prop::collection::vec(part(), 1..4),
        // Per repetition of the motif: whether a burst that makes an instance hot comes
        // first (and to which instance, after which gap).
        repeats in prop::collection::vec((any::<bool>(), prop::option::of(0..3usize), any::<bool>()), 1..10),
    )| {
        let (text, (burst, t, tau)) = QUOTAS[q];
        let lease_us = lease_ms * 1_000;
        let cells_u = u64::from(cells);
        let shape = Shape { n, cells: cells_u, burst, t, tau, hot: (2 * cells_u).max(lease_us / t) };
        let mut schedule = Schedule::new();
        for &(hot_first, to, after_drain) in &repeats {
            if hot_first {
                let gap = if after_drain { tau } else { 0 };
                shape.burst(&mut schedule, shape.hot, 0, gap, to);
            }
            for p in &motif {
                shape.expand(p, &mut schedule);
            }
            if schedule.len() > 6_000 {
                break;
            }
        }
        let lease = (cells, Duration::from_micros(lease_us));
        let got = replay(&r, text, (burst, t, tau), n, lease, &schedule);
        prop_assert!(got.window_excess <= 1, "a window admitted burst + rate·Δ + {}: {:?}",
            got.window_excess, got);
        let bound = got.bound(n, cells, lease_us);
        prop_assert!(got.worst_under <= bound, "under-admitted {} > {}: {:?}",
            got.worst_under, bound, got);
    });
}
