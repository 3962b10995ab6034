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

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::{BufReader, IsTerminal, Read};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tollgate::{
    Baseline, Check, FaultDetector, FaultEvent, HourSample, Limits, LimitsHandle, ManualClock,
    Rollout, RolloutState, Verdict, DEFAULT_GUARD,
};

use super::charts::{self, esc, per_minute, Chart};
use super::report::{clock_label, pct};
use super::sim::{Bucket, MINUTE};
use super::ReplayError;
use crate::{Output, OutputFormat, Status};

mod generate;
mod parse;

pub(crate) use generate::generate;
use parse::{BadLine, Next, Reader, Record};

/// Key hashes kept to count keys ever denied.
pub(crate) const MAX_EVER_DENIED: usize = 1 << 20;
/// Denied keys kept by name, for the hardest hit and the newly denied.
pub(crate) const MAX_HARDEST: usize = 100_000;
/// Keys tallied per minute for the deny breadth.
pub(crate) const MAX_MINUTE_KEYS: usize = 100_000;
/// Minutes after the first line a log may span (about 69 days).
pub(crate) const MAX_MINUTES: u64 = 100_000;
/// Bad lines listed by number (all are counted).
const SHOWN_BAD: usize = 20;
/// A line at most this much earlier than the latest is replayed at the latest.
const REORDER_MS: i64 = 1_000;

/// Allowed and denied checks.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Counts {
    allowed: u64,
    denied: u64,
}

/// What one side saw.
#[derive(Debug, Default)]
struct Tally {
    policies: BTreeMap<String, Counts>,
    overall: Counts,
    /// Requests no policy matched (unlimited by the document).
    unmatched: u64,
    /// Requests whose cost exceeded their policy's burst.
    oversized: u64,
    ever_denied: HashSet<u64>,
    ever_denied_capped: bool,
    denials: HashMap<String, u64>,
    denials_capped: bool,
    minutes: Vec<Bucket>,
    minute_keys: HashMap<u64, (u32, u32)>,
    minute_keys_capped: bool,
}

