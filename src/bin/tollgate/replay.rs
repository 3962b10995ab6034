//! `tollgate replay`: what a limits change or a fault would do, before it happens, in
//! simulated time.
//!
//! Two modes: the three incidents built in (`--incident`, the default), and your own access
//! log replayed against your limits (`--traffic FILE --limits OLD [--against NEW]`). Both
//! drive the library itself on `ManualClock`s; nothing here decides a verdict.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::{Output, OutputFormat, Status};

mod charts;
mod i000;
mod i001;
mod i003;
mod report;
mod sim;
mod traffic;

pub(crate) use report::Incident;

/// The JSON shapes and the models, for `tollgate replay --help`.
pub(crate) const LONG_HELP: &str = r#"Incidents (the default; seeded, deterministic, built into the binary):
  000  a limiter clock lagging up to 45 s under load, 10,000 customers; clients retrying at once vs Backoff
  001  a unit dropped and the wrong policy edited: 10/s became 10/min for paying customers
  003  8 Gbit/s replica recovery on links shared with heartbeats, clients retrying 10 times
  Each runs twice: a naive limiter configured as the incident's system was, and tollgate with
  its defaults. Each figure of the tables is explained under it: time to detect (or
  "prevented"), wrongful-denial minutes, customer requests failed, retry share of load, and
  for 003 heartbeats delivered, leader elections and the recovery backlog left.
  Each incident, its model and what the model leaves out: docs/incidents.md in the repository.

Output: a table per incident (or per document) on stdout, SVG charts and index.html in --out.
  --format json prints one JSON object instead of the tables (charts are still written).

Exit status: 0 on success, 1 when the traffic file had bad lines or a document is invalid,
2 on a usage error or a file that cannot be read."#;

/// `tollgate replay --help`: the incidents, then the traffic replay and its JSON.
pub(crate) fn long_help() -> String {
    format!("{LONG_HELP}\n\n{}", traffic::HELP)
}

/// Options of `tollgate replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// Which incident to replay (the default when no traffic is given: all).
    #[arg(long, value_enum, conflicts_with_all = ["traffic", "generate"])]
    incident: Option<Which>,
    /// An access log to replay (CSV with a header, or JSON lines; gzip-compressed or not;
    /// `-` for stdin). Given several times, the logs are merged by time.
    #[arg(
        long,
        value_name = "FILE",
        requires = "limits",
        conflicts_with = "generate"
    )]
    traffic: Vec<PathBuf>,
    /// A column of the log under a name of its own: FIELD=NAME, such as key=api_key
    /// (fields: timestamp, key, tier, category, route, status, bytes, attempt). Repeatable.
    #[arg(long, value_name = "FIELD=NAME", requires = "traffic", value_parser = traffic::parse_column)]
    column: Vec<traffic::Column>,
    /// The limits document the traffic is replayed against.
    #[arg(long, value_name = "OLD", requires = "traffic")]
    limits: Option<PathBuf>,
    /// A second document: what it would change, as a staged rollout would have run it.
    #[arg(long, value_name = "NEW", requires = "traffic")]
    against: Option<PathBuf>,
    /// With --against: exit 3 when NEW newly denies more customers than N, or than P % of
    /// the customers in the log (`5`, `0.5%`): a CI gate on real traffic.
    #[arg(long, value_name = "N|P%", requires = "against", value_parser = traffic::parse_threshold)]
    fail_if_newly_denied: Option<traffic::Threshold>,
    /// What clients do with a 429: nothing (the log as written, the default), retry after
    /// the Retry-After, back off exponentially with jitter, or retry at once. Under a model
    /// the log's own retries (attempt > 0) are dropped and the model makes its own.
    #[arg(long, value_enum, default_value_t = traffic::Clients::None, requires = "traffic")]
    clients: traffic::Clients,
    /// The retries a client makes before it gives up (with --clients).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100))]
    max_retries: u32,
    /// A fleet of N gateway instances, each with an in-memory limiter holding the full
    /// quota, requests spread round-robin, replayed beside the one shared limit.
    #[arg(long, value_name = "N", requires = "traffic", value_parser = parse_instances)]
    instances: Option<usize>,
    /// Replays only the log's rows from this time on (RFC 3339, epoch, nginx's forms).
    #[arg(long, value_name = "TIME", requires = "traffic", value_parser = traffic::parse_time)]
    from: Option<i64>,
    /// Replays only the log's rows before this time.
    #[arg(long, value_name = "TIME", requires = "traffic", value_parser = traffic::parse_time)]
    to: Option<i64>,
    /// With --against: writes every newly denied customer to FILE as CSV
    /// (key,denied,first_denied_at).
    #[arg(long, value_name = "FILE", requires = "against")]
    newly_denied: Option<PathBuf>,
    /// Writes a sample access log to FILE and exits.
    #[arg(long, value_name = "FILE")]
    generate: Option<PathBuf>,
    /// Lines to generate.
    #[arg(long, default_value_t = 200_000, requires = "generate")]
    lines: u64,
    /// Distinct keys to generate.
    #[arg(long, default_value_t = 2_000, requires = "generate")]
    keys: u32,
    /// Where the charts and index.html go.
    #[arg(long, value_name = "DIR", default_value = "replay-out")]
    out: PathBuf,
    /// The seed of every model and generator.
    #[arg(long, default_value_t = 13)]
    seed: u64,
    /// A shortened timeline and fewer customers (the same shapes; for tests).
    #[arg(long)]
    short: bool,
    /// Tables for people, or one JSON object.
    #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
    format: OutputFormat,
}

