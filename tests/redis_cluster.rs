//! `SharedRateLimiter` on a Redis Cluster the tests start on loopback (6 nodes: 3 masters, 3
//! replicas; `tests/common/redis_cluster.rs`), shared by this binary's tests, each with its own
//! key prefix. Destructive cluster tests (a master killed, slots resharded) are in
//! `tests/redis_cluster_faults.rs`, each with a cluster of its own.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/redis_cluster.rs"]
mod redis_cluster;
#[path = "common/redis_server.rs"]
mod redis_server;

use std::collections::HashMap;
use std::time::Duration;

use redis_cluster::Cluster;
use redis_server::prefix;
use tollgate::redis::{SharedRateLimiter, SharedRateLimiterBuilder};
use tollgate::{DenyReason, ManualClock, Verdict};

/// Long enough that a loaded 2-core machine never turns a check into a timeout: these tests
/// count fallbacks, and expect none.
const DEADLINE: Duration = Duration::from_secs(2);

fn builder(url: &str, quota: &str, prefix: &str) -> SharedRateLimiterBuilder {
    SharedRateLimiter::builder(quota.parse().unwrap(), url)
        .prefix(prefix)
        .deadline(DEADLINE)
}

fn by_redis(v: &Verdict) -> bool {
    match v {
        Verdict::Allow(_) => true,
        Verdict::Deny(d) => d.reason() == DenyReason::Quota,
        _ => false,
    }
}

/// The master (port) that holds `key`: the one that answers `EXISTS` for it rather than
/// `MOVED`, and says it exists.
fn holder(c: &Cluster, key: &[u8]) -> Option<u16> {
    c.masters().into_iter().find(|&p| {
        redis::cmd("EXISTS")
            .arg(key)
            .query::<i64>(&mut c.connection(p))
            .is_ok_and(|n| n == 1)
    })
}

/// A former bug: a limiter given one node of a cluster took it for a
/// standalone server, counted the `MOVED` replies as errors, opened its breaker and answered
/// 225–290 of 300 customers by the failure policy. Pointed at a master and at a replica, every
/// one of 300 customers must be decided by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_on_one_node_of_a_cluster_never_falls_back() {
    let Some(c) = redis_cluster::shared("one_node") else {
        return;
    };
    let masters = c.masters();
    let replica = c
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|p| !masters.contains(p))
        .expect("a replica");
    for port in [masters[0], replica] {
        let lim = builder(&c.node(port).url(), "10/s", &prefix("one-node"))
            .build()
            .unwrap();
        for i in 0..300 {
            let v = lim.check_key(&format!("customer-{i}")).await.unwrap();
            assert!(by_redis(&v), "customer {i} through node {port}: {v:?}");
        }
        let s = lim.stats();
        assert_eq!(
            (s.allowed, s.fallbacks(), s.errors, s.breaker_opened),
            (300, 0, 0, 0),
            "through node {port}: {s:?}"
        );
        assert!(lim.cluster_mode(), "a cluster reply switched it");
    }
}

