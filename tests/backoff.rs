//! Client backoff (the retries of incidents 000 and 003): every delay stays in its window for every
//! attempt and configuration and is never zero; a crowd denied together comes back spread
//! out; retries are bounded and the sleep function sees exactly the delays; a seed
//! reproduces the sequence.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::shaping::{
    AttemptFailure, Backoff, BackoffBuilder, BackoffDelays, BackoffError, RetryError,
};
use tollgate::{Check, ManualClock, RateLimiter, Verdict};

const MS: Duration = Duration::from_millis(1);
const MAX_NANOS: u128 = Duration::MAX.as_nanos();

fn seeded(seed: u64) -> Backoff {
    Backoff::builder().seed(seed).build().unwrap()
}

/// Oracle: `min(cap, base·2^(a−1))` in ns (`base/2` for attempt 0), by the obvious route.
fn plain_ceiling(b: &Backoff, attempt: u32) -> u128 {
    let base = b.base().as_nanos();
    let raw = match attempt {
        0 => base / 2,
        a if a > 128 => u128::MAX,
        a => base.saturating_mul(1 << (a - 1)),
    };
    raw.min(b.cap().as_nanos())
}

/// Oracle: the jitter window after a deny, `max(min(cap, base·2^a), retry_after/2)` in ns.
fn deny_window(b: &Backoff, attempt: u32, retry_after: Duration) -> u128 {
    let base = b.base().as_nanos();
    let exp = match attempt {
        a if a >= 128 => u128::MAX,
        a => base.saturating_mul(1 << a),
    };
    exp.min(b.cap().as_nanos()).max(retry_after.as_nanos() / 2)
}

fn assert_plain_delay(b: &Backoff, attempt: u32, d: Duration) {
    let lo = b.min_delay().as_nanos();
    let hi = plain_ceiling(b, attempt).max(lo);
    assert!(
        d > Duration::ZERO,
        "zero delay for attempt {attempt} of {b:?}"
    );
    assert!(
        (lo..=hi).contains(&d.as_nanos()),
        "attempt {attempt}: {d:?} outside [{lo}, {hi}] ns for {b:?}"
    );
}

fn assert_deny_delay(b: &Backoff, attempt: u32, retry_after: Duration, d: Duration) {
    let lo = retry_after.as_nanos().max(b.min_delay().as_nanos());
    let hi = (retry_after.as_nanos() + deny_window(b, attempt, retry_after))
        .max(lo)
        .min(MAX_NANOS);
    assert!(d > Duration::ZERO);
    assert!(
        (lo..=hi).contains(&d.as_nanos()),
        "attempt {attempt}, retry_after {retry_after:?}: {d:?} outside [{lo}, {hi}] ns for {b:?}"
    );
}

fn nanos(n: u128) -> Duration {
    Duration::new((n / 1_000_000_000) as u64, (n % 1_000_000_000) as u32)
}

/// Durations from 1 ns to `Duration::MAX`, weighted towards the realistic range.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (1u64..=60_000_000_000).prop_map(Duration::from_nanos),
        2 => any::<u64>().prop_map(Duration::from_nanos),
        1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        1 => Just(Duration::MAX),
        1 => Just(Duration::from_nanos(1)),
    ]
    .prop_map(|d| d.max(Duration::from_nanos(1)))
}

/// Every valid configuration: `0 < base ≤ cap`, `0 < min_delay ≤ cap`.
fn config() -> impl Strategy<Value = Backoff> {
    (duration(), duration(), duration(), 0u32..8, any::<u64>()).prop_map(|(a, b, m, n, seed)| {
        let (base, cap) = (a.min(b), a.max(b));
        let min_delay = nanos(m.as_nanos() % cap.as_nanos() + 1);
        Backoff::builder()
            .base(base)
            .cap(cap)
            .min_delay(min_delay)
            .max_retries(n)
            .seed(seed)
            .build()
            .unwrap()
    })
}

