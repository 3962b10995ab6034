//! The traffic replay's report: for people, as JSON, and as a chart with `index.html`.

use std::path::Path;

use super::compare::Against;
use super::parse::BadLine;
use super::tally::Tally;
use super::Side;
use crate::replay::charts::{self, esc, per_minute, Chart};
use crate::replay::report::pct;
use crate::replay::sim::Bucket;
use crate::replay::ReplayError;
use crate::Output;

/// The peak resident set of this process, from `/proc/self/status` (Linux).
pub(super) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub(super) struct Report<'a> {
    pub(super) file: String,
    pub(super) lines: u64,
    pub(super) requests: u64,
    pub(super) bad_lines: u64,
    pub(super) bad_shown: Vec<BadLine>,
    pub(super) span_ms: u64,
    pub(super) sides: &'a [Side],
    pub(super) against: Option<&'a Against>,
    pub(super) peak_rss_kib: Option<u64>,
}

impl Report<'_> {
    pub(super) fn json(&self) -> serde_json::Value {
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

pub(super) fn human(r: &Report<'_>, out: &mut Output) {
    out.line(format!(
        "{}: {} lines, {} requests over {}, {} bad lines",
        r.file,
        r.lines,
        r.requests,
        crate::replay::report::secs(r.span_ms as f64 / 1000.0),
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

pub(super) fn write_charts(
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
    if !rollout.minutes.is_empty() && r.sides.len() == 2 {
        top.push(per_minute(
            "staged rollout",
            &rollout.minutes,
            Bucket::success_rate,
        ));
        bottom.push(per_minute("staged rollout", &rollout.minutes, |b| {
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
