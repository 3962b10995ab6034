//! The clock watchdog: notices when the fast clock stalls, lags or steps backwards, by
//! comparing its rate with an independent reference clock.
//!
//! It runs every N checks (or from an opt-in thread), never on the fast clock's own time: a
//! stalled clock would never reach a deadline measured on itself. It compares *rates* over
//! short spans (≤ 10 s by default), because a cumulative comparison false-trips on ordinary
//! TSC drift. On a divergence the limiter passes traffic through with
//! [`PassReason::ClockFault`](crate::PassReason::ClockFault) for one window, reads the
//! reference clock from then on (mapped into the same epoch, so the TAT clamp keeps the switch
//! safe), and enforces again.

use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use crate::sync::Mutex;

use crate::engine::clock::{saturating_nanos, Clock};

/// What the watchdog saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClockFault {
    /// The fast clock did not move while the reference did.
    Stalled,
    /// The fast clock ran slower (or faster) than the reference beyond the tolerance.
    Diverged,
    /// The fast clock stepped backwards.
    SteppedBack,
}

/// Watches a fast clock against a reference clock.
///
/// ```
/// use std::time::Duration;
/// use tollgate::ManualClock;
/// use tollgate::safety::{ClockFault, Watchdog};
///
/// let (fast, reference) = (ManualClock::new(), ManualClock::new());
/// let dog = Watchdog::new(fast.clone(), reference.clone());
/// assert_eq!(dog.sample(), None); // the first sample only records
/// reference.advance(Duration::from_secs(2)); // the fast clock stalls
/// assert_eq!(dog.sample(), Some(ClockFault::Stalled));
/// assert!(dog.is_faulted() && dog.is_switched());
/// ```
#[derive(Clone)]
pub struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    fast: Clock,
    reference: Clock,
    /// Read on every check: `true` once the limiter must read the reference clock.
    switched: AtomicBool,
    /// Read on every check: when the pass-through window after the last fault ends, on the
    /// reference clock (0: no fault yet). A check compares its own reading with it, so the
    /// window ends on time whether or not anything samples.
    fault_until: AtomicU64,
    faults: AtomicU64,
    every: u32,
    tolerance: f64,
    min_span: u64,
    window: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    last: Option<(u64, u64)>,
    last_fault: Option<ClockFault>,
}

impl Watchdog {
    /// A watchdog of `fast` (the clock limiters read) against `reference` (in production
    /// [`Clock::os`]; in tests another [`ManualClock`](crate::ManualClock)).
    ///
    /// Defaults: a sample every 1024 checks per thread, spans of 1 s to 10 s, a tolerance of
    /// 5 % (TSC drift is a few parts per million), a pass-through window of 10 s.
    pub fn new(fast: impl Into<Clock>, reference: impl Into<Clock>) -> Self {
        Self::with(
            fast.into(),
            reference.into(),
            1024,
            0.05,
            Duration::from_secs(1),
            Duration::from_secs(10),
        )
    }

