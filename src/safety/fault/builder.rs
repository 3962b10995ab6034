//! [`FaultDetectorBuilder`]: the detector's settings and their defaults.

use crate::sync::atomic::{AtomicBool, AtomicU64};
use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use crate::sync::Mutex;

use super::eval::Eval;
use super::panel::Panel;
use super::{Baseline, Config, EventCallback, FaultDetector, FaultEvent, Shared};
use crate::engine::clock::{saturating_nanos, Clock};
use crate::engine::error::ClockError;
use crate::engine::fingerprint::Fingerprinter;
use crate::engine::stats::Counters;

/// Builds a [`FaultDetector`].
#[must_use = "call .build() to get the detector"]
pub struct FaultDetectorBuilder {
    cfg: Config,
    /// `None`: the default, [`Clock::monotonic`], taken when the detector is built.
    clock: Option<Clock>,
    baseline: Option<Baseline>,
    revision: u64,
    panel_size: usize,
    callbacks: Vec<EventCallback>,
}

impl Default for FaultDetectorBuilder {
    fn default() -> Self {
        const SEC: u64 = 1_000_000_000;
        Self {
            cfg: Config {
                multiplier: 5.0,
                floor: 0.2,
                window: 60 * SEC,
                sub: 10 * SEC,
                min_samples: 100,
                min_panel: 20,
                pass_for: 15 * 60 * SEC,
                max_pass: 60 * 60 * SEC,
                cooldown: 5 * 60 * SEC,
                recent: 10 * 60 * SEC,
                memory: 24 * 60 * 60 * SEC,
                ceiling: Some(10),
            },
            clock: None,
            baseline: None,
            revision: 0,
            panel_size: 1024,
            callbacks: Vec::new(),
        }
    }
}

impl fmt::Debug for FaultDetectorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultDetectorBuilder")
            .field("cfg", &self.cfg)
            .field("clock", &self.clock)
            .field(
                "baseline_hours",
                &self.baseline.as_ref().map(|b| b.hours().len()),
            )
            .field("callbacks", &self.callbacks.len())
            .finish()
    }
}

impl FaultDetectorBuilder {
    /// The detector's own clock, for its windows (default: monotonic). Keep it independent of
    /// the limiter's clock where you can: a lagging limiter clock must not slow the detector.
    pub fn clock(mut self, clock: impl Into<Clock>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// Trip when the measure exceeds `multiplier` × the baseline (default 5; at least 1).
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        self.cfg.multiplier = if multiplier.is_finite() {
            multiplier.max(1.0)
        } else {
            5.0
        };
        self
    }

    /// The absolute floor the measure must also exceed (default 0.2: a fifth of the panel
    /// keys, or of the checks, denied), in `0..=1`.
    pub fn floor(mut self, floor: f64) -> Self {
        self.cfg.floor = if floor.is_finite() {
            floor.clamp(0.0, 1.0)
        } else {
            0.2
        };
        self
    }

    /// The evaluation window (default 60 s), evaluated every sixth of it.
    pub fn window(mut self, window: Duration) -> Self {
        let w = saturating_nanos(window).max(6);
        self.cfg.window = w;
        self.cfg.sub = w / 6;
        self
    }

    /// The fewest checks (direct) in a window for the measure to count (default 100).
    pub fn min_samples(mut self, checks: u64) -> Self {
        self.cfg.min_samples = checks.max(1);
        self
    }

    /// The fewest eligible panel keys (keyed) for breadth to count (default 20).
    pub fn min_panel_keys(mut self, keys: usize) -> Self {
        self.cfg.min_panel = keys.max(1);
        self
    }

    /// Panel size k (default 1024): the keys sampled for breadth.
    pub fn panel_size(mut self, k: usize) -> Self {
        self.panel_size = k.clamp(1, 1 << 16);
        self
    }

    /// How long one trip passes traffic through (default 15 min), extended while the anomaly
    /// persists up to [`max_pass_through`](Self::max_pass_through).
    pub fn pass_through_for(mut self, d: Duration) -> Self {
        self.cfg.pass_for = saturating_nanos(d).max(1);
        self
    }

    /// The longest a trip may pass traffic through, extensions included (default 1 h).
    pub fn max_pass_through(mut self, d: Duration) -> Self {
        self.cfg.max_pass = saturating_nanos(d).max(1);
        self
    }

