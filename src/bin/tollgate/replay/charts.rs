//! SVG charts and `index.html`, written by hand.
//!
//! Hand-written SVG rather than a plotting crate: the charts are two line panels and a few
//! marks, the output is byte-for-byte deterministic, the build gains no dependency, and no
//! font is needed to write them (text is left to the viewer's `sans-serif`).

use std::fmt::Write as _;
use std::path::Path;

use super::report::{clock_label, pct, secs, table, Incident, Row};
use super::sim::{Bucket, MINUTE};
use super::ReplayError;

const W: f64 = 960.0;
const PANEL_H: f64 = 200.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const COLORS: [&str; 3] = ["#c0392b", "#1f6fb2", "#27ae60"];

/// One line on a chart.
pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    /// `(x in seconds since the start, y in 0..=1)`; `None` leaves a gap.
    pub(crate) points: Vec<(f64, Option<f64>)>,
}

/// A two-panel chart: success rate on top, deny breadth below, with marks.
pub(crate) struct Chart<'a> {
    pub(crate) title: String,
    pub(crate) day_offset_secs: u64,
    pub(crate) span_secs: f64,
    pub(crate) top: (&'a str, Vec<Series<'a>>),
    pub(crate) bottom: (&'a str, Vec<Series<'a>>),
    /// `(x seconds, series index, text)`.
    pub(crate) marks: Vec<(f64, usize, String)>,
}

/// Escapes text for XML and HTML.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

impl Chart<'_> {
    pub(crate) fn svg(&self) -> String {
        let legend_h = 16.0 * (self.marks.len() as f64) + 30.0;
        let h = 60.0 + 2.0 * (PANEL_H + 50.0) + legend_h;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
            esc(&self.title)
        );
        let mut y0 = 50.0;
        for (label, series) in [&self.top, &self.bottom] {
            self.panel(&mut s, y0, label, series);
            y0 += PANEL_H + 50.0;
        }
        // The legend of the series, then the numbered marks.
        let mut ly = y0;
        for (i, name) in self.top.1.iter().map(|x| x.name).enumerate() {
            let lx = LEFT + 160.0 * i as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                lx + 24.0,
                COLORS[i % COLORS.len()],
                lx + 30.0,
                ly + 4.0,
                esc(name)
            );
        }
        ly += 22.0;
        for (n, (x, side, text)) in self.marks.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<text x="{LEFT}" y="{ly}" fill="{}">{}. {} {}</text>"#,
                COLORS[side % COLORS.len()],
                n + 1,
                clock_label(self.day_offset_secs, (*x * 1000.0) as u64),
                esc(text)
            );
            ly += 16.0;
        }
        s.push_str("</svg>\n");
        s
    }

    fn x(&self, secs: f64) -> f64 {
        let span = self.span_secs.max(1.0);
        LEFT + (W - LEFT - RIGHT) * (secs / span).clamp(0.0, 1.0)
    }

    fn panel(&self, s: &mut String, y0: f64, label: &str, series: &[Series<'_>]) {
        let y = |v: f64| y0 + PANEL_H * (1.0 - v.clamp(0.0, 1.0));
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y0}" width="{}" height="{PANEL_H}" fill="none" stroke="#999"/>"##,
            W - LEFT - RIGHT
        );
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{}">{}</text>"#,
            y0 - 6.0,
            esc(label)
        );
        for v in [0.0, 0.25, 0.5, 0.75, 1.0] {
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#eee"/><text x="{2}" y="{3}" text-anchor="end">{4:.0} %</text>"##,
                y(v),
                W - RIGHT,
                LEFT - 6.0,
                y(v) + 4.0,
                v * 100.0
            );
        }
        // Time ticks: about eight, on whole minutes.
        let step = ((self.span_secs / 60.0 / 8.0).ceil().max(1.0)) * 60.0;
        let mut t = 0.0;
        while t <= self.span_secs {
            let _ = writeln!(
                s,
                r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#999"/><text x="{0}" y="{3}" text-anchor="middle">{4}</text>"##,
                self.x(t),
                y0 + PANEL_H,
                y0 + PANEL_H + 4.0,
                y0 + PANEL_H + 18.0,
                &clock_label(self.day_offset_secs, (t * 1000.0) as u64)[..5]
            );
            t += step;
        }
        for (n, (mx, side, _)) in self.marks.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<line x1="{0}" y1="{y0}" x2="{0}" y2="{1}" stroke="{2}" stroke-dasharray="4 3" opacity="0.7"/><text x="{3}" y="{4}" fill="{2}" font-size="10">{5}</text>"#,
                self.x(*mx),
                y0 + PANEL_H,
                COLORS[side % COLORS.len()],
                self.x(*mx) + 2.0,
                y0 + 12.0 + 11.0 * (*side as f64),
                n + 1
            );
        }
        for (i, line) in series.iter().enumerate() {
            let mut d = String::new();
            let mut pen = false;
            for &(px, py) in &line.points {
                match py {
                    Some(v) => {
                        let _ = write!(
                            d,
                            "{}{:.1},{:.1} ",
                            if pen { "L" } else { "M" },
                            self.x(px),
                            y(v)
                        );
                        pen = true;
                    }
                    None => pen = false,
                }
            }
            let _ = writeln!(
                s,
                r#"<path d="{}" fill="none" stroke="{}" stroke-width="1.6"/>"#,
                d.trim_end(),
                COLORS[i % COLORS.len()]
            );
        }
    }
}

