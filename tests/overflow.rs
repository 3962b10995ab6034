//! Time arithmetic at the edges: clocks near `u64::MAX` ns, idle gaps
//! up to 2^63 ns, periods of a day, bursts of `u64::MAX`, costs of 0 and `u64::MAX`. Never a
//! panic (these run with `overflow-checks = true`), never an unbounded allow; a TAT that
//! cannot fit is a `ClockOverflow` denial with `retry_after == Duration::MAX`.

mod common;

use core::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use common::{any_spec, Model, Obs, Spec, OVERFLOW_RETRY};
use proptest::prelude::*;
use tollgate::{
    DenyReason, InsufficientCapacity, KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict,
};

const MAX: u64 = u64::MAX;
const HOUR: Duration = Duration::from_secs(3_600);
const YEAR: Duration = Duration::from_secs(365 * 86_400 + 6 * 3_600);
const GAP_2_63: Duration = Duration::from_nanos(1 << 63);

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// A direct limiter and key 1 of a keyed one, on one manual clock.
struct Pair {
    clock: ManualClock,
    direct: RateLimiter,
    keyed: KeyedRateLimiter<u64>,
}

impl Pair {
    fn new(quota: Quota, at: u64) -> Pair {
        let clock = ManualClock::at(Duration::from_nanos(at));
        Pair {
            direct: RateLimiter::builder(quota).clock(clock.clone()).build(),
            keyed: KeyedRateLimiter::<u64>::builder(quota)
                .clock(clock.clone())
                .max_keys(16)
                .build(),
            clock,
        }
    }

    /// `check_n` on both; they must agree.
    fn check_n(&self, n: u64) -> Obs {
        let d = Obs::of_n(self.direct.check_n(n));
        let k = Obs::of_n(self.keyed.check_key_n(&1, n));
        assert_eq!(
            d,
            k,
            "direct and keyed disagree at {} ns",
            self.clock.nanos()
        );
        if let Obs::Deny {
            retry_after,
            reason,
        } = d
        {
            let overflow = reason == DenyReason::ClockOverflow;
            assert_eq!(overflow, retry_after == OVERFLOW_RETRY, "{d:?}");
        }
        d
    }

    fn check(&self) -> Obs {
        let d = Obs::of(self.direct.check());
        assert_eq!(d, Obs::of(self.keyed.check_key(&1)));
        d
    }

    fn peek(&self) -> Obs {
        let d = Obs::of(self.direct.peek());
        assert_eq!(d, Obs::of(self.keyed.peek_key(&1)));
        d
    }

    /// Checks one unit `n` times at this instant; returns how many were allowed.
    fn allowed_of(&self, n: u64) -> u64 {
        (0..n).map(|_| u64::from(self.check().is_allow())).sum()
    }
}

fn overflow() -> Obs {
    Obs::Deny {
        retry_after: OVERFLOW_RETRY,
        reason: DenyReason::ClockOverflow,
    }
}

#[test]
fn a_clock_at_u64_max_denies_every_weighted_check_as_overflow() {
    for text in [
        "10/s",
        "1/d",
        "1000000000/s;burst=7",
        "3B/s",
        "2Gbit/s;burst=64MiB",
    ] {
        let quota = q(text);
        let p = Pair::new(quota, MAX);
        for _ in 0..3 {
            assert_eq!(p.check(), overflow(), "{text}");
            assert_eq!(p.check_n(1), overflow(), "{text}");
            assert_eq!(p.check_n(quota.burst()), overflow(), "{text}");
            assert_eq!(p.peek(), overflow(), "{text}");
            let v = p.direct.check().denied().unwrap();
            assert_eq!(
                (v.reason(), v.retry_after()),
                (DenyReason::ClockOverflow, Duration::MAX)
            );
            // Cost 0 weighs nothing: it reports a full cell and writes nothing.
            match p.check_n(0) {
                Obs::Allow { remaining, .. } => assert_eq!(remaining, u128::from(quota.burst())),
                other => panic!("{text}: cost 0 at u64::MAX: {other:?}"),
            }
            assert!(matches!(p.check_n(MAX), Obs::Insufficient { .. }), "{text}");
            p.clock.advance(Duration::MAX);
        }
        assert_eq!(
            p.keyed.len(),
            0,
            "{text}: an overflow denial stores nothing"
        );
    }
}

