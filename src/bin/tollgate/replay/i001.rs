//! Incident 001: a config push meant to tighten a free-tier category edited the paid
//! checkout policy instead and dropped the unit, so `10/s` became `10/min` for the ~14 % of
//! paying customers' traffic that goes through checkout, for 38 minutes, while dashboards
//! stayed green (a 429 is not an error to them).
//!
//! The model: paying customers each send one checkout request every 2 s (14 % of their
//! traffic); the other 86 % goes through policies the push did not touch and is counted as
//! served. Half of the incident's clients retry at once (every second, up to 10 times), half
//! honour `Retry-After` (up to 3 times); a checkout not served within 30 s has failed.
//!
//! * **naive**: the pushed value applied as parsed (`10` read as 10/min) to every customer at
//!   13:17:30, rolled back at 13:55.
//! * **tollgate**: the typo'd document is rejected by validation; the same change with its
//!   unit is rejected by the guard unless acknowledged; acknowledged, it goes out through a
//!   [`Rollout`] (1 % → 10 % → 100 %), whose comparison halts and reverts it. Clients use
//!   [`Backoff`]. A [`SuccessRate`] (429 = failure) watches both sides.

use std::time::Duration;

use tollgate::limits::{Limits, Rollout, RolloutState};
use tollgate::safety::SuccessRate;
use tollgate::shaping::Backoff;
use tollgate::{Check, KeyedRateLimiter, ManualClock, Verdict};

use super::report::{secs, Incident, Run};
use super::sim::{Answer, Clients, Mark, Op, Recorder, RetryPolicy, Rng, MINUTE};
use super::ReplayError;

const DEADLINE_MS: u64 = 30_000;
/// Seconds between two checkout requests of one customer.
const PERIOD_S: u64 = 2;
/// Checkout's share of paying customers' traffic.
const CHECKOUT_SHARE: f64 = 0.14;

/// The document in force before the push.
const OLD: &str = r#"schema = 1
revision = 41
tiers = ["free", "paid"]
categories = ["checkout", "search"]

[[policies]]
name = "free-search"
match = { tier = "free", category = "search" }
quota = "100/s"

[[policies]]
name = "paid-checkout"
match = { tier = "paid", category = "checkout" }
quota = "10/s"
"#;

/// What was pushed: the edit landed on the paid policy, and the unit went missing.
const TYPO: &str = r#"schema: 1
revision: 42
tiers: [free, paid]
categories: [checkout, search]
policies:
  - name: free-search
    match: { tier: free, category: search }
    quota: 100/s
  - name: paid-checkout
    match: { tier: paid, category: checkout }
    quota: 10
"#;

/// The acknowledgement that lets the 60× tightening through the guard.
const ACK: &str =
    "\n[[acknowledge]]\npolicy = \"paid-checkout\"\nfrom = \"10/s\"\nto = \"10/min\"\n";

#[derive(Clone, Copy, Debug)]
struct Timeline {
    customers: u32,
    /// Minutes since 13:07, in ms.
    push_ms: u64,
    rollback_ms: u64,
    end_ms: u64,
}

impl Timeline {
    fn new(short: bool) -> Timeline {
        if short {
            Timeline {
                customers: 2_000,
                push_ms: 5 * MINUTE + 30_000,
                rollback_ms: 16 * MINUTE,
                end_ms: 20 * MINUTE,
            }
        } else {
            Timeline {
                customers: 2_000,
                push_ms: 10 * MINUTE + 30_000,
                rollback_ms: 48 * MINUTE,
                end_ms: 60 * MINUTE,
            }
        }
    }
}

fn key(i: u32) -> String {
    format!("customer-{i:04}")
}

fn model(e: impl std::fmt::Display) -> ReplayError {
    ReplayError::Model(e.to_string())
}

/// One side: the check, the clients, and the success-rate tracker both sides share.
struct Side<'a> {
    clock: &'a ManualClock,
    slo: SuccessRate,
    keys: Vec<String>,
}

