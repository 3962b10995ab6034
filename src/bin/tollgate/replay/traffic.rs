//! `tollgate replay --traffic FILE… --limits OLD [--against NEW]`: access logs replayed
//! against limits documents in simulated time, streaming, in bounded memory.
//!
//! Each side (OLD, and NEW if given) is a [`LimitsHandle`] on one `ManualClock` that follows
//! the log's timestamps, checking every policy that applies to a request
//! ([`LimitsHandle::check_all`]). With NEW, the same requests also go through a [`Rollout`]
//! from OLD to NEW (as it would have run from the log's first line) and NEW's verdicts are
//! fed to a [`FaultDetector`] whose baseline is OLD's run, for its verdict.
//!
//! Memory: the limiters keep at most `max_keys` keys each (the library's bound); the tallies
//! keep at most `MAX_EVER_DENIED` key hashes, `MAX_HARDEST` denied keys by name and
//! `MAX_MINUTE_KEYS` keys per minute; minutes past `MAX_MINUTES` after the first line are
//! bad lines. Beyond a cap, counts say "at least".

use std::path::Path;
use std::time::Duration;

use tollgate::{
    Check, FaultDetector, Limits, LimitsHandle, ManualClock, Rollout, Verdict, DEFAULT_GUARD,
};

use super::sim::MINUTE;
use super::{ReplayArgs, ReplayError};
use crate::load::Loaded;
use crate::{Output, OutputFormat, Status};

mod compare;
mod gate;
mod generate;
mod input;
mod merge;
mod output;
mod parse;
mod tally;
mod time;

use compare::{compare, detector, rollout_marks, Events};
use gate::Gate;
pub(crate) use gate::{parse_threshold, Threshold};
pub(crate) use generate::generate;
use merge::{Item, Merge};
use output::{human, peak_rss_kib, write_charts, Report, ShownBad};
use parse::{BadLine, Record};
use tally::{key_hash, Customers, Tally, MAX_MINUTES};

pub(crate) use output::HELP;

/// Bad lines listed by number (all are counted).
const SHOWN_BAD: usize = 20;
/// A line at most this much earlier than the latest is replayed at the latest.
const REORDER_MS: i64 = 1_000;

/// One document replayed.
struct Side {
    name: &'static str,
    file: String,
    limits: Limits,
    handle: LimitsHandle,
    tally: Tally,
}

impl Side {
    fn check(&mut self, minute: usize, rec: &Record, hash: u64) -> Option<Verdict> {
        let policy = self.limits.resolve(&rec.tier, &rec.category, &rec.route);
        let cost = match policy {
            Some(p) if p.quota().is_bytes() => rec.bytes.unwrap_or(1).max(1),
            _ => 1,
        };
        let check = Check::cost(cost).attempt(rec.attempt);
        match self
            .handle
            .check_all(&rec.tier, &rec.category, &rec.route, &rec.key, check)
        {
            Ok(d) => {
                self.tally.decision(minute, &rec.key, hash, &d);
                d.policy().map(|_| d.verdict())
            }
            Err(_) => {
                let name = policy.map(|p| p.name());
                self.tally.oversized(minute, &rec.key, hash, name);
                None
            }
        }
    }
}

/// Loads a limits document: a file that cannot be read is a usage error (exit 2), an
/// invalid document a rejected one (exit 1), each problem named once with its file.
fn load(path: &Path) -> Result<Limits, ReplayError> {
    let options = crate::Options {
        format: OutputFormat::Human,
        input_format: None,
    };
    let file = crate::shown(path);
    match crate::load::load(path, &options) {
        Loaded::Valid(limits) => Ok(limits),
        Loaded::Unusable(problem) => Err(ReplayError::Io(problem.message)),
        Loaded::Invalid(problems, more) => {
            let mut list: Vec<String> = problems.iter().map(|p| p.human(&file)).collect();
            if more > 0 {
                list.push(format!("{file}: … and {more} more errors"));
            }
            Err(ReplayError::Input(list.join("\n")))
        }
    }
}

