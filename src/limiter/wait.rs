//! Waiting for capacity: [`Wait`], how a limiter's `until_*` methods sleep, and the
//! loop they share. Runtime-agnostic: the caller hands in the sleep function (the `tokio`
//! feature adds [`Wait::tokio`] and methods that use it).
//!
//! A wait only ever *checks*: each wake-up is one ordinary check, which writes nothing when
//! it is denied and consumes capacity only when it is allowed — and then the wait returns in
//! the same poll. So a wait holds no reservation, and a dropped wait future (a cancelled
//! request, a `select!` that took another branch) leaves nothing behind.

use crate::sync::atomic::{AtomicU64, Ordering};
use core::fmt;
use core::future::Future;
use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::engine::clock::saturating_nanos;
use crate::engine::verdict::Verdict;

/// How to wait for capacity: the sleep function, and optionally the longest wait.
///
/// Each time a check is denied, the waiter sleeps for the denial's exact
/// [`retry_after`](crate::Denied::retry_after) plus a **jitter** drawn uniformly from
/// `[0, retry_after / 2]` (a fast PRNG seeded per wait), so waiters denied together wake
/// spread over half a retry-after instead of in lockstep, and none wakes before it could
/// pass. Then it checks again.
///
/// With [`max_wait`](Self::max_wait), a wait whose next retry-after would end past
/// `max_wait` (measured on the limiter's clock from the start of the wait) returns that
/// denial at once instead of sleeping; the jitter is cut so that no sleep ends past it.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, RateLimiter, Wait};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     let mut f = std::pin::pin!(f);
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
///
/// let clock = ManualClock::new();
/// let lim = RateLimiter::builder("10/s;burst=1".parse()?).clock(clock.clone()).build();
/// // A sleep function for a test: it advances the manual clock instead of sleeping. In a
/// // service: `tokio::time::sleep` (or `Wait::tokio()`, feature `tokio`).
/// let sleep = |d: Duration| {
///     clock.advance(d);
///     std::future::ready(())
/// };
/// assert!(block_on(lim.until_ready_with(Wait::new(sleep))).is_permitted()); // at once
/// // The next unit is 100 ms away: a wait of at most 50 ms returns the denial.
/// let v = block_on(lim.until_ready_with(Wait::new(sleep).max_wait(Duration::from_millis(50))));
/// assert_eq!(v.denied().map(|d| d.retry_after()), Some(Duration::from_millis(100)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[must_use = "a Wait does nothing until a limiter's until_*_with method uses it"]
pub struct Wait<S> {
    sleep: S,
    max_wait: Option<Duration>,
}

impl<S> fmt::Debug for Wait<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wait")
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}

impl<S, F> Wait<S>
where
    S: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    /// Waits with `sleep`, a function that returns a future completing after the given
    /// duration (`tokio::time::sleep`, `async_std::task::sleep`, a timer of your own), as
    /// long as it takes.
    ///
    /// ```
    /// use std::time::Duration;
    /// let wait = tollgate::Wait::new(|_d: Duration| std::future::ready(()));
    /// assert_eq!(wait.max_wait_duration(), None);
    /// ```
    pub fn new(sleep: S) -> Self {
        Self {
            sleep,
            max_wait: None,
        }
    }
}

impl<S> Wait<S> {
    /// Waits at most `max_wait` in all: a denial whose retry-after ends later is returned
    /// instead of waited for. `Duration::ZERO` never sleeps (one check).
    ///
    /// ```
    /// use std::time::Duration;
    /// let wait = tollgate::Wait::new(|_d: Duration| std::future::ready(()))
    ///     .max_wait(Duration::from_millis(250));
    /// assert_eq!(wait.max_wait_duration(), Some(Duration::from_millis(250)));
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The longest wait, if one was set.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let wait = tollgate::Wait::new(|_d: Duration| std::future::ready(()));
    /// assert!(wait.max_wait_duration().is_none());
    /// ```
    pub fn max_wait_duration(&self) -> Option<Duration> {
        self.max_wait
    }
}

/// The sleep function of [`Wait::tokio`]: [`tokio::time::sleep`].
///
/// ```
/// let sleep: tollgate::limiter::TokioSleep = tokio::time::sleep;
/// let _wait = tollgate::Wait::new(sleep);
/// ```
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub type TokioSleep = fn(Duration) -> tokio::time::Sleep;

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Wait<TokioSleep> {
    /// Waits with [`tokio::time::sleep`] (feature `tokio`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::QuotaError> {
    /// use std::time::Duration;
    /// use tollgate::{RateLimiter, Wait};
    ///
    /// let lim = RateLimiter::new("1000/s".parse()?);
    /// let wait = Wait::tokio().max_wait(Duration::from_millis(10));
    /// assert!(lim.until_ready_with(wait).await.is_permitted());
    /// # Ok(())
    /// # }
    /// ```
    pub fn tokio() -> Self {
        Wait::new(tokio::time::sleep as TokioSleep)
    }
}