/// Hundreds of customers, each checked past its burst on a shared client clock: the exact
/// remaining counts and retry-after one server gives, zero fallbacks, and their keys spread
/// over every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_verdicts_for_hundreds_of_customers_on_every_master() {
    let Some(c) = redis_cluster::shared("exact") else {
        return;
    };
    let clock = ManualClock::new();
    let lim = builder(&c.nodes[1].url(), "4/s", &prefix("exact"))
        .clock(clock.clone())
        .deny_cache(0)
        .build()
        .unwrap();
    let customers: Vec<String> = (0..400).map(|i| format!("c{i}")).collect();
    for name in &customers {
        for left in [3, 2, 1, 0] {
            match lim.check_key(name).await.unwrap() {
                Verdict::Allow(a) => assert_eq!(a.remaining(), left, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        let d = lim
            .check_key(name)
            .await
            .unwrap()
            .denied()
            .expect("burst spent");
        assert_eq!(
            (d.reason(), d.retry_after()),
            (DenyReason::Quota, Duration::from_millis(250)),
            "{name}"
        );
    }
    clock.advance(Duration::from_millis(250));
    for name in &customers {
        let v = lim.check_key(name).await.unwrap();
        assert!(
            v.is_permitted(),
            "{name}: one unit back after 250 ms: {v:?}"
        );
    }
    let s = lim.stats();
    assert_eq!(
        (s.allowed, s.denied, s.fallbacks(), s.errors, s.timeouts),
        (2000, 400, 0, 0, 0),
        "{s:?}"
    );
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    for name in &customers {
        let key = &lim.keys(name)[0];
        let p = holder(&c, key).unwrap_or_else(|| panic!("no master holds {name}'s key"));
        *per_master.entry(p).or_default() += 1;
    }
    eprintln!("keys per master: {per_master:?}");
    assert_eq!(
        per_master.len(),
        3,
        "every master holds keys: {per_master:?}"
    );
    assert_eq!(per_master.values().sum::<usize>(), customers.len());
}

/// Two instances through different nodes (a master and another master's replica) with one
/// prefix enforce one limit in aggregate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_through_different_nodes_enforce_one_limit() {
    let Some(c) = redis_cluster::shared("two_instances") else {
        return;
    };
    let clock = ManualClock::new();
    let p = prefix("two");
    let masters = c.masters();
    let other = c
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|x| *x != masters[0])
        .unwrap();
    let a = builder(&c.node(masters[0]).url(), "10/h", &p)
        .clock(clock.clone())
        .build()
        .unwrap();
    let b = builder(&c.node(other).url(), "10/h", &p)
        .clock(clock.clone())
        .build()
        .unwrap();
    for i in 0..100 {
        let name = format!("shared-{i}");
        let mut allowed = 0;
        for k in 0..16 {
            let lim = if k % 2 == 0 { &a } else { &b };
            let v = lim.check_key(&name).await.unwrap();
            assert!(by_redis(&v), "{name}: {v:?}");
            allowed += u32::from(v.is_permitted());
        }
        assert_eq!(allowed, 10, "{name}: one burst of 10 between the two");
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.fallbacks(), sb.fallbacks()), (0, 0));
    assert_eq!(sa.allowed + sb.allowed, 1000, "{sa:?} {sb:?}");
}

/// Seeds: in cluster mode from the first call, the cluster found through the seeds when the
/// builder's own URL is dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_find_the_cluster_past_a_dead_url() {
    let Some(c) = redis_cluster::shared("seeds") else {
        return;
    };
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let seeds: Vec<String> = c.nodes[..2].iter().map(|n| n.url()).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let lim = builder(
        &format!("redis://127.0.0.1:{dead}/"),
        "10/s",
        &prefix("seeds"),
    )
    .seed_urls(&seeds)
    .build()
    .unwrap();
    assert!(lim.cluster_mode());
    for i in 0..100 {
        let v = lim.check_key(&format!("s{i}")).await.unwrap();
        assert!(by_redis(&v), "s{i}: {v:?}");
    }
    assert_eq!(lim.stats().fallbacks(), 0);
}

/// `SCRIPT FLUSH` on every master mid-run (what a promoted replica looks like): `NOSCRIPT`
/// answered by `EVAL` routed by key, no check lost to the failure policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_on_every_master_is_answered_by_eval() {
    let Some(c) = redis_cluster::shared("noscript") else {
        return;
    };
    let lim = builder(&c.nodes[2].url(), "1000/s", &prefix("noscript"))
        .build()
        .unwrap();
    for round in 0..3 {
        for p in c.masters() {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query(&mut c.connection(p))
                .unwrap();
        }
        for i in 0..100 {
            let v = lim.check_key(&format!("n{i}")).await.unwrap();
            assert!(by_redis(&v), "round {round}, n{i}: {v:?}");
        }
    }
    let s = lim.stats();
    eprintln!("NOSCRIPT: {s:?}");
    assert_eq!((s.fallbacks(), s.errors), (0, 0), "{s:?}");
    // At most one reload per master per flush (other tests' limiters may reload first).
    assert!(s.script_reloads <= 9, "{s:?}");
}

