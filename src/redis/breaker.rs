//! The circuit breaker in front of Redis: it opens after consecutive failures or a high error
//! ratio, stays open for a jittered cool-down (doubling, capped, while probes keep failing),
//! then lets exactly one probe through (half-open) and closes when it succeeds.
//!
//! Every result is reported with the permit its call was let through with. Permits carry the
//! breaker's generation, bumped by every change of state: a result of an earlier generation (a
//! call let through before the breaker opened, answering late; a superseded probe) is ignored,
//! so only the current probe closes an open breaker and only current calls count.
//!
//! A state machine over explicit `now` readings (ns): the limiter passes the OS clock, tests
//! pass numbers.

use core::time::Duration;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::sync::Mutex;

use super::key::SLOTS;
use crate::engine::clock::saturating_nanos;

/// When the breaker opens and how long it stays open.
///
/// ```
/// use std::time::Duration;
/// use tollgate::redis::BreakerConfig;
///
/// let b = BreakerConfig::new()
///     .consecutive_failures(3)
///     .error_ratio(0.5, 20)
///     .open_for(Duration::from_millis(200), Duration::from_secs(5));
/// assert_eq!(b.consecutive_failures_threshold(), 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerConfig {
    consecutive: u32,
    ratio: f64,
    min_calls: u32,
    window: u64,
    open_min: u64,
    open_max: u64,
}

impl Default for BreakerConfig {
    /// 5 consecutive failures, or half of at least 20 calls in a 10 s window; open for
    /// 500 ms (±50 % jitter), doubling up to 1 s while probes fail: a restarted server is back
    /// in use within about 1.5 s, and each instance probes a dead one about once a second.
    fn default() -> Self {
        Self {
            consecutive: 5,
            ratio: 0.5,
            min_calls: 20,
            window: 10_000_000_000,
            open_min: 500_000_000,
            open_max: 1_000_000_000,
        }
    }
}

impl BreakerConfig {
    /// The defaults (see [`Default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens after `n` failures in a row (at least 1; 0 is taken as 1).
    #[must_use]
    pub fn consecutive_failures(self, n: u32) -> Self {
        Self {
            consecutive: n.max(1),
            ..self
        }
    }

    /// Opens when at least `ratio` of the calls in the window failed, once the window holds
    /// `min_calls` calls. A ratio above 1 (or NaN) disables this rule.
    #[must_use]
    pub fn error_ratio(self, ratio: f64, min_calls: u32) -> Self {
        Self {
            ratio,
            min_calls: min_calls.max(1),
            ..self
        }
    }

    /// The length of the window the error ratio is measured over.
    #[must_use]
    pub fn window(self, window: Duration) -> Self {
        Self {
            window: saturating_nanos(window).max(1),
            ..self
        }
    }

    /// The first cool-down (`min`) and its cap while probes keep failing (`max ≥ min`). Each
    /// cool-down is jittered by ±50 %, so instances do not probe a recovering server together.
    #[must_use]
    pub fn open_for(self, min: Duration, max: Duration) -> Self {
        let open_min = saturating_nanos(min).max(1);
        Self {
            open_min,
            open_max: saturating_nanos(max).max(open_min),
            ..self
        }
    }

    /// The cool-down before the first probe, before jitter: what a
    /// [`FailurePolicy::Closed`](crate::redis::FailurePolicy::Closed) denial tells as its retry-after.
    pub(crate) fn first_cool_down(&self) -> Duration {
        Duration::from_nanos(self.open_min)
    }

    /// The consecutive-failure threshold.
    pub fn consecutive_failures_threshold(&self) -> u32 {
        self.consecutive
    }
}

/// What the breaker lets a call do, stamped with the breaker's generation when it was given:
/// a call's result speaks only for the period it was let through in (see
/// [`Breaker::success`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Closed: call.
    Call { generation: u64 },
    /// Half-open: this call is the probe.
    Probe { generation: u64 },
    /// Open: do not call.
    Reject,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed,
    /// Open until `until`; the next cool-down will be `next` before jitter.
    Open {
        until: u64,
        next: u64,
    },
    /// A probe is out; if it never reports (its caller was cancelled), another probe may go
    /// at `reprobe` (one jittered cool-down after the first).
    HalfOpen {
        reprobe: u64,
        next: u64,
    },
}

