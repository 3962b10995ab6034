//! [`SuccessRate`]: the customer's view of the service, per tier, where a 429 is a failure.
//!
//! # Incident 001
//!
//! A config push dropped a unit suffix and capped ~14 % of paying customers' traffic at one
//! request per second for 38 minutes. Every dashboard stayed green: latency was fine (a 429
//! takes 4 ms), the error rate was fine (a 429 is not a 5xx), the limiter was "doing its job".
//! The first signal was a support ticket 13 minutes in; detection took 24 minutes.
//!
//! To the team running the limiter a 429 is the limiter working; to the customer it is the
//! API not working. This module takes the customer's side: the success rate of a tier is the
//! share of its requests that got a useful answer, and **a 429 counts as a failure**, exactly
//! like a 5xx. The postmortem's action item, implemented here with its defaults: page when a
//! tier's success rate drops by more than 2 percentage points within 60 seconds. Replayed
//! against the incident, it fires within 20 simulated seconds (`tests/slo.rs`).
//!
//! How it records, evaluates and alerts, and what it cannot see: [`SuccessRate`].

use core::fmt;
use core::time::Duration;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::cell::Padded;
use crate::clock::{saturating_nanos, Clock};
use crate::error::Quoted;

/// The tier that counts every request whose tier was not declared.
pub const OTHER_TIER: &str = "other";

/// The largest number of tiers [`SuccessRateBuilder::tiers`] accepts.
pub const MAX_TIERS: usize = 64;

/// Sub-buckets per window: 10 s buckets for the default 60 s window.
const SUB_BUCKETS: u64 = 6;
/// Sub-buckets kept for the window and the reference period together.
const MAX_BUCKETS: u64 = 4096;
/// Alerts kept for [`SuccessRate::poll_alerts`]; the oldest are dropped (and counted) first.
const MAX_QUEUED: usize = 1024;
/// Basis points in one (a success rate of 1.0 is 10 000 bp).
const BP: u128 = 10_000;

/// What a response meant to the customer.
///
/// ```
/// use tollgate::Outcome;
///
/// assert_eq!(Outcome::from_status(200), Outcome::Success);
/// assert_eq!(Outcome::from_status(429), Outcome::RateLimited);
/// assert_eq!(Outcome::from_status(503), Outcome::ServerError);
/// assert_eq!(Outcome::from_status(404), Outcome::ClientError);
/// assert_eq!(Outcome::from_status(0), Outcome::ServerError);
/// # Ok::<(), tollgate::SloConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// A useful answer: 1xx, 2xx, 3xx.
    Success,
    /// 429 Too Many Requests: a failure. Incident 001 was made of these.
    RateLimited,
    /// 5xx, or a status outside 100..=599: a failure.
    ServerError,
    /// Any other 4xx: the client's mistake. Neither a success nor a failure: it is counted,
    /// but left out of the success rate.
    ClientError,
}

impl Outcome {
    /// Classifies an HTTP status code.
    ///
    /// A status outside `100..=599` is a [`ServerError`](Outcome::ServerError): it is not a
    /// response the customer could use (proxies log `0` when no response was sent), and
    /// hiding it would hide a failure, which is how incident 001 stayed green.
    ///
    /// ```
    /// use tollgate::Outcome;
    /// assert_eq!(Outcome::from_status(301), Outcome::Success);
    /// assert_eq!(Outcome::from_status(600), Outcome::ServerError);
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    #[inline]
    pub const fn from_status(status: u16) -> Self {
        match status {
            100..=399 => Self::Success,
            429 => Self::RateLimited,
            400..=499 => Self::ClientError,
            _ => Self::ServerError,
        }
    }

    #[inline]
    const fn index(self) -> usize {
        match self {
            Self::Success => 0,
            Self::RateLimited => 1,
            Self::ServerError => 2,
            Self::ClientError => 3,
        }
    }
}

/// Counts by [`Outcome::index`].
type Counts = [u64; 4];

/// Successes and failures; client errors are left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    good: u64,
    bad: u64,
}

impl Tally {
    fn of(c: Counts) -> Self {
        Self {
            good: c[0],
            bad: c[1].saturating_add(c[2]),
        }
    }

    fn total(self) -> u64 {
        self.good.saturating_add(self.bad)
    }

    fn rate(self) -> Option<f64> {
        let n = self.total();
        (n > 0).then(|| self.good as f64 / n as f64)
    }
}

