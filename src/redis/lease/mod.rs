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
//! that (a lease's cells bunched at its end), so it lapses instead. There is no refund call: by
//! the time a cell lapses, later cells (other instances') are usually charged behind it, and
//! lowering the TAT would let them conform early; and a refund would not touch the larger
//! cost below, which comes from cells that are spent.
//!
//! # Under-admission, and runs
//!
//! A leased cell is charged at the grant and admitted later, or never (it lapses). Lapses are
//! not the only cost: while one instance holds cells that conform now, another instance's
//! check meets a full bucket and is denied where an exact GCRA on the merged checks would
//! have admitted it — and later the holder's check too. Held cells cost admissions with no
//! cell lapsing (`tests/redis_lease/bursty.rs`, "episodes": 342 under-admitted in 5.7 s on
//! two instances with `lease(20)`, none lapsed, before the rule below). Both costs are
//! bounded by *runs*:
//!
//! * An instance asks for a lease only when it holds no cell of the customer, one call at a
//!   time, for at most `max_cells`: it never holds more than `max_cells` of them.
//! * A *busy period* is a stretch in which every call finds the customer's TAT at or ahead of
//!   the clock (the TAT only rises, so the charged TATs are contiguous in it). A run is a
//!   sequence of one instance's leases of one customer in one busy period: each lease after the
//!   first asks the script to continue from the TAT the previous one left, `e`, and is granted
//!   only if `now ≤ e ≤ tat` (`gcra.lua`); otherwise the call is a plain check and the run
//!   ends. A lapse ends it too, and so does a lease call that went out and got no reply (the
//!   deadline, a fault: Redis may have reserved cells this instance never holds, which count
//!   as held until their TATs). A new run begins at most once per horizon on each instance.
//!
//! **Bound.** With one quota, one clock, a deadline shorter than the horizon (so one lease
//! call at a time) and the customer's slot kept in the table: over any stretch of length D
//! from a fresh start, and every prefix of it, N instances admit at least what the exact GCRA
//! admits − `max_cells` · (runs begun) ≥ exact − N · `max_cells` · (⌊D / horizon⌋ + 1).
//!
//! **Proof.** Call a check the exact GCRA admits and the fleet denies a *miss*. (1) A miss at
//! `s` finds the TAT `R > s + tau − w`: a plain or lease call denied, a lease whose first cell
//! is not due, a held cell not yet due (its θ > `s + tau`), or the deny cache (which holds a
//! lower bound of `R`). (2) In a busy period begun at `b`, by a miss at `s` the fleet has
//! charged `(R − b)/w > (s − b + tau)/w − 1` cells, and the exact GCRA has admitted at most
//! `(s − b + tau)/w` checks in `[b, s]` (each raises its TAT by at least `w`, none past its
//! instant + `tau`): as integers, no more than the fleet charged. (3) So the under-admission
//! gathered in a busy period up to its last miss is at most the cells charged by then and not
//! admitted — lapsed, or held at that instant — and after its last miss it only shrinks.
//! (4) The cells of one run counted in (3) were all held at one instant: the period's last
//! miss, or the run's first lapse or lost call (counting the cells that lapse then, or that
//! the lost call reserved, as held), whichever came first — no lease follows either in a run.
//! So there are at most `max_cells` of them. Summing over busy periods and runs
//! gives the bound. ∎
//!
//! The price is calls when a hot customer's bucket drains between its bursts: each burst is a
//! new busy period, and an instance leases in one of them per horizon (measured in the
//! README).
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
    /// This instance's run of leases of the customer.
    run: Run,
}

/// A run: leases of one customer taken back to back by this instance, with no cell lapsed and
/// the customer's TAT never behind the clock in between, so that all its cells sit in one
/// stretch of TATs. What a run can cost in under-admission is at most `max_cells`, and a new
/// run begins at most once per horizon (see "Under-admission" above).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Run {
    /// When the last run began (local µs), if one ever did.
    began: Option<u64>,
    /// While the run goes on: the TAT its last lease left, in the script's time base.
    after: Option<u64>,
}

/// A lease call to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ask {
    /// At most this many cells (the instance holds none of the customer's when it asks).
    pub(crate) cells: u32,
    /// Continue the run whose last lease left this TAT, or (`None`) begin a new one.
    pub(crate) after: Option<u64>,
    /// The quota generation the call is sent under.
    generation: u64,
    /// When it was sent (local µs).
    sent: u64,
}

