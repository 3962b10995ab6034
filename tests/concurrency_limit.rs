//! Concurrency limits: `tollgate::concurrency`. (`tests/concurrency.rs` is the
//! rate limiter under threads.) Waits run on tokio's paused clock: no real time is slept.
#![cfg(not(loom))]

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Barrier;

use tollgate::concurrency::{
    ConcurrencyLimiter, KeyedConcurrencyLimiter, LimitError, Permit, SaturatedReason,
};
use tollgate::shaping::Priorities;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("a non-zero limit in a test") // a test: a panic is its failure
}

#[test]
fn a_zero_limit_is_a_typed_error() {
    assert_eq!(
        ConcurrencyLimiter::try_new(0).unwrap_err(),
        LimitError::Zero
    );
    assert_eq!(
        KeyedConcurrencyLimiter::<u64>::try_new(0).unwrap_err(),
        LimitError::Zero
    );
    let lim = ConcurrencyLimiter::try_new(2).unwrap();
    assert_eq!(lim.try_set_limit(0), Err(LimitError::Zero));
    assert_eq!(lim.limit(), 2);
    let keyed = KeyedConcurrencyLimiter::<u64>::try_new(2).unwrap();
    assert_eq!(keyed.try_set_limit(0), Err(LimitError::Zero));
    assert_eq!(keyed.limit(), 2);
}

#[test]
fn saturated_carries_the_limit_and_the_count() {
    let lim = ConcurrencyLimiter::new(nz(3));
    let held: Vec<Permit> = (0..3).map(|_| lim.try_acquire().unwrap()).collect();
    let err = lim.try_acquire().unwrap_err();
    assert_eq!(
        (err.limit(), err.in_flight(), err.slots(), err.reason()),
        (3, 3, 3, SaturatedReason::Limit)
    );
    assert_eq!(err.waited(), None);
    drop(held);
    assert_eq!(lim.in_flight(), 0);
}

fn assert_send_static<T: Send + 'static>() {}

#[test]
fn permits_are_send_static_move_threads_and_outlive_their_limiter() {
    assert_send_static::<Permit>();
    let lim = ConcurrencyLimiter::new(nz(1));
    let watch = lim.clone();
    let p = lim.try_acquire().unwrap();
    drop(lim);
    std::thread::spawn(move || drop(p)).join().unwrap();
    assert_eq!(watch.in_flight(), 0);
    let keyed = KeyedConcurrencyLimiter::<String>::new(nz(1));
    let p = keyed.try_acquire_key("k").unwrap();
    let watch = keyed.clone();
    drop(keyed);
    std::thread::spawn(move || p.release()).join().unwrap();
    assert_eq!((watch.in_flight_key("k"), watch.keys()), (0, 0));
}

/// Peer bug (tower #794): clones of a limiter that do not share its state.
#[test]
fn clones_share_one_counter() {
    let lim = ConcurrencyLimiter::new(nz(2));
    let clones: Vec<_> = (0..4).map(|_| lim.clone()).collect();
    let _a = clones[0].try_acquire().unwrap();
    let _b = clones[1].try_acquire().unwrap();
    for c in &clones {
        assert!(c.try_acquire().is_err());
        assert_eq!(c.in_flight(), 2);
    }
    let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(1));
    let other = keyed.clone();
    let _k = keyed.try_acquire_key(&7).unwrap();
    assert!(other.try_acquire_key(&7).is_err());
}

#[test]
fn a_panic_while_holding_releases() {
    let lim = ConcurrencyLimiter::new(nz(1));
    let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _p = lim.try_acquire().unwrap();
        let _q = keyed.try_acquire_key(&1).unwrap();
        panic!("handler failed");
    }));
    assert!(r.is_err());
    assert_eq!(lim.in_flight(), 0);
    assert_eq!((keyed.in_flight_key(&1), keyed.keys()), (0, 0));
    // A thread that panics holding a permit gives it back too.
    let l2 = lim.clone();
    let t = std::thread::spawn(move || {
        let _p = l2.try_acquire().unwrap();
        panic!("worker died");
    });
    assert!(t.join().is_err());
    assert_eq!(lim.in_flight(), 0);
}

