//! Client-side backoff: exponential delays with full jitter, a denial-aware delay
//! that keeps denied clients from coming back in lockstep, and helpers that run an operation
//! with a bounded number of retries.
//!
//! Incidents 000 and 003 were both prolonged by clients that retried at once and in step; the
//! defaults here (3 retries, never a zero delay, jitter on every delay) are the fix.

use crate::sync::atomic::{AtomicU64, Ordering};
use core::fmt;
use core::future::Future;
use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use crate::engine::verdict::Verdict;

/// How long to wait between attempts: exponential, with full jitter, never zero, bounded.
///
/// Attempt `a` is what goes into [`Check::attempt`](crate::Check::attempt): 0 is the original
/// request, `1..=max_retries` are its retries. The delay before retry `a` is drawn uniformly
/// from `[min_delay, min(cap, base·2^(a−1))]` ([`delay`](Backoff::delay)); after a
/// [`Verdict::Deny`] it is `retry_after` plus a jitter wide enough to spread the crowd that
/// was denied together ([`after_deny`](Backoff::after_deny)). All arithmetic saturates: any
/// attempt number and any [`Duration`] up to [`Duration::MAX`] are fine.
///
/// ```
/// use std::time::Duration;
/// use tollgate::shaping::Backoff;
///
/// let backoff = Backoff::builder().base(Duration::from_millis(50)).seed(7).build()?;
/// let delays: Vec<Duration> = backoff.delays().collect();
/// assert_eq!(delays.len(), 3);
/// assert!(delays[0] >= Duration::from_millis(1) && delays[0] <= Duration::from_millis(50));
/// assert!(delays[2] <= Duration::from_millis(200));
/// # Ok::<(), tollgate::shaping::BackoffError>(())
/// ```
///
/// # Randomness
///
/// The jitter comes from a SplitMix64 generator (Steele, Lea and Flood; Vigna's
/// `splitmix64.c`) whose state is one [`AtomicU64`]: a draw is a `fetch_add` of the golden
/// gamma and a pure mix of the result, so a `Backoff` shared by many threads never blocks or
/// panics and every draw gets its own state. With [`seed`](BackoffBuilder::seed) the sequence
/// is reproducible (on one thread); without it the seed comes from
/// [`RandomState`], so two processes do not share a sequence. This is not a cryptographic
/// generator; it only has to decorrelate clients.
///
/// [`Clone`] **forks**: the clone is seeded from the next draw of the original, so clones
/// handed to many tasks jitter independently instead of in step. A fork is still determined
/// by the original's seed and the draws made before it.
pub struct Backoff {
    base: Duration,
    cap: Duration,
    min_delay: Duration,
    max_retries: u32,
    rng: SplitMix64,
}

impl Backoff {
    /// The default `base`: 100 ms.
    pub const DEFAULT_BASE: Duration = Duration::from_millis(100);
    /// The default `cap`: 10 s.
    pub const DEFAULT_CAP: Duration = Duration::from_secs(10);
    /// The default `min_delay`: 1 ms.
    pub const DEFAULT_MIN_DELAY: Duration = Duration::from_millis(1);
    /// The default `max_retries`: 3.
    pub const DEFAULT_MAX_RETRIES: u32 = 3;

    /// A backoff with the defaults and a random seed.
    ///
    /// ```
    /// let backoff = tollgate::shaping::Backoff::new();
    /// assert_eq!(backoff.max_retries(), 3);
    /// ```
    pub fn new() -> Self {
        Self::from_parts(BackoffBuilder::new(), random_seed())
    }

    /// A builder starting from the defaults.
    pub fn builder() -> BackoffBuilder {
        BackoffBuilder::new()
    }

    fn from_parts(b: BackoffBuilder, seed: u64) -> Self {
        Self {
            base: b.base,
            cap: b.cap,
            min_delay: b.min_delay,
            max_retries: b.max_retries,
            rng: SplitMix64::new(seed),
        }
    }

    /// The first retry's largest delay.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay of the exponential part.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// The smallest delay ever returned (never zero).
    pub fn min_delay(&self) -> Duration {
        self.min_delay
    }

