//! What a check returns: allow, deny with an exact retry-after, or pass-through with a reason.

use core::fmt;
use core::time::Duration;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// The answer to one check.
///
/// A denial is a verdict, never an error. A [`PassThrough`] is never silent: it carries the
/// reason the limiter stood aside and the verdict it would otherwise have given.
///
/// ```
/// use tollgate::{RateLimiter, Verdict};
///
/// let lim = RateLimiter::new("2/s".parse()?);
/// assert!(lim.check().is_permitted());
/// assert!(lim.check().is_permitted());
/// match lim.check() {
///     Verdict::Deny(d) => assert!(d.retry_after() > std::time::Duration::ZERO),
///     other => panic!("expected a denial, got {other:?}"),
/// }
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[must_use = "a verdict that is not looked at enforces nothing"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// The check conforms: go ahead.
    Allow(Allowed),
    /// The check does not conform: refuse it (HTTP 429) and say when to come back.
    Deny(Denied),
    /// The limiter stands aside (for example because it has judged itself faulty): let the
    /// request through, and look at [`PassThrough::shadow`] for what it would have said.
    PassThrough(PassThrough),
}

impl Verdict {
    /// `true` for [`Verdict::Allow`] and [`Verdict::PassThrough`]: the request may proceed.
    #[inline]
    pub fn is_permitted(&self) -> bool {
        !matches!(self, Verdict::Deny(_))
    }

    /// The allowance, if this is an [`Verdict::Allow`].
    #[inline]
    pub fn allowed(&self) -> Option<Allowed> {
        match self {
            Verdict::Allow(a) => Some(*a),
            _ => None,
        }
    }

    /// The denial, if this is a [`Verdict::Deny`].
    #[inline]
    pub fn denied(&self) -> Option<Denied> {
        match self {
            Verdict::Deny(d) => Some(*d),
            _ => None,
        }
    }
}

/// An allowed check, with what is left.
///
/// Its `Debug` output shows what the accessors return, not how it is stored:
///
/// ```
/// use tollgate::{ManualClock, RateLimiter};
///
/// let lim = RateLimiter::builder("10/s;burst=5".parse()?).clock(ManualClock::new()).build();
/// let a = lim.check().allowed().unwrap();
/// assert_eq!(format!("{a:?}"), "Allowed { remaining: 4, reset_after: 100ms }");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Allowed {
    /// `Requests`: the tolerance the check was held to, in ns: the slack is this minus
    /// `reset_after` (`τ − (tat − now)`), divided by the interval `T` on demand, so the hot
    /// path does no division and no subtraction. `Units`: the remaining units (bytes)
    /// themselves.
    level: u64,
    reset_after: u64,
    /// `T = divisor_hi·2^32 + divisor_lo` when `kind` is `Requests` (`T < 2^48`, about 3.26
    /// days; a longer `T`, such as `"1/w"` or `"1/month"`, is divided at once and stored as
    /// `Units`, see [`new`](Self::new)). Split so that `Allowed` is 24 bytes with
    /// `kind` last, whose spare values let [`Verdict`] keep its tag there: a 24-byte verdict
    /// instead of 32.
    divisor_lo: u32,
    divisor_hi: u16,
    kind: Remaining,
}

/// What [`Allowed::level`] holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
enum Remaining {
    /// ns of tolerance, less `reset_after`, to divide by the divisor.
    Requests,
    /// Units, as they are.
    Units,
}

impl Allowed {
    /// An allowance of `slack / divisor` units (`divisor` 0: `slack` units), full again after
    /// `reset_after` ns.
    #[inline]
    pub(crate) fn new(slack: u64, divisor: u64, reset_after: u64) -> Self {
        match (divisor, slack.checked_add(reset_after)) {
            (0, _) => Self::units(slack, reset_after),
            (t, Some(level)) if t >> 48 == 0 => Self::requests(level, t, reset_after),
            // A T of 2^48 ns or more (`"1/w"`, `"1/month"`: the general path), or a slack
            // and a reset that overflow; divided now rather than stored inexactly.
            (t, _) => Self::units(slack / t, reset_after),
        }
    }

    /// [`new`](Self::new) for a divisor `t` of the fast path (`1 ≤ t <`
    /// [`FAST_T_LIMIT`](crate::engine::params::FAST_T_LIMIT), 2^48, stored without a test),
    /// given the tolerance `level = slack + reset_after` rather than the slack.
    #[inline(always)]
    pub(crate) fn requests(level: u64, t: u64, reset_after: u64) -> Self {
        debug_assert!(t != 0 && t < crate::engine::params::FAST_T_LIMIT);
        debug_assert!(level >= reset_after);
        // Truncations are the intended split of a divisor below 2^48.
        Self {
            level,
            reset_after,
            divisor_lo: t as u32,
            divisor_hi: (t >> 32) as u16,
            kind: Remaining::Requests,
        }
    }

