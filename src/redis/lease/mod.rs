//! Leases for hot customers: one script call reserves a customer's next cells on its GCRA
//! schedule (`gcra.lua`, code 4), and this instance spends them locally, each no earlier than
//! the instant it conforms and no later than its TAT.
//!
//! Vocabulary as in `gcra.lua`, in µs: `w` the weight of one unit (T), `tau` the tolerance,
//! `tat0 = max(tat, now)` at the grant. Cell j conforms at `c_j = max(now, tat0 + (j+1)·w −
//! tau)` and its TAT is `θ_j = tat0 + (j+1)·w`.
//!
//! # Why each cell lapses at its TAT
//!
//! A plain check admitted at `s` leaves a TAT `θ` with `s + w ≤ θ ≤ s + tau`. Spending a leased
//! cell at `s ∈ [c_j, θ_j]` keeps `θ_j − tau ≤ s ≤ θ_j`, so in a window `[a, b]` every admitted
//! cell, leased or not, has its θ in `[a, b + tau]`; θs are `w` apart, so at most
//! `(b − a + tau)/w + 1 = rate·Δ + burst + 1` of them. A cell spent after its θ would break
//! that (a lease's cells bunched at its end), so it lapses instead; there is no refund call —
//! by the time a cell lapses, later cells (other instances') are charged behind it, and
//! lowering the TAT would let them conform early. The cost is under-admission: at most the
//! cells of this instance's lease that no check came for before their TATs.
//!
//! # Time bases
//!
//! With a client clock the script's `now` is this instance's clock: no mapping. On the
//! server's `TIME` the lease is placed on the local clock with the reading taken before the
//! call (`sent`) and after the reply (`got`): the server read `now` somewhere in between, so
//! a cell is spendable from `c_j − now + got` (never early) and lapses at `θ_j − now + sent`
//! (never late). Each cell's window shrinks by the round trip; clock drift over one lease
//! (`lease_time + τ`) is not corrected.

use core::hash::BuildHasher;
use std::collections::hash_map::RandomState;

use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Mutex;

/// Slots per set: a key maps to one set and takes any slot in it.
const WAYS: usize = 4;
/// Sets in the table: 1024 slots, whatever the traffic.
const SETS: usize = 256;
/// Leases one customer may hold here at once (taken by concurrent checks).
const QUEUED: usize = 4;

/// The lease settings and the bounded table of customers this instance has seen lately.
#[derive(Debug)]
pub(crate) struct Leases {
    pub(crate) max_cells: u32,
    /// The lease horizon, µs: cells are granted while `c_j ≤ now + horizon`.
    pub(crate) horizon: u64,
    /// Bumped by every quota change: a lease of an older generation is over.
    generation: AtomicU64,
    hasher: RandomState,
    sets: Vec<Mutex<[Option<Slot>; WAYS]>>,
}

/// One customer: its check count in the current window, and its lease if it holds one.
#[derive(Debug)]
struct Slot {
    key: Box<[u8]>,
    /// The last check, local µs (the least recent non-hot slot of a set is replaced first).
    seen: u64,
    window: u64,
    count: u64,
    /// Proved hot: ≥ 2·max_cells checks in one window (this one or the one before).
    hot: bool,
    /// Its leases, in the order of their cells (at most [`QUEUED`]).
    leases: Vec<Lease>,
    /// When the lease call in flight was sent (local µs), if one is.
    pending: Option<u64>,
}

/// What a lease says about a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spend {
    /// Spent one cell; the TAT is `ahead` µs in front of now (for remaining and reset).
    Allow { ahead: u64, lapsed: u64 },
    /// The next cell conforms `retry` µs from now.
    Deny { retry: u64, lapsed: u64 },
    /// No cell to spend: ask Redis, for a lease if `hot`.
    Call { hot: bool, lapsed: u64 },
}

impl Leases {
    pub(crate) fn new(max_cells: u32, horizon: u64) -> Self {
        Self {
            max_cells,
            horizon,
            generation: AtomicU64::new(0),
            hasher: RandomState::new(),
            sets: (0..SETS)
                .map(|_| Mutex::new([None, None, None, None]))
                .collect(),
        }
    }

