//! `tollgate replay --traffic FILE --limits OLD [--against NEW]`: an access log replayed
//! against limits documents in simulated time, streaming, in bounded memory.
//!
//! Each side (OLD, and NEW if given) is a [`LimitsHandle`] on one `ManualClock` that follows
//! the log's timestamps. With NEW, the same requests also go through a [`Rollout`] from OLD
//! to NEW (as it would have run from the log's first line) and NEW's verdicts are fed to a
//! [`FaultDetector`] whose baseline is OLD's run, for its verdict.
//!
//! Memory: the limiters keep at most `max_keys` keys each (the library's bound); the tallies
//! keep at most [`MAX_EVER_DENIED`] key hashes, [`MAX_HARDEST`] denied keys by name and
//! [`MAX_MINUTE_KEYS`] keys per minute; minutes past [`MAX_MINUTES`] after the first line
//! are bad lines. Beyond a cap, counts say "at least".

use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::Path;
use std::time::Duration;

use tollgate::{
    Check, FaultDetector, Limits, LimitsHandle, ManualClock, Rollout, Verdict, DEFAULT_GUARD,
};

use super::sim::MINUTE;
use super::ReplayError;
use crate::{Output, OutputFormat, Status};

mod compare;
mod generate;
mod output;
mod parse;
mod tally;

use compare::{compare, detector, rollout_marks, Events};
pub(crate) use generate::generate;
use output::{human, peak_rss_kib, write_charts, Report};
use parse::{BadLine, Next, Reader, Record};
use tally::{key_hash, Tally, MAX_MINUTES};

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
        let cost = match self.limits.resolve(&rec.tier, &rec.category, &rec.route) {
            Some(p) if p.quota().is_bytes() => rec.bytes.unwrap_or(1).max(1),
            _ => 1,
        };
        let check = Check::cost(cost).attempt(rec.attempt);
        match self
            .handle
            .check(&rec.tier, &rec.category, &rec.route, &rec.key, check)
        {
            Ok(d) => {
                self.tally
                    .record(minute, &rec.key, hash, d.policy(), d.is_permitted());
                d.policy().map(|_| d.verdict())
            }
            Err(_) => {
                self.tally.oversized += 1;
                let policy = self
                    .limits
                    .resolve(&rec.tier, &rec.category, &rec.route)
                    .map(|p| p.name().to_owned());
                self.tally
                    .record(minute, &rec.key, hash, policy.as_deref(), false);
                None
            }
        }
    }
}

fn load(path: &Path) -> Result<Limits, ReplayError> {
    Limits::from_path(path).map_err(|errors| {
        let list: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {e}", path.display()))
            .collect();
        ReplayError::Input(list.join("\n"))
    })
}

/// Counts the bytes read, for the progress bar.
struct Counting<R> {
    inner: R,
    bar: indicatif::ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
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
    bad: Vec<BadLine>,
    bad_count: u64,
    requests: u64,
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
            bad: Vec::new(),
            bad_count: 0,
            requests: 0,
            first: None,
            latest: i64::MIN,
            held: Vec::new(),
            detector: None,
        })
    }

    fn bad_line(&mut self, b: BadLine) {
        self.bad_count += 1;
        if self.bad.len() < SHOWN_BAD {
            self.bad.push(b);
        }
    }

    /// Why a record cannot be replayed where it stands in the log, if it cannot.
    fn misplaced(&self, t0: i64, rec: &Record) -> Option<String> {
        if rec.t_ms < self.latest.saturating_sub(REORDER_MS) {
            Some(format!(
                "out of time order: {} ms before an earlier line",
                self.latest.saturating_sub(rec.t_ms)
            ))
        } else if rec.t_ms < t0 || (rec.t_ms - t0) as u64 / MINUTE >= MAX_MINUTES {
            Some(format!(
                "more than {MAX_MINUTES} minutes after the first line"
            ))
        } else {
            None
        }
    }

    /// Replays one record read from `line`.
    fn feed(&mut self, line: u64, rec: &Record) {
        let t0 = *self.first.get_or_insert(rec.t_ms);
        if let Some(message) = self.misplaced(t0, rec) {
            self.bad_line(BadLine { line, message });
            return;
        }
        self.latest = self.latest.max(rec.t_ms);
        let since = (self.latest - t0) as u64;
        self.clock.set(self.start + Duration::from_millis(since));
        let minute = (since / MINUTE) as usize;
        let hash = key_hash(&rec.key);
        self.requests += 1;
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
            if let Ok(d) = r.check(&rec.tier, &rec.category, &rec.route, &rec.key, check) {
                let tally = &mut self.rollout_tally;
                tally.record(minute, &rec.key, hash, d.policy(), d.is_permitted());
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

/// Opens the log, with a progress bar on its bytes when both outputs are terminals.
fn open(file: &Path) -> Result<(Reader<impl BufRead>, indicatif::ProgressBar), ReplayError> {
    let f = std::fs::File::open(file).map_err(|e| ReplayError::io("read", file, e))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(size);
        let template = "{bar:40} {bytes}/{total_bytes} {eta}";
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let counting = Counting {
        inner: f,
        bar: bar.clone(),
    };
    let input = BufReader::with_capacity(1 << 16, counting);
    let reader =
        Reader::new(input).map_err(|e| ReplayError::Input(format!("{}: {e}", file.display())))?;
    Ok((reader, bar))
}

/// `tollgate replay --traffic`.
pub(crate) fn run(
    file: &Path,
    limits: &Path,
    against: Option<&Path>,
    out_dir: &Path,
    format: OutputFormat,
    out: &mut Output,
) -> Result<Status, ReplayError> {
    let mut replay = Replay::new(limits, against)?;
    let (mut reader, bar) = open(file)?;
    loop {
        match reader.next_record() {
            Next::End => break,
            Next::Bad(b) => replay.bad_line(b),
            Next::Record(rec) => replay.feed(reader.line(), &rec),
        }
    }
    bar.finish_and_clear();
    let span_ms = replay.span_ms();
    if replay.detector.is_none() && replay.sides.len() == 2 {
        replay.start_detector(span_ms);
    }
    for s in &mut replay.sides {
        s.tally.close_minute();
    }
    replay.rollout_tally.close_minute();
    let start = replay.start;
    let against = match &replay.sides[..] {
        [old, new] => {
            let transition = Limits::check_transition(&old.limits, &new.limits, DEFAULT_GUARD);
            let (rollout, detector) = (replay.rollout.as_ref(), replay.detector.as_ref());
            Some(compare(old, new, transition, rollout, detector, start))
        }
        _ => None,
    };
    let report = Report {
        file: file.display().to_string(),
        lines: reader.line(),
        requests: replay.requests,
        bad_lines: replay.bad_count,
        bad_shown: std::mem::take(&mut replay.bad),
        span_ms,
        sides: &replay.sides,
        against: against.as_ref(),
        peak_rss_kib: peak_rss_kib(),
    };
    let marks = replay
        .rollout
        .as_ref()
        .map(|r| rollout_marks(r, start))
        .unwrap_or_default();
    write_charts(out_dir, &report, &marks, &replay.rollout_tally)?;
    match format {
        OutputFormat::Human => {
            human(&report, out);
            out.line(format!("charts: {}", out_dir.join("index.html").display()));
        }
        OutputFormat::Json => {
            let mut json = report.json();
            json["out"] = serde_json::Value::String(out_dir.display().to_string());
            out.line(crate::to_json(&json));
        }
    }
    Ok(if replay.bad_count > 0 {
        Status::Rejected
    } else {
        Status::Ok
    })
}
