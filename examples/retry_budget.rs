//! Incident 003, replayed: the upstream fails every write, and 500 clients, each writing once
//! a second for 10 s, retry.
//!
//! * Without a budget, clients that retry at once, ten times, send 11× their real load.
//! * With a server-side [`RetryBudget`] (10 % of originals over 10 s, plus 10 retries/s) and
//!   clients that back off with jitter ([`Backoff`]), retries stay a small share of the load,
//!   the rest are denied with `DenyReason::RetryBudget` and a retry-after, and the stats count
//!   originals and retries apart.
//!
//! Everything runs on a `ManualClock` with seeded jitter, so every run prints the same.
//! Run with `cargo run --example retry_budget`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tollgate::safety::FaultDetector;
use tollgate::shaping::{AttemptFailure, Backoff, RetryBudget, RetryError};
use tollgate::{Check, DenyReason, ManualClock, RateLimiter, Verdict};

const CLIENTS: u64 = 500;
/// Writes per client, one a second.
const WRITES: u32 = 10;
/// Clients start 2 ms apart: 500 originals a second in all.
const SPACING: Duration = Duration::from_millis(2);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("500 clients x 10 writes over 10 s, upstream failing 100 %; server quota 10000/s");
    no_budget()?;
    with_budget()?;
    one_client()?;
    Ok(())
}

/// The incident: no budget, ten immediate retries per failed write.
fn no_budget() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let server = RateLimiter::builder("10000/s".parse()?)
        .clock(clock.clone())
        .build();
    let (mut originals, mut retries) = (0, 0);
    for _ in 0..CLIENTS * u64::from(WRITES) {
        for attempt in 0..=10 {
            if server
                .check_with(Check::cost(1).attempt(attempt))?
                .is_permitted()
            {
                // Admitted, and the upstream times out: retry at once.
                if attempt == 0 {
                    originals += 1;
                } else {
                    retries += 1;
                }
            }
        }
        clock.advance(SPACING);
    }
    println!(
        "  immediate retries, no budget: {originals} originals + {retries} retries admitted \
         = {:.1}x the real load",
        (originals + retries) as f64 / originals as f64
    );
    Ok(())
}

