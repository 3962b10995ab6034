//! The breaker's state machine, on explicit clock readings.

use crate::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use super::*;
use crate::engine::clock::ManualClock;

const MS: u64 = 1_000_000;

fn config() -> BreakerConfig {
    BreakerConfig::new()
        .consecutive_failures(3)
        .error_ratio(0.5, 10)
        .open_for(Duration::from_millis(100), Duration::from_millis(400))
}

fn is_call(p: Permit) -> bool {
    matches!(p, Permit::Call { .. })
}

fn is_probe(p: Permit) -> bool {
    matches!(p, Permit::Probe { .. })
}

/// `n` calls let through at `now` that then fail.
fn fail(b: &Breaker, now: u64, n: usize) {
    for _ in 0..n {
        let p = b.permit(now);
        b.failure(now, p);
    }
}

#[test]
fn opens_after_consecutive_failures_then_probes_once() {
    let b = Breaker::new(config());
    fail(&b, 0, 2);
    let p = b.permit(0);
    assert!(is_call(p));
    b.failure(0, p);
    assert_eq!(b.permit(0), Permit::Reject);
    assert_eq!(
        b.permit(49 * MS),
        Permit::Reject,
        "at least half the cool-down"
    );
    // After at most 1.5 × 100 ms: one probe, then nothing until it reports.
    let probe = b.permit(150 * MS);
    assert!(is_probe(probe));
    assert_eq!(b.permit(151 * MS), Permit::Reject);
    assert!(b.success(152 * MS, probe));
    assert!(is_call(b.permit(152 * MS)));
    assert_eq!(b.opened(), 1);
}

#[test]
fn failed_probes_double_the_cool_down_up_to_the_cap() {
    let b = Breaker::new(config());
    fail(&b, 0, 3);
    let mut now = 0;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let start = now;
        let probe = loop {
            let p = b.permit(now);
            if is_probe(p) {
                break p;
            }
            now += MS;
        };
        waits.push(now - start);
        b.failure(now, probe);
    }
    // Cool-downs of 100, 200, 400, 400, 400 ms, each jittered to [0.5, 1.5).
    for (w, base) in waits.iter().zip([100, 200, 400, 400, 400]) {
        assert!(
            *w >= base * MS / 2 && *w <= base * MS * 3 / 2 + MS,
            "{waits:?}"
        );
    }
    assert_eq!(b.opened(), 1, "one opening, however many failed probes");
}

#[test]
fn opens_on_the_error_ratio() {
    let b = Breaker::new(config());
    for i in 0..10 {
        let p = b.permit(i);
        if i % 2 == 1 {
            b.failure(i, p);
        } else {
            b.success(i, p);
        }
    }
    assert_eq!(
        b.permit(10),
        Permit::Reject,
        "5 of 10 failed, never 2 in a row"
    );
}

#[test]
fn late_failures_of_calls_made_while_closed_do_not_prolong_it() {
    let b = Breaker::new(config());
    let out: Vec<Permit> = (0..20).map(|_| b.permit(0)).collect();
    for p in out {
        b.failure(0, p);
    }
    assert!(is_probe(b.permit(150 * MS)), "still the first cool-down");
}

#[test]
fn a_lost_probe_does_not_keep_it_open_forever() {
    let b = Breaker::new(config());
    fail(&b, 0, 3);
    assert!(is_probe(b.permit(200 * MS)));
    // The probe's caller was cancelled: it never reports. Another probe goes later.
    assert_eq!(b.permit(220 * MS), Permit::Reject);
    assert!(is_probe(b.permit(400 * MS)));
}

/// A former bug: a call let through while the breaker was closed, answering within its
/// deadline after the breaker opened, closed it — during the outage that opened it.
#[test]
fn a_late_success_of_a_call_let_through_while_closed_leaves_it_open() {
    let clock = ManualClock::new();
    let now = || clock.nanos();
    let b = Breaker::new(config());
    let early = b.permit(now());
    assert!(is_call(early));
    clock.advance(Duration::from_millis(1));
    fail(&b, now(), 3);
    assert_eq!(b.permit(now()), Permit::Reject, "opened by the failures");
    clock.advance(Duration::from_millis(5));
    assert!(!b.success(now(), early), "the early call's late answer");
    assert!(b.is_open());
    assert_eq!(b.permit(now()), Permit::Reject, "still open");
    // Half-open, the probe out: the early call's answer still does not close it.
    clock.advance(Duration::from_millis(200));
    let probe = b.permit(now());
    assert!(is_probe(probe));
    assert!(!b.success(now(), early));
    assert_eq!(b.permit(now()), Permit::Reject, "the probe decides");
    // The probe fails: open again, whatever the early call says afterwards.
    b.failure(now(), probe);
    assert!(!b.success(now(), early));
    assert!(
        !b.success(now(), probe),
        "a probe reports once; its stale copy is ignored"
    );
    assert_eq!(b.permit(now()), Permit::Reject);
    // A probe that succeeds closes it.
    clock.advance(Duration::from_millis(400));
    let probe = b.permit(now());
    assert!(is_probe(probe));
    assert!(b.success(now(), probe));
    assert!(is_call(b.permit(now())));
    assert_eq!(b.opened(), 1);
}

