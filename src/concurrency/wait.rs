//! Waiting for a slot: `acquire().await` and `acquire_key(&k).await` (feature `tokio`), and
//! the runtime-agnostic waits under them, bounded by any future (the gateway layer's queue
//! mode gives its own sleep).
//!
//! A waiter takes a ticket in its counter's FIFO queue (`queue.rs`); releases grant slots to
//! tickets in order, under the queue's lock. The future owns a [`Ticket`] whose drop takes
//! the ticket out under that lock: a waiter cancelled while waiting held nothing, and one
//! cancelled just after its grant gives the granted slot back. With tokio the bound is a
//! `tokio::time::sleep` (so tokio's paused clock drives it in tests).

use core::borrow::Borrow;
use core::future::{poll_fn, Future};
use core::hash::Hash;
use core::pin::pin;
use core::task::Poll;
use std::sync::Arc;

use super::direct::Core;
use super::keyed::{Entry, KeyedCore};
use super::permit::Permit;
use super::queue::{Left, WaitQueue};
use super::{ConcurrencyLimiter, KeyedConcurrencyLimiter, Saturated};
use crate::sync::atomic::Ordering;

/// Where a ticket waits: the direct limiter's queue, or one key's.
trait Line {
    /// Runs `f` on the ticket's queue under its lock, with a way to give a slot back.
    fn with<R>(&self, f: impl FnOnce(&mut WaitQueue, &dyn Fn(&mut WaitQueue)) -> R) -> R;
    /// The refusal to report after a timeout.
    fn saturated(&self, class: u8) -> Saturated;
}

impl Line for Core {
    fn with<R>(&self, f: impl FnOnce(&mut WaitQueue, &dyn Fn(&mut WaitQueue)) -> R) -> R {
        let mut q = self.queue.lock();
        let r = f(&mut q, &|q| self.release_locked(q));
        self.published(&q);
        r
    }

    fn saturated(&self, class: u8) -> Saturated {
        self.refusal(class)
    }
}

/// One key's queue.
struct KeyLine<'a>(&'a KeyedCore, u64);

impl Line for KeyLine<'_> {
    fn with<R>(&self, f: impl FnOnce(&mut WaitQueue, &dyn Fn(&mut WaitQueue)) -> R) -> R {
        let KeyLine(core, fp) = *self;
        let mut shard = core.shard(fp);
        // A ticket keeps its key's entry alive (waiting, or granted and so counted).
        let (r, release) = match shard.get_mut(&fp) {
            Some(Entry { queue: Some(q), .. }) => {
                let released = core::cell::Cell::new(false);
                let r = f(q, &|_| released.set(true));
                (r, released.get())
            }
            _ => (f(&mut WaitQueue::default(), &|_| {}), false),
        };
        if release {
            core.release_locked(&mut shard, fp);
        } else if let Some(e) = shard.get(&fp) {
            // A waiter left: forget the key if that was all it had.
            if e.in_flight == 0 && e.queue.as_ref().is_none_or(|q| q.is_empty()) {
                shard.remove(&fp);
                core.forget_one();
            }
        }
        r
    }

    fn saturated(&self, class: u8) -> Saturated {
        let KeyLine(core, fp) = *self;
        let limit = core.limit();
        let slots = core.slots(limit, class);
        let n = core.shard(fp).get(&fp).map_or(0, |e| e.in_flight);
        Saturated::limit_reached(limit, n, slots)
    }
}

/// A queued waiter; dropped unclaimed, it leaves the queue (giving back a granted slot).
struct Ticket<'a, L: Line> {
    line: &'a L,
    id: u64,
    live: bool,
}

