//! [`KeyedRateLimiter`]'s async waits: `until_key_ready`, `until_key_n_ready` and their
//! `_with` forms.

use core::borrow::Borrow;
use core::convert::Infallible;
use core::future::Future;
use core::hash::Hash;
use core::time::Duration;

use super::KeyedRateLimiter;
use crate::engine::error::InsufficientCapacity;
use crate::engine::verdict::Verdict;
use crate::limiter::wait::{self, Wait};

impl<K: Hash> KeyedRateLimiter<K> {
    /// Waits until one unit is allowed for `key`, sleeping with `wait`'s sleep function
    /// between checks (the retry-after plus a jitter, see [`Wait`]), and returns the
    /// permitting verdict — or, with a [`max_wait`](Wait::max_wait), the denial whose
    /// retry-after would end past it; without one, a denial only if waiting can never help
    /// (a retry-after of [`Duration::MAX`]).
    ///
    /// Cancellation-safe: the wait only checks (a denied check writes nothing), so dropping
    /// the future at any point leaves the limiter as if it had never run. A key that shares
    /// the overflow cell of a full table waits on that cell.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedRateLimiter, ManualClock, Wait};
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let waker = std::task::Waker::noop();
    /// #     let mut cx = std::task::Context::from_waker(&waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    ///
    /// let clock = ManualClock::new();
    /// let lim = KeyedRateLimiter::<String>::builder("2/s;burst=1".parse()?)
    ///     .clock(clock.clone())
    ///     .build();
    /// let sleep = |d: Duration| {
    ///     clock.advance(d);
    ///     std::future::ready(())
    /// };
    /// assert!(lim.check_key("alice").is_permitted());
    /// assert!(block_on(lim.until_key_ready_with("alice", Wait::new(sleep))).is_permitted());
    /// assert!(clock.now() >= Duration::from_millis(500));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub async fn until_key_ready_with<Q, S, F>(&self, key: &Q, wait: Wait<S>) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
        S: Fn(Duration) -> F,
        F: Future<Output = ()>,
    {
        let check = || Ok::<_, Infallible>(self.check_key(key));
        match wait::until(wait, || self.now(), check).await {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// Waits until `n` units are allowed at once for `key` (see
    /// [`until_key_ready_with`](Self::until_key_ready_with)). `n = 0` returns at once.
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] at once if `n` exceeds the burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{KeyedRateLimiter, ManualClock, Wait};
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let waker = std::task::Waker::noop();
    /// #     let mut cx = std::task::Context::from_waker(&waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    ///
    /// let clock = ManualClock::new();
    /// let lim = KeyedRateLimiter::<u64>::builder("10/s".parse()?).clock(clock.clone()).build();
    /// let sleep = |d: Duration| {
    ///     clock.advance(d);
    ///     std::future::ready(())
    /// };
    /// assert!(lim.check_key_n(&7, 10)?.is_permitted());
    /// assert!(block_on(lim.until_key_n_ready_with(&7, 10, Wait::new(sleep)))?.is_permitted());
    /// assert!(clock.now() >= Duration::from_secs(1));
    /// assert!(block_on(lim.until_key_n_ready_with(&7, 11, Wait::new(sleep))).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_key_n_ready_with<Q, S, F>(
        &self,
        key: &Q,
        n: u64,
        wait: Wait<S>,
    ) -> Result<Verdict, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
        S: Fn(Duration) -> F,
        F: Future<Output = ()>,
    {
        wait::until(wait, || self.now(), || self.check_key_n(key, n)).await
    }

    /// [`until_key_ready_with`](Self::until_key_ready_with) with [`tokio::time::sleep`] and
    /// no `max_wait` (feature `tokio`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::QuotaError> {
    /// let lim: tollgate::KeyedRateLimiter<String> = tollgate::KeyedRateLimiter::new("1000/s".parse()?);
    /// assert!(lim.until_key_ready("alice").await.is_permitted());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_key_ready<Q>(&self, key: &Q) -> Verdict
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.until_key_ready_with(key, Wait::tokio()).await
    }

    /// [`until_key_n_ready_with`](Self::until_key_n_ready_with) with [`tokio::time::sleep`]
    /// and no `max_wait` (feature `tokio`).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] at once if `n` exceeds the burst.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim: tollgate::KeyedRateLimiter<u64> = tollgate::KeyedRateLimiter::new("1000/s;burst=5".parse()?);
    /// assert!(lim.until_key_n_ready(&1, 5).await?.is_permitted());
    /// assert!(lim.until_key_n_ready(&1, 6).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_key_n_ready<Q>(
        &self,
        key: &Q,
        n: u64,
    ) -> Result<Verdict, InsufficientCapacity>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.until_key_n_ready_with(key, n, Wait::tokio()).await
    }
}
