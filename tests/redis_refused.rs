//! A dead Redis is not a slow one: a refused, reset or lost connection is counted
//! as `refused` (not as a timeout) and answered by the failure policy as soon as the client
//! reports it, not at the deadline. Servers of the tests' own: one killed with SIGKILL, a
//! port nothing listens on, a listener that resets every connection.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use redis_server::{own, prefix};
use tollgate::redis::{BreakerConfig, FailurePolicy, SharedRateLimiter};
use tollgate::{DenyReason, Quota, Verdict};

fn q(s: &str) -> Quota {
    s.parse().unwrap()
}

/// Far above what a refusal takes on loopback, so that a refusal is never mistaken for a
/// timeout on a loaded machine; a check that waited for it would show in the latencies.
const DEADLINE: Duration = Duration::from_millis(250);

const CHECKS: u64 = 20;

/// A limiter whose every check goes to Redis: the breaker never opens.
fn limiter(url: &str) -> SharedRateLimiter {
    SharedRateLimiter::builder(q("1000/s"), url)
        .prefix(&prefix("refused"))
        .deadline(DEADLINE)
        .breaker(
            BreakerConfig::new()
                .consecutive_failures(u32::MAX)
                .error_ratio(2.0, 1),
        )
        .failure_policy(FailurePolicy::Closed)
        .build()
        .unwrap()
}

/// `CHECKS` checks while Redis cannot answer: each is `Closed`'s denial; their latencies.
async fn checks_while_down(lim: &SharedRateLimiter) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for _ in 0..CHECKS {
        let t = Instant::now();
        let v = lim.check_key("k").await.unwrap();
        latencies.push(t.elapsed());
        match v {
            Verdict::Deny(d) => assert_eq!(d.reason(), DenyReason::BackendUnavailable),
            other => panic!("Redis is down, yet {other:?}"),
        }
    }
    latencies.sort();
    latencies
}

/// Answered at once: the median check well under the deadline (a check that waited for a
/// reconnect's backoff, 50 ms and more, or for the deadline would not be).
fn at_once(latencies: &[Duration]) {
    let median = latencies[latencies.len() / 2];
    assert!(median < DEADLINE / 10, "median {median:?}: {latencies:?}");
}

/// A former bug: during a kill -9 outage every call was counted as a timeout (16 of 16 in
/// `redis_faults.rs`'s kill test) and none as an error: the call that found the connection
/// lost waited, within its deadline, for a reconnect that retried with a backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_counted_as_refused_and_answered_at_once() {
    let Some(mut r) = own("refused_kill") else {
        return;
    };
    let lim = limiter(&r.url);
    let t0 = Instant::now();
    while !lim.check_key("warm-up").await.unwrap().is_permitted() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "redis never answered"
        );
    }
    let up = lim.stats();
    assert_eq!((up.allowed, up.refused, up.timeouts), (1, 0, 0), "{up:?}");
    r.own.as_mut().unwrap().kill();
    let latencies = checks_while_down(&lim).await;
    let s = lim.stats();
    eprintln!("kill -9: {s:?}, latencies {latencies:?}");
    assert_eq!(
        (s.refused, s.timeouts, s.errors),
        (CHECKS, 0, 0),
        "every call refused, none a timeout: {s:?}"
    );
    assert_eq!(s.fallback_closed, CHECKS);
    at_once(&latencies);
}

/// Nothing listens on the port from the start: refused, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_nothing_listens_on_is_counted_as_refused() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let lim = limiter(&format!("redis://127.0.0.1:{port}/"));
    let latencies = checks_while_down(&lim).await;
    let s = lim.stats();
    assert_eq!((s.refused, s.timeouts, s.errors), (CHECKS, 0, 0), "{s:?}");
    at_once(&latencies);
}

/// A listener that accepts and resets every connection (`SO_LINGER` 0): reset, so refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_connection_is_counted_as_refused() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let _ = sock.set_zero_linger();
            drop(sock);
        }
    });
    let lim = limiter(&url);
    let latencies = checks_while_down(&lim).await;
    let s = lim.stats();
    assert_eq!((s.refused, s.timeouts, s.errors), (CHECKS, 0, 0), "{s:?}");
    at_once(&latencies);
}

/// Exported as `tollgate_redis_calls_total{result="refused"}`, beside `timeout` and `error`.
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_are_exported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let lim = std::sync::Arc::new(limiter(&format!("redis://127.0.0.1:{port}/")));
    checks_while_down(&lim).await;
    let text = redis_server::scrape(&lim);
    let value = |result: &str| {
        let series = format!(r#"tollgate_redis_calls_total{{limiter="shared",result="{result}"}}"#);
        redis_server::series(&text, &series)
    };
    assert_eq!(value("refused"), Some(CHECKS), "{text}");
    assert_eq!(value("timeout"), Some(0), "{text}");
    assert_eq!(value("error"), Some(0), "{text}");
    assert_eq!(value("sent"), Some(CHECKS), "{text}");
}
