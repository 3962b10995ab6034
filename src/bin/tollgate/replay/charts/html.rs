//! The incidents' charts and `index.html`.

use std::fmt::Write as _;
use std::path::Path;

use super::{esc, per_minute, Chart, Extras};
use crate::replay::report::{shown, table, Incident, Row};
use crate::replay::sim::Bucket;
use crate::replay::ReplayError;

/// The chart of one incident, and what it carries besides its lines.
pub(crate) fn incident_chart(r: &Incident) -> (Chart<'_>, Extras<'_>) {
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
    let chart = Chart {
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
    };
    let extras = Extras {
        headlines: r.headlines(),
        bottom_note: r.breadth_note,
    };
    (chart, extras)
}

/// An HTML table of rows: a figure per row, with what it means.
pub(crate) fn html_table(rows: &[Row]) -> String {
    let mut s = String::from("<table><tr><th></th>");
    for r in rows {
        let _ = write!(s, "<th>{}</th>", esc(r.side));
    }
    s.push_str("</tr>\n");
    for (m, cells) in shown(rows) {
        let _ = write!(
            s,
            "<tr><th>{}<br><small>{}</small></th>",
            esc(m.name),
            esc(m.explain)
        );
        for cell in cells {
            let _ = write!(s, "<td>{}</td>", esc(cell.as_deref().unwrap_or("–")));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
    s
}

/// Long lines wrap everywhere (notes, tables, text blocks) and the charts shrink to the page,
/// so nothing is cut off at the page's edge.
pub(crate) const STYLE: &str =
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;\
vertical-align:top;overflow-wrap:anywhere}th small{font-weight:normal;color:#555}\
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere}\
img{max-width:100%;height:auto}";

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
        let (chart, extras) = incident_chart(r);
        write(dir, &name, &chart.svg_with(&extras))?;
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
    let mut explained = Vec::new();
    for r in replays {
        html.push_str(&esc(&table(&r.rows, &mut explained)));
        html.push('\n');
    }
    html.push_str("</pre></body></html>\n");
    write(dir, "index.html", &html)?;
    Ok(replays.len() + 1)
}
