//! `tollgate check FILE…`: validate documents, every error of every file.

use std::path::PathBuf;

use serde::Serialize;

use crate::load::{load, Loaded, Problem};
use crate::{shown, Options, Output, OutputFormat, Status};

/// The JSON shape, for `tollgate check --help`.
pub(crate) const LONG_HELP: &str = r#"Output:
  human  one line per error, `FILE: PATH: MESSAGE` (`FILE:LINE:COLUMN: MESSAGE` for a syntax
         error), the first 1000 of a file then `FILE: … and N more errors`, or
         `FILE: ok (revision R, N policies)`; unreadable files on stderr
  json   one object on stdout:
         {
           "ok": bool,                      // every file is valid
           "files": [{                      // in the order given
             "file": string,                // as given on the command line
             "ok": bool,
             "revision": integer | null,    // null when the file has errors
             "errors": [{                   // the first 1000
               "path": string,              // "policies[paid-checkout].quota", "" for the file
               "message": string,           // ends with the hint, when there is one
               "hint": string | null,       // the fix alone
               "line": integer | null,      // 1-based, where in the text (null: I/O)
               "column": integer | null,    // 1-based, in characters
               "kind": string               // "unknown_field", "quota.missing_unit", "syntax",
             }],                            // "io", "unknown_format", …
             "more_errors": integer         // found beyond the ones listed
           }]
         }

Exit status: 0 when every file is valid, 1 when one has an error, 2 when one cannot be read
or its format cannot be told (every file is still checked)."#;

/// The JSON report.
#[derive(Debug, Serialize)]
struct Report<'a> {
    ok: bool,
    files: Vec<FileReport<'a>>,
}

/// One file in the JSON report.
#[derive(Debug, Serialize)]
struct FileReport<'a> {
    file: String,
    ok: bool,
    revision: Option<u64>,
    errors: &'a [Problem],
    more_errors: usize,
}

/// Checks every file, writes the report and returns the worst status.
pub(crate) fn run(files: &[PathBuf], options: &Options, out: &mut Output) -> Status {
    let loaded: Vec<(String, Loaded)> = files
        .iter()
        .map(|path| (shown(path), load(path, options)))
        .collect();
    let status = loaded
        .iter()
        .map(|(_, l)| l.status())
        .max()
        .unwrap_or(Status::Ok);
    for (_, l) in &loaded {
        if let Loaded::Unusable(problem) = l {
            out.error(&problem.message);
        }
    }
    match options.format {
        OutputFormat::Human => human(&loaded, out),
        OutputFormat::Json => json(&loaded, status, out),
    }
    status
}

/// One line per valid file or per error, then a summary of the failures.
fn human(loaded: &[(String, Loaded)], out: &mut Output) {
    let s = |n: usize| if n == 1 { "" } else { "s" };
    for (file, l) in loaded {
        match l {
            Loaded::Valid(limits) => {
                let n = limits.policies().len();
                let policies = if n == 1 { "policy" } else { "policies" };
                out.line(format!(
                    "{file}: ok (revision {}, {n} {policies})",
                    limits.revision()
                ));
            }
            Loaded::Invalid(problems, more) => {
                for problem in problems {
                    out.line(problem.human(file));
                }
                if *more > 0 {
                    out.line(format!("{file}: … and {more} more error{}", s(*more)));
                }
            }
            Loaded::Unusable(_) => {}
        }
    }
    let failed = loaded.iter().filter(|(_, l)| l.status() != Status::Ok);
    let (files, errors) = failed.fold((0, 0), |(f, e), (_, l)| {
        (f + 1, e + l.problems().len() + l.omitted())
    });
    if files > 0 {
        out.line(format!(
            "{errors} error{} in {files} of {} file{}",
            s(errors),
            loaded.len(),
            s(loaded.len())
        ));
    }
}

/// The JSON object documented in [`LONG_HELP`].
fn json(loaded: &[(String, Loaded)], status: Status, out: &mut Output) {
    let files = loaded
        .iter()
        .map(|(file, l)| FileReport {
            file: file.clone(),
            ok: l.status() == Status::Ok,
            revision: match l {
                Loaded::Valid(limits) => Some(limits.revision()),
                _ => None,
            },
            errors: l.problems(),
            more_errors: l.omitted(),
        })
        .collect();
    let report = Report {
        ok: status == Status::Ok,
        files,
    };
    out.line(crate::to_json(&report));
}