fn key_hash(key: &str) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl Tally {
    fn record(
        &mut self,
        minute: usize,
        key: &str,
        hash: u64,
        policy: Option<&str>,
        permitted: bool,
    ) {
        let Some(policy) = policy else {
            self.unmatched += 1;
            return;
        };
        let c = match self.policies.get_mut(policy) {
            Some(c) => c,
            None => self.policies.entry(policy.to_owned()).or_default(),
        };
        let slot = if permitted {
            &mut c.allowed
        } else {
            &mut c.denied
        };
        *slot += 1;
        let slot = if permitted {
            &mut self.overall.allowed
        } else {
            &mut self.overall.denied
        };
        *slot += 1;
        while self.minutes.len() <= minute {
            self.close_minute();
            self.minutes.push(Bucket::default());
        }
        let b = &mut self.minutes[minute];
        b.requests += 1;
        b.failed += u64::from(!permitted);
        let room = self.minute_keys.len() < MAX_MINUTE_KEYS;
        match self.minute_keys.get_mut(&hash) {
            Some(t) => bump(t, permitted),
            None if room => bump(self.minute_keys.entry(hash).or_default(), permitted),
            None => self.minute_keys_capped = true,
        }
        if permitted {
            return;
        }
        if self.ever_denied.len() < MAX_EVER_DENIED {
            self.ever_denied.insert(hash);
        } else if !self.ever_denied.contains(&hash) {
            self.ever_denied_capped = true;
        }
        let room = self.denials.len() < MAX_HARDEST;
        match self.denials.get_mut(key) {
            Some(n) => *n += 1,
            None if room => {
                self.denials.insert(key.to_owned(), 1);
            }
            None => self.denials_capped = true,
        }
    }

    fn close_minute(&mut self) {
        if let Some(b) = self.minutes.last_mut() {
            for (ok, denied) in self.minute_keys.values() {
                b.active_keys += 1;
                b.denied_keys += u64::from(denied > ok);
            }
        }
        self.minute_keys.clear();
    }

    fn hardest(&self, n: usize) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self.denials.iter().map(|(k, c)| (k.clone(), *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }
}

fn bump(t: &mut (u32, u32), permitted: bool) {
    if permitted {
        t.0 = t.0.saturating_add(1);
    } else {
        t.1 = t.1.saturating_add(1);
    }
}

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

/// What the comparison of NEW with OLD found.
#[derive(Debug, Serialize)]
struct Against {
    newly_denied_keys: u64,
    newly_denied_at_least: bool,
    newly_denied_sample: Vec<String>,
    diff: String,
    tightening_factors: Vec<(String, String, String, f64)>,
    transition: Result<(), Vec<String>>,
    rollout: Vec<String>,
    detector: String,
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
    let transition = match &sides[..] {
        [old, new] => Some(Limits::check_transition(
            &old.limits,
            &new.limits,
            DEFAULT_GUARD,
        )),
        _ => None,
    };
    // The rollout runs even when the guard refuses the transition (with the guard lifted):
    // what it would have done, had the tightening been acknowledged.
    let rollout = match &sides[..] {
        [old, new] => Rollout::builder(old.limits.clone(), new.limits.clone())
            .clock(clock.clone())
            .guard(f64::MAX)
            .build()
            .ok(),
        _ => None,
    };
    let mut rollout_tally = Tally::default();

    let f = std::fs::File::open(file).map_err(|e| ReplayError::io("read", file, e))?;
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(size);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {eta}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let input = BufReader::with_capacity(
        1 << 16,
        Counting {
            inner: f,
            bar: bar.clone(),
        },
    );
    let mut reader =
        Reader::new(input).map_err(|e| ReplayError::Input(format!("{}: {e}", file.display())))?;

    let mut bad: Vec<BadLine> = Vec::new();
    let mut bad_count = 0u64;
    let mut requests = 0u64;
    let (mut first, mut latest): (Option<i64>, i64) = (None, i64::MIN);
    let mut new_verdicts: Vec<(String, Verdict)> = Vec::new();
    let detector_clock = clock.clone();
    let mut pending_detector: Option<(FaultDetector, Events)> = None;
    loop {
        let rec = match reader.next_record() {
            Next::End => break,
            Next::Bad(b) => {
                bad_count += 1;
                if bad.len() < SHOWN_BAD {
                    bad.push(b);
                }
                continue;
            }
            Next::Record(r) => r,
        };
        let t0 = *first.get_or_insert(rec.t_ms);
        let line = reader.line();
        let reject = |message: String| BadLine { line, message };
        let problem = if rec.t_ms < latest.saturating_sub(REORDER_MS) {
            Some(reject(format!(
                "out of time order: {} ms before an earlier line",
                latest.saturating_sub(rec.t_ms)
            )))
        } else if rec.t_ms < t0 || (rec.t_ms - t0) as u64 / MINUTE >= MAX_MINUTES {
            Some(reject(format!(
                "more than {MAX_MINUTES} minutes after the first line"
            )))
        } else {
            None
        };
        if let Some(b) = problem {
            bad_count += 1;
            if bad.len() < SHOWN_BAD {
                bad.push(b);
            }
            continue;
        }
        latest = latest.max(rec.t_ms);
        let since = (latest - t0) as u64;
        clock.set(start + Duration::from_millis(since));
        let minute = (since / MINUTE) as usize;
        let hash = key_hash(&rec.key);
        requests += 1;
        for s in &mut sides {
            let v = s.check(minute, &rec, hash);
            if s.name == "new" {
                if let Some(v) = v {
                    // The detector needs OLD's baseline, known only at the end: keep the
                    // first minute's verdicts, then feed it live.
                    match &pending_detector {
                        Some((d, _)) => d.record_key(&rec.key, &v),
                        None => new_verdicts.push((rec.key.clone(), v)),
                    }
                }
            }
        }
        if let Some(r) = &rollout {
            if let Ok(d) = r.check(
                &rec.tier,
                &rec.category,
                &rec.route,
                &rec.key,
                Check::cost(1).attempt(rec.attempt),
            ) {
                rollout_tally.record(minute, &rec.key, hash, d.policy(), d.is_permitted());
            }
        }
        if pending_detector.is_none() && sides.len() == 2 && since >= MINUTE {
            let d = detector(
                &sides[0].tally,
                since,
                &detector_clock,
                sides[0].limits.revision(),
            );
            for (k, v) in new_verdicts.drain(..) {
                d.0.record_key(&k, &v);
            }
            pending_detector = Some(d);
        }
    }
    bar.finish_and_clear();
    for s in &mut sides {
        s.tally.close_minute();
    }
    rollout_tally.close_minute();
    let span_ms = first.map_or(0, |f| (latest - f).max(0) as u64);
    let detector = match pending_detector {
        Some(d) => Some(d),
        None if sides.len() == 2 => {
            let d = detector(
                &sides[0].tally,
                span_ms.max(1),
                &detector_clock,
                sides[0].limits.revision(),
            );
            for (k, v) in new_verdicts.drain(..) {
                d.0.record_key(&k, &v);
            }
            Some(d)
        }
        None => None,
    };
    let against = match (&sides[..], transition) {
        ([old, new], Some(t)) => Some(compare(
            old,
            new,
            t,
            rollout.as_ref(),
            detector.as_ref(),
            start,
        )),
        _ => None,
    };
    let report = Report {
        file: file.display().to_string(),
        lines: reader.line(),
        requests,
        bad_lines: bad_count,
        bad_shown: bad,
        span_ms,
        sides: &sides,
        against: against.as_ref(),
        peak_rss_kib: peak_rss_kib(),
    };
    let marks = rollout
        .as_ref()
        .map(|r| rollout_marks(r, start))
        .unwrap_or_default();
    write_charts(out_dir, &report, &marks, &rollout_tally)?;
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
    Ok(if bad_count > 0 {
        Status::Rejected
    } else {
        Status::Ok
    })
}

/// A detector with OLD's run as its baseline, on the replay's clock.
fn detector(
    old: &Tally,
    span_ms: u64,
    clock: &ManualClock,
    revision: u64,
) -> (FaultDetector, Events) {
    let mut breadths: Vec<f64> = old.minutes.iter().map(Bucket::breadth).collect();
    breadths.sort_by(f64::total_cmp);
    let median = breadths.get(breadths.len() / 2).copied().unwrap_or(0.0);
    let total = old.overall.allowed + old.overall.denied;
    let hour = HourSample {
        breadth: median,
        deny_ratio: if total == 0 {
            0.0
        } else {
            old.overall.denied as f64 / total as f64
        },
        allowed_per_sec: old.overall.allowed as f64 * 1000.0 / span_ms.max(1) as f64,
    };
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&events);
    let c = clock.clone();
    let d = FaultDetector::builder()
        .clock(clock.clone())
        .baseline(Baseline::from_hours(
            revision,
            std::iter::repeat_n(hour, 24),
        ))
        .on_event(move |e| {
            if let Ok(mut v) = sink.lock() {
                v.push((c.now(), *e));
            }
        })
        .build();
    (d, events)
}

