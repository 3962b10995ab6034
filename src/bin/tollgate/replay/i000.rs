//! Incident 000: a limiter read a background-cached clock that lagged real time by up to
//! 45 s under load, denied legitimate traffic, and its fallback never engaged because a
//! flood of denials is not an error; then client SDKs retried at once.
//!
//! The model: customers each send one request every 20 s (± up to 4 s), on a per-customer quota of
//! `4/min;burst=1` (the incident's token bucket, sized close to use). From 08:17 the cached
//! clock is refreshed ever less often — the refresh gap ramps from 1 s to 45 s by 09:05 and
//! stays there until the rollback completes at 09:41 — so the limiter's clock stands still
//! between refreshes. At 10:15 the burst is raised 3× (the postmortem's emergency push).
//!
//! * **naive**: a keyed limiter on the cached clock, nothing watching it; clients retry at
//!   once, every second, up to 10 times. Its own alert is the gateway page (failures above
//!   10 % over a minute).
//! * **tollgate**: the same keyed limiter on the same faulty clock, with tollgate's defaults
//!   attached: a [`Watchdog`] against the reference clock, a [`FaultDetector`] (its baseline
//!   imported, as a deploy would carry it over) and a [`RetryBudget`]; clients use
//!   [`Backoff`] (3 retries, jittered).
//!
//! What the model leaves out: its clients give up after their retries, so it does not
//! reproduce the postmortem's 80-minute storm *after* the rollback (the real SDKs kept failed
//! work queued and replayed it); the retry share shows the load that retrying at once adds
//! while the fault lasts, against `Backoff` under a retry budget.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::safety::{Baseline, FaultDetector, FaultEvent, HourSample, Watchdog};
use tollgate::shaping::{Backoff, RetryBudget};
use tollgate::{KeyedRateLimiter, ManualClock, Quota, Verdict};

use super::report::{Incident, Run};
use super::sim::{Answer, Clients, Mark, Op, Recorder, RetryPolicy, MINUTE};
use super::ReplayError;

/// Seconds between two requests of one customer.
const PERIOD_S: u64 = 20;
/// The most a request leaves after its slot, in seconds.
const JITTER_S: u64 = 4;
/// A customer request not served within this has failed.
const DEADLINE_MS: u64 = 30_000;

/// The timeline, in minutes since the start (08:11), and the population.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeline {
    customers: u32,
    fault: u64,
    worst: u64,
    rolled_back: u64,
    burst_raised: u64,
    end: u64,
}

impl Timeline {
    /// The incident's own: 10,000 customers, 08:11 to 12:00.
    pub(crate) const FULL: Timeline = Timeline {
        customers: 10_000,
        fault: 6,
        worst: 54,
        rolled_back: 90,
        burst_raised: 124,
        end: 229,
    };
    /// A shortened one for tests: the same shape in 40 minutes, 2,000 customers.
    pub(crate) const SHORT: Timeline = Timeline {
        customers: 2_000,
        fault: 4,
        worst: 14,
        rolled_back: 24,
        burst_raised: 30,
        end: 40,
    };

    /// The cached clock's refresh gap at `t` ms (0: read per request).
    fn refresh_gap_ms(&self, t: u64) -> u64 {
        let (fault, worst, back) = (
            self.fault * MINUTE,
            self.worst * MINUTE,
            self.rolled_back * MINUTE,
        );
        if t < fault || t >= back {
            0
        } else if t < worst {
            1_000 + 44_000 * (t - fault) / (worst - fault)
        } else {
            45_000
        }
    }
}

/// The incident's limiter clock: real time, seen through a cache refreshed every gap.
struct CachedClock {
    real: ManualClock,
    seen: ManualClock,
    /// When the background refresh next runs, in ms since the start.
    next_refresh: std::cell::Cell<u64>,
}

impl CachedClock {
    fn new() -> CachedClock {
        let start = Duration::from_secs(3_600);
        CachedClock {
            real: ManualClock::at(start),
            seen: ManualClock::at(start),
            next_refresh: std::cell::Cell::new(0),
        }
    }

