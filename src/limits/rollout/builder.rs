//! [`RolloutBuilder`] and the [`RolloutStage`]s of a rollout.

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use super::cohort::{Cohort, BUCKETS};
use super::{Config, Rollout};
use crate::engine::clock::{saturating_nanos, Clock};
use crate::limits::document::{ConfigErrors, Limits, DEFAULT_GUARD};
use crate::limits::reload::{Policies, Settings};

/// One stage of a rollout: the share of keys on the new document, in basis points (1 % is
/// 100), and how long it runs before the next stage if nothing halts it.
///
/// ```
/// use std::time::Duration;
/// use tollgate::limits::RolloutStage;
///
/// let stage = RolloutStage::new(250, Duration::from_secs(600)); // 2.5 % for 10 minutes
/// assert_eq!((stage.basis_points(), stage.duration()), (250, Duration::from_secs(600)));
/// assert_eq!(RolloutStage::new(0, Duration::ZERO).basis_points(), 1); // clamped to 1..=10_000
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RolloutStage {
    basis_points: u32,
    duration: Duration,
}

impl RolloutStage {
    /// A stage of `basis_points` (clamped to `1..=10_000`) for `duration`.
    pub const fn new(basis_points: u32, duration: Duration) -> Self {
        let basis_points = if basis_points == 0 {
            1
        } else if basis_points > BUCKETS as u32 {
            BUCKETS as u32
        } else {
            basis_points
        };
        Self {
            basis_points,
            duration,
        }
    }

    /// The share of keys on the new document, in basis points.
    pub const fn basis_points(&self) -> u32 {
        self.basis_points
    }

    /// How long the stage runs.
    pub const fn duration(&self) -> Duration {
        self.duration
    }
}

pub(crate) const DEFAULT_STAGES: [RolloutStage; 2] = [
    RolloutStage::new(100, Duration::from_secs(300)),
    RolloutStage::new(1_000, Duration::from_secs(300)),
];

/// Mixed into the default seed so it is not simply the revision.
const SEED_TAG: u128 = 0x746f_6c6c_6761_7465_726f_6c6c_6f75_7400;

/// Builds a [`Rollout`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::ManualClock;
/// use tollgate::limits::{Limits, Rollout, RolloutStage};
///
/// let doc = |quota: &str, revision: u64| Limits::from_toml(&format!(
///     "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
/// ));
/// let rollout = Rollout::builder(doc("10/s", 1)?, doc("20/s", 2)?)
///     .clock(ManualClock::new())
///     .stages([RolloutStage::new(500, Duration::from_secs(60))])
///     .seed(0x5eed)
///     .window(Duration::from_secs(30))
///     .threshold(0.05)
///     .min_cohort_keys(10)
///     .max_tracked_keys(1_000)
///     .build()?;
/// assert_eq!(rollout.basis_points(), 500);
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
#[must_use = "call .build() to get the rollout"]
pub struct RolloutBuilder {
    old: Limits,
    new: Limits,
    /// `None`: the default, [`Clock::monotonic`], taken when the rollout is built.
    clock: Option<Clock>,
    stages: Vec<RolloutStage>,
    seed: Option<u128>,
    max_keys: Option<usize>,
    cfg: Config,
}

impl RolloutBuilder {
    pub(super) fn new(old: Limits, new: Limits) -> Self {
        Self {
            old,
            new,
            clock: None,
            stages: DEFAULT_STAGES.to_vec(),
            seed: None,
            max_keys: None,
            cfg: Config {
                window: 60_000_000_000,
                threshold: 0.05,
                min_cohort_keys: 10,
                max_tracked_keys: 4_096,
                guard: DEFAULT_GUARD,
            },
        }
    }

    /// The clock of the limiters, the windows and the stages (default: [`Clock::monotonic`]).
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// The stages before 100 % (default [`DEFAULT_STAGES`](crate::limits::Rollout::DEFAULT_STAGES)). Stages whose share is not above
    /// the one before are dropped; an empty list goes to 100 % at once.
    pub fn stages(mut self, stages: impl IntoIterator<Item = RolloutStage>) -> Self {
        self.stages.clear();
        for stage in stages {
            if self
                .stages
                .last()
                .is_none_or(|s| s.basis_points < stage.basis_points)
            {
                self.stages.push(stage);
            }
        }
        self
    }

