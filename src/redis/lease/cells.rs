//! Cells granted in one call and their spending: each no earlier than it conforms, no later
//! than its TAT.

use super::Spend;

/// Cells granted in one call, placed on the local clock (µs, signed: the mapping from the
/// server's clock may move them below 0 on a young monotonic clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    pub(super) generation: u64,
    w: i64,
    /// Cell j is spendable from `max(floor, first + j·w)`.
    floor: i64,
    pub(super) first: i64,
    /// Cell j lapses after `lapse + j·w` (its TAT).
    lapse: i64,
    /// The TAT in Redis right after the grant, on the spend base: remaining and reset-after.
    end: i64,
    /// The same TAT in the script's time base: where the next lease of a run must start.
    reserved: u64,
    cells: u64,
    next: u64,
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
        let reserved = tat0.saturating_add(cells.saturating_mul(w));
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
            reserved,
            cells,
            next: 0,
        }
    }

    /// The TAT in Redis right after the grant, in the script's time base.
    pub(super) fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Cells not spent yet.
    pub(super) fn left(&self) -> u64 {
        self.cells - self.next
    }

    pub(super) fn spend_first(&mut self) -> Spend {
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

    pub(super) fn spend(&mut self, t: i64) -> Spend {
        let mut lapsed = 0;
        while self.next < self.cells && self.lapse + to_i64(self.next) * self.w < t {
            self.next += 1;
            lapsed += 1;
        }
        if self.next == self.cells {
            return Spend::Call { ask: None, lapsed };
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

/// µs values stay below 2^63 (the script's range is 2^53; a local monotonic clock in µs
/// reaches 2^63 after 292 000 years).
pub(super) fn to_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}