    #[inline]
    fn units(units: u64, reset_after: u64) -> Self {
        Self {
            level: units,
            reset_after,
            divisor_lo: 0,
            divisor_hi: 0,
            kind: Remaining::Units,
        }
    }

    /// How much more work (requests, or bytes for a byte budget) would be allowed right now.
    #[inline]
    pub fn remaining(&self) -> u64 {
        match self.kind {
            Remaining::Units => self.level,
            Remaining::Requests => {
                let t = (u64::from(self.divisor_hi) << 32) | u64::from(self.divisor_lo);
                // `level ≥ reset_after` as built; saturating, so no value of these fields
                // can panic here.
                self.level.saturating_sub(self.reset_after) / t.max(1)
            }
        }
    }

    /// How long until the cell is full again if nothing more arrives.
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after)
    }
}

impl fmt::Debug for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allowed")
            .field("remaining", &self.remaining())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}

/// A denied check, with the exact time to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Denied {
    retry_after: u64,
    reason: DenyReason,
}

impl Denied {
    /// The largest [`retry_after_secs`](Self::retry_after_secs): one day, 86 400 s.
    ///
    /// Nothing a client can act on waits longer, and huge values are handled badly downstream
    /// (HTTP caches read delta-seconds past 2^31 as 2^31; some clients parse the header into
    /// 32 bits). A longer wait is told as one day: a client that comes back then is denied
    /// again with what is left of it.
    pub const MAX_RETRY_AFTER_SECS: u64 = 86_400;

    #[inline]
    pub(crate) fn new(retry_after: u64, reason: DenyReason) -> Self {
        Self {
            retry_after,
            reason,
        }
    }

    /// The retry-after in nanoseconds, as the step computed it.
    #[inline]
    pub(crate) fn retry_after_nanos(&self) -> u64 {
        self.retry_after
    }

    /// How long to wait before the same check would be allowed, exactly: one nanosecond
    /// earlier it is still denied.
    ///
    /// Not every value is a wait to put in a header: [`DenyReason::ClockOverflow`] answers
    /// [`Duration::MAX`] (no wait will do), and a long quota can answer days. For an HTTP
    /// `Retry-After` use [`retry_after_secs`](Self::retry_after_secs), never `as_secs()`,
    /// which turns 200 ms into 0 ("retry now").
    #[inline]
    pub fn retry_after(&self) -> Duration {
        match self.reason {
            DenyReason::ClockOverflow => Duration::MAX,
            _ => Duration::from_nanos(self.retry_after),
        }
    }

    /// The value of an HTTP `Retry-After` header: [`retry_after`](Self::retry_after) in whole
    /// seconds, rounded up (so never earlier than the exact wait) and never 0, capped at
    /// [`MAX_RETRY_AFTER_SECS`](Self::MAX_RETRY_AFTER_SECS) (one day) — which is also the
    /// answer for [`DenyReason::ClockOverflow`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Denied, ManualClock, RateLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let lim = RateLimiter::builder("1/s;burst=2".parse()?).clock(clock.clone()).build();
    /// assert!(lim.check_n(2)?.is_permitted());
    /// let d = lim.check().denied().unwrap();
    /// assert_eq!((d.retry_after(), d.retry_after_secs()), (Duration::from_secs(1), 1));
    /// clock.advance(Duration::from_millis(800));
    /// let d = lim.check().denied().unwrap();
    /// assert_eq!((d.retry_after(), d.retry_after_secs()), (Duration::from_millis(200), 1));
    /// let d = lim.check_n(2)?.denied().unwrap();
    /// assert_eq!((d.retry_after(), d.retry_after_secs()), (Duration::from_millis(1_200), 2));
    ///
    /// // Past u64::MAX ns the clock overflows: denied, and told one day.
    /// let stuck = RateLimiter::builder("1/s".parse()?)
    ///     .clock(ManualClock::at(Duration::from_nanos(u64::MAX)))
    ///     .build();
    /// let d = stuck.check().denied().unwrap();
    /// assert_eq!(d.retry_after(), Duration::MAX);
    /// assert_eq!(d.retry_after_secs(), Denied::MAX_RETRY_AFTER_SECS);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn retry_after_secs(&self) -> u64 {
        if self.reason == DenyReason::ClockOverflow {
            return Self::MAX_RETRY_AFTER_SECS;
        }
        self.retry_after
            .div_ceil(NANOS_PER_SEC)
            .clamp(1, Self::MAX_RETRY_AFTER_SECS)
    }

    /// Why the check was denied.
    #[inline]
    pub fn reason(&self) -> DenyReason {
        self.reason
    }
}

