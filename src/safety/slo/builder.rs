//! [`SuccessRateBuilder`]: declares the tiers, checks the settings, and builds a
//! [`SuccessRate`]; its mistakes are [`SloConfigError`]s.

use crate::sync::atomic::AtomicU64;
use core::fmt;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::sync::Mutex;

use super::eval::EvalState;
use super::{Callback, SloAlert, SuccessRate, MAX_BUCKETS, MAX_TIERS, OTHER_TIER, SUB_BUCKETS};
use crate::engine::cell::Padded;
use crate::engine::clock::{saturating_nanos, Clock};
use crate::engine::error::ClockError;
use crate::engine::error::Quoted;

/// A mistake in a [`SuccessRateBuilder`].
///
/// ```
/// use tollgate::safety::{SloConfigError, SuccessRate};
///
/// let err = SuccessRate::builder().tiers(["paid"]).drop_threshold(0.0).build().unwrap_err();
/// assert_eq!(err, SloConfigError::Threshold(0.0));
/// assert_eq!(
///     err.to_string(),
///     "drop threshold must be between 0.01 and 100 percentage points, got 0"
/// );
/// # Ok::<(), SloConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SloConfigError {
    /// No tier was declared.
    #[error("no tiers declared: list them with .tiers([..])")]
    NoTiers,
    /// A tier name is the empty string.
    #[error("tier name is empty")]
    EmptyTier,
    /// A tier name is declared twice.
    #[error("tier {} is declared twice", Quoted(.0))]
    DuplicateTier(String),
    /// [`OTHER_TIER`](crate::safety::SuccessRate::OTHER_TIER) was declared; it always exists and counts undeclared tiers.
    #[error("tier \"other\" is reserved for undeclared tiers")]
    ReservedTier,
    /// More than [`MAX_TIERS`](crate::safety::SuccessRate::MAX_TIERS) tiers.
    #[error("{0} tiers declared, at most 64 are allowed")]
    TooManyTiers(usize),
    /// A threshold that is not a finite number of percentage points in `[0.01, 100]`.
    #[error("drop threshold must be between 0.01 and 100 percentage points, got {0}")]
    Threshold(f64),
    /// A window of zero.
    #[error("window must be longer than zero")]
    ZeroWindow,
    /// A reference period of zero.
    #[error("reference period must be longer than zero")]
    ZeroReference,
    /// A reference period so much longer than the window that it needs too many sub-buckets.
    #[error("reference period {reference:?} needs {buckets} sub-buckets of {bucket:?}, at most 4090 are kept")]
    TooManyBuckets {
        /// The reference period asked for.
        reference: Duration,
        /// One sub-bucket: a sixth of the window.
        bucket: Duration,
        /// Sub-buckets it would need.
        buckets: u64,
    },
    /// No clock was given and this target has no default one (`wasm32-unknown-unknown`).
    #[error(transparent)]
    Clock(#[from] ClockError),
}

/// Builds a [`SuccessRate`]; see [`SuccessRate::builder`].
#[must_use = "call .build() to get the tracker"]
pub struct SuccessRateBuilder {
    /// `None`: the default, [`Clock::monotonic`], taken when the tracker is built.
    clock: Option<Clock>,
    tiers: Vec<String>,
    threshold_pp: f64,
    window: Duration,
    reference: Duration,
    min_samples: u64,
    on_alert: Option<Callback>,
}

impl Default for SuccessRateBuilder {
    fn default() -> Self {
        Self {
            clock: None,
            tiers: Vec::new(),
            threshold_pp: 2.0,
            window: Duration::from_secs(60),
            reference: Duration::from_secs(300),
            min_samples: 500,
            on_alert: None,
        }
    }
}

impl SuccessRateBuilder {
    /// The tiers to track (required; replaces any earlier list). Anything else is counted
    /// under [`OTHER_TIER`](crate::safety::SuccessRate::OTHER_TIER), so label cardinality stays fixed: never pass customer keys.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["free", "paid", "enterprise"]).build()?;
    /// assert_eq!(slo.snapshot().len(), 4);
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn tiers<I>(mut self, tiers: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.tiers = tiers.into_iter().map(|t| t.as_ref().to_owned()).collect();
        self
    }

