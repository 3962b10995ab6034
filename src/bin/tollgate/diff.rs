//! `tollgate diff OLD NEW`: what a change does, and whether it may ship.

use std::collections::HashSet;
use std::path::Path;

use serde::Serialize;
use tollgate::limits::{Diff, Format, Limits, Tightening};
use tollgate::Quota;

use crate::load::{format_of, load, FileProblem, Loaded, Problem};
use crate::{shown, Options, Output, OutputFormat, Status};

/// The JSON shape, for `tollgate diff --help`.
pub(crate) const LONG_HELP: &str = r#"Output:
  human  the table of changes (added, removed and changed policies with their factors, such
         as `100/s → 10/min: 600× tighter`, and traffic that moves between policies), then
         every error as `FILE: PATH: MESSAGE` and the `[[acknowledge]]` entries to add
  json   one object on stdout:
         {
           "ok": bool,                      // both valid, nothing unacknowledged
           "old": string, "new": string,    // the files, as given
           "guard": number,
           "diff": object | null,           // null unless both documents are valid:
             // {"from_revision", "to_revision",
             //  "added": [policy], "removed": [policy],   policy: {"name", "quota", "match",
             //                                                     "shadow", "also" (only when true)}
             //  "changed": [{"policy", "quota"?, "match"?, "shadow"?, "also"?}],
             //  "moves": [{"requests": [string], "from", "to", "quota"?}]}
             // a quota change: {"from", "to", "factor", "rate_factor", "burst_factor",
             //                  "direction"}
           "unacknowledged": [{             // tightenings beyond the guard NEW does not name
             "policy": string, "from": string, "to": string, "factor": number,
             "requests": [string], "moved_from": string?,   // for traffic that moves
             "acknowledge": string          // the entry to add to NEW, in NEW's format
           }],
           "errors": [{                     // every error of either file, and of the change
             "file": string, "path": string, "message": string, "hint": string | null,
             "line": integer | null, "column": integer | null,
             "kind": string                 // "unacknowledged_tightening", "stale_revision",
           }]                               // "quota.missing_unit", "io", …
         }

Exit status: 0 when NEW may replace OLD, 1 when either is invalid, a tightening beyond the
guard is not acknowledged or the revision is not raised, 2 when a file cannot be read or its
format cannot be told."#;

/// The JSON report.
#[derive(Debug, Serialize)]
struct Report<'a> {
    ok: bool,
    old: &'a str,
    new: &'a str,
    guard: f64,
    diff: Option<&'a Diff>,
    unacknowledged: Vec<Unacknowledged<'a>>,
    errors: Vec<FileProblem<'a>>,
}

/// An unacknowledged tightening and the entry that acknowledges it.
#[derive(Debug, Serialize)]
struct Unacknowledged<'a> {
    #[serde(flatten)]
    tightening: &'a Tightening,
    acknowledge: String,
}

/// Two valid documents compared.
struct Comparison {
    diff: Diff,
    /// The errors of the transition, all in the new document.
    problems: Vec<Problem>,
    unacknowledged: Vec<Tightening>,
    acknowledged: Vec<Tightening>,
    format: Format,
}

/// Loads both files, compares them when both are valid, writes the report and returns the
/// status.
pub(crate) fn run(
    old: &Path,
    new: &Path,
    guard: f64,
    options: &Options,
    out: &mut Output,
) -> Status {
    let files = [
        (shown(old), load(old, options)),
        (shown(new), load(new, options)),
    ];
    for (_, loaded) in &files {
        if let Loaded::Unusable(problem) = loaded {
            out.error(&problem.message);
        }
    }
    let comparison = match (&files[0].1, &files[1].1) {
        (Loaded::Valid(o), Loaded::Valid(n)) => {
            let format = format_of(new, options).unwrap_or(Format::Toml);
            Some(compare(o, n, guard, format))
        }
        _ => None,
    };
    let mut status = files
        .iter()
        .map(|(_, l)| l.status())
        .max()
        .unwrap_or(Status::Ok);
    if comparison.as_ref().is_some_and(|c| !c.problems.is_empty()) {
        status = status.max(Status::Rejected);
    }
    let mut errors: Vec<FileProblem<'_>> = Vec::new();
    for (file, loaded) in &files {
        errors.extend(
            loaded
                .problems()
                .iter()
                .map(|problem| FileProblem { file, problem }),
        );
    }
    if let Some(c) = &comparison {
        let file = &files[1].0;
        errors.extend(
            c.problems
                .iter()
                .map(|problem| FileProblem { file, problem }),
        );
    }
    match options.format {
        OutputFormat::Human => human(&files, comparison.as_ref(), &errors, guard, out),
        OutputFormat::Json => json(&files, comparison.as_ref(), status, errors, guard, out),
    }
    status
}

