//! Queue mode: wait a bounded time for capacity instead of rejecting at once, with the
//! number of waiters capped per key and in total.

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::sync::Mutex;

/// A sleep function: returns a future that completes after the given duration.
pub type Sleep = Arc<dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Queue mode: a denied request waits up to `max_wait` for capacity, then is rejected.
///
/// * A request whose wait (its `retry_after`) exceeds what is left of `max_wait` is
///   rejected at once: nothing waits for a wait it cannot finish.
/// * Each wait is the denial's `retry_after` plus a jitter drawn from
///   `[0, max(retry_after / 2, 1 ms)]`, cut to what is left of `max_wait`, so waiters do not
///   wake in lockstep; then the request is judged again, all limits together.
/// * At most [`max_waiters_per_key`](Self::max_waiters_per_key) (default 8) requests of one
///   key and [`max_waiters`](Self::max_waiters) (default 1024) in total wait at once; beyond
///   either, a denied request is rejected at once (reason `queue_full`). An unbounded queue
///   would be a denial of service.
/// * Cancellation-safe: dropping the response future (a client that hung up) frees its
///   waiter slot at once; a waiting request has consumed nothing.
/// * `max_wait` counts the time asked of the sleep function, which is runtime-agnostic:
///   give `|d| Box::pin(tokio::time::sleep(d))` with tokio.
///
/// ```
/// use std::time::Duration;
/// use tollgate::http::Queue;
/// let queue = Queue::new(Duration::from_millis(500), |d| Box::pin(async move {
///     // with tokio: tokio::time::sleep(d).await
///     let _ = d;
/// }))
/// .max_waiters_per_key(4)
/// .max_waiters(256);
/// assert_eq!(queue.max_wait(), Duration::from_millis(500));
/// ```
#[derive(Clone)]
pub struct Queue {
    max_wait: Duration,
    per_key: usize,
    total: usize,
    sleep: Sleep,
}

impl Queue {
    /// Queue mode waiting at most `max_wait`, sleeping with `sleep`.
    pub fn new(
        max_wait: Duration,
        sleep: impl Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            max_wait,
            per_key: 8,
            total: 1024,
            sleep: Arc::new(sleep),
        }
    }

    /// The most requests of one key waiting at once (default 8).
    pub fn max_waiters_per_key(mut self, n: usize) -> Self {
        self.per_key = n;
        self
    }

    /// The most requests waiting at once in total (default 1024).
    pub fn max_waiters(mut self, n: usize) -> Self {
        self.total = n;
        self
    }

    /// The longest a request waits.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("max_wait", &self.max_wait)
            .field("max_waiters_per_key", &self.per_key)
            .field("max_waiters", &self.total)
            .finish_non_exhaustive()
    }
}

/// A queue with its live waiter counts.
pub(crate) struct Waiters {
    pub(crate) config: Queue,
    total: AtomicUsize,
    per_key: Mutex<HashMap<String, usize>>,
    rng: AtomicU64,
}

impl Waiters {
    pub(crate) fn new(config: Queue) -> Self {
        Self {
            config,
            total: AtomicUsize::new(0),
            per_key: Mutex::new(HashMap::new()),
            rng: AtomicU64::new(RandomState::new().hash_one(0u8) | 1),
        }
    }

    /// A waiter slot for `key`, or `None` if a cap is reached.
    pub(crate) fn enter(self: &Arc<Self>, key: &str) -> Option<Slot> {
        // Relaxed: the count is a bound, not a lock; the key map below is the exact one.
        let taken = self
            .total
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.config.total).then_some(n + 1)
            });
        if taken.is_err() {
            return None;
        }
        let mut map = self.per_key.lock();
        let n = map.entry(key.to_owned()).or_insert(0);
        if *n >= self.config.per_key {
            if *n == 0 {
                map.remove(key);
            }
            drop(map);
            self.total.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        *n += 1;
        Some(Slot {
            waiters: Arc::clone(self),
            key: key.to_owned(),
        })
    }

    /// How many requests wait now.
    pub(crate) fn len(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// How many keys have waiters now (the map's size: bounded by the total cap).
    pub(crate) fn keys(&self) -> usize {
        self.per_key.lock().len()
    }

    /// `retry_after` plus jitter in `[0, max(retry_after / 2, 1 ms)]`.
    pub(crate) fn jittered(&self, retry_after: Duration) -> Duration {
        // splitmix64 over a shared counter: uniform enough, no lock, no dependency.
        let mut z = self
            .rng
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let window = (retry_after / 2).max(Duration::from_millis(1));
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        retry_after.saturating_add(Duration::from_nanos(z % window_ns.saturating_add(1)))
    }

    pub(crate) fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        (self.config.sleep)(d)
    }
}

/// A taken waiter slot; dropping it (the request proceeds, is rejected, or its future is
/// dropped) frees it.
pub(crate) struct Slot {
    waiters: Arc<Waiters>,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.waiters.per_key.lock();
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
        drop(map);
        self.waiters.total.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiters(per_key: usize, total: usize) -> Arc<Waiters> {
        let q = Queue::new(Duration::from_secs(1), |_| Box::pin(async {}))
            .max_waiters_per_key(per_key)
            .max_waiters(total);
        Arc::new(Waiters::new(q))
    }

    #[test]
    fn caps_per_key_and_in_total_and_frees_on_drop() {
        let w = waiters(2, 3);
        let a1 = w.enter("a");
        let a2 = w.enter("a");
        assert!(a1.is_some() && a2.is_some());
        assert!(w.enter("a").is_none(), "third waiter of one key");
        let b1 = w.enter("b");
        assert!(b1.is_some());
        assert!(w.enter("c").is_none(), "fourth waiter in total");
        assert_eq!((w.len(), w.keys()), (3, 2));
        drop((a1, a2, b1));
        assert_eq!((w.len(), w.keys()), (0, 0));
        assert!(w.enter("c").is_some());
    }

    #[test]
    fn a_zero_cap_admits_nobody_and_leaves_nothing() {
        let w = waiters(0, 10);
        assert!(w.enter("a").is_none());
        assert_eq!((w.len(), w.keys()), (0, 0));
    }

    #[test]
    fn jitter_stays_in_its_window_and_varies() {
        let w = waiters(1, 1);
        let base = Duration::from_millis(100);
        let draws: Vec<_> = (0..64).map(|_| w.jittered(base)).collect();
        assert!(draws.iter().all(|d| *d >= base && *d <= base + base / 2));
        assert!(draws.iter().any(|d| *d != draws[0]), "jitter must vary");
    }
}
