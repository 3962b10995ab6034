//! What an incident replay produces: two runs, their table rows, the notes and a verdict.

use serde::Serialize;

use super::charts::Headline;
use super::sim::{Bucket, Mark};

/// One side of a replay: the naive limiter, or tollgate.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Run {
    /// "naive" or "tollgate".
    pub(crate) label: &'static str,
    /// What the side is, in a line.
    pub(crate) setup: String,
    /// Per minute.
    pub(crate) buckets: Vec<Bucket>,
    /// Detections, rollout decisions, mitigations.
    pub(crate) marks: Vec<Mark>,
    /// When the side's own signals first said something was wrong, in ms since the run's
    /// start, and what said it.
    pub(crate) detected_at_ms: Option<u64>,
    pub(crate) detected_by: String,
    /// The side kept the fault from taking hold (there was nothing to detect): its
    /// `detected_at_ms` is when its guard first acted.
    pub(crate) prevented: bool,
    /// Leader elections, where the incident has leaders (003).
    pub(crate) elections: Option<u64>,
    /// Recovery data still to copy when the run ends, where the incident recovers (003).
    pub(crate) backlog_left_bytes: Option<u64>,
}

/// One row of an incident's table.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) side: &'static str,
    /// Seconds from the fault to the first signal; `None` when nothing fired.
    pub(crate) time_to_detect_secs: Option<f64>,
    pub(crate) detected_by: String,
    /// Minutes in which more than 1 % of in-contract original requests were denied or lost.
    pub(crate) wrongful_denial_minutes: u64,
    /// Customer requests that failed, over all customer requests.
    pub(crate) customer_requests_failed: f64,
    /// Retries over all attempts.
    pub(crate) retry_share_of_load: f64,
    /// Heartbeats delivered on time, where the incident has heartbeats.
    pub(crate) heartbeat_success: Option<f64>,
    /// The side prevented the fault rather than detected it (`time_to_detect_secs` is then
    /// when its guard first acted).
    pub(crate) prevented: bool,
    /// Leader elections, where the incident has leaders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leader_elections: Option<u64>,
    /// Recovery data still to copy at the end, in GB (10^9 bytes), where the incident recovers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) recovery_backlog_left_gb: Option<f64>,
}

/// A wrongful-denial minute: more than this share of in-contract originals denied or lost.
pub(crate) const WRONGFUL_MINUTE: f64 = 0.01;

impl Run {
    pub(crate) fn row(&self, fault_at_ms: u64) -> Row {
        let sum = |f: fn(&Bucket) -> u64| self.buckets.iter().map(f).sum::<u64>();
        let share = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let hb = sum(|b| b.heartbeats);
        Row {
            side: self.label,
            time_to_detect_secs: self
                .detected_at_ms
                .map(|t| t.saturating_sub(fault_at_ms) as f64 / 1000.0),
            detected_by: self.detected_by.clone(),
            wrongful_denial_minutes: self
                .buckets
                .iter()
                .filter(|b| b.wrongful_share() > WRONGFUL_MINUTE)
                .count() as u64,
            customer_requests_failed: share(sum(|b| b.failed), sum(|b| b.requests)),
            retry_share_of_load: share(sum(|b| b.retries), sum(|b| b.attempts)),
            heartbeat_success: (hb > 0).then(|| share(sum(|b| b.heartbeats_ok), hb)),
            prevented: self.prevented,
            leader_elections: self.elections,
            recovery_backlog_left_gb: self.backlog_left_bytes.map(|b| b as f64 / 1e9),
        }
    }
}

/// A replayed incident.
#[derive(Debug, Serialize)]
pub(crate) struct Incident {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    /// The outage modelled, in a line: whose system, what happened, how long.
    pub(crate) source: &'static str,
    /// Wall-clock time of day at the run's start, in seconds (for the axis labels).
    pub(crate) day_offset_secs: u64,
    /// When the fault begins, in ms since the run's start.
    pub(crate) fault_at_ms: u64,
    pub(crate) seed: u64,
    /// What tollgate said on the way (validation messages, the diff, the rollout).
    pub(crate) notes: Vec<String>,
    pub(crate) rows: Vec<Row>,
    pub(crate) verdict: String,
    /// Why the chart's deny breadth reads as it does, where it needs a word.
    pub(crate) breadth_note: Option<&'static str>,
    pub(crate) naive: Run,
    pub(crate) tollgate: Run,
}