/// Whether `reference − current > bp / scale` (rates as fractions), exactly, in integers:
/// `scale·(g_r·n_c − g_c·n_r) > bp·n_r·n_c`. Both totals must be non-zero.
fn drop_exceeds(reference: Tally, current: Tally, scale: u128, bp: u128) -> bool {
    let (n_r, n_c) = (u128::from(reference.total()), u128::from(current.total()));
    let lhs = u128::from(reference.good).saturating_mul(n_c);
    let rhs = u128::from(current.good).saturating_mul(n_r);
    lhs > rhs && (lhs - rhs).saturating_mul(scale) > bp.saturating_mul(n_r).saturating_mul(n_c)
}

/// A tier's success rate fell: one per episode (see [`SuccessRate`]).
///
/// Rates are fractions in `[0, 1]`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, SuccessRate};
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
/// # Ok::<(), tollgate::SloConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SloAlert {
    tier: Arc<str>,
    current: f64,
    reference: f64,
    current_requests: u64,
    reference_requests: u64,
    window: Duration,
    at: Duration,
}

impl SloAlert {
    /// The tier whose success rate dropped.
    pub fn tier(&self) -> &str {
        &self.tier
    }

    /// The success rate over the last complete window.
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

    /// When the alert was raised: the clock's reading, since the process epoch.
    pub fn at(&self) -> Duration {
        self.at
    }
}

impl fmt::Display for SloAlert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tier {}: success rate {:.2} % over the last {:?}, down {:.2} pp from {:.2} %",
            Quoted(&self.tier),
            self.current * 100.0,
            self.window,
            self.drop_pp(),
            self.reference * 100.0
        )
    }
}

/// One tier's counts, for a metrics exporter: see [`SuccessRate::snapshot`].
///
/// The counts are cumulative since the tracker was built (they only grow, as a Prometheus
/// counter expects); the success rate is over the last complete window.
///
/// ```
/// use tollgate::{ManualClock, SuccessRate};
///
/// let slo = SuccessRate::builder().tiers(["free"]).clock(ManualClock::new()).build()?;
/// slo.record("free", 200);
/// slo.record("free", 429);
/// let free = &slo.snapshot()[0];
/// assert_eq!((free.tier(), free.successes(), free.failures_429()), ("free", 1, 1));
/// # Ok::<(), tollgate::SloConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TierSnapshot {
    tier: Arc<str>,
    counts: Counts,
    window: Tally,
}

impl TierSnapshot {
    /// The tier's name ([`OTHER_TIER`] for undeclared tiers).
    pub fn tier(&self) -> &str {
        &self.tier
    }

    /// Successful responses ([`Outcome::Success`]).
    pub fn successes(&self) -> u64 {
        self.counts[Outcome::Success.index()]
    }

    /// 429 responses ([`Outcome::RateLimited`]).
    pub fn failures_429(&self) -> u64 {
        self.counts[Outcome::RateLimited.index()]
    }

    /// 5xx responses and invalid statuses ([`Outcome::ServerError`]).
    pub fn failures_5xx(&self) -> u64 {
        self.counts[Outcome::ServerError.index()]
    }

    /// Other 4xx responses ([`Outcome::ClientError`]), left out of the success rate.
    pub fn client_errors(&self) -> u64 {
        self.counts[Outcome::ClientError.index()]
    }

    /// The success rate over the last complete window; `None` if it saw no success or failure.
    pub fn success_rate(&self) -> Option<f64> {
        self.window.rate()
    }

    /// Successes and failures counted in the last complete window.
    pub fn window_requests(&self) -> u64 {
        self.window.total()
    }
}

/// A mistake in a [`SuccessRateBuilder`].
///
/// ```
/// use tollgate::{SloConfigError, SuccessRate};
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
    /// [`OTHER_TIER`] was declared; it always exists and counts undeclared tiers.
    #[error("tier \"other\" is reserved for undeclared tiers")]
    ReservedTier,
    /// More than [`MAX_TIERS`] tiers.
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
}

type Callback = Arc<dyn Fn(&SloAlert) + Send + Sync>;

