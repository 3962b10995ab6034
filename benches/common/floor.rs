//! The floor: the least work any lock-free GCRA check must do, written by hand.
//!
//! One `quanta::Clock::raw()` + `delta_as_nanos` read, one atomic load of the TAT, one CAS loop
//! (no CAS on a denial). No quota lookup, no verdict beyond `Ok(ahead)` / `Err(retry_after)`,
//! no overflow handling, no clamp. Benches divide tollgate's time by this.
//!
//! The keyed floor adds the least a keyed check must add: a seeded multiplicative hash of the
//! key, a multiply-shift range reduction and a bounds-checked index into a dense
//! `Box<[AtomicU64]>` with one cell per key (8 bytes per key, no key stored, no probing;
//! colliding keys simply share a cell). It is a lower bound, not a correct limiter.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// quanta's clock, read the way tollgate and governor read it: raw counter, scaled to ns.
#[derive(Debug)]
pub struct FloorClock {
    clock: quanta::Clock,
    origin: u64,
}

impl FloorClock {
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }

    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// One GCRA step of weight `w` on `word`: `Ok(ahead)` if allowed (after a successful CAS),
/// `Err(retry_after)` if denied (nothing written).
#[inline]
pub fn step(word: &AtomicU64, now: u64, w: u64, tau: u64) -> Result<u64, u64> {
    // Relaxed: as in tollgate and governor, the TAT guards no other memory.
    let mut cur = word.load(Ordering::Relaxed);
    loop {
        let base = cur.max(now);
        let ahead = base - now + w;
        if ahead > tau {
            return Err(ahead - tau);
        }
        match word.compare_exchange_weak(cur, base + w, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(ahead),
            Err(actual) => cur = actual,
        }
    }
}

/// Keeps the TAT on its own cache lines, as tollgate's direct limiter does.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

/// The direct floor: one cell.
#[derive(Debug)]
pub struct Floor {
    clock: FloorClock,
    tat: Padded,
    /// Interval `T` in ns.
    t: u64,
    /// Tolerance τ = burst·T in ns.
    tau: u64,
    burst: u64,
}

impl Floor {
    /// A floor for `count` per `period_ns`, with `burst`.
    pub fn new(count: u64, period_ns: u64, burst: u64) -> Self {
        let t = period_ns.div_ceil(count);
        Self {
            clock: FloorClock::new(),
            tat: Padded::default(),
            t,
            tau: t * burst,
            burst,
        }
    }

    #[inline]
    pub fn check(&self) -> Result<u64, u64> {
        let now = self.clock.now();
        step(&self.tat.0, now, self.t, self.tau)
    }

    /// `cost` units at once; a cost above the burst can never conform (one compare).
    #[inline]
    pub fn check_n(&self, cost: u64) -> Result<u64, u64> {
        if cost > self.burst {
            return Err(u64::MAX);
        }
        let now = self.clock.now();
        step(&self.tat.0, now, cost * self.t, self.tau)
    }
}

/// The keyed floor: hash + index + the direct floor.
#[derive(Debug)]
pub struct KeyedFloor {
    clock: FloorClock,
    cells: Box<[AtomicU64]>,
    seed: u64,
    t: u64,
    tau: u64,
}

impl KeyedFloor {
    /// A keyed floor with one cell per key for `keys` keys.
    pub fn new(keys: usize, count: u64, period_ns: u64, burst: u64) -> Self {
        let t = period_ns.div_ceil(count);
        Self {
            clock: FloorClock::new(),
            cells: (0..keys.max(1)).map(|_| AtomicU64::new(0)).collect(),
            seed: RandomState::new().hash_one(0_u64),
            t,
            tau: t * burst,
        }
    }

    #[inline]
    fn index(&self, key: u64) -> usize {
        let h = (key ^ self.seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Multiply-shift range reduction: the result is below `cells.len()`.
        ((u128::from(h) * self.cells.len() as u128) >> 64) as usize
    }

    #[inline]
    pub fn check_key(&self, key: u64) -> Result<u64, u64> {
        let cell = &self.cells[self.index(key)];
        let now = self.clock.now();
        step(cell, now, self.t, self.tau)
    }
}
