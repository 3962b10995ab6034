//! Async waits: `until_ready`, `until_n_ready`, `until_key_ready`,
//! `until_key_n_ready` — driven by a `ManualClock` whose "sleep" advances it (no real
//! sleeping), plus a paused tokio runtime (feature `tokio`).

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tollgate::safety::FaultDetector;
use tollgate::{
    DenyReason, KeyedRateLimiter, ManualClock, PassReason, Quota, RateLimiter, Shadow, Verdict,
    Wait,
};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// Polls `f` to completion; the sleeps used here complete at once, so this never spins long.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    let mut f = pin!(f);
    for _ in 0..1_000_000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("the future did not complete")
}

/// A sleep that advances `clock` by the duration asked and records it.
fn advancing(
    clock: &ManualClock,
) -> (
    impl Fn(Duration) -> std::future::Ready<()> + '_,
    Rc<RefCell<Vec<Duration>>>,
) {
    let log = Rc::new(RefCell::new(Vec::new()));
    let seen = Rc::clone(&log);
    let sleep = move |d: Duration| {
        seen.borrow_mut().push(d);
        clock.advance(d);
        std::future::ready(())
    };
    (sleep, log)
}

#[test]
fn a_wait_sleeps_the_retry_after_plus_at_most_half_then_is_allowed() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("10/s;burst=2"))
        .clock(clock.clone())
        .build();
    let (sleep, log) = advancing(&clock);
    assert!(block_on(lim.until_ready_with(Wait::new(&sleep))).is_permitted());
    assert!(block_on(lim.until_ready_with(Wait::new(&sleep))).is_permitted());
    assert!(log.borrow().is_empty(), "the burst needs no wait");
    for _ in 0..20 {
        let before = clock.now();
        let v = block_on(lim.until_ready_with(Wait::new(&sleep)));
        assert!(v.is_permitted());
        let waited = clock.now() - before;
        // At most 100 ms until the next unit, plus at most half of it in jitter (a wait that
        // overslept leaves the cell that much fuller for the next one).
        assert!(
            waited > Duration::ZERO && waited <= Duration::from_millis(150),
            "{waited:?}"
        );
    }
    // 22 allowed with a burst of 2 at 10/s: never sooner than 2 s, and the jitter costs
    // less than half of it.
    assert!(clock.now() >= Duration::from_secs(2), "{:?}", clock.now());
    assert!(clock.now() <= Duration::from_secs(3), "{:?}", clock.now());
    let sleeps = log.borrow();
    assert_eq!(
        sleeps.len(),
        20,
        "one sleep per wait: it never wakes too early"
    );
    let distinct: std::collections::HashSet<_> = sleeps.iter().collect();
    assert!(distinct.len() > 15, "jittered: {sleeps:?}");
}

#[test]
fn n_units_wait_for_n_units_and_more_than_the_burst_is_an_error_at_once() {
    let clock = ManualClock::new();
    let lim = RateLimiter::builder(q("10/s")).clock(clock.clone()).build();
    let (sleep, log) = advancing(&clock);
    assert!(lim.check_n(10).unwrap().is_permitted());
    let v = block_on(lim.until_n_ready_with(6, Wait::new(&sleep))).unwrap();
    assert!(v.is_permitted());
    assert!(clock.now() >= Duration::from_millis(600));
    assert!(clock.now() <= Duration::from_millis(900));
    let e = block_on(lim.until_n_ready_with(11, Wait::new(&sleep))).unwrap_err();
    assert_eq!((e.cost(), e.capacity()), (11, 10));
    assert_eq!(log.borrow().len(), 1, "no sleep for an impossible cost");
    assert!(block_on(lim.until_n_ready_with(0, Wait::new(&sleep)))
        .unwrap()
        .is_permitted());

    let keyed = KeyedRateLimiter::<String>::builder(q("10/s"))
        .clock(clock.clone())
        .build();
    assert!(keyed.check_key_n("a", 10).unwrap().is_permitted());
    let start = clock.now();
    let v = block_on(keyed.until_key_n_ready_with("a", 3, Wait::new(&sleep))).unwrap();
    assert!(v.is_permitted());
    assert!(clock.now() - start >= Duration::from_millis(300));
    assert!(block_on(keyed.until_key_n_ready_with("a", 11, Wait::new(&sleep))).is_err());
    assert!(block_on(keyed.until_key_ready_with("b", Wait::new(&sleep))).is_permitted());
}

#[test]
fn max_wait_returns_the_denial_instead_of_waiting_past_it() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("1/s;burst=1"))
        .clock(clock.clone())
        .build();
    let (sleep, log) = advancing(&clock);
    assert!(lim.check_key(&1).is_permitted());
    // 1 s to wait, at most 300 ms allowed: the denial, at once, with its exact retry-after.
    let wait = Wait::new(&sleep).max_wait(Duration::from_millis(300));
    let v = block_on(lim.until_key_ready_with(&1, wait));
    assert_eq!(
        v.denied().map(|d| (d.reason(), d.retry_after())),
        Some((DenyReason::Quota, Duration::from_secs(1)))
    );
    assert!(log.borrow().is_empty() && clock.now() == Duration::ZERO);
    // Enough: it waits (jitter cut at max_wait) and is allowed.
    let wait = Wait::new(&sleep).max_wait(Duration::from_millis(1_100));
    assert!(block_on(lim.until_key_ready_with(&1, wait)).is_permitted());
    assert!(clock.now() >= Duration::from_secs(1) && clock.now() <= Duration::from_millis(1_100));
    // Zero: one check, no sleep.
    let wait = Wait::new(&sleep).max_wait(Duration::ZERO);
    assert!(!block_on(lim.until_key_ready_with(&1, wait)).is_permitted());
    assert_eq!(log.borrow().len(), 1);
}