impl Incident {
    pub(crate) fn new(
        head: (&'static str, &'static str, &'static str),
        (day_offset_secs, fault_at_ms, seed): (u64, u64, u64),
        notes: Vec<String>,
        naive: Run,
        tollgate: Run,
        verdict: impl FnOnce(&Row, &Row) -> String,
    ) -> Incident {
        let rows = vec![naive.row(fault_at_ms), tollgate.row(fault_at_ms)];
        let verdict = verdict(&rows[0], &rows[1]);
        Incident {
            id: head.0,
            title: head.1,
            source: head.2,
            day_offset_secs,
            fault_at_ms,
            seed,
            notes,
            rows,
            verdict,
            breadth_note: None,
            naive,
            tollgate,
        }
    }

    /// A wall-clock label (`HH:MM:SS`) for `ms` since the run's start.
    pub(crate) fn clock(&self, ms: u64) -> String {
        clock_label(self.day_offset_secs, ms)
    }

    /// The figures a chart carries under its title, each with both sides: the incident's
    /// own first (003's heartbeats and elections), then the ones every incident has.
    pub(crate) fn headlines(&self) -> Vec<Headline> {
        const ORDER: [&str; 6] = [
            "heartbeats delivered",
            "leader elections",
            "wrongful-denial minutes",
            "customer requests failed",
            "retry share of load",
            "recovery backlog left",
        ];
        let shown = shown(&self.rows);
        ORDER
            .iter()
            .filter_map(|name| shown.iter().find(|(m, _)| m.name == *name))
            .map(|(m, cells)| Headline {
                // A cost reads as a loss on a chart unless it says whose price it is.
                name: if m.name == "recovery backlog left" {
                    "recovery backlog left at the end (the price of holding it back)"
                } else {
                    m.name
                },
                values: self
                    .rows
                    .iter()
                    .zip(cells)
                    .map(|(r, c)| format!("{} {}", r.side, c.as_deref().unwrap_or("–")))
                    .collect(),
            })
            .collect()
    }

    /// The table and the verdict, for people; figures not in `explained` are explained.
    pub(crate) fn human(&self, explained: &mut Vec<&'static str>) -> String {
        let mut s = format!(
            "== incident {}: {}\n   ({}; seed {}; fault at {})\n",
            self.id,
            self.title,
            self.source,
            self.seed,
            self.clock(self.fault_at_ms)
        );
        for note in &self.notes {
            s.push_str("   ");
            s.push_str(&note.replace('\n', "\n     "));
            s.push('\n');
        }
        s.push('\n');
        s.push_str(&table(&self.rows, explained));
        s.push_str(&format!("\nverdict: {}\n", self.verdict));
        s
    }
}

/// The last lines of an incident run: what to try next.
pub(crate) const NEXT_STEP: &str = "next: replay your own access log against your limits, and \
see who a change would deny:
  tollgate replay --traffic access.csv --limits limits.toml --against new-limits.toml
  (CSV with a header, or JSON lines: a timestamp and a key per request; the columns are in
  `tollgate replay --help`; `tollgate replay --generate sample.csv` writes a sample log)";

pub(crate) fn clock_label(day_offset_secs: u64, ms: u64) -> String {
    let t = (day_offset_secs + ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
}

/// `0.123` as `12.3 %`.
pub(crate) fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

/// A duration in seconds, for people: `38 s`, `24 min 10 s`.
pub(crate) fn secs(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1} s")
    } else {
        let s = s.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

/// `62533` as `62,533`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One figure of the table: its name, what it means (printed with it: the reader of a
/// table has no glossary at hand), and each side's cell, `None` where the incident does not
/// have it (a row with no cell at all is left out).
pub(crate) struct Metric {
    pub(crate) name: &'static str,
    pub(crate) explain: &'static str,
    pub(crate) cell: fn(&Row) -> Option<String>,
}

fn detect_cell(r: &Row) -> Option<String> {
    Some(match (r.prevented, r.time_to_detect_secs) {
        (true, _) => format!("prevented, nothing to detect ({})", r.detected_by),
        (false, Some(s)) => format!("{} ({})", secs(s), r.detected_by),
        (false, None) => format!("never ({})", r.detected_by),
    })
}

/// The table's figures, in order.
pub(crate) const METRICS: [Metric; 7] = [
    Metric {
        name: "time to detect",
        explain: "from the fault to the side's own first signal",
        cell: detect_cell,
    },
    Metric {
        name: "wrongful-denial minutes",
        explain: "minutes in which more than 1 % of the requests within their quota were \
                  denied or lost",
        cell: |r| Some(r.wrongful_denial_minutes.to_string()),
    },
    Metric {
        name: "customer requests failed",
        explain: "not served, or served after the client gave up",
        cell: |r| Some(pct(r.customer_requests_failed)),
    },
    Metric {
        name: "retry share of load",
        explain: "retries over all attempts: the load retrying adds",
        cell: |r| Some(pct(r.retry_share_of_load)),
    },
    Metric {
        name: "heartbeats delivered",
        explain: "on time; a partition that misses 4 in a row elects a new leader",
        cell: |r| r.heartbeat_success.map(pct),
    },
    Metric {
        name: "leader elections",
        explain: "each refuses the partition's writes for 5 s",
        cell: |r| r.leader_elections.map(thousands),
    },
    Metric {
        name: "recovery backlog left",
        explain: "replica data still to copy when the replay ends",
        cell: |r| {
            r.recovery_backlog_left_gb
                .map(|gb| format!("{} GB", thousands(gb.round() as u64)))
        },
    },
];

/// The metrics with a cell on some side, and their cells.
pub(crate) fn shown(rows: &[Row]) -> Vec<(&'static Metric, Vec<Option<String>>)> {
    METRICS
        .iter()
        .map(|m| (m, rows.iter().map(|r| (m.cell)(r)).collect::<Vec<_>>()))
        .filter(|(_, cells)| cells.iter().any(Option::is_some))
        .collect()
}

/// Width of the name column, and where the side's cells start.
const NAME_W: usize = 26;
const CELL_AT: usize = 2 + NAME_W + 1;

/// The table rows as aligned text: per figure, the header over each side's cell (so long
/// detection notes stay readable on an 80-column terminal), then what the figure means, the
/// first time it appears (`explained` holds the figures explained so far).
pub(crate) fn table(rows: &[Row], explained: &mut Vec<&'static str>) -> String {
    let mut out = String::new();
    for (m, cells) in shown(rows) {
        for (i, (r, cell)) in rows.iter().zip(&cells).enumerate() {
            let name = if i == 0 { m.name } else { "" };
            let side = format!("{}:", r.side);
            let cell = cell.as_deref().unwrap_or("–");
            out.push_str(&format!("  {name:<NAME_W$} {side:<9} {cell}\n"));
        }
        if !explained.contains(&m.name) {
            explained.push(m.name);
            for line in super::charts::wrap(&format!("({})", m.explain), 80 - CELL_AT) {
                out.push_str(&format!("{:CELL_AT$}{line}\n", ""));
            }
        }
    }
    out
}

/// What `tollgate replay` prints for the incidents: each one's notes, table and verdict, then
/// where the charts went and what to do next.
pub(crate) fn human(replays: &[Incident], charts: &str) -> String {
    let mut explained = Vec::new();
    let mut s = String::new();
    for r in replays {
        s.push_str(&r.human(&mut explained));
        s.push('\n');
    }
    s.push_str(&format!("charts: {charts}\n\n{NEXT_STEP}"));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::sim::MINUTE;

    #[test]
    fn labels_read_as_wall_clock_time() {
        assert_eq!(clock_label(8 * 3600 + 11 * 60, 6 * MINUTE), "08:17:00");
        assert_eq!(clock_label(23 * 3600 + 59 * 60, 2 * MINUTE), "00:01:00");
        assert_eq!(secs(38.04), "38.0 s");
        assert_eq!(secs(1_450.0), "24 min 10 s");
        assert_eq!(pct(0.4567), "45.7 %");
    }
}