    /// Moves real time to `t` ms since the start; the cache is refreshed when its refresh
    /// is due, and the next refresh comes one gap later (the gap of that moment).
    fn set(&self, tl: &Timeline, t: u64) {
        let start = Duration::from_secs(3_600);
        self.real.set(start + Duration::from_millis(t));
        let gap = tl.refresh_gap_ms(t);
        if gap == 0 || t >= self.next_refresh.get() {
            self.seen.set(start + Duration::from_millis(t));
            self.next_refresh.set(t + gap);
        }
    }
}

fn quota(text: &str) -> Result<Quota, ReplayError> {
    text.parse()
        .map_err(|e| ReplayError::Model(format!("{text}: {e}")))
}

/// Customers grouped by the second (mod the period) they send in.
fn schedule(customers: u32, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = super::sim::Rng::new(seed);
    let mut groups = vec![Vec::new(); PERIOD_S as usize];
    for c in 0..customers {
        groups[rng.below(PERIOD_S) as usize].push(c);
    }
    groups
}

/// Runs one side through the timeline; `check` gives the verdict of one attempt at `t`.
fn drive(
    tl: &Timeline,
    seed: u64,
    clock: &CachedClock,
    mut clients: Clients,
    mut check: impl FnMut(u64, Op) -> Verdict,
    mut each_tick: impl FnMut(u64),
) -> Recorder {
    let groups = schedule(tl.customers, seed);
    let mut jitter = super::sim::Rng::new(seed ^ 0x0000_0000_6a17_7e55);
    // Each request leaves 0 to JITTER_S seconds after its slot, so consecutive requests of a
    // customer are 20 ± 4 s apart: always within the quota's 15 s, never in lockstep.
    let mut later: Vec<Vec<u32>> = vec![Vec::new(); JITTER_S as usize + 1];
    let mut rec = Recorder::new(tl.customers as usize);
    let mut due = Vec::new();
    for s in 0..tl.end * 60 {
        let t = s * 1000;
        clock.set(tl, t);
        each_tick(t);
        for &c in &groups[(s % PERIOD_S) as usize] {
            let j = jitter.below(JITTER_S + 1);
            later[((s + j) % (JITTER_S + 1)) as usize].push(c);
        }
        clients.due(t, &mut due);
        let now = std::mem::take(&mut later[(s % (JITTER_S + 1)) as usize]);
        let fresh = now.iter().map(|&key| Op {
            key,
            born: t,
            attempt: 0,
        });
        let batch: Vec<Op> = due.iter().copied().chain(fresh).collect();
        for op in batch {
            let answer = match check(t, op) {
                v if v.is_permitted() => Answer::Served,
                Verdict::Deny(d) => Answer::Denied(Some(d.retry_after())),
                _ => Answer::Lost,
            };
            clients.answer(&mut rec, t, op, answer);
        }
    }
    rec
}

/// The naive side.
fn naive(tl: &Timeline, seed: u64) -> Result<Run, ReplayError> {
    let clock = CachedClock::new();
    let lim = KeyedRateLimiter::<u32>::builder(quota("4/min;burst=1")?)
        .clock(clock.seen.clone())
        .max_keys(tl.customers as usize * 2)
        .build();
    let raised = quota("4/min;burst=3")?;
    let clients = Clients::new(
        RetryPolicy::Immediate {
            max: 10,
            gap_ms: 1_000,
        },
        DEADLINE_MS,
    );
    let mut marks = vec![
        Mark::new(
            tl.fault * MINUTE,
            "rl-2.14.0 at 100 %: clock cache starts lagging",
        ),
        Mark::new(tl.rolled_back * MINUTE, "rollback complete"),
        Mark::new(tl.burst_raised * MINUTE, "burst raised 3×"),
    ];
    let burst_at = tl.burst_raised * MINUTE;
    let rec = drive(
        tl,
        seed,
        &clock,
        clients,
        |_, op| lim.check_key(&op.key),
        |t| {
            if t == burst_at {
                lim.set_quota(raised);
            }
        },
    );
    let buckets = rec.finish();
    // The system's own alert: the gateway page, failures above 10 % over a minute.
    let page = buckets
        .iter()
        .position(|b| b.success_rate().is_some_and(|r| r < 0.9))
        .map(|i| (i as u64 + 1) * MINUTE);
    if let Some(at) = page {
        marks.push(Mark::new(at, "page: failures above 10 %"));
    }
    Ok(Run {
        label: "naive",
        setup: "token bucket on the cached clock, no fault detection; clients retry at once, \
                10 times"
            .to_owned(),
        buckets,
        marks,
        detected_at_ms: page,
        detected_by: "gateway page, failures > 10 %".to_owned(),
        ..Run::default()
    })
}