    /// The same clocks with other settings: `every` checks per thread between samples (rounded
    /// up to a power of two), the rate `tolerance` (e.g. 0.05), the shortest span compared
    /// (`min_span`), and the pass-through `window` after a fault (also the longest span
    /// compared).
    pub fn with(
        fast: Clock,
        reference: Clock,
        every: u32,
        tolerance: f64,
        min_span: Duration,
        window: Duration,
    ) -> Self {
        let tolerance = if tolerance.is_finite() {
            tolerance.clamp(0.001, 0.9)
        } else {
            0.05
        };
        Self {
            shared: Arc::new(Shared {
                fast,
                reference,
                switched: AtomicBool::new(false),
                fault_until: AtomicU64::new(0),
                faults: AtomicU64::new(0),
                every: every.max(1).next_power_of_two(),
                tolerance,
                min_span: saturating_nanos(min_span).max(1),
                window: saturating_nanos(window).max(1),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Compares the clocks' rates since the last sample, if at least the shortest span has
    /// passed on the reference. Returns the fault seen, if any. Limiters call this every N
    /// checks; call it from a thread of your own for idle limiters.
    pub fn sample(&self) -> Option<ClockFault> {
        let sh = &*self.shared;
        let mut st = sh.state.lock();
        let (fast, reference) = (sh.fast.raw_nanos(), sh.reference.now_nanos());
        if sh.switched.load(Ordering::Relaxed) {
            // The fast clock is no longer read: nothing it does can be a new fault.
            return None;
        }
        let Some((last_fast, last_ref)) = st.last else {
            st.last = Some((fast, reference));
            return None;
        };
        let span = reference.saturating_sub(last_ref);
        if span < sh.min_span && fast >= last_fast {
            return None;
        }
        st.last = Some((fast, reference));
        let fault = if fast < last_fast {
            Some(ClockFault::SteppedBack)
        } else {
            let rate = (fast - last_fast) as f64 / span.max(1) as f64;
            if rate == 0.0 {
                Some(ClockFault::Stalled)
            } else if (rate - 1.0).abs() > sh.tolerance {
                Some(ClockFault::Diverged)
            } else {
                None
            }
        };
        if let Some(f) = fault {
            st.last_fault = Some(f);
            sh.faults.fetch_add(1, Ordering::Relaxed);
            // Release: nothing else to publish, but keep the two words ordered for readers.
            sh.fault_until
                .store(reference.saturating_add(sh.window), Ordering::Release);
            sh.switched.store(true, Ordering::Release);
            #[cfg(feature = "tracing")]
            tracing::error!(
                target: "tollgate::watchdog",
                fault = ?f,
                fast_elapsed_ns = fast.wrapping_sub(last_fast),
                reference_elapsed_ns = span,
                pass_through_secs = Duration::from_nanos(sh.window).as_secs_f64(),
                "clock fault: passing traffic through, then enforcing on the reference clock"
            );
        }
        fault
    }

    /// Samples every `interval` from a thread of its own (opt-in), for limiters that may sit
    /// idle: without checks, nothing else samples. The thread stops when the handle is
    /// dropped.
    pub fn spawn_sampler(&self, interval: Duration) -> WatchdogSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (dog, flag) = (self.clone(), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("tollgate-watchdog".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    let _ = dog.sample();
                    std::thread::park_timeout(interval);
                }
            })
            .ok();
        WatchdogSampler { stop, thread }
    }

    /// `true` while in the pass-through window after a fault. The window ends on time, on
    /// the reference clock, whether or not anything samples.
    pub fn is_faulted(&self) -> bool {
        self.is_faulted_at(self.shared.reference.now_nanos())
    }

    /// [`is_faulted`](Self::is_faulted) at `now`, a reading of the reference clock (the
    /// clock a limiter reads after a fault): one load, nothing written, so the window ends
    /// at its instant whatever the traffic.
    #[inline]
    pub(crate) fn is_faulted_at(&self, now: u64) -> bool {
        now < self.shared.fault_until.load(Ordering::Relaxed)
    }

    /// `true` once a fault made the limiter read the reference clock.
    pub fn is_switched(&self) -> bool {
        self.shared.switched.load(Ordering::Relaxed)
    }

    /// Faults seen so far.
    pub fn faults(&self) -> u64 {
        self.shared.faults.load(Ordering::Relaxed)
    }

    /// The last fault seen.
    pub fn last_fault(&self) -> Option<ClockFault> {
        self.shared.state.lock().last_fault
    }

    /// Goes back to the fast clock (after the fast clock was repaired).
    pub fn reset(&self) {
        let mut st = self.shared.state.lock();
        st.last = None;
        self.shared.switched.store(false, Ordering::Relaxed);
        self.shared.fault_until.store(0, Ordering::Relaxed);
    }

    /// The reading a limiter uses: the fast clock, or the reference once switched.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        if self.shared.switched.load(Ordering::Relaxed) {
            self.shared.reference.now_nanos()
        } else {
            self.shared.fast.now_nanos()
        }
    }

    /// Called on every check: samples every N checks on this thread.
    #[inline]
    pub(crate) fn on_check(&self) {
        if crate::engine::stats::tick(crate::engine::stats::Ticker::Watchdog, self.shared.every) {
            self.sample_cold();
        }
    }

    #[cold]
    fn sample_cold(&self) {
        let _ = self.sample();
    }
}

impl fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watchdog")
            .field("faulted", &self.is_faulted())
            .field("switched", &self.is_switched())
            .field("faults", &self.faults())
            .finish_non_exhaustive()
    }
}

/// The handle of a [`Watchdog::spawn_sampler`] thread: dropping it stops the thread.
#[derive(Debug)]
pub struct WatchdogSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WatchdogSampler {
    /// `false` if the thread could not be spawned (the system refused it).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for WatchdogSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
