//! Retry budgets (incident 003's retry storm): retries may add only a share of the originals,
//! peek-step-debit, originals untouched, counted apart, and the incident's retry storm.

use std::time::Duration;

use tollgate::safety::FaultDetector;
use tollgate::shaping::{Backoff, RetryBudget};
use tollgate::{Check, DenyReason, KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn retry(lim: &RateLimiter, attempt: u32) -> Verdict {
    lim.check_with(Check::cost(1).attempt(attempt)).unwrap()
}

fn reason(v: Verdict) -> Option<DenyReason> {
    v.denied().map(|d| d.reason())
}

fn budgeted(quota: &str, budget: RetryBudget, clock: &ManualClock) -> RateLimiter {
    RateLimiter::builder(q(quota))
        .clock(clock.clone())
        .retry_budget(budget)
        .build()
}

#[test]
fn retries_beyond_ten_percent_plus_the_floor_are_denied() {
    let clock = ManualClock::new();
    let lim = budgeted("1000000/s", RetryBudget::new(), &clock);
    assert_eq!(lim.retry_budget(), Some(RetryBudget::new()));
    for _ in 0..1_000 {
        assert!(lim.check().is_permitted());
    }
    // 10 % of 1,000 originals, plus the floor: 10/s over 10 s.
    for i in 0..200 {
        assert!(retry(&lim, 1).is_permitted(), "retry {i}");
    }
    let v = retry(&lim, 3);
    assert_eq!(reason(v), Some(DenyReason::RetryBudget));
    // Everything sits in the first sub-bucket, which leaves the window after one period.
    let after = v.denied().unwrap().retry_after();
    assert_eq!(after, Duration::from_secs(10));
    clock.advance(after - Duration::from_nanos(1));
    assert_eq!(reason(retry(&lim, 1)), Some(DenyReason::RetryBudget));
    clock.advance(Duration::from_nanos(1));
    // A fresh period: only the floor is left (the originals have left the window too).
    for _ in 0..100 {
        assert!(retry(&lim, 1).is_permitted());
    }
    assert_eq!(reason(retry(&lim, 1)), Some(DenyReason::RetryBudget));
}

#[test]
fn the_window_slides_sub_bucket_by_sub_bucket() {
    let clock = ManualClock::new();
    let budget = RetryBudget::new().with_floor(0);
    let lim = budgeted("1000000/s", budget, &clock);
    for second in 0..10 {
        for _ in 0..100 {
            assert!(lim.check().is_permitted());
        }
        for _ in 0..10 {
            assert!(retry(&lim, 1).is_permitted(), "second {second}");
        }
        assert_eq!(reason(retry(&lim, 1)), Some(DenyReason::RetryBudget));
        clock.advance(Duration::from_secs(1));
    }
    // At 10 s, second 0 (100 originals, 10 retries) has left: still balanced, no room.
    assert_eq!(reason(retry(&lim, 1)), Some(DenyReason::RetryBudget));
    for _ in 0..10 {
        assert!(lim.check().is_permitted());
    }
    assert!(
        retry(&lim, 1).is_permitted(),
        "10 new originals earn one retry"
    );
}

#[test]
fn a_retry_the_quota_denies_costs_no_budget() {
    let clock = ManualClock::new();
    // Room for exactly 2 retries per second-long period, whatever the originals.
    let budget = RetryBudget::new()
        .with_ratio(0.0)
        .with_period(Duration::from_secs(1))
        .with_floor(2);
    let lim = budgeted("10/s;burst=2", budget, &clock);
    assert!(lim.check().is_permitted());
    assert!(lim.check().is_permitted());
    for _ in 0..5 {
        assert_eq!(reason(retry(&lim, 1)), Some(DenyReason::Quota));
    }
    clock.advance(Duration::from_millis(200));
    assert!(retry(&lim, 1).is_permitted());
    assert!(retry(&lim, 2).is_permitted());
    clock.advance(Duration::from_millis(100));
    // The quota has room again; the budget does not, and the quota is not charged.
    assert_eq!(reason(retry(&lim, 3)), Some(DenyReason::RetryBudget));
    assert!(lim.check().is_permitted());
}

#[test]
fn originals_are_never_affected_by_the_budget() {
    let clock = ManualClock::new();
    let budget = RetryBudget::new().with_ratio(0.0).with_floor(0);
    let lim = budgeted("100/s", budget, &clock);
    assert_eq!(reason(retry(&lim, 1)), Some(DenyReason::RetryBudget));
    for _ in 0..50 {
        assert!(lim.check().is_permitted());
        assert!(lim
            .check_with(Check::cost(1).attempt(0))
            .unwrap()
            .is_permitted());
    }
    assert_eq!(reason(lim.check()), Some(DenyReason::Quota));
}

#[test]
fn stats_count_originals_and_retries_apart() {
    let clock = ManualClock::new();
    let detector = FaultDetector::new();
    let lim = RateLimiter::builder(q("100/s"))
        .clock(clock.clone())
        .detector(detector.clone())
        .retry_budget(RetryBudget::new().with_floor(0))
        .build();
    for _ in 0..50 {
        let _ = lim.check();
    }
    for attempt in 1..=10 {
        let _ = retry(&lim, attempt);
    }
    let _ = lim.check_n(60).unwrap(); // over quota
    let s = lim.stats();
    assert_eq!(s, detector.stats());
    assert_eq!((s.original, s.retries), (51, 10));
    assert_eq!(
        (s.allowed, s.denied_retry_budget, s.denied_quota),
        (55, 5, 1)
    );
    assert_eq!(s.total(), s.original + s.retries);
    assert_eq!(s.denied(), 6);
}

#[test]
fn retries_are_counted_without_a_budget() {
    let detector = FaultDetector::new();
    let lim = RateLimiter::builder(q("100/s"))
        .clock(ManualClock::new())
        .detector(detector)
        .build();
    let _ = lim.check();
    let _ = retry(&lim, 1);
    let s = lim.stats();
    assert_eq!((s.original, s.retries, s.allowed), (1, 1, 2));
}

#[test]
fn keyed_limiters_share_one_budget() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u32>::builder(q("100/s"))
        .clock(clock.clone())
        .retry_budget(RetryBudget::new().with_floor(0))
        .build();
    for key in 0..20 {
        assert!(lim.check_key(&key).is_permitted());
    }
    let again = |key: u32| lim.check_key_with(&key, Check::cost(1).attempt(1)).unwrap();
    assert!(again(0).is_permitted());
    assert!(again(1).is_permitted());
    assert_eq!(reason(again(2)), Some(DenyReason::RetryBudget));
    assert_eq!(lim.len(), 20, "a budget denial does not insert a key");
}