    /// How many retries follow the original attempt at most.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The delay before retry `attempt`: uniform in `[min_delay, min(cap, base·2^(attempt−1))]`,
    /// or `min_delay` when that window is empty. Attempt 0 (the original) gives the window
    /// `base/2`, so the rule holds for every `u32`.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let backoff = tollgate::shaping::Backoff::builder().seed(1).build()?;
    /// let d = backoff.delay(4); // at most 100 ms · 2³
    /// assert!(d >= Duration::from_millis(1) && d <= Duration::from_millis(800));
    /// assert!(backoff.delay(u32::MAX) <= Duration::from_secs(10));
    /// # Ok::<(), tollgate::shaping::BackoffError>(())
    /// ```
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.base.as_nanos();
        let ceiling = match attempt {
            0 => base / 2,
            a => shl_saturating(base, a - 1),
        };
        let lo = self.min_delay.as_nanos();
        let hi = ceiling.min(self.cap.as_nanos()).max(lo);
        from_nanos_saturating(self.rng.uniform(lo, hi))
    }

    /// The delay before retry `attempt` after a denial that said `retry_after`:
    /// `retry_after + jitter`, the jitter uniform in `[0, window]` with
    /// `window = max(min(cap, base·2^attempt), retry_after/2)`, and never below `min_delay`.
    ///
    /// The `retry_after/2` term is not capped: a thousand clients denied together with a
    /// one-minute retry-after come back over at least thirty seconds, not all at once.
    /// A [`Duration::MAX`] retry-after (a clock overflow) gives [`Duration::MAX`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let backoff = tollgate::shaping::Backoff::builder().seed(1).build()?;
    /// let d = backoff.after_deny(1, Duration::from_secs(2));
    /// assert!(d >= Duration::from_secs(2) && d <= Duration::from_secs(3));
    /// # Ok::<(), tollgate::shaping::BackoffError>(())
    /// ```
    pub fn after_deny(&self, attempt: u32, retry_after: Duration) -> Duration {
        let retry_after = retry_after.as_nanos();
        let window = shl_saturating(self.base.as_nanos(), attempt)
            .min(self.cap.as_nanos())
            .max(retry_after / 2);
        let lo = retry_after.max(self.min_delay.as_nanos());
        // Both terms are at most `Duration::MAX` in ns (< 2^94): the sum cannot overflow.
        let hi = (retry_after + window).max(lo);
        from_nanos_saturating(self.rng.uniform(lo, hi))
    }

    /// The delay before retry `attempt`, given the verdict the previous attempt got, if any:
    /// [`after_deny`](Backoff::after_deny) for a [`Verdict::Deny`], [`delay`](Backoff::delay)
    /// otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, RateLimiter};
    /// use tollgate::shaping::Backoff;
    ///
    /// let lim = RateLimiter::builder("1/s".parse()?).clock(ManualClock::new()).build();
    /// assert!(lim.check().is_permitted());
    /// let verdict = lim.check(); // denied, retry after 1 s
    /// let backoff = Backoff::builder().seed(3).build()?;
    /// assert!(backoff.next_delay(1, Some(&verdict)) >= Duration::from_secs(1));
    /// assert!(backoff.next_delay(1, None) <= Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn next_delay(&self, attempt: u32, verdict: Option<&Verdict>) -> Duration {
        match verdict.and_then(Verdict::denied) {
            Some(denied) => self.after_deny(attempt, denied.retry_after()),
            None => self.delay(attempt),
        }
    }

    /// The delays before retries `1..=max_retries`, drawn as the iterator advances.
    pub fn delays(&self) -> BackoffDelays<'_> {
        BackoffDelays {
            backoff: self,
            attempt: 0,
        }
    }

    /// Runs `op` until it succeeds, fails fatally, or has been retried `max_retries` times,
    /// calling `sleep` with each delay in between.
    ///
    /// `op` gets the attempt number (0, then `1..=max_retries`): pass it on with
    /// [`Check::attempt`](crate::Check::attempt) so the server can tell retries apart. A
    /// [`AttemptFailure::Retry`] with a `retry_after` hint waits [`after_deny`](Backoff::after_deny),
    /// one without waits [`delay`](Backoff::delay). `sleep` is yours, so tests need not sleep.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::shaping::{AttemptFailure, Backoff, RetryError};
    ///
    /// let backoff = Backoff::builder().seed(9).build()?;
    /// let mut slept = Vec::new();
    /// let out = backoff.retry(
    ///     |attempt| if attempt < 2 { Err(AttemptFailure::retry("busy")) } else { Ok(attempt) },
    ///     |d| slept.push(d), // std::thread::sleep in real code
    /// );
    /// assert_eq!(out, Ok(2));
    /// assert_eq!(slept.len(), 2);
    ///
    /// let out: Result<(), _> = backoff.retry(|_| Err(AttemptFailure::fatal("bad request")), |_| {});
    /// assert_eq!(out, Err(RetryError::Fatal { error: "bad request", attempt: 0 }));
    /// # Ok::<(), tollgate::shaping::BackoffError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`RetryError::Fatal`] at the first [`AttemptFailure::Fatal`]; [`RetryError::Exhausted`] when
    /// attempt `max_retries` fails too.
    pub fn retry<T, E, F, S>(&self, mut op: F, mut sleep: S) -> Result<T, RetryError<E>>
    where
        F: FnMut(u32) -> Result<T, AttemptFailure<E>>,
        S: FnMut(Duration),
    {
        let mut attempt = 0;
        loop {
            match op(attempt) {
                Ok(value) => return Ok(value),
                Err(failure) => sleep(self.after_failure(attempt, failure)?),
            }
            attempt += 1;
        }
    }

    /// [`retry`](Backoff::retry) for an async operation, on any runtime: `sleep` makes the
    /// future to await between attempts (`tokio::time::sleep`, `async_std::task::sleep`, …).
    ///
    /// ```
    /// use std::future::{ready, Future};
    /// use std::task::{Context, Poll, Waker};
    /// use tollgate::shaping::{AttemptFailure, Backoff};
    ///
    /// let backoff = Backoff::builder().seed(9).build()?;
    /// // With tokio: `backoff.retry_async(op, tokio::time::sleep).await`.
    /// let fut = backoff.retry_async(
    ///     |attempt| ready(if attempt == 0 { Err(AttemptFailure::retry("busy")) } else { Ok(attempt) }),
    ///     |_delay| ready(()),
    /// );
    /// let mut fut = std::pin::pin!(fut);
    /// let out = fut.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    /// assert_eq!(out, Poll::Ready(Ok(1)));
    /// # Ok::<(), tollgate::shaping::BackoffError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`retry`](Backoff::retry).
    pub async fn retry_async<T, E, F, Fut, S, SleepFut>(
        &self,
        mut op: F,
        mut sleep: S,
    ) -> Result<T, RetryError<E>>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, AttemptFailure<E>>>,
        S: FnMut(Duration) -> SleepFut,
        SleepFut: Future<Output = ()>,
    {
        let mut attempt = 0;
        loop {
            match op(attempt).await {
                Ok(value) => return Ok(value),
                Err(failure) => sleep(self.after_failure(attempt, failure)?).await,
            }
            attempt += 1;
        }
    }

    /// What follows a failed `attempt`: the delay before the next one, or the final error.
    fn after_failure<E>(
        &self,
        attempt: u32,
        failure: AttemptFailure<E>,
    ) -> Result<Duration, RetryError<E>> {
        match failure {
            AttemptFailure::Fatal(error) => Err(RetryError::Fatal { error, attempt }),
            AttemptFailure::Retry { error, .. } if attempt >= self.max_retries => {
                Err(RetryError::Exhausted { error, attempt })
            }
            // `attempt < max_retries`, so `attempt + 1` fits.
            AttemptFailure::Retry { retry_after, .. } => Ok(match retry_after {
                Some(retry_after) => self.after_deny(attempt + 1, retry_after),
                None => self.delay(attempt + 1),
            }),
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for Backoff {
    /// A fork: same configuration, seeded from the next draw of `self` (see
    /// [`Backoff`]'s "Randomness").
    fn clone(&self) -> Self {
        Self {
            rng: SplitMix64::new(self.rng.next_u64()),
            ..*self
        }
    }
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backoff")
            .field("base", &self.base)
            .field("cap", &self.cap)
            .field("min_delay", &self.min_delay)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Backoff`]; every setting starts at its default ([`Backoff::DEFAULT_BASE`], …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct BackoffBuilder {
    base: Duration,
    cap: Duration,
    min_delay: Duration,
    max_retries: u32,
    seed: Option<u64>,
}

impl BackoffBuilder {
    /// A builder with the defaults and no seed.
    pub fn new() -> Self {
        Self {
            base: Backoff::DEFAULT_BASE,
            cap: Backoff::DEFAULT_CAP,
            min_delay: Backoff::DEFAULT_MIN_DELAY,
            max_retries: Backoff::DEFAULT_MAX_RETRIES,
            seed: None,
        }
    }

    /// The first retry's largest delay; it doubles with every retry. Must not be zero.
    pub fn base(self, base: Duration) -> Self {
        Self { base, ..self }
    }

    /// The largest delay of the exponential part. At least `base`.
    pub fn cap(self, cap: Duration) -> Self {
        Self { cap, ..self }
    }

    /// The smallest delay: a zero delay is an immediate retry. Above zero and at most `cap`.
    pub fn min_delay(self, min_delay: Duration) -> Self {
        Self { min_delay, ..self }
    }

    /// How many retries follow the original attempt at most (0: none).
    pub fn max_retries(self, max_retries: u32) -> Self {
        Self {
            max_retries,
            ..self
        }
    }

    /// Seeds the jitter so the delays are reproducible. Give each client its own seed.
    pub fn seed(self, seed: u64) -> Self {
        Self {
            seed: Some(seed),
            ..self
        }
    }

    /// Checks the settings and builds the [`Backoff`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::shaping::{Backoff, BackoffError};
    ///
    /// let err = Backoff::builder().base(Duration::from_secs(20)).build().unwrap_err();
    /// assert_eq!(err.to_string(), "backoff cap 10s is below its base 20s");
    /// assert_eq!(Backoff::builder().min_delay(Duration::ZERO).build().unwrap_err(), BackoffError::ZeroMinDelay);
    /// ```
    ///
    /// # Errors
    ///
    /// A [`BackoffError`] for a zero `base` or `min_delay`, a `cap` below `base`, or a
    /// `min_delay` above `cap`.
    pub fn build(self) -> Result<Backoff, BackoffError> {
        if self.base.is_zero() {
            return Err(BackoffError::ZeroBase);
        }
        if self.min_delay.is_zero() {
            return Err(BackoffError::ZeroMinDelay);
        }
        if self.cap < self.base {
            return Err(BackoffError::CapBelowBase {
                cap: self.cap,
                base: self.base,
            });
        }
        if self.min_delay > self.cap {
            return Err(BackoffError::MinDelayAboveCap {
                min_delay: self.min_delay,
                cap: self.cap,
            });
        }
        Ok(Backoff::from_parts(
            self,
            self.seed.unwrap_or_else(random_seed),
        ))
    }
}

impl Default for BackoffBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// A [`BackoffBuilder`] setting that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffError {
    /// `base` is zero: every delay would collapse to `min_delay`.
    #[error("backoff base is 0s: it must be greater than zero")]
    ZeroBase,
    /// `min_delay` is zero: a zero delay is an immediate retry.
    #[error("backoff min_delay is 0s: a zero delay is an immediate retry")]
    ZeroMinDelay,
    /// `cap` is below `base`.
    #[error("backoff cap {cap:?} is below its base {base:?}")]
    CapBelowBase {
        /// The cap given.
        cap: Duration,
        /// The base given.
        base: Duration,
    },
    /// `min_delay` is above `cap`.
    #[error("backoff min_delay {min_delay:?} is above its cap {cap:?}")]
    MinDelayAboveCap {
        /// The minimum delay given.
        min_delay: Duration,
        /// The cap given.
        cap: Duration,
    },
}

/// How an attempt failed, as the operation tells [`Backoff::retry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptFailure<E> {
    /// Worth retrying (a timeout, a 429, a 503), with the server's retry-after if it gave one.
    Retry {
        /// What went wrong.
        error: E,
        /// The server's hint ([`Denied::retry_after`](crate::Denied::retry_after),
        /// `Retry-After`); the next delay is then [`Backoff::after_deny`].
        retry_after: Option<Duration>,
    },
    /// Not worth retrying (a 400, a permission error): stop at once.
    Fatal(E),
}