/// What a lease says about a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spend {
    /// Spent one cell; the TAT is `ahead` µs in front of now (for remaining and reset).
    Allow { ahead: u64, lapsed: u64 },
    /// The next cell conforms `retry` µs from now.
    Deny { retry: u64, lapsed: u64 },
    /// No cell to spend: ask Redis, for a lease if `ask` is set.
    Call { ask: Option<Ask>, lapsed: u64 },
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
                    ask: None,
                    lapsed: lease.left(),
                }
            };
            let l = match out {
                Spend::Allow { lapsed: l, .. }
                | Spend::Deny { lapsed: l, .. }
                | Spend::Call { lapsed: l, .. } => l,
            };
            if l > 0 {
                // A lapse ends the run.
                slot.run.after = None;
            }
            lapsed += l;
            match out {
                Spend::Allow { ahead, .. } => return Spend::Allow { ahead, lapsed },
                Spend::Deny { retry, .. } => return Spend::Deny { retry, lapsed },
                Spend::Call { .. } => {
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
        // A run goes on while it can; a new one waits for one horizon after the last began.
        let after = match slot.run {
            Run { after: Some(e), .. } => Some(Some(e)),
            Run {
                began: Some(b),
                after: None,
            } if t.saturating_sub(b) < self.horizon => None,
            Run { .. } => Some(None),
        };
        let ask = after.filter(|_| hot && !in_flight).map(|after| Ask {
            cells: self.max_cells,
            after,
            generation,
            sent: t,
        });
        if ask.is_some() {
            slot.pending = Some(t);
        }
        Spend::Call { ask, lapsed }
    }

    /// The lease call `ask` for `key` was answered by a plain check: the script found the
    /// customer's TAT behind the clock since the run's last lease (or reserved a horizon
    /// ahead), so the run is over.
    pub(crate) fn refused(&self, key: &[u8], ask: &Ask) {
        let mut set = self.set(key).lock();
        if let Some(slot) = set.iter_mut().flatten().find(|s| &*s.key == key) {
            if ask.after.is_some() {
                slot.run.after = None;
            }
        }
    }

    /// The lease call for `key` has been answered, or will not be (`lost`: it went out and no
    /// reply was read, so Redis may have reserved cells this instance never holds, and the run
    /// ends): the next check may send one.
    pub(crate) fn settle(&self, key: &[u8], lost: bool) {
        let mut set = self.set(key).lock();
        if let Some(slot) = set.iter_mut().flatten().find(|s| &*s.key == key) {
            slot.pending = None;
            if lost {
                slot.run.after = None;
            }
        }
    }

    /// Drops this instance's leases of `key` and ends its run (a refund or a reset lowers the
    /// customer's TAT, so the run's cells no longer sit in one rising stretch): the unspent
    /// cells, which lapse (charged in Redis, never admitted).
    pub(crate) fn forget(&self, key: &[u8]) -> u64 {
        let mut set = self.set(key).lock();
        let Some(slot) = set.iter_mut().flatten().find(|s| &*s.key == key) else {
            return 0;
        };
        slot.run.after = None;
        slot.leases.drain(..).map(|l| l.left()).sum()
    }

    /// Stores a lease granted for `key` in answer to `ask`, and spends its first cell if it
    /// conformed at the script's `now` — decided there, as a plain check is, so the round trip
    /// cannot make it lapse. Leases queue in the order of their cells (Redis serialises the
    /// grants, so one lease's cells all follow another's), at most [`QUEUED`] of them
    /// (one lease call at a time, sent when no cell is left, keeps it to one). `lapsed` counts
    /// the cells of a lease dropped beyond that, of an evicted slot, or of a lease asked
    /// under a quota that changed while the call was out: its first cell answers the check
    /// that asked, as a plain call sent before the change would, and the others lapse.
    pub(crate) fn grant(&self, key: &[u8], mut lease: Lease, t: u64, ask: &Ask) -> (Spend, u64) {
        let generation = self.generation.load(Ordering::Relaxed);
        let out = lease.spend_first();
        let mut set = self.set(key).lock();
        let (slot, mut lapsed) = find_or_take(&mut set, key, t);
        if ask.generation != generation {
            slot.run.after = None;
            return (out, lapsed + lease.left());
        }
        lease.generation = generation;
        if ask.after.is_none() {
            slot.run.began = Some(ask.sent);
        }
        slot.run.after = Some(lease.reserved());
        let at = slot.leases.partition_point(|l| l.first <= lease.first);
        slot.leases.insert(at, lease);
        if slot.leases.len() > QUEUED {
            // The latest cells go: the earlier ones fall due first.
            lapsed += slot.leases.pop().map_or(0, |l| l.left());
            slot.run.after = None;
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
            run: Run::default(),
        }
    }
}

mod cells;
mod settings;

use cells::to_i64;
pub(crate) use cells::Lease;

#[cfg(test)]
mod tests;
