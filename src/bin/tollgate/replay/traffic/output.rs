//! The traffic replay's report: for people, as JSON, and as a chart with `index.html`.

use std::path::Path;

use serde::Serialize;

use super::clients::Clients;
use super::compare::Against;
use super::gate::Gate;
use super::rates::RateFigures;
use super::tally::{Counts, Tally};
use super::time::rfc3339;
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

/// A bad line as the report shows it.
#[derive(Debug, Serialize)]
pub(super) struct ShownBad {
    pub(super) file: String,
    pub(super) line: u64,
    pub(super) message: String,
}

/// The version of the JSON report's shape. Fields are only ever added; a removal or a change
/// of meaning raises it.
const SCHEMA_VERSION: u32 = 1;

pub(super) struct Report<'a> {
    pub(super) files: Vec<String>,
    pub(super) lines: u64,
    pub(super) requests: u64,
    pub(super) bad_lines: u64,
    pub(super) bad_shown: Vec<ShownBad>,
    pub(super) first_ms: Option<i64>,
    pub(super) span_ms: u64,
    pub(super) sides: &'a [Side],
    pub(super) against: Option<&'a Against>,
    /// Distinct keys in the log.
    pub(super) customers: u64,
    pub(super) clients: Clients,
    pub(super) max_retries: u32,
    pub(super) log_retries_dropped: u64,
    /// Rows outside `--from`/`--to`, and the window.
    pub(super) outside: u64,
    pub(super) window: (Option<i64>, Option<i64>),
    pub(super) rates: RateFigures,
    pub(super) gate: Option<&'a Gate>,
    pub(super) peak_rss_kib: Option<u64>,
}

impl Report<'_> {
    /// The logs' names, joined.
    fn name(&self) -> String {
        self.files.join(", ")
    }

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
                    "shadow_denied": t.overall.shadow_denied,
                    "unmatched": t.unmatched,
                    "oversized": t.oversized,
                    "keys_ever_denied": t.ever_denied.len(),
                    "keys_ever_denied_at_least": t.ever_denied_capped,
                    "policies": t.policies,
                    "breakdown": t.rows.iter().map(|(p, tier, route, c)| serde_json::json!({
                        "policy": p, "tier": tier, "route": route,
                        "allowed": c.allowed, "denied": c.denied, "shadow_denied": c.shadow_denied,
                    })).collect::<Vec<_>>(),
                    "hardest_hit": t.hardest(10),
                    "deny_breadth_per_minute": t.minutes.iter().map(Bucket::breadth).collect::<Vec<_>>(),
                    "clients": {
                        "originals": s.clients.originals,
                        "retries": s.clients.retries,
                        "retry_share": s.clients.retry_share(),
                        "succeeded": s.clients.succeeded,
                        "success": s.clients.success(),
                        "gave_up": s.clients.gave_up,
                        "dropped": s.clients.dropped,
                    },
                    "log_429": s.clients.log_429,
                    "log_429_denied": s.clients.log_429_denied,
                    "fleet": s.fleet.as_ref().map(|f| f.totals),
                })
            })
            .collect();
        serde_json::json!({
            "schema_version": SCHEMA_VERSION,
            "file": self.files.first(),
            "files": self.files,
            "lines": self.lines,
            "requests": self.requests,
            "customers": self.customers,
            "key_rates": {
                "p50_per_minute": self.rates.p50_per_minute,
                "p99_per_minute": self.rates.p99_per_minute,
                "max_per_minute": self.rates.max_per_minute,
                "peak_burst": self.rates.peak_burst,
                "peak_burst_key": self.rates.peak_burst_key,
                "peak_burst_at": (self.requests > 0).then(|| rfc3339(self.rates.peak_burst_at_ms)),
                "at_least": self.rates.at_least,
            },
            "window": {
                "from": self.window.0.map(rfc3339),
                "to": self.window.1.map(rfc3339),
                "rows_outside": self.outside,
            },
            "clients": {
                "model": self.clients,
                "max_retries": self.max_retries,
                "log_retries_dropped": self.log_retries_dropped,
            },
            "bad_lines": self.bad_lines,
            "bad_lines_shown": self.bad_shown,
            "first_at": self.first_ms.map(rfc3339),
            "span_secs": self.span_ms as f64 / 1000.0,
            "sides": sides,
            "against": self.against,
            "gate": self.gate,
            "peak_rss_kib": self.peak_rss_kib,
        })
    }
}