/// What a retry storm admits.
struct Storm {
    originals: u64,
    admitted: u64,
    secs: u64,
}

/// 1,000 clients, one original per second each (spread over the second), upstream failing
/// 100 %: each client retries immediately, 10 times, whatever the answer.
fn storm(lim: &RateLimiter, clock: &ManualClock) -> Storm {
    let (clients, secs) = (1_000u64, 60u64);
    let mut s = Storm {
        originals: 0,
        admitted: 0,
        secs,
    };
    for _ in 0..secs * clients {
        // Client `tick % 1000` sends its original this millisecond.
        s.originals += 1;
        s.admitted += u64::from(lim.check().is_permitted());
        for attempt in 1..=10 {
            s.admitted += u64::from(retry(lim, attempt).is_permitted());
        }
        clock.advance(Duration::from_millis(1));
    }
    s
}

#[test]
fn a_retry_storm_is_held_to_ten_percent() {
    // The service's capacity: 5× its normal load of 1,000 originals per second.
    let quota = "5000/s";
    let clock = ManualClock::new();
    let with = storm(&budgeted(quota, RetryBudget::new(), &clock), &clock);
    let bound = 1.1 * with.originals as f64 + 10.0 * with.secs as f64;
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q(quota)).clock(clock.clone()).build();
    let without = storm(&lim, &clock);
    let (a, b) = (
        with.admitted as f64 / with.originals as f64,
        without.admitted as f64 / without.originals as f64,
    );
    eprintln!(
        "retry storm, {} originals over {} s: with a budget {} admitted ({a:.3}×, bound {bound}), \
         without {} ({b:.2}×)",
        with.originals, with.secs, with.admitted, without.admitted
    );
    assert!(with.admitted as f64 <= bound, "{} > {bound}", with.admitted);
    assert!(
        with.admitted > with.originals,
        "the budget admits some retries"
    );
    assert!((3.0..=10.0).contains(&b), "without a budget: {b:.2}×");
}

