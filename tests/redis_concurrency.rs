//! `SharedConcurrencyLimiter` against a real `redis-server` on loopback: two instances never
//! exceed the limit together, a dropped permit's slot comes back, a killed instance's slots
//! lapse exactly at the end of their lease (a `ManualClock` ends it, no sleeping), renewals
//! keep a live holder's slot, an unanswered acquire is released, and Redis killed with slots
//! held (the three failure policies, then the restart). Destructive tests start their own
//! server.
#![cfg(all(feature = "redis", not(loom)))]

#[path = "common/redis_server.rs"]
mod redis_server;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_server::{connection, own, prefix, shared};
use tollgate::concurrency::SaturatedReason;
use tollgate::redis::{
    AcquireError, BackendError, FailurePolicy, SharedConcurrencyLimiter,
    SharedConcurrencyLimiterBuilder,
};
use tollgate::{ManualClock, PassReason};

fn n(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).unwrap()
}

/// A generous deadline: these tests are about slots, not about a loaded machine's latency.
fn builder(url: &str, limit: u32, prefix: &str) -> SharedConcurrencyLimiterBuilder {
    SharedConcurrencyLimiter::builder(n(limit), url)
        .prefix(prefix)
        .deadline(Duration::from_secs(2))
        .lease_time(Duration::from_secs(30))
        .failure_policy(FailurePolicy::Closed)
}