fn attempt() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 0u32..64, 1 => any::<u32>(), 1 => Just(u32::MAX)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 512 } else { 2048 }))]

    #[test]
    fn plain_delays_stay_within_their_window(b in config(), attempts in prop::collection::vec(attempt(), 1..16)) {
        for a in attempts {
            for _ in 0..4 {
                assert_plain_delay(&b, a, b.delay(a));
            }
        }
        let delays: Vec<Duration> = b.delays().collect();
        prop_assert_eq!(delays.len() as u32, b.max_retries());
        for (i, d) in delays.into_iter().enumerate() {
            assert_plain_delay(&b, i as u32 + 1, d);
        }
    }

    #[test]
    fn deny_delays_stay_within_their_window(b in config(), a in attempt(), retry_after in prop_oneof![duration(), Just(Duration::ZERO)]) {
        for _ in 0..4 {
            assert_deny_delay(&b, a, retry_after, b.after_deny(a, retry_after));
        }
    }

    #[test]
    fn builder_accepts_exactly_the_valid_configs(
        base in prop_oneof![Just(Duration::ZERO), duration()],
        cap in prop_oneof![Just(Duration::ZERO), duration()],
        min_delay in prop_oneof![Just(Duration::ZERO), duration()],
    ) {
        let got = Backoff::builder().base(base).cap(cap).min_delay(min_delay).build();
        let want = if base.is_zero() {
            Err(BackoffError::ZeroBase)
        } else if min_delay.is_zero() {
            Err(BackoffError::ZeroMinDelay)
        } else if cap < base {
            Err(BackoffError::CapBelowBase { cap, base })
        } else if min_delay > cap {
            Err(BackoffError::MinDelayAboveCap { min_delay, cap })
        } else {
            Ok(())
        };
        prop_assert_eq!(got.map(|_| ()), want);
    }
}

#[test]
fn defaults_are_the_documented_ones() {
    let b = Backoff::new();
    assert_eq!(b.base(), Duration::from_millis(100));
    assert_eq!(b.cap(), Duration::from_secs(10));
    assert_eq!(b.min_delay(), MS);
    assert_eq!(b.max_retries(), 3);
    assert_eq!(Backoff::builder(), BackoffBuilder::default());
    assert_eq!(
        format!("{b:?}"),
        "Backoff { base: 100ms, cap: 10s, min_delay: 1ms, max_retries: 3, .. }"
    );
    assert_eq!(b.delays().len(), 3);
}

#[test]
fn collapsed_windows_give_min_delay_never_zero() {
    // min_delay above base: the early windows are empty, so the delay is min_delay.
    let b = Backoff::builder()
        .base(Duration::from_nanos(1))
        .min_delay(Duration::from_millis(5))
        .seed(1)
        .build()
        .unwrap();
    assert_eq!(b.delay(0), Duration::from_millis(5));
    assert_eq!(b.delay(1), Duration::from_millis(5));
    assert_eq!(b.after_deny(0, Duration::ZERO), Duration::from_millis(5));
    // Extreme caps and attempts saturate instead of overflowing.
    let b = Backoff::builder()
        .cap(Duration::MAX)
        .seed(2)
        .build()
        .unwrap();
    for a in [63, 64, 127, 128, 1 << 20, u32::MAX] {
        assert_plain_delay(&b, a, b.delay(a));
        assert_deny_delay(&b, a, Duration::MAX, b.after_deny(a, Duration::MAX));
    }
    assert_eq!(b.after_deny(1, Duration::MAX), Duration::MAX);
}

#[test]
fn builder_errors_are_lowercase_and_name_the_values() {
    let s = |b: BackoffBuilder| b.build().unwrap_err().to_string();
    let b = Backoff::builder();
    assert_eq!(
        s(b.base(Duration::ZERO)),
        "backoff base is 0s: it must be greater than zero"
    );
    assert_eq!(
        s(b.min_delay(Duration::ZERO)),
        "backoff min_delay is 0s: a zero delay is an immediate retry"
    );
    assert_eq!(
        s(b.base(Duration::from_secs(1))
            .cap(Duration::from_millis(500))),
        "backoff cap 500ms is below its base 1s"
    );
    assert_eq!(
        s(b.min_delay(Duration::from_secs(11))),
        "backoff min_delay 11s is above its cap 10s"
    );
}

