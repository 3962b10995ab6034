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

use tollgate::limits::{Limits, Rollout};
use tollgate::safety::FaultDetector;
use tollgate::{Check, ManualClock, Verdict};

use super::sim::MINUTE;
use super::{ReplayArgs, ReplayError};
use crate::{Output, OutputFormat, Status};

mod clients;
mod columns;
mod compare;
mod fleet;
mod gate;
mod generate;
mod help;
mod input;
mod merge;
mod newly;
mod output;
mod parse;
mod rates;
mod record;
mod side;
mod tally;
mod time;

pub(crate) use clients::Clients;
use clients::{Model, Queue};
pub(crate) use columns::{parse_column, Column};
use compare::{compare, detector, rollout_marks, Events};
pub(crate) use fleet::MAX_INSTANCES;
use gate::Gate;
pub(crate) use gate::{parse_threshold, Threshold};
pub(crate) use generate::generate;
use merge::{Item, Merge};
use output::{human, peak_rss_kib, write_charts, Report, ShownBad};
use parse::BadLine;
use record::Record;
use side::{Checked, Side};
use tally::{key_hash, Customers, Tally, MAX_MINUTES};
pub(crate) use time::parse_time;

pub(crate) use help::HELP;

/// Bad lines listed by number (all are counted).
const SHOWN_BAD: usize = 20;
/// A line at most this much earlier than the latest is replayed at the latest.
const REORDER_MS: i64 = 1_000;

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
    /// What clients do with a 429, and the retries they have made that wait.
    model: Model,
    retries: Queue,
    /// The log's own retries, dropped under a client model.
    log_retries_dropped: u64,
    /// `--from`/`--to` (ms since the epoch, `to` excluded), and the rows left outside.
    window: (i64, i64),
    outside: u64,
    files: Vec<String>,
    bad: Vec<ShownBad>,
    bad_count: u64,
    requests: u64,
    customers: Customers,
    rates: rates::Rates,
    first: Option<i64>,
    latest: i64,
    held: Vec<(String, Verdict)>,
    detector: Option<(FaultDetector, Events)>,
}

