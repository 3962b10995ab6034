//! What an incident replay produces: two runs, their table rows, the notes and a verdict.

use serde::Serialize;

use super::sim::{Bucket, Mark};

/// One side of a replay: the naive limiter, or tollgate.
#[derive(Debug, Serialize)]
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
            naive,
            tollgate,
        }
    }

    /// A wall-clock label (`HH:MM:SS`) for `ms` since the run's start.
    pub(crate) fn clock(&self, ms: u64) -> String {
        clock_label(self.day_offset_secs, ms)
    }

    /// The table and the verdict, for people.
    pub(crate) fn human(&self) -> String {
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
        s.push_str(&table(&self.rows));
        s.push_str(&format!("\nverdict: {}\n", self.verdict));
        s
    }
}

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

/// The table rows as aligned text columns.
pub(crate) fn table(rows: &[Row]) -> String {
    let header = [
        "",
        "time to detect",
        "wrongful-denial minutes",
        "customer requests failed",
        "retry share of load",
        "heartbeat success",
    ];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.side.to_owned(),
                match r.time_to_detect_secs {
                    Some(s) => format!("{} ({})", secs(s), r.detected_by),
                    None => format!("never ({})", r.detected_by),
                },
                r.wrongful_denial_minutes.to_string(),
                pct(r.customer_requests_failed),
                pct(r.retry_share_of_load),
                r.heartbeat_success.map_or("n/a".to_owned(), pct),
            ]
        })
        .collect();
    let mut out = String::new();
    // Column by column: the header over each side's cell, so long detection notes stay
    // readable on an 80-column terminal.
    for (c, name) in header.iter().enumerate().skip(1) {
        out.push_str(&format!("  {name:<26}"));
        for row in &cells {
            out.push_str(&format!(" {:<9} {}", format!("{}:", row[0]), row[c]));
            out.push_str("\n                            ");
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
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