/// `now = u64::MAX − k` for `k` around multiples of `T`: allowed while the new TAT fits below
/// `u64::MAX`, then `ClockOverflow`; never more than the burst; exactly what the model says.
#[test]
fn a_clock_near_u64_max_allows_only_what_fits() {
    for text in [
        "10/s;burst=5",
        "1/ms;burst=3",
        "1000000000/s;burst=9",
        "1/d;burst=4",
        "3B/s",
        "1kB/s;burst=7B",
    ] {
        let spec = spec_of(text);
        let t = u64::try_from(spec.unit_weight()).unwrap();
        let ks = [
            0,
            1,
            2,
            t - 1,
            t,
            t + 1,
            t + 2,
            2 * t,
            2 * t + 1,
            3 * t + 7,
            5 * t,
            100 * t,
        ];
        for k in ks {
            let p = Pair::new(spec.quota(), MAX - k);
            let mut model = Model::new(spec.clone());
            let now = u128::from(p.clock.nanos());
            let mut allowed = 0;
            for i in 0..spec.burst + 2 {
                let got = p.check();
                assert_eq!(got, model.check(now, 1), "{text}, k = {k}, check #{i}");
                allowed += u128::from(got.is_allow());
            }
            assert!(allowed <= spec.burst);
            // The last allowed TAT is now + allowed·T ≤ u64::MAX − 1.
            let fits = (u128::from(k) - 1.min(u128::from(k))) / spec.unit_weight();
            // One-unit checks of weight w: ⌊τ/w⌋ fit in τ (the burst, for request quotas).
            assert_eq!(
                allowed,
                (spec.tau / spec.unit_weight()).min(fits),
                "{text}, k = {k}"
            );
            for n in [0, 1, spec_burst(&spec), MAX] {
                assert_eq!(
                    p.check_n(n),
                    model.check(now, n),
                    "{text}, k = {k}, cost {n}"
                );
            }
            assert_eq!(p.peek(), model.peek(now));
            p.clock.set(Duration::from_nanos(MAX));
            assert_eq!(p.check(), overflow());
        }
    }
}

fn spec_of(text: &str) -> Spec {
    // The texts here are written by hand; their meaning comes from the model's own parts.
    let q = q(text);
    let time = common::TIME_UNITS
        .iter()
        .position(|(_, ns)| *ns == q.period().as_nanos())
        .unwrap();
    let spec = if q.is_bytes() {
        let (count_work, burst) = text
            .split_once(";burst=")
            .map_or((text, None), |(a, b)| (a, Some(b)));
        let count_work = count_work.split('/').next().unwrap();
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap();
        let unit = |s: &str| {
            common::WORK_UNITS
                .iter()
                .position(|(u, _)| *u == s)
                .unwrap()
        };
        let split = digits(count_work);
        let burst = burst.map(|b| {
            let i = digits(b);
            (b[..i].parse().unwrap(), unit(&b[i..]))
        });
        Spec::bytes(q.count(), unit(&count_work[split..]), time, burst)
    } else {
        let burst = text.split_once(";burst=").map(|(_, b)| b.parse().unwrap());
        Spec::requests(q.count(), time, burst)
    };
    assert_eq!(spec.text, text);
    spec
}

fn spec_burst(spec: &Spec) -> u64 {
    u64::try_from(spec.burst).unwrap()
}

/// Checks one unit `burst + 1` times at this instant, each against the model; returns how
/// many were allowed.
fn drain(p: &Pair, model: &mut Model, what: &str) -> u128 {
    let now = u128::from(p.clock.nanos());
    let mut allowed = 0;
    for i in 0..=spec_burst(&model.spec) {
        let got = p.check();
        assert_eq!(got, model.check(now, 1), "{what}: check #{i} at {now}");
        allowed += u128::from(got.is_allow());
    }
    allowed
}

