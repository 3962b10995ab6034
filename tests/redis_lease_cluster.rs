//! Leases on a Redis Cluster the test starts on loopback (`tests/common/redis_cluster.rs`):
//! the lease call is routed by key like a check, so hot customers on every master take leases,
//! with no fallback, and stay within burst + rate·elapsed.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/redis_cluster.rs"]
mod redis_cluster;
#[path = "common/redis_server.rs"]
mod redis_server;

use std::time::Duration;

use redis_server::prefix;
use tollgate::redis::SharedRateLimiter;
use tollgate::{ManualClock, Verdict};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_customers_on_every_master_take_leases() {
    let Some(c) = redis_cluster::shared("lease_cluster") else {
        return;
    };
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let p = prefix("lease_cluster");
    let masters = c.masters();
    // Two instances through different masters.
    let build = |port: u16| {
        SharedRateLimiter::builder("1000/s;burst=100".parse().unwrap(), &c.node(port).url())
            .prefix(&p)
            .clock(clock.clone())
            .deadline(Duration::from_secs(2))
            .lease(20)
            .build()
            .unwrap()
    };
    let (a, b) = (build(masters[0]), build(masters[1]));
    let customers: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    let mut admitted = vec![0u64; customers.len()];
    // 1 s of simulated time: each customer checked every 100 µs, alternating instances.
    for step in 0..10_000u64 {
        for (i, key) in customers.iter().enumerate() {
            let lim = if (step + i as u64) % 2 == 0 { &a } else { &b };
            match lim.check_key(key.as_str()).await.unwrap() {
                Verdict::Allow(_) => admitted[i] += 1,
                Verdict::Deny(_) => {}
                other => panic!("no fallback expected, got {other:?}"),
            }
        }
        clock.advance(Duration::from_micros(100));
    }
    // burst + rate·elapsed (0.9999 s).
    let bound = 100 + 999;
    for (i, &n) in admitted.iter().enumerate() {
        assert!(
            n <= bound + 1 && n * 100 >= bound * 95,
            "customer {i}: {n} of {bound}"
        );
    }
    let used: std::collections::HashSet<u16> = customers
        .iter()
        .map(|k| {
            let slot = c.keyslot(&a.keys(k)[0]);
            masters
                .iter()
                .copied()
                .find(|&m| {
                    redis::cmd("CLUSTER")
                        .arg("COUNTKEYSINSLOT")
                        .arg(slot)
                        .query::<i64>(&mut c.connection(m))
                        .is_ok_and(|n| n > 0)
                })
                .unwrap_or(0)
        })
        .collect();
    let (sa, sb) = (a.stats(), b.stats());
    let checks = 10_000 * customers.len() as u64;
    eprintln!(
        "cluster: {checks} checks, {} round trips, {} leases, masters used {}",
        sa.round_trips + sb.round_trips,
        sa.leases_taken + sb.leases_taken,
        used.len()
    );
    assert_eq!(used.len(), 3, "the customers span every master");
    assert_eq!(sa.fallbacks() + sb.fallbacks(), 0);
    assert!(sa.leases_taken > 0 && sb.leases_taken > 0);
    assert!((sa.round_trips + sb.round_trips) * 10 <= checks);
}