impl Side<'_> {
    /// Runs the timeline; `check` judges one checkout attempt.
    fn drive(
        &self,
        tl: &Timeline,
        seed: u64,
        mut clients: impl FnMut(u32) -> usize,
        policies: &mut [Clients],
        mut check: impl FnMut(&str, Op) -> Option<Verdict>,
        mut each_tick: impl FnMut(u64),
    ) -> Recorder {
        let mut rng = Rng::new(seed);
        let offsets: Vec<u64> = (0..tl.customers).map(|_| rng.below(PERIOD_S)).collect();
        let other_per_s = (f64::from(tl.customers) / PERIOD_S as f64 * (1.0 - CHECKOUT_SHARE)
            / CHECKOUT_SHARE)
            .round() as u64;
        let start = self.clock.now();
        let mut rec = Recorder::new(tl.customers as usize);
        let mut due = Vec::new();
        for s in 0..tl.end_ms / 1000 {
            let t = s * 1000;
            self.clock.set(start + Duration::from_millis(t));
            each_tick(t);
            let mut batch = Vec::new();
            for p in policies.iter_mut() {
                p.due(t, &mut due);
                batch.extend(due.iter().copied());
            }
            batch.extend(
                (0..tl.customers)
                    .filter(|&c| (s + offsets[c as usize]) % PERIOD_S == 0)
                    .map(|key| Op {
                        key,
                        born: t,
                        attempt: 0,
                    }),
            );
            for op in batch {
                let v = check(&self.keys[op.key as usize], op);
                let answer = match v {
                    Some(v) if v.is_permitted() => Answer::Served,
                    Some(Verdict::Deny(d)) => Answer::Denied(Some(d.retry_after())),
                    _ => Answer::Lost,
                };
                self.slo
                    .record("paid", if answer.permitted() { 200 } else { 429 });
                policies[clients(op.key)].answer(&mut rec, t, op, answer);
            }
            // The other 86 %: unaffected by either document, served.
            rec.finished(t, other_per_s, 0);
            for _ in 0..other_per_s {
                self.slo.record("paid", 200);
            }
        }
        rec
    }

    /// When the success-rate alert fired, in ms since the start.
    fn slo_alert(&self, start: Duration) -> Option<u64> {
        self.slo.tick();
        self.slo
            .poll_alerts()
            .first()
            .map(|a| a.at().saturating_sub(start).as_millis() as u64)
    }
}

fn side<'a>(clock: &'a ManualClock, tl: &Timeline) -> Result<Side<'a>, ReplayError> {
    Ok(Side {
        clock,
        slo: SuccessRate::builder()
            .tiers(["paid"])
            .clock(clock.clone())
            .build()
            .map_err(model)?,
        keys: (0..tl.customers).map(key).collect(),
    })
}

/// The incident's clients: half retry at once, half honour `Retry-After`.
fn incident_clients() -> Vec<Clients> {
    vec![
        Clients::new(
            RetryPolicy::Immediate {
                max: 10,
                gap_ms: 1_000,
            },
            DEADLINE_MS,
        ),
        Clients::new(
            RetryPolicy::RetryAfter {
                max: 3,
                gap_ms: 1_000,
            },
            DEADLINE_MS,
        ),
    ]
}

fn naive(tl: &Timeline, seed: u64) -> Result<(Run, Option<u64>), ReplayError> {
    let start = Duration::from_secs(3_600);
    let clock = ManualClock::at(start);
    let s = side(&clock, tl)?;
    let lim = KeyedRateLimiter::<String>::builder("10/s".parse().map_err(model)?)
        .clock(clock.clone())
        .build();
    let (pushed, back) = (
        "10/min".parse().map_err(model)?,
        "10/s".parse().map_err(model)?,
    );
    let mut clients = incident_clients();
    let rec = s.drive(
        tl,
        seed,
        |k| (k % 2) as usize,
        &mut clients,
        |k, _| Some(lim.check_key(k)),
        |t| {
            if t == tl.push_ms {
                lim.set_quota(pushed);
            } else if t == tl.rollback_ms {
                lim.set_quota(back);
            }
        },
    );
    let alert = s.slo_alert(start);
    let mut marks = vec![
        Mark::new(tl.push_ms, "push: \"10\" read as 10/min on paid checkout"),
        Mark::new(tl.rollback_ms, "rollback"),
    ];
    if let Some(at) = alert {
        marks.push(Mark::new(at, "SuccessRate would page here"));
    }
    let run = Run {
        label: "naive",
        setup: "the pushed value applied as parsed to every customer; half the clients retry \
                at once"
            .to_owned(),
        buckets: rec.finish(),
        marks,
        detected_at_ms: None,
        detected_by: "429s are not errors to its metrics; support found it in 24 min".to_owned(),
        ..Run::default()
    };
    Ok((run, alert))
}