/// After an idle gap of an hour, a year or 2^63 ns: at most one burst (exactly one when the
/// gap is at least τ), then a denial that waits exactly one interval.
#[test]
fn an_idle_gap_refills_exactly_one_burst() {
    for text in [
        "10/s;burst=5",
        "1/ms",
        "1/d;burst=18446744073709551615",
        "1/d",
        "3B/s",
        "1MiB/s;burst=3B",
    ] {
        let spec = spec_of(text);
        let t = spec.unit_weight();
        for start in [0, 1_000_000_007, 1 << 60] {
            for gap in [HOUR, YEAR, GAP_2_63] {
                let what = format!("{text} from {start} ns, gap {gap:?}");
                let p = Pair::new(spec.quota(), start);
                let mut model = Model::new(spec.clone());
                let first = drain(&p, &mut model, &what);
                p.clock.advance(gap);
                let second = drain(&p, &mut model, &what);
                let refill = spec.burst.min(gap.as_nanos() / t);
                if !p.direct.quota().is_bytes() {
                    assert_eq!((first, second), (spec.burst, refill), "{what}");
                }
                assert!(second <= first, "{what}");
                let now = u128::from(p.clock.nanos());
                let next = p.check();
                assert_eq!(next, model.check(now, 1), "{what}");
                if gap.as_nanos() >= spec.tau && !p.direct.quota().is_bytes() {
                    // A full refill, drained: the next request waits exactly one interval.
                    assert_eq!(next.retry_after(), Some(t), "{what}");
                }
            }
        }
    }
}

#[test]
fn a_gap_that_saturates_the_clock_allows_nothing() {
    let spec = spec_of("1/d;burst=18446744073709551615");
    let p = Pair::new(spec.quota(), 1 << 60);
    assert_eq!(p.allowed_of(53_376), 53_375);
    p.clock.advance(GAP_2_63); // 2^60 + 2^63: fits
    assert_eq!(p.allowed_of(53_376), 53_375);
    p.clock.advance(GAP_2_63); // saturates at u64::MAX
    assert_eq!(p.clock.nanos(), MAX);
    assert_eq!(p.allowed_of(10), 0);
    assert_eq!(p.check(), overflow());
}

#[test]
fn a_day_long_period_with_a_u64_burst_is_clamped() {
    // 2^62 ns / 1 day = 53375.99…: the effective burst is 53375, τ = 53375 days.
    for text in [
        "1/d;burst=18446744073709551615",
        "1B/d;burst=18446744073709551615B",
    ] {
        let quota = q(text);
        assert_eq!(quota.burst(), 53_375, "{text}");
        assert_eq!(quota.interval(), Duration::from_secs(86_400), "{text}");
        let p = Pair::new(quota, 0);
        assert_eq!(
            p.allowed_of(53_376),
            53_375,
            "{text}: the burst at one instant, no more"
        );
        let last = p.check().retry_after().unwrap();
        assert_eq!(last, 86_400_000_000_000, "{text}");
        let err = Obs::Insufficient {
            cost: 53_376,
            capacity: 53_375,
        };
        assert_eq!(p.check_n(53_376), err);
        assert!(matches!(
            p.check_n(MAX),
            Obs::Insufficient {
                cost: MAX,
                capacity: 53_375
            }
        ));
    }
}

