//! Incident 000, replayed: the limiter's clock stalls for 45 s while real time goes on, and
//! 1,000 well-behaved customers start getting denied. The fault detector, on its own clock and
//! with a baseline imported from the last deploy, sees the breadth of the denials jump, passes
//! traffic through (still computing what it would have said), and enforces again once the
//! clock is fixed and its shadow verdicts look normal for a full window.
//!
//! Run with `cargo run --example fault_detector`.

use std::time::Duration;

use tollgate::safety::{Baseline, FaultDetector, FaultEvent, HourSample};
use tollgate::{KeyedRateLimiter, ManualClock, Verdict};

const KEYS: u64 = 1_000;
const STALL_FROM: u64 = 120; // seconds
const STALL_FOR: u64 = 45;
const RUN_FOR: u64 = 300;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Two clocks: real time (the detector's own) and the limiter's, which will lag.
    let real = ManualClock::new();
    let lagging = ManualClock::new();

    // Last week's baseline, exported by the previous process with `detector.baseline()`:
    // normally 1 % of the sampled customers are mostly denied.
    let normal = HourSample {
        breadth: 0.01,
        deny_ratio: 0.01,
        allowed_per_sec: 1_000.0,
    };
    let baseline = Baseline::from_hours(1, std::iter::repeat_n(normal, 7 * 24));

    let detector = FaultDetector::builder()
        .clock(&real)
        .baseline(baseline)
        .on_event(|event| match event {
            FaultEvent::Tripped(f) => println!(
                "t={:>3}s  TRIPPED: {:.0} % of {} panel keys mostly denied (baseline {:.0} %)",
                f.at.as_secs(),
                f.measure * 100.0,
                f.samples,
                f.baseline.unwrap_or(0.0) * 100.0,
            ),
            FaultEvent::Recovered(f) => println!(
                "t={:>3}s  RECOVERED: {:.0} % denied in the shadow verdicts: enforcing again",
                f.at.as_secs(),
                f.measure * 100.0,
            ),
            FaultEvent::Alert(kind, f) => println!("t={:>3}s  alert: {kind:?}", f.at.as_secs()),
            _ => {}
        })
        .build();

    // 2 requests per second per customer; each customer sends 1 per second.
    let lim: KeyedRateLimiter<u64> = KeyedRateLimiter::builder("2/s".parse()?)
        .clock(&lagging)
        .detector(detector.clone())
        .build();
    println!(
        "{KEYS} customers at 1 req/s each, quota 2/s each; baseline: {} hours imported",
        detector.baseline().hours().len()
    );

    let (mut denied, mut passed, mut first_pass) = (0u64, 0u64, None);
    for t in 1..=RUN_FOR {
        real.advance(Duration::from_secs(1));
        if t == STALL_FROM + 1 {
            println!("t={t:>3}s  the limiter's clock stalls (real time goes on)");
        }
        if t <= STALL_FROM || t > STALL_FROM + STALL_FOR {
            lagging.advance(Duration::from_secs(1));
        }
        if t == STALL_FROM + STALL_FOR + 1 {
            lagging.set(real.now());
            println!("t={t:>3}s  the limiter's clock is fixed");
        }
        for key in 0..KEYS {
            match lim.check_key(&key) {
                Verdict::Deny(_) => denied += 1,
                Verdict::PassThrough(p) => {
                    passed += 1;
                    first_pass.get_or_insert((t, p));
                }
                _ => {}
            }
        }
        // For idle limiters; here the checks themselves run the evaluation too.
        detector.tick();
        if let Some((at, p)) = first_pass.filter(|&(at, _)| at == t) {
            println!(
                "t={at:>3}s  verdicts: PassThrough({:?}), shadow {:?}",
                p.reason(),
                p.shadow()
            );
        }
    }

    println!("requests denied: {denied} (the stall, before the trip); passed through: {passed}");
    let s = detector.stats();
    println!(
        "stats: {} checks: {} allowed, {} denied (quota), {} passed (deny anomaly), \
         {} of them shadow-denied, {} denied by the ceiling",
        s.total(),
        s.allowed,
        s.denied_quota,
        s.passed_deny_anomaly,
        s.shadow_denied,
        s.denied_ceiling,
    );
    Ok(())
}