impl<E> AttemptFailure<E> {
    /// A retryable failure without a hint.
    pub fn retry(error: E) -> Self {
        Self::Retry {
            error,
            retry_after: None,
        }
    }

    /// A retryable failure the server said to retry after `retry_after`.
    pub fn retry_after(error: E, retry_after: Duration) -> Self {
        Self::Retry {
            error,
            retry_after: Some(retry_after),
        }
    }

    /// A failure not worth retrying.
    pub fn fatal(error: E) -> Self {
        Self::Fatal(error)
    }
}

/// Why [`Backoff::retry`] gave up, with the last attempt's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum RetryError<E> {
    /// Every attempt failed, the last one being `max_retries`.
    #[error("gave up after attempt {attempt}: no retries left")]
    Exhausted {
        /// The last attempt's error.
        #[source]
        error: E,
        /// The last attempt number (`max_retries`).
        attempt: u32,
    },
    /// An attempt failed with [`AttemptFailure::Fatal`].
    #[error("attempt {attempt} failed with an error that is not retryable")]
    Fatal {
        /// Its error.
        #[source]
        error: E,
        /// Its attempt number.
        attempt: u32,
    },
}

impl<E> RetryError<E> {
    /// The last attempt's error.
    pub fn into_error(self) -> E {
        match self {
            Self::Exhausted { error, .. } | Self::Fatal { error, .. } => error,
        }
    }