/// The JSON object documented in [`LONG_HELP`].
fn json(
    files: &[(String, Loaded); 2],
    comparison: Option<&Comparison>,
    status: Status,
    errors: Vec<FileProblem<'_>>,
    guard: f64,
    out: &mut Output,
) {
    let unacknowledged = comparison.map_or_else(Vec::new, |c| {
        let entry = |t| Unacknowledged {
            tightening: t,
            acknowledge: acknowledgement(c.format, core::slice::from_ref(t)),
        };
        c.unacknowledged.iter().map(entry).collect()
    });
    let report = Report {
        ok: status == Status::Ok,
        old: &files[0].0,
        new: &files[1].0,
        guard,
        diff: comparison.map(|c| &c.diff),
        unacknowledged,
        errors,
    };
    out.line(crate::to_json(&report));
}

/// The diff and what stands in the way of the transition, comparing the documents once.
fn compare(old: &Limits, new: &Limits, guard: f64, format: Format) -> Comparison {
    let diff = Limits::diff(old, new);
    let problems = match diff.check(new, guard) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.iter().map(Problem::from).collect(),
    };
    let acks: HashSet<(&str, Quota, Quota)> = new
        .acknowledgements()
        .iter()
        .map(|a| (a.policy(), a.from(), a.to()))
        .collect();
    let (acknowledged, unacknowledged) = diff
        .tightenings_beyond(guard)
        .into_iter()
        .partition(|t| acks.contains(&(t.policy.as_str(), t.from, t.to)));
    Comparison {
        diff,
        problems,
        unacknowledged,
        acknowledged,
        format,
    }
}

/// The table, the errors, the entries to add and a one-line verdict.
fn human(
    files: &[(String, Loaded); 2],
    comparison: Option<&Comparison>,
    errors: &[FileProblem<'_>],
    guard: f64,
    out: &mut Output,
) {
    let (old, new) = (&files[0].0, &files[1].0);
    if let Some(c) = comparison {
        out.line(format!("{old} → {new}"));
        out.line(c.diff.to_string());
        for t in &c.acknowledged {
            out.line(format!("  acknowledged {t}"));
        }
    }
    let reported: Vec<_> = errors
        .iter()
        .filter(|e| e.problem.kind != "io" && e.problem.kind != "unknown_format")
        .collect();
    if !reported.is_empty() {
        out.line("");
    }
    for e in &reported {
        out.line(e.problem.human(e.file));
    }
    if let Some(c) = comparison.filter(|c| !c.unacknowledged.is_empty()) {
        let these = if c.unacknowledged.len() == 1 {
            "this tightening"
        } else {
            "these tightenings"
        };
        out.line("");
        out.line(format!("to make {these} on purpose, add to {new}:"));
        out.line("");
        out.line(acknowledgement(c.format, &c.unacknowledged));
    }
    let rejected = |n: usize| format!("rejected: {n} error{}", if n == 1 { "" } else { "s" });
    let verdict = match comparison {
        // An unreadable file is reported on stderr alone: there is nothing to judge.
        None if reported.is_empty() => return,
        None => rejected(reported.len()),
        Some(c) if !c.problems.is_empty() => rejected(c.problems.len()),
        Some(c) if c.acknowledged.is_empty() => format!("ok: no tightening beyond {guard}×"),
        Some(_) => format!("ok: every tightening beyond {guard}× is acknowledged"),
    };
    out.line("");
    out.line(verdict);
}

/// The `acknowledge` entries that accept `tightenings`, written in the new document's format.
fn acknowledgement(format: Format, tightenings: &[Tightening]) -> String {
    // A JSON string literal is also a valid TOML basic string and YAML double-quoted scalar.
    let q = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    let fields = |t: &Tightening| {
        let (from, to) = (t.from.to_string(), t.to.to_string());
        (q(&t.policy), q(&from), q(&to))
    };
    let entries = tightenings.iter().map(fields);
    match format {
        Format::Yaml => {
            let items =
                entries.map(|(p, f, t)| format!("  - policy: {p}\n    from: {f}\n    to: {t}"));
            format!("acknowledge:\n{}", items.collect::<Vec<_>>().join("\n"))
        }
        Format::Json => {
            let items = entries
                .map(|(p, f, t)| format!("    {{ \"policy\": {p}, \"from\": {f}, \"to\": {t} }}"));
            format!(
                "\"acknowledge\": [\n{}\n]",
                items.collect::<Vec<_>>().join(",\n")
            )
        }
        _ => {
            let items = entries
                .map(|(p, f, t)| format!("[[acknowledge]]\npolicy = {p}\nfrom = {f}\nto = {t}"));
            items.collect::<Vec<_>>().join("\n\n")
        }
    }
}
