//! Where things go on a chart: the y-axis range, round time ticks, marker labels that never
//! overlap, and text wrapped to a width.
//!
//! No font is measured (the SVG leaves text to the viewer's `sans-serif`), so widths are
//! estimated on the wide side: DejaVu Sans, the usual fallback, averages under 0.6 em a
//! character and its digits are 0.64 em.

/// Estimated width of `text` at `size` px, wide enough for the common sans-serif fonts.
pub(crate) fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * 0.64 * size
}

/// `text` cut into lines of at most `chars` characters, at spaces (a longer word gets a
/// line of its own).
pub(crate) fn wrap(text: &str, chars: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > chars {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// A panel's y-axis, in basis points of a share (0 to 10,000): integers, so the ticks land
/// exactly on round values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Axis {
    pub(crate) lo: u32,
    pub(crate) hi: u32,
    pub(crate) step: u32,
}

impl Axis {
    /// The whole range, 0 to 100 %.
    pub(crate) const FULL: Axis = Axis {
        lo: 0,
        hi: 10_000,
        step: 2_500,
    };

    /// Whether the axis shows less than 0 to 100 %.
    pub(crate) fn zoomed(&self) -> bool {
        *self != Axis::FULL
    }

    /// Where `v` (a share, 0 to 1) falls on the axis, from 0 (its bottom) to 1 (its top).
    pub(crate) fn frac(&self, v: f64) -> f64 {
        let (lo, hi) = (f64::from(self.lo) / 1e4, f64::from(self.hi) / 1e4);
        ((v - lo) / (hi - lo).max(1e-9)).clamp(0.0, 1.0)
    }

    /// The ticks, as shares.
    pub(crate) fn ticks(&self) -> impl Iterator<Item = f64> + '_ {
        (self.lo..=self.hi)
            .step_by(self.step.max(1) as usize)
            .map(|bp| f64::from(bp) / 1e4)
    }

    /// `88–100 %`.
    pub(crate) fn range_label(&self) -> String {
        format!("{}–{} %", pct_bp(self.lo), pct_bp(self.hi))
    }
}

fn pct_bp(bp: u32) -> String {
    if bp % 100 == 0 {
        (bp / 100).to_string()
    } else {
        format!("{:.1}", f64::from(bp) / 100.0)
    }
}

/// Tick steps of a narrowed axis, in basis points.
const Y_STEPS: [u32; 6] = [100, 200, 500, 1_000, 2_000, 2_500];

/// The y-axis for shares `values`: 0 to 100 % when the data spans much of it (or nothing at
/// all: a flat line is read best against the whole range), else a range around the data, on
/// round ticks, with a sixth of the data's span of room below and above it, so a dip of 100 →
/// 90 % fills the panel instead of a sliver.
pub(crate) fn y_axis(values: impl IntoIterator<Item = f64>) -> Axis {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        let v = v.clamp(0.0, 1.0);
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let span = hi - lo;
    if !(span > 1e-6 && span < 0.4) {
        return Axis::FULL;
    }
    let want_lo = ((lo - span / 6.0).max(0.0) * 1e4).floor() as u32;
    let want_hi = ((hi + span / 6.0).min(1.0) * 1e4).ceil() as u32;
    for step in Y_STEPS {
        let a = want_lo / step * step;
        let b = want_hi.div_ceil(step).saturating_mul(step).min(10_000);
        if (b - a) / step <= 6 {
            return Axis { lo: a, hi: b, step };
        }
    }
    Axis::FULL
}

/// Time-tick steps, in seconds: round to a person reading a clock.
const T_STEPS: [u64; 20] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200,
    86_400, 172_800, 604_800,
];

/// Round time ticks over `span_secs` of a run that starts `day_offset_secs` into the day: the
/// smallest step of [`T_STEPS`] that gives at most `max` ticks, on wall-clock multiples of
/// the step (08:30, 09:00, … not 08:11, 08:40, …). Returns the step and the ticks, in
/// seconds since the run's start.
pub(crate) fn time_ticks(day_offset_secs: u64, span_secs: f64, max: usize) -> (u64, Vec<f64>) {
    let span = span_secs.max(0.0);
    let step = T_STEPS
        .into_iter()
        .find(|&s| span / s as f64 + 1.0 <= max as f64)
        .unwrap_or(T_STEPS[T_STEPS.len() - 1]);
    let first = (step - day_offset_secs % step) % step;
    let ticks = (0..)
        .map(|i| (first + i * step) as f64)
        .take_while(|&t| t <= span)
        .collect();
    (step, ticks)
}

/// A placed label: its box, in chart pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Label {
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) w: f64,
    pub(crate) h: f64,
    /// The lane (row) it went to, from the top.
    pub(crate) lane: usize,
}

impl Label {
    /// Whether two boxes share any area (what the layout tests check).
    #[cfg(test)]
    pub(crate) fn overlaps(&self, o: &Label) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }
}

/// Room kept between two labels in one lane.
const LABEL_GAP: f64 = 3.0;