pub(super) fn human(r: &Report<'_>, out: &mut Output) {
    let name = r.name();
    let from = r
        .first_ms
        .map(|t| format!(" from {}", rfc3339(t)))
        .unwrap_or_default();
    out.line(format!(
        "{name}: {} lines, {} requests over {}{from}, {} bad lines",
        r.lines,
        r.requests,
        crate::replay::report::secs(r.span_ms as f64 / 1000.0),
        r.bad_lines
    ));
    for b in &r.bad_shown {
        out.line(format!("  {}:{}: {}", b.file, b.line, b.message));
    }
    if r.bad_lines > r.bad_shown.len() as u64 {
        out.line(format!(
            "  … and {} more",
            r.bad_lines - r.bad_shown.len() as u64
        ));
    }
    if r.window != (None, None) {
        let end = |t: Option<i64>, none: &str| t.map_or_else(|| none.to_owned(), rfc3339);
        out.line(format!(
            "window: {} to {} (rows outside it skipped: {})",
            end(r.window.0, "the start"),
            end(r.window.1, "the end"),
            r.outside
        ));
    }
    if r.requests == 0 {
        out.line("no requests in the log: nothing to replay, no verdict to give");
    } else {
        let k = &r.rates;
        out.line(format!(
            "per-key rate (requests per minute, over the minutes a key was active): p50 {}, p99 {}, max {}; peak burst {} requests in one second ({}, {}){}",
            k.p50_per_minute,
            k.p99_per_minute,
            k.max_per_minute,
            k.peak_burst,
            k.peak_burst_key,
            rfc3339(k.peak_burst_at_ms),
            if k.at_least { " (at least)" } else { "" }
        ));
    }
    if r.clients != Clients::None {
        out.line(format!(
            "clients: {} (up to {} retries); the log's own {} retries (attempt > 0) dropped",
            clients_name(r.clients),
            r.max_retries,
            r.log_retries_dropped
        ));
    }
    for s in r.sides {
        side(s, out);
        client_lines(s, r.clients, out);
    }
    if let Some(a) = r.against {
        against(a, r.requests, out);
    }
    if let Some(g) = r.gate {
        out.line(g.human());
    }
    if let Some(kib) = r.peak_rss_kib {
        out.line(format!("peak memory: {:.1} MiB", kib as f64 / 1024.0));
    }
}

/// One side's lines.
fn side(s: &Side, out: &mut Output) {
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
    if t.overall.shadow_denied > 0 {
        out.line(format!(
            "  shadow policies would deny {} more (let through: not enforced)",
            t.overall.shadow_denied
        ));
    }
    for (name, c) in &t.policies {
        let shadow = if c.shadow_denied > 0 {
            format!("  would deny {:>10} (shadow)", c.shadow_denied)
        } else {
            String::new()
        };
        out.line(format!(
            "  {name:<24} allowed {:>10}  denied {:>10}{shadow}",
            c.allowed, c.denied
        ));
    }
    breakdown(t, out);
    let peak = t.minutes.iter().map(Bucket::breadth).fold(0.0, f64::max);
    out.line(format!("  peak deny breadth (per minute): {}", pct(peak)));
    let hardest = t.hardest(5);
    if !hardest.is_empty() {
        let list: Vec<String> = hardest.iter().map(|(k, n)| format!("{k} ({n})")).collect();
        out.line(format!("  hardest hit: {}", list.join(", ")));
    }
}

/// Rows of the breakdown shown for people (all are in the JSON).
const SHOWN_ROWS: usize = 10;

/// The policy × tier × route rows with the most denials (enforced or shadow).
fn breakdown(t: &Tally, out: &mut Output) {
    let mut rows: Vec<&(String, String, String, Counts)> = t
        .rows
        .iter()
        .filter(|r| r.3.denied + r.3.shadow_denied > 0)
        .collect();
    if rows.is_empty() {
        return;
    }
    rows.sort_by(|a, b| {
        (b.3.denied + b.3.shadow_denied)
            .cmp(&(a.3.denied + a.3.shadow_denied))
            .then_with(|| (&a.0, &a.1, &a.2).cmp(&(&b.0, &b.1, &b.2)))
    });
    out.line(format!(
        "  denials by policy × tier × route ({} of {} rows with denials):",
        rows.len().min(SHOWN_ROWS),
        rows.len()
    ));
    for (p, tier, route, c) in rows.into_iter().take(SHOWN_ROWS) {
        let shadow = if c.shadow_denied > 0 {
            format!(", would deny {} (shadow)", c.shadow_denied)
        } else {
            String::new()
        };
        out.line(format!(
            "    {p} × {} × {}: denied {} of {}{shadow}",
            if tier.is_empty() { "(no tier)" } else { tier },
            if route.is_empty() {
                "(no route)"
            } else {
                route
            },
            c.denied,
            c.allowed + c.denied
        ));
    }
}

