//! Refunds, charges and resets on a Redis Cluster after a failover: a master killed
//! (`kill -9`), its replica promoted (which never loaded the script by `EVALSHA`), and every
//! customer's settles applied there, exact. Starts a cluster of its own (6 nodes on loopback).
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/redis_cluster.rs"]
mod redis_cluster;

use std::time::{Duration, Instant};

use tollgate::redis::{Settled, SharedRateLimiter};
use tollgate::Verdict;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_reach_a_promoted_replica_after_a_failover() {
    let Some(mut c) = redis_cluster::own_mut("settle_failover") else {
        return;
    };
    let masters = c.masters();
    let (victim, witness) = (masters[0], masters[1]);
    let lim = SharedRateLimiter::builder("1/min".parse().unwrap(), &c.node(witness).url())
        .prefix("settle-failover")
        .deadline(Duration::from_millis(500))
        .max_debt(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let names: Vec<String> = (0..30).map(|i| format!("s{i}")).collect();
    for n in &names {
        let t0 = Instant::now();
        while !matches!(lim.check_key(n).await.unwrap(), Verdict::Allow(_)) {
            assert!(t0.elapsed() < Duration::from_secs(10), "{n} never checked");
        }
    }
    c.kill(victim);
    c.wait_ok(Duration::from_secs(60))
        .expect("the cluster fails over");
    // Each customer: a charge of 10 more minutes, then a refund of all of it, then a reset,
    // each applied exactly once wherever the customer's slot now lives. A settle lost while
    // the client finds the new master is sent again here by the test (a new call).
    let settle = |op: u8, n: &str| {
        let (lim, n) = (lim.clone(), n.to_owned());
        async move {
            let t0 = Instant::now();
            loop {
                let s = match op {
                    0 => lim.charge_key(&n, 10).await,
                    1 => lim.refund_key(&n, u64::MAX).await,
                    _ => lim.reset_key(&n).await,
                }
                .unwrap();
                match s {
                    Settled::Lost => {
                        assert!(t0.elapsed() < Duration::from_secs(30), "{n}: lost for 30 s");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    other => return other,
                }
            }
        }
    };
    for n in &names {
        let charged = settle(0, n).await;
        assert!(
            matches!(charged, Settled::Applied(ch) if ch.is_paid()),
            "{n}: {charged:?}"
        );
        // At least the 10 minutes charged (the first unit may have been lost to the
        // failover's asynchronous replication; then the wait is exactly 10 min).
        let wait = lim
            .check_key(n)
            .await
            .unwrap()
            .denied()
            .map(|d| d.retry_after());
        let wait = wait.unwrap_or_else(|| panic!("{n}: in debt after the failover"));
        assert!(
            wait > Duration::from_secs(590) && wait <= Duration::from_secs(660),
            "{n}: waits {wait:?}"
        );
        assert!(matches!(settle(1, n).await, Settled::Applied(_)));
        assert!(
            lim.check_key(n).await.unwrap().is_permitted(),
            "{n}: refunded"
        );
        assert!(matches!(settle(2, n).await, Settled::Applied(_)));
        assert!(lim.check_key(n).await.unwrap().is_permitted(), "{n}: reset");
    }
    let s = lim.stats();
    assert_eq!((s.charges, s.refunds, s.resets), (30, 30, 30), "{s:?}");
    println!("after the failover: {s:?}");
}
