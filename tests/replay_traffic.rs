//! `tollgate replay --traffic` run as a process on small hand-written logs: every policy that
//! applies (`also`), shadow policies' would-be denials, logs merged from several frontends,
//! exit codes, hostile inputs, gzip, and the JSON report's documented shape.
#![cfg(feature = "cli")]

mod common_cli;

use common_cli::{tollgate, TempDir};
use serde_json::Value;

/// A document with a route policy and a customer-wide `also` policy of 10 a day.
const ALSO: &str = r#"schema = 1
revision = 1
[[policies]]
name = "search"
match = { route = "/v1/search" }
quota = "1000/s"
[[policies]]
name = "customer-day"
match = { route = "/*" }
quota = "10/day"
also = true
"#;

/// A document whose only policy is a shadow one of 1 a minute.
const SHADOW: &str = r#"schema = 1
revision = 1
[[policies]]
name = "trial"
match = { route = "/*" }
quota = "1/min;burst=1"
shadow = true
"#;

/// `n` requests of `key` one second apart from 2026-03-14T08:00:00Z, as CSV with a header.
fn log(n: u64, key: &str) -> String {
    let mut s = String::from("timestamp,key,tier,category,route\n");
    for i in 0..n {
        s.push_str(&format!(
            "{},{key},free,api,/v1/search\n",
            1_773_475_200_000 + i * 1000
        ));
    }
    s
}

fn replay(dir: &TempDir, log: &str, limits: &str, extra: &[&str]) -> common_cli::Run {
    let traffic = dir.write("traffic.csv", log);
    replay_file(dir, &traffic, limits, extra)
}