/// Per-tier success rates with an alert on a sudden drop: the customer's view, where a 429 is
/// a failure.
///
/// In incident 001 a config push capped 14 % of paying customers' traffic at 1 request per
/// second for 38 minutes while every dashboard stayed green: a 429 is fast, and it is not a
/// 5xx. To the customer it was the API not working. So here a 429 counts as a failure like a
/// 5xx, and other 4xx (the client's mistakes) count as neither ([`Outcome`]). Replayed, the
/// incident pages within 20 seconds with the defaults.
///
/// * **Recording** ([`record`](Self::record)) takes `&self`, never locks or allocates: a
///   clock read, a scan of the declared tiers (undeclared ones count as [`OTHER_TIER`]), one
///   `Relaxed` add on a striped, cache-padded counter. Share the tracker in an `Arc`.
/// * **Evaluation** is lazy: time is cut into sub-buckets of a sixth of the window, and the
///   first record past a boundary (or [`tick`](Self::tick), for idle periods) compares each
///   tier's success rate over the last complete window (default 60 s) with the rate over the
///   reference period before it (default 5 min). No background thread.
/// * **An alert** ([`SloAlert`]) fires when `reference − current` exceeds the threshold
///   (default 2 pp), with at least `min_samples` (default 500) successes plus failures on
///   each side; once per episode: the tier re-arms when the drop is back to half the
///   threshold (the rate recovered, or the reference caught up with a new normal). Alerts
///   are queued for [`poll_alerts`](Self::poll_alerts) and passed to the
///   [`on_alert`](SuccessRateBuilder::on_alert) callback.
///
/// # Caveats
///
/// * It compares a tier with its own recent past: a slow drift (less than the threshold
///   between the reference period and the window) never pages.
/// * A record racing an evaluation may be counted in the neighbouring sub-bucket.
/// * Panics in the callback are caught, which does not help under `panic = "abort"`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, SuccessRate};
///
/// let clock = ManualClock::new();
/// let slo = SuccessRate::builder()
///     .tiers(["free", "paid", "enterprise"])
///     .clock(clock.clone())
///     .build()?; // 2 pp within 60 s, 500 requests on each side
/// for _ in 0..600 {
///     for _ in 0..10 {
///         slo.record("paid", 200);
///         slo.record("trial", 200); // undeclared: counted under "other"
///     }
///     clock.advance(Duration::from_secs(1));
/// }
/// for _ in 0..30 {
///     for i in 0..10 {
///         slo.record("paid", if i < 2 { 429 } else { 200 });
///     }
///     clock.advance(Duration::from_secs(1));
/// }
/// slo.tick();
/// let alerts = slo.poll_alerts();
/// assert_eq!(alerts.len(), 1);
/// assert_eq!(alerts[0].tier(), "paid");
/// # Ok::<(), tollgate::SloConfigError>(())
/// ```
pub struct SuccessRate {
    clock: Clock,
    /// The declared tiers in order, then [`OTHER_TIER`].
    tiers: Box<[Arc<str>]>,
    /// Cumulative counts, index `stripe · tiers.len() + tier`. Only ever increased, `Relaxed`:
    /// they are statistics, and publish no other memory; the evaluator reads their growth.
    counters: Box<[Padded<[AtomicU64; 4]>]>,
    stripe_mask: usize,
    /// The start of the next sub-bucket, in ns: the first record at or past it evaluates.
    /// `Relaxed`: it only picks the evaluator; the state it guards is behind `state`'s lock.
    next_eval: AtomicU64,
    bucket_ns: u64,
    reference_buckets: u64,
    threshold_bp: u32,
    min_samples: u64,
    state: Mutex<EvalState>,
    queue: Mutex<VecDeque<SloAlert>>,
    on_alert: Option<Callback>,
    // Relaxed: plain event counts.
    callback_panics: AtomicU64,
    dropped_alerts: AtomicU64,
}

/// The evaluator's view, behind a lock taken once per sub-bucket.
struct EvalState {
    /// The sub-bucket in progress at the last evaluation; its counts so far are the counters'
    /// growth since `seen`.
    bucket: u64,
    /// Counter totals per tier at the last evaluation.
    seen: Box<[Counts]>,
    /// Counts of the complete sub-buckets `[bucket − len, bucket)`: sub-bucket `i` of tier `t`
    /// at `(i % len) · tiers + t`.
    ring: Box<[Counts]>,
    /// Per tier: an alert fired and the rate has not recovered yet.
    firing: Box<[bool]>,
}

impl EvalState {
    fn len(&self) -> u64 {
        (self.ring.len() / self.firing.len()) as u64
    }

    fn slot(&self, bucket: u64, tier: usize) -> usize {
        (bucket % self.len()) as usize * self.firing.len() + tier
    }