type Events = std::sync::Arc<std::sync::Mutex<Vec<(Duration, FaultEvent)>>>;

fn detector_verdict((d, events): &(FaultDetector, Events), start: Duration) -> String {
    d.tick();
    let list = events.lock().map(|v| v.clone()).unwrap_or_default();
    let trip = list
        .iter()
        .find(|(_, e)| matches!(e, FaultEvent::Tripped(_)));
    match trip {
        Some((at, FaultEvent::Tripped(f))) => format!(
            "the fault detector would trip {} after the first line (deny breadth {:.0} % against a baseline of {:.0} %) and pass traffic through",
            super::report::secs(at.saturating_sub(start).as_secs_f64()),
            f.measure * 100.0,
            f.baseline.unwrap_or(0.0) * 100.0
        ),
        _ => {
            let last = d.state().last;
            format!(
                "the fault detector would stay enforcing (last deny breadth {:.1} %, baseline {:.1} %)",
                last.measure * 100.0,
                last.baseline.unwrap_or(0.0) * 100.0
            )
        }
    }
}

fn rollout_marks(r: &Rollout, start: Duration) -> Vec<(f64, usize, String)> {
    r.events()
        .into_iter()
        .filter_map(|e| {
            let (at, text) = match e {
                RolloutState::Staged {
                    basis_points,
                    since,
                    ..
                } => (
                    since,
                    format!("rollout stage {} %", f64::from(basis_points) / 100.0),
                ),
                RolloutState::Complete { since } => (since, "rollout complete".to_owned()),
                RolloutState::Halted {
                    at,
                    basis_points,
                    reverted,
                    ..
                } => (
                    at,
                    format!(
                        "rollout halted at {} %{}",
                        f64::from(basis_points) / 100.0,
                        if reverted { ", reverted" } else { "" }
                    ),
                ),
                _ => return None,
            };
            Some((at.saturating_sub(start).as_secs_f64(), 1, text))
        })
        .collect()
}