/// Hammers `acquire` from 8 threads; `held` counts the permits the threads hold (raised
/// after an acquire, lowered before the drop), so it never exceeds the true count.
fn hammer(threads: usize, iters: usize, acquire: impl Fn(usize) -> Option<Permit> + Sync) -> u32 {
    let held = AtomicU32::new(0);
    let max = AtomicU32::new(0);
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (held, max, barrier, acquire) = (&held, &max, &barrier, &acquire);
            s.spawn(move || {
                barrier.wait();
                for i in 0..iters {
                    if let Some(p) = acquire(t * iters + i) {
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(now, Ordering::SeqCst);
                        std::hint::spin_loop();
                        held.fetch_sub(1, Ordering::SeqCst);
                        drop(p);
                    }
                }
            });
        }
    });
    max.load(Ordering::SeqCst)
}

/// Peer bug (Netflix concurrency-limits #140): an acquire race that admits past the limit.
#[test]
fn eight_threads_never_exceed_the_limit() {
    let lim = ConcurrencyLimiter::new(nz(3));
    let max = hammer(8, 100_000, |_| lim.try_acquire().ok());
    assert!((1..=3).contains(&max), "max in flight {max}");
    assert_eq!(lim.in_flight(), 0);
}

#[test]
fn eight_threads_hammering_one_key_never_exceed_its_limit() {
    let lim = KeyedConcurrencyLimiter::<u64>::new(nz(2));
    let max = hammer(8, 50_000, |_| lim.try_acquire_key(&42).ok());
    assert!((1..=2).contains(&max), "max in flight {max}");
    assert_eq!((lim.in_flight_key(&42), lim.keys()), (0, 0));
}

#[test]
fn set_limit_racing_acquires_never_exceeds_the_highest_limit() {
    let lim = ConcurrencyLimiter::new(nz(4));
    let stop = AtomicBool::new(false);
    let max = std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                lim.set_limit(nz(1 + i % 4));
                i = i.wrapping_add(1);
            }
        });
        let max = hammer(7, 50_000, |_| lim.try_acquire().ok());
        stop.store(true, Ordering::SeqCst);
        max
    });
    assert!((1..=4).contains(&max), "max in flight {max}");
    assert_eq!(lim.in_flight(), 0);
}

#[test]
fn keyed_set_limit_racing_acquires_never_exceeds_the_highest_limit() {
    let lim = KeyedConcurrencyLimiter::<u64>::new(nz(3));
    let stop = AtomicBool::new(false);
    let max = std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Ordering::SeqCst) {
                lim.set_limit(nz(1 + i % 3));
                i = i.wrapping_add(1);
            }
        });
        let max = hammer(7, 30_000, |_| lim.try_acquire_key(&5).ok());
        stop.store(true, Ordering::SeqCst);
        max
    });
    assert!((1..=3).contains(&max), "max in flight {max}");
    assert_eq!((lim.in_flight_key(&5), lim.keys()), (0, 0));
}

#[test]
fn lowering_the_limit_drains_and_never_revokes() {
    let lim = ConcurrencyLimiter::new(nz(6));
    let mut held: Vec<Permit> = (0..6).map(|_| lim.try_acquire().unwrap()).collect();
    lim.set_limit(nz(2));
    assert_eq!((lim.limit(), lim.in_flight()), (2, 6));
    for n in (2..6).rev() {
        held.pop();
        assert_eq!(lim.in_flight(), n);
        assert!(lim.try_acquire().is_err(), "admitted at {n} in flight");
    }
    held.pop();
    let p = lim.try_acquire().unwrap();
    assert_eq!(lim.in_flight(), 2);
    assert!(lim.try_acquire().is_err());
    drop((p, held));
    // The keyed limiter drains per key the same way.
    let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(3));
    let mut held: Vec<Permit> = (0..3).map(|_| keyed.try_acquire_key(&1).unwrap()).collect();
    keyed.set_limit(nz(1));
    assert_eq!(keyed.in_flight_key(&1), 3);
    held.pop();
    assert!(keyed.try_acquire_key(&1).is_err());
    held.clear();
    assert!(keyed.try_acquire_key(&1).is_ok());
}

