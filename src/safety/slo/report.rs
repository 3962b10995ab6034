//! What the tracker reports: [`SloAlert`] and [`TierSnapshot`], and the `Tally` of
//! successes and failures they are computed from.

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use super::{Counts, RequestOutcome};
use crate::engine::error::Quoted;

/// Successes and failures; client errors are left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    good: u64,
    bad: u64,
}

impl Tally {
    pub(super) fn of(c: Counts) -> Self {
        Self {
            good: c[0],
            bad: c[1].saturating_add(c[2]),
        }
    }

    pub(super) fn total(self) -> u64 {
        self.good.saturating_add(self.bad)
    }

    pub(super) fn rate(self) -> Option<f64> {
        let n = self.total();
        (n > 0).then(|| self.good as f64 / n as f64)
    }
}

/// Whether `reference − current > bp / scale` (rates as fractions), exactly, in integers:
/// `scale·(g_r·n_c − g_c·n_r) > bp·n_r·n_c`. Both totals must be non-zero.
pub(super) fn drop_exceeds(reference: Tally, current: Tally, scale: u128, bp: u128) -> bool {
    let (n_r, n_c) = (u128::from(reference.total()), u128::from(current.total()));
    let lhs = u128::from(reference.good).saturating_mul(n_c);
    let rhs = u128::from(current.good).saturating_mul(n_r);
    lhs > rhs && (lhs - rhs).saturating_mul(scale) > bp.saturating_mul(n_r).saturating_mul(n_c)
}

/// A tier's success rate fell: one per episode (see [`SuccessRate`](super::SuccessRate)).
///
/// Rates are fractions in `[0, 1]`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::ManualClock;
/// use tollgate::safety::SuccessRate;
///
/// let clock = ManualClock::new();
/// let slo = SuccessRate::builder().tiers(["paid"]).clock(clock.clone()).min_samples(10).build()?;
/// for second in 0..420 {
///     let status = if second < 400 { 200 } else { 429 };
///     slo.record("paid", status);
///     clock.advance(Duration::from_secs(1));
/// }
/// slo.tick();
/// let alert = &slo.poll_alerts()[0];
/// assert_eq!(alert.tier(), "paid");
/// assert_eq!(alert.reference(), 1.0);
/// assert!(alert.drop_pp() > 2.0);
/// assert_eq!(alert.window(), Duration::from_secs(60));
/// # Ok::<(), tollgate::safety::SloConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SloAlert {
    pub(super) tier: Arc<str>,
    pub(super) current: f64,
    pub(super) reference: f64,
    pub(super) current_requests: u64,
    pub(super) reference_requests: u64,
    pub(super) window: Duration,
    pub(super) window_end: Duration,
    pub(super) at: Duration,
}

impl SloAlert {
    /// The tier whose success rate dropped.
    pub fn tier(&self) -> &str {
        &self.tier
    }

    /// The success rate over the last complete window when the alert was raised: the
    /// [`window`](Self::window) ending at [`window_end`](Self::window_end).
    pub fn current(&self) -> f64 {
        self.current
    }

    /// The success rate over the reference period before that window.
    pub fn reference(&self) -> f64 {
        self.reference
    }

    /// `reference − current`, in percentage points.
    pub fn drop_pp(&self) -> f64 {
        (self.reference - self.current) * 100.0
    }

    /// Successes and failures counted in the window.
    pub fn current_requests(&self) -> u64 {
        self.current_requests
    }

    /// Successes and failures counted in the reference period.
    pub fn reference_requests(&self) -> u64 {
        self.reference_requests
    }

    /// The length of the window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// When the window of [`current`](Self::current) ends, since the process epoch: the
    /// start of the sub-bucket the alert was raised in, at most a sixth of the window before
    /// [`at`](Self::at). The window is `[window_end − window, window_end)`.
    pub fn window_end(&self) -> Duration {
        self.window_end
    }

    /// When the alert was raised: the clock's reading, since the process epoch.
    pub fn at(&self) -> Duration {
        self.at
    }
}