    /// At most one trip per cool-down (default 5 min).
    pub fn cooldown(mut self, d: Duration) -> Self {
        self.cfg.cooldown = saturating_nanos(d);
        self
    }

    /// A rise counts as sudden (a trip, not a drift alert) if the measure was below
    /// threshold ÷ multiplier at some point in this span before the window (default 10 min).
    pub fn recent_span(mut self, d: Duration) -> Self {
        self.cfg.recent = saturating_nanos(d);
        self
    }

    /// The ceiling during pass-through, as a multiple of the quota (default `Some(10)`); `None`
    /// passes everything.
    pub fn ceiling(mut self, factor: Option<u32>) -> Self {
        self.cfg.ceiling = factor.map(|f| f.max(1));
        self
    }

    /// Starts from an exported baseline, so a restart is not a cold start.
    pub fn baseline(mut self, baseline: Baseline) -> Self {
        self.baseline = Some(baseline);
        self
    }

    /// The same as [`baseline`](Self::baseline): imports what [`FaultDetector::baseline`]
    /// exported.
    ///
    /// ```
    /// use tollgate::safety::{Baseline, FaultDetector};
    ///
    /// let before_restart = FaultDetector::new().baseline();
    /// let detector = FaultDetector::builder().with_baseline(before_restart).build();
    /// assert!(!detector.baseline().is_ready()); // an empty one stays a cold start
    /// ```
    pub fn with_baseline(self, baseline: Baseline) -> Self {
        self.baseline(baseline)
    }

    /// The config revision in force (default 0).
    pub fn revision(mut self, revision: u64) -> Self {
        self.revision = revision;
        self
    }

    /// Adds a callback for [`FaultEvent`]s. It runs on the check that ran the evaluation,
    /// outside every lock, inside `catch_unwind`: a panic is counted
    /// ([`DetectorState::callback_panics`](crate::safety::DetectorState::callback_panics)) and never stops verdicts. Under `panic = abort`
    /// nothing can catch it: keep callbacks panic-free.
    pub fn on_event(mut self, callback: impl Fn(&FaultEvent) + Send + Sync + 'static) -> Self {
        self.callbacks.push(Arc::new(callback));
        self
    }

    /// Builds the detector.
    ///
    /// # Panics
    ///
    /// Without a [`clock`](Self::clock) on `wasm32-unknown-unknown`, which has no default
    /// clock; [`try_build`](Self::try_build) returns the error instead.
    pub fn build(self) -> FaultDetector {
        self.try_build().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`build`](Self::build), or the error when the default clock is wanted and this target
    /// has none.
    ///
    /// ```
    /// use tollgate::ManualClock;
    /// use tollgate::safety::FaultDetector;
    ///
    /// let detector = FaultDetector::builder().clock(ManualClock::new()).try_build()?;
    /// assert_eq!(detector.stats().total(), 0);
    /// # Ok::<(), tollgate::ClockError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClockError::Unavailable`] on `wasm32-unknown-unknown` when no clock was given.
    pub fn try_build(self) -> Result<FaultDetector, ClockError> {
        let clock = match self.clock {
            Some(clock) => clock,
            None => Clock::try_monotonic()?,
        };
        let fingerprinter = Fingerprinter::new();
        let seed = fingerprinter.fingerprint(&0x0070_616e_656c_u64);
        let baseline = self
            .baseline
            .unwrap_or_else(|| Baseline::new(self.revision));
        let now = clock.now_nanos();
        Ok(FaultDetector {
            shared: Arc::new(Shared {
                mode: AtomicU64::new(0),
                counters: Counters::new(),
                attached: Mutex::default(),
                panel: Panel::new(self.panel_size, seed),
                keyed: AtomicBool::new(false),
                fingerprinter,
                next_eval: AtomicU64::new(now.saturating_add(self.cfg.sub)),
                override_until: AtomicU64::new(u64::MAX),
                eval: Mutex::new(Eval::new(now, self.cfg, baseline, self.revision)),
                clock,
                cfg: self.cfg,
                callbacks: self.callbacks,
                callback_panics: AtomicU64::new(0),
            }),
        })
    }
}
