//! Long periods through Redis: a `1/month` key's TTL covers its whole period (an early expiry
//! would silently loosen the limit), and its retry-after is exactly 30 days.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use redis_server::{connection, prefix, shared};
use tollgate::redis::SharedRateLimiter;
use tollgate::ManualClock;

#[test]
fn a_monthly_key_lives_its_whole_month() {
    let Some(r) = shared("long_month") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clock = ManualClock::new();
    let lim = {
        let _guard = rt.enter();
        SharedRateLimiter::builder("1/month".parse().unwrap(), &r.url)
            .prefix(&prefix("long_month"))
            .clock(clock.clone())
            .deadline(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    assert!(rt.block_on(lim.check_key("acct")).unwrap().is_permitted());
    let d = rt.block_on(lim.check_key("acct")).unwrap();
    let d = d.denied().expect("one a month: the second is denied");
    assert_eq!(d.retry_after(), Duration::from_secs(2_592_000));
    let mut con = connection(&r.url);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&lim.keys("acct")[0])
        .query(&mut con)
        .unwrap();
    let month_ms = 2_592_000_000;
    assert!(
        ttl > month_ms - 60_000 && ttl <= month_ms,
        "the key must outlive its 30 days: PTTL {ttl} ms"
    );
}