/// A small, fast PRNG (SplitMix64) for the jitter, seeded per wait.
struct Jitter(u64);

impl Jitter {
    fn seeded() -> Self {
        // A per-process random key (std's hasher seeds) over a counter: distinct waits
        // draw distinct sequences, with no dependency.
        crate::sync::statics! {
            static WAITS: AtomicU64 = AtomicU64::new(0);
        }
        // Relaxed: only distinctness matters.
        let n = WAITS.fetch_add(1, Ordering::Relaxed);
        Self(RandomState::new().hash_one(n))
    }

    /// A draw uniform in `[0, bound]`.
    fn up_to(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        // Lemire's multiply-shift: the high half of z·(bound + 1) is below bound + 1.
        ((u128::from(z) * (u128::from(bound) + 1)) >> 64) as u64
    }
}

/// The sleep after a denial of `retry_after` ns, `elapsed` ns into a wait of at most
/// `max_wait` ns: `None` if the wait must end with the denial (it can never pass by waiting,
/// or the retry-after ends past `max_wait`).
fn next_sleep(
    retry_after: u64,
    elapsed: u64,
    max_wait: Option<u64>,
    jitter: &mut Jitter,
) -> Option<u64> {
    // A retry-after of u64::MAX ns (a clock overflow; a cost no cell can take) never ends.
    if retry_after == u64::MAX {
        return None;
    }
    let sleep = retry_after.saturating_add(jitter.up_to(retry_after / 2));
    match max_wait {
        None => Some(sleep),
        Some(max) => {
            let left = max.saturating_sub(elapsed);
            (retry_after <= left).then(|| sleep.min(left))
        }
    }
}

/// The loop every `until_*` method runs: check; on a denial sleep (see [`Wait`]) and check
/// again; return anything else. `now` is the limiter's clock.
pub(crate) async fn until<S, F, E>(
    wait: Wait<S>,
    now: impl Fn() -> u64,
    mut check: impl FnMut() -> Result<Verdict, E>,
) -> Result<Verdict, E>
where
    S: Fn(Duration) -> F,
    F: Future<Output = ()>,
{
    let start = now();
    let max_wait = wait.max_wait.map(saturating_nanos);
    let mut jitter = Jitter::seeded();
    loop {
        let v = check()?;
        let Verdict::Deny(d) = v else {
            return Ok(v);
        };
        let elapsed = now().saturating_sub(start);
        match next_sleep(d.retry_after_nanos(), elapsed, max_wait, &mut jitter) {
            Some(ns) => (wait.sleep)(Duration::from_nanos(ns)).await,
            None => return Ok(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_stays_in_its_range_and_spreads() {
        let mut j = Jitter::seeded();
        let draws: Vec<u64> = (0..10_000).map(|_| j.up_to(100)).collect();
        assert!(draws.iter().all(|&d| d <= 100));
        assert!(draws.contains(&0) && draws.contains(&100));
        let mean = draws.iter().sum::<u64>() as f64 / draws.len() as f64;
        assert!((45.0..55.0).contains(&mean), "{mean}");
        assert_eq!(j.up_to(0), 0);
        // The largest bound neither overflows nor sticks at 0.
        assert!(j.up_to(u64::MAX) > 0 || j.up_to(u64::MAX) > 0);
        let (mut a, mut b) = (Jitter::seeded(), Jitter::seeded());
        assert_ne!(a.up_to(u64::MAX), b.up_to(u64::MAX), "seeded per wait");
    }

    #[test]
    fn a_sleep_is_the_retry_after_plus_at_most_half_and_respects_max_wait() {
        let mut j = Jitter::seeded();
        for _ in 0..1_000 {
            let s = next_sleep(1_000, 0, None, &mut j).unwrap(); // test
            assert!((1_000..=1_500).contains(&s), "{s}");
            let s = next_sleep(1_000, 300, Some(1_500), &mut j).unwrap(); // test
            assert!((1_000..=1_200).contains(&s), "cut at max_wait: {s}");
        }
        assert_eq!(next_sleep(1_000, 600, Some(1_500), &mut j), None);
        assert_eq!(next_sleep(u64::MAX, 0, None, &mut j), None);
        assert_eq!(next_sleep(1, 0, Some(0), &mut j), None);
        assert_eq!(
            next_sleep(u64::MAX - 1, 5, None, &mut j).map(|s| s >= u64::MAX - 1),
            Some(true)
        );
    }
}