    /// Ends every lease (a quota changed). Relaxed: a check that read the old generation
    /// races the change as it would race a plain call sent just before it.
    pub(crate) fn end_all(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a check of `key` at local `t` and spends a leased cell if one is due; `w` is
    /// the weight of one unit (T, µs).
    ///
    /// Hot means at least `max(2·max_cells, rate·horizon)` checks here within one horizon:
    /// a lease's cells fall due at the customer's rate (their TATs are `w` apart), so an
    /// instance that sees its checks slower than the rate would let most of them lapse —
    /// charged, never admitted — where one call per check admits them all.
    pub(crate) fn spend(&self, key: &[u8], t: u64, w: u64) -> Spend {
        let generation = self.generation.load(Ordering::Relaxed);
        let threshold = (2 * u64::from(self.max_cells)).max(self.horizon / w.max(1));
        let mut set = self.set(key).lock();
        let (slot, evicted) = find_or_take(&mut set, key, t);
        if t.saturating_sub(slot.window) >= self.horizon {
            slot.hot = slot.count >= threshold && t - slot.window < 2 * self.horizon;
            slot.window = t;
            slot.count = 0;
        }
        slot.seen = t;
        slot.count += 1;
        slot.hot |= slot.count >= threshold;
        let hot = slot.hot;
        let mut lapsed = evicted;
        while let Some(lease) = slot.leases.first_mut() {
            let out = if lease.generation == generation {
                lease.spend(to_i64(t))
            } else {
                Spend::Call {
                    hot,
                    lapsed: lease.left(),
                }
            };
            match out {
                Spend::Allow { ahead, lapsed: l } => {
                    return Spend::Allow {
                        ahead,
                        lapsed: lapsed + l,
                    }
                }
                Spend::Deny { retry, lapsed: l } => {
                    return Spend::Deny {
                        retry,
                        lapsed: lapsed + l,
                    }
                }
                Spend::Call { lapsed: l, .. } => {
                    lapsed += l;
                    slot.leases.remove(0);
                }
            }
        }
        // One lease call per customer at a time: concurrent checks that found no cell would
        // each reserve a lease, most of them beyond what this instance spends before the
        // cells lapse. The others make a plain call (a denial then fills the deny cache). A
        // call never settled (a panic, a dropped future) stops counting after one horizon.
        let in_flight = slot
            .pending
            .is_some_and(|p| t.saturating_sub(p) < self.horizon);
        let lease = hot && !in_flight;
        if lease {
            slot.pending = Some(t);
        }
        Spend::Call { hot: lease, lapsed }
    }

    /// The lease call for `key` has been answered (or failed): the next check may send one.
    pub(crate) fn settle(&self, key: &[u8]) {
        let mut set = self.set(key).lock();
        if let Some(slot) = set.iter_mut().flatten().find(|s| &*s.key == key) {
            slot.pending = None;
        }
    }

    /// Stores a lease granted for `key` and spends its first cell if it conformed at the
    /// script's `now` — decided there, as a plain check is, so the round trip cannot make it
    /// lapse. Concurrent checks of one key may each take a lease: they queue, in the order of
    /// their cells (Redis serialises the grants, so one lease's cells all follow another's),
    /// at most [`QUEUED`] of them. `lapsed` counts the cells of a lease dropped beyond that or
    /// of an evicted slot.
    pub(crate) fn grant(&self, key: &[u8], mut lease: Lease, t: u64) -> (Spend, u64) {
        lease.generation = self.generation.load(Ordering::Relaxed);
        let out = lease.spend_first();
        let mut set = self.set(key).lock();
        let (slot, mut lapsed) = find_or_take(&mut set, key, t);
        let at = slot.leases.partition_point(|l| l.first <= lease.first);
        slot.leases.insert(at, lease);
        if slot.leases.len() > QUEUED {
            // The latest cells go: the earlier ones fall due first.
            lapsed += slot.leases.pop().map_or(0, |l| l.left());
        }
        (out, lapsed)
    }

    fn set(&self, key: &[u8]) -> &Mutex<[Option<Slot>; WAYS]> {
        // The hash is keyed per process: an attacker cannot aim keys at one set.
        let h = self.hasher.hash_one(key);
        &self.sets[(h % SETS as u64) as usize]
    }
}

/// The slot of `key` in its set, or a fresh one in place of an empty slot, else the least
/// recently seen slot that is not hot, else the least recently seen; with the cells of a
/// lease the replaced slot held (they lapse).
fn find_or_take<'a>(set: &'a mut [Option<Slot>; WAYS], key: &[u8], t: u64) -> (&'a mut Slot, u64) {
    let found = set
        .iter()
        .position(|s| s.as_ref().is_some_and(|s| &*s.key == key));
    let i = found.unwrap_or_else(|| {
        set.iter()
            .enumerate()
            .min_by_key(|(_, s)| s.as_ref().map(|s| (s.hot, s.seen)))
            .map_or(0, |(i, _)| i)
    });
    let mut lapsed = 0;
    if found.is_none() {
        lapsed = set[i]
            .as_ref()
            .map_or(0, |s| s.leases.iter().map(Lease::left).sum());
        set[i] = Some(Slot::new(key, t));
    }
    (set[i].get_or_insert_with(|| Slot::new(key, t)), lapsed)
}

impl Slot {
    fn new(key: &[u8], t: u64) -> Self {
        Self {
            key: key.into(),
            seen: t,
            window: t,
            count: 0,
            hot: false,
            leases: Vec::new(),
            pending: None,
        }
    }
}

mod cells;
mod settings;

use cells::to_i64;
pub(crate) use cells::Lease;

#[cfg(test)]
mod tests;
