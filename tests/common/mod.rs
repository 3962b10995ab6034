//! Shared by the integration tests: quota strings built from their parts, and a reference GCRA
//! in u128 that implements the GCRA rules directly from those parts (never from the crate's own
//! parameters), in the spirit of memchr's `naive.rs`.
#![allow(dead_code)]

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{DenyReason, InsufficientCapacity, Quota, Verdict};

/// τ is clamped to this: the burst is reduced to the largest that fits.
pub const MAX_TAU: u128 = 1 << 62;
/// The largest TAT a cell may hold (`u64::MAX` itself is reserved by the implementation).
pub const MAX_TAT: u128 = u64::MAX as u128 - 1;

/// Time units: spelling and nanoseconds.
pub const TIME_UNITS: [(&str, u128); 5] = [
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// Work units: spelling and size in bits (bits convert to bytes exactly: ÷ 8).
pub const WORK_UNITS: [(&str, u128); 11] = [
    ("B", 8),
    ("kB", 8_000),
    ("MB", 8_000_000),
    ("GB", 8_000_000_000),
    ("KiB", 8 << 10),
    ("MiB", 8 << 20),
    ("GiB", 8 << 30),
    ("bit", 1),
    ("kbit", 1_000),
    ("Mbit", 1_000_000),
    ("Gbit", 1_000_000_000),
];

/// How a cost becomes a weight, straight from the written quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Per {
    /// `n·T`, `T = ⌈P/C⌉`.
    Request { t: u128 },
    /// `⌈n·num/den⌉`: `num/den` is the exact number of ns per byte.
    Byte { num: u128, den: u128 },
}

/// A quota string and what it means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub text: String,
    pub per: Per,
    /// The effective burst (requests or bytes).
    pub burst: u128,
    pub tau: u128,
    /// The count and period as written.
    pub count: u64,
    pub period: u128,
}

impl Spec {
    /// `"{count}/{unit}[;burst={burst}]"`, a request quota.
    pub fn requests(count: u64, time_unit: usize, burst: Option<u64>) -> Spec {
        let (unit, period) = TIME_UNITS[time_unit];
        let mut text = format!("{count}/{unit}");
        if let Some(b) = burst {
            text.push_str(&format!(";burst={b}"));
        }
        let t = period.div_ceil(u128::from(count));
        let written = u128::from(burst.unwrap_or(count));
        let b = written.min(MAX_TAU / t);
        Spec {
            text,
            per: Per::Request { t },
            burst: b,
            tau: b * t,
            count,
            period,
        }
    }

    /// `"{count}{work}/{time}[;burst={bcount}{bwork}]"`, a byte budget. A written burst must
    /// be a whole number of bytes; the default (the count) is rounded down to whole bytes and
    /// must be at least one.
    pub fn bytes(count: u64, work: usize, time: usize, burst: Option<(u64, usize)>) -> Spec {
        let (wname, wbits) = WORK_UNITS[work];
        let (tname, period) = TIME_UNITS[time];
        let mut text = format!("{count}{wname}/{tname}");
        let burst_bytes = match burst {
            Some((bc, bw)) => {
                text.push_str(&format!(";burst={bc}{}", WORK_UNITS[bw].0));
                let bits = u128::from(bc) * WORK_UNITS[bw].1;
                assert_eq!(bits % 8, 0, "{text}: generate whole-byte bursts only");
                bits / 8
            }
            None => u128::from(count) * wbits / 8,
        };
        assert!(
            burst_bytes >= 1,
            "{text}: a burst below one byte is rejected"
        );
        // ns per byte = P / (count·bits/8) = 8P / (count·bits).
        let (num, den) = (8 * period, u128::from(count) * wbits);
        let fits = MAX_TAU.checked_mul(den).map_or(u128::MAX, |x| x / num);
        let b = burst_bytes.min(fits).min(u128::from(u64::MAX));
        Spec {
            text,
            per: Per::Byte { num, den },
            burst: b,
            tau: (b * num).div_ceil(den),
            count,
            period,
        }
    }

