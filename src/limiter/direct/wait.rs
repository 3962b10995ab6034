//! [`RateLimiter`]'s async waits: `until_ready`, `until_n_ready` and their `_with` forms.

use core::convert::Infallible;
use core::future::Future;
use core::time::Duration;

use crate::engine::error::InsufficientCapacity;
use crate::engine::verdict::Verdict;
use crate::limiter::direct::RateLimiter;
use crate::limiter::wait::{self, Wait};

impl RateLimiter {
    /// Waits until one unit is allowed, sleeping with `wait`'s sleep function between checks
    /// (the retry-after plus a jitter, see [`Wait`]), and returns the permitting verdict —
    /// or, with a [`max_wait`](Wait::max_wait), the denial whose retry-after would end past
    /// it; without one, a denial only if waiting can never help (a retry-after of
    /// [`Duration::MAX`]: a clock overflow).
    ///
    /// Cancellation-safe: the wait only checks (a denied check writes nothing), so dropping
    /// the future at any point leaves the limiter as if it had never run.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, RateLimiter, Wait};
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let waker = std::task::Waker::noop();
    /// #     let mut cx = std::task::Context::from_waker(&waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    ///
    /// let clock = ManualClock::new();
    /// let lim = RateLimiter::builder("10/s;burst=1".parse()?).clock(clock.clone()).build();
    /// let sleep = |d: Duration| {
    ///     clock.advance(d); // a test's sleep: move the manual clock
    ///     std::future::ready(())
    /// };
    /// assert!(block_on(lim.until_ready_with(Wait::new(sleep))).is_permitted());
    /// let start = clock.now();
    /// assert!(block_on(lim.until_ready_with(Wait::new(sleep))).is_permitted());
    /// let waited = clock.now() - start;
    /// assert!(waited >= Duration::from_millis(100) && waited <= Duration::from_millis(150));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub async fn until_ready_with<S, F>(&self, wait: Wait<S>) -> Verdict
    where
        S: Fn(Duration) -> F,
        F: Future<Output = ()>,
    {
        let check = || Ok::<_, Infallible>(self.check());
        match wait::until(wait, || self.now(), check).await {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// Waits until `n` units are allowed at once (see
    /// [`until_ready_with`](Self::until_ready_with)). `n = 0` returns at once.
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] at once if `n` exceeds the burst: it could never be allowed,
    /// so it is not waited for.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, RateLimiter, Wait};
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let waker = std::task::Waker::noop();
    /// #     let mut cx = std::task::Context::from_waker(&waker);
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    ///
    /// let clock = ManualClock::new();
    /// let lim = RateLimiter::builder("10/s".parse()?).clock(clock.clone()).build();
    /// let sleep = |d: Duration| {
    ///     clock.advance(d);
    ///     std::future::ready(())
    /// };
    /// assert!(lim.check_n(10)?.is_permitted());
    /// // 5 units come back in 500 ms; a wait of at most 200 ms gives up at once.
    /// let wait = Wait::new(sleep).max_wait(Duration::from_millis(200));
    /// let v = block_on(lim.until_n_ready_with(5, wait))?;
    /// assert_eq!(v.denied().map(|d| d.retry_after()), Some(Duration::from_millis(500)));
    /// assert!(block_on(lim.until_n_ready_with(11, Wait::new(sleep))).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_n_ready_with<S, F>(
        &self,
        n: u64,
        wait: Wait<S>,
    ) -> Result<Verdict, InsufficientCapacity>
    where
        S: Fn(Duration) -> F,
        F: Future<Output = ()>,
    {
        wait::until(wait, || self.now(), || self.check_n(n)).await
    }

    /// [`until_ready_with`](Self::until_ready_with) with [`tokio::time::sleep`] and no
    /// `max_wait` (feature `tokio`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::QuotaError> {
    /// let lim = tollgate::RateLimiter::new("1000/s;burst=1".parse()?);
    /// assert!(lim.until_ready().await.is_permitted());
    /// assert!(lim.until_ready().await.is_permitted()); // about 1 ms later
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_ready(&self) -> Verdict {
        self.until_ready_with(Wait::tokio()).await
    }

    /// [`until_n_ready_with`](Self::until_n_ready_with) with [`tokio::time::sleep`] and no
    /// `max_wait` (feature `tokio`).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] at once if `n` exceeds the burst.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = tollgate::RateLimiter::new("1000/s;burst=10".parse()?);
    /// assert!(lim.until_n_ready(10).await?.is_permitted());
    /// assert!(lim.until_n_ready(11).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn until_n_ready(&self, n: u64) -> Result<Verdict, InsufficientCapacity> {
        self.until_n_ready_with(n, Wait::tokio()).await
    }
}