fn tollgate(
    tl: &Timeline,
    seed: u64,
    notes: &mut Vec<String>,
) -> Result<(Run, Option<u64>), ReplayError> {
    let old = Limits::from_toml(OLD).map_err(model)?;
    // 1. The document as pushed: validation rejects it.
    match Limits::from_yaml(TYPO) {
        Ok(_) => return Err(model("the typo'd document was accepted")),
        Err(errors) => {
            for e in errors.iter() {
                notes.push(format!("pushed document rejected by validation: {e}"));
            }
        }
    }
    // 2. The unit written, 60× tighter, not acknowledged: the guard refuses it.
    let tighter = OLD
        .replace("revision = 41", "revision = 42")
        .replace("quota = \"10/s\"", "quota = \"10/min\"");
    let unacked = Limits::from_toml(&tighter).map_err(model)?;
    let diff = Limits::diff(&old, &unacked);
    notes.push(format!("diff: {}", diff.to_string().trim()));
    match Limits::check_transition(&old, &unacked, Limits::DEFAULT_GUARD) {
        Ok(_) => return Err(model("the unacknowledged tightening was accepted")),
        Err(errors) => {
            for e in errors.iter() {
                notes.push(format!("unacknowledged, refused: {e}"));
            }
        }
    }
    // 3. Acknowledged: it ships through a staged rollout.
    let new = Limits::from_toml(&format!("{tighter}{ACK}")).map_err(model)?;
    let start = Duration::from_secs(3_600);
    let clock = ManualClock::at(start);
    let s = side(&clock, tl)?;
    let rollout: std::cell::OnceCell<Rollout> = std::cell::OnceCell::new();
    let mut unshipped = Some((old.clone(), new));
    let steady = tollgate::limits::LimitsHandle::builder(old)
        .clock(clock.clone())
        .build();
    let backoff = Backoff::builder().seed(seed).build().map_err(model)?;
    let mut clients = vec![Clients::new(RetryPolicy::Backoff(backoff), DEADLINE_MS)];
    let mut first_error = None;
    let rec = s.drive(
        tl,
        seed,
        |_| 0,
        &mut clients,
        |k, op| {
            let check = Check::cost(1).attempt(op.attempt);
            let d = match rollout.get() {
                Some(r) => r.check("paid", "checkout", "/v1/checkout", k, check),
                None => steady.check("paid", "checkout", "/v1/checkout", k, check),
            };
            match d {
                Ok(d) => Some(d.verdict()),
                Err(e) => {
                    first_error.get_or_insert_with(|| e.to_string());
                    None
                }
            }
        },
        |t| {
            if t == tl.push_ms {
                if let Some((o, n)) = unshipped.take() {
                    if let Ok(r) = Rollout::new(o, n, clock.clone()) {
                        let _ = rollout.set(r);
                    }
                }
            }
        },
    );
    if let Some(e) = first_error {
        return Err(model(e));
    }
    let rollout = rollout
        .into_inner()
        .ok_or_else(|| model("the acknowledged rollout was refused"))?;
    let to_ms = |d: Duration| d.saturating_sub(start).as_millis() as u64;
    let mut marks = vec![];
    let mut halted = None;
    for e in rollout.events() {
        match e {
            RolloutState::Staged {
                basis_points,
                since,
                ..
            } => marks.push(Mark::new(
                to_ms(since),
                format!("rollout stage: {} %", f64::from(basis_points) / 100.0),
            )),
            RolloutState::Halted {
                at,
                basis_points,
                reverted,
                reason,
                cohort_breadth,
                control_breadth,
                ..
            } => {
                halted.get_or_insert(to_ms(at));
                marks.push(Mark::new(
                    to_ms(at),
                    format!(
                        "rollout halted at {} %{}",
                        f64::from(basis_points) / 100.0,
                        if reverted { ", reverted" } else { "" }
                    ),
                ));
                notes.push(format!(
                    "acknowledged, rolled out: halted at {} % {} after the push{}: cohort breadth {:.0} %, control {:.0} % ({reason})",
                    f64::from(basis_points) / 100.0,
                    secs(to_ms(at).saturating_sub(tl.push_ms) as f64 / 1000.0),
                    if reverted { " and reverted" } else { "" },
                    cohort_breadth * 100.0,
                    control_breadth * 100.0,
                ));
            }
            RolloutState::Complete { since } => {
                marks.push(Mark::new(to_ms(since), "rollout complete"));
            }
            _ => {}
        }
    }
    let alert = s.slo_alert(start);
    if let Some(at) = alert {
        marks.push(Mark::new(at, "SuccessRate paged"));
    }
    let (detected_at_ms, detected_by) = match (halted, alert) {
        (Some(h), Some(a)) if a < h => (Some(a), "SuccessRate alert"),
        (Some(h), _) => (Some(h), "rollout comparison halted it"),
        (None, Some(a)) => (Some(a), "SuccessRate alert"),
        (None, None) => (None, "no signal"),
    };
    let run = Run {
        label: "tollgate",
        setup: "validation, the tightening guard, a staged Rollout (1 %, 10 %, 100 %); \
                clients use Backoff"
            .to_owned(),
        buckets: rec.finish(),
        marks,
        detected_at_ms,
        detected_by: detected_by.to_owned(),
        ..Run::default()
    };
    Ok((run, alert))
}

