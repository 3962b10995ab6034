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

use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use core::fmt;
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::sync::Mutex;

use crate::engine::cell::Padded;
use crate::engine::clock::Clock;

mod builder;
mod eval;
mod report;

pub use builder::{SloConfigError, SuccessRateBuilder};
pub use report::{SloAlert, TierSnapshot};

use eval::{growth, EvalState};
use report::Tally;

pub(crate) const OTHER_TIER: &str = "other";

pub(crate) const MAX_TIERS: usize = 64;

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
/// use tollgate::safety::RequestOutcome;
///
/// assert_eq!(RequestOutcome::from_status(200), RequestOutcome::Success);
/// assert_eq!(RequestOutcome::from_status(429), RequestOutcome::RateLimited);
/// assert_eq!(RequestOutcome::from_status(503), RequestOutcome::ServerError);
/// assert_eq!(RequestOutcome::from_status(404), RequestOutcome::ClientError);
/// assert_eq!(RequestOutcome::from_status(0), RequestOutcome::ServerError);
/// # Ok::<(), tollgate::safety::SloConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestOutcome {
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

impl RequestOutcome {
    /// Classifies an HTTP status code.
    ///
    /// A status outside `100..=599` is a [`ServerError`](RequestOutcome::ServerError): it is not a
    /// response the customer could use (proxies log `0` when no response was sent), and
    /// hiding it would hide a failure, which is how incident 001 stayed green.
    ///
    /// ```
    /// use tollgate::safety::RequestOutcome;
    /// assert_eq!(RequestOutcome::from_status(301), RequestOutcome::Success);
    /// assert_eq!(RequestOutcome::from_status(600), RequestOutcome::ServerError);
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
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

/// Counts by [`RequestOutcome::index`].
type Counts = [u64; 4];

type Callback = Arc<dyn Fn(&SloAlert) + Send + Sync>;

/// Per-tier success rates with an alert on a sudden drop: the customer's view, where a 429 is
/// a failure.
///
/// In incident 001 a config push capped 14 % of paying customers' traffic at 1 request per
/// second for 38 minutes while every dashboard stayed green: a 429 is fast, and it is not a
/// 5xx. To the customer it was the API not working. So here a 429 counts as a failure like a
/// 5xx, and other 4xx (the client's mistakes) count as neither ([`RequestOutcome`]). Replayed, the
/// incident pages within 20 seconds with the defaults.
///
/// * **Recording** ([`record`](Self::record)) takes `&self`, never locks or allocates: a
///   clock read, a scan of the declared tiers (undeclared ones count as [`OTHER_TIER`](crate::safety::SuccessRate::OTHER_TIER)), one
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
/// use tollgate::ManualClock;
/// use tollgate::safety::SuccessRate;
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
/// # Ok::<(), tollgate::safety::SloConfigError>(())
/// ```
pub struct SuccessRate {
    clock: Clock,
    /// The declared tiers in order, then [`OTHER_TIER`](crate::safety::SuccessRate::OTHER_TIER).
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

/// A small per-thread number, to spread threads over the counter stripes.
fn stripe_hint() -> usize {
    crate::sync::statics! {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
    }
    crate::sync::thread_locals! {
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
    /// use tollgate::safety::SuccessRate;
    ///
    /// let slo = SuccessRate::builder()
    ///     .tiers(["free", "paid"])
    ///     .drop_threshold(5.0)
    ///     .window(Duration::from_secs(120))
    ///     .reference(Duration::from_secs(600))
    ///     .min_samples(1_000)
    ///     .build()?;
    /// assert_eq!(slo.window(), Duration::from_secs(120));
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn builder() -> SuccessRateBuilder {
        SuccessRateBuilder::default()
    }

    /// Records a response by its HTTP status: see [`RequestOutcome::from_status`].
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// slo.record("paid", 429);
    /// assert_eq!(slo.snapshot()[0].failures_429(), 1);
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    #[inline]
    pub fn record(&self, tier: &str, status: u16) {
        self.record_outcome(tier, RequestOutcome::from_status(status));
    }

    /// Records a response by its outcome. An undeclared `tier` (names are case-sensitive) is
    /// counted under [`OTHER_TIER`](crate::safety::SuccessRate::OTHER_TIER). Evaluates first if a sub-bucket boundary has passed.
    ///
    /// ```
    /// use tollgate::safety::{RequestOutcome, SuccessRate};
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// slo.record_outcome("Paid", RequestOutcome::Success);
    /// assert_eq!(slo.snapshot()[1].tier(), "other");
    /// assert_eq!(slo.snapshot()[1].successes(), 1);
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    #[inline]
    pub fn record_outcome(&self, tier: &str, outcome: RequestOutcome) {
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
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// slo.tick();
    /// assert!(slo.poll_alerts().is_empty());
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
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
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// assert!(slo.poll_alerts().is_empty());
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn poll_alerts(&self) -> Vec<SloAlert> {
        self.queue.lock().drain(..).collect()
    }

    /// Every tier, declared ones in order then [`OTHER_TIER`](crate::safety::SuccessRate::OTHER_TIER): cumulative counts, and the
    /// success rate over the last complete window (which ends at
    /// [`TierSnapshot::window_end`], up to a sixth of the window ago). Does not evaluate or
    /// raise alerts.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["free", "paid"]).build()?;
    /// slo.record("paid", 503);
    /// slo.record("paid", 404);
    /// let tiers: Vec<_> = slo.snapshot().iter().map(|t| t.tier().to_owned()).collect();
    /// assert_eq!(tiers, ["free", "paid", "other"]);
    /// let paid = &slo.snapshot()[1];
    /// assert_eq!((paid.failures_5xx(), paid.client_errors()), (1, 1));
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
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
                window_end: Duration::from_nanos(now_bucket.saturating_mul(self.bucket_ns)),
            })
            .collect()
    }

    /// The window the success rate is measured over: the one asked for, rounded up to six
    /// whole nanosecond sub-buckets.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// assert_eq!(slo.window(), std::time::Duration::from_secs(60));
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.bucket_ns.saturating_mul(SUB_BUCKETS))
    }

    /// How many times the [`on_alert`](SuccessRateBuilder::on_alert) callback panicked. A
    /// panic is caught and counted; recording and other alerts go on.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).on_alert(|_| panic!("oops")).build()?;
    /// assert_eq!(slo.callback_panics(), 0);
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn callback_panics(&self) -> u64 {
        self.callback_panics.load(Ordering::Relaxed)
    }

    /// How many alerts were dropped from the [`poll_alerts`](Self::poll_alerts) queue because
    /// 1024 were waiting. The callback sees every alert.
    ///
    /// ```
    /// use tollgate::safety::SuccessRate;
    /// let slo = SuccessRate::builder().tiers(["paid"]).build()?;
    /// assert_eq!(slo.dropped_alerts(), 0);
    /// # Ok::<(), tollgate::safety::SloConfigError>(())
    /// ```
    pub fn dropped_alerts(&self) -> u64 {
        self.dropped_alerts.load(Ordering::Relaxed)
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

impl SuccessRate {
    /// The largest number of tiers [`SuccessRateBuilder::tiers`] accepts.
    pub const MAX_TIERS: usize = crate::safety::slo::MAX_TIERS;
    /// The tier that counts every request whose tier was not declared.
    pub const OTHER_TIER: &str = crate::safety::slo::OTHER_TIER;
}
