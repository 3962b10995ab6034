//! Incident 003's retry storm, end to end: 1,000 clients whose upstream fails every write,
//! retrying with `Backoff` (client side) under a `RetryBudget` (server side), simulated as
//! discrete events on a `ManualClock`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tollgate::shaping::{Backoff, RetryBudget};
use tollgate::{Check, ManualClock, RateLimiter, Verdict};

const CLIENTS: u64 = 1_000;
/// Every client sends one write a second for 10 s: 10,000 originals in all.
const WRITES: u64 = 10;

struct RequestOutcome {
    originals: u64,
    retries_admitted: u64,
    retry_times: Vec<u64>,
    span_ns: u64,
    min_delay: Duration,
}

fn storm(budget: Option<RetryBudget>) -> RequestOutcome {
    let clock = ManualClock::new();
    let mut builder = RateLimiter::builder("20000/s".parse().unwrap()).clock(clock.clone());
    if let Some(b) = budget {
        builder = builder.retry_budget(b);
    }
    let lim = builder.build();
    // (when, client, write, attempt), earliest first.
    let mut events = BinaryHeap::new();
    for c in 0..CLIENTS {
        for w in 0..WRITES {
            // Originals spread evenly: client c sends write w at w s + c ms.
            events.push(Reverse((w * 1_000_000_000 + c * 1_000_000, c, w, 0u32)));
        }
    }
    let backoffs: Vec<Backoff> = (0..CLIENTS)
        .map(|c| Backoff::builder().seed(c).max_retries(3).build().unwrap())
        .collect();
    let mut out = RequestOutcome {
        originals: 0,
        retries_admitted: 0,
        retry_times: Vec::new(),
        span_ns: 0,
        min_delay: Duration::MAX,
    };
    while let Some(Reverse((at, c, w, attempt))) = events.pop() {
        clock.set(Duration::from_nanos(at));
        let v = lim.check_with(Check::cost(1).attempt(attempt)).unwrap();
        if attempt == 0 {
            out.originals += 1;
        } else {
            out.retry_times.push(at);
            out.retries_admitted += u64::from(v.is_permitted());
        }
        // The upstream fails every admitted write; a denied one was never sent. Either way
        // the client retries, while it has retries left.
        let backoff = &backoffs[c as usize];
        if attempt < backoff.max_retries() {
            let verdict: Option<&Verdict> = (!v.is_permitted()).then_some(&v);
            let delay = backoff.next_delay(attempt + 1, verdict);
            out.min_delay = out.min_delay.min(delay);
            let next = at.saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX));
            if next < 3_600_000_000_000 {
                events.push(Reverse((next, c, w, attempt + 1)));
            }
        }
    }
    if let (Some(first), Some(last)) = (out.retry_times.first(), out.retry_times.last()) {
        out.span_ns = last - first;
    }
    out
}

#[test]
fn a_retry_storm_under_a_budget_stays_within_a_tenth_of_the_originals() {
    let budget = RetryBudget::new(); // 10 % over 10 s, plus 10 retries a second
    let out = storm(Some(budget));
    // The budget's promise: within any 10 of its 1 s sub-buckets, at most 10 % of the
    // originals plus the floor's 100 retries. The retries touch `n` sub-buckets: ⌈n/10⌉
    // such windows, each with its own 100.
    let (first, last) = (out.retry_times[0], out.span_ns + out.retry_times[0]);
    let touched = last / 1_000_000_000 - first / 1_000_000_000 + 1;
    let bound = 1.1 * out.originals as f64 + 100.0 * touched.div_ceil(10) as f64;
    let admitted = (out.originals + out.retries_admitted) as f64;
    println!(
        "with Backoff and a RetryBudget: {} originals, {} retries admitted ({:.3}× originals); bound {:.0}",
        out.originals,
        out.retries_admitted,
        admitted / out.originals as f64,
        bound
    );
    assert_eq!(out.originals, CLIENTS * WRITES);
    assert!(admitted <= bound, "admitted {admitted}, bound {bound}");
    assert!(out.min_delay > Duration::ZERO, "no zero delays");

    // The busiest 100 ms of retries against the mean rate over [first retry, last retry]:
    // denied clients must not come back in step (it was once 8.8× when every client the
    // budget denied learnt the same reopening instant).
    let mut times = out.retry_times.clone();
    times.sort_unstable();
    let window = 100_000_000u64;
    let (mut busiest, mut start) = (0usize, 0usize);
    for end in 0..times.len() {
        while times[end] - times[start] >= window {
            start += 1;
        }
        busiest = busiest.max(end - start + 1);
    }
    let mean = times.len() as f64 * window as f64 / out.span_ns as f64;
    let ratio = busiest as f64 / mean;
    println!("busiest 100 ms of retries: {busiest}, mean {mean:.1}: {ratio:.2}×");
    assert!(ratio <= 3.0, "busiest 100 ms is {ratio:.2}× the mean");
}

#[test]
fn without_a_budget_the_same_storm_multiplies_the_load() {
    let out = storm(None);
    let factor = (out.originals + out.retries_admitted) as f64 / out.originals as f64;
    println!("without a budget: {factor:.2}× the originals admitted");
    assert!(factor > 3.0, "{factor}");
}