/// The fix: a budget on the server, `Backoff` on every client.
fn with_budget() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    // A detector is what keeps the stats (originals and retries apart).
    let detector = FaultDetector::builder().clock(clock.clone()).build();
    let server = RateLimiter::builder("10000/s".parse()?)
        .clock(clock.clone())
        .retry_budget(RetryBudget::new()) // 10 % over 10 s, plus 10 retries/s
        .detector(detector.clone())
        .build();

    // Each client has its own seeded backoff (3 retries, base 100 ms, cap 10 s).
    let clients: Vec<Backoff> = (0..CLIENTS)
        .map(|id| Backoff::builder().seed(id).build())
        .collect::<Result<_, _>>()?;
    // (when, client, attempt), earliest first.
    let mut queue: BinaryHeap<Reverse<(Duration, u64, u32)>> = (0..CLIENTS)
        .flat_map(|id| (0..WRITES).map(move |w| (id, w)))
        .map(|(id, w)| Reverse((SPACING * id as u32 + Duration::from_secs(w.into()), id, 0)))
        .collect();
    let (mut admitted, mut budget_denied, mut zero_delays) = ([0u64; 2], 0u64, 0u64);
    let (mut first_retry, mut last_retry) = (None, Duration::ZERO);
    let (mut told_min, mut told_max) = (Duration::MAX, Duration::ZERO);
    while let Some(Reverse((at, id, attempt))) = queue.pop() {
        clock.advance(at.saturating_sub(clock.now()));
        let verdict = server.check_with(Check::cost(1).attempt(attempt))?;
        if attempt > 0 {
            first_retry.get_or_insert(at);
            last_retry = at;
        }
        if verdict.is_permitted() {
            admitted[usize::from(attempt > 0)] += 1;
        }
        if let Some(d) = verdict.denied() {
            if d.reason() == DenyReason::RetryBudget {
                budget_denied += 1;
                told_min = told_min.min(d.retry_after());
                told_max = told_max.max(d.retry_after());
            }
        }
        // Permitted or not, the write failed: back off (with the server's retry-after on a
        // denial) while retries are left.
        let backoff = &clients[id as usize];
        if attempt < backoff.max_retries() {
            let delay = backoff.next_delay(attempt + 1, Some(&verdict));
            zero_delays += u64::from(delay.is_zero());
            queue.push(Reverse((at + delay, id, attempt + 1)));
        }
    }
    let [originals, retries] = admitted;
    let stats = detector.stats();
    println!(
        "  Backoff + RetryBudget:        {originals} originals + {retries} retries admitted \
         = {:.2}x the real load",
        (originals + retries) as f64 / originals as f64
    );
    // The budget's promise: within any 10 of its 1 s sub-buckets, at most 10 % of the
    // originals plus the floor's 100 (10/s × 10 s). Retries spanning `n` sub-buckets meet
    // ⌈n/10⌉ such windows, each with its own 100.
    let first_retry = first_retry.unwrap_or_default();
    let touched = last_retry.as_secs() - first_retry.as_secs() + 1;
    let windows = touched.div_ceil(10);
    println!(
        "    the budget's bound: 10 % of {originals} originals + 100 for each 10 s window the \
         retries touch\n      ({:.1} s to {:.1} s: {windows} windows) = {} retries",
        first_retry.as_secs_f64(),
        last_retry.as_secs_f64(),
        originals / 10 + 100 * windows
    );
    println!(
        "    {budget_denied} retries denied with RetryBudget, each told a retry-after between \
         {:.1} ms and {:.1} ms\n      (spread by the backlog, so the denied do not return \
         together); waits of zero: {zero_delays}",
        told_min.as_secs_f64() * 1e3,
        told_max.as_secs_f64() * 1e3
    );
    println!(
        "    stats(): original = {}, retries = {} (every retry attempt, admitted or not), \
         denied_retry_budget = {}",
        stats.original, stats.retries, stats.denied_retry_budget
    );
    Ok(())
}

/// One client through `Backoff::retry`: each delay, and what the server said.
fn one_client() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    // No floor, and 10 originals from other clients so far: room for one retry.
    let server = RateLimiter::builder("10000/s".parse()?)
        .clock(clock.clone())
        .retry_budget(RetryBudget::new().with_floor(0))
        .build();
    for _ in 0..10 {
        let _ = server.check();
    }
    let backoff = Backoff::builder().seed(7).build()?;
    println!(
        "one client (seed 7), a budget with no floor, 10 originals from others so far; each wait \
         is\n  its Backoff delay, or after a denial the server's retry-after plus jitter:"
    );
    let outcome: Result<(), RetryError<&str>> = backoff.retry(
        |attempt| {
            let check = Check::cost(1).attempt(attempt);
            match server.check_with(check).expect("cost 1 fits the burst") {
                Verdict::Deny(d) => {
                    let after = d.retry_after().as_secs_f64() * 1e3;
                    let reason = d.reason();
                    print!("  attempt {attempt}: denied ({reason:?}, retry after {after:.1} ms)");
                    Err(AttemptFailure::retry_after("429", d.retry_after()))
                }
                _ => {
                    print!("  attempt {attempt}: admitted, upstream timed out");
                    Err(AttemptFailure::retry("timeout"))
                }
            }
        },
        |delay| {
            println!(" -> waiting {:.1} ms", delay.as_secs_f64() * 1e3);
            clock.advance(delay); // std::thread::sleep(delay) in a real client
        },
    );
    if let Err(e) = outcome {
        println!(" -> {e}");
    }
    println!(
        "  with no floor only originals earn retries (11 of them earned the one admitted), and a \
         budget\n  that waiting alone cannot reopen answers one period, 10 s: that retry \
         has aged out by then"
    );
    Ok(())
}
