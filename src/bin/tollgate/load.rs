//! Loading a document from a file, and the problems found on the way, as both commands
//! report them.

use std::path::Path;

use serde::Serialize;
use tollgate::limits::{ConfigError, ConfigErrorKind, Format, Limits};

use crate::{shown, Options, Status};

/// One problem with a file: a [`ConfigError`], or why the file could not be read.
///
/// Serialized as `{"path", "message", "hint", "line", "column", "kind"}`; absent values are
/// `null`, never missing, so the shape stays the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Problem {
    /// Where in the document, by policy name; empty for the file as a whole.
    pub(crate) path: String,
    /// What is wrong, ending with the hint when there is one.
    pub(crate) message: String,
    /// The fix alone.
    pub(crate) hint: Option<String>,
    /// The 1-based line of the error in the text, when it has a place there.
    pub(crate) line: Option<usize>,
    /// The 1-based column of the error in the text, when it has a place there.
    pub(crate) column: Option<usize>,
    /// [`ConfigErrorKind`] in snake case: `unknown_field`, `quota.missing_unit`, `io`.
    pub(crate) kind: String,
}

impl Problem {
    /// A problem about the file as a whole.
    fn file(kind: ConfigErrorKind, message: String, hint: Option<String>) -> Problem {
        Problem {
            path: String::new(),
            message,
            hint,
            line: None,
            column: None,
            kind: kind_name(kind),
        }
    }

    /// One line for people: `file: path: message`, or `file:line:column: message` for an
    /// error about the text itself (a syntax error: the form editors jump to).
    pub(crate) fn human(&self, file: &str) -> String {
        match (self.path.is_empty(), self.line, self.column) {
            (false, _, _) => format!("{file}: {}: {}", self.path, self.message),
            (true, Some(line), Some(column)) => {
                format!("{file}:{line}:{column}: {}", self.message)
            }
            (true, Some(line), None) => format!("{file}:{line}: {}", self.message),
            (true, None, _) => format!("{file}: {}", self.message),
        }
    }
}

impl From<&ConfigError> for Problem {
    fn from(error: &ConfigError) -> Problem {
        Problem {
            path: error.path().to_owned(),
            message: error.message().to_owned(),
            hint: error.hint().map(str::to_owned),
            line: error.line(),
            column: error.column(),
            kind: kind_name(error.kind()),
        }
    }
}

/// A problem together with the file it is in, for the diff report's single error list.
#[derive(Debug, Serialize)]
pub(crate) struct FileProblem<'a> {
    /// The file, as given on the command line.
    pub(crate) file: &'a str,
    /// The problem.
    #[serde(flatten)]
    pub(crate) problem: &'a Problem,
}

/// The snake-case name of an error kind: `UnknownField` is `unknown_field`,
/// `Quota(MissingUnit)` is `quota.missing_unit`. Derived from `Debug` so that a kind added
/// to the library gets a name without a release of the tool.
pub(crate) fn kind_name(kind: ConfigErrorKind) -> String {
    let mut name = String::new();
    for c in format!("{kind:?}").chars() {
        match c {
            '(' => name.push('.'),
            ')' => {}
            c if c.is_ascii_uppercase() => {
                if !name.is_empty() && !name.ends_with('.') {
                    name.push('_');
                }
                name.push(c.to_ascii_lowercase());
            }
            c => name.push(c),
        }
    }
    name
}

/// A file, loaded.
#[derive(Debug)]
pub(crate) enum Loaded {
    /// A valid document.
    Valid(Limits),
    /// A document with errors (at least one listed), and how many more were found than
    /// the library lists ([`tollgate::limits::ConfigErrors::omitted`]).
    Invalid(Vec<Problem>, usize),
    /// A file that cannot be read, or whose format cannot be told.
    Unusable(Problem),
}

impl Loaded {
    /// What this file makes of the run.
    pub(crate) fn status(&self) -> Status {
        match self {
            Loaded::Valid(_) => Status::Ok,
            Loaded::Invalid(..) => Status::Rejected,
            Loaded::Unusable(_) => Status::Unusable,
        }
    }

    /// The problems found, none for a valid document.
    pub(crate) fn problems(&self) -> &[Problem] {
        match self {
            Loaded::Valid(_) => &[],
            Loaded::Invalid(problems, _) => problems,
            Loaded::Unusable(problem) => core::slice::from_ref(problem),
        }
    }

    /// The errors found beyond those listed in [`problems`](Self::problems).
    pub(crate) fn omitted(&self) -> usize {
        match self {
            Loaded::Invalid(_, omitted) => *omitted,
            _ => 0,
        }
    }
}

/// The format of a file: its extension's, else `--input-format`.
pub(crate) fn format_of(path: &Path, options: &Options) -> Option<Format> {
    Format::from_path(path).or(options.input_format.map(Format::from))
}

/// Reads and validates one file.
pub(crate) fn load(path: &Path, options: &Options) -> Loaded {
    let Some(format) = format_of(path, options) else {
        let message = format!("cannot tell the format of {:?}", shown(path));
        let hint = "name the file .toml, .yaml, .yml or .json, or pass --input-format";
        let kind = ConfigErrorKind::UnknownFormat;
        let problem = Problem::file(kind, format!("{message}; {hint}"), Some(hint.to_owned()));
        return Loaded::Unusable(problem);
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            let message = format!("cannot read {:?}: {e}", shown(path));
            return Loaded::Unusable(Problem::file(ConfigErrorKind::Io, message, None));
        }
    };
    match Limits::parse(&text, format) {
        Ok(limits) => Loaded::Valid(limits),
        Err(errors) => {
            let problems = errors.iter().map(Problem::from).collect();
            Loaded::Invalid(problems, errors.omitted())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::QuotaErrorKind;

    #[test]
    fn kinds_are_named_in_snake_case() {
        assert_eq!(kind_name(ConfigErrorKind::UnknownField), "unknown_field");
        assert_eq!(kind_name(ConfigErrorKind::Io), "io");
        assert_eq!(
            kind_name(ConfigErrorKind::Quota(QuotaErrorKind::MissingUnit)),
            "quota.missing_unit"
        );
    }

    #[test]
    fn a_syntax_error_reads_as_file_line_column() {
        let problem = Problem {
            line: Some(3),
            column: Some(7),
            ..Problem::file(ConfigErrorKind::Syntax, "expected `=`".into(), None)
        };
        assert_eq!(problem.human("a.toml"), "a.toml:3:7: expected `=`");
    }
}
