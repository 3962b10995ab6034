//! The paired-rounds harness shared by the bench binaries.
//!
//! This machine drifts (frequency, neighbours), so absolute times from one bench and another
//! taken minutes apart are not comparable. Instead every case has several *arms* (tollgate,
//! governor, the floor, …) that run in the same round, one block of `iters` checks each, in a
//! shuffled order; each round yields a ratio per pair of arms, and the report is the median
//! of those per-round ratios (with the 25th–75th percentile to show the spread).
//!
//! The same arms also feed criterion (`iter_custom`), so `cargo bench` prints the usual
//! criterion lines; the paired table printed at the end is the figure that counts.
//!
//! Arguments: a criterion filter (a plain substring here; `--exact` for equality) selects
//! cases by `case` or `case/arm`. Environment:
//!
//! | variable | effect |
//! |---|---|
//! | `TOLLGATE_BENCH_QUICK=1` | 9 rounds, ¼-size blocks, short criterion runs (~1 min in all) |
//! | `TOLLGATE_BENCH_ROUNDS=n` | `n` paired rounds (default 31) |
//! | `TOLLGATE_BENCH_PAIRED_ONLY=1` | skip the criterion groups, run only the paired rounds |

use std::fmt::Write as _;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::Criterion;

use crate::load::Load;

/// How this run was asked for.
#[derive(Debug)]
pub struct Settings {
    pub rounds: usize,
    /// `cargo test --benches` (or `--test`): run everything once, small.
    pub test_mode: bool,
    pub quick: bool,
    pub paired: bool,
    criterion: bool,
    filter: Option<String>,
    exact: bool,
}

/// Criterion options that take a value (so the value is not mistaken for the filter).
const VALUED: &[&str] = &[
    "-c",
    "--color",
    "--colour",
    "-s",
    "--save-baseline",
    "-b",
    "--baseline",
    "--baseline-lenient",
    "--format",
    "--profile-time",
    "--load-baseline",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--plotting-backend",
    "--output-format",
];

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

impl Settings {
    pub fn from_env_and_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let has = |flag: &str| args.iter().any(|a| a == flag);
        let mut filter = None;
        let mut skip_value = false;
        for a in &args {
            if skip_value {
                skip_value = false;
            } else if a.starts_with('-') {
                skip_value = VALUED.contains(&a.as_str());
            } else if filter.is_none() {
                filter = Some(a.clone());
            }
        }
        // As criterion decides: without `--bench` (cargo test --benches) or with `--test`,
        // run everything once to see that it works.
        let test_mode = !has("--bench") || has("--test");
        let listing = has("--list")
            || has("--ignored")
            || args.iter().any(|a| a.starts_with("--profile-time"));
        let quick = env_flag("TOLLGATE_BENCH_QUICK");
        let default_rounds = if test_mode {
            1
        } else if quick {
            9
        } else {
            31
        };
        let rounds = std::env::var("TOLLGATE_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&r| r > 0 && !test_mode)
            .unwrap_or(default_rounds);
        Self {
            rounds,
            test_mode,
            quick,
            paired: !listing,
            criterion: !env_flag("TOLLGATE_BENCH_PAIRED_ONLY"),
            filter,
            exact: has("--exact"),
        }
    }

    /// Criterion, with shorter defaults than its own (command-line options still win).
    pub fn criterion(&self) -> Criterion {
        let (warm, measure, samples) = if self.quick {
            (0.3, 1.0, 10)
        } else {
            (1.0, 3.0, 50)
        };
        Criterion::default()
            .warm_up_time(Duration::from_secs_f64(warm))
            .measurement_time(Duration::from_secs_f64(measure))
            .sample_size(samples)
            .configure_from_args()
    }

    /// `true` if the filter selects `case` or one of its `case/arm` ids.
    pub fn wants(&self, case: &str, arms: &[&str]) -> bool {
        let Some(f) = &self.filter else { return true };
        let hit = |id: &str| {
            if self.exact {
                id == f
            } else {
                id.contains(f.as_str())
            }
        };
        hit(case) || arms.iter().any(|a| hit(&format!("{case}/{a}")))
    }

    /// A block size scaled for quick and test runs.
    pub fn iters(&self, base: u64) -> u64 {
        let scale = if self.test_mode {
            0.001
        } else if self.quick {
            0.25
        } else {
            1.0
        };
        ((base as f64 * scale) as u64).max(1)
    }
}

/// Consumes a check's result so the optimiser must compute it.
#[inline(always)]
pub fn sink<T>(result: T) {
    let _ = std::hint::black_box(result);
}

/// Runs `body` `iters` times and returns the elapsed wall time.
#[inline]
pub fn timed(iters: u64, mut body: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        body();
    }
    start.elapsed()
}

/// Runs `body(thread_index, iters)` on `threads` threads released together by a barrier; the
/// wall time from the first start to the last finish.
pub fn timed_threads(threads: usize, iters: u64, body: impl Fn(usize, u64) + Sync) -> Duration {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (barrier, body) = (&barrier, &body);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    body(i, iters);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    let first = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let last = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    last - first
}

/// One contestant: runs a block of `iters` checks and returns its wall time.
pub struct Arm<'a> {
    pub name: &'static str,
    run: Box<dyn FnMut(u64) -> Duration + 'a>,
}

pub fn arm<'a>(name: &'static str, run: impl FnMut(u64) -> Duration + 'a) -> Arm<'a> {
    Arm {
        name,
        run: Box::new(run),
    }
}

/// A bound on a ratio.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
}

/// A ratio to report: time per check of `num` ÷ time per check of `den`, per round.
#[derive(Debug, Clone, Copy)]
pub struct Ratio {
    pub num: &'static str,
    pub den: &'static str,
    pub target: Option<Target>,
}