/// A series from per-minute buckets, each plotted at its minute's middle.
pub(crate) fn per_minute<'a>(
    name: &'a str,
    buckets: &[Bucket],
    f: impl Fn(&Bucket) -> Option<f64>,
) -> Series<'a> {
    let points = buckets
        .iter()
        .enumerate()
        .map(|(i, b)| ((i as f64 + 0.5) * (MINUTE / 1000) as f64, f(b)))
        .collect();
    Series { name, points }
}

/// The chart of one incident.
fn incident_chart(r: &Incident) -> Chart<'_> {
    let runs = [&r.naive, &r.tollgate];
    let span = runs.iter().map(|run| run.buckets.len()).max().unwrap_or(0) as f64 * 60.0;
    let mut marks: Vec<(f64, usize, String)> = runs
        .iter()
        .enumerate()
        .flat_map(|(i, run)| {
            run.marks
                .iter()
                .map(move |m| (m.at_secs, i, format!("{}: {}", run.label, m.text)))
        })
        .collect();
    marks.sort_by(|a, b| a.0.total_cmp(&b.0));
    Chart {
        title: format!("incident {}: {}", r.id, r.title),
        day_offset_secs: r.day_offset_secs,
        span_secs: span,
        top: (
            "customer success rate (per minute)",
            runs.iter()
                .map(|run| per_minute(run.label, &run.buckets, Bucket::success_rate))
                .collect(),
        ),
        bottom: (
            "deny breadth: share of active keys mostly denied (per minute)",
            runs.iter()
                .map(|run| per_minute(run.label, &run.buckets, |b| Some(b.breadth())))
                .collect(),
        ),
        marks,
    }
}

/// An HTML table of rows.
pub(crate) fn html_table(rows: &[Row]) -> String {
    let mut s = String::from(
        "<table><tr><th></th><th>time to detect</th><th>wrongful-denial minutes</th>\
         <th>customer requests failed</th><th>retry share of load</th><th>heartbeat success</th></tr>\n",
    );
    for r in rows {
        let detect = match r.time_to_detect_secs {
            Some(t) => format!("{} ({})", secs(t), r.detected_by),
            None => format!("never ({})", r.detected_by),
        };
        let _ = writeln!(
            s,
            "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(r.side),
            esc(&detect),
            r.wrongful_denial_minutes,
            pct(r.customer_requests_failed),
            pct(r.retry_share_of_load),
            r.heartbeat_success.map_or("n/a".to_owned(), pct)
        );
    }
    s.push_str("</table>\n");
    s
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1000px;margin:2em auto}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}";

/// Writes a file, creating the directory.
pub(crate) fn write(dir: &Path, name: &str, text: &str) -> Result<(), ReplayError> {
    std::fs::create_dir_all(dir).map_err(|e| ReplayError::io("create", dir, e))?;
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| ReplayError::io("write", &path, e))
}

/// Writes one SVG per incident and `index.html`; returns the number of files written.
pub(crate) fn write_incidents(dir: &Path, replays: &[Incident]) -> Result<usize, ReplayError> {
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>tollgate replay</title>\
         <style>{STYLE}</style></head><body>\n<h1>tollgate replay: the incidents</h1>\n"
    );
    for r in replays {
        let name = format!("incident-{}.svg", r.id);
        write(dir, &name, &incident_chart(r).svg())?;
        let _ = writeln!(
            html,
            "<h2>{} — {}</h2>\n<p>{}</p>\n<ul><li>naive: {}</li><li>tollgate: {}</li></ul>\n<pre>{}</pre>\n{}<p><b>verdict:</b> {}</p>\n<img src=\"{name}\" alt=\"incident {} chart\">",
            esc(r.id),
            esc(r.title),
            esc(r.source),
            esc(&r.naive.setup),
            esc(&r.tollgate.setup),
            esc(&r.notes.join("\n")),
            html_table(&r.rows),
            esc(&r.verdict),
            esc(r.id),
        );
    }
    let _ = writeln!(html, "<h2>as text</h2><pre>");
    for r in replays {
        html.push_str(&esc(&table(&r.rows)));
        html.push('\n');
    }
    html.push_str("</pre></body></html>\n");
    write(dir, "index.html", &html)?;
    Ok(replays.len() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc(r#"a<b & "c"'"#), "a&lt;b &amp; &quot;c&quot;&#39;");
    }

    #[test]
    fn a_chart_has_its_lines_and_marks() {
        let chart = Chart {
            title: "t <1>".to_owned(),
            day_offset_secs: 0,
            span_secs: 120.0,
            top: (
                "top",
                vec![Series {
                    name: "a",
                    points: vec![(0.0, Some(1.0)), (60.0, None), (90.0, Some(0.5))],
                }],
            ),
            bottom: ("bottom", vec![]),
            marks: vec![(30.0, 0, "x & y".to_owned())],
        };
        let svg = chart.svg();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("t &lt;1&gt;") && svg.contains("x &amp; y"));
        // The gap at 60 s lifts the pen: two moves, no line across it.
        let path = svg
            .lines()
            .find(|l| l.starts_with("<path"))
            .unwrap_or_default(); // test
        assert_eq!(path.matches('M').count(), 2);
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