/// Replays incident 001.
pub(crate) fn replay(short: bool, seed: u64) -> Result<Incident, ReplayError> {
    let tl = Timeline::new(short);
    let mut notes = vec![format!(
        "{} paying customers, one checkout request each every {PERIOD_S} s (14 % of their \
         traffic; the rest is unaffected and counted as served)",
        tl.customers
    )];
    let (naive, naive_alert) = naive(&tl, seed)?;
    let (tollgate, tollgate_alert) = tollgate(&tl, seed, &mut notes)?;
    let day = 13 * 3600 + 7 * 60;
    let when = |a: Option<u64>| match a {
        Some(at) => format!(
            "fires at {} ({} after the push)",
            super::report::clock_label(day, at),
            secs(at.saturating_sub(tl.push_ms) as f64 / 1000.0)
        ),
        None => "does not fire".to_owned(),
    };
    notes.push(format!(
        "SuccessRate (429 = failure, 2 pp in 60 s): on the naive push it {}; under the rollout \
         it {}",
        when(naive_alert),
        when(tollgate_alert)
    ));
    Ok(Incident::new(
        (
            "001",
            "the unit dropped and the wrong policy edited",
            "a payments API's paid checkout capped for 38 min by a config typo",
        ),
        (day, tl.push_ms, seed),
        notes,
        naive,
        tollgate,
        |n, t| {
            format!(
                "validation rejects the pushed document outright; shipped with its unit and \
                 acknowledged, the rollout caught it in {} — {} wrongful-denial minutes and \
                 {:.2} % of customer requests failed, against {} minutes and {:.2} % for the \
                 naive push",
                t.time_to_detect_secs.map_or("never".to_owned(), secs),
                t.wrongful_denial_minutes,
                t.customer_requests_failed * 100.0,
                n.wrongful_denial_minutes,
                n.customer_requests_failed * 100.0,
            )
        },
    ))
}