/// A probe let through, then lost (its caller slower than the cool-down): the next probe
/// decides, and the first one's late answer does not.
#[test]
fn only_the_latest_probe_decides() {
    let clock = ManualClock::new();
    let now = || clock.nanos();
    let b = Breaker::new(config());
    fail(&b, now(), 3);
    clock.advance(Duration::from_millis(200));
    let first = b.permit(now());
    clock.advance(Duration::from_millis(200));
    let second = b.permit(now());
    assert!(is_probe(first) && is_probe(second) && first != second);
    assert!(!b.success(now(), first), "superseded");
    b.failure(now(), first);
    assert_eq!(
        b.permit(now()),
        Permit::Reject,
        "still waiting on the second"
    );
    b.failure(now(), second);
    assert_eq!(b.opened(), 1);
    assert!(b.is_open(), "the second probe failed: open again");
}

/// Threads report results of permits of every generation at once — calls let through
/// before it opened, earlier probes, the current probe — while others ask for permits.
/// The state machine holds: stale results never close or prolong it, a cool-down lets
/// exactly one probe through, only that probe's success closes it, and stale failures
/// say nothing about the period after.
#[test]
fn concurrent_reports_of_every_generation_keep_the_state_machine() {
    type Each = Arc<dyn Fn(&Breaker, u64) -> Permit + Send + Sync>;
    const THREADS: usize = 4;
    const STALE: usize = 4_000;
    let b = Arc::new(Breaker::new(config()));
    let now = Arc::new(AtomicU64::new(0));
    let stale: Arc<Vec<Permit>> = Arc::new((0..STALE).map(|_| b.permit(0)).collect());
    fail(&b, 0, 3);
    assert!(b.is_open());
    // Every stale permit reported (a success, and for a third a failure too), split
    // among the threads, each report followed by `each`; the permits `each` returned.
    let hammer = |each: Each| -> Vec<Permit> {
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (b, now, stale) = (b.clone(), now.clone(), stale.clone());
                let (barrier, each) = (barrier.clone(), each.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut got = Vec::new();
                    for (i, &p) in stale.iter().enumerate().skip(t).step_by(THREADS) {
                        let at = now.load(Ordering::Relaxed);
                        assert!(!b.success(at, p), "a stale success closed it");
                        if i % 3 == 0 {
                            b.failure(at, p);
                        }
                        got.push(each(&b, at));
                    }
                    got
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap()) // a test: a panic is its failure
            .collect()
    };
    let ask: Each = Arc::new(|b, at| b.permit(at));
    // Open, within the cool-down: every permit is a rejection.
    now.store(10 * MS, Ordering::Relaxed);
    let permits = hammer(ask.clone());
    assert!(permits.iter().all(|&p| p == Permit::Reject));
    assert!(b.is_open() && b.opened() == 1);
    // Past the longest first cool-down (150 ms), before any re-probe (≥ 50 ms later):
    // exactly one probe among all the threads' asks.
    now.store(200 * MS, Ordering::Relaxed);
    let permits = hammer(ask.clone());
    let probes: Vec<Permit> = permits.iter().copied().filter(|&p| is_probe(p)).collect();
    assert_eq!(probes.len(), 1, "one probe per cool-down");
    assert!(b.is_open(), "half-open until the probe reports");
    // The probe fails; stale results, the failed probe's included, keep coming: open
    // again, the cool-down doubled.
    b.failure(200 * MS, probes[0]);
    let failed = probes[0];
    let permits = hammer(Arc::new(move |b, at| {
        assert!(!b.success(at, failed), "the failed probe reported again");
        b.permit(at)
    }));
    assert!(permits.iter().all(|&p| p == Permit::Reject));
    // Past the doubled cool-down (at most 300 ms): the threads race for the probe, the one
    // that gets it reports success at once, the others keep reporting stale results.
    now.store(600 * MS, Ordering::Relaxed);
    let closings = Arc::new(AtomicU64::new(0));
    let c = closings.clone();
    let permits = hammer(Arc::new(move |b, at| {
        let p = b.permit(at);
        if is_probe(p) && b.success(at, p) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        p
    }));
    assert_eq!(permits.iter().filter(|&&p| is_probe(p)).count(), 1);
    assert_eq!(
        closings.load(Ordering::Relaxed),
        1,
        "closed by its probe, once"
    );
    assert!(!b.is_open());
    // Closed: thousands of stale failures (the threshold is 3) do not reopen it.
    let permits = hammer(ask);
    assert!(
        permits.iter().all(|&p| is_call(p)),
        "stale failures reopened it"
    );
    assert_eq!(b.opened(), 1);
    // Fresh failures still do.
    fail(&b, 600 * MS, 3);
    assert!(b.is_open() && b.opened() == 2);
}