    /// The parsed quota; its accessors must agree with the written parts.
    pub fn quota(&self) -> Quota {
        let q: Quota = self
            .text
            .parse()
            .unwrap_or_else(|e| panic!("{:?} should parse: {e}", self.text));
        let want = (
            self.count,
            self.period,
            matches!(self.per, Per::Byte { .. }),
            u128::from(q.burst()),
            self.unit_weight(),
        );
        let got = (
            q.count(),
            q.period().as_nanos(),
            q.is_bytes(),
            self.burst,
            q.interval().as_nanos(),
        );
        assert_eq!(
            got, want,
            "{}: (count, period, is_bytes, burst, interval)",
            self.text
        );
        q
    }

    /// The weight of a cost of `n ≤ burst` units.
    pub fn weight(&self, n: u64) -> u128 {
        match self.per {
            Per::Request { t } => u128::from(n) * t,
            Per::Byte { num, den } => (u128::from(n) * num).div_ceil(den),
        }
    }

    /// Whole units that fit in `slack` ns.
    pub fn units_in(&self, slack: u128) -> u128 {
        match self.per {
            Per::Request { t } => slack / t,
            Per::Byte { num, den } => (slack * den / num).min(self.burst),
        }
    }

    /// The weight of one unit: the interval `T` for requests.
    pub fn unit_weight(&self) -> u128 {
        self.weight(1)
    }
}

/// A verdict, flattened for exact comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Obs {
    Allow {
        remaining: u128,
        reset_after: u128,
    },
    Deny {
        retry_after: u128,
        reason: DenyReason,
    },
    Insufficient {
        cost: u64,
        capacity: u64,
    },
}

impl Obs {
    pub fn of(v: Verdict) -> Obs {
        match v {
            Verdict::Allow(a) => Obs::Allow {
                remaining: u128::from(a.remaining()),
                reset_after: a.reset_after().as_nanos(),
            },
            Verdict::Deny(d) => Obs::Deny {
                retry_after: d.retry_after().as_nanos(),
                reason: d.reason(),
            },
            other => panic!("no pass-through expected here, got {other:?}"),
        }
    }

    pub fn of_n(r: Result<Verdict, InsufficientCapacity>) -> Obs {
        match r {
            Ok(v) => Obs::of(v),
            Err(e) => Obs::Insufficient {
                cost: e.cost(),
                capacity: e.capacity(),
            },
        }
    }

    pub fn is_allow(&self) -> bool {
        matches!(self, Obs::Allow { .. })
    }