/// A real denial from a limiter: the second check on a one-request quota.
fn denial(quota: &str) -> (Verdict, Duration) {
    let lim = RateLimiter::builder(quota.parse().unwrap())
        .clock(ManualClock::new())
        .build();
    loop {
        let v = lim.check();
        if let Some(d) = v.denied() {
            return (v, d.retry_after());
        }
    }
}

/// `(returns span, busiest 100 ms / mean per 100 ms)` for return times (any window start).
fn spread(returns: &mut [Duration]) -> (Duration, f64) {
    returns.sort();
    let span = returns[returns.len() - 1] - returns[0];
    let window = Duration::from_millis(100);
    let mut busiest = 0;
    let mut start = 0;
    for end in 0..returns.len() {
        while returns[end] - returns[start] >= window {
            start += 1;
        }
        busiest = busiest.max(end - start + 1);
    }
    if span.is_zero() {
        return (span, f64::INFINITY);
    }
    let mean = returns.len() as f64 * window.as_secs_f64() / span.as_secs_f64();
    (span, busiest as f64 / mean)
}

fn assert_spread(label: &str, retry_after: Duration, mut returns: Vec<Duration>) {
    assert!(
        returns.iter().all(|&r| r >= retry_after),
        "{label}: back early"
    );
    let (span, ratio) = spread(&mut returns);
    // 1,000 uniform draws cover all but ~0.2 % of their window; allow 2 %.
    assert!(
        span.as_secs_f64() >= 0.98 * retry_after.as_secs_f64() / 2.0,
        "{label}: span {span:?} narrower than retry_after/2 = {:?}",
        retry_after / 2
    );
    // The incident-003 criterion is statistical: with under 20 returns per 100 ms on average
    // (a 1,000-client crowd spread over more than 5 s), chance alone makes a 3× bucket.
    let mean_per_100ms = returns.len() as f64 * 0.1 / span.as_secs_f64();
    if mean_per_100ms >= 20.0 {
        assert!(
            ratio <= 3.0,
            "{label}: busiest 100 ms is {ratio:.2}× the mean"
        );
    }
}

#[test]
fn a_denied_crowd_comes_back_spread_out() {
    const CLIENTS: u64 = 1_000;
    for quota in ["4/s", "1/s", "12/min", "1/min"] {
        let (verdict, retry_after) = denial(quota);
        for attempt in [1, 3] {
            // Each client its own seed.
            let returns = (0..CLIENTS)
                .map(|i| seeded(i).next_delay(attempt, Some(&verdict)))
                .collect();
            assert_spread(
                &format!("{quota} attempt {attempt}, own seeds"),
                retry_after,
                returns,
            );
            // One shared backoff (an SDK-wide instance).
            let shared = seeded(99);
            let returns = (0..CLIENTS)
                .map(|_| shared.next_delay(attempt, Some(&verdict)))
                .collect();
            assert_spread(
                &format!("{quota} attempt {attempt}, shared"),
                retry_after,
                returns,
            );
            // Clones of one backoff handed to every client: clones fork, so no lockstep.
            let returns = (0..CLIENTS)
                .map(|_| shared.clone().next_delay(attempt, Some(&verdict)))
                .collect();
            assert_spread(
                &format!("{quota} attempt {attempt}, clones"),
                retry_after,
                returns,
            );
        }
    }
}

#[test]
fn the_spread_measure_flags_lockstep() {
    // The incident's clients: all back at exactly retry_after.
    let (span, ratio) = spread(&mut vec![Duration::from_secs(1); 1_000]);
    assert_eq!((span, ratio), (Duration::ZERO, f64::INFINITY));
    // Most back at retry_after, a few spread over 500 ms: wide, but one 100 ms is a stampede.
    let mut returns: Vec<Duration> = (0..1_000u32)
        .map(|i| {
            Duration::from_secs(1) + Duration::from_micros(u64::from(i.saturating_sub(800)) * 2_500)
        })
        .collect();
    let (span, ratio) = spread(&mut returns);
    assert!(span >= Duration::from_millis(495));
    assert!(ratio > 3.0, "{ratio}");
}

