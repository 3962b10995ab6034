//! Priority classes (incident 003's shared link): heartbeats and replica recovery on one byte
//! budget, a live 8 → 2 Gbit/s change, class capacities, and the reserve as a property.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::limiter::RateLimiterBuilder;
use tollgate::shaping::{Priorities, PriorityError};
use tollgate::{Check, KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict};

const CHUNK: u64 = 64 << 10;
const HEARTBEAT: u64 = 1 << 10;
/// 2 Gbit/s in bytes per second.
const RATE_2G: u64 = 250_000_000;

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

fn classes() -> Priorities {
    Priorities::new([(0, 0.0), (1, 0.2), (2, 0.5)]).unwrap()
}

fn link(quota: &str, clock: &ManualClock) -> RateLimiterBuilder {
    RateLimiter::builder(q(quota)).clock(clock.clone())
}

/// Offers `per_sec` bytes per second in 64 KiB chunks, dropping what is denied.
struct Stream {
    per_tick: u64,
    pending: u64,
    admitted: u64,
}

impl Stream {
    fn new(per_sec: u64, tick: Duration) -> Self {
        let per_tick = u64::try_from(u128::from(per_sec) * tick.as_nanos() / 1_000_000_000)
            .expect("a tick's worth of bytes fits");
        Self {
            per_tick,
            pending: 0,
            admitted: 0,
        }
    }

    fn tick(&mut self, lim: &RateLimiter, class: u8) {
        self.pending += self.per_tick;
        while self.pending >= CHUNK {
            self.pending -= CHUNK;
            if lim
                .check_with(Check::cost(CHUNK).class(class))
                .unwrap()
                .is_permitted()
            {
                self.admitted += CHUNK;
            }
        }
    }
}

#[test]
fn heartbeats_always_pass_and_recovery_gets_the_rest() {
    let clock = ManualClock::new();
    let lim = link("2Gbit/s;burst=64MiB", &clock)
        .priorities(classes())
        .build();
    let tick = Duration::from_micros(50);
    let mut recovery = Stream::new(4 * RATE_2G, tick);
    let (mut beats, mut beats_ok, mut beat_bytes) = (0u64, 0u64, 0u64);
    let (warmup, measured) = (20_000u64, 200_000u64); // 1 s, then 10 s
    let mut recovery_at_warmup = 0;
    for i in 0..warmup + measured {
        if i == warmup {
            recovery_at_warmup = recovery.admitted;
            beat_bytes = 0;
        }
        recovery.tick(&lim, 2);
        if i % 20 == 0 {
            // A heartbeat every millisecond.
            beats += 1;
            let v = lim.check_with(Check::cost(HEARTBEAT).class(0)).unwrap();
            if v.is_permitted() {
                beats_ok += 1;
                beat_bytes += HEARTBEAT;
            }
        }
        clock.advance(tick);
    }
    assert_eq!(beats_ok, beats, "every heartbeat is admitted");
    let got = (recovery.admitted - recovery_at_warmup) as f64;
    let rest = (RATE_2G * 10 - beat_bytes) as f64;
    let error = (got - rest).abs() / rest;
    eprintln!(
        "recovery: {got} B of the {rest} B left by {beats} heartbeats over 10 s ({:.4} %)",
        error * 100.0
    );
    assert!(error < 0.01, "recovery got {got} B, the rest is {rest} B");
}

/// Streams at 4 × 8 Gbit/s for 2 s, switches to `to` and streams 2 s more; returns the bytes
/// admitted in each 10 ms after the switch.
fn live_change(from: &str, to: &str) -> Vec<u64> {
    let clock = ManualClock::new();
    let lim = link(from, &clock).build();
    let tick = Duration::from_micros(10);
    let mut s = Stream::new(16 * RATE_2G, tick);
    for _ in 0..200_000 {
        s.tick(&lim, 0);
        clock.advance(tick);
    }
    // The first burst, then 8 Gbit/s.
    let before = (s.admitted - q(from).burst()) as f64 / 2.0;
    assert!(
        (before - 4.0 * RATE_2G as f64).abs() / before < 0.01,
        "{before} B/s"
    );
    lim.set_quota(q(to));
    let mut per_10ms = Vec::new();
    for _ in 0..200 {
        let start = s.admitted;
        for _ in 0..1_000 {
            s.tick(&lim, 0);
            clock.advance(tick);
        }
        per_10ms.push(s.admitted - start);
    }
    per_10ms
}