impl<L: Line> Ticket<'_, L> {
    /// Waits for the grant until `deadline` completes: `true` if granted (the slot is then
    /// the caller's).
    async fn wait_until(&mut self, deadline: impl Future<Output = ()>) -> bool {
        let (line, id) = (self.line, self.id);
        let mut deadline = pin!(deadline);
        let got = poll_fn(|cx| {
            if line.with(|q, _| q.poll(id, cx.waker())).is_ready() {
                return Poll::Ready(true);
            }
            deadline.as_mut().poll(cx).map(|()| false)
        })
        .await;
        // Timed out: a grant may still have landed before the lock was taken.
        let got = got || line.with(|q, _| q.leave(id) == Left::Granted);
        self.live = false;
        got
    }
}

/// Why a bounded wait gave no permit.
pub(crate) enum NoSlot {
    /// Refused at once (a full key table): no wait would help.
    Now(Saturated),
    /// The deadline came first; the refusal as it stood then.
    TimedOut(Saturated),
}

impl NoSlot {
    #[cfg(feature = "tokio")]
    fn timed(self, waited: core::time::Duration) -> Saturated {
        match self {
            Self::Now(s) => s,
            Self::TimedOut(s) => s.timed_out(waited),
        }
    }

    /// The refusal, however it came.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))] // reason: the layer's
    pub(crate) fn into_saturated(self) -> Saturated {
        match self {
            Self::Now(s) | Self::TimedOut(s) => s,
        }
    }
}

/// `tokio::time::sleep(d)`, or a wait that never ends.
#[cfg(feature = "tokio")]
async fn bound(max_wait: Option<core::time::Duration>) {
    match max_wait {
        Some(d) => tokio::time::sleep(d).await,
        None => core::future::pending().await,
    }
}

impl<L: Line> Drop for Ticket<'_, L> {
    fn drop(&mut self) {
        if self.live {
            let id = self.id;
            self.line.with(|q, give_back| {
                if q.leave(id) == Left::Granted {
                    give_back(q);
                }
            });
        }
    }
}

impl ConcurrencyLimiter {
    /// A permit, waiting for one in FIFO order if none is open (class 0), for at most the
    /// builder's [`max_wait`](super::ConcurrencyLimiterBuilder::max_wait). A dropped future
    /// holds nothing.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tollgate::concurrency::{ConcurrencyLimiter, SaturatedReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tollgate::concurrency::Saturated> {
    /// let lim = ConcurrencyLimiter::builder(NonZeroU32::new(1).unwrap())
    ///     .max_wait(Duration::from_millis(50))
    ///     .build();
    /// let held = lim.acquire().await?;
    /// let err = lim.acquire().await.unwrap_err(); // 50 ms on tokio's (paused) clock
    /// assert_eq!(err.reason(), SaturatedReason::Timeout);
    /// assert_eq!(err.waited(), Some(Duration::from_millis(50)));
    /// drop(held);
    /// assert!(lim.acquire().await.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Saturated`] (reason `Timeout`) if no slot was granted within `max_wait`.
    #[cfg(feature = "tokio")]
    pub async fn acquire(&self) -> Result<Permit, Saturated> {
        self.acquire_class(0).await
    }

    /// [`acquire`](Self::acquire) for a priority class.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    #[cfg(feature = "tokio")]
    pub async fn acquire_class(&self, class: u8) -> Result<Permit, Saturated> {
        let start = tokio::time::Instant::now();
        self.acquire_class_until(class, bound(self.core.max_wait))
            .await
            .map_err(|e| e.timed(start.elapsed()))
    }

    /// A permit, waiting in FIFO order until `deadline` completes.
    pub(crate) async fn acquire_class_until(
        &self,
        class: u8,
        deadline: impl Future<Output = ()>,
    ) -> Result<Permit, NoSlot> {
        let core: &Core = &self.core;
        // Behind any earlier waiter: fair among waiters.
        if core.waiting.load(Ordering::Acquire) == 0 && core.take(class).is_ok() {
            return Ok(Permit::direct(Arc::clone(&self.core)));
        }
        let id = core.enqueue(class);
        let mut ticket = Ticket {
            line: core,
            id,
            live: true,
        };
        if ticket.wait_until(deadline).await {
            Ok(Permit::direct(Arc::clone(&self.core)))
        } else {
            // Relaxed: a statistic.
            core.saturations.fetch_add(1, Ordering::Relaxed);
            Err(NoSlot::TimedOut(core.saturated(class)))
        }
    }
}