#[test]
fn limiters_stay_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RateLimiter>();
    assert_send_sync::<KeyedRateLimiter<String>>();
    assert_send_sync::<RetryBudget>();
}

/// A retry budget without a floor earns retries only from originals, so waiting alone may never
/// make room: the answer is one period (every retry counted now has aged out by then, and the
/// originals of that period alone decide), never a sentinel.
#[test]
fn without_a_floor_an_empty_budget_answers_one_period() {
    for secs in [1, 10, 60] {
        let period = Duration::from_secs(secs);
        let clock = ManualClock::new();
        let budget = RetryBudget::new().with_floor(0).with_period(period);
        let lim = budgeted("100/s", budget, &clock);
        let d = retry(&lim, 1)
            .denied()
            .expect("no originals and no floor: no budget");
        assert_eq!(d.reason(), DenyReason::RetryBudget);
        assert_eq!(d.retry_after(), period);
        // What a client does with it stays within one and a half periods.
        let backoff = Backoff::builder().seed(secs).build().unwrap();
        assert!(backoff.after_deny(1, d.retry_after()) <= period * 3 / 2);
    }
}

/// `examples/retry_budget.rs`'s one client: 10 originals from others, its own original and
/// one retry admitted, the next retry denied. It was once told 584 years.
#[test]
fn without_a_floor_a_spent_budget_answers_one_period_then_reopens() {
    let clock = ManualClock::new();
    let lim = budgeted("10000/s", RetryBudget::new().with_floor(0), &clock);
    for _ in 0..11 {
        assert!(lim.check().is_permitted());
    }
    clock.advance(Duration::from_millis(58));
    assert!(retry(&lim, 1).is_permitted(), "11 originals earn one retry");
    clock.advance(Duration::from_millis(184));
    let d = retry(&lim, 2).denied().unwrap();
    assert_eq!(d.reason(), DenyReason::RetryBudget);
    assert_eq!(d.retry_after(), Duration::from_secs(10));
    // One period later the old retry has aged out: ten new originals earn the next one.
    clock.advance(d.retry_after());
    for _ in 0..10 {
        assert!(lim.check().is_permitted());
    }
    assert!(retry(&lim, 2).is_permitted());
}

/// Retries denied together are told reopening + k × (period / retries the window allows),
/// round-robin over one period: never earlier than the reopening, never in step.
#[test]
fn retries_denied_together_learn_spread_retry_afters() {
    let clock = ManualClock::new();
    // Room for exactly 10 retries per 10 s: one a second.
    let budget = RetryBudget::new().with_ratio(0.0).with_floor(1);
    let lim = budgeted("1000000/s", budget, &clock);
    clock.advance(Duration::from_millis(500));
    for _ in 0..10 {
        assert!(retry(&lim, 1).is_permitted());
    }
    let told: Vec<Duration> = (0..12)
        .map(|_| retry(&lim, 1).denied().unwrap().retry_after())
        .collect();
    // The retries leave the window at 10 s: 9.5 s from now, then one per second of budget.
    let reopening = Duration::from_millis(9_500);
    let expected: Vec<Duration> = (0..12u32)
        .map(|k| reopening + Duration::from_secs((k % 10).into()))
        .collect();
    assert_eq!(told, expected);
    // The first is exact: one nanosecond earlier the budget is still spent.
    clock.advance(reopening - Duration::from_nanos(1));
    assert_eq!(reason(retry(&lim, 1)), Some(DenyReason::RetryBudget));
    clock.advance(Duration::from_nanos(1));
    assert!(retry(&lim, 1).is_permitted());
}

/// The spread follows the backlog of the window: denials that have aged out no longer push
/// new ones back.
#[test]
fn the_spread_forgets_denials_older_than_the_window() {
    let clock = ManualClock::new();
    let budget = RetryBudget::new().with_ratio(0.0).with_floor(1);
    let lim = budgeted("1000000/s", budget, &clock);
    for _ in 0..10 {
        assert!(retry(&lim, 1).is_permitted());
    }
    for _ in 0..3 {
        let _ = retry(&lim, 1);
    }
    // 20 s on, the window is empty of retries and of denials alike.
    clock.advance(Duration::from_secs(20));
    for _ in 0..10 {
        assert!(retry(&lim, 1).is_permitted());
    }
    let d = retry(&lim, 1).denied().unwrap();
    assert_eq!(d.retry_after(), Duration::from_secs(10));
}