/// Why a check was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
// A whole word: a `Denied` then has no padding, and a verdict is copied as three words rather
// than field by field.
#[repr(u64)]
pub enum DenyReason {
    /// The key (or the direct limiter) is over its quota.
    Quota,
    /// The keyed limiter's table tracks `max_keys` keys and none may make way for this new key
    /// (see [`Admission`](crate::limiter::Admission)), so it shares the overflow
    /// cell, which is over its quota.
    KeyTableFull,
    /// The time arithmetic would overflow (a clock reading near `u64::MAX` ns). Denied rather
    /// than allowed; the retry-after is [`Duration::MAX`]: no wait makes the check fit. It is
    /// a sentinel, not a wait to tell a client: [`Denied::retry_after_secs`] caps it at one
    /// day ([`Denied::MAX_RETRY_AFTER_SECS`]), and [`Backoff::after_deny`](crate::shaping::Backoff::after_deny)
    /// passes it on as [`Duration::MAX`].
    ClockOverflow,
    /// The limiter is passing traffic through (it judged itself faulty), but this key went
    /// past the ceiling that still applies then (by default 10× its quota).
    Ceiling,
    /// A retry ([`Check::attempt`](crate::Check::attempt) ≥ 1) over the limiter's
    /// [`RetryBudget`](crate::shaping::RetryBudget); the quota was not consulted. The retry-after is
    /// never earlier than when the budget will have room again if no further originals
    /// arrive (new originals may open it sooner), and at most two periods: one period when
    /// the budget has no floor and only new originals can make room, plus this denial's
    /// place in the backlog, so that clients denied together do not come back together
    /// (see [`RetryBudget`](crate::shaping::RetryBudget#what-a-denied-retry-is-told)).
    RetryBudget,
    /// The shared backend (Redis) could not be reached in time and the failure policy is
    /// closed: nothing passes until it answers again. The retry-after is the circuit
    /// breaker's first cool-down.
    BackendUnavailable,
    /// The shared backend (Redis) could not be reached in time, and this node's local share
    /// of the limit (the fallback) is used up; the retry-after is the local limiter's.
    LocalShare,
}

/// A check the limiter let through without enforcing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PassThrough {
    reason: PassReason,
    shadow: Shadow,
}

impl PassThrough {
    /// A pass-through for `reason`, with the verdict enforcement would have given.
    pub fn new(reason: PassReason, shadow: Shadow) -> Self {
        Self { reason, shadow }
    }

    /// Why the limiter stood aside.
    #[inline]
    pub fn reason(&self) -> PassReason {
        self.reason
    }

    /// What the limiter would have said had it enforced.
    #[inline]
    pub fn shadow(&self) -> Shadow {
        self.shadow
    }
}

/// Why a limiter stood aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PassReason {
    /// The deny breadth rose far above its trailing baseline: the limiter judged itself the
    /// fault.
    DenyAnomaly,
    /// The clock watchdog saw the clock stall, lag or step backwards.
    ClockFault,
    /// An operator forced pass-through.
    Forced,
    /// The shared backend (Redis) could not be reached in time.
    BackendUnavailable,
    /// The policy is in shadow mode: evaluated and counted, never enforced.
    Shadow,
}

/// The verdict a pass-through would have been, had the limiter enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Shadow {
    /// It would have been allowed.
    Allow,
    /// It would have been denied.
    Deny,
    /// It could not be computed (for example the backend was unreachable).
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_keeps_its_tag_in_the_allowance() {
        // The hot path returns verdicts by value: three words, not four.
        assert_eq!(core::mem::size_of::<Verdict>(), 24);
    }

    #[test]
    fn an_allowance_divides_on_demand_exactly() {
        let t = (1u64 << 47) - 1;
        let a = Allowed::new(5 * t + 3, t, 7);
        assert_eq!(
            (a.remaining(), a.reset_after()),
            (5, Duration::from_nanos(7))
        );
        assert_eq!(Allowed::new(9, 0, 0).remaining(), 9);
        assert_eq!(
            Allowed::new(u64::MAX, 1 << 50, 0).remaining(),
            u64::MAX >> 50
        );
        // A slack and a reset whose sum overflows: divided now, nothing lost.
        let big = Allowed::new(u64::MAX - 2, 7, 5);
        assert_eq!(
            (big.remaining(), big.reset_after()),
            ((u64::MAX - 2) / 7, Duration::from_nanos(5))
        );
        // The fast path's form, given the tolerance: the same allowance as `new`'s.
        assert_eq!(Allowed::requests(5 * t + 10, t, 7), a);
    }
}