#[test]
fn priorities_keep_slots_for_the_classes_above() {
    let classes = Priorities::new([(1, 0.2), (2, 0.5)]).unwrap();
    let lim = ConcurrencyLimiter::builder(nz(10))
        .priorities(classes.clone())
        .build();
    let mut held = Vec::new();
    while let Ok(p) = lim.try_acquire_class(2) {
        held.push(p);
    }
    assert_eq!(held.len(), 5);
    let err = lim.try_acquire_class(2).unwrap_err();
    assert_eq!((err.in_flight(), err.slots(), err.limit()), (5, 5, 10));
    assert_eq!(
        err.to_string(),
        "5 permits in flight of the 5 open to this class (limit 10)"
    );
    while let Ok(p) = lim.try_acquire_class(1) {
        held.push(p);
    }
    assert_eq!(held.len(), 8);
    // Heartbeats (class 0) always find the last slots.
    held.push(lim.try_acquire().unwrap());
    held.push(lim.try_acquire().unwrap());
    assert!(lim.try_acquire().is_err());
    // Per key, the same shares.
    let keyed = KeyedConcurrencyLimiter::<u64>::builder(nz(4))
        .priorities(classes)
        .build();
    let a = keyed.try_acquire_key_class(&1, 2).unwrap();
    let b = keyed.try_acquire_key_class(&1, 2).unwrap();
    assert!(keyed.try_acquire_key_class(&1, 2).is_err());
    assert!(keyed.try_acquire_key_class(&1, 1).is_ok());
    drop((a, b));
}

#[test]
fn a_full_table_refuses_new_keys_and_never_over_admits() {
    let lim = KeyedConcurrencyLimiter::<u64>::builder(nz(1))
        .max_keys(4)
        .build();
    let held: Vec<Permit> = (0..4).map(|k| lim.try_acquire_key(&k).unwrap()).collect();
    let err = lim.try_acquire_key(&99).unwrap_err();
    assert_eq!(err.reason(), SaturatedReason::TableFull);
    assert_eq!(
        err.to_string(),
        "no room for another key: every tracked key has permits in flight"
    );
    assert_eq!(lim.keys(), 4);
    drop(held);
    assert_eq!(lim.keys(), 0);
    assert!(lim.try_acquire_key(&99).is_ok());
}

#[test]
fn a_million_one_off_keys_stay_bounded() {
    let lim = KeyedConcurrencyLimiter::<u64>::builder(nz(1))
        .max_keys(1_000)
        .build();
    let mut window = std::collections::VecDeque::new();
    let mut max_keys = 0;
    for k in 0..1_000_000u64 {
        window.push_back(lim.try_acquire_key(&k).unwrap());
        if window.len() > 500 {
            window.pop_front();
        }
        max_keys = max_keys.max(lim.keys());
    }
    assert_eq!(max_keys, 500);
    window.clear();
    assert_eq!(lim.keys(), 0);
}