    /// The 128-bit cohort seed: a key is in the cohort iff SipHash-1-3 of its UTF-8 bytes,
    /// keyed by the seed's low 64 bits (k0) and high 64 bits (k1), modulo 10,000 is below the
    /// stage's basis points. The default derives the seed from the new document's revision,
    /// so every process rolling out the same document picks the same keys, and successive
    /// rollouts pick different ones (the same customers are not always first).
    pub fn seed(mut self, seed: u128) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The tightening factor beyond which the change needs an acknowledgement (default
    /// [`DEFAULT_GUARD`](crate::limits::Limits::DEFAULT_GUARD)). A value that is not finite or below 1 keeps the default.
    pub fn guard(mut self, guard: f64) -> Self {
        if guard.is_finite() && guard >= 1.0 {
            self.cfg.guard = guard;
        }
        self
    }

    /// The bound on tracked keys of each policy's limiter, in each document (default
    /// [`DEFAULT_MAX_KEYS`](crate::limiter::DEFAULT_MAX_KEYS)).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// The comparison window (default 60 s, at least 1 ms).
    pub fn window(mut self, window: Duration) -> Self {
        self.cfg.window = saturating_nanos(window).max(1_000_000);
        self
    }

    /// How far cohort breadth may exceed control breadth before the rollout halts and
    /// reverts (default 0.05: five percentage points), in `0..=1`.
    pub fn threshold(mut self, threshold: f64) -> Self {
        if threshold.is_finite() {
            self.cfg.threshold = threshold.clamp(0.0, 1.0);
        }
        self
    }

    /// The fewest active cohort keys in a window for it to be compared (default 10, at
    /// least 1): fewer keys say too little to halt on.
    pub fn min_cohort_keys(mut self, keys: usize) -> Self {
        self.cfg.min_cohort_keys = keys.max(1);
        self
    }

    /// The most keys tallied per window on each side, cohort and control (default 4,096,
    /// at least 16; about 32 bytes each). Checks of further keys are enforced but left out
    /// of the figures ([`WindowFigures::untracked_checks`](crate::limits::WindowFigures)).
    pub fn max_tracked_keys(mut self, keys: usize) -> Self {
        self.cfg.max_tracked_keys = keys.max(16);
        self
    }

    /// Builds the rollout: the first stage starts now.
    ///
    /// # Errors
    ///
    /// What [`Limits::check_transition`] finds: an unacknowledged tightening beyond the
    /// guard, or a stale revision. A rollout does not make a dangerous change safe to ship
    /// unacknowledged; it limits the damage of one nobody saw.
    ///
    /// # Panics
    ///
    /// Without a [`clock`](Self::clock) on `wasm32-unknown-unknown`, which has no default
    /// clock ([`Clock::monotonic`]).
    pub fn build(self) -> Result<Rollout, ConfigErrors> {
        let diff = Limits::check_transition(&self.old, &self.new, self.cfg.guard)?;
        let seed = self
            .seed
            .unwrap_or(SEED_TAG ^ u128::from(self.new.revision()));
        let settings = Settings {
            clock: self.clock.unwrap_or_else(Clock::monotonic),
            max_keys: self.max_keys,
            detector: None,
        };
        let old = Policies::new(Arc::new(self.old), &settings);
        let new = Policies::new(Arc::new(self.new), &settings);
        Ok(Rollout::from_parts(
            (old, new),
            diff,
            settings,
            self.stages,
            Cohort::new(seed),
            self.cfg,
        ))
    }
}

impl fmt::Debug for RolloutBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RolloutBuilder")
            .field("old", &self.old.revision())
            .field("new", &self.new.revision())
            .field("clock", &self.clock)
            .field("stages", &self.stages)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}