/// Places labels of widths `widths`, each wanted with its left edge at `xs[i]`, in lanes of
/// height `h` starting at `top`: each goes to the first lane where it clears every label
/// already there, and is moved left when it would cross `right`. No two boxes overlap,
/// however close the marks are (marks at the same second go one above the other).
pub(crate) fn place_labels(xs: &[f64], widths: &[f64], top: f64, h: f64, right: f64) -> Vec<Label> {
    let mut lanes: Vec<Vec<(f64, f64)>> = Vec::new();
    xs.iter()
        .zip(widths)
        .map(|(&x, &w)| {
            let x = x.min(right - w);
            let clear = |lane: &Vec<(f64, f64)>| {
                lane.iter()
                    .all(|&(l, r)| x + w + LABEL_GAP <= l || r + LABEL_GAP <= x)
            };
            let lane = match lanes.iter().position(clear) {
                Some(i) => i,
                None => {
                    lanes.push(Vec::new());
                    lanes.len() - 1
                }
            };
            lanes[lane].push((x, x + w));
            Label {
                x,
                y: top + lane as f64 * h,
                w,
                h,
                lane,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_dip_gets_an_axis_around_it() {
        // 001: success 100 → 90 %: 88–100 % on 2 % ticks, not a sliver of 0–100 %.
        let a = y_axis([1.0, 1.0, 0.9035, 0.9035, 1.0]);
        assert_eq!(
            a,
            Axis {
                lo: 8_800,
                hi: 10_000,
                step: 200
            }
        );
        assert!(a.zoomed());
        assert_eq!(a.range_label(), "88–100 %");
        assert!(a.frac(0.9035) > 0.1 && a.frac(0.9035) < 0.2);
        // Wide data, and flat data, keep the whole range.
        assert_eq!(y_axis([0.35, 1.0]), Axis::FULL);
        assert_eq!(y_axis([1.0, 1.0]), Axis::FULL);
        assert_eq!(y_axis([]), Axis::FULL);
        // Small shares near 0: 0 to a few percent.
        let a = y_axis([0.0, 0.01, 0.03]);
        assert_eq!((a.lo, a.hi), (0, 400));
        // Every tick is round and inside the axis.
        for a in [
            y_axis([0.55, 0.9]),
            y_axis([0.97, 0.99]),
            y_axis([0.2, 0.25]),
        ] {
            assert!(a.lo < a.hi && a.hi <= 10_000, "{a:?}");
            assert!((a.hi - a.lo) / a.step <= 6 && a.lo % a.step == 0, "{a:?}");
        }
    }

    #[test]
    fn time_ticks_fall_on_round_clock_times() {
        let allowed = [60, 120, 300, 600, 900, 1_800, 3_600];
        // 000: 08:11 for 229 minutes: every 30 min, from 08:30.
        let (step, ticks) = time_ticks(8 * 3600 + 11 * 60, 229.0 * 60.0, 10);
        assert_eq!(step, 1_800);
        assert_eq!(ticks[0], 19.0 * 60.0);
        assert_eq!(ticks.len(), 8); // 08:30 to 12:00
                                    // 001 (13:07, 60 min) and 003 (14:03, 78 min): every 10 min.
        assert_eq!(time_ticks(13 * 3600 + 7 * 60, 3_600.0, 10).0, 600);
        assert_eq!(time_ticks(14 * 3600 + 3 * 60, 78.0 * 60.0, 10).0, 600);
        for (offset, span) in [(0, 90.0), (123, 3_000.0), (8 * 3600, 86_400.0), (0, 30.0)] {
            let (step, ticks) = time_ticks(offset, span, 10);
            assert!(T_STEPS.contains(&step), "{step}");
            assert!(
                span < 600.0 || allowed.contains(&step) || step >= 3_600,
                "{step}"
            );
            assert!(!ticks.is_empty() && ticks.len() <= 10, "{ticks:?}");
            for t in ticks {
                assert_eq!((offset + t as u64) % step, 0, "{t} on step {step}");
                assert!(t <= span);
            }
        }
    }

    #[test]
    fn labels_never_overlap_however_close_the_marks() {
        // Marks at the same second, within a minute, and at the right edge.
        let xs = [100.0, 100.0, 101.0, 104.0, 300.0, 302.0, 940.0, 940.0];
        let ws = [7.0, 7.0, 7.0, 14.0, 7.0, 7.0, 14.0, 14.0];
        let labels = place_labels(&xs, &ws, 50.0, 12.0, 940.0);
        for (i, a) in labels.iter().enumerate() {
            assert!(a.x + a.w <= 940.0, "{a:?}");
            for b in &labels[i + 1..] {
                assert!(!a.overlaps(b), "{a:?} and {b:?}");
            }
        }
        // Far apart, they share the first lane.
        let labels = place_labels(&[10.0, 200.0, 400.0], &[7.0; 3], 0.0, 12.0, 940.0);
        assert!(labels.iter().all(|l| l.lane == 0));
    }

    #[test]
    fn text_wraps_at_spaces() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("a-very-long-word b", 4), ["a-very-long-word", "b"]);
        assert_eq!(wrap("", 10), [""]);
    }
}