/// Verdicts of NEW kept for the detector until OLD's first minute gives it a baseline; past
/// this many, the detector is built on what OLD has seen so far.
const MAX_HELD_VERDICTS: usize = 100_000;

/// A traffic replay in progress.
struct Replay {
    start: Duration,
    clock: ManualClock,
    sides: Vec<Side>,
    rollout: Option<Rollout>,
    rollout_tally: Tally,
    files: Vec<String>,
    bad: Vec<ShownBad>,
    bad_count: u64,
    requests: u64,
    customers: Customers,
    first: Option<i64>,
    latest: i64,
    held: Vec<(String, Verdict)>,
    detector: Option<(FaultDetector, Events)>,
}

impl Replay {
    fn new(limits: &Path, against: Option<&Path>) -> Result<Replay, ReplayError> {
        let start = Duration::from_secs(3_600);
        let clock = ManualClock::at(start);
        let side = |name, path: &Path| -> Result<Side, ReplayError> {
            let limits = load(path)?;
            Ok(Side {
                name,
                file: path.display().to_string(),
                handle: LimitsHandle::builder(limits.clone())
                    .clock(clock.clone())
                    .build(),
                limits,
                tally: Tally::default(),
            })
        };
        let mut sides = vec![side("old", limits)?];
        if let Some(new) = against {
            sides.push(side("new", new)?);
        }
        // The rollout runs even when the guard refuses the transition (with the guard
        // lifted): what it would have done, had the tightening been acknowledged.
        let rollout = match &sides[..] {
            [old, new] => Rollout::builder(old.limits.clone(), new.limits.clone())
                .clock(clock.clone())
                .guard(f64::MAX)
                .build()
                .ok(),
            _ => None,
        };
        Ok(Replay {
            start,
            clock,
            sides,
            rollout,
            rollout_tally: Tally::default(),
            files: Vec::new(),
            bad: Vec::new(),
            bad_count: 0,
            requests: 0,
            customers: Customers::default(),
            first: None,
            latest: i64::MIN,
            held: Vec::new(),
            detector: None,
        })
    }

    fn bad_line(&mut self, file: usize, b: BadLine) {
        self.bad_count += 1;
        if self.bad.len() < SHOWN_BAD {
            self.bad.push(ShownBad {
                file: self.files.get(file).cloned().unwrap_or_default(),
                line: b.line,
                message: b.message,
            });
        }
    }

    /// The time a record is replayed at (never before the latest line: logs merged from
    /// several frontends jitter), or why it cannot be replayed where it stands.
    fn place(&self, rec: &Record) -> Result<i64, String> {
        let Some(first) = self.first else {
            return Ok(rec.t_ms);
        };
        if rec.t_ms < self.latest.saturating_sub(REORDER_MS) {
            return Err(format!(
                "out of time order: {} ms before an earlier line",
                self.latest.saturating_sub(rec.t_ms)
            ));
        }
        let t = rec.t_ms.max(self.latest);
        if (t - first) as u64 / MINUTE >= MAX_MINUTES {
            return Err(format!(
                "more than {MAX_MINUTES} minutes after the first line"
            ));
        }
        Ok(t)
    }

    /// Replays one record read from `line` of log `file`.
    fn feed(&mut self, file: usize, line: u64, rec: &Record) {
        let t = match self.place(rec) {
            Ok(t) => t,
            Err(message) => return self.bad_line(file, BadLine { line, message }),
        };
        let first = *self.first.get_or_insert(t);
        self.latest = t;
        let since = (t - first) as u64;
        self.clock.set(self.start + Duration::from_millis(since));
        let minute = (since / MINUTE) as usize;
        let hash = key_hash(&rec.key);
        self.requests += 1;
        self.customers.insert(hash);
        for i in 0..self.sides.len() {
            let verdict = self.sides[i].check(minute, rec, hash);
            if let (1, Some(v)) = (i, verdict) {
                match &self.detector {
                    Some((d, _)) => d.record_key(&rec.key, &v),
                    None => self.held.push((rec.key.clone(), v)),
                }
            }
        }
        if let Some(r) = &self.rollout {
            let check = Check::cost(1).attempt(rec.attempt);
            if let Ok(d) = r.check_all(&rec.tier, &rec.category, &rec.route, &rec.key, check) {
                self.rollout_tally.decision(minute, &rec.key, hash, &d);
            }
        }
        if self.detector.is_none()
            && self.sides.len() == 2
            && (since >= MINUTE || self.held.len() >= MAX_HELD_VERDICTS)
        {
            self.start_detector(since);
        }
    }