#[test]
fn retry_stops_after_max_retries_and_sleeps_exactly_the_delays() {
    for max in [0, 1, 3, 10] {
        let b = Backoff::builder().max_retries(max).seed(5).build().unwrap();
        let twin = Backoff::builder().max_retries(max).seed(5).build().unwrap();
        let (mut calls, mut slept) = (Vec::new(), Vec::new());
        let out: Result<(), _> = b.retry(
            |a| {
                calls.push(a);
                Err(AttemptFailure::retry(a))
            },
            |d| slept.push(d),
        );
        assert_eq!(
            out,
            Err(RetryError::Exhausted {
                error: max,
                attempt: max
            })
        );
        assert_eq!(calls, (0..=max).collect::<Vec<_>>());
        assert_eq!(slept, twin.delays().collect::<Vec<_>>());
    }
}

#[test]
fn a_retry_after_hint_waits_after_deny() {
    let hint = Duration::from_millis(750);
    let b = Backoff::builder().max_retries(4).seed(6).build().unwrap();
    let twin = Backoff::builder().max_retries(4).seed(6).build().unwrap();
    let mut slept = Vec::new();
    let out: Result<(), _> = b.retry(
        |_| Err(AttemptFailure::retry_after("429", hint)),
        |d| slept.push(d),
    );
    assert_eq!(out.unwrap_err().attempt(), 4);
    let want: Vec<Duration> = (1..=4).map(|a| twin.after_deny(a, hint)).collect();
    assert_eq!(slept, want);
    for (a, d) in (1..).zip(slept) {
        assert_deny_delay(&b, a, hint, d);
    }
}

#[test]
fn a_fatal_error_stops_at_once() {
    let b = Backoff::builder().max_retries(10).seed(7).build().unwrap();
    for fatal_at in [0, 2] {
        let (mut calls, mut sleeps) = (0, 0);
        let out: Result<(), _> = b.retry(
            |a| {
                calls += 1;
                Err(if a == fatal_at {
                    AttemptFailure::fatal("denied for good")
                } else {
                    AttemptFailure::retry("timeout")
                })
            },
            |_| sleeps += 1,
        );
        let err = out.unwrap_err();
        assert_eq!(
            err,
            RetryError::Fatal {
                error: "denied for good",
                attempt: fatal_at
            }
        );
        assert_eq!(
            err.to_string(),
            format!("attempt {fatal_at} failed with an error that is not retryable")
        );
        assert_eq!((calls, sleeps), (fatal_at + 1, fatal_at));
        assert_eq!(err.into_error(), "denied for good");
    }
}

#[test]
fn retry_errors_chain_their_source() {
    let b = Backoff::builder().max_retries(1).seed(8).build().unwrap();
    let err = b
        .retry(
            |_| {
                Err::<(), _>(AttemptFailure::retry(std::io::Error::other(
                    "connection reset",
                )))
            },
            |_| {},
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "gave up after attempt 1: no retries left");
    let source = std::error::Error::source(&err).unwrap();
    assert_eq!(source.to_string(), "connection reset");
}

#[test]
fn retries_carry_their_attempt_number_to_the_limiter() {
    // A client retrying against a 1/s limiter on a manual clock: the sleep advances the clock.
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("1/s".parse().unwrap())
        .clock(clock.clone())
        .build();
    assert!(lim.check().is_permitted());
    let b = Backoff::builder().max_retries(5).seed(10).build().unwrap();
    let mut seen = Vec::new();
    let out = b.retry(
        |a| {
            seen.push(a);
            match lim.check_with(Check::cost(1).attempt(a)).unwrap() {
                Verdict::Deny(d) => Err(AttemptFailure::retry_after("429", d.retry_after())),
                _ => Ok(a),
            }
        },
        |d| clock.advance(d),
    );
    // Denied at once with a 1 s retry-after; the jittered wait is at least that.
    assert_eq!(out, Ok(1));
    assert_eq!(seen, [0, 1]);
    assert!(clock.now() >= Duration::from_secs(1));
}

/// A minimal executor: polls with a waker that does nothing until the future is ready.
fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
    }
}

