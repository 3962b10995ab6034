//! The tour: quotas with units, a burst, a denial with its exact retry-after, and a quota
//! without a unit rejected with a hint.
//!
//! Run with `cargo run --example quickstart`.

use std::time::Duration;

use tollgate::{KeyedRateLimiter, ManualClock, Quota, RateLimiter, Verdict};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Quotas always carry their unit; Display gives the canonical form.
    for text in ["10/s", "600/min", "100/s;burst=250", "2Gbit/s;burst=64MiB"] {
        let quota: Quota = text.parse()?;
        println!(
            "{text:>22} -> {quota} (burst {}, interval {:?})",
            quota.burst(),
            quota.interval()
        );
    }
    let a: Quota = "2Gbit/s".parse()?;
    let b: Quota = "250MB/s".parse()?;
    println!("\"2Gbit/s\" == \"250MB/s\": {}", a == b);

    // A burst of 3, then a denial that says exactly when to come back. The manual clock keeps
    // the output the same on every run; real code uses the default monotonic clock.
    let clock = ManualClock::new();
    let lim = RateLimiter::builder("3/s".parse()?)
        .clock(clock.clone())
        .build();
    for i in 1..=4 {
        match lim.check() {
            Verdict::Allow(a) => println!("request {i}: allowed, {} left", a.remaining()),
            Verdict::Deny(d) => {
                println!("request {i}: denied, retry after {:?}", d.retry_after());
                clock.advance(d.retry_after() - Duration::from_nanos(1));
                println!("  1 ns early: permitted = {}", lim.check().is_permitted());
                clock.advance(Duration::from_nanos(1));
                println!("  on time:    permitted = {}", lim.check().is_permitted());
            }
            other => println!("request {i}: {other:?}"),
        }
    }

    // One cell per customer, looked up by &str without allocating.
    let per_customer: KeyedRateLimiter<String> = KeyedRateLimiter::builder("1/min".parse()?)
        .clock(clock.clone())
        .build();
    for customer in ["alice", "alice", "bob"] {
        let verdict = per_customer.check_key(customer);
        println!("{customer}: permitted = {}", verdict.is_permitted());
    }

    // The incident-001 typo: a limit without its unit is an error, not 10 per something.
    for bad in ["10", "10kB", "10/m", "10 /s"] {
        match bad.parse::<Quota>() {
            Ok(q) => println!("{bad:?} unexpectedly parsed as {q}"),
            Err(e) => println!("{bad:?} rejected ({:?}): {e}", e.kind()),
        }
    }
    Ok(())
}