fn compare(
    old: &Side,
    new: &Side,
    transition: Result<tollgate::Diff, tollgate::ConfigErrors>,
    rollout: Option<&Rollout>,
    detector: Option<&(FaultDetector, Events)>,
    start: Duration,
) -> Against {
    let newly: Vec<&String> = new
        .tally
        .denials
        .keys()
        .filter(|k| !old.tally.ever_denied.contains(&key_hash(k)))
        .collect();
    let newly_count = new
        .tally
        .ever_denied
        .iter()
        .filter(|h| !old.tally.ever_denied.contains(h))
        .count() as u64;
    let mut sample: Vec<(String, u64)> = newly
        .iter()
        .map(|k| {
            (
                (*k).clone(),
                new.tally.denials.get(*k).copied().unwrap_or(0),
            )
        })
        .collect();
    sample.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let diff = Limits::diff(&old.limits, &new.limits);
    let factors = diff
        .tightenings_beyond(1.0)
        .iter()
        .map(|t| {
            (
                t.policy.clone(),
                t.from.to_string(),
                t.to.to_string(),
                t.factor,
            )
        })
        .collect();
    let rollout_lines = match rollout {
        Some(r) => r
            .events()
            .into_iter()
            .map(|e| match e {
                RolloutState::Staged {
                    basis_points,
                    since,
                    ..
                } => format!(
                    "{}: stage {} % of keys",
                    clock_label(0, since.saturating_sub(start).as_millis() as u64),
                    f64::from(basis_points) / 100.0
                ),
                RolloutState::Complete { since } => format!(
                    "{}: complete",
                    clock_label(0, since.saturating_sub(start).as_millis() as u64)
                ),
                RolloutState::Halted {
                    at,
                    basis_points,
                    reverted,
                    reason,
                    ..
                } => format!(
                    "{}: halted at {} %{}: {reason}",
                    clock_label(0, at.saturating_sub(start).as_millis() as u64),
                    f64::from(basis_points) / 100.0,
                    if reverted { " and reverted" } else { "" }
                ),
                other => format!("{other:?}"),
            })
            .collect(),
        None => vec!["not run: the rollout refused the documents".to_owned()],
    };
    Against {
        newly_denied_keys: newly_count,
        newly_denied_at_least: new.tally.ever_denied_capped,
        newly_denied_sample: sample.into_iter().take(10).map(|(k, _)| k).collect(),
        diff: diff.to_string(),
        tightening_factors: factors,
        transition: transition
            .map(|_| ())
            .map_err(|e| e.iter().map(|x| x.to_string()).collect()),
        rollout: rollout_lines,
        detector: detector.map_or_else(String::new, |d| detector_verdict(d, start)),
    }
}

/// The peak resident set of this process, from `/proc/self/status` (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

struct Report<'a> {
    file: String,
    lines: u64,
    requests: u64,
    bad_lines: u64,
    bad_shown: Vec<BadLine>,
    span_ms: u64,
    sides: &'a [Side],
    against: Option<&'a Against>,
    peak_rss_kib: Option<u64>,
}