impl fmt::Display for SloAlert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tier {}: success rate {:.2} % over the {:?} window ending at {:?}, down {:.2} pp \
             from {:.2} % before it",
            Quoted(&self.tier),
            self.current * 100.0,
            self.window,
            self.window_end,
            self.drop_pp(),
            self.reference * 100.0
        )
    }
}

/// One tier's counts, for a metrics exporter: see
/// [`SuccessRate::snapshot`](super::SuccessRate::snapshot).
///
/// The counts are cumulative since the tracker was built (they only grow, as a Prometheus
/// counter expects); the success rate is over the last complete window, which ends at
/// [`window_end`](Self::window_end).
///
/// ```
/// use tollgate::ManualClock;
/// use tollgate::safety::SuccessRate;
///
/// let slo = SuccessRate::builder().tiers(["free"]).clock(ManualClock::new()).build()?;
/// slo.record("free", 200);
/// slo.record("free", 429);
/// let free = &slo.snapshot()[0];
/// assert_eq!((free.tier(), free.successes(), free.failures_429()), ("free", 1, 1));
/// # Ok::<(), tollgate::safety::SloConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TierSnapshot {
    pub(super) tier: Arc<str>,
    pub(super) counts: Counts,
    pub(super) window: Tally,
    pub(super) window_end: Duration,
}

impl TierSnapshot {
    /// The tier's name ([`OTHER_TIER`](crate::safety::SuccessRate::OTHER_TIER) for undeclared tiers).
    pub fn tier(&self) -> &str {
        &self.tier
    }

    /// Successful responses ([`RequestOutcome::Success`]).
    pub fn successes(&self) -> u64 {
        self.counts[RequestOutcome::Success.index()]
    }

    /// 429 responses ([`RequestOutcome::RateLimited`]).
    pub fn failures_429(&self) -> u64 {
        self.counts[RequestOutcome::RateLimited.index()]
    }

    /// 5xx responses and invalid statuses ([`RequestOutcome::ServerError`]).
    pub fn failures_5xx(&self) -> u64 {
        self.counts[RequestOutcome::ServerError.index()]
    }

    /// Other 4xx responses ([`RequestOutcome::ClientError`]), left out of the success rate.
    pub fn client_errors(&self) -> u64 {
        self.counts[RequestOutcome::ClientError.index()]
    }

    /// The success rate over the last complete window; `None` if it saw no success or failure.
    pub fn success_rate(&self) -> Option<f64> {
        self.window.rate()
    }

    /// Successes and failures counted in the last complete window.
    pub fn window_requests(&self) -> u64 {
        self.window.total()
    }

    /// When the last complete window ends, since the process epoch: the start of the current
    /// sub-bucket (a sixth of the window), so up to that long before the snapshot was taken.
    /// The window is `[window_end − window, window_end)`, the
    /// [`SuccessRate::window`](super::SuccessRate::window) long.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::ManualClock;
    /// use tollgate::safety::SuccessRate;
    ///
    /// let clock = ManualClock::new();
    /// let slo = SuccessRate::builder().tiers(["free"]).clock(clock.clone()).build()?;
    /// clock.advance(Duration::from_millis(63_700)); // sub-buckets of 10 s
    /// assert_eq!(slo.snapshot()[0].window_end(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn window_end(&self) -> Duration {
        self.window_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safety::slo::BP;

    fn tally(good: u64, bad: u64) -> Tally {
        Tally { good, bad }
    }

    #[test]
    fn drop_is_compared_exactly() {
        // 100 % → 98 % is exactly 2 pp: not more than the threshold.
        assert!(!drop_exceeds(tally(100, 0), tally(98, 2), BP, 200));
        assert!(drop_exceeds(tally(100, 0), tally(979, 21), BP, 200));
        // Re-arm uses half the threshold: 1 pp.
        assert!(!drop_exceeds(tally(100, 0), tally(99, 1), 2 * BP, 200));
        assert!(drop_exceeds(tally(100, 0), tally(989, 11), 2 * BP, 200));
        // A rise is never a drop; huge counts saturate instead of panicking.
        assert!(!drop_exceeds(tally(50, 50), tally(100, 0), BP, 1));
        let _ = drop_exceeds(tally(u64::MAX, 0), tally(0, u64::MAX), BP, 10_000);
    }
}