/// `--instances`: 1 to [`traffic::MAX_INSTANCES`].
fn parse_instances(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=traffic::MAX_INSTANCES).contains(&n) => Ok(n),
        _ => Err(format!(
            "invalid number of instances {:?}: write 1 to {}",
            text.chars().take(40).collect::<String>(),
            traffic::MAX_INSTANCES
        )),
    }
}

/// An incident to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    /// The lagging clock.
    #[value(name = "000")]
    I000,
    /// The unit dropped.
    #[value(name = "001")]
    I001,
    /// Recovery traffic and retries.
    #[value(name = "003")]
    I003,
    /// All three.
    All,
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    /// A built-in model failed to set itself up (a bug: the models are fixed).
    #[error("model: {0}")]
    Model(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The input was unusable.
    #[error("{0}")]
    Input(String),
}

impl ReplayError {
    pub(crate) fn io(what: &str, path: &Path, e: std::io::Error) -> ReplayError {
        ReplayError::Io(format!(
            "cannot {what} {:?}: {e}",
            path.display().to_string()
        ))
    }
}

/// Runs the incidents asked for, each on a thread of its own (they share nothing: each
/// model has its own clocks, limiters and generator), in the order asked.
pub(crate) fn incidents(
    which: &[&str],
    seed: u64,
    short: bool,
) -> Result<Vec<Incident>, ReplayError> {
    let one = |id: &str| match id {
        "000" => i000::replay(
            if short {
                &i000::Timeline::SHORT
            } else {
                &i000::Timeline::FULL
            },
            seed,
        ),
        "001" => i001::replay(short, seed),
        _ => i003::replay(short, seed),
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = which
            .iter()
            .map(|id| scope.spawn(move || one(id)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ReplayError::Model("a model panicked".to_owned())))
            })
            .collect()
    })
}

/// `tollgate replay`.
pub(crate) fn run(args: &ReplayArgs, out: &mut Output) -> Status {
    let result = if let Some(file) = &args.generate {
        traffic::generate(file, args.lines, args.keys, args.seed).map(|n| {
            out.line(format!("wrote {n} lines to {}", file.display()));
            Status::Ok
        })
    } else if let (false, Some(limits)) = (args.traffic.is_empty(), &args.limits) {
        traffic::run(args, limits, out)
    } else {
        run_incidents(args, out)
    };
    match result {
        Ok(status) => status,
        Err(e @ ReplayError::Input(_)) => {
            out.error(e.to_string());
            Status::Rejected
        }
        Err(e) => {
            out.error(e.to_string());
            Status::Unusable
        }
    }
}

fn run_incidents(args: &ReplayArgs, out: &mut Output) -> Result<Status, ReplayError> {
    let which: &[&str] = match args.incident.unwrap_or(Which::All) {
        Which::I000 => &["000"],
        Which::I001 => &["001"],
        Which::I003 => &["003"],
        Which::All => &["000", "001", "003"],
    };
    let replays = incidents(which, args.seed, args.short)?;
    let written = charts::write_incidents(&args.out, &replays)?;
    match args.format {
        OutputFormat::Human => {
            let charts = format!(
                "{} ({written} files)",
                args.out.join("index.html").display()
            );
            out.line(report::human(&replays, &charts));
        }
        OutputFormat::Json => {
            let report = serde_json::json!({
                "seed": args.seed,
                "short": args.short,
                "out": args.out.display().to_string(),
                "incidents": replays.iter().map(|r| serde_json::json!({
                    "id": r.id,
                    "title": r.title,
                    "source": r.source,
                    "fault_at": r.clock(r.fault_at_ms),
                    "notes": r.notes,
                    "rows": r.rows,
                    "verdict": r.verdict,
                    "marks": { "naive": r.naive.marks, "tollgate": r.tollgate.marks },
                })).collect::<Vec<_>>(),
            });
            out.line(crate::to_json(&report));
        }
    }
    Ok(Status::Ok)
}