impl Report<'_> {
    fn json(&self) -> serde_json::Value {
        let sides: Vec<serde_json::Value> = self
            .sides
            .iter()
            .map(|s| {
                let t = &s.tally;
                serde_json::json!({
                    "side": s.name,
                    "file": s.file,
                    "revision": s.limits.revision(),
                    "allowed": t.overall.allowed,
                    "denied": t.overall.denied,
                    "unmatched": t.unmatched,
                    "oversized": t.oversized,
                    "keys_ever_denied": t.ever_denied.len(),
                    "keys_ever_denied_at_least": t.ever_denied_capped,
                    "policies": t.policies,
                    "hardest_hit": t.hardest(10),
                    "deny_breadth_per_minute": t.minutes.iter().map(Bucket::breadth).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({
            "file": self.file,
            "lines": self.lines,
            "requests": self.requests,
            "bad_lines": self.bad_lines,
            "bad_lines_shown": self.bad_shown,
            "span_secs": self.span_ms as f64 / 1000.0,
            "sides": sides,
            "against": self.against,
            "peak_rss_kib": self.peak_rss_kib,
        })
    }
}

fn human(r: &Report<'_>, out: &mut Output) {
    out.line(format!(
        "{}: {} lines, {} requests over {}, {} bad lines",
        r.file,
        r.lines,
        r.requests,
        super::report::secs(r.span_ms as f64 / 1000.0),
        r.bad_lines
    ));
    for b in &r.bad_shown {
        out.line(format!("  {}:{}: {}", r.file, b.line, b.message));
    }
    if r.bad_lines > r.bad_shown.len() as u64 {
        out.line(format!(
            "  … and {} more",
            r.bad_lines - r.bad_shown.len() as u64
        ));
    }
    for s in r.sides {
        let t = &s.tally;
        let total = t.overall.allowed + t.overall.denied;
        out.line(String::new());
        out.line(format!(
            "{} ({}, revision {}): allowed {}, denied {} ({}), keys ever denied {}{}, unmatched {}",
            s.name,
            s.file,
            s.limits.revision(),
            t.overall.allowed,
            t.overall.denied,
            pct(if total == 0 {
                0.0
            } else {
                t.overall.denied as f64 / total as f64
            }),
            if t.ever_denied_capped {
                "at least "
            } else {
                ""
            },
            t.ever_denied.len(),
            t.unmatched
        ));
        for (name, c) in &t.policies {
            out.line(format!(
                "  {name:<24} allowed {:>10}  denied {:>10}",
                c.allowed, c.denied
            ));
        }
        let peak = t.minutes.iter().map(Bucket::breadth).fold(0.0, f64::max);
        out.line(format!("  peak deny breadth (per minute): {}", pct(peak)));
        let hardest = t.hardest(5);
        if !hardest.is_empty() {
            let list: Vec<String> = hardest.iter().map(|(k, n)| format!("{k} ({n})")).collect();
            out.line(format!("  hardest hit: {}", list.join(", ")));
        }
    }
    if let Some(a) = r.against {
        out.line(String::new());
        out.line(format!(
            "difference: {}{} customers newly denied{}",
            if a.newly_denied_at_least {
                "at least "
            } else {
                ""
            },
            a.newly_denied_keys,
            if a.newly_denied_sample.is_empty() {
                String::new()
            } else {
                format!(" (e.g. {})", a.newly_denied_sample.join(", "))
            }
        ));
        out.line(a.diff.trim_end());
        for (policy, from, to, factor) in &a.tightening_factors {
            out.line(format!(
                "  tightening: {policy}: {from} → {to}: {factor:.1}×"
            ));
        }
        match &a.transition {
            Ok(()) => out.line("  the guard accepts the transition"),
            Err(errors) => {
                for e in errors {
                    out.line(format!("  the guard refuses it: {e}"));
                }
            }
        }
        out.line(if a.transition.is_ok() {
            "rollout, as it would have run from the first line:"
        } else {
            "rollout, as it would have run from the first line had the tightening been acknowledged:"
        });
        for l in &a.rollout {
            out.line(format!("  {l}"));
        }
        out.line(format!("detector: {}", a.detector));
    }
    if let Some(kib) = r.peak_rss_kib {
        out.line(format!("peak memory: {:.1} MiB", kib as f64 / 1024.0));
    }
}

fn write_charts(
    dir: &Path,
    r: &Report<'_>,
    marks: &[(f64, usize, String)],
    rollout: &Tally,
) -> Result<(), ReplayError> {
    let mut top = Vec::new();
    let mut bottom = Vec::new();
    let label = |s: &Side| s.name;
    for s in r.sides {
        top.push(per_minute(label(s), &s.tally.minutes, Bucket::success_rate));
        bottom.push(per_minute(label(s), &s.tally.minutes, |b| {
            Some(b.breadth())
        }));
    }
    if !rollout.minutes.is_empty() && r.sides.len() < 2 {
        bottom.push(per_minute("rollout", &rollout.minutes, |b| {
            Some(b.breadth())
        }));
    }
    let chart = Chart {
        title: format!("traffic replay: {}", r.file),
        day_offset_secs: 0,
        span_secs: (r.span_ms as f64 / 1000.0).max(60.0),
        top: (
            "allowed share of checks (per minute; time since the first line)",
            top,
        ),
        bottom: (
            "deny breadth: share of active keys mostly denied (per minute)",
            bottom,
        ),
        marks: marks.to_vec(),
    };
    charts::write(dir, "traffic.svg", &chart.svg())?;
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>tollgate replay: traffic</title></head>\
         <body style=\"font-family:sans-serif;max-width:1000px;margin:2em auto\">\n<h1>traffic replay: {}</h1>\n",
        esc(&r.file)
    );
    let mut text = Output::default();
    human(r, &mut text);
    html.push_str(&format!(
        "<pre>{}</pre>\n<img src=\"traffic.svg\" alt=\"traffic chart\">\n",
        esc(&text.stdout)
    ));
    html.push_str("</body></html>\n");
    charts::write(dir, "index.html", &html)
}
