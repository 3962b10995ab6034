//! A quota in the units the Redis script counts: microseconds, the resolution of the server's
//! `TIME`.
//!
//! The rules are the engine's GCRA with the microsecond as the time unit: a request
//! quota `C/P` has `T = ⌈P/C⌉` µs and `τ = burst·T`; a byte budget weighs `n` bytes
//! `⌈n·P/C⌉` µs and has `τ = ⌈burst·P/C⌉`. (`⌈⌈P/C⌉ ns / 1000⌉ = ⌈P/C⌉ µs`, so `T` is the
//! quota's own interval rounded up to whole µs: the effective rate never exceeds the written
//! one, and below 1000 requests per second it is under 0.1 % slower.)
//!
//! # Why every value is exact in the script
//!
//! Lua numbers are doubles, exact for integers up to 2^53. The script refuses a clock reading
//! above [`MAX_NOW_US`] (2^52 µs: the Unix time of the year 2112) and tolerances above
//! [`MAX_TAU_US`] (2^50 µs: 35.7 years; a larger burst is lowered to the largest that fits,
//! as the engine does at 2^62 ns), and every weight is at most τ. Then every TAT is at most
//! `now + τ + w < 2^52 + 2^51 < 2^53`, and every sum and difference the step takes stays
//! below that. The fill-level rescale multiplies two tolerances (up to 2^100): the script does
//! it bit by bit with the remainder kept reduced, so no intermediate exceeds 2^51
//! (`muldiv_ceil` in `gcra.lua`, tested at the maxima against u128 arithmetic).

use crate::engine::gcra::{Params, Per};
use crate::engine::quota::Quota;
use crate::engine::verdict::Allowed;

pub(crate) const MAX_TAU_MICROS: u64 = 1 << 50;
pub(crate) const MAX_NOW_MICROS: u64 = 1 << 52;

pub(crate) const MAX_TAU_US: u64 = MAX_TAU_MICROS;
pub(crate) const MAX_NOW_US: u64 = MAX_NOW_MICROS;

/// A quota's parameters in µs: the same [`Params`] shape as the engine's, counted in µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limit {
    pub(crate) p: Params,
}

impl Limit {
    /// The µs parameters of `q`.
    pub(crate) fn of(q: &Quota) -> Self {
        let ns = q.params();
        let per = match ns.per {
            Per::Request { t } => Per::Request {
                t: t.div_ceil(1000).max(1),
            },
            // num/den ns per byte is num/(1000·den) µs per byte; den < 2^98, so no overflow.
            Per::Byte { num, den } => Per::Byte {
                num,
                den: den.saturating_mul(1000),
            },
        };
        // The engine's burst is already within 2^62 ns, which is more than 2^50 µs: lowering
        // it to the µs cap gives the largest burst that fits both.
        let cap = match per {
            Per::Request { t } => MAX_TAU_US / t,
            Per::Byte { num, den } => u128::from(MAX_TAU_US)
                .checked_mul(den)
                .map_or(u64::MAX, |x| {
                    u64::try_from(x / u128::from(num.max(1))).unwrap_or(u64::MAX)
                }),
        };
        let burst = ns.burst.min(cap).max(1);
        let mut p = Params {
            per,
            tau: 0,
            burst,
            debt: 0,
        };
        // burst ≥ 1 and ≤ burst: `weight` answers.
        p.tau = p.weight(burst).unwrap_or(MAX_TAU_US).clamp(1, MAX_TAU_US);
        Self { p }
    }

    /// The weight in µs of a cost of `n`, or `None` above the burst.
    pub(crate) fn weight(&self, n: u64) -> Option<u64> {
        self.p.weight(n)
    }

    /// τ in µs.
    pub(crate) fn tau(&self) -> u64 {
        self.p.tau
    }

    /// The effective burst.
    pub(crate) fn burst(&self) -> u64 {
        self.p.burst
    }

    /// The allowance after a step that left the TAT `ahead` µs in front of now, in the ns the
    /// verdicts speak.
    pub(crate) fn allowed(&self, ahead: u64) -> Allowed {
        let slack = self.p.tau.saturating_sub(ahead);
        let reset = ahead.saturating_mul(1000);
        match self.p.per {
            Per::Request { t } => Allowed::new(slack.saturating_mul(1000), t * 1000, reset),
            Per::Byte { .. } => Allowed::new(self.p.units_in(slack), 0, reset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(s: &str) -> Limit {
        Limit::of(&s.parse().unwrap()) // test
    }

    #[test]
    fn request_quotas_count_in_whole_microseconds() {
        let l = limit("100/s;burst=5");
        assert_eq!(
            (l.p.per, l.tau(), l.burst()),
            (Per::Request { t: 10_000 }, 50_000, 5)
        );
        // 3/s: T = 333 333.3… µs, rounded up.
        assert_eq!(limit("3/s").p.per, Per::Request { t: 333_334 });
        // Faster than one per µs: T = 1 µs (the rate falls to 10^6/s).
        assert_eq!(limit("1000000000/s").p.per, Per::Request { t: 1 });
        // 1/d has T = 8.64·10^10 µs; 2^50 µs hold 13 031 of them.
        let slow = limit("1/d;burst=1000000");
        assert_eq!(slow.burst(), (1u64 << 50) / 86_400_000_000);
        assert!(slow.tau() <= MAX_TAU_US);
    }

    #[test]
    fn byte_budgets_round_each_chunk_up() {
        // 2 Gbit/s: 4 ns per byte = 1/250 µs per byte.
        let l = limit("2Gbit/s;burst=64MiB");
        assert_eq!(l.weight(250), Some(1));
        assert_eq!(l.weight(251), Some(2));
        assert_eq!(l.tau(), (64u64 << 20).div_ceil(250));
        assert_eq!(l.weight((64 << 20) + 1), None);
        let a = l.allowed(l.tau() - 1);
        assert_eq!(a.remaining(), 250);
    }
}