/// Pending once, then ready: makes the async helper suspend between steps.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

#[test]
fn async_retry_matches_sync_retry() {
    let b = Backoff::builder().max_retries(3).seed(11).build().unwrap();
    let twin = Backoff::builder().max_retries(3).seed(11).build().unwrap();
    let (mut calls, mut slept) = (Vec::new(), Vec::new());
    let out: Result<(), _> = block_on(b.retry_async(
        |a| {
            calls.push(a);
            std::future::ready(Err(AttemptFailure::retry("timeout")))
        },
        |d| {
            slept.push(d);
            std::future::ready(())
        },
    ));
    assert_eq!(
        out,
        Err(RetryError::Exhausted {
            error: "timeout",
            attempt: 3
        })
    );
    assert_eq!(calls, [0, 1, 2, 3]);
    assert_eq!(slept, twin.delays().collect::<Vec<_>>());

    // Suspending futures, a success on attempt 2, and a fatal error.
    let mut slept = 0;
    let out = block_on(b.retry_async(
        |a| async move {
            YieldOnce(false).await;
            if a < 2 {
                Err(AttemptFailure::retry("timeout"))
            } else {
                Ok(a)
            }
        },
        |_| {
            slept += 1;
            YieldOnce(false)
        },
    ));
    assert_eq!((out, slept), (Ok(2), 2));
    let out: Result<(), _> =
        block_on(b.retry_async(|_| async { Err(AttemptFailure::fatal("no")) }, |_| async {}));
    assert_eq!(
        out,
        Err(RetryError::Fatal {
            error: "no",
            attempt: 0
        })
    );
}

fn sequence(b: &Backoff) -> Vec<Duration> {
    let mut v: Vec<Duration> = (1..=20).map(|a| b.delay(a)).collect();
    v.extend((1..=5).map(|a| b.after_deny(a, Duration::from_secs(1))));
    v
}

#[test]
fn same_seed_same_sequence_different_seeds_differ() {
    assert_eq!(sequence(&seeded(42)), sequence(&seeded(42)));
    let a = seeded(42);
    let b = seeded(42);
    assert_eq!(
        a.delays().collect::<Vec<_>>(),
        b.delays().collect::<Vec<_>>()
    );
    let mut all: Vec<Vec<Duration>> = (0..200).map(|s| sequence(&seeded(s))).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 200, "two seeds gave the same sequence");
    // Unseeded backoffs draw their seeds from RandomState: they differ too.
    assert_ne!(sequence(&Backoff::new()), sequence(&Backoff::new()));
}

#[test]
fn clones_fork_deterministically() {
    let (a, b) = (seeded(3), seeded(3));
    let (ca, cb) = (a.clone(), b.clone());
    assert_eq!(sequence(&ca), sequence(&cb), "a fork follows from the seed");
    assert_ne!(
        sequence(&ca),
        sequence(&a),
        "a fork does not repeat its parent"
    );
    assert_eq!(format!("{ca:?}"), format!("{a:?}"));
}

#[test]
fn a_shared_backoff_is_thread_safe() {
    fn assert_send_sync<T: Send + Sync + Clone + std::fmt::Debug>() {}
    assert_send_sync::<Backoff>();
    assert_send_sync::<BackoffBuilder>();
    assert_send_sync::<BackoffError>();
    assert_send_sync::<RetryError<std::io::ErrorKind>>();
    assert_send_sync::<AttemptFailure<String>>();
    fn assert_send<T: Send>(_: &T) {}
    let b = &seeded(12);
    assert_send(&b.retry_async(|_| async { Ok::<_, AttemptFailure<()>>(()) }, |_| async {}));
    let delays: BackoffDelays<'_> = b.delays();
    assert_send(&delays);

    let delays: Vec<Vec<Duration>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8u32)
            .map(|t| s.spawn(move || (0..10_000u32).map(|i| b.delay(i % 70 + t)).collect()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, v) in (0..8u32).zip(&delays) {
        for (i, &d) in (0..).zip(v) {
            assert_plain_delay(b, i % 70 + t, d);
        }
    }
}