#[test]
fn cost_u64_max_and_cost_zero() {
    // A burst of u64::MAX bytes at 100 GB/s weighs 184467440737095517 ns: allowed once.
    let p = Pair::new(q("100GB/s;burst=18446744073709551615B"), 5);
    assert_eq!(p.direct.quota().burst(), MAX);
    match p.check_n(MAX) {
        Obs::Allow {
            remaining,
            reset_after,
        } => {
            assert_eq!((remaining, reset_after), (0, 184_467_440_737_095_517));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.check_n(MAX).retry_after(), Some(184_467_440_737_095_517));
    assert_eq!(p.check_n(1).retry_after(), Some(1));
    for text in [
        "1/s",
        "1/d;burst=18446744073709551615",
        "1000000000/s",
        "2Gbit/s;burst=64MiB",
    ] {
        for at in [0, 1 << 40, MAX - 1, MAX] {
            let quota = q(text);
            let p = Pair::new(quota, at);
            let err = Obs::Insufficient {
                cost: MAX,
                capacity: quota.burst(),
            };
            assert_eq!(p.check_n(MAX), err, "{text} at {at}");
            assert!(p.check_n(0).is_allow(), "{text} at {at}");
            assert_eq!(p.keyed.len(), 0, "{text} at {at}: nothing written");
            assert!(p.direct.check_with(tollgate::Check::cost(MAX)).is_err());
        }
    }
}

#[test]
fn constructors_never_panic_and_saturate() {
    let max = NonZeroU32::MAX;
    assert_eq!(Quota::per_second(max), q("1000000000/s"));
    assert_eq!(Quota::per_second(max).interval(), Duration::from_nanos(1));
    let huge = NonZeroU64::MAX;
    for quota in [
        Quota::per_second(max),
        Quota::per_minute(max),
        Quota::per_hour(max),
        Quota::per_day(max),
        Quota::per_day(NonZeroU32::MIN),
        Quota::per_second(NonZeroU32::MIN),
    ] {
        for quota in [quota, quota.with_burst(huge)] {
            let t = u64::try_from(quota.interval().as_nanos()).unwrap();
            let burst = quota.burst();
            assert!(u128::from(burst) * u128::from(t) <= 1 << 62, "{quota}");
            // From the epoch: one check of the whole burst fits, the next unit waits T.
            let p = Pair::new(quota, 0);
            assert!(p.check_n(burst).is_allow(), "{quota}");
            assert_eq!(p.check().retry_after(), Some(u128::from(t)), "{quota}");
            // Near the end of time: the whole burst cannot fit when τ exceeds what is left.
            let p = Pair::new(quota, MAX - burst * t / 2);
            let v = p.check_n(burst);
            assert!(v == overflow() || burst * t / 2 < 2, "{quota}: {v:?}");
            assert!(!p.check_n(burst.saturating_add(1)).is_allow(), "{quota}");
        }
    }
}

/// The overflow cell of a full keyed table obeys the same rules near `u64::MAX`.
#[test]
fn the_overflow_cell_near_u64_max() {
    let clock = ManualClock::at(Duration::from_nanos(MAX - 250_000_001));
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s;burst=5"))
        .clock(clock.clone())
        .max_keys(1)
        .build();
    assert!(lim.check_key(&1).is_permitted());
    // The overflow cell: 2 allowed (TAT now + 200 ms), then the third TAT would not fit.
    let verdicts: Vec<Verdict> = (2..6).map(|k| lim.check_key(&k)).collect();
    assert!(
        verdicts[0].is_permitted() && verdicts[1].is_permitted(),
        "{verdicts:?}"
    );
    for v in &verdicts[2..] {
        let d = v.denied().expect("denied");
        assert_eq!(
            (d.reason(), d.retry_after()),
            (DenyReason::ClockOverflow, Duration::MAX)
        );
    }
    assert_eq!(lim.len(), 1);
    clock.set(Duration::from_nanos(MAX));
    assert_eq!(
        lim.check_key(&1).denied().unwrap().reason(),
        DenyReason::ClockOverflow
    );
    assert_eq!(
        lim.check_key(&9).denied().unwrap().reason(),
        DenyReason::ClockOverflow
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 128 } else { 512 }))]

    /// Random quotas near the end of time: exact agreement with the model, never more than
    /// the burst at one instant, and every overflow denial carries `Duration::MAX`.
    #[test]
    fn near_the_end_of_time_the_model_holds(
        spec in any_spec(),
        shift in 0u32..64,
        jitter in any::<u64>(),
        steps in prop::collection::vec((0u32..64, any::<u64>(), any::<u64>()), 1..40),
    ) {
        let back = jitter >> shift;
        let p = Pair::new(spec.quota(), MAX - back);
        let mut model = Model::new(spec.clone());
        let burst = spec_burst(&spec);
        // The weight allowed at this instant: never above τ.
        let mut allowed_here = 0u128;
        for (i, (step_shift, step, cost)) in steps.into_iter().enumerate() {
            let advance = if step % 3 == 0 { 0 } else { step >> step_shift };
            if advance > 0 {
                allowed_here = 0;
            }
            p.clock.advance(Duration::from_nanos(advance));
            let n = match cost % 4 {
                0 => 1,
                1 => cost % burst.saturating_add(1),
                2 => burst,
                _ => cost,
            };
            let now = u128::from(p.clock.nanos());
            let got = p.check_n(n);
            prop_assert_eq!(got, model.check(now, n), "step #{} cost {} at {} under {}", i, n, now, spec.text);
            if got.is_allow() {
                allowed_here += spec.weight(n);
            }
            prop_assert!(allowed_here <= spec.tau);
        }
    }
}

#[test]
fn insufficient_capacity_reports_cost_and_capacity() {
    let lim = RateLimiter::new(q("5/s"));
    let err: InsufficientCapacity = lim.check_n(MAX).unwrap_err();
    assert_eq!((err.cost(), err.capacity()), (MAX, 5));
}