    /// Counts of `tier` over the sub-buckets `[lo, hi)`; `pending` is the in-progress bucket's.
    fn sum(&self, tier: usize, lo: u64, hi: u64, pending: Counts) -> Counts {
        let mut out = [0; 4];
        let start = lo.max(self.bucket.saturating_sub(self.len()));
        for i in start..hi.min(self.bucket) {
            add(&mut out, self.ring[self.slot(i, tier)]);
        }
        if (lo..hi).contains(&self.bucket) {
            add(&mut out, pending);
        }
        out
    }

    /// Closes the sub-buckets before `now_bucket` (> `self.bucket`) given the current totals.
    fn roll(&mut self, now_bucket: u64, totals: &[Counts]) {
        for (tier, total) in totals.iter().enumerate() {
            let pending = growth(*total, self.seen[tier]);
            for i in (self.bucket..now_bucket).rev().take(self.len() as usize) {
                let slot = self.slot(i, tier);
                self.ring[slot] = if i == self.bucket { pending } else { [0; 4] };
            }
        }
        self.seen.copy_from_slice(totals);
        self.bucket = now_bucket;
    }
}

fn add(into: &mut Counts, c: Counts) {
    for (a, b) in into.iter_mut().zip(c) {
        *a = a.saturating_add(b);
    }
}

fn growth(now: Counts, then: Counts) -> Counts {
    core::array::from_fn(|i| now[i].wrapping_sub(then[i]))
}

/// A small per-thread number, to spread threads over the counter stripes.
fn stripe_hint() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // Relaxed: any distinct-enough number will do.
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    STRIPE.with(|s| *s)
}

impl SuccessRate {
    /// A builder: declare the tiers, then adjust the defaults (60 s window, 2 pp, 5 min
    /// reference, 500 requests) if needed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::SuccessRate;
    ///
    /// let slo = SuccessRate::builder()
    ///     .tiers(["free", "paid"])
    ///     .drop_threshold(5.0)
    ///     .window(Duration::from_secs(120))
    ///     .reference(Duration::from_secs(600))
    ///     .min_samples(1_000)
    ///     .build()?;
    /// assert_eq!(slo.window(), Duration::from_secs(120));
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn builder() -> SuccessRateBuilder {
        SuccessRateBuilder::default()
    }

    /// Records a response by its HTTP status: see [`Outcome::from_status`].
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// slo.record("paid", 429);
    /// assert_eq!(slo.snapshot()[0].failures_429(), 1);
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    #[inline]
    pub fn record(&self, tier: &str, status: u16) {
        self.record_outcome(tier, Outcome::from_status(status));
    }

    /// Records a response by its outcome. An undeclared `tier` (names are case-sensitive) is
    /// counted under [`OTHER_TIER`]. Evaluates first if a sub-bucket boundary has passed.
    ///
    /// ```
    /// use tollgate::{Outcome, SuccessRate};
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// slo.record_outcome("Paid", Outcome::Success);
    /// assert_eq!(slo.snapshot()[1].tier(), "other");
    /// assert_eq!(slo.snapshot()[1].successes(), 1);
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    #[inline]
    pub fn record_outcome(&self, tier: &str, outcome: Outcome) {
        let declared = &self.tiers[..self.tiers.len() - 1];
        let tier = declared
            .iter()
            .position(|t| **t == *tier)
            .unwrap_or(declared.len());
        let now = self.clock.now_nanos();
        let next = self.next_eval.load(Ordering::Relaxed);
        // Evaluate before counting, so this record lands in the new sub-bucket.
        if now >= next
            && self
                .next_eval
                .compare_exchange(
                    next,
                    self.bucket_end(now),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            self.evaluate();
        }
        let stripe = stripe_hint() & self.stripe_mask;
        self.counters[stripe * self.tiers.len() + tier].0[outcome.index()]
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Evaluates now if a sub-bucket boundary has passed since the last evaluation: call it
    /// periodically where traffic may stop (a tier that goes silent raises nothing by
    /// itself). Cheap when there is nothing to do.
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// slo.tick();
    /// assert!(slo.poll_alerts().is_empty());
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn tick(&self) {
        let now = self.clock.now_nanos();
        if now >= self.next_eval.load(Ordering::Relaxed) {
            self.evaluate();
        }
    }

    /// Takes the alerts raised since the last call, oldest first (at most 1024 are kept;
    /// see [`dropped_alerts`](Self::dropped_alerts)).
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// assert!(slo.poll_alerts().is_empty());
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn poll_alerts(&self) -> Vec<SloAlert> {
        self.queue.lock().drain(..).collect()
    }

    /// Every tier, declared ones in order then [`OTHER_TIER`]: cumulative counts, and the
    /// success rate over the last complete window. Does not evaluate or raise alerts.
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["free", "paid"]).build()?;
    /// slo.record("paid", 503);
    /// slo.record("paid", 404);
    /// let tiers: Vec<_> = slo.snapshot().iter().map(|t| t.tier().to_owned()).collect();
    /// assert_eq!(tiers, ["free", "paid", "other"]);
    /// let paid = &slo.snapshot()[1];
    /// assert_eq!((paid.failures_5xx(), paid.client_errors()), (1, 1));
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn snapshot(&self) -> Vec<TierSnapshot> {
        let st = self.state.lock();
        let totals = self.totals();
        let now_bucket = (self.clock.now_nanos() / self.bucket_ns).max(st.bucket);
        let lo = now_bucket.saturating_sub(SUB_BUCKETS);
        (self.tiers.iter().zip(totals.iter()).enumerate())
            .map(|(t, (tier, total))| TierSnapshot {
                tier: Arc::clone(tier),
                counts: *total,
                window: Tally::of(st.sum(t, lo, now_bucket, growth(*total, st.seen[t]))),
            })
            .collect()
    }

