//! SVG charts, written by hand; `index.html` in [`html`], the layout in [`layout`].
//!
//! Hand-written SVG rather than a plotting crate: the charts are two line panels and a few
//! marks, the output is byte-for-byte deterministic, the build gains no dependency, and no
//! font is needed to write them (text is left to the viewer's `sans-serif`, its widths
//! estimated on the wide side).
//!
//! Read as a person reads them: a y-axis narrowed to the data when the data spans little
//! (and saying so), lines kept off the frame, lines that coincide still told apart (widest
//! first, each later one narrower on top, the third dashed), marker numbers that never
//! overlap, time ticks on round clock times, and the incident's headline figures under the
//! title.

use std::fmt::Write as _;

use super::report::clock_label;
use super::sim::{Bucket, MINUTE};

pub(crate) mod html;
mod layout;

pub(crate) use html::{write, write_incidents};
pub(crate) use layout::wrap;
use layout::{place_labels, text_width, time_ticks, y_axis, Axis, Label};

const W: f64 = 960.0;
const PANEL_H: f64 = 200.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
/// Room between a panel's frame and its data: a line at 0 or 100 % is not drawn on the frame.
const PAD: f64 = 10.0;
/// Height of one lane of marker numbers, above the top panel.
const LANE_H: f64 = 13.0;
const MARK_SIZE: f64 = 10.0;
const TEXT_SIZE: f64 = 12.0;
const COLORS: [&str; 3] = ["#c0392b", "#1f6fb2", "#27ae60"];
/// Stroke width and dash of each series: the first drawn widest, each later one narrower on
/// top of it, the third dashed, so lines that coincide (tollgate's and the naive side's at
/// 100 %, the traffic replay's old document and its staged rollout) all stay visible.
const STROKES: [(f64, &str); 3] = [(4.0, ""), (2.0, ""), (1.6, "6 4")];

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

/// What a chart carries besides its lines: headline figures under the title, and a note
/// under the bottom panel's label (why its figure reads as it does).
#[derive(Debug, Default)]
pub(crate) struct Extras<'a> {
    pub(crate) headlines: Vec<Headline>,
    pub(crate) bottom_note: Option<&'a str>,
}

/// A figure with each series' value (`naive 72.7 %`), drawn in the series' colours.
#[derive(Debug)]
pub(crate) struct Headline {
    pub(crate) name: &'static str,
    /// Per series, in the chart's order: its name and value, as one string.
    pub(crate) values: Vec<String>,
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

/// Characters of `size` px text that fit the plot's width.
fn chars_across(size: f64) -> usize {
    ((W - LEFT - RIGHT) / (0.64 * size)) as usize
}

fn text(s: &mut String, x: f64, y: f64, attrs: &str, body: &str) {
    let _ = writeln!(
        s,
        r#"<text x="{x:.1}" y="{y:.1}"{attrs}>{}</text>"#,
        esc(body)
    );
}

impl Chart<'_> {
    /// The chart alone.
    pub(crate) fn svg(&self) -> String {
        self.svg_with(&Extras::default())
    }