/// The most admitted over any prefix of length `n × 10 ms` after the switch, less the rate.
fn excess_over_rate(per_10ms: &[u64]) -> i64 {
    let mut sum = 0i64;
    let mut worst = i64::MIN;
    for (i, b) in per_10ms.iter().enumerate() {
        sum += *b as i64;
        let allowed = (i as i64 + 1) * (RATE_2G / 100) as i64;
        worst = worst.max(sum - allowed);
    }
    worst
}

#[test]
fn a_live_change_from_8_to_2_gbit_hands_out_no_free_burst() {
    // Same τ (268 ms) before and after: a saturated cell stays saturated.
    let per_10ms = live_change("8Gbit/s;burst=256MiB", "2Gbit/s;burst=64MiB");
    let excess = excess_over_rate(&per_10ms);
    assert!(excess <= CHUNK as i64, "{excess} B above 2 Gbit/s");
    // Converged within one burst (268 ms): the next second runs at 2 Gbit/s within 1 %.
    let second: u64 = per_10ms[30..130].iter().sum();
    let error = (second as f64 - RATE_2G as f64).abs() / RATE_2G as f64;
    eprintln!("after 8→2 Gbit/s: excess {excess} B, next second {second} B ({error:.5})");
    assert!(error < 0.01, "{second} B in a second");
}

#[test]
fn a_live_change_with_a_larger_tolerance_stays_within_one_burst() {
    // τ grows from 67 ms to 268 ms: time is carried over, so at most the new burst on top.
    let per_10ms = live_change("8Gbit/s;burst=64MiB", "2Gbit/s;burst=64MiB");
    let excess = excess_over_rate(&per_10ms);
    assert!(
        excess <= (64 << 20) + CHUNK as i64,
        "{excess} B above 2 Gbit/s"
    );
    let second: u64 = per_10ms[30..130].iter().sum();
    let error = (second as f64 - RATE_2G as f64).abs() / RATE_2G as f64;
    eprintln!("after 8→2 Gbit/s (τ ×4): excess {excess} B, next second {second} B");
    assert!(error < 0.01, "{second} B in a second");
}

#[test]
fn a_chunk_bigger_than_its_capacity_is_an_error_in_bytes() {
    let lim = link("2Gbit/s;burst=64MiB", &ManualClock::new())
        .priorities(classes())
        .build();
    let err = lim.check_n((64 << 20) + 1).unwrap_err();
    assert_eq!((err.cost(), err.capacity()), ((64 << 20) + 1, 64 << 20));
    let err = lim
        .check_with(Check::cost((32 << 20) + 1).class(2))
        .unwrap_err();
    assert_eq!(
        err.capacity(),
        32 << 20,
        "class 2 keeps half the burst back"
    );
    // An unknown class is treated like the least critical one.
    assert_eq!(
        lim.check_with(Check::cost(64 << 20).class(9))
            .unwrap_err()
            .capacity(),
        32 << 20
    );
    assert!(lim
        .check_with(Check::cost(32 << 20).class(2))
        .unwrap()
        .is_permitted());
}

#[test]
fn keyed_limiters_apply_classes_per_key() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<&str>::builder(q("10/s"))
        .clock(clock.clone())
        .priorities(classes())
        .build();
    for key in ["node-a", "node-b"] {
        assert!(lim
            .check_key_with(key, Check::cost(5).class(2))
            .unwrap()
            .is_permitted());
        let v = lim.check_key_with(key, Check::cost(1).class(2)).unwrap();
        assert_eq!(
            v.denied().unwrap().retry_after(),
            Duration::from_millis(100)
        );
        assert!(lim
            .check_key_with(key, Check::cost(3).class(1))
            .unwrap()
            .is_permitted());
        assert!(lim.check_key(key).is_permitted());
        assert!(lim.check_key(key).is_permitted());
        assert!(!lim.check_key(key).is_permitted());
    }
}