    /// The window the success rate is measured over: the one asked for, rounded up to six
    /// whole nanosecond sub-buckets.
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// assert_eq!(slo.window(), std::time::Duration::from_secs(60));
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.bucket_ns.saturating_mul(SUB_BUCKETS))
    }

    /// How many times the [`on_alert`](SuccessRateBuilder::on_alert) callback panicked. A
    /// panic is caught and counted; recording and other alerts go on.
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).on_alert(|_| panic!("oops")).build()?;
    /// assert_eq!(slo.callback_panics(), 0);
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn callback_panics(&self) -> u64 {
        self.callback_panics.load(Ordering::Relaxed)
    }

    /// How many alerts were dropped from the [`poll_alerts`](Self::poll_alerts) queue because
    /// 1024 were waiting. The callback sees every alert.
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// assert_eq!(slo.dropped_alerts(), 0);
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn dropped_alerts(&self) -> u64 {
        self.dropped_alerts.load(Ordering::Relaxed)
    }

    fn bucket_end(&self, now: u64) -> u64 {
        (now / self.bucket_ns + 1).saturating_mul(self.bucket_ns)
    }

    fn totals(&self) -> Vec<Counts> {
        let mut totals = vec![[0; 4]; self.tiers.len()];
        for (i, cell) in self.counters.iter().enumerate() {
            let c = cell.0.each_ref().map(|a| a.load(Ordering::Relaxed));
            add(&mut totals[i % self.tiers.len()], c);
        }
        totals
    }

    #[cold]
    #[inline(never)]
    fn evaluate(&self) {
        let raised = {
            let mut st = self.state.lock();
            // Read under the lock: evaluations then see time in order.
            let now = self.clock.now_nanos();
            self.next_eval
                .fetch_max(self.bucket_end(now), Ordering::Relaxed);
            let bucket = now / self.bucket_ns;
            if bucket <= st.bucket {
                return;
            }
            st.roll(bucket, &self.totals());
            self.judge(&mut st, now)
        };
        self.deliver(raised);
    }

    /// Compares each tier's last window with its reference period, and updates the episodes.
    fn judge(&self, st: &mut EvalState, now: u64) -> Vec<SloAlert> {
        let hi = st.bucket;
        let mid = hi.saturating_sub(SUB_BUCKETS);
        let lo = mid.saturating_sub(self.reference_buckets);
        let bp = u128::from(self.threshold_bp);
        let mut raised = Vec::new();
        for (t, tier) in self.tiers.iter().enumerate() {
            let current = Tally::of(st.sum(t, mid, hi, [0; 4]));
            let reference = Tally::of(st.sum(t, lo, mid, [0; 4]));
            let min = self.min_samples.max(1);
            if current.total() < min || reference.total() < min {
                continue;
            }
            if !st.firing[t] && drop_exceeds(reference, current, BP, bp) {
                st.firing[t] = true;
                raised.push(SloAlert {
                    tier: Arc::clone(tier),
                    current: current.rate().unwrap_or(0.0),
                    reference: reference.rate().unwrap_or(0.0),
                    current_requests: current.total(),
                    reference_requests: reference.total(),
                    window: self.window(),
                    at: Duration::from_nanos(now),
                });
            } else if st.firing[t] && !drop_exceeds(reference, current, 2 * BP, bp) {
                st.firing[t] = false;
            }
        }
        raised
    }

    /// Queues the alerts, then runs the callback on each, outside every lock.
    fn deliver(&self, raised: Vec<SloAlert>) {
        if raised.is_empty() {
            return;
        }
        {
            let mut queue = self.queue.lock();
            for alert in &raised {
                if queue.len() == MAX_QUEUED {
                    queue.pop_front();
                    self.dropped_alerts.fetch_add(1, Ordering::Relaxed);
                }
                queue.push_back(alert.clone());
            }
        }
        let Some(callback) = &self.on_alert else {
            return;
        };
        for alert in &raised {
            if catch_unwind(AssertUnwindSafe(|| callback(alert))).is_err() {
                self.callback_panics.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl fmt::Debug for SuccessRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tiers: Vec<&str> = self.tiers.iter().map(|t| &**t).collect();
        f.debug_struct("SuccessRate")
            .field("tiers", &tiers)
            .field("window", &self.window())
            .field("threshold_pp", &(f64::from(self.threshold_bp) / 100.0))
            .field("min_samples", &self.min_samples)
            .field("queued_alerts", &self.queue.lock().len())
            .field("callback_panics", &self.callback_panics())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// Builds a [`SuccessRate`]; see [`SuccessRate::builder`].
#[must_use = "call .build() to get the tracker"]
pub struct SuccessRateBuilder {
    clock: Clock,
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
            clock: Clock::monotonic(),
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
    /// under [`OTHER_TIER`], so label cardinality stays fixed: never pass customer keys.
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["free", "paid", "enterprise"]).build()?;
    /// assert_eq!(slo.snapshot().len(), 4);
    /// # Ok::<(), tollgate::SloConfigError>(())
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
    /// use tollgate::{ManualClock, SuccessRate};
    /// let slo = SuccessRate::builder().tiers(["paid"]).clock(ManualClock::new()).build()?;
    /// # Ok::<(), tollgate::SloConfigError>(())
    /// ```
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = clock.into();
        self
    }

    /// The drop that raises an alert, in percentage points of success rate (default 2.0),
    /// rounded to whole basis points (0.01 pp). An alert needs the drop to be *more* than this.
    ///
    /// ```
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).drop_threshold(0.5).build()?;
    /// # Ok::<(), tollgate::SloConfigError>(())
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
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).window(Duration::from_secs(30)).build()?;
    /// # Ok::<(), tollgate::SloConfigError>(())
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
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).reference(Duration::from_secs(900)).build()?;
    /// # Ok::<(), tollgate::SloConfigError>(())
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
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).min_samples(2_000).build()?;
    /// # Ok::<(), tollgate::SloConfigError>(())
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
    /// use tollgate::SuccessRate;
    /// let slo = SuccessRate::builder()
    ///     .tiers(["paid"])
    ///     .on_alert(|alert| eprintln!("page: {alert}"))
    ///     .build()?;
    /// # Ok::<(), tollgate::SloConfigError>(())
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
    /// [`MAX_TIERS`] tiers, a threshold outside `[0.01, 100]` pp, a zero window or reference
    /// period, or a reference period of more than 4090 sub-buckets.
    ///
    /// ```
    /// use tollgate::{SloConfigError, SuccessRate};
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
        let now_bucket = self.clock.now_nanos() / bucket_ns;
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
            clock: self.clock,
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn ring_keeps_the_last_len_buckets_and_the_pending_one() {
        let mut st = EvalState {
            bucket: 0,
            seen: vec![[0; 4]].into(),
            ring: vec![[0; 4]; 3].into(),
            firing: vec![false].into(),
        };
        st.roll(1, &[[5, 0, 0, 0]]); // bucket 0 holds 5
        st.roll(2, &[[7, 1, 0, 0]]); // bucket 1 holds 2 + 1
        assert_eq!(st.sum(0, 0, 2, [0; 4]), [7, 1, 0, 0]);
        assert_eq!(st.sum(0, 1, 3, [4, 0, 0, 0]), [6, 1, 0, 0]);
        st.roll(10, &[[9, 1, 0, 0]]); // bucket 2 holds 2; buckets 3..10 are empty
        assert_eq!(st.sum(0, 0, 10, [0; 4]), [0; 4]); // 0..=2 fell out of the ring
        st.roll(11, &[[9, 1, 0, 0]]);
        assert_eq!(st.sum(0, 0, 11, [0; 4]), [0; 4]);
    }
}
