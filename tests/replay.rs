//! `tollgate replay` run as a process: the incidents on their shortened timeline (the
//! figures that matter, and determinism per seed), the charts as valid SVG, a malformed
//! traffic file, and a million-line log in bounded memory.
#![cfg(feature = "cli")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

fn tollgate<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tollgate-replay-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn incident<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["incidents"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["id"] == id))
        .unwrap_or_else(|| panic!("incident {id} missing: {report}"))
}

/// The row of `side` ("naive" or "tollgate").
fn row<'a>(incident: &'a Value, side: &str) -> &'a Value {
    incident["rows"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["side"] == side))
        .unwrap_or_else(|| panic!("row {side} missing: {incident}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn notes(incident: &Value) -> String {
    incident["notes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Checks that `path` is a well-formed SVG document with the lines of a chart.
fn assert_svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let paths = doc.descendants().filter(|n| n.has_tag_name("path")).count();
    assert!(paths >= 2, "{}: {paths} lines", path.display());
    let drawn = doc
        .descendants()
        .filter(|n| n.has_tag_name("path"))
        .filter(|n| n.attribute("d").is_some_and(|d| d.contains('L')))
        .count();
    assert!(drawn >= 2, "{}: lines with no segment", path.display());
}

#[test]
fn the_incidents_reproduce_their_shapes_and_tollgate_catches_them() {
    let dir = TempDir::new();
    let out = dir.path("charts");
    let args = [
        "replay", "--short", "--seed", "7", "--format", "json", "--out",
    ];
    let run = |o: &Path| {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.push(o.display().to_string());
        tollgate(&a)
    };
    let first = run(&out);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let report = first.json();

    // Deterministic for a seed: a second run prints the same figures.
    let second = run(&out).json();
    assert_eq!(report["incidents"], second["incidents"]);

    // 000: the naive limiter on the lagging clock denies for many minutes and its clients'
    // retries become most of the load; tollgate's watchdog sees the clock within a window.
    let i = incident(&report, "000");
    let (naive, toll) = (row(i, "naive"), row(i, "tollgate"));
    assert!(f(&naive["wrongful_denial_minutes"]) >= 5.0, "{naive}");
    assert!(f(&naive["customer_requests_failed"]) > 0.05, "{naive}");
    assert!(f(&naive["retry_share_of_load"]) > 0.3, "{naive}");
    assert!(f(&toll["time_to_detect_secs"]) <= 60.0, "{toll}");
    assert_eq!(f(&toll["wrongful_denial_minutes"]), 0.0, "{toll}");
    assert!(f(&toll["customer_requests_failed"]) < 0.01, "{toll}");

    // 001: validation rejects the pushed document; the acknowledged 60× tightening halts at
    // 1 % within one comparison window and reverts; the naive push denies until rollback,
    // and nothing of its own sees it, while a SuccessRate would have paged.
    let i = incident(&report, "001");
    let n = notes(i);
    assert!(
        n.contains(r#"missing unit in "10": write "10/s" or "10/min""#),
        "{n}"
    );
    assert!(n.contains("60× tighter"), "{n}");
    assert!(n.contains("halted at 1 %") && n.contains("reverted"), "{n}");
    assert!(n.contains("on the naive push it fires at"), "{n}");
    let (naive, toll) = (row(i, "naive"), row(i, "tollgate"));
    assert!(naive["time_to_detect_secs"].is_null(), "{naive}");
    assert!(f(&naive["wrongful_denial_minutes"]) >= 5.0, "{naive}");
    assert!(f(&toll["time_to_detect_secs"]) <= 61.0, "{toll}");
    assert_eq!(f(&toll["wrongful_denial_minutes"]), 0.0, "{toll}");
    assert!(f(&toll["customer_requests_failed"]) < f(&naive["customer_requests_failed"]) / 10.0);

    // 003: naive heartbeats starve and retries are a large share of writes; tollgate keeps
    // heartbeats whole and retries small.
    let i = incident(&report, "003");
    let (naive, toll) = (row(i, "naive"), row(i, "tollgate"));
    assert!(f(&naive["heartbeat_success"]) < 0.9, "{naive}");
    assert!(f(&naive["retry_share_of_load"]) > 0.3, "{naive}");
    assert!(f(&naive["customer_requests_failed"]) > 0.01, "{naive}");
    assert!(f(&toll["heartbeat_success"]) > 0.999, "{toll}");
    assert!(f(&toll["retry_share_of_load"]) < 0.05, "{toll}");
    assert!(f(&toll["customer_requests_failed"]) < 0.001, "{toll}");

    // The charts: one valid SVG per incident, and an index that shows them.
    for id in ["000", "001", "003"] {
        assert_svg(&out.join(format!("incident-{id}.svg")));
    }
    let index = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    for id in ["000", "001", "003"] {
        assert!(index.contains(&format!("<img src=\"incident-{id}.svg\"")));
    }
    assert!(index.contains("<table>") && index.contains("wrongful-denial minutes"));
}

#[test]
fn a_malformed_traffic_file_gets_line_numbered_errors() {
    let dir = TempDir::new();
    let log = dir.path("bad.csv");
    std::fs::write(
        &log,
        "timestamp,key,tier,category,route,status\n\
         2026-03-14T08:00:00Z,alice,paid,checkout,/v1/checkout/pay,200\n\
         yesterday,bob,paid,checkout,/v1/checkout/pay,200\n\
         2026-03-14T08:00:01Z,,paid,checkout,/v1/checkout/pay,200\n\
         2026-03-14T08:00:02Z,carol,paid\n\
         2026-03-14T08:00:03Z,dave,paid,checkout,/v1/checkout/pay,2000\n\
         2026-03-14T07:00:00Z,erin,paid,checkout,/v1/checkout/pay,200\n\
         1773475205000,frank,paid,checkout,/v1/checkout/pay,200\n",
    )
    .expect("write the log");
    let out = dir.path("out");
    let args = |format: &str| {
        vec![
            "replay".to_owned(),
            "--traffic".into(),
            log.display().to_string(),
            "--limits".into(),
            "examples/limits/valid.toml".into(),
            "--out".into(),
            out.display().to_string(),
            "--format".into(),
            format.into(),
        ]
    };
    let human = tollgate(&args("human"));
    assert_eq!(
        human.code,
        Some(1),
        "bad lines fail the run: {}",
        human.stderr
    );
    let shown = log.display().to_string();
    for (line, says) in [
        (3, "neither RFC 3339"),
        (4, "no key"),
        (5, "3 fields where the header names 6"),
        (6, "not an HTTP status"),
        (7, "out of time order"),
    ] {
        let expected = format!("{shown}:{line}: ");
        let found = human.stdout.lines().find(|l| l.contains(&expected));
        assert!(
            found.is_some_and(|l| l.contains(says)),
            "line {line}: {}",
            human.stdout
        );
    }
    assert!(
        human.stdout.contains("8 lines, 2 requests"),
        "{}",
        human.stdout
    );
    assert!(human.stdout.contains("5 bad lines"), "{}", human.stdout);

    let json = tollgate(&args("json")).json();
    assert_eq!(json["bad_lines"], 5);
    let lines: Vec<u64> = json["bad_lines_shown"]
        .as_array()
        .map(|a| a.iter().filter_map(|b| b["line"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(lines, [3, 4, 5, 6, 7]);
    assert_eq!(json["requests"], 2);

    // A header without a key column is refused up front.
    let nokey = dir.path("nokey.csv");
    std::fs::write(&nokey, "timestamp,customer_id\n0,a\n").expect("write");
    let run = tollgate(&[
        "replay",
        "--traffic",
        &nokey.display().to_string(),
        "--limits",
        "examples/limits/valid.toml",
        "--out",
        &out.display().to_string(),
    ]);
    assert_eq!(run.code, Some(1));
    assert!(run.stderr.contains("line 1: the header"), "{}", run.stderr);
}

/// The bound the million-line replay must stay under. The file itself is about 70 MB; the
/// replay keeps two documents' limiters (2,000 keys), the tallies and a 64 KiB read buffer.
const RSS_BOUND_KIB: u64 = 48 * 1024;

#[test]
fn a_million_line_log_replays_in_bounded_memory() {
    let dir = TempDir::new();
    let log = dir.path("big.csv");
    let log_s = log.display().to_string();
    let gen = tollgate(&["replay", "--generate", &log_s, "--lines", "1000000"]);
    assert_eq!(gen.code, Some(0), "{}", gen.stderr);
    let size = std::fs::metadata(&log).expect("the log").len();
    assert!(size > 60_000_000, "the log is {size} bytes");
    let out = dir.path("out").display().to_string();
    let run = tollgate(&[
        "replay",
        "--traffic",
        &log_s,
        "--limits",
        "examples/limits/valid.toml",
        "--against",
        "examples/limits/tightened.toml",
        "--format",
        "json",
        "--out",
        &out,
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["requests"], 1_000_000);
    assert_eq!(json["bad_lines"], 0);
    // The tightened document denies busy paid customers that the valid one never denied.
    assert!(
        json["against"]["newly_denied_keys"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{json}"
    );
    let factor = &json["against"]["tightening_factors"][0];
    assert_eq!(factor["policy"], "paid-checkout");
    assert!((f(&factor["factor"]) - 60.0).abs() < 1e-9);
    match json["peak_rss_kib"].as_u64() {
        Some(kib) => {
            println!(
                "1,000,000 lines ({size} bytes): peak RSS {kib} KiB (bound {RSS_BOUND_KIB} KiB)"
            );
            assert!(kib < RSS_BOUND_KIB, "peak RSS {kib} KiB");
            assert!(kib * 1024 < size / 2, "the file is not held in memory");
        }
        None if cfg!(target_os = "linux") => panic!("Linux reports the peak RSS"),
        None => println!("no peak RSS on this platform: the bound is not checked"),
    }
    assert_svg(&dir.path("out").join("traffic.svg"));
}
