//! `tollgate`: check limits documents and compare them before they ship (feature `cli`).
//!
//! `tollgate check FILE…` validates documents; `tollgate diff OLD NEW` shows what a change
//! does and refuses a tightening beyond the guard that the new document does not
//! acknowledge. Exit status: 0 when all is well, 1 when a document is invalid or a
//! tightening is unacknowledged, 2 for a usage error or a file that cannot be read.

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tollgate::limits::{Format, Limits};

mod check;
mod diff;
mod load;
mod replay;

const EXIT_STATUS: &str = "\
Exit status:
  0  every document is valid (and, for diff, every tightening beyond the guard is acknowledged)
  1  a document is invalid, or a tightening beyond the guard is not acknowledged
  2  usage error, or a file that cannot be read or whose format cannot be told
  3  replay --fail-if-newly-denied: the new document newly denies more customers than allowed";

/// Check limits documents and compare them before they ship.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, after_help = EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate limits documents and list every error of every file.
    #[command(after_long_help = check::LONG_HELP)]
    Check {
        /// The documents, in the format their extension says (.toml, .yaml, .yml, .json).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        options: Options,
    },
    /// Show what changes from OLD to NEW; fail on a tightening beyond the guard that NEW
    /// does not acknowledge.
    #[command(after_long_help = diff::LONG_HELP)]
    Diff {
        /// The running document.
        old: PathBuf,
        /// The document about to replace it.
        new: PathBuf,
        /// The tightening factor (at least 1) beyond which a change needs an
        /// `[[acknowledge]]` entry in NEW.
        #[arg(long, value_name = "FACTOR", default_value_t = Limits::DEFAULT_GUARD, value_parser = parse_guard)]
        guard: f64,
        #[command(flatten)]
        options: Options,
    },
    /// Replay the three incidents (the default), or an access log against limits documents,
    /// in simulated time: tables on stdout, SVG charts and index.html in --out.
    #[command(after_long_help = replay::long_help())]
    Replay(Box<replay::ReplayArgs>),
}

/// Options that both commands take.
#[derive(Debug, Args)]
struct Options {
    /// How to write the report: for people, or one JSON object on stdout (its shape is
    /// documented in `--help`).
    #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
    format: OutputFormat,
    /// The format of a file whose extension does not tell, such as `<(git show …)`.
    #[arg(long, value_enum, value_name = "FORMAT")]
    input_format: Option<InputFormat>,
}

/// How the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    /// Lines for people.
    Human,
    /// One JSON object, for tools.
    Json,
}

/// A document format given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum InputFormat {
    /// TOML.
    Toml,
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

impl From<InputFormat> for Format {
    fn from(format: InputFormat) -> Format {
        match format {
            InputFormat::Toml => Format::Toml,
            InputFormat::Yaml => Format::Yaml,
            InputFormat::Json => Format::Json,
        }
    }
}

/// How a run ends, worst last: the exit status is the worst of every file's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    /// Exit 0.
    Ok,
    /// Exit 1: a document is invalid or a tightening is unacknowledged.
    Rejected,
    /// Exit 3: the replay's CI gate (`--fail-if-newly-denied`) blocks the change. Worse
    /// than 1 (its finding stands despite bad lines), better than 2 (no finding at all).
    Blocked,
    /// Exit 2: a file that cannot be read, or whose format cannot be told.
    Unusable,
}

impl From<Status> for ExitCode {
    fn from(status: Status) -> ExitCode {
        ExitCode::from(match status {
            Status::Ok => 0,
            Status::Rejected => 1,
            Status::Blocked => 3,
            Status::Unusable => 2,
        })
    }
}

/// What a command writes: the report on stdout, messages about unusable files on stderr.
#[derive(Debug, Default)]
struct Output {
    stdout: String,
    stderr: String,
}

impl Output {
    /// Appends a line to stdout.
    fn line(&mut self, line: impl AsRef<str>) {
        self.stdout.push_str(line.as_ref());
        self.stdout.push('\n');
    }

    /// Appends `error: message` to stderr.
    fn error(&mut self, message: impl AsRef<str>) {
        self.stderr.push_str("error: ");
        self.stderr.push_str(message.as_ref());
        self.stderr.push('\n');
    }

    /// Writes both streams. A closed pipe (`tollgate diff … | head`) is not an error worth
    /// a panic: the exit status still says how the check went.
    fn flush(self) {
        let _ = std::io::stdout().lock().write_all(self.stdout.as_bytes());
        let _ = std::io::stderr().lock().write_all(self.stderr.as_bytes());
    }
}

/// The guard: a finite factor of at least 1.
fn parse_guard(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(guard) if guard.is_finite() && guard >= 1.0 => Ok(guard),
        _ => Err(format!(
            "invalid guard {text:?}: write a factor of at least 1, such as 10"
        )),
    }
}

/// A JSON report, pretty-printed. Our reports hold only strings, numbers and booleans, so
/// this cannot fail; if it ever did, the report says so instead of panicking.
fn to_json(report: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| {
        let message = serde_json::Value::String(format!("cannot write the report: {e}"));
        format!("{{\"ok\": false, \"error\": {message}}}")
    })
}

/// The name a report gives a file.
fn shown(path: &Path) -> String {
    path.display().to_string()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = Output::default();
    let status = match &cli.command {
        Command::Check { files, options } => check::run(files, options, &mut out),
        Command::Diff {
            old,
            new,
            guard,
            options,
        } => diff::run(old, new, *guard, options, &mut out),
        Command::Replay(args) => replay::run(args, &mut out),
    };
    out.flush();
    status.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_guard_is_a_finite_factor_of_at_least_one() {
        assert_eq!(parse_guard("10"), Ok(10.0));
        assert_eq!(parse_guard("1.5"), Ok(1.5));
        for bad in ["0.5", "-3", "inf", "NaN", "ten", ""] {
            assert!(parse_guard(bad).is_err(), "{bad}");
        }
    }
}