    /// The number of the last attempt made (0 = the original).
    pub fn attempt(&self) -> u32 {
        match self {
            Self::Exhausted { attempt, .. } | Self::Fatal { attempt, .. } => *attempt,
        }
    }
}

/// The delays before retries `1..=max_retries`, from [`Backoff::delays`].
#[derive(Debug)]
#[must_use = "iterators are lazy and do nothing unless consumed"]
pub struct BackoffDelays<'a> {
    backoff: &'a Backoff,
    /// The last attempt yielded for; counting up (rather than down to an end) never overflows.
    attempt: u32,
}

impl Iterator for BackoffDelays<'_> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.attempt >= self.backoff.max_retries {
            return None;
        }
        self.attempt += 1;
        Some(self.backoff.delay(self.attempt))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.backoff.max_retries - self.attempt;
        (left as usize, Some(left as usize))
    }
}

impl ExactSizeIterator for BackoffDelays<'_> {}
impl core::iter::FusedIterator for BackoffDelays<'_> {}

/// SplitMix64 over an atomic state (see [`Backoff`]'s "Randomness").
struct SplitMix64 {
    state: AtomicU64,
}

impl SplitMix64 {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    fn new(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    fn next_u64(&self) -> u64 {
        // Relaxed: the state only hands out distinct values; it publishes no other memory.
        let mut z = self
            .state
            .fetch_add(Self::GAMMA, Ordering::Relaxed)
            .wrapping_add(Self::GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi]` (`lo ≤ hi < 2^127`). A 128-bit draw reduced modulo the width:
    /// widths stay below 2^95 (durations in ns), so the bias is under 2^-33.
    fn uniform(&self, lo: u128, hi: u128) -> u128 {
        let width = hi - lo;
        if width == 0 {
            return lo;
        }
        let r = (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64());
        lo + r % (width + 1)
    }
}

/// A seed from the standard library's per-process randomness: each `RandomState` gets fresh
/// keys, so every unseeded `Backoff` gets its own sequence without a dependency.
fn random_seed() -> u64 {
    RandomState::new().build_hasher().finish()
}

/// `x · 2^k`, saturating at `u128::MAX`.
fn shl_saturating(x: u128, k: u32) -> u128 {
    if x == 0 {
        0
    } else if k > x.leading_zeros() {
        u128::MAX
    } else {
        x << k
    }
}

/// Nanoseconds to a [`Duration`], saturating at [`Duration::MAX`].
fn from_nanos_saturating(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        // The remainder is below 10^9: it fits a u32.
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests;