    pub fn retry_after(&self) -> Option<u128> {
        match self {
            Obs::Deny { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

/// The `retry_after` of a clock-overflow denial, in ns.
pub const OVERFLOW_RETRY: u128 = Duration::MAX.as_nanos();

/// The reference cell: one TAT in u128 and the GCRA step, nothing else.
#[derive(Clone, Debug)]
pub struct Model {
    pub spec: Spec,
    pub tat: u128,
    pub reason: DenyReason,
}

impl Model {
    pub fn new(spec: Spec) -> Model {
        Model {
            spec,
            tat: 0,
            reason: DenyReason::Quota,
        }
    }

    /// What a check of `n` at `now` says, and the TAT it stores (if any).
    pub fn eval(&self, now: u128, n: u64) -> (Obs, Option<u128>) {
        let s = &self.spec;
        if u128::from(n) > s.burst {
            let capacity = u64::try_from(s.burst).unwrap();
            return (Obs::Insufficient { cost: n, capacity }, None);
        }
        let w = s.weight(n);
        let clamped = self.tat.min(now + s.tau);
        let lowered = (clamped < self.tat).then_some(clamped);
        let base = clamped.max(now);
        let ahead = base - now + w;
        if w == 0 {
            let remaining = s.units_in(s.tau - ahead);
            return (
                Obs::Allow {
                    remaining,
                    reset_after: ahead,
                },
                None,
            );
        }
        if base + w > MAX_TAT {
            let reason = DenyReason::ClockOverflow;
            return (
                Obs::Deny {
                    retry_after: OVERFLOW_RETRY,
                    reason,
                },
                lowered,
            );
        }
        if ahead > s.tau {
            let retry_after = ahead - s.tau;
            return (
                Obs::Deny {
                    retry_after,
                    reason: self.reason,
                },
                lowered,
            );
        }
        let remaining = s.units_in(s.tau - ahead);
        (
            Obs::Allow {
                remaining,
                reset_after: ahead,
            },
            Some(base + w),
        )
    }

    /// A check: `eval`, then store. A cost of 0 stores nothing.
    pub fn check(&mut self, now: u128, n: u64) -> Obs {
        let (obs, store) = self.eval(now, n);
        if let Some(tat) = store {
            self.tat = tat;
        }
        obs
    }

    /// A peek: `eval` of one unit, storing nothing.
    pub fn peek(&self, now: u128) -> Obs {
        self.eval(now, 1).0
    }

    /// `set_quota` at `now`: the cell keeps its fill level. If it has used the share
    /// `u = clamp((tat − now)/τ_old, 0, 1)` of its burst, it has used the same share of the
    /// new burst: `tat' = now + ⌈u·τ_new⌉` (an idle TAT, at or before `now`, stays as it is).
    pub fn set_spec(&mut self, spec: Spec, now: u128) {
        if self.tat > now {
            let ahead = (self.tat - now).min(self.spec.tau);
            self.tat = (now + (ahead * spec.tau).div_ceil(self.spec.tau)).min(MAX_TAT);
        }
        self.spec = spec;
    }
}

/// Counts the allowed checks among `n` one-unit checks.
pub fn count_allowed(n: u64, mut check: impl FnMut() -> Verdict) -> u64 {
    (0..n).map(|_| u64::from(check().is_permitted())).sum()
}

// Generators

/// Random request quotas: every time unit, rates up to one per ns, bursts up to `u64::MAX`.
pub fn request_spec() -> impl Strategy<Value = Spec> {
    let count = prop_oneof![
        1u64..=10,
        1u64..=1_000,
        1u64..=1_000_000,
        1u64..=1_000_000_000
    ];
    let burst = prop_oneof![
        4 => Just(None),
        4 => (1u64..=1_000).prop_map(Some),
        1 => (1u64..=u64::MAX).prop_map(Some),
    ];
    (count, 0..TIME_UNITS.len(), burst).prop_map(|(count, unit, burst)| {
        // Request rates faster than one per ns are rejected: keep count ≤ P.
        let count = count.min(u64::try_from(TIME_UNITS[unit].1).unwrap());
        Spec::requests(count, unit, burst)
    })
}

/// Work units whose size is a whole number of bytes.
fn is_byte_unit(unit: usize) -> bool {
    WORK_UNITS[unit].1 % 8 == 0
}

pub fn byte_spec() -> impl Strategy<Value = Spec> {
    let count = prop_oneof![1u64..=10, 1u64..=1_000, 1u64..=100_000];
    let burst = prop_oneof![
        3 => Just(None),
        3 => (1u64..=10_000, 0..WORK_UNITS.len()).prop_map(Some),
        1 => (1u64..=u64::MAX).prop_map(|b| Some((b, 0))),
    ];
    (count, 0..WORK_UNITS.len(), 0..TIME_UNITS.len(), burst).prop_filter_map(
        "rates up to 100 GB/s",
        |(count, work, time, burst)| {
            // A default burst below one byte is rejected; written bursts are whole bytes.
            let count = if u128::from(count) * WORK_UNITS[work].1 < 8 {
                8
            } else {
                count
            };
            let burst = burst.map(|(b, u)| {
                if is_byte_unit(u) {
                    (b, u)
                } else {
                    (b.saturating_mul(8), u)
                }
            });
            let bits_per_ns = u128::from(count) * WORK_UNITS[work].1 / TIME_UNITS[time].1;
            (bits_per_ns <= 800).then(|| Spec::bytes(count, work, time, burst))
        },
    )
}

pub fn any_spec() -> impl Strategy<Value = Spec> {
    prop_oneof![request_spec(), byte_spec()]
}
