//! Two gateway instances sharing one limit per customer through Redis, a live quota change,
//! and what a check answers when Redis is away.
//!
//! Run a server (`redis-server --port 6379 --save ''`), then
//! `cargo run --features redis --example redis` (or set `TOLLGATE_REDIS_URL`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::redis::{FailurePolicy, SharedRateLimiter};
use tollgate::Verdict;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url =
        std::env::var("TOLLGATE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // A prefix of this run's own, so that running the example twice starts afresh.
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let prefix = format!("example-{run}");

    // Two "gateways": 10 requests per second per customer with a burst of 5, shared; each
    // keeps half of it for itself should Redis become unreachable.
    let gateway = || {
        SharedRateLimiter::builder("10/s;burst=5".parse().expect("a valid quota"), &url)
            .prefix(&prefix)
            .policy("per-customer")
            .deadline(Duration::from_millis(100))
            .failure_policy(FailurePolicy::Local)
            .local_share(0.5)
            .build()
    };
    let (a, b) = (gateway()?, gateway()?);

    // The first call connects and loads the script; wait for Redis to decide.
    if !matches!(a.peek_key("warm-up").await?, Verdict::Allow(_)) {
        return Err(format!("no Redis answering at {url}").into());
    }

    let mut allowed = [0, 0];
    for i in 0..10 {
        let (lim, n) = if i % 2 == 0 { (&a, 0) } else { (&b, 1) };
        allowed[n] += u32::from(lim.check_key("alice").await?.is_permitted());
    }
    println!(
        "alice sent 10 at once through two gateways: {} + {} allowed (one burst of 5, shared)",
        allowed[0], allowed[1]
    );
    if let Verdict::Deny(d) = b.check_key("alice").await? {
        println!(
            "alice again: denied, retry after {:?} (at most one interval, 100 ms)",
            d.retry_after()
        );
    }

    // A live change keeps each customer's fill level: alice stays out, bob gets the new burst.
    a.set_quota("100/s;burst=50".parse()?);
    b.set_quota("100/s;burst=50".parse()?);
    let started = std::time::Instant::now();
    let mut bob = 0;
    for _ in 0..60 {
        bob += u32::from(a.check_key("bob").await?.is_permitted());
    }
    let spent = started.elapsed();
    println!(
        "after the change to 100/s;burst=50, bob sent 60 in {spent:.1?}: {bob} allowed \
         (the burst of 50, plus one per 10 ms that passed: at most {})",
        50 + spent.as_millis() / 10
    );

    let s = a.stats();
    println!(
        "gateway A: {} round trips, {} allowed, {} denied by Redis, {} denied from its deny cache",
        s.round_trips, s.allowed, s.denied, s.denied_cached
    );

    // Redis away: nothing listens on port 1. Each check answers within the deadline by the
    // failure policy, and says so.
    let away = SharedRateLimiter::builder("10/s;burst=4".parse()?, "redis://127.0.0.1:1/")
        .prefix(&prefix)
        .failure_policy(FailurePolicy::Local)
        .local_share(0.5)
        .build()?;
    for _ in 0..3 {
        match away.check_key("carol").await? {
            Verdict::PassThrough(p) => println!(
                "redis away: passed by this node's share ({:?}, local verdict {:?})",
                p.reason(),
                p.shadow()
            ),
            Verdict::Deny(d) => println!(
                "redis away: denied by this node's share ({:?}), retry after {:?}",
                d.reason(),
                d.retry_after()
            ),
            other => println!("redis away: {other:?}"),
        }
    }
    println!("fallback verdicts counted: {}", away.stats().fallbacks());
    Ok(())
}
