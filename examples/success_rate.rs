//! Incident 001, replayed against the customer-success-rate alert: ten quiet minutes, then a
//! config push makes 14 % of paid requests return 429. Latency and the 5xx rate stay green;
//! the success rate per tier pages within seconds.
//!
//! Run with `cargo run --example success_rate`.

use std::sync::Arc;
use std::time::Duration;

use tollgate::safety::SuccessRate;
use tollgate::ManualClock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The manual clock makes the run repeatable; a service uses the default monotonic clock
    // and records every response from its middleware.
    let clock = ManualClock::new();
    let slo = Arc::new(
        SuccessRate::builder()
            .tiers(["free", "paid", "enterprise"])
            .clock(clock.clone())
            .on_alert(|alert| println!("PAGE at {:?}: {alert}", alert.at()))
            .build()?, // defaults: more than 2 pp within 60 s, 500 requests on each side
    );

    let push = Duration::from_secs(600) + Duration::from_millis(3_700);
    let mut request = 0u64;
    while clock.now() < push + Duration::from_secs(60) {
        // Every 10 ms: one paid and one free request; 1 in 1000 is a 503 either way.
        request += 1;
        let background = if request % 1000 == 0 { 503 } else { 200 };
        // After the push, 14 in 100 paid requests hit the misconfigured 1/s limit.
        let capped = clock.now() >= push && request % 100 < 14;
        slo.record("paid", if capped { 429 } else { background });
        slo.record("free", background);
        clock.advance(Duration::from_millis(10));
    }
    // For idle periods a timer calls tick(); here traffic never stops, so it is a no-op.
    slo.tick();

    println!("(times are since the start of the run; the config push was at {push:?})");
    for alert in slo.poll_alerts() {
        let window = alert.window_end() - alert.window();
        println!(
            "alert for {:?}: detected {:?} after the push; its window ran {:?} to {:?}, the last \
             {:?} of it after the push",
            alert.tier(),
            alert.at() - push,
            window,
            alert.window_end(),
            alert.window_end().saturating_sub(push)
        );
    }
    // What a metrics exporter would read: cumulative counters, and the rate over the last
    // complete window, which has moved on since the alert.
    let snapshot = slo.snapshot();
    let end = snapshot[0].window_end();
    println!(
        "at {:?}, the end of the run: counts since the start, and each tier's success rate over \
         the last complete window, {:?} to {end:?} ({:?} of it after the push):",
        clock.now(),
        end - slo.window(),
        end.saturating_sub(push)
    );
    for tier in snapshot {
        let rate = tier.success_rate().map(|r| format!("{:.2} %", r * 100.0));
        println!(
            "{:>10}: {:>6} ok, {:>5} 429, {:>3} 5xx; success rate {}",
            tier.tier(),
            tier.successes(),
            tier.failures_429(),
            tier.failures_5xx(),
            rate.as_deref().unwrap_or("n/a (no requests)")
        );
    }
    println!(
        "after the push, 14 % of paid requests get a 429: 86 % succeed; each window mixes in \
         the 99.9 % before it"
    );
    Ok(())
}
