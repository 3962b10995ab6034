//! Charges after the fact, debt and resets on the local limiters, driven by a ManualClock.

use std::time::Duration;

use tollgate::{KeyedRateLimiter, ManualClock, RateLimiter, Verdict};

fn retry_after(v: Verdict) -> Duration {
    match v {
        Verdict::Deny(d) => d.retry_after(),
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn a_charge_without_debt_drains_at_most_and_reports_the_rest() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("10/s".parse().unwrap())
        .clock(clock.clone())
        .build();
    assert!(lim.check().is_permitted());
    let c = lim.charge(25);
    assert_eq!(c.unpaid(), 16, "9 units of room were left; 16 did not fit");
    assert_eq!(c.debt(), Duration::ZERO);
    assert_eq!(retry_after(lim.check()), Duration::from_millis(100));
}

#[test]
fn debt_is_waited_out_exactly_and_capped() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("10/s".parse().unwrap())
        .clock(clock.clone())
        .max_debt(Duration::from_secs(3))
        .build();
    // Drained (1 s of τ) plus 3 s of debt = 40 units; ask for far more.
    let c = lim.charge(u64::MAX);
    assert_eq!(c.unpaid(), u64::MAX - 40);
    assert_eq!(c.debt(), Duration::from_secs(3));
    assert_eq!(retry_after(lim.check()), Duration::from_millis(3_100));
    clock.advance(Duration::from_millis(3_099));
    assert_eq!(retry_after(lim.check()), Duration::from_millis(1));
    clock.advance(Duration::from_millis(1));
    assert!(lim.check().is_permitted());
    assert!(!lim.check().is_permitted(), "paid off, and drained");
}

#[test]
fn a_refund_pays_off_debt_but_never_lifts_above_full() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("10/s".parse().unwrap())
        .clock(clock.clone())
        .max_debt(Duration::from_secs(10))
        .build();
    assert!(lim.charge(30).is_paid());
    lim.refund(25);
    assert_eq!(
        lim.check_n(0).unwrap().allowed().map(|a| a.remaining()),
        Some(5)
    );
    lim.refund(u64::MAX);
    assert!(lim.check_n(10).unwrap().is_permitted());
    assert!(!lim.check().is_permitted(), "never more than the burst");
}

#[test]
fn reset_forgives_debt_and_refills() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("1/h".parse().unwrap())
        .clock(clock.clone())
        .max_debt(Duration::from_secs(86_400))
        .build();
    assert!(lim.check().is_permitted());
    let _ = lim.charge(10);
    assert_eq!(retry_after(lim.check()), Duration::from_secs(11 * 3_600));
    lim.reset();
    assert!(lim.check().is_permitted());
    assert!(!lim.check().is_permitted());
}

#[test]
fn debt_survives_the_fast_path_and_a_byte_budget() {
    // Checks in debt must not take the steady path's clamp to now + τ.
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("1000/s;burst=10".parse().unwrap())
        .clock(clock.clone())
        .max_debt(Duration::from_millis(50))
        .build();
    assert!(lim.charge(60).is_paid());
    for _ in 0..100 {
        assert_eq!(
            retry_after(lim.check()),
            Duration::from_millis(51),
            "50 ms of debt, then one unit"
        );
    }
    let bytes = RateLimiter::builder("1MB/s".parse().unwrap())
        .clock(clock.clone())
        .max_debt(Duration::from_secs(1))
        .build();
    assert!(bytes.charge(2_000_000).is_paid());
    assert_eq!(
        retry_after(bytes.check()),
        Duration::from_nanos(1_000_001_000)
    );
}

#[test]
fn a_keyed_charge_only_charges_tracked_keys() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<String>::builder("2/s".parse().unwrap())
        .clock(clock.clone())
        .max_debt(Duration::from_secs(2))
        .build();
    assert_eq!(lim.charge_key("ghost", 5).unpaid(), 5);
    assert_eq!(lim.len(), 0, "a charge never creates a key");
    assert!(lim.check_key("alice").is_permitted());
    let c = lim.charge_key("alice", 100);
    assert_eq!(c.debt(), Duration::from_secs(2));
    assert_eq!(
        c.unpaid(),
        100 - 5,
        "1 unit of room and 4 of debt were left"
    );
    assert_eq!(
        retry_after(lim.check_key("alice")),
        Duration::from_millis(2_500)
    );
    assert!(
        lim.check_key("bob").is_permitted(),
        "other keys are untouched"
    );
    lim.reset_key("alice");
    assert!(lim.check_key_n("alice", 2).unwrap().is_permitted());
}

#[test]
fn keyed_debt_holds_across_a_quota_change_of_another_rate() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder("10/s".parse().unwrap())
        .clock(clock.clone())
        .max_debt(Duration::from_secs(5))
        .build();
    assert!(lim.check_key(&1).is_permitted());
    assert!(lim.charge_key(&1, 59).is_paid());
    assert_eq!(retry_after(lim.check_key(&1)), Duration::from_millis(5_100));
    // A change keeps the fill level: a drained key stays drained; the debt beyond it is
    // forgiven (documented), and the cap still applies to later charges.
    lim.set_quota("20/s".parse().unwrap());
    assert_eq!(retry_after(lim.check_key(&1)), Duration::from_millis(50));
    let c = lim.charge_key(&1, 1_000);
    assert_eq!(c.debt(), Duration::from_secs(5));
}

#[test]
fn concurrent_checks_and_charges_lose_nothing() {
    // 4 threads each charge 25 units while 4 others check: the cell ends exactly
    // 100 units + the allowed checks ahead, capped by the debt.
    let clock = ManualClock::new();
    let lim = std::sync::Arc::new(
        RateLimiter::builder("100/s".parse().unwrap())
            .clock(clock.clone())
            .max_debt(Duration::from_secs(100))
            .build(),
    );
    let allowed = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for i in 0..8 {
            let (lim, allowed) = (&lim, &allowed);
            s.spawn(move || {
                for _ in 0..25 {
                    if i % 2 == 0 {
                        assert!(lim.charge(1).is_paid());
                    } else if lim.check().is_permitted() {
                        allowed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let used = 100 + allowed.load(std::sync::atomic::Ordering::Relaxed);
    // TAT = now + used·10 ms; a check waits (used − 100 + 1)·10 ms.
    assert_eq!(
        retry_after(lim.check()),
        Duration::from_millis((used - 99) * 10)
    );
}
