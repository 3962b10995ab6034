//! The charts as a person reads them: checked on the SVG text the replay writes.

use std::sync::OnceLock;

use super::html::incident_chart;
use super::*;
use crate::replay::report::Incident;

/// The three incidents on their shortened timeline, run once for all the tests here.
fn incidents() -> &'static [Incident] {
    static RUNS: OnceLock<Vec<Incident>> = OnceLock::new();
    RUNS.get_or_init(|| {
        crate::replay::incidents(&["000", "001", "003"], 13, true).expect("the models run")
        // a test: a panic is its failure
        // test
    })
}

fn chart(points: Vec<Vec<(f64, Option<f64>)>>, marks: Vec<(f64, usize, String)>) -> Chart<'static> {
    let names = ["old", "new", "staged rollout"];
    let series = || {
        points
            .iter()
            .zip(names)
            .map(|(p, name)| Series {
                name,
                points: p.clone(),
            })
            .collect::<Vec<_>>()
    };
    Chart {
        title: "t <1>".to_owned(),
        day_offset_secs: 8 * 3600 + 11 * 60,
        span_secs: 3_600.0,
        top: ("top", series()),
        bottom: ("bottom", series()),
        marks,
    }
}

/// The `(x, font size, text)` of every `<text>` element.
fn texts(svg: &str) -> Vec<(f64, f64, String)> {
    let attr = |line: &str, name: &str| -> f64 {
        let at = line.find(&format!(" {name}=\"")).expect("attribute") + name.len() + 3; // test
        line[at..]
            .split('"')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number") // test
    };
    svg.split("<text")
        .skip(1)
        .map(|t| {
            // The text, its tspans' tags taken out.
            let inner = t.split_once('>').map_or("", |x| x.1);
            let inner = inner.split("</text>").next().unwrap_or("");
            let mut body = String::new();
            let mut tag = false;
            for c in inner.chars() {
                match c {
                    '<' => tag = true,
                    '>' => tag = false,
                    c if !tag => body.push(c),
                    _ => {}
                }
            }
            let head = t.split('>').next().unwrap_or("");
            let size = if head.contains(" font-size=") {
                attr(head, "font-size")
            } else {
                TEXT_SIZE
            };
            (attr(t, "x"), size, body)
        })
        .collect()
}

