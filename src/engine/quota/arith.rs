//! The exact arithmetic of a quota: its GCRA parameters from its parts, and `==` and `Hash`
//! by meaning (the kind, the reduced rate and the effective burst).

use core::hash::{Hash, Hasher};

use super::units::Period;
use super::{Quota, WorkUnit};
use crate::engine::gcra::{Params, Per, MAX_TAU};

impl Quota {
    /// Builds a quota from its parts. `burst` is in requests or bytes; `None` is the default.
    ///
    /// Never fails, but a byte budget may come out with a burst of 0 (`"3bit/s"`), which the
    /// parser rejects; `with_burst` never produces one. A request count above the period in
    /// ns gets `T = 1`; the parser rejects it and the constructors saturate first.
    pub(super) fn from_parts(
        count: u64,
        work: Option<WorkUnit>,
        time: Period,
        burst: Option<u128>,
    ) -> Quota {
        let period = u128::from(time.nanos());
        // ns per request is P/C; ns per byte is P·8 / (C·bits). P·8 ≤ 2^62 (the period is
        // at most 2^59 ns) and C·bits < 2^97, so both fit u128, and the reduced numerator
        // fits u64.
        let (num, den) = match work {
            None => (period, u128::from(count)),
            Some(unit) => (period * 8, u128::from(count) * u128::from(unit.bits())),
        };
        let g = gcd(num, den.max(1));
        let (ns_num, ns_den) = (saturating_u64(num / g), (den / g).max(1));
        let per = match work {
            None => Per::Request {
                t: saturating_u64(div_ceil(num, den.max(1))).max(1),
            },
            Some(_) => Per::Byte {
                num: ns_num,
                den: ns_den,
            },
        };
        let default = match work {
            None => u128::from(count),
            Some(unit) => unit.floor_bytes(count),
        };
        let burst = clamp_burst(per, burst.unwrap_or(default));
        let tau = saturating_u64(weight(per, u128::from(burst)));
        Quota {
            count,
            work,
            time,
            ns_num,
            ns_den,
            params: Params {
                per,
                tau,
                burst,
                debt: 0,
            },
        }
    }

    /// The effective burst the quota would have without an explicit burst.
    pub(super) fn default_burst(&self) -> u64 {
        let default = match self.work {
            None => u128::from(self.count),
            Some(unit) => unit.floor_bytes(self.count),
        };
        clamp_burst(self.params.per, default)
    }
}

/// The weight in ns of `n` requests or bytes: `n·T`, or `⌈n·num/den⌉`. Callers keep `n` at
/// most `u64::MAX`, so neither product overflows (`num < 2^50`, `T < 2^47`).
pub(super) fn weight(per: Per, n: u128) -> u128 {
    match per {
        Per::Request { t } => n * u128::from(t),
        Per::Byte { num, den } => div_ceil(n * u128::from(num), den),
    }
}

/// The largest burst, not above `requested` nor `u64::MAX`, whose weight is at most
/// [`MAX_TAU`].
fn clamp_burst(per: Per, requested: u128) -> u64 {
    let cap = match per {
        Per::Request { t } => u128::from(MAX_TAU / t.max(1)),
        // ⌈b·num/den⌉ ≤ MAX_TAU  ⟺  b·num ≤ MAX_TAU·den; when that product overflows, every
        // u64 burst fits.
        Per::Byte { num, den } => u128::from(MAX_TAU)
            .checked_mul(den)
            .map_or(u128::MAX, |limit| limit / u128::from(num.max(1))),
    };
    saturating_u64(requested.min(cap))
}

pub(super) fn saturating_u64(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `⌈a/b⌉` for `b > 0`.
fn div_ceil(a: u128, b: u128) -> u128 {
    a / b + u128::from(a % b != 0)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl PartialEq for Quota {
    fn eq(&self, other: &Quota) -> bool {
        self.is_bytes() == other.is_bytes()
            && self.ns_num == other.ns_num
            && self.ns_den == other.ns_den
            && self.params.burst == other.params.burst
    }
}

impl Eq for Quota {}

impl Hash for Quota {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.is_bytes().hash(state);
        self.ns_num.hash(state);
        self.ns_den.hash(state);
        self.params.burst.hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quota {
        match s.parse() {
            Ok(q) => q,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn arithmetic_helpers() {
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(7, 0), 7);
        assert_eq!(div_ceil(10, 3), 4);
        assert_eq!(div_ceil(9, 3), 3);
        assert_eq!(saturating_u64(u128::MAX), u64::MAX);
    }

    #[test]
    fn request_params() {
        let p = q("100/s;burst=250").params();
        assert_eq!(p.per, Per::Request { t: 10_000_000 });
        assert_eq!(p.tau, 2_500_000_000);
        assert_eq!(p.burst, 250);
        assert_eq!(q("1000000/ms").params().per, Per::Request { t: 1 });
    }

    #[test]
    fn byte_params() {
        // 2 Gbit/s = 2.5e8 B/s: 4 ns per byte
        let p = q("2Gbit/s").params();
        assert_eq!(p.per, Per::Byte { num: 4, den: 1 });
        assert_eq!(p.burst, 250_000_000);
        assert_eq!(p.tau, 1_000_000_000);
        // 100 GB/s: 1/100 ns per byte
        let p = q("100GB/s").params();
        assert_eq!(p.per, Per::Byte { num: 1, den: 100 });
        assert_eq!(p.tau, 1_000_000_000);
        // 3 B/s: 10^9/3 ns per byte, burst 3 weighs exactly one second
        let p = q("3B/s").params();
        assert_eq!(
            p.per,
            Per::Byte {
                num: 1_000_000_000,
                den: 3
            }
        );
        assert_eq!(p.tau, 1_000_000_000);
        assert_eq!(weight(p.per, 1), 333_333_334);
    }

    #[test]
    fn clamps_tau() {
        let t = 86_400_000_000_000;
        let p = q("1/d;burst=18446744073709551615").params();
        assert_eq!(p.burst, MAX_TAU / t);
        assert_eq!(p.tau, (MAX_TAU / t) * t);
        let p = q("1B/d;burst=18446744073709551615B").params();
        assert!(p.tau <= MAX_TAU);
        assert!(weight(p.per, u128::from(p.burst) + 1) > u128::from(MAX_TAU));
        // so fast that every u64 burst fits
        let p = q("18446744073709551615GB/ms").params();
        assert_eq!(p.burst, u64::MAX);
        assert_eq!(p.tau, 1);
    }

    #[test]
    fn default_burst_rounds_down_to_bytes() {
        assert_eq!(q("12bit/s").burst(), 1);
        assert_eq!(q("1KiB/s").burst(), 1024);
        assert_eq!(q("15bit/s").default_burst(), 1);
    }
}