/// A reserve of 0.95 on a burst of 10 leaves class 2 half a request. The limits
/// document rejects it; so does `Priorities::for_quota`, with the same rule and words.
#[test]
fn a_reserve_that_leaves_a_class_nothing_is_rejected_for_that_quota() {
    let classes = || Priorities::new([(0, 0.0), (1, 0.5), (2, 0.95)]).unwrap();
    let err = classes().for_quota(&q("10/s")).unwrap_err();
    assert_eq!(
        err,
        PriorityError::Starved {
            class: 2,
            reserve: 0.95,
            burst: 10,
            bytes: false
        }
    );
    assert_eq!(
        err.to_string(),
        "class 2 can never send: a reserve of 0.95 leaves it less than one request of the \
         burst of 10"
    );
    // The most critical starved class is the one reported; a byte budget says bytes.
    let err = classes().for_quota(&q("10B/s;burst=1B")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "class 1 can never send: a reserve of 0.5 leaves it less than one byte of the burst of 1"
    );
    assert_eq!(classes().for_quota(&q("20/s")), Ok(classes()));
}

/// Every class can send one unit into an empty cell, whatever the reserve and the burst,
/// on a direct and a keyed limiter.
fn every_class_can_send_one(quota: &str, classes: &Priorities) -> Result<(), String> {
    for class in [0u8, 1, 2, 9] {
        let lim = RateLimiter::builder(q(quota))
            .clock(ManualClock::new())
            .priorities(classes.clone())
            .build();
        match lim.check_with(Check::cost(1).class(class)) {
            Ok(v) if v.is_permitted() => {}
            other => return Err(format!("{quota}, class {class}: {other:?}")),
        }
        let keyed = KeyedRateLimiter::<u8>::builder(q(quota))
            .clock(ManualClock::new())
            .priorities(classes.clone())
            .build();
        match keyed.check_key_with(&class, Check::cost(1).class(class)) {
            Ok(v) if v.is_permitted() => {}
            other => return Err(format!("keyed {quota}, class {class}: {other:?}")),
        }
    }
    Ok(())
}

#[test]
fn no_class_is_left_with_zero_capacity_when_attached_unchecked() {
    let classes = Priorities::new([(0, 0.0), (1, 0.5), (2, 0.95)]).unwrap();
    for quota in ["10/s", "1/s", "10B/s;burst=1B", "2Gbit/s;burst=10B"] {
        every_class_can_send_one(quota, &classes).unwrap();
    }
    // A class held to one unit by the floor still sees its capacity as one.
    let lim = RateLimiter::builder(q("10/s"))
        .clock(ManualClock::new())
        .priorities(classes)
        .build();
    let err = lim.check_with(Check::cost(2).class(2)).unwrap_err();
    assert_eq!(err.capacity(), 1);
}

#[test]
fn no_class_is_left_with_zero_capacity_after_set_quota_lowers_the_burst() {
    let classes = Priorities::new([(0, 0.0), (2, 0.95)]).unwrap();
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("100/s"))
        .clock(clock.clone())
        .priorities(classes.clone())
        .build();
    let keyed = KeyedRateLimiter::<u8>::builder(q("100/s"))
        .clock(clock.clone())
        .priorities(classes.clone())
        .build();
    assert_eq!(
        lim.check_with(Check::cost(6).class(2))
            .unwrap_err()
            .capacity(),
        5
    );
    lim.set_quota(q("10/s"));
    keyed.set_quota(q("10/s"));
    assert!(classes.clone().for_quota(&q("10/s")).is_err());
    assert!(lim
        .check_with(Check::cost(1).class(2))
        .unwrap()
        .is_permitted());
    assert!(keyed
        .check_key_with(&7, Check::cost(1).class(2))
        .unwrap()
        .is_permitted());
    // One unit, not more: the next one waits for the cell to drain below the class's share.
    let v = lim.check_with(Check::cost(1).class(2)).unwrap();
    assert_eq!(
        v.denied().unwrap().retry_after(),
        Duration::from_millis(100)
    );
    // Class 0 still finds the rest of the burst.
    assert!(lim.check_with(Check::cost(9)).unwrap().is_permitted());
}

