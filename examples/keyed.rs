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
    let (mut allowed, mut full) = (0, 0);
    for i in 0..5_000 {
        match lim.check_key(format!("bot-{i}").as_str()) {
            Verdict::Deny(d) if d.reason() == DenyReason::KeyTableFull => full += 1,
            v => allowed += usize::from(v.is_permitted()),
        }
    }
    // Every bot that got a cell of its own was allowed its first request.
    let tracked_bots = lim.len() - 1;
    println!(
        "5,000 bot keys: the table is full at {} keys (alice and {tracked_bots} bots); the other \
         {} bots share the 50/s overflow cell,\n  whose burst let {} through; {full} denied with \
         KeyTableFull",
        lim.len(),
        5_000 - tracked_bots,
        allowed - tracked_bots
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
    println!(
        "tracked keys now: {} (never more than max_keys; idle keys make room for new ones)",
        lim.len()
    );
    Ok(())
}