/// The y coordinates of every path's points.
fn path_ys(svg: &str) -> Vec<f64> {
    svg.lines()
        .filter(|l| l.starts_with("<path"))
        .flat_map(|l| {
            let d = l
                .split("d=\"")
                .nth(1)
                .unwrap_or("")
                .split('"')
                .next()
                .unwrap_or("");
            d.split(' ')
                .filter_map(|p| p.trim_start_matches(['M', 'L']).split(',').nth(1))
                .filter_map(|y| y.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The frames' `(top, bottom)`.
fn frames(svg: &str) -> Vec<(f64, f64)> {
    texts_attr(svg, "<rect x=")
}

fn texts_attr(svg: &str, start: &str) -> Vec<(f64, f64)> {
    svg.lines()
        .filter(|l| l.starts_with(start))
        .map(|l| {
            let num = |name: &str| -> f64 {
                let at = l.find(&format!(" {name}=\"")).expect("attribute") + name.len() + 3; // test
                l[at..]
                    .split('"')
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("a number") // test
            };
            (num("y"), num("y") + num("height"))
        })
        .collect()
}

#[test]
fn text_is_escaped() {
    assert_eq!(esc(r#"a<b & "c"'"#), "a&lt;b &amp; &quot;c&quot;&#39;");
}

#[test]
fn a_chart_has_its_lines_and_marks() {
    let c = chart(
        vec![vec![(0.0, Some(1.0)), (60.0, None), (90.0, Some(0.5))]],
        vec![(30.0, 0, "x & y".to_owned())],
    );
    let svg = c.svg();
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

#[test]
fn lines_at_0_and_100_percent_stay_off_the_frame() {
    let c = chart(
        vec![vec![
            (30.0, Some(1.0)),
            (90.0, Some(0.0)),
            (150.0, Some(0.5)),
        ]],
        vec![],
    );
    let svg = c.svg();
    let frames = frames(&svg);
    assert_eq!(frames.len(), 2, "{svg}");
    let ys = path_ys(&svg);
    assert_eq!(ys.len(), 6);
    for y in ys {
        assert!(
            frames
                .iter()
                .any(|&(top, bottom)| y >= top + PAD - 0.05 && y <= bottom - PAD + 0.05),
            "{y} on or outside a frame {frames:?}"
        );
        assert!(frames
            .iter()
            .all(|&(top, bottom)| (y - top).abs() > 5.0 && (y - bottom).abs() > 5.0));
    }
}

#[test]
fn a_narrow_dip_fills_the_panel_and_the_axis_says_so() {
    let dip = vec![(30.0, Some(1.0)), (90.0, Some(0.9)), (150.0, Some(1.0))];
    let svg = chart(vec![dip], vec![]).svg();
    assert!(
        svg.contains("top — axis 88–100 %, zoomed to the data"),
        "{svg}"
    );
    assert!(svg.contains(">88 %</text>") && !svg.contains(">0 %</text>"));
    // The dip spans most of the panel's height, not a tenth of it.
    let ys = path_ys(&svg);
    let depth = ys[1] - ys[0];
    assert!(depth > 0.7 * PANEL_H - 2.0 * PAD, "dip {depth} px");
}

#[test]
fn coinciding_lines_are_drawn_apart() {
    // The traffic replay's old document and its rollout at the same values: the first is
    // drawn widest, the later ones narrower and the third dashed on top.
    let same = vec![(30.0, Some(0.98)), (90.0, Some(0.95))];
    let svg = chart(vec![same.clone(), same.clone(), same], vec![]).svg();
    let strokes: Vec<&str> = svg
        .lines()
        .filter(|l| l.starts_with("<path"))
        .take(3)
        .map(|l| l.split("fill=\"none\"").nth(1).unwrap_or(""))
        .collect();
    assert_eq!(strokes.len(), 3);
    assert!(strokes[0].contains(r#"stroke-width="4""#), "{strokes:?}");
    assert!(strokes[1].contains(r#"stroke-width="2""#), "{strokes:?}");
    assert!(strokes[2].contains("stroke-dasharray"), "{strokes:?}");
}

#[test]
fn marker_numbers_never_overlap_on_the_incident_charts() {
    // 000's marks 1-3 fall within 3 s of each other, 001's four within a minute.
    for r in incidents() {
        let (c, _) = incident_chart(r);
        let labels = c.mark_labels(0.0);
        assert_eq!(labels.len(), c.marks.len());
        for (i, a) in labels.iter().enumerate() {
            for b in &labels[i + 1..] {
                assert!(!a.overlaps(b), "incident {}: {a:?} and {b:?}", r.id);
            }
        }
    }
    // Ten marks at one second.
    let marks = (0..10).map(|i| (600.0, i % 2, format!("m{i}"))).collect();
    let c = chart(vec![], marks);
    let labels = c.mark_labels(0.0);
    for (i, a) in labels.iter().enumerate() {
        assert!(labels[i + 1..].iter().all(|b| !a.overlaps(b)));
    }
}

#[test]
fn no_text_runs_past_the_chart_and_ticks_are_round() {
    for r in incidents() {
        let (c, extras) = incident_chart(r);
        let svg = c.svg_with(&extras);
        for (x, size, t) in texts(&svg) {
            let t = t
                .replace("&amp;", "&")
                .replace("&quot;", "\"")
                .replace("&#39;", "'");
            let t = t.replace("&lt;", "<").replace("&gt;", ">");
            // Centred tick labels reach half their width past x.
            assert!(
                x + layout::text_width(&t, size) <= W || t.len() <= 5,
                "incident {}: {t:?} at {x} runs past {W}",
                r.id
            );
        }
        // Time labels on whole 10 or 30 minutes (the short runs: 20 to 40 minutes).
        let ticks: Vec<String> = texts(&svg)
            .into_iter()
            .map(|t| t.2)
            .filter(|t| t.len() == 5 && t.as_bytes()[2] == b':')
            .collect();
        assert!(ticks.len() >= 4, "{ticks:?}");
        for t in ticks {
            let minute: u32 = t[3..].parse().expect("minutes"); // test
            assert_eq!(minute % 5, 0, "incident {}: tick {t}", r.id);
        }
    }
}

#[test]
fn the_003_chart_carries_its_headline_figures_and_says_why_breadth_is_high() {
    let r = incidents().iter().find(|r| r.id == "003").expect("003"); // test
    let (c, extras) = incident_chart(r);
    let svg = c.svg_with(&extras);
    let figure = |name: &str| {
        svg.lines()
            .find(|l| l.contains(&format!(">{name}: <tspan")))
            .unwrap_or_default() // test
            .to_owned()
    };
    let hb = figure("heartbeats delivered");
    assert!(
        hb.contains(">naive ") && hb.contains(">tollgate 100.0 %</tspan>"),
        "{svg}"
    );
    let elections = figure("leader elections");
    assert!(elections.contains(">tollgate 0</tspan>"), "{svg}");
    assert!(svg.contains("the saturated link"), "{svg}");
    // And every incident carries its own figures.
    for r in incidents() {
        let (c, extras) = incident_chart(r);
        assert!(c
            .svg_with(&extras)
            .contains(">wrongful-denial minutes: <tspan"));
    }
}