impl<K> KeyedConcurrencyLimiter<K> {
    /// A permit for `key`, waiting for one in FIFO order among the key's waiters (class 0),
    /// for at most the builder's `max_wait`. A dropped future holds nothing.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use tollgate::concurrency::KeyedConcurrencyLimiter;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tollgate::concurrency::Saturated> {
    /// let lim = KeyedConcurrencyLimiter::<&str>::new(NonZeroU32::new(1).unwrap());
    /// let held = lim.acquire_key("a").await?;
    /// let waiter = tokio::spawn({
    ///     let lim = lim.clone();
    ///     async move { lim.acquire_key("a").await.map(|p| p.release()) }
    /// });
    /// tokio::task::yield_now().await;
    /// assert_eq!(lim.in_flight_key("a"), 1);
    /// drop(held); // granted to the waiter
    /// waiter.await.unwrap()?;
    /// assert_eq!((lim.in_flight_key("a"), lim.keys()), (0, 0));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Saturated`]: a timeout, or the table full of other keys (returned at once).
    #[cfg(feature = "tokio")]
    pub async fn acquire_key<Q>(&self, key: &Q) -> Result<Permit, Saturated>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.acquire_key_class(key, 0).await
    }

    /// [`acquire_key`](Self::acquire_key) for a priority class.
    ///
    /// # Errors
    ///
    /// As [`acquire_key`](Self::acquire_key).
    #[cfg(feature = "tokio")]
    pub async fn acquire_key_class<Q>(&self, key: &Q, class: u8) -> Result<Permit, Saturated>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let start = tokio::time::Instant::now();
        self.acquire_key_class_until(key, class, bound(self.core.max_wait))
            .await
            .map_err(|e| e.timed(start.elapsed()))
    }

    /// A permit for `key`, waiting in FIFO order among the key's waiters until `deadline`
    /// completes.
    pub(crate) async fn acquire_key_class_until<Q>(
        &self,
        key: &Q,
        class: u8,
        deadline: impl Future<Output = ()>,
    ) -> Result<Permit, NoSlot>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let core: &KeyedCore = &self.core;
        let fp = core.fingerprint(key);
        let id = {
            let mut shard = core.shard(fp);
            let queued = shard
                .get(&fp)
                .and_then(|e| e.queue.as_ref())
                .is_some_and(|q| q.waiting() > 0);
            match (queued, core.take(&mut shard, fp, class)) {
                (false, Ok(())) => return Ok(Permit::keyed(Arc::clone(&self.core), fp)),
                (true, Ok(())) => core.release_locked(&mut shard, fp),
                (_, Err(s)) if s.reason() == super::SaturatedReason::TableFull => {
                    return Err(NoSlot::Now(s))
                }
                (_, Err(_)) => {}
            }
            // The entry exists: the key has permits out (or waiters).
            let Some(e) = shard.get_mut(&fp) else {
                return Err(NoSlot::Now(KeyLine(core, fp).saturated(class)));
            };
            let q = e.queue.get_or_insert_with(Box::default);
            let id = q.push(class);
            core.grant(e);
            id
        };
        let line = KeyLine(core, fp);
        let mut ticket = Ticket {
            line: &line,
            id,
            live: true,
        };
        if ticket.wait_until(deadline).await {
            Ok(Permit::keyed(Arc::clone(&self.core), fp))
        } else {
            // Relaxed: a statistic.
            self.core.saturations.fetch_add(1, Ordering::Relaxed);
            Err(NoSlot::TimedOut(line.saturated(class)))
        }
    }
}