#[derive(Debug)]
struct Inner {
    state: State,
    consecutive: u32,
    window_start: u64,
    calls: u32,
    failures: u32,
    rng: u64,
    opened: u64,
    /// Bumped by every change of state, a new probe included: a permit of an older generation
    /// was given before the breaker last changed its mind.
    generation: u64,
}

/// The breaker itself.
#[derive(Debug)]
pub(crate) struct Breaker {
    config: BreakerConfig,
    inner: Mutex<Inner>,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        let seed = RandomState::new().hash_one(0x746f_6c6c_6761_7465_u64) | 1;
        Self {
            config,
            inner: Mutex::new(Inner {
                state: State::Closed,
                consecutive: 0,
                window_start: 0,
                calls: 0,
                failures: 0,
                rng: seed,
                opened: 0,
                generation: 0,
            }),
        }
    }

    /// May a call go to Redis at `now`?
    pub(crate) fn permit(&self, now: u64) -> Permit {
        let mut s = self.inner.lock();
        match s.state {
            State::Closed => Permit::Call {
                generation: s.generation,
            },
            State::Open { until, next }
            | State::HalfOpen {
                reprobe: until,
                next,
            } if now >= until => {
                let wait = jitter(&mut s.rng, next);
                s.state = State::HalfOpen {
                    reprobe: now.saturating_add(wait),
                    next,
                };
                // A new probe: one still out from before (its caller cancelled, or slower
                // than the cool-down) no longer decides.
                s.generation = s.generation.wrapping_add(1);
                Permit::Probe {
                    generation: s.generation,
                }
            }
            _ => Permit::Reject,
        }
    }

    /// The call (or probe) that `permit` let through succeeded; `true` if this closed the
    /// breaker. Only the current probe closes it: a call let through before the breaker
    /// opened (or an earlier probe) answering within its deadline says Redis answered *then*,
    /// not that it recovered since.
    pub(crate) fn success(&self, now: u64, permit: Permit) -> bool {
        let mut s = self.inner.lock();
        match (s.state, permit) {
            (State::Closed, Permit::Call { generation }) if generation == s.generation => {
                s.consecutive = 0;
                self.count(&mut s, now, false);
                false
            }
            (State::HalfOpen { .. }, Permit::Probe { generation })
                if generation == s.generation =>
            {
                #[cfg(feature = "tracing")]
                tracing::info!(
                    target: "tollgate::redis",
                    event = "breaker_closed",
                    opened = s.opened,
                    "Redis answered a probe: circuit breaker closed, checks go to Redis again"
                );
                s.state = State::Closed;
                s.generation = s.generation.wrapping_add(1);
                s.window_start = now;
                s.calls = 0;
                s.failures = 0;
                s.consecutive = 0;
                self.count(&mut s, now, false);
                true
            }
            _ => false,
        }
    }

    /// The call failed or timed out; `permit` is what [`permit`](Self::permit) said for it.
    /// Only a failed current probe prolongs an open breaker (doubling the cool-down, up to the
    /// cap): calls that were already out when it opened fail late, and say nothing new; nor
    /// do they count against the next closed period.
    pub(crate) fn failure(&self, now: u64, permit: Permit) {
        let mut s = self.inner.lock();
        match (s.state, permit) {
            (State::Closed, Permit::Call { generation }) if generation == s.generation => {
                s.consecutive = s.consecutive.saturating_add(1);
                self.count(&mut s, now, true);
                let ratio_trips = s.calls >= self.config.min_calls
                    && f64::from(s.failures) >= self.config.ratio * f64::from(s.calls);
                if s.consecutive >= self.config.consecutive || ratio_trips {
                    self.open(&mut s, now, self.config.open_min);
                }
            }
            (State::HalfOpen { next, .. }, Permit::Probe { generation })
                if generation == s.generation =>
            {
                let next = next.saturating_mul(2).min(self.config.open_max);
                self.open(&mut s, now, next);
            }
            _ => {}
        }
    }

    /// How many times the breaker has opened.
    pub(crate) fn opened(&self) -> u64 {
        self.inner.lock().opened
    }

    /// An open (or half-open) breaker lets its next call through as a probe, whatever is left
    /// of its cool-down: the way to Redis changed (a fresh cluster connection), so what the
    /// last probe saw no longer says what the next will. Its cool-down length is kept.
    pub(crate) fn probe_now(&self, now: u64) {
        let mut s = self.inner.lock();
        match s.state {
            State::Open { next, .. } => s.state = State::Open { until: now, next },
            State::HalfOpen { next, .. } => s.state = State::HalfOpen { reprobe: now, next },
            State::Closed => {}
        }
    }

    /// `true` unless the breaker is closed.
    pub(crate) fn is_open(&self) -> bool {
        self.inner.lock().state != State::Closed
    }

    fn open(&self, s: &mut Inner, now: u64, cool: u64) {
        let was_closed = matches!(s.state, State::Closed);
        if was_closed {
            s.opened += 1;
        }
        let wait = jitter(&mut s.rng, cool);
        #[cfg(feature = "tracing")]
        if was_closed {
            tracing::warn!(
                target: "tollgate::redis",
                event = "breaker_opened",
                consecutive_failures = s.consecutive,
                window_calls = s.calls,
                window_failures = s.failures,
                cool_down_ms = wait / 1_000_000,
                "Redis failing: circuit breaker open, checks answered by the failure policy"
            );
        } else {
            tracing::info!(
                target: "tollgate::redis",
                event = "probe_failed",
                cool_down_ms = wait / 1_000_000,
                "Redis probe failed: circuit breaker stays open"
            );
        }
        s.state = State::Open {
            until: now.saturating_add(wait),
            next: cool,
        };
        s.generation = s.generation.wrapping_add(1);
        s.consecutive = 0;
    }

    fn count(&self, s: &mut Inner, now: u64, failed: bool) {
        if now.saturating_sub(s.window_start) >= self.config.window {
            s.window_start = now;
            s.calls = 0;
            s.failures = 0;
        }
        s.calls = s.calls.saturating_add(1);
        s.failures = s.failures.saturating_add(u32::from(failed));
    }
}