    /// The chart with its headline figures and notes.
    pub(crate) fn svg_with(&self, extras: &Extras<'_>) -> String {
        let mut s = String::new();
        let mut y = 24.0;
        text(
            &mut s,
            LEFT,
            y,
            r#" font-size="16" font-weight="bold""#,
            &self.title,
        );
        y += 4.0;
        for h in &extras.headlines {
            y += 18.0;
            let _ = write!(
                s,
                r##"<text x="{LEFT}" y="{y:.1}" font-size="13" fill="#222">{}: "##,
                esc(h.name)
            );
            for (i, v) in h.values.iter().enumerate() {
                let _ = write!(
                    s,
                    r#"{}<tspan fill="{}" font-weight="bold">{}</tspan>"#,
                    if i > 0 { " vs " } else { "" },
                    COLORS[i % COLORS.len()],
                    esc(v)
                );
            }
            s.push_str("</text>\n");
        }
        y += 14.0;
        y = self.panel(&mut s, y, self.top.0, None, &self.top.1, true);
        y = self.panel(
            &mut s,
            y,
            self.bottom.0,
            extras.bottom_note,
            &self.bottom.1,
            false,
        );
        y = self.legend(&mut s, y);
        let h = (y + 12.0).ceil();
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\" font-family=\"sans-serif\" font-size=\"{TEXT_SIZE}\">\n\
             <rect width=\"{W}\" height=\"{h}\" fill=\"white\"/>\n{s}</svg>\n"
        )
    }

    fn x(&self, secs: f64) -> f64 {
        let span = self.span_secs.max(1.0);
        LEFT + (W - LEFT - RIGHT) * (secs / span).clamp(0.0, 1.0)
    }

    /// The boxes of the marker numbers, in lanes from `top`: pairwise disjoint.
    pub(crate) fn mark_labels(&self, top: f64) -> Vec<Label> {
        let xs: Vec<f64> = self.marks.iter().map(|m| self.x(m.0) + 2.0).collect();
        let ws: Vec<f64> = (1..=self.marks.len())
            .map(|n| text_width(&n.to_string(), MARK_SIZE) + 2.0)
            .collect();
        place_labels(&xs, &ws, top, LANE_H, W - RIGHT)
    }

    /// One panel from `y0`; returns where the next thing goes.
    fn panel(
        &self,
        s: &mut String,
        y0: f64,
        label: &str,
        note: Option<&str>,
        series: &[Series<'_>],
        numbered: bool,
    ) -> f64 {
        let axis = y_axis(
            series
                .iter()
                .flat_map(|l| l.points.iter().filter_map(|p| p.1)),
        );
        let mut y = y0 + 12.0;
        let label = if axis.zoomed() {
            format!("{label} — axis {}, zoomed to the data", axis.range_label())
        } else {
            label.to_owned()
        };
        text(s, LEFT, y, "", &label);
        if let Some(note) = note {
            for line in wrap(note, chars_across(11.0)) {
                y += 14.0;
                text(s, LEFT, y, r##" font-size="11" fill="#555""##, &line);
            }
        }
        y += 6.0;
        // The marker numbers, in lanes above the top panel; each marker's line starts under
        // its number, so a number far up its lane still points at its line.
        let labels = if numbered {
            self.mark_labels(y)
        } else {
            Vec::new()
        };
        let lanes = labels.iter().map(|l| l.lane + 1).max().unwrap_or(0);
        let top = y + lanes as f64 * LANE_H + if lanes > 0 { 3.0 } else { 0.0 };
        let bottom = top + PANEL_H;
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{top:.1}" width="{}" height="{PANEL_H}" fill="none" stroke="#999"/>"##,
            W - LEFT - RIGHT
        );
        let vy = |v: f64| bottom - PAD - (PANEL_H - 2.0 * PAD) * axis.frac(v);
        self.y_ticks(s, &axis, vy);
        self.time_ticks(s, top, bottom);
        for (n, (mx, side, _)) in self.marks.iter().enumerate() {
            let color = COLORS[side % COLORS.len()];
            let from = match labels.get(n) {
                Some(l) => {
                    text(
                        s,
                        l.x,
                        l.y + LANE_H - 3.0,
                        &format!(r#" fill="{color}" font-size="{MARK_SIZE}""#),
                        &(n + 1).to_string(),
                    );
                    l.y + LANE_H - 1.0
                }
                None => top,
            };
            let _ = writeln!(
                s,
                r#"<line x1="{0:.1}" y1="{from:.1}" x2="{0:.1}" y2="{bottom:.1}" stroke="{color}" stroke-dasharray="4 3" opacity="0.7"/>"#,
                self.x(*mx),
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
                            vy(v)
                        );
                        pen = true;
                    }
                    None => pen = false,
                }
            }
            let _ = writeln!(
                s,
                r#"<path d="{}" fill="none" {}/>"#,
                d.trim_end(),
                stroke(i)
            );
        }
        bottom + 44.0
    }

    fn y_ticks(&self, s: &mut String, axis: &Axis, vy: impl Fn(f64) -> f64) {
        for v in axis.ticks() {
            let y = vy(v);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{} %</text>"##,
                W - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                (v * 1000.0).round() / 10.0
            );
        }
    }

    /// Round wall-clock ticks, with light grid lines.
    fn time_ticks(&self, s: &mut String, top: f64, bottom: f64) {
        let (step, ticks) = time_ticks(self.day_offset_secs, self.span_secs, 10);
        for t in ticks {
            let label = clock_label(self.day_offset_secs, (t * 1000.0) as u64);
            let label = if step % 60 == 0 { &label[..5] } else { &label };
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{top:.1}" x2="{0:.1}" y2="{bottom:.1}" stroke="#f2f2f2"/><line x1="{0:.1}" y1="{bottom:.1}" x2="{0:.1}" y2="{1:.1}" stroke="#999"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{label}</text>"##,
                self.x(t),
                bottom + 4.0,
                bottom + 18.0,
            );
        }
    }

    /// The series' legend, then the numbered marks, wrapped to the chart's width.
    fn legend(&self, s: &mut String, y0: f64) -> f64 {
        let mut x = LEFT;
        for (i, name) in self.top.1.iter().map(|l| l.name).enumerate() {
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{y0}" x2="{:.1}" y2="{y0}" {}/>"#,
                x + 28.0,
                stroke(i)
            );
            text(s, x + 34.0, y0 + 4.0, "", name);
            x += 34.0 + text_width(name, TEXT_SIZE) + 24.0;
        }
        let mut y = y0 + 6.0;
        for (n, (at, side, what)) in self.marks.iter().enumerate() {
            let line = format!(
                "{}. {} {what}",
                n + 1,
                clock_label(self.day_offset_secs, (at * 1000.0) as u64),
            );
            let color = format!(r#" fill="{}""#, COLORS[side % COLORS.len()]);
            for (k, part) in wrap(&line, chars_across(TEXT_SIZE) - 4).iter().enumerate() {
                y += 16.0;
                let indent = if k == 0 { 0.0 } else { 24.0 };
                text(s, LEFT + indent, y, &color, part);
            }
        }
        y
    }
}

/// The stroke attributes of series `i`.
fn stroke(i: usize) -> String {
    let (width, dash) = STROKES[i % STROKES.len()];
    let dash = if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    };
    format!(
        r#"stroke="{}" stroke-width="{width}" stroke-linejoin="round"{dash}"#,
        COLORS[i % COLORS.len()]
    )
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

#[cfg(test)]
mod tests;