fn saturated(
    r: Result<tollgate::redis::SharedPermit, AcquireError>,
) -> tollgate::concurrency::Saturated {
    match r {
        Err(AcquireError::Saturated(s)) => s,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Acquires until Redis decides (the first call connects and loads the script), for at most
/// 5 s: a restarted server is back once the breaker lets a probe through.
async fn until_shared(lim: &SharedConcurrencyLimiter, key: &str) -> tollgate::redis::SharedPermit {
    let t0 = Instant::now();
    loop {
        if let Ok(p) = lim.try_acquire_key(key).await {
            if p.is_shared() {
                return p;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "redis never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_on_two_instances_never_hold_more_than_the_limit() {
    let Some(r) = shared("conc_eight") else {
        return;
    };
    let p = prefix("conc-eight");
    let a = builder(&r.url, 3, &p).build().unwrap();
    let b = builder(&r.url, 3, &p).build().unwrap();
    let now = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    const ROUNDS: u32 = 60;
    for t in 0..8 {
        let lim = if t % 2 == 0 { a.clone() } else { b.clone() };
        let (now, most) = (Arc::clone(&now), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            let mut got = 0u32;
            for _ in 0..ROUNDS {
                match lim.try_acquire_key("hot").await {
                    Ok(permit) => {
                        assert!(permit.is_shared(), "Redis decided every acquire");
                        let held = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(held, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        // Counted out before the permit goes: the count here is never below
                        // the slots Redis holds.
                        now.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                        got += 1;
                    }
                    Err(AcquireError::Saturated(s)) => {
                        assert_eq!(s.reason(), SaturatedReason::Limit);
                        assert!(s.in_flight() >= 3 && s.limit() == 3, "{s}");
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            got
        }));
    }
    let mut granted = 0;
    for t in tasks {
        granted += t.await.unwrap();
    }
    assert!(
        most.load(Ordering::SeqCst) <= 3,
        "{} held at once",
        most.load(Ordering::SeqCst)
    );
    assert!(granted >= 3, "only {granted} acquires succeeded");
    a.flush().await;
    b.flush().await;
    assert_eq!(a.in_flight_key("hot").await.unwrap(), Some(0));
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.acquired + sb.acquired, u64::from(granted));
    assert_eq!(
        sa.acquired + sa.saturated + sb.acquired + sb.saturated,
        u64::from(8 * ROUNDS),
        "every acquire decided by Redis: {sa:?} {sb:?}"
    );
    assert_eq!(sa.released + sb.released, u64::from(granted));
    assert_eq!((sa.fallbacks(), sb.fallbacks()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_or_released_permit_gives_its_slot_back() {
    let Some(r) = shared("conc_drop") else { return };
    let lim = builder(&r.url, 2, &prefix("conc-drop")).build().unwrap();
    let first = until_shared(&lim, "alice").await;
    let second = lim.try_acquire_key("alice").await.unwrap();
    let full = saturated(lim.try_acquire_key("alice").await);
    assert_eq!(
        (full.limit(), full.in_flight(), full.reason()),
        (2, 2, SaturatedReason::Limit)
    );
    assert!(lim.try_acquire_key("bob").await.is_ok(), "keys are apart");
    lim.flush().await; // bob's permit was dropped at once
    assert_eq!(lim.held(), 2);
    drop(first);
    assert_eq!(lim.held(), 1, "no longer renewed from the drop on");
    lim.flush().await;
    assert_eq!(lim.in_flight_key("alice").await.unwrap(), Some(1));
    let third = lim.try_acquire_key("alice").await.unwrap();
    second.release();
    third.release();
    lim.flush().await;
    assert_eq!(lim.in_flight_key("alice").await.unwrap(), Some(0));
    let mut con = connection(&r.url);
    let exists: bool = con.exists(lim.key("alice")).unwrap();
    assert!(!exists, "an empty set leaves no key behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_outlives_its_limiter_and_moves_between_tasks() {
    let Some(r) = shared("conc_outlive") else {
        return;
    };
    let p = prefix("conc-outlive");
    let lim = builder(&r.url, 1, &p).build().unwrap();
    let permit = until_shared(&lim, "k").await;
    drop(lim);
    let watcher = builder(&r.url, 1, &p).build().unwrap();
    assert_eq!(watcher.in_flight_key("k").await.unwrap(), Some(1));
    tokio::spawn(async move { drop(permit) }).await.unwrap();
    let t0 = Instant::now();
    // The dropped limiter's task releases in the background: watch Redis, bounded.
    while watcher.in_flight_key("k").await.unwrap() != Some(0) {
        assert!(t0.elapsed() < Duration::from_secs(5), "never released");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An instance "killed": its permits never dropped, its runtime (and so its renewer) gone.
fn killed_instance(url: &str, p: &str, clock: &ManualClock, lease: Duration, slots: u32) {
    let (url, p, clock) = (url.to_owned(), p.to_owned(), clock.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let lim = builder(&url, slots, &p)
                .clock(clock)
                .lease_time(lease)
                .build()
                .unwrap();
            for _ in 0..slots {
                std::mem::forget(until_shared(&lim, "victim").await);
            }
        });
        drop(rt); // the crash: no release, no renewal ever again
    })
    .join()
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_s_slots_lapse_exactly_when_their_lease_ends() {
    let Some(r) = shared("conc_killed") else {
        return;
    };
    let p = prefix("conc-killed");
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let lease = Duration::from_secs(30);
    killed_instance(&r.url, &p, &clock, lease, 2);
    let survivor = builder(&r.url, 2, &p)
        .clock(clock.clone())
        .lease_time(lease)
        .build()
        .unwrap();
    let s = saturated(survivor.try_acquire_key("victim").await);
    assert_eq!(s.in_flight(), 2, "the dead instance's slots still count");
    clock.advance(lease - Duration::from_millis(1));
    let s = saturated(survivor.try_acquire_key("victim").await);
    assert_eq!(s.in_flight(), 2, "1 ms before the lease ends");
    clock.advance(Duration::from_millis(1));
    let a = survivor.try_acquire_key("victim").await.unwrap();
    let b = survivor.try_acquire_key("victim").await.unwrap();
    assert!(a.is_shared() && b.is_shared());
    saturated(survivor.try_acquire_key("victim").await);
    assert_eq!(survivor.in_flight_key("victim").await.unwrap(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_a_live_holder_s_slot_past_its_first_lease() {
    let Some(r) = shared("conc_renew") else {
        return;
    };
    let p = prefix("conc-renew");
    let clock = ManualClock::at(Duration::from_secs(1_000));
    // 30 s leases on the manual clock; the background renewer's own period (10 s of real
    // time) is longer than this test.
    let holder = builder(&r.url, 1, &p).clock(clock.clone()).build().unwrap();
    let other = builder(&r.url, 1, &p).clock(clock.clone()).build().unwrap();
    let held = until_shared(&holder, "k").await;
    clock.advance(Duration::from_secs(20));
    assert_eq!(holder.renew().await, 1);
    clock.advance(Duration::from_secs(20)); // 40 s after the acquire: past its first lease
    let s = saturated(other.try_acquire_key("k").await);
    assert_eq!(s.in_flight(), 1, "renewed at 20 s, so held until 50 s");
    clock.advance(Duration::from_secs(10)); // 50 s: the renewed lease ends
    let taken = other.try_acquire_key("k").await.unwrap();
    assert!(taken.is_shared());
    assert_eq!(
        holder.renew().await,
        0,
        "its slot was taken: not added back"
    );
    assert_eq!(holder.stats().lapsed, 1);
    assert_eq!(holder.held(), 0, "no longer renewed");
    drop(held); // a release of a lapsed slot changes nothing
    holder.flush().await;
    assert_eq!(other.in_flight_key("k").await.unwrap(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_acquire_is_released_once_redis_answers() {
    let Some(r) = own("conc_pause") else { return };
    let lim = SharedConcurrencyLimiter::builder(n(1), &r.url)
        .prefix(&prefix("conc-pause"))
        .deadline(Duration::from_millis(50))
        .failure_policy(FailurePolicy::Open)
        .build()
        .unwrap();
    drop(until_shared(&lim, "k").await);
    lim.flush().await;
    let mut con = connection(&r.url);
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(400)
        .arg("ALL")
        .query::<()>(&mut con)
        .unwrap();
    let p = lim.try_acquire_key("k").await.unwrap();
    assert_eq!(
        p.pass_reason(),
        Some(PassReason::BackendUnavailable),
        "Open: let through"
    );
    assert!(!p.is_shared());
    assert_eq!(lim.stats().abandoned, 1);
    // The acquire landed when the pause ended; its release, sent at the deadline, follows it
    // on the connection, or else the renewal's retry sends it again.
    let t0 = Instant::now();
    loop {
        lim.renew().await;
        if lim.in_flight_key("k").await.unwrap() == Some(0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the abandoned slot stayed taken"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(until_shared(&lim, "k").await.is_shared());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_with_slots_held_then_restarted() {
    let Some(mut r) = own("conc_killed_redis") else {
        return;
    };
    let lim = SharedConcurrencyLimiter::builder(n(4), &r.url)
        .prefix(&prefix("conc-kill"))
        .deadline(Duration::from_millis(200))
        .failure_policy(FailurePolicy::Local)
        .local_share(0.5)
        .build()
        .unwrap();
    let kept = until_shared(&lim, "c").await;
    let dropped = lim.try_acquire_key("c").await.unwrap();
    r.own.as_mut().unwrap().kill();
    drop(dropped);
    lim.flush().await;
    assert_eq!(
        lim.stats().release_failed,
        1,
        "the release found no server, counted"
    );
    // Local: this node's share, 2 of 4, each permit saying it holds no shared slot.
    let l1 = lim.try_acquire_key("c").await.unwrap();
    let l2 = lim.try_acquire_key("c").await.unwrap();
    for p in [&l1, &l2] {
        assert_eq!(p.pass_reason(), Some(PassReason::BackendUnavailable));
        assert!(!p.is_shared());
    }
    let s = saturated(lim.try_acquire_key("c").await);
    assert_eq!((s.limit(), s.reason()), (2, SaturatedReason::Limit));
    drop(l1);
    assert!(
        lim.try_acquire_key("c").await.is_ok(),
        "a local slot comes back at once"
    );
    let st = lim.stats();
    assert_eq!(
        (st.fallback_local_acquired, st.fallback_local_saturated),
        (3, 1)
    );
    // The server comes back empty (no persistence): the slot held across the outage is gone
    // from Redis, and the renewer counts it lapsed rather than adding it back.
    r.own.as_mut().unwrap().restart();
    let fresh = until_shared(&lim, "c").await;
    assert_eq!(lim.renew().await, 1, "only the fresh slot is renewed");
    assert_eq!(lim.stats().lapsed, 1);
    drop((kept, l2, fresh));
    lim.flush().await;
    assert_eq!(lim.in_flight_key("c").await.unwrap(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_refuses_and_open_lets_through_while_redis_is_down() {
    let Some(mut r) = own("conc_policies") else {
        return;
    };
    let p = prefix("conc-policies");
    let closed = builder(&r.url, 2, &p)
        .deadline(Duration::from_millis(200))
        .build()
        .unwrap();
    let open = builder(&r.url, 2, &p)
        .deadline(Duration::from_millis(200))
        .failure_policy(FailurePolicy::Open)
        .build()
        .unwrap();
    drop(until_shared(&closed, "k").await);
    drop(until_shared(&open, "k").await);
    r.own.as_mut().unwrap().kill();
    let s = saturated(closed.try_acquire_key("k").await);
    assert_eq!(
        (s.reason(), s.limit()),
        (SaturatedReason::BackendUnavailable, 2)
    );
    assert!(s.to_string().contains("Redis could not be reached"), "{s}");
    for _ in 0..5 {
        let p = open.try_acquire_key("k").await.unwrap();
        assert!(!p.is_shared());
    }
    assert_eq!(closed.stats().fallback_closed, 1);
    assert_eq!(open.stats().fallback_open, 5);
    assert!(open.stats().refused + open.stats().breaker_rejected >= 5);
}

#[tokio::test(flavor = "current_thread")]
async fn bad_input_is_a_typed_error() {
    let url = "redis://127.0.0.1:1/";
    let lim = SharedConcurrencyLimiter::builder(n(1), url)
        .build()
        .unwrap();
    let long = "k".repeat(SharedConcurrencyLimiter::MAX_KEY_BYTES + 1);
    match lim.try_acquire_key(&long).await {
        Err(AcquireError::Backend(BackendError::KeyTooLong { len, max })) => {
            assert_eq!(
                (len, max),
                (long.len(), SharedConcurrencyLimiter::MAX_KEY_BYTES)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        lim.in_flight_key(&long).await,
        Err(BackendError::KeyTooLong { .. })
    ));
    let b = || SharedConcurrencyLimiter::builder(n(1), url);
    assert!(matches!(
        b().policy("a:b").build(),
        Err(BackendError::ColonInPolicy(_))
    ));
    assert!(matches!(
        b().prefix("x{").build(),
        Err(BackendError::InvalidName { .. })
    ));
    assert!(matches!(
        b().local_share(0.0).build(),
        Err(BackendError::InvalidShare(_))
    ));
    assert!(matches!(
        b().local_share(f64::NAN).build(),
        Err(BackendError::InvalidShare(_))
    ));
    let short = b()
        .deadline(Duration::from_millis(20))
        .lease_time(Duration::from_millis(59));
    assert!(matches!(
        short.build(),
        Err(BackendError::InvalidSetting(_))
    ));
    let long_lease = b().lease_time(Duration::from_secs(u64::MAX));
    assert!(matches!(
        long_lease.build(),
        Err(BackendError::InvalidSetting(_))
    ));
    assert!(b()
        .deadline(Duration::from_millis(20))
        .lease_time(Duration::from_millis(60))
        .build()
        .is_ok());
    let key = lim.key("a}b{c");
    assert_eq!(key, b"tollgate:in-flight:{a%7Db{c}:slots".to_vec());
}

#[test]
fn build_outside_a_runtime_is_a_typed_error() {
    let err = SharedConcurrencyLimiter::builder(n(1), "redis://127.0.0.1:1/")
        .build()
        .unwrap_err();
    assert!(matches!(err, BackendError::NoRuntime));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lowering_the_limit_drains_and_raising_it_opens_slots() {
    let Some(r) = shared("conc_set_limit") else {
        return;
    };
    let lim = builder(&r.url, 4, &prefix("conc-set-limit"))
        .failure_policy(FailurePolicy::Local)
        .local_share(0.5)
        .build()
        .unwrap();
    let mut held = vec![until_shared(&lim, "k").await];
    for _ in 0..3 {
        held.push(lim.try_acquire_key("k").await.unwrap());
    }
    lim.set_limit(n(2));
    assert_eq!(lim.limit(), 2);
    let s = saturated(lim.try_acquire_key("k").await);
    assert_eq!((s.limit(), s.in_flight()), (2, 4), "nothing revoked");
    held.truncate(2);
    lim.flush().await;
    let s = saturated(lim.try_acquire_key("k").await);
    assert_eq!(
        (s.limit(), s.in_flight()),
        (2, 2),
        "drained to the new limit, not below"
    );
    held.pop();
    lim.flush().await;
    held.push(lim.try_acquire_key("k").await.unwrap());
    lim.set_limit(n(3));
    held.push(lim.try_acquire_key("k").await.unwrap());
    let s = saturated(lim.try_acquire_key("k").await);
    assert_eq!((s.limit(), s.in_flight()), (3, 3));
    assert!(held.iter().all(|p| p.is_shared()));
}
