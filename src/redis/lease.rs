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
use core::time::Duration;
use std::collections::hash_map::RandomState;

use super::builder::SharedRateLimiterBuilder;
use super::error::BackendError;
use super::limit::MAX_TAU_US;
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

/// Cells granted in one call, placed on the local clock (µs, signed: the mapping from the
/// server's clock may move them below 0 on a young monotonic clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    generation: u64,
    w: i64,
    /// Cell j is spendable from `max(floor, first + j·w)`.
    floor: i64,
    first: i64,
    /// Cell j lapses after `lapse + j·w` (its TAT).
    lapse: i64,
    /// The TAT in Redis right after the grant, on the spend base: remaining and reset-after.
    end: i64,
    cells: u64,
    next: u64,
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

impl Lease {
    /// A grant of `cells` from `tat0` at the script's `now` (weight `w`, tolerance `tau`),
    /// placed on the local clock by the readings before (`sent`) and after (`got`) the call,
    /// or on the script's own `now` with a client clock (`sent = got = now`).
    pub(crate) fn new(
        now: u64,
        tat0: u64,
        cells: u64,
        w: u64,
        tau: u64,
        sent: u64,
        got: u64,
    ) -> Self {
        let (now, tat0, w, tau) = (to_i64(now), to_i64(tat0), to_i64(w), to_i64(tau));
        let spend_shift = to_i64(got) - now;
        let lapse_shift = to_i64(sent) - now;
        let cells_i = to_i64(cells);
        Self {
            generation: 0,
            w,
            floor: now + spend_shift,
            first: tat0 + w - tau + spend_shift,
            lapse: tat0 + w + lapse_shift,
            end: tat0 + cells_i * w + spend_shift,
            cells,
            next: 0,
        }
    }

    /// Cells not spent yet.
    fn left(&self) -> u64 {
        self.cells - self.next
    }

    fn spend_first(&mut self) -> Spend {
        if self.first > self.floor {
            return Spend::Deny {
                retry: (self.first - self.floor).unsigned_abs(),
                lapsed: 0,
            };
        }
        self.next = 1;
        Spend::Allow {
            ahead: (self.end - self.floor).max(self.w).unsigned_abs(),
            lapsed: 0,
        }
    }

    fn spend(&mut self, t: i64) -> Spend {
        let mut lapsed = 0;
        while self.next < self.cells && self.lapse + to_i64(self.next) * self.w < t {
            self.next += 1;
            lapsed += 1;
        }
        if self.next == self.cells {
            return Spend::Call { hot: true, lapsed };
        }
        let c = self.floor.max(self.first + to_i64(self.next) * self.w);
        if c > t {
            return Spend::Deny {
                retry: (c - t).unsigned_abs(),
                lapsed,
            };
        }
        self.next += 1;
        Spend::Allow {
            ahead: (self.end - t).max(self.w).unsigned_abs(),
            lapsed,
        }
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

/// µs values stay below 2^63 (the script's range is 2^53; a local monotonic clock in µs
/// reaches 2^63 after 292 000 years).
fn to_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

/// The lease settings.
impl SharedRateLimiterBuilder {
    /// Leases for hot customers (off by default): a customer that made at least
    /// `max(2 · max_cells, rate · lease_time)` checks on this instance within one
    /// [`lease_time`](Self::lease_time) (or the one before) gets up to `max_cells` of its next
    /// cells reserved in one call — its TAT in Redis advanced by their weight, so they are
    /// charged up front — and this instance spends them with no round trip, each no earlier
    /// than the instant a plain check would allow it and no later than its TAT. An unspent
    /// cell lapses then; there is no refund call (later cells, other instances', are charged
    /// behind it: lowering the TAT would let them conform early). A cold customer keeps one
    /// call per check with exact verdicts.
    ///
    /// * **Grant.** The cells that conform within `lease_time` of the call, at most
    ///   `max_cells`: a customer at or above its rate gets `min(max_cells, rate · lease_time)`
    ///   cells per call. None conforms that soon: a plain denial, exact retry-after.
    /// * **Bounds.** In every window of length Δ the customer's admissions over all instances
    ///   stay ≤ burst + rate·Δ + 1, as without leases. The cost is under-admission: cells one
    ///   instance reserved and no check there spent before their TATs. Hotness asks for the
    ///   customer's rate on this instance because a lease's cells fall due at that rate; an
    ///   instance with fewer checks would let most of them lapse.
    /// * **Answers.** A check waiting for a reserved cell is denied with `retry_after` exact on
    ///   that cell's schedule, although another instance may hold earlier cells; `remaining`
    ///   counts every leased cell as spent.
    /// * **Scope.** One-unit checks of a limiter with one limit: a [`limit`](Self::limit)
    ///   added turns leases off (the cells of two limits do not fall due together), a cost
    ///   other than 1 and [`peek_key`](crate::SharedRateLimiter::peek_key) make a plain call, and
    ///   [`set_quota`](crate::SharedRateLimiter::set_quota) ends every lease of this instance. A
    ///   lease call is a normal call for the deadline, the breaker, the failure policy and
    ///   the cluster routing.
    /// * **Fleet.** Every instance sharing a prefix must use the same `lease_time`: the script
    ///   lets a TAT run `lease_time` past `now + τ` only for a caller that says so, and one
    ///   with a shorter horizon cuts the reservation back (letting its cells be admitted
    ///   twice). A quota change must reach every instance: one that has not heard of it
    ///   spends its lease on.
    ///
    /// `max_cells` of 0 or above 2^20 fails at [`build`](Self::build).
    ///
    /// ```
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("1000/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .lease(20)
    ///     .build()?;
    /// assert_eq!(lim.stats().leases_taken, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease(mut self, max_cells: u32) -> Self {
        self.lease = Some(max_cells);
        self
    }

    /// The lease horizon (default 1 s): a lease reserves only cells that conform within it,
    /// and hotness is counted per `lease_time`. One second lets a customer of 20 requests per
    /// second or more fill a lease of 20, keeps cells from being reserved more than a second
    /// ahead of their use, and makes hotness a count over a second (the customer's rate seen
    /// on this instance). Every instance sharing a prefix must use the same value (see
    /// [`lease`](Self::lease)). Zero, or above 2^50 µs, fails at [`build`](Self::build).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tollgate::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("1000/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .lease(50)
    ///     .lease_time(Duration::from_millis(200))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// The lease table, if leases are on and can apply (one limit).
    pub(super) fn leases(&self) -> Result<Option<Leases>, BackendError> {
        let Some(max_cells) = self.lease else {
            return Ok(None);
        };
        if !(1..=MAX_LEASE_CELLS).contains(&max_cells) {
            return Err(BackendError::InvalidSetting(
                "a lease must hold 1 to 2^20 cells",
            ));
        }
        let horizon = u64::try_from(self.lease_time.as_micros()).unwrap_or(u64::MAX);
        if !(1..=MAX_TAU_US).contains(&horizon) {
            return Err(BackendError::InvalidSetting(
                "the lease time must be 1 µs to 2^50 µs",
            ));
        }
        Ok((self.limits.len() == 1).then(|| Leases::new(max_cells, horizon)))
    }
}

/// The most cells one lease may hold (the script's bound).
const MAX_LEASE_CELLS: u32 = 1 << 20;

#[cfg(test)]
mod tests;