pub const fn ratio(num: &'static str, den: &'static str, target: Option<Target>) -> Ratio {
    Ratio { num, den, target }
}

/// A case: its arms, the ratios that matter, the block size.
pub struct Case<'a> {
    pub name: String,
    pub iters: u64,
    pub arms: Vec<Arm<'a>>,
    pub ratios: Vec<Ratio>,
    /// Also register the arms as criterion benches (not for multi-threaded arms).
    pub criterion: bool,
}

#[derive(Debug, Clone)]
struct RatioReport {
    ratio: Ratio,
    median: f64,
    p25: f64,
    p75: f64,
}

/// What one case measured.
#[derive(Debug, Clone)]
pub struct CaseReport {
    name: String,
    iters: u64,
    rounds: usize,
    ns: Vec<(&'static str, f64)>,
    ratios: Vec<RatioReport>,
    other_cores: f64,
}

/// Collects case reports and prints the tables.
#[derive(Debug, Default)]
pub struct Report {
    cases: Vec<CaseReport>,
    notes: Vec<String>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// A small deterministic shuffle (xorshift), so arm order varies from round to round.
fn shuffle(order: &mut [usize], state: &mut u64) {
    for i in (1..order.len()).rev() {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        order.swap(i, (*state % (i as u64 + 1)) as usize);
    }
}

impl Report {
    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// Runs `case`: its criterion group (if enabled), then the paired rounds.
    pub fn run(&mut self, s: &Settings, c: &mut Criterion, mut case: Case<'_>) {
        if s.criterion && case.criterion {
            let mut group = c.benchmark_group(&case.name);
            for arm in &mut case.arms {
                let run = &mut arm.run;
                group.bench_function(arm.name, |b| b.iter_custom(&mut *run));
            }
            group.finish();
        }
        if !s.paired {
            return;
        }
        eprintln!(
            "paired: {} ({} rounds × {} checks per arm)",
            case.name, s.rounds, case.iters
        );
        let load = Load::start();
        let n = case.arms.len();
        for arm in &mut case.arms {
            (arm.run)(case.iters); // warm-up block, not recorded
        }
        let mut ns = vec![Vec::with_capacity(s.rounds); n];
        let mut order: Vec<usize> = (0..n).collect();
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..s.rounds {
            shuffle(&mut order, &mut rng);
            for &i in &order {
                let t = (case.arms[i].run)(case.iters);
                ns[i].push(t.as_nanos() as f64 / case.iters as f64);
            }
        }
        let idx = |name: &str| {
            case.arms
                .iter()
                .position(|a| a.name == name)
                .unwrap_or_else(|| panic!("no arm {name} in {}", case.name))
        };
        let ratios = case
            .ratios
            .iter()
            .map(|&ratio| {
                let (a, b) = (idx(ratio.num), idx(ratio.den));
                let per_round = sorted(ns[a].iter().zip(&ns[b]).map(|(x, y)| x / y).collect());
                RatioReport {
                    ratio,
                    median: quantile(&per_round, 0.5),
                    p25: quantile(&per_round, 0.25),
                    p75: quantile(&per_round, 0.75),
                }
            })
            .collect();
        let report = CaseReport {
            name: case.name.clone(),
            iters: case.iters,
            rounds: s.rounds,
            ns: case
                .arms
                .iter()
                .zip(ns)
                .map(|(arm, v)| (arm.name, quantile(&sorted(v), 0.5)))
                .collect(),
            ratios,
            other_cores: load.other_cores(),
        };
        eprintln!("{}", render_case(&report));
        self.cases.push(report);
    }

    /// The final tables, as markdown.
    pub fn render(&self, title: &str, load: &Load) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n## {title}: paired ratios (median of per-round ratios)\n"
        );
        let _ = writeln!(
            out,
            "| case | ratio | median | p25–p75 | target | ok? | other load |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        for case in &self.cases {
            for r in &case.ratios {
                let (target, ok) = match r.ratio.target {
                    Some(Target::AtMost(t)) => (
                        format!("≤ {t:.2}"),
                        if r.median <= t { "yes" } else { "**MISS**" },
                    ),
                    None => (String::new(), ""),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} / {} | {:.3} | {:.3}–{:.3} | {} | {} | {:.2} cores |",
                    case.name,
                    r.ratio.num,
                    r.ratio.den,
                    r.median,
                    r.p25,
                    r.p75,
                    target,
                    ok,
                    case.other_cores
                );
            }
        }
        let _ = writeln!(out, "\n## {title}: median time per check (ns)\n");
        let _ = writeln!(
            out,
            "| case | rounds × checks | arms (ns per check, per thread) |"
        );
        let _ = writeln!(out, "|---|---|---|");
        for case in &self.cases {
            let arms: Vec<String> = case
                .ns
                .iter()
                .map(|(name, ns)| format!("{name} {ns:.2}"))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} × {} | {} |",
                case.name,
                case.rounds,
                case.iters,
                arms.join(", ")
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "\n{note}");
        }
        let _ = writeln!(out, "\n{}", load.summary());
        out
    }
}

fn render_case(r: &CaseReport) -> String {
    let mut out = String::new();
    for (name, ns) in &r.ns {
        let _ = write!(out, "  {name}: {ns:.2} ns;");
    }
    for x in &r.ratios {
        let _ = write!(
            out,
            "  {}/{} = {:.3} [{:.3}–{:.3}];",
            x.ratio.num, x.ratio.den, x.median, x.p25, x.p75
        );
    }
    let _ = write!(out, "  other load {:.2} cores", r.other_cores);
    out
}