/// The tollgate side.
/// The tollgate side; `with_watchdog: false` leaves the fault to the detector alone.
fn tollgate(tl: &Timeline, seed: u64, with_watchdog: bool) -> Result<Run, ReplayError> {
    let clock = CachedClock::new();
    let normal = HourSample {
        breadth: 0.0,
        deny_ratio: 0.0,
        allowed_per_sec: f64::from(tl.customers) / PERIOD_S as f64,
    };
    let events: Arc<Mutex<Vec<(Duration, FaultEvent)>>> = Arc::default();
    let sink = Arc::clone(&events);
    let real = clock.real.clone();
    // The largest panel (65,536 keys) rather than the default 1,024: the panel's membership
    // hash is seeded per process, so a small sample would move the trip by a sub-bucket from
    // run to run; a panel far larger than the population keeps the replay repeatable.
    let detector = FaultDetector::builder()
        .clock(clock.real.clone())
        .panel_size(1 << 16)
        .baseline(Baseline::from_hours(1, std::iter::repeat_n(normal, 24)))
        .on_event(move |e| {
            if let Ok(mut v) = sink.lock() {
                v.push((real.now(), *e));
            }
        })
        .build();
    let watchdog = Watchdog::new(clock.seen.clone(), clock.real.clone());
    let builder = KeyedRateLimiter::<u32>::builder(quota("4/min;burst=1")?)
        .clock(clock.seen.clone())
        .max_keys(tl.customers as usize * 2)
        .detector(detector.clone())
        .retry_budget(RetryBudget::new());
    let lim = if with_watchdog {
        builder.watchdog(watchdog.clone()).build()
    } else {
        builder.build()
    };
    let backoff = Backoff::builder()
        .seed(seed)
        .build()
        .map_err(|e| ReplayError::Model(e.to_string()))?;
    let clients = Clients::new(RetryPolicy::Backoff(backoff), DEADLINE_MS);
    let mut marks = vec![Mark::new(
        tl.fault * MINUTE,
        "clock cache starts lagging (same fault)",
    )];
    let mut watchdog_at = None;
    let rec = drive(
        tl,
        seed,
        &clock,
        clients,
        |_, op| {
            lim.check_key_with(&op.key, tollgate::Check::cost(1).attempt(op.attempt))
                .unwrap_or_else(|_| lim.check_key(&op.key))
        },
        |t| {
            detector.tick();
            if watchdog_at.is_none() && watchdog.faults() > 0 {
                watchdog_at = Some(t);
            }
        },
    );
    let start = Duration::from_secs(3_600);
    let to_ms = |d: Duration| d.saturating_sub(start).as_millis() as u64;
    let mut trip = None;
    for (at, e) in events.lock().map(|v| v.clone()).unwrap_or_default() {
        let text = match e {
            FaultEvent::Tripped(_) => "detector tripped: pass-through",
            FaultEvent::Recovered(_) => "detector recovered: enforcing",
            _ => continue,
        };
        if matches!(e, FaultEvent::Tripped(_)) && trip.is_none() {
            trip = Some(to_ms(at));
        }
        marks.push(Mark::new(to_ms(at), text));
    }
    if let Some(at) = watchdog_at {
        let fault = watchdog
            .last_fault()
            .map_or("fault".to_owned(), |f| format!("{f:?}"));
        marks.push(Mark::new(
            at,
            format!("watchdog: clock {fault}, reference clock from here"),
        ));
    }
    let (detected_at_ms, detected_by) = match (watchdog_at, trip) {
        (Some(w), Some(d)) if d < w => (Some(d), "fault detector trip"),
        (Some(w), _) => (Some(w), "clock watchdog"),
        (None, Some(d)) => (Some(d), "fault detector trip"),
        (None, None) => (None, "no signal"),
    };
    Ok(Run {
        label: "tollgate",
        setup: "the same bucket on the same faulty clock, with Watchdog, FaultDetector and \
                RetryBudget; clients use Backoff"
            .to_owned(),
        buckets: rec.finish(),
        marks,
        detected_at_ms,
        detected_by: detected_by.to_owned(),
        ..Run::default()
    })
}

