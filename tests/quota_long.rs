//! Long periods: `/w` (7 days) and `/month` (a rolling 30 days), exact to the nanosecond.

use std::time::Duration;

use tollgate::{KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict};

fn q(s: &str) -> Quota {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn retry_after(v: Verdict) -> Duration {
    match v {
        Verdict::Deny(d) => d.retry_after(),
        other => panic!("expected a denial, got {other:?}"),
    }
}

const DAY: u64 = 86_400;

#[test]
fn weeks_and_months_parse_and_display_canonically() {
    for s in [
        "10000/month",
        "4/w",
        "1/month",
        "3/2w",
        "1000/month;burst=50",
    ] {
        assert_eq!(q(s).to_string(), s, "{s} round-trips");
        assert_eq!(q(&q(s).to_string()), q(s));
    }
    assert_eq!(q("4/week").to_string(), "4/w");
    assert_eq!(q("1/month").period(), Duration::from_secs(30 * DAY));
    assert_eq!(q("1/w").period(), Duration::from_secs(7 * DAY));
    // Same rate, other spelling: still equal as rates, each displayed as written.
    assert_eq!(q("7/w").period() / 7, q("1/d").period());
}

#[test]
fn plurals_and_ambiguous_spellings_are_rejected_with_a_hint() {
    for (s, hint) in [
        ("4/weeks", "\"w\""),
        ("4/wk", "\"w\""),
        ("1/months", "\"month\""),
        ("1/mo", "\"month\""),
        ("1/M", "month"),
        ("1/W", "\"w\""),
    ] {
        let e = s.parse::<Quota>().expect_err(s);
        assert!(e.to_string().contains(hint), "{s}: {e}");
    }
}

#[test]
fn a_month_waits_exactly_thirty_days() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("1/month"))
        .clock(clock.clone())
        .build();
    assert!(lim.check().is_permitted());
    assert_eq!(retry_after(lim.check()), Duration::from_secs(2_592_000));
    clock.advance(Duration::from_secs(2_592_000 - 1));
    assert_eq!(retry_after(lim.check()), Duration::from_secs(1));
    clock.advance(Duration::from_secs(1));
    assert!(lim.check().is_permitted());
}

#[test]
fn four_a_week_is_one_every_42_hours() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("4/w")).clock(clock.clone()).build();
    for _ in 0..4 {
        assert!(lim.check().is_permitted());
    }
    assert_eq!(retry_after(lim.check()), Duration::from_secs(42 * 3_600));
    let keyed = KeyedRateLimiter::<u64>::builder(q("4/w"))
        .clock(clock.clone())
        .build();
    for _ in 0..4 {
        assert!(keyed.check_key(&1).is_permitted());
    }
    assert_eq!(
        retry_after(keyed.check_key(&1)),
        Duration::from_secs(42 * 3_600)
    );
    let monthly = KeyedRateLimiter::<u64>::builder(q("1/month"))
        .clock(clock.clone())
        .build();
    assert!(monthly.check_key(&9).is_permitted());
    assert_eq!(
        retry_after(monthly.check_key(&9)),
        Duration::from_secs(30 * DAY)
    );
}

#[test]
fn huge_long_period_quotas_are_typed_errors() {
    for s in [
        "18446744073709551615/month",
        "1/223month",
        "1/954w",
        "1/99999999999999999999w",
    ] {
        assert!(s.parse::<Quota>().is_err(), "{s} must be rejected");
    }
    let big = q("1/month;burst=18446744073709551615");
    // τ is capped at 2^62 ns: ⌊2^62 / 30 days⌋ = 1779 units.
    assert_eq!(
        big.burst(),
        1779,
        "the burst is lowered to what fits, not a panic"
    );
}

#[cfg(feature = "serde")]
#[test]
fn long_periods_through_serde() {
    let json = serde_json::to_string(&q("10000/month")).unwrap();
    assert_eq!(json, "\"10000/month\"");
    let back: Quota = serde_json::from_str("\"4/w\"").unwrap();
    assert_eq!(back, q("4/w"));
    assert!(serde_json::from_str::<Quota>("\"4/weeks\"").is_err());
}

#[cfg(feature = "config")]
#[test]
fn a_week_to_a_month_diffs_as_a_tightening_of_30_over_7() {
    use tollgate::limits::{Direction, Limits, QuotaChange};
    let change = QuotaChange::new(q("1000/w"), q("1000/month"));
    assert_eq!(change.direction(), Direction::Tighter);
    assert!(
        (change.factor() - 30.0 / 7.0).abs() < 1e-9,
        "{}",
        change.factor()
    );
    assert_eq!(change.to_string(), "1000/w → 1000/month: 4.29× tighter");
    let doc = |quota: &str, revision: u64| {
        Limits::from_toml(&format!(
            "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\n\
             match = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
        ))
        .unwrap_or_else(|e| panic!("{quota}: {e:?}"))
    };
    let diff = Limits::diff(&doc("1000/w", 1), &doc("1000/month", 2));
    assert_eq!(diff.changed()[0].quota, Some(change));
    let back = QuotaChange::new(q("1000/month"), q("1000/w"));
    assert_eq!(
        back.direction(),
        Direction::Looser,
        "the same count per shorter period"
    );
    assert!(Limits::from_toml(
        "schema = 1\nrevision = 1\n[[policies]]\nname = \"api\"\nquota = \"1000/months\"\n"
    )
    .is_err());
}