/// [`replay`] of a log already written (gzip, say) at `traffic`.
fn replay_file(
    dir: &TempDir,
    traffic: &std::path::Path,
    limits: &str,
    extra: &[&str],
) -> common_cli::Run {
    let limits = dir.write("limits.toml", limits);
    let mut args = vec![
        "replay".to_owned(),
        "--traffic".into(),
        traffic.display().to_string(),
        "--limits".into(),
        limits.display().to_string(),
        "--out".into(),
        dir.path("out").display().to_string(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    tollgate(&args)
}

fn json_replay(dir: &TempDir, log: &str, limits: &str) -> Value {
    let run = replay(dir, log, limits, &["--format", "json"]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    run.json()
}

#[test]
fn also_policies_are_checked_and_reported() {
    let dir = TempDir::new();
    let json = json_replay(&dir, &log(50, "alice"), ALSO);
    let old = &json["sides"][0];
    assert_eq!(old["denied"], 40, "{old}");
    assert_eq!(old["allowed"], 10, "{old}");
    assert_eq!(old["policies"]["customer-day"]["denied"], 40, "{old}");
    assert_eq!(old["policies"]["search"]["allowed"], 50, "{old}");
    // The same verdicts by policy × tier × route.
    let row = old["breakdown"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["policy"] == "customer-day"))
        .unwrap_or_else(|| panic!("no customer-day row: {old}"));
    assert_eq!(
        (row["tier"].as_str(), row["route"].as_str()),
        (Some("free"), Some("/v1/search"))
    );
    assert_eq!(
        (row["allowed"].as_u64(), row["denied"].as_u64()),
        (Some(10), Some(40))
    );
    // One request a second for 50 s: one active key-minute of 50, bursts of 1.
    let rates = &json["key_rates"];
    assert_eq!(
        (
            rates["p50_per_minute"].as_u64(),
            rates["max_per_minute"].as_u64()
        ),
        (Some(50), Some(50))
    );
    assert_eq!(rates["peak_burst"], 1);
    assert_eq!(rates["peak_burst_at"], "2026-03-14T08:00:00Z");
    // The chart's axis is on the log's clock (UTC), not time since the first line.
    let svg = std::fs::read_to_string(dir.path("out").join("traffic.svg")).expect("the chart");
    assert!(svg.contains("08:00"), "no wall-clock label in the chart");
}

#[test]
fn shadow_policies_report_what_they_would_deny() {
    let dir = TempDir::new();
    let json = json_replay(&dir, &log(5, "alice"), SHADOW);
    let old = &json["sides"][0];
    // Enforced denials stay 0: a shadow policy lets everything through.
    assert_eq!(old["denied"], 0, "{old}");
    assert_eq!(old["allowed"], 5, "{old}");
    assert_eq!(old["shadow_denied"], 4, "{old}");
    assert_eq!(old["policies"]["trial"]["shadow_denied"], 4, "{old}");
    let human = replay(&dir, &log(5, "alice"), SHADOW, &[]);
    assert!(
        human.stdout.contains("shadow policies would deny 4"),
        "{}",
        human.stdout
    );
}

#[test]
fn rows_up_to_a_second_early_are_replayed_at_the_latest_time() {
    let dir = TempDir::new();
    let t = 1_773_475_200_000_u64;
    // A row 0.5 s before the first (frontends merged), one 0.8 s before the latest, then one
    // 3 s before the latest: only the last is out of order.
    let text = format!(
        "timestamp,key\n{},a\n{},b\n{},c\n{},d\n{},e\n",
        t,
        t - 500,
        t + 5_000,
        t + 4_200,
        t + 2_000
    );
    let run = replay(&dir, &text, ALSO, &["--format", "json"]);
    assert_eq!(run.code, Some(1), "one bad line: {}", run.stderr);
    let json = run.json();
    assert_eq!(json["requests"], 4, "{json}");
    assert_eq!(json["bad_lines"], 1, "{json}");
    let bad = &json["bad_lines_shown"][0];
    assert_eq!(bad["line"], 6, "{json}");
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("out of time order: 3000 ms before an earlier line"),
        "{message}"
    );
    assert_eq!(json["span_secs"], 5.0, "{json}");
}

#[test]
fn a_directory_as_traffic_exits_2() {
    let dir = TempDir::new();
    let run = tollgate(&[
        "replay",
        "--traffic",
        &dir.path("").display().to_string(),
        "--limits",
        "examples/limits/valid.toml",
        "--out",
        &dir.path("out").display().to_string(),
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("directory"), "{}", run.stderr);
}

#[test]
fn a_missing_limits_file_exits_2_naming_it_once() {
    let dir = TempDir::new();
    let missing = dir.path("nope.toml").display().to_string();
    let traffic = dir.write("t.csv", &log(1, "a"));
    let run = tollgate(&[
        "replay",
        "--traffic",
        &traffic.display().to_string(),
        "--limits",
        &missing,
        "--out",
        &dir.path("out").display().to_string(),
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert_eq!(run.stderr.matches(&missing).count(), 1, "{}", run.stderr);
}

#[test]
fn a_huge_first_line_is_refused_in_a_few_words() {
    let dir = TempDir::new();
    let text = "x".repeat(10 << 20);
    let run = replay(&dir, &text, ALSO, &[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let said = run.stdout.len() + run.stderr.len();
    assert!(
        said < 2_000,
        "{said} bytes of output: {}",
        &run.stderr[..200.min(run.stderr.len())]
    );
    assert!(run.stderr.contains("longer than"), "{}", run.stderr);
}

#[test]
fn a_header_only_log_gives_no_verdicts_from_nothing() {
    let dir = TempDir::new();
    let tightened = std::fs::read_to_string("examples/limits/tightened.toml").expect("sample");
    let against = dir.write("new.toml", &tightened);
    let args = ["--against", against.to_str().expect("utf-8")];
    let header = "timestamp,key,tier,category,route\n";
    let run = replay(
        &dir,
        header,
        &std::fs::read_to_string("examples/limits/valid.toml").expect("sample"),
        &args,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.stdout.contains("detector:"), "{}", run.stdout);
    assert!(!run.stdout.contains("rollout"), "{}", run.stdout);
    assert!(run.stdout.contains("no requests"), "{}", run.stdout);
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let json = replay(
        &dir,
        header,
        &std::fs::read_to_string("examples/limits/valid.toml").expect("sample"),
        &json_args,
    )
    .json();
    assert_eq!(json["requests"], 0);
    assert!(json["against"]["detector"].is_null(), "{json}");
    assert!(json["against"]["rollout"].is_null(), "{json}");
}

#[test]
fn a_gzip_log_is_read_as_the_plain_one() {
    use std::io::Write;
    let dir = TempDir::new();
    let text = log(30, "alice");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).expect("gzip");
    let bytes = gz.finish().expect("gzip");
    let path = dir.path("traffic.csv.gz");
    std::fs::write(&path, bytes).expect("write");
    let run = replay_file(&dir, &path, ALSO, &["--format", "json"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["requests"], 30, "{json}");
    assert_eq!(json["sides"][0]["denied"], 20, "{json}");
}

/// Walks a JSON value for objects with a key no documented field has.
fn rust_shapes(v: &Value, at: &str, found: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if ["Ok", "Err", "Some", "None"].contains(&k.as_str()) {
                    found.push(format!("{at}.{k}"));
                }
                rust_shapes(v, &format!("{at}.{k}"), found);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| rust_shapes(v, at, found)),
        _ => {}
    }
}

#[test]
fn the_json_report_has_its_documented_shape() {
    let dir = TempDir::new();
    let log_path = dir.path("sample.csv").display().to_string();
    let gen = tollgate(&["replay", "--generate", &log_path, "--lines", "200000"]);
    assert_eq!(gen.code, Some(0), "{}", gen.stderr);
    let args = |format: &str| {
        tollgate(&[
            "replay",
            "--traffic",
            &log_path,
            "--limits",
            "examples/limits/valid.toml",
            "--against",
            "examples/limits/tightened.toml",
            "--out",
            &dir.path("out").display().to_string(),
            "--format",
            format,
        ])
    };
    let run = args("json");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["schema_version"], 1);
    let mut found = Vec::new();
    rust_shapes(&json, "", &mut found);
    assert!(found.is_empty(), "Rust shapes at {found:?}");
    // The fields scripts read, with their meaning.
    assert_eq!(json["requests"], 200_000);
    assert_eq!(json["bad_lines"], 0);
    assert!(json["bad_lines_shown"].is_array());
    assert!(json["span_secs"].as_f64().is_some_and(|s| s > 500.0));
    for (i, side) in ["old", "new"].iter().enumerate() {
        let s = &json["sides"][i];
        assert_eq!(s["side"], *side);
        let total = s["allowed"].as_u64().unwrap_or(0) + s["denied"].as_u64().unwrap_or(0);
        let unmatched = s["unmatched"].as_u64().unwrap_or(u64::MAX);
        assert_eq!(total + unmatched, 200_000, "{s}");
        for field in [
            "keys_ever_denied",
            "policies",
            "hardest_hit",
            "deny_breadth_per_minute",
        ] {
            assert!(!s[field].is_null(), "sides[{i}].{field}: {s}");
        }
    }
    let against = &json["against"];
    assert!(against["newly_denied_keys"].as_u64().is_some_and(|n| n > 0));
    assert!(against["newly_denied_sample"].is_array());
    // The diff is data, not a human string.
    assert!(against["diff"].is_object(), "{}", against["diff"]);
    assert_eq!(against["guard"]["accepts"], false, "{against}");
    let factor = &against["tightening_factors"][0];
    assert_eq!(factor["policy"], "paid-checkout");
    assert!((factor["factor"].as_f64().unwrap_or(0.0) - 60.0).abs() < 1e-9);
    assert!(against["detector"]["tripped"].is_boolean(), "{against}");
    assert!(against["rollout"]["events"].is_array(), "{against}");
    // The human lines scripts grep.
    let human = args("human").stdout;
    assert!(
        human.contains("\nold (examples/limits/valid.toml, revision 41): allowed "),
        "{human}"
    );
    assert!(human.contains("difference: "), "{human}");
    assert!(human.contains(" customers newly denied"), "{human}");
}

#[test]
fn the_json_shape_is_documented_in_help() {
    let help = tollgate(&["replay", "--help"]).stdout;
    for field in [
        "schema_version",
        "shadow_denied",
        "newly_denied_keys",
        "tightening_factors",
    ] {
        assert!(help.contains(field), "--help names {field}");
    }
}

#[test]
fn the_ci_gate_exits_3_past_its_threshold() {
    let dir = TempDir::new();
    let log_path = dir.path("sample.csv").display().to_string();
    let gen = tollgate(&["replay", "--generate", &log_path]);
    assert_eq!(gen.code, Some(0), "{}", gen.stderr);
    let out = dir.path("out").display().to_string();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "replay",
            "--traffic",
            &log_path,
            "--limits",
            "examples/limits/valid.toml",
            "--out",
            &out,
        ];
        args.extend(extra);
        tollgate(&args)
    };
    let against = ["--against", "examples/limits/tightened.toml"];
    let base = run(&[&against[..], &["--format", "json"]].concat()).json();
    let newly = base["against"]["newly_denied_keys"].as_u64().unwrap_or(0);
    let customers = base["customers"].as_u64().unwrap_or(0);
    assert!(newly >= 2, "the sample newly denies a few: {newly}");
    assert_eq!(customers, 2_000, "{base}");
    assert!(base["gate"].is_null());

    let below = (newly - 1).to_string();
    let failed = run(&[&against[..], &["--fail-if-newly-denied", &below]].concat());
    assert_eq!(failed.code, Some(3), "{}\n{}", failed.stdout, failed.stderr);
    assert!(
        failed.stdout.contains("gate: FAILED (exit 3)"),
        "{}",
        failed.stdout
    );
    let at = newly.to_string();
    let passed = run(&[&against[..], &["--fail-if-newly-denied", &at]].concat());
    assert_eq!(passed.code, Some(0), "{}", passed.stdout);
    assert!(passed.stdout.contains("gate: passed"), "{}", passed.stdout);

    // A share of the log's 2,000 customers, rounded down.
    let share = |p: f64| format!("{p}%");
    let just_below = share((newly - 1) as f64 / 20.0);
    let json = run(&[
        &against[..],
        &["--fail-if-newly-denied", &just_below, "--format", "json"],
    ]
    .concat());
    assert_eq!(json.code, Some(3));
    let gate = &json.json()["gate"];
    assert_eq!(gate["passed"], false, "{gate}");
    assert_eq!(gate["limit"], newly - 1, "{gate}");
    assert_eq!(
        run(&[
            &against[..],
            &["--fail-if-newly-denied", &share(newly as f64 / 20.0)]
        ]
        .concat())
        .code,
        Some(0)
    );

    // Usage errors stay 2: no --against, or a threshold that is not one.
    assert_eq!(run(&["--fail-if-newly-denied", "5"]).code, Some(2));
    let bad = run(&[&against[..], &["--fail-if-newly-denied", "five"]].concat());
    assert_eq!(bad.code, Some(2));
    assert!(
        bad.stderr.contains("invalid threshold \"five\""),
        "{}",
        bad.stderr
    );
}

/// One policy of one request a second, burst 1.
const ONE_PER_SEC: &str = r#"schema = 1
revision = 1
[[policies]]
name = "one"
match = { route = "/*" }
quota = "1/s;burst=1"
"#;

#[test]
fn client_models_retry_as_their_clients_would() {
    let dir = TempDir::new();
    // Two requests at once (the second denied, retry after 1 s), then the log's own retry
    // of the second, which a client model drops in favour of its own; the old system had
    // answered 429 to the second.
    let text = "timestamp,key,route,status,attempt\n\
                1773475200000,a,/x,200,0\n\
                1773475200000,a,/x,429,0\n\
                1773475200010,a,/x,429,1\n";
    let clients = |model: &str| {
        let run = replay(
            &dir,
            text,
            ONE_PER_SEC,
            &["--clients", model, "--format", "json"],
        );
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let json = run.json();
        assert_eq!(json["clients"]["model"], model);
        json
    };
    let none = clients("none");
    assert_eq!(none["requests"], 3);
    assert_eq!(none["sides"][0]["denied"], 2);
    assert_eq!(none["sides"][0]["clients"]["retries"], 0);
    assert_eq!(none["sides"][0]["log_429"], 2);
    assert_eq!(none["sides"][0]["log_429_denied"], 2);

    // retry-after: the second comes back after 1 s and gets through.
    let after = clients("retry-after");
    assert_eq!(after["requests"], 2);
    assert_eq!(after["clients"]["log_retries_dropped"], 1);
    let c = &after["sides"][0]["clients"];
    assert_eq!(
        (c["originals"].as_u64(), c["retries"].as_u64()),
        (Some(2), Some(1)),
        "{c}"
    );
    assert_eq!(
        (c["succeeded"].as_u64(), c["gave_up"].as_u64()),
        (Some(2), Some(0)),
        "{c}"
    );
    assert_eq!(after["sides"][0]["allowed"], 2);
    assert!(
        (c["retry_share"].as_f64().unwrap_or(0.0) - 1.0 / 3.0).abs() < 1e-9,
        "{c}"
    );
    // backoff honours the Retry-After: one retry, through.
    let backoff = clients("backoff");
    let c = &backoff["sides"][0]["clients"];
    assert_eq!(
        (c["retries"].as_u64(), c["succeeded"].as_u64()),
        (Some(1), Some(2)),
        "{c}"
    );
    // naive: three retries 50 ms apart, all denied, then it gives up.
    let naive = clients("naive");
    let c = &naive["sides"][0]["clients"];
    assert_eq!(
        (c["retries"].as_u64(), c["gave_up"].as_u64()),
        (Some(3), Some(1)),
        "{c}"
    );
    assert_eq!(naive["sides"][0]["denied"], 4);
    let human = replay(&dir, text, ONE_PER_SEC, &["--clients", "naive"]).stdout;
    assert!(human.contains("retry share of load: 60.0 %"), "{human}");
    assert!(human.contains("answered 429 to 1 requests"), "{human}");
}

#[test]
fn a_fleet_of_local_limits_admits_n_times_the_shared_one() {
    let dir = TempDir::new();
    let one_per_min = ONE_PER_SEC.replace("1/s;burst=1", "1/min;burst=1");
    let mut text = String::from("timestamp,key,route\n");
    for i in 0..8 {
        text.push_str(&format!("{},a,/x\n", 1_773_475_200_000_u64 + i * 100));
    }
    let run = replay(
        &dir,
        &text,
        &one_per_min,
        &["--instances", "4", "--format", "json"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let side = &run.json()["sides"][0];
    assert_eq!(
        (side["allowed"].as_u64(), side["denied"].as_u64()),
        (Some(1), Some(7))
    );
    let fleet = &side["fleet"];
    assert_eq!(fleet["instances"], 4);
    assert_eq!(
        (fleet["allowed"].as_u64(), fleet["denied"].as_u64()),
        (Some(4), Some(4)),
        "{fleet}"
    );
    let bad = replay(&dir, &text, &one_per_min, &["--instances", "0"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
}

#[test]
fn real_logs_their_columns_times_and_several_frontends() {
    let dir = TempDir::new();
    // Two frontends' logs, their own column names and nginx's time formats; a's second row
    // is 0.4 s before b's first, which comes earlier in the merged stream.
    let a = dir.write(
        "a.csv",
        "msec,api_key,uri\n\
         1773475200.000,alice,/x\n\
         1773475201.100,alice,/x\n\
         1773475203.000,alice,\"/x\"\n",
    );
    let b = dir.write(
        "b.csv",
        "msec,api_key,uri\n\
         1773475201.500,alice,/x\n\
         1773475202.000,bob,/x\n",
    );
    let limits = dir.write("limits.toml", ONE_PER_SEC);
    let newly = dir.path("newly.csv");
    let new = dir.write(
        "new.toml",
        &ONE_PER_SEC
            .replace("1/s;burst=1", "1/min;burst=1")
            .replace("revision = 1", "revision = 2"),
    );
    let out = dir.path("out").display().to_string();
    let loose = dir.write(
        "loose.toml",
        &ONE_PER_SEC.replace("1/s;burst=1", "10/s;burst=10"),
    );
    let with = |limits: &std::path::Path, extra: &[&str]| {
        let mut args = vec![
            "replay".to_owned(),
            "--traffic".into(),
            a.display().to_string(),
            "--traffic".into(),
            b.display().to_string(),
            "--limits".into(),
            limits.display().to_string(),
            "--column".into(),
            "timestamp=msec".into(),
            "--column".into(),
            "key=api_key".into(),
            "--column".into(),
            "route=uri".into(),
            "--out".into(),
            out.clone(),
            "--format".into(),
            "json".into(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        tollgate(&args)
    };
    let base = |extra: &[&str]| with(&limits, extra);
    let run = base(&[]);
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let json = run.json();
    assert_eq!(json["requests"], 5, "{json}");
    assert_eq!(json["files"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["first_at"], "2026-03-14T08:00:00Z");
    // alice at 0, 1.1 (allowed), 1.5 (denied: 0.4 s after), 3.0 (allowed); bob once.
    assert_eq!(json["sides"][0]["denied"], 1, "{json}");
    assert_eq!(json["sides"][0]["unmatched"], 0, "{json}");

    // A window: from 1.0 s (included) to 3.0 s (excluded).
    let windowed = base(&[
        "--from",
        "2026-03-14T08:00:01Z",
        "--to",
        "14/Mar/2026:09:00:03 +0100",
    ])
    .json();
    assert_eq!(windowed["requests"], 3, "{windowed}");
    assert_eq!(windowed["window"]["rows_outside"], 2, "{windowed}");

    // Every newly denied customer to a file.
    let with_new = with(
        &loose,
        &[
            "--against",
            new.to_str().unwrap_or_default(),
            "--newly-denied",
            newly.to_str().unwrap_or_default(),
        ],
    );
    assert_eq!(with_new.code, Some(0), "{}", with_new.stderr);
    let text = std::fs::read_to_string(&newly).expect("the list");
    assert_eq!(
        text,
        "key,denied,first_denied_at\nalice,3,2026-03-14T08:00:01.100Z\n"
    );

    // Without the mapping, the header names no key column.
    let unmapped = tollgate(&[
        "replay",
        "--traffic",
        a.to_str().unwrap_or_default(),
        "--limits",
        limits.to_str().unwrap_or_default(),
        "--out",
        &out,
    ]);
    assert_eq!(unmapped.code, Some(1));
    assert!(
        unmapped.stderr.contains("--column timestamp=NAME"),
        "{}",
        unmapped.stderr
    );
}

#[test]
fn a_log_on_stdin_gzip_or_not() {
    use std::io::Write;
    let dir = TempDir::new();
    let limits = dir.write("limits.toml", ALSO);
    let text = log(12, "alice");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).expect("gzip");
    let zipped = gz.finish().expect("gzip");
    let out = dir.path("out").display().to_string();
    for input in [text.as_bytes(), &zipped[..]] {
        let run = common_cli::tollgate_with_stdin(
            &[
                "replay",
                "--traffic",
                "-",
                "--limits",
                limits.to_str().unwrap_or_default(),
                "--out",
                &out,
                "--format",
                "json",
            ],
            input,
        );
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        let json = run.json();
        assert_eq!(
            (
                json["requests"].as_u64(),
                json["sides"][0]["denied"].as_u64()
            ),
            (Some(12), Some(2))
        );
        assert_eq!(json["file"], "-");
    }
}

#[test]
fn a_truncated_gzip_log_exits_2_after_the_part_read() {
    use std::io::Write;
    let dir = TempDir::new();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(log(5_000, "alice").as_bytes()).expect("gzip");
    let bytes = gz.finish().expect("gzip");
    let path = dir.path("cut.csv.gz");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
    let run = replay_file(&dir, &path, ALSO, &["--format", "json"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot read") && run.stderr.contains("to its end"),
        "{}",
        run.stderr
    );
    let json = run.json();
    assert!(
        json["requests"]
            .as_u64()
            .is_some_and(|n| n > 0 && n < 5_000),
        "{json}"
    );
    assert_eq!(json["bad_lines"], 1, "{json}");
}

/// The traffic report's page wraps its long text lines (the report's table is wider than the
/// page) and scales its chart, as the incidents' page does: nothing cut off at the edge.
#[test]
fn the_traffic_index_wraps_long_lines_instead_of_cutting_them() {
    let dir = TempDir::new();
    let run = replay(&dir, &log(50, "alice"), ALSO, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let index = std::fs::read_to_string(dir.path("out").join("index.html")).expect("index.html");
    let style = index
        .split("<style>")
        .nth(1)
        .and_then(|s| s.split("</style>").next())
        .unwrap_or_else(|| panic!("no style: {index}"));
    assert!(style.contains("white-space:pre-wrap"), "{style}");
    assert!(style.contains("img{max-width:100%"), "{style}");
    assert!(index.contains("<pre>"), "{index}");
}