#[test]
fn a_wait_that_can_never_pass_returns_instead_of_sleeping_forever() {
    // A clock at the end of time: every check overflows (retry-after Duration::MAX).
    let clock = ManualClock::at(Duration::from_nanos(u64::MAX - 2));
    let lim = RateLimiter::builder(q("1/s")).clock(clock.clone()).build();
    let (sleep, log) = advancing(&clock);
    let v = block_on(lim.until_ready_with(Wait::new(&sleep)));
    assert_eq!(
        v.denied().map(|d| d.reason()),
        Some(DenyReason::ClockOverflow)
    );
    assert!(log.borrow().is_empty());
}

/// Many waiters denied at the same instant: their first sleeps are spread over
/// `[retry_after, 1.5 × retry_after]`, and dropping every one of them mid-sleep leaves the
/// limiter exactly as it was (the waits only checked).
#[test]
fn waiters_wake_spread_out_and_a_dropped_wait_leaves_nothing_behind() {
    let clock = ManualClock::new();
    let lim = KeyedRateLimiter::<u64>::builder(q("10/s;burst=1"))
        .clock(clock.clone())
        .build();
    let direct = RateLimiter::builder(q("10/s;burst=1"))
        .clock(clock.clone())
        .build();
    assert!(lim.check_key(&1).is_permitted());
    assert!(direct.check().is_permitted());
    let (key_before, direct_before) = (lim.peek_key(&1), direct.peek());
    let asked = Rc::new(RefCell::new(Vec::new()));
    // A sleep that never ends: the wait is parked in its first sleep.
    let never = |d: Duration| {
        asked.borrow_mut().push(d);
        std::future::pending::<()>()
    };
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..50 {
        let mut f = Box::pin(lim.until_key_ready_with(&1, Wait::new(never)));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        let mut g = Box::pin(direct.until_ready_with(Wait::new(never)));
        assert!(g.as_mut().poll(&mut cx).is_pending());
        // dropped here, mid-sleep
    }
    let asked = asked.borrow();
    assert_eq!(asked.len(), 100);
    let (lo, hi) = (Duration::from_millis(100), Duration::from_millis(150));
    assert!(asked.iter().all(|d| (lo..=hi).contains(d)), "{asked:?}");
    let distinct: std::collections::HashSet<_> = asked.iter().collect();
    assert!(
        distinct.len() > 90,
        "not in lockstep: {} distinct",
        distinct.len()
    );
    assert_eq!(lim.peek_key(&1), key_before);
    assert_eq!(direct.peek(), direct_before);
    assert_eq!(lim.len(), 1);
    let stats = lim.stats();
    assert_eq!((stats.allowed, stats.denied_quota), (1, 50));
    // After the retry-after, exactly one unit is there: nothing was reserved meanwhile.
    clock.advance(Duration::from_millis(100));
    assert!(lim.check_key(&1).is_permitted());
    assert!(!lim.check_key(&1).is_permitted());
}

#[test]
fn a_pass_through_ends_the_wait_as_permitted() {
    let clock = ManualClock::new();
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let lim = RateLimiter::builder(q("1/s"))
        .clock(clock.clone())
        .detector(detector.clone())
        .build();
    let (sleep, log) = advancing(&clock);
    assert!(matches!(
        block_on(lim.until_ready_with(Wait::new(&sleep))),
        Verdict::Allow(_)
    ));
    detector.force_pass_through(PassReason::Forced, Duration::from_secs(60));
    let v = block_on(lim.until_ready_with(Wait::new(&sleep)));
    let Verdict::PassThrough(p) = v else {
        panic!("expected a pass-through: {v:?}")
    };
    assert_eq!((p.reason(), p.shadow()), (PassReason::Forced, Shadow::Deny));
    assert!(log.borrow().is_empty(), "nothing waited");
}

#[cfg(feature = "tokio")]
mod tokio_waits {
    use std::sync::Arc;
    use std::time::Duration;

    use tollgate::{Clock, KeyedRateLimiter, RateLimiter, Wait};

    /// A limiter clock on tokio's (paused) time, so auto-advanced sleeps move it.
    fn tokio_clock() -> Clock {
        let start = tokio::time::Instant::now();
        Clock::from_fn(move || u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_on_a_paused_runtime_take_turns() {
        let lim = Arc::new(
            KeyedRateLimiter::<String>::builder("10/s;burst=1".parse().unwrap())
                .clock(tokio_clock())
                .build(),
        );
        let start = tokio::time::Instant::now();
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let lim = Arc::clone(&lim);
                tokio::spawn(async move {
                    assert!(lim.until_key_ready("alice").await.is_permitted());
                    start.elapsed()
                })
            })
            .collect();
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.unwrap());
        }
        done.sort();
        // One per 100 ms: the last of ten at 900 ms or later (jitter adds at most half).
        assert!(done[9] >= Duration::from_millis(900), "{done:?}");
        assert!(done[9] <= Duration::from_millis(3_000), "{done:?}");
        for pair in done.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(99) || pair[0] == Duration::ZERO);
        }

        let direct = RateLimiter::builder("10/s;burst=1".parse().unwrap())
            .clock(tokio_clock())
            .build();
        assert!(direct.until_ready().await.is_permitted());
        assert!(direct.until_n_ready(2).await.is_err());
        let wait = Wait::tokio().max_wait(Duration::from_millis(10));
        assert!(!direct.until_ready_with(wait).await.is_permitted());
        assert!(direct.until_n_ready(1).await.unwrap().is_permitted());
    }
}