/// A URL that selects a database other than 0 cannot serve a cluster: the seeds say so at
/// build, with a typed error, rather than fallback verdicts later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_with_a_database_other_than_0_are_refused_at_build() {
    let err = SharedRateLimiter::builder("1/s".parse().unwrap(), "redis://127.0.0.1:7000/2")
        .seed_urls(&["redis://127.0.0.1:7001/2"])
        .build()
        .unwrap_err();
    assert!(
        matches!(err, tollgate::redis::BackendError::Cluster(_)),
        "{err:?}"
    );
}

/// One node's URL with a database other than 0: the node refuses `SELECT`, and no check could
/// ever succeed. Every check says so with a typed error, never a fallback verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_with_a_database_other_than_0_is_a_typed_error() {
    let Some(c) = redis_cluster::shared("database") else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}/2", c.nodes[0].port);
    let lim = builder(&url, "10/s", &prefix("db")).build().unwrap();
    for _ in 0..3 {
        let err = lim.check_key("x").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "redis cluster: the url selects database 2, and a cluster has database 0 only"
        );
    }
    assert_eq!(lim.stats().fallbacks(), 0);
}

/// The shared concurrency limit on the cluster: two instances through different nodes, 200
/// customers on every master, each exactly at its limit, every slot given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_slots_on_every_master_through_two_nodes() {
    use std::num::NonZeroU32;
    use tollgate::redis::{AcquireError, SharedConcurrencyLimiter};
    let Some(c) = redis_cluster::shared("conc") else {
        return;
    };
    let p = prefix("conc");
    let build = |url: String| {
        SharedConcurrencyLimiter::builder(NonZeroU32::new(2).unwrap(), &url)
            .prefix(&p)
            .deadline(DEADLINE)
            .build()
            .unwrap()
    };
    let (a, b) = (build(c.nodes[0].url()), build(c.nodes[4].url()));
    let customers: Vec<String> = (0..200).map(|i| format!("c{i}")).collect();
    let mut held = Vec::new();
    for name in &customers {
        held.push(a.try_acquire_key(name).await.unwrap());
        held.push(b.try_acquire_key(name).await.unwrap());
        for lim in [&a, &b] {
            match lim.try_acquire_key(name).await {
                Err(AcquireError::Saturated(s)) => assert_eq!(s.in_flight(), 2, "{name}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
    assert!(held.iter().all(|p| p.is_shared()));
    assert!(a.cluster_mode() && b.cluster_mode());
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    for name in &customers {
        let p = holder(&c, &a.key(name)).unwrap_or_else(|| panic!("no master holds {name}"));
        *per_master.entry(p).or_default() += 1;
    }
    assert_eq!(
        per_master.len(),
        3,
        "every master holds slots: {per_master:?}"
    );
    assert_eq!(
        a.renew().await + b.renew().await,
        400,
        "one renewal call per customer each"
    );
    drop(held);
    a.flush().await;
    b.flush().await;
    for name in &customers {
        assert_eq!(a.in_flight_key(name).await.unwrap(), Some(0), "{name}");
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sa.acquired, sa.saturated, sa.released),
        (200, 200, 200),
        "{sa:?}"
    );
    assert_eq!(
        (sb.acquired, sb.saturated, sb.released),
        (200, 200, 200),
        "{sb:?}"
    );
    assert_eq!(
        (sa.fallbacks(), sb.fallbacks(), sa.errors, sb.errors),
        (0, 0, 0, 0)
    );
}