    /// Builds the detector on what OLD has seen so far and feeds it NEW's held verdicts.
    fn start_detector(&mut self, span_ms: u64) {
        let old = &self.sides[0];
        let d = detector(
            &old.tally,
            span_ms.max(1),
            &self.clock,
            old.limits.revision(),
        );
        for (k, v) in self.held.drain(..) {
            d.0.record_key(&k, &v);
        }
        self.detector = Some(d);
    }

    fn span_ms(&self) -> u64 {
        self.first.map_or(0, |f| (self.latest - f).max(0) as u64)
    }
}

/// `tollgate replay --traffic`.
pub(crate) fn run(
    args: &ReplayArgs,
    limits: &Path,
    out: &mut Output,
) -> Result<Status, ReplayError> {
    let mut replay = Replay::new(limits, args.against.as_deref())?;
    let mut logs = Merge::open(&args.traffic)?;
    replay.files = logs.names().to_vec();
    loop {
        match logs.next_item() {
            Item::End => break,
            Item::Bad { file, bad } => replay.bad_line(file, bad),
            Item::Record { file, line, rec } => replay.feed(file, line, &rec),
        }
    }
    let span_ms = replay.span_ms();
    if replay.detector.is_none() && replay.sides.len() == 2 && replay.requests > 0 {
        replay.start_detector(span_ms);
    }
    for s in &mut replay.sides {
        s.tally.close_minute();
    }
    replay.rollout_tally.close_minute();
    let start = replay.start;
    let first_ms = replay.first.unwrap_or(0);
    let against = match &replay.sides[..] {
        [old, new] => {
            let transition = Limits::check_transition(&old.limits, &new.limits, DEFAULT_GUARD);
            // Nothing replayed, nothing to judge: no rollout or detector verdict from 0 requests.
            let ran = replay.requests > 0;
            let rollout = replay.rollout.as_ref().filter(|_| ran);
            let detector = replay.detector.as_ref().filter(|_| ran);
            Some(compare(
                old, new, transition, rollout, detector, start, first_ms,
            ))
        }
        _ => None,
    };
    let gate = match (args.fail_if_newly_denied, &against) {
        (Some(t), Some(a)) => Some(Gate::judge(
            t,
            a.newly_denied_keys,
            replay.customers.count(),
            replay.customers.capped,
        )),
        _ => None,
    };
    let report = Report {
        files: replay.files.clone(),
        lines: logs.lines(),
        requests: replay.requests,
        bad_lines: replay.bad_count,
        bad_shown: std::mem::take(&mut replay.bad),
        first_ms: replay.first,
        span_ms,
        sides: &replay.sides,
        against: against.as_ref(),
        customers: replay.customers.count(),
        gate: gate.as_ref(),
        peak_rss_kib: peak_rss_kib(),
    };
    let marks = replay
        .rollout
        .as_ref()
        .filter(|_| replay.requests > 0)
        .map(|r| rollout_marks(r, start))
        .unwrap_or_default();
    write_charts(&args.out, &report, &marks, &replay.rollout_tally)?;
    match args.format {
        OutputFormat::Human => {
            human(&report, out);
            out.line(format!("charts: {}", args.out.join("index.html").display()));
        }
        OutputFormat::Json => {
            let mut json = report.json();
            json["out"] = serde_json::Value::String(args.out.display().to_string());
            out.line(crate::to_json(&json));
        }
    }
    Ok(if gate.is_some_and(|g| !g.passed) {
        Status::Blocked
    } else if replay.bad_count > 0 {
        Status::Rejected
    } else {
        Status::Ok
    })
}