/// How many breakers a limiter in cluster mode has: one per range of
/// `16384 / BREAKER_RANGES` = 256 slots. Finer than a shard (a 3-master cluster splits at
/// slots 5461 and 10923, so 2 of the 64 ranges straddle two shards), coarse enough that a
/// range sees enough calls to judge its shard.
pub(crate) const BREAKER_RANGES: usize = 64;

/// The range of `slot` (`None`: one server, range 0), below [`BREAKER_RANGES`].
pub(crate) fn range_of(slot: Option<u16>) -> usize {
    let i = slot.map_or(0, |s| usize::from(s) * BREAKER_RANGES / usize::from(SLOTS));
    i.min(BREAKER_RANGES - 1)
}

/// The breakers of a limiter: one per slot range in cluster mode, so that one sick shard sends
/// only its own customers to the failure policy; one server uses the first alone.
#[derive(Debug)]
pub(crate) struct Breakers {
    ranges: Vec<Breaker>,
}

impl Breakers {
    pub(crate) fn new(config: BreakerConfig) -> Self {
        Self {
            ranges: (0..BREAKER_RANGES).map(|_| Breaker::new(config)).collect(),
        }
    }

    /// The breaker of `slot` (`None`: one server, the first breaker).
    pub(crate) fn of(&self, slot: Option<u16>) -> &Breaker {
        &self.ranges[range_of(slot)]
    }

    /// Every open breaker probes at its next call ([`Breaker::probe_now`]).
    pub(crate) fn probe_now(&self, now: u64) {
        for b in &self.ranges {
            b.probe_now(now);
        }
    }

    /// How many times any of them opened.
    pub(crate) fn opened(&self) -> u64 {
        self.ranges.iter().map(Breaker::opened).sum()
    }

    /// `true` while any of them is open or half-open.
    pub(crate) fn is_open(&self) -> bool {
        self.ranges.iter().any(Breaker::is_open)
    }

    /// How many are open or half-open.
    pub(crate) fn open_count(&self) -> usize {
        self.ranges.iter().filter(|b| b.is_open()).count()
    }
}

/// `d` scaled by a factor drawn uniformly from [0.5, 1.5) (xorshift64*; the seed is random
/// per breaker, so instances started together draw differently).
fn jitter(rng: &mut u64, d: u64) -> u64 {
    let mut x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11; // 53 random bits
    let f = 0.5 + (r as f64) / (1u64 << 53) as f64;
    // d ≤ u64::MAX and f < 1.5: the product may exceed u64, which `as` saturates.
    ((d as f64) * f) as u64
}

#[cfg(test)]
mod tests;
