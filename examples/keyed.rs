//! One cell per customer, bounded: what a gateway does with attacker-controlled keys.
//!
//! Run with `cargo run --example keyed`.

use std::time::Duration;

use tollgate::{DenyReason, KeyedRateLimiter, ManualClock, Verdict};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    // Each customer may send 5 requests per second; at most 1,000 customers are tracked at
    // once, and anyone past that shares one overflow cell of 50/s.
    let lim: KeyedRateLimiter<String> = KeyedRateLimiter::builder("5/s".parse()?)
        .clock(clock.clone())
        .max_keys(1_000)
        .overflow_quota("50/s".parse()?)
        .build();

    let allowed = (0..8)
        .filter(|_| lim.check_key("alice").is_permitted())
        .count();
    println!("alice sent 8 at once: {allowed} allowed");
    if let Verdict::Deny(d) = lim.check_key("alice") {
        println!("alice again: denied, retry after {:?}", d.retry_after());
    }

    // A flood of one-off keys fills the table; the newcomers share the overflow cell.
    let mut full = 0;
    for i in 0..5_000 {
        if let Verdict::Deny(d) = lim.check_key(format!("bot-{i}").as_str()) {
            if d.reason() == DenyReason::KeyTableFull {
                full += 1;
            }
        }
    }
    println!(
        "5,000 bot keys: {} tracked, {full} denied with KeyTableFull",
        lim.len()
    );
    println!(
        "alice is still tracked and still limited: permitted = {}",
        lim.check_key("alice").is_permitted()
    );

    // Idle keys are indistinguishable from new ones and are swept as new keys arrive.
    clock.advance(Duration::from_secs(2));
    println!(
        "two seconds later, carol: permitted = {}",
        lim.check_key("carol").is_permitted()
    );
    println!("tracked keys now: {}", lim.len());
    Ok(())
}
