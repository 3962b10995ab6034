//! `Denied::retry_after_secs`: the value of an HTTP `Retry-After` header. Whole
//! seconds rounded up and never 0 (`as_secs()` turned 200 ms into "retry now"), and capped at
//! `Denied::MAX_RETRY_AFTER_SECS` (one day) so that the `Duration::MAX` of a clock overflow,
//! or any other wait past a day, never reaches a header.

use std::time::Duration;

use tollgate::{Denied, DenyReason, KeyedRateLimiter, ManualClock, Quota, RateLimiter};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// The denial after `cost` units of `quota` were spent at 0 and the clock moved on by `later`.
fn denial(quota: &str, spend: u64, later: Duration, cost: u64) -> Denied {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q(quota)).clock(clock.clone()).build();
    assert!(lim.check_n(spend).unwrap().is_permitted());
    clock.advance(later);
    lim.check_n(cost).unwrap().denied().expect("over the quota")
}

#[test]
fn whole_seconds_rounded_up_never_zero() {
    let cases = [
        // (quota, spent at 0, later, cost, retry_after, header)
        ("5/s", 5, Duration::ZERO, 1, Duration::from_millis(200), 1),
        (
            "1/s",
            1,
            Duration::from_nanos(999_999_999),
            1,
            Duration::from_nanos(1),
            1,
        ),
        ("1/s", 1, Duration::ZERO, 1, Duration::from_secs(1), 1),
        (
            "1/s;burst=2",
            2,
            Duration::from_millis(999),
            2,
            Duration::from_millis(1_001),
            2,
        ),
        (
            "1/min",
            1,
            Duration::from_millis(500),
            1,
            Duration::from_millis(59_500),
            60,
        ),
        (
            "1/d",
            1,
            Duration::ZERO,
            1,
            Duration::from_secs(86_400),
            86_400,
        ),
    ];
    for (quota, spend, later, cost, after, secs) in cases {
        let d = denial(quota, spend, later, cost);
        assert_eq!(d.reason(), DenyReason::Quota);
        assert_eq!(
            (d.retry_after(), d.retry_after_secs()),
            (after, secs),
            "{quota}"
        );
    }
}

#[test]
fn waits_past_a_day_are_capped_at_one_day() {
    assert_eq!(Denied::MAX_RETRY_AFTER_SECS, 86_400);
    // Three days of a one-a-day quota.
    let d = denial("1/d;burst=3", 3, Duration::ZERO, 3);
    assert_eq!(d.retry_after(), Duration::from_secs(3 * 86_400));
    assert_eq!(d.retry_after_secs(), Denied::MAX_RETRY_AFTER_SECS);
}

#[test]
fn the_clock_overflow_sentinel_is_capped_at_one_day() {
    let lim = RateLimiter::builder(q("10/s"))
        .clock(ManualClock::at(Duration::from_nanos(u64::MAX)))
        .build();
    let d = lim.check().denied().unwrap();
    assert_eq!(d.reason(), DenyReason::ClockOverflow);
    assert_eq!(d.retry_after(), Duration::MAX);
    assert_eq!(d.retry_after_secs(), Denied::MAX_RETRY_AFTER_SECS);
}

#[test]
fn a_cost_the_overflow_cell_can_never_take_is_capped_at_one_day() {
    let lim = KeyedRateLimiter::<u32>::builder(q("10/s"))
        .clock(ManualClock::new())
        .max_keys(1)
        .overflow_quota(q("1/s"))
        .build();
    assert!(lim.check_key(&1).is_permitted());
    // Key 2 shares the overflow cell, whose burst is 1: a cost of 5 never fits it.
    let d = lim.check_key_n(&2, 5).unwrap().denied().unwrap();
    assert_eq!(d.reason(), DenyReason::KeyTableFull);
    assert_eq!(d.retry_after_secs(), Denied::MAX_RETRY_AFTER_SECS);
}

#[test]
fn the_retry_budget_answer_is_a_header_too() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("100/s"))
        .clock(clock.clone())
        .retry_budget(tollgate::shaping::RetryBudget::new().with_floor(0))
        .build();
    let v = lim.check_with(tollgate::Check::cost(1).attempt(1)).unwrap();
    assert_eq!(v.denied().unwrap().retry_after_secs(), 10);
}