fn clients_name(c: Clients) -> &'static str {
    match c {
        Clients::None => "none",
        Clients::RetryAfter => "retry-after",
        Clients::Backoff => "backoff",
        Clients::Naive => "naive",
    }
}

/// What the side's clients got, the log's own 429s, and the fleet beside it.
fn client_lines(s: &Side, model: Clients, out: &mut Output) {
    let c = &s.clients;
    if model != Clients::None {
        out.line(format!(
            "  customers' success: {} of {} requests got through (at once or on a retry), {} gave up",
            pct(c.success()),
            c.originals,
            c.gave_up
        ));
        out.line(format!(
            "  retry share of load: {} ({} retries over {} attempts){}",
            pct(c.retry_share()),
            c.retries,
            c.originals + c.retries,
            if c.dropped > 0 {
                format!("; {} retries dropped: too many waiting", c.dropped)
            } else {
                String::new()
            }
        ));
    }
    if c.log_429 > 0 {
        out.line(format!(
            "  the log's status column: the system then answered 429 to {} requests; this replay denies {} of them",
            c.log_429, c.log_429_denied
        ));
    }
    if let Some(f) = &s.fleet {
        let t = f.totals;
        let shared = s.tally.overall.allowed.max(1);
        out.line(format!(
            "  fleet of {} instances, a local limiter each (full quota, round-robin): allowed {}, denied {}, keys ever denied {} — {:.2}× the allowed of the one shared limit above",
            t.instances,
            t.allowed,
            t.denied,
            t.keys_ever_denied,
            t.allowed as f64 / shared as f64
        ));
    }
}

/// The comparison's lines.
fn against(a: &Against, requests: u64, out: &mut Output) {
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
    out.line(a.diff.to_string().trim_end());
    for f in &a.tightening_factors {
        out.line(format!(
            "  tightening: {}: {} → {}: {:.1}×",
            f.policy, f.from, f.to, f.factor
        ));
    }
    if a.guard.accepts {
        out.line("  the guard accepts the transition");
    }
    for e in &a.guard.errors {
        out.line(format!("  the guard refuses it: {e}"));
    }
    if let Some(r) = &a.rollout {
        out.line(if a.guard.accepts {
            "rollout, as it would have run from the first line:"
        } else {
            "rollout, as it would have run from the first line had the tightening been acknowledged:"
        });
        for e in &r.events {
            let what = match e.event {
                "staged" => format!("stage {} % of keys", e.percent),
                "complete" => "complete".to_owned(),
                _ => format!(
                    "halted at {} %{}: {}",
                    e.percent,
                    if e.reverted { " and reverted" } else { "" },
                    e.reason.as_deref().unwrap_or("")
                ),
            };
            out.line(format!("  {}: {what}", e.at));
        }
    } else if requests > 0 {
        out.line("rollout: not run: the rollout refused the documents");
    }
    if let Some(d) = &a.detector {
        out.line(format!("detector: {}", d.summary));
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
        title: format!("traffic replay: {}", r.name()),
        // Wall-clock (UTC) times on the axis: the first line's time of day.
        day_offset_secs: r
            .first_ms
            .map_or(0, |t| (t.div_euclid(1000)).rem_euclid(86_400) as u64),
        span_secs: (r.span_ms as f64 / 1000.0).max(60.0),
        top: ("allowed share of checks (per minute; UTC)", top),
        bottom: (
            "deny breadth: share of active keys mostly denied (per minute)",
            bottom,
        ),
        marks: marks.to_vec(),
    };
    charts::write(dir, "traffic.svg", &chart.svg())?;
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>tollgate replay: traffic</title>\
         <style>{}</style></head><body>\n<h1>traffic replay: {}</h1>\n",
        charts::html::STYLE,
        esc(&r.name())
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