/// The reference: one cell, τ = 1 s, T = 10 ms, reserves 0 / 20 % / 50 % (class 3 unknown).
struct Model {
    tat: u128,
    now: u128,
}

const T: u128 = 10_000_000;
const TAU: u128 = 1_000_000_000;

fn tolerance(class: u8) -> u128 {
    match class {
        0 => TAU,
        1 => TAU * 8 / 10,
        _ => TAU / 2,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 256 } else { 2048 }))]

    /// Lower classes never reach into the reserve, and the engine agrees with the model.
    #[test]
    fn lower_classes_never_use_the_reserve(
        ops in prop::collection::vec(
            (0u8..4, 1u64..=110, prop_oneof![6 => Just(0u64), 1 => 0u64..200]),
            1..200,
        ),
    ) {
        let clock = ManualClock::new();
        let lim = link("100/s", &clock).priorities(classes()).build();
        let mut m = Model { tat: 0, now: 0 };
        for (class, cost, advance_ms) in ops {
            clock.advance(Duration::from_millis(advance_ms));
            m.now += u128::from(advance_ms) * 1_000_000;
            let tol = tolerance(class);
            let w = u128::from(cost) * T;
            let got = lim.check_with(Check::cost(cost).class(class));
            if w > tol {
                prop_assert_eq!(got.unwrap_err().capacity() as u128, tol / T);
                continue;
            }
            let base = m.tat.min(m.now + TAU).max(m.now);
            let ahead = base + w - m.now;
            match got.unwrap() {
                Verdict::Allow(a) => {
                    prop_assert!(ahead <= tol);
                    prop_assert_eq!(a.reset_after().as_nanos(), ahead);
                    prop_assert_eq!(u128::from(a.remaining()), (tol - ahead) / T);
                    m.tat = base + w;
                }
                Verdict::Deny(d) => {
                    prop_assert!(ahead > tol);
                    prop_assert_eq!(d.retry_after().as_nanos(), ahead - tol);
                }
                other => prop_assert!(false, "unexpected {:?}", other),
            }
            if class > 0 && m.tat == base + w {
                prop_assert!(m.tat <= m.now + tol, "a class-{} allow left the TAT in the reserve", class);
            }
        }
    }

    /// However lower classes saturate the cell, class 0 still finds the reserve of the
    /// least-reserving lower class (20 % of the burst: 20 requests).
    #[test]
    fn class_zero_always_finds_its_reserve(
        ops in prop::collection::vec((1u8..4, 1u64..=50), 1..300),
    ) {
        let clock = ManualClock::new();
        let lim = link("100/s", &clock).priorities(classes()).build();
        for (class, cost) in ops {
            let _ = lim.check_with(Check::cost(cost).class(class)).unwrap();
        }
        prop_assert!(lim.check_with(Check::cost(20)).unwrap().is_permitted());
    }

    /// Whatever the reserve and the burst, every class can send one unit into an empty cell;
    /// `for_quota` accepts exactly the pairs where the reserve alone leaves it one.
    #[test]
    fn every_class_always_has_a_unit(
        reserve in 0.0f64..0.9999,
        burst in 1u64..=64,
        bytes in any::<bool>(),
    ) {
        let quota = if bytes {
            format!("1000B/s;burst={burst}B")
        } else {
            format!("1000/s;burst={burst}")
        };
        let classes = Priorities::new([(0, 0.0), (1, reserve)]).unwrap();
        every_class_can_send_one(&quota, &classes).map_err(TestCaseError::fail)?;
        let ppm = (reserve * 1e6).round() as u64;
        let kept = burst * (1_000_000 - ppm) / 1_000_000;
        prop_assert_eq!(classes.clone().for_quota(&q(&quota)).is_ok(), kept >= 1);
    }
}