    /// The clock (default: [`Clock::monotonic`]); a [`ManualClock`](crate::ManualClock) in
    /// tests.
    ///
    /// ```
    /// use tollgate::ManualClock;
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).clock(ManualClock::new()).build()?;
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// The drop that raises an alert, in percentage points of success rate (default 2.0),
    /// rounded to whole basis points (0.01 pp). An alert needs the drop to be *more* than this.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).drop_threshold(0.5).build()?;
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn drop_threshold(mut self, percentage_points: f64) -> Self {
        self.threshold_pp = percentage_points;
        self
    }

    /// The window whose success rate is watched (default 60 s). It is split into six
    /// sub-buckets, the unit of evaluation, and rounded up to a multiple of six nanoseconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).window(Duration::from_secs(30)).build()?;
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The reference period just before the window (default 5 min), rounded up to whole
    /// sub-buckets. At most 4090 sub-buckets (a sixth of the window each).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).reference(Duration::from_secs(900)).build()?;
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn reference(mut self, reference: Duration) -> Self {
        self.reference = reference;
        self
    }

    /// The fewest successes plus failures that the window and the reference period must each
    /// hold before a tier can alert (default 500; 0 acts as 1). At 500, a 2 pp drop is at
    /// least 10 extra failures: a handful at low traffic does not page.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).min_samples(2_000).build()?;
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn min_samples(mut self, min_samples: u64) -> Self {
        self.min_samples = min_samples;
        self
    }

    /// A callback run on every alert, after it is queued for
    /// [`poll_alerts`](SuccessRate::poll_alerts). It runs on the thread that evaluates (a
    /// recording thread, or [`tick`](SuccessRate::tick)), outside every lock, inside
    /// `catch_unwind`: a panic is counted ([`callback_panics`](SuccessRate::callback_panics))
    /// and never reaches the caller. That does not help under `panic = "abort"`. Keep it
    /// short: it delays the request that triggered the evaluation.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder()
    ///     .tiers(["paid"])
    ///     .on_alert(|alert| eprintln!("page: {alert}"))
    ///     .build()?;
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn on_alert(mut self, callback: impl Fn(&SloAlert) + Send + Sync + 'static) -> Self {
        self.on_alert = Some(Arc::new(callback));
        self
    }

    /// Builds the tracker.
    ///
    /// # Errors
    ///
    /// [`SloConfigError`]: no tiers, an empty, duplicate or reserved tier name, more than
    /// [`MAX_TIERS`](crate::safety::SuccessRate::MAX_TIERS) tiers, a threshold outside `[0.01, 100]` pp, a zero window or reference
    /// period, or a reference period of more than 4090 sub-buckets; on
    /// `wasm32-unknown-unknown`, no [`clock`](Self::clock) ([`SloConfigError::Clock`]).
    ///
    /// ```
    /// use tollgate::safety::{SloConfigError, SuccessRate};
    /// let err = SuccessRate::builder().tiers(["paid", "other"]).build().unwrap_err();
    /// assert_eq!(err, SloConfigError::ReservedTier);
    /// # Ok::<(), SloConfigError>(())
    /// ```
    pub fn build(self) -> Result<SuccessRate, SloConfigError> {
        let tiers = self.checked_tiers()?;
        let threshold_bp = self.checked_threshold()?;
        let (bucket_ns, reference_buckets) = self.checked_buckets()?;
        let stripes = std::thread::available_parallelism()
            .map_or(4, usize::from)
            .next_power_of_two()
            .min(16);
        let clock = match self.clock {
            Some(clock) => clock,
            None => Clock::try_monotonic()?,
        };
        let now_bucket = clock.now_nanos() / bucket_ns;
        let ring_len = (SUB_BUCKETS + reference_buckets) as usize * tiers.len();
        let slo = SuccessRate {
            counters: (0..stripes * tiers.len())
                .map(|_| Padded::default())
                .collect(),
            stripe_mask: stripes - 1,
            next_eval: AtomicU64::new((now_bucket + 1).saturating_mul(bucket_ns)),
            bucket_ns,
            reference_buckets,
            threshold_bp,
            min_samples: self.min_samples,
            state: Mutex::new(EvalState {
                bucket: now_bucket,
                seen: vec![[0; 4]; tiers.len()].into(),
                ring: vec![[0; 4]; ring_len].into(),
                firing: vec![false; tiers.len()].into(),
            }),
            queue: Mutex::new(VecDeque::new()),
            on_alert: self.on_alert,
            callback_panics: AtomicU64::new(0),
            dropped_alerts: AtomicU64::new(0),
            clock,
            tiers,
        };
        Ok(slo)
    }

    fn checked_tiers(&self) -> Result<Box<[Arc<str>]>, SloConfigError> {
        match self.tiers.len() {
            0 => return Err(SloConfigError::NoTiers),
            n if n > MAX_TIERS => return Err(SloConfigError::TooManyTiers(n)),
            _ => {}
        }
        for (i, tier) in self.tiers.iter().enumerate() {
            if tier.is_empty() {
                return Err(SloConfigError::EmptyTier);
            }
            if tier == OTHER_TIER {
                return Err(SloConfigError::ReservedTier);
            }
            if self.tiers[..i].contains(tier) {
                return Err(SloConfigError::DuplicateTier(tier.clone()));
            }
        }
        let declared = self.tiers.iter().map(|t| Arc::from(t.as_str()));
        Ok(declared.chain([Arc::from(OTHER_TIER)]).collect())
    }

    fn checked_threshold(&self) -> Result<u32, SloConfigError> {
        let pp = self.threshold_pp;
        let bp = (pp * 100.0).round();
        if pp.is_finite() && pp <= 100.0 && bp >= 1.0 {
            // In 1..=10_000: exact in an f64, and fits.
            Ok(bp as u32)
        } else {
            Err(SloConfigError::Threshold(pp))
        }
    }

    fn checked_buckets(&self) -> Result<(u64, u64), SloConfigError> {
        let window = saturating_nanos(self.window);
        let reference = saturating_nanos(self.reference);
        if window == 0 {
            return Err(SloConfigError::ZeroWindow);
        }
        if reference == 0 {
            return Err(SloConfigError::ZeroReference);
        }
        let bucket_ns = window.div_ceil(SUB_BUCKETS);
        let buckets = reference.div_ceil(bucket_ns);
        if buckets > MAX_BUCKETS - SUB_BUCKETS {
            return Err(SloConfigError::TooManyBuckets {
                reference: self.reference,
                bucket: Duration::from_nanos(bucket_ns),
                buckets,
            });
        }
        Ok((bucket_ns, buckets))
    }
}

impl fmt::Debug for SuccessRateBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SuccessRateBuilder")
            .field("tiers", &self.tiers)
            .field("threshold_pp", &self.threshold_pp)
            .field("window", &self.window)
            .field("reference", &self.reference)
            .field("min_samples", &self.min_samples)
            .field("on_alert", &self.on_alert.is_some())
            .field("clock", &self.clock)
            .finish()
    }
}