impl Replay {
    fn new(args: &ReplayArgs, limits: &Path) -> Result<Replay, ReplayError> {
        let start = Duration::from_secs(3_600);
        let clock = ManualClock::at(start);
        let mut sides = vec![Side::load("old", limits, &clock, args.instances)?];
        if let Some(new) = &args.against {
            sides.push(Side::load("new", new, &clock, args.instances)?);
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
            rollout_tally: Tally {
                no_breakdown: true,
                ..Tally::default()
            },
            model: Model::new(args.clients, args.max_retries, args.seed),
            retries: Queue::default(),
            log_retries_dropped: 0,
            window: (args.from.unwrap_or(i64::MIN), args.to.unwrap_or(i64::MAX)),
            outside: 0,
            files: Vec::new(),
            bad: Vec::new(),
            bad_count: 0,
            requests: 0,
            customers: Customers::default(),
            rates: rates::Rates::default(),
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
        if self.model.closed() && rec.attempt > 0 {
            self.log_retries_dropped += 1;
            return;
        }
        if rec.t_ms < self.window.0 || rec.t_ms >= self.window.1 {
            self.outside += 1;
            return;
        }
        let t = match self.place(rec) {
            Ok(t) => t,
            Err(message) => return self.bad_line(file, BadLine { line, message }),
        };
        self.retry_until(t);
        self.first.get_or_insert(t);
        self.latest = t;
        let since = self.at(t);
        let minute = (since / MINUTE) as usize;
        let hash = key_hash(&rec.key);
        self.requests += 1;
        self.customers.insert(hash);
        self.rates.add(t, hash, &rec.key);
        for i in 0..self.sides.len() {
            let checked = self.attempt(i, t, rec, hash);
            let side = &mut self.sides[i];
            side.clients.originals += 1;
            if rec.status == Some(429) {
                side.clients.log_429 += 1;
                let denied = matches!(
                    checked,
                    Checked::Judged(Verdict::Deny(_)) | Checked::Oversized
                );
                side.clients.log_429_denied += u64::from(denied);
            }
            self.after(i, t, rec, &checked);
        }
        if let Some(r) = &self.rollout {
            let check = Check::cost(1).attempt(rec.attempt);
            if let Ok(d) = r.check_all(&rec.tier, &rec.category, &rec.route, &rec.key, check) {
                let at = (rec.key.as_str(), rec.tier.as_str(), rec.route.as_str());
                self.rollout_tally.decision(minute, at, hash, &d);
            }
        }
        if self.detector.is_none()
            && self.sides.len() == 2
            && (since >= MINUTE || self.held.len() >= MAX_HELD_VERDICTS)
        {
            self.start_detector(since);
        }
    }

    /// Sets the clock to `t` (ms since the epoch); returns the ms since the first row.
    fn at(&self, t: i64) -> u64 {
        let since = self.first.map_or(0, |f| (t - f).max(0) as u64);
        self.clock.set(self.start + Duration::from_millis(since));
        since
    }

    /// Checks one attempt on side `i` and feeds NEW's verdicts to the detector.
    fn attempt(&mut self, i: usize, t: i64, rec: &Record, hash: u64) -> Checked {
        let minute = (self.at(t) / MINUTE) as usize;
        let checked = self.sides[i].check(minute, t, rec, hash);
        if let (1, Checked::Judged(v)) = (i, &checked) {
            match &self.detector {
                Some((d, _)) => d.record_key(&rec.key, v),
                None => self.held.push((rec.key.clone(), *v)),
            }
        }
        checked
    }

    /// What the client of `rec` does after side `i` answered it at `t`: done, or a retry
    /// scheduled by the model, or given up.
    fn after(&mut self, i: usize, t: i64, rec: &Record, checked: &Checked) {
        let side = &mut self.sides[i];
        let verdict = match checked {
            Checked::Judged(v) if !v.is_permitted() => v,
            Checked::Oversized => {
                side.clients.gave_up += 1;
                return;
            }
            _ => {
                side.clients.succeeded += 1;
                return;
            }
        };
        let attempt = rec.attempt.saturating_add(1);
        let Some(wait) = self.model.next(attempt, verdict) else {
            side.clients.gave_up += 1;
            return;
        };
        let retry = Record {
            attempt,
            ..rec.clone()
        };
        let due = t.saturating_add(wait.as_millis() as i64);
        if !self.retries.push(i, due, retry) {
            side.clients.dropped += 1;
            side.clients.gave_up += 1;
        }
    }

    /// Replays every retry due at or before `t`, in time order.
    fn retry_until(&mut self, t: i64) {
        while let Some(p) = self.retries.pop_due(t) {
            let horizon = self
                .first
                .is_some_and(|f| (p.at_ms - f) as u64 / MINUTE >= MAX_MINUTES);
            if horizon {
                self.sides[p.side].clients.gave_up += 1;
                continue;
            }
            self.latest = self.latest.max(p.at_ms);
            let hash = key_hash(&p.rec.key);
            let checked = self.attempt(p.side, p.at_ms, &p.rec, hash);
            self.sides[p.side].clients.retries += 1;
            self.after(p.side, p.at_ms, &p.rec, &checked);
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
    let mut replay = Replay::new(args, limits)?;
    let mut logs = Merge::open(&args.traffic, &columns::Columns::new(&args.column))?;
    replay.files = logs.names().to_vec();
    loop {
        match logs.next_item() {
            Item::End => break,
            Item::Bad { file, bad } => replay.bad_line(file, bad),
            Item::Record { file, line, rec } => replay.feed(file, line, &rec),
        }
    }
    replay.retry_until(i64::MAX);
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
            let transition =
                Limits::check_transition(&old.limits, &new.limits, Limits::DEFAULT_GUARD);
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
        clients: args.clients,
        max_retries: args.max_retries,
        log_retries_dropped: replay.log_retries_dropped,
        outside: replay.outside,
        rates: replay.rates.figures(),
        window: (args.from, args.to),
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
    if let (Some(path), Some(a)) = (&args.newly_denied, &against) {
        let n = newly::write(path, &replay.sides[0], &replay.sides[1])?;
        out.line(format!(
            "newly denied: {n} customers written to {}{}",
            path.display(),
            if a.newly_denied_at_least || n < a.newly_denied_keys {
                " (the keys NEW denied most; the count above is the total)"
            } else {
                ""
            }
        ));
    }
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
    let unreadable = logs.unreadable();
    for name in &unreadable {
        out.error(format!(
            "cannot read {name:?} to its end (see its bad lines): the replay above covers only the part read"
        ));
    }
    Ok(if !unreadable.is_empty() {
        Status::Unusable
    } else if gate.is_some_and(|g| !g.passed) {
        Status::Blocked
    } else if replay.bad_count > 0 {
        Status::Rejected
    } else {
        Status::Ok
    })
}
