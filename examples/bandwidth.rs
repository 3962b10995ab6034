//! Incident 003's shared link: replica recovery and heartbeats on one byte budget.
//!
//! * One cell, `8Gbit/s;burst=64MiB`, cost = bytes. Heartbeats are class 0 (critical);
//!   recovery is class 2 with a reserve of 50 %: it may fill at most half the burst, so a
//!   heartbeat always finds room, however hard recovery pushes.
//! * Recovery offers 64 KiB chunks at about 17 Gbit/s (2× the link, 8× the lowered cap).
//! * After 3 s the cap is lowered live to `2Gbit/s;burst=64MiB` with `set_quota`: no restart,
//!   no free burst (the link keeps its fill level: the share of the burst in use stays in
//!   use under the new quota).
//!
//! Everything runs on a `ManualClock` in 1 ms steps, so every run prints the same.
//! Run with `cargo run --example bandwidth`.

use std::time::Duration;

use tollgate::shaping::Priorities;
use tollgate::{Check, ManualClock, RateLimiter};

const HEARTBEAT: Check = Check::cost(512).class(0);
const CHUNK: u64 = 64 << 10;
const RECOVERY: Check = Check::cost(CHUNK).class(2);
/// Chunks recovery tries per millisecond: 32 × 64 KiB/ms ≈ 17 Gbit/s offered.
const OFFERED_PER_MS: u32 = 32;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let mut quota = "8Gbit/s;burst=64MiB";
    let link = RateLimiter::builder(quota.parse()?)
        .clock(clock.clone())
        .priorities(Priorities::new([(0, 0.0), (2, 0.5)])?)
        .build();
    println!("link {quota}: heartbeats class 0, recovery class 2 (reserve 50 %)");
    let too_big = link.check_with(Check::cost(48 << 20).class(2)).unwrap_err();
    println!(
        "a 48 MiB recovery chunk: InsufficientCapacity, class 2 may send at most {} bytes at once",
        too_big.capacity()
    );
    println!("second  quota                 recovery        heartbeats admitted");

    let (mut beats_sent, mut beats_ok) = (0u64, 0u64);
    for second in 1..=6 {
        if second == 4 {
            quota = "2Gbit/s;burst=64MiB";
            link.set_quota(quota.parse()?);
            println!("        -- set_quota(\"{quota}\"), mid-stream --");
        }
        let (mut bytes, mut beats, mut beats_in) = (0u64, 0u64, 0u64);
        for _ms in 0..1000 {
            // Recovery sends as fast as it is let, up to what it offers.
            for _ in 0..OFFERED_PER_MS {
                if !link.check_with(RECOVERY)?.is_permitted() {
                    break;
                }
                bytes += CHUNK;
            }
            // Then a heartbeat: the link is as full as recovery can make it.
            beats += 1;
            if link.check_with(HEARTBEAT)?.is_permitted() {
                beats_in += 1;
            }
            clock.advance(Duration::from_millis(1));
        }
        beats_sent += beats;
        beats_ok += beats_in;
        println!(
            "  {second}     {:<21} {:>5.2} Gbit/s     {beats_in}/{beats}",
            quota,
            bytes as f64 * 8.0 / 1e9
        );
    }
    println!("heartbeats admitted: {beats_ok}/{beats_sent}");
    println!(
        "second 1: the rate plus class 2's half of the burst; second 4: the new rate alone — \
         the share of the burst in use stays in use under the new quota, no fresh burst"
    );
    Ok(())
}