#[cfg(feature = "tokio")]
mod waits {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test(start_paused = true)]
    async fn max_wait_returns_saturated_with_the_wait() {
        let lim = ConcurrencyLimiter::builder(nz(1))
            .max_wait(Duration::from_millis(50))
            .build();
        let _held = lim.acquire().await.unwrap();
        let start = tokio::time::Instant::now();
        let err = lim.acquire().await.unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_millis(50));
        assert_eq!(err.reason(), SaturatedReason::Timeout);
        assert_eq!(err.waited(), Some(Duration::from_millis(50)));
        assert_eq!((err.limit(), err.in_flight()), (1, 1));
        assert_eq!(lim.waiting(), 0);
        assert_eq!(
            err.to_string(),
            "1 permits in flight of a limit of 1 after waiting 50ms"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_arrival_order() {
        let lim = ConcurrencyLimiter::new(nz(1));
        let held = lim.acquire().await.unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..5 {
            let (lim, order) = (lim.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let p = lim.acquire().await.unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
                drop(p);
            }));
            tokio::task::yield_now().await; // each one queued before the next
        }
        assert_eq!(lim.waiting(), 5);
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4]);
        assert_eq!(lim.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn ten_thousand_cancelled_waiters_hold_nothing() {
        let lim = ConcurrencyLimiter::new(nz(1));
        let held = lim.try_acquire().unwrap();
        let mut futs: Vec<_> = (0..10_000).map(|_| Box::pin(lim.acquire())).collect();
        for f in &mut futs {
            assert!(poll_once(f.as_mut()).is_pending());
        }
        assert_eq!(lim.waiting(), 10_000);
        drop(futs);
        assert_eq!((lim.waiting(), lim.in_flight()), (0, 1));
        drop(held);
        assert_eq!(lim.in_flight(), 0);
        assert!(lim.acquire().await.is_ok());
        // Per key: the cancelled waiters leave the key with only its holder.
        let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(1));
        let held = keyed.try_acquire_key(&5).unwrap();
        let mut futs: Vec<_> = (0..10_000)
            .map(|_| Box::pin(keyed.acquire_key(&5)))
            .collect();
        for f in &mut futs {
            assert!(poll_once(f.as_mut()).is_pending());
        }
        drop(futs);
        assert_eq!((keyed.in_flight_key(&5), keyed.keys()), (1, 1));
        drop(held);
        assert_eq!(keyed.keys(), 0);
    }

    /// The race where a slot is granted to a waiter just as its future is dropped.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_dropped_after_its_grant_gives_the_slot_back() {
        let lim = ConcurrencyLimiter::new(nz(1));
        let held = lim.try_acquire().unwrap();
        {
            let mut f = pin!(lim.acquire());
            assert!(poll_once(f.as_mut()).is_pending());
            drop(held); // granted to the waiter, which never polls again
            assert_eq!((lim.in_flight(), lim.waiting()), (1, 0));
        }
        assert_eq!(lim.in_flight(), 0);
        let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(1));
        let held = keyed.try_acquire_key(&3).unwrap();
        {
            let mut f = pin!(keyed.acquire_key(&3));
            assert!(poll_once(f.as_mut()).is_pending());
            drop(held);
            assert_eq!(keyed.in_flight_key(&3), 1);
        }
        assert_eq!((keyed.in_flight_key(&3), keyed.keys()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn raising_the_limit_wakes_waiters() {
        let lim = ConcurrencyLimiter::new(nz(1));
        let _held = lim.try_acquire().unwrap();
        let w = tokio::spawn({
            let lim = lim.clone();
            async move { lim.acquire().await.map(Permit::release) }
        });
        tokio::task::yield_now().await;
        assert_eq!(lim.waiting(), 1);
        lim.set_limit(nz(2));
        w.await.unwrap().unwrap();
        assert_eq!(lim.in_flight(), 1);
        let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(1));
        let _held = keyed.try_acquire_key(&1).unwrap();
        let w = tokio::spawn({
            let keyed = keyed.clone();
            async move { keyed.acquire_key(&1).await.map(Permit::release) }
        });
        tokio::task::yield_now().await;
        keyed.set_limit(nz(2));
        w.await.unwrap().unwrap();
        assert_eq!(keyed.in_flight_key(&1), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn keyed_waits_time_out_and_forget_nothing_live() {
        let keyed = KeyedConcurrencyLimiter::<u64>::builder(nz(1))
            .max_wait(Duration::from_secs(1))
            .build();
        let held = keyed.acquire_key(&9).await.unwrap();
        let err = keyed.acquire_key(&9).await.unwrap_err();
        assert_eq!(err.waited(), Some(Duration::from_secs(1)));
        assert_eq!((err.in_flight(), keyed.keys()), (1, 1));
        drop(held);
        assert_eq!(keyed.keys(), 0);
    }

    /// Tasks on two worker threads queue and release against each other: every wait ends
    /// (a lost wake-up would leave one parked: the guard's timeout is only against a hang),
    /// and the permits out never exceed the limit.
    #[test]
    fn waits_under_threads_lose_no_wake_up_and_never_exceed_the_limit() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let lim = ConcurrencyLimiter::new(nz(2));
        let keyed = KeyedConcurrencyLimiter::<u64>::new(nz(2));
        let held = Arc::new(AtomicU32::new(0));
        let max = Arc::new(AtomicU32::new(0));
        rt.block_on(async {
            let tasks: Vec<_> = (0..8)
                .map(|t| {
                    let (lim, keyed, held, max) =
                        (lim.clone(), keyed.clone(), held.clone(), max.clone());
                    tokio::spawn(async move {
                        for _ in 0..2_000 {
                            let p = if t % 2 == 0 {
                                lim.acquire().await.unwrap()
                            } else {
                                keyed.acquire_key(&1).await.unwrap()
                            };
                            if t % 2 == 0 {
                                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                                max.fetch_max(now, Ordering::SeqCst);
                                tokio::task::yield_now().await;
                                held.fetch_sub(1, Ordering::SeqCst);
                            } else {
                                tokio::task::yield_now().await;
                            }
                            drop(p);
                        }
                    })
                })
                .collect();
            let all = async {
                for t in tasks {
                    t.await.unwrap();
                }
            };
            tokio::time::timeout(Duration::from_secs(120), all)
                .await
                .expect("a waiter was never woken");
        });
        assert!(max.load(Ordering::SeqCst) <= 2);
        assert_eq!((lim.in_flight(), lim.waiting()), (0, 0));
        assert_eq!((keyed.in_flight_key(&1), keyed.keys()), (0, 0));
    }
}