/// A note on the tollgate side without its watchdog: when the detector tripped, and the
/// wrongful denials until then.
fn tollgate_alone(tl: &Timeline, seed: u64) -> Result<String, ReplayError> {
    let run = tollgate(tl, seed, false)?;
    let row = run.row(tl.fault * MINUTE);
    let trip = run
        .marks
        .iter()
        .find(|m| m.text.starts_with("detector tripped"))
        .map(|m| m.at_secs * 1000.0);
    Ok(match trip {
        Some(at) => format!(
            "without the watchdog, the fault detector alone trips at {} ({} after the fault began; \
             deny breadth far above its baseline): {} wrongful-denial minutes, {:.1} % of \
             customer requests failed",
            super::report::clock_label(8 * 3600 + 11 * 60, at as u64),
            super::report::secs(at / 1000.0 - (tl.fault * 60) as f64),
            row.wrongful_denial_minutes,
            row.customer_requests_failed * 100.0
        ),
        None => format!(
            "without the watchdog, the fault detector does not trip: {} wrongful-denial minutes",
            row.wrongful_denial_minutes
        ),
    })
}

/// Replays incident 000.
pub(crate) fn replay(tl: &Timeline, seed: u64) -> Result<Incident, ReplayError> {
    let naive = naive(tl, seed)?;
    let tollgate = tollgate(tl, seed, true)?;
    // The same run with the watchdog left off: what the fault detector does on its own.
    let alone = tollgate_alone(tl, seed)?;
    let notes = vec![
        alone,
        format!(
            "{} customers, one request each every {PERIOD_S} s, quota 4/min;burst=1 per customer",
            tl.customers
        ),
        "fault: the cached clock's refresh gap ramps from 1 s to 45 s, then holds until the \
         rollback"
            .to_owned(),
    ];
    Ok(Incident::new(
        (
            "000",
            "a lagging cached clock, and clients retrying at once",
            "an API gateway's limiter on a cached clock 45 s behind: a SEV-1 of 3 h 42 min",
        ),
        (8 * 3600 + 11 * 60, tl.fault * MINUTE, seed),
        notes,
        naive,
        tollgate,
        |n, t| {
            format!(
                "tollgate saw the clock fault {} after it began ({}) and wrongly denied for {} \
                 min against the naive limiter's {} min; customer failures {:.1} % vs {:.1} %, \
                 retries {:.1} % vs {:.1} % of load",
                t.time_to_detect_secs
                    .map_or("never".to_owned(), super::report::secs),
                t.detected_by,
                t.wrongful_denial_minutes,
                n.wrongful_denial_minutes,
                t.customer_requests_failed * 100.0,
                n.customer_requests_failed * 100.0,
                t.retry_share_of_load * 100.0,
                n.retry_share_of_load * 100.0,
            )
        },
    ))
}
