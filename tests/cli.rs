//! The `tollgate` binary, run as a process: exit statuses, messages, and the JSON shapes
//! documented in its `--help`.
#![cfg(feature = "cli")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

const VALID: &str = "examples/limits/valid.toml";
const TIGHTENED: &str = "examples/limits/tightened.toml";
const MISSING_UNIT: &str = "examples/limits/missing-unit.toml";
const MISNAMED_KEY: &str = "examples/limits/misnamed-key.yaml";
const DUPLICATE_NAME: &str = "examples/limits/duplicate-name.json";
const OVERLAP: &str = "examples/limits/overlap.toml";

const ACKNOWLEDGEMENT: &str = r#"
[[acknowledge]]
policy = "paid-checkout"
from = "100/s;burst=250"
to = "100/min;burst=250"
"#;

/// How a run ended.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

/// Runs `tollgate` from the crate's root, so that the sample paths resolve.
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

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        let name = format!("tollgate-cli-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    /// Writes a file and returns its path.
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sample(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).expect("sample exists")
}

fn assert_contains(haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "expected {needle:?} in:\n{haystack}"
    );
}

// check

#[test]
fn check_accepts_the_valid_sample() {
    let run = tollgate(&["check", VALID]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(
        run.stdout,
        format!("{VALID}: ok (revision 41, 9 policies)\n")
    );
    assert_eq!(run.stderr, "");
}

#[test]
fn check_rejects_each_invalid_sample_with_its_path_and_fix() {
    let cases = [
        (
            MISSING_UNIT,
            r#"policies[paid-checkout].quota: missing unit in "10": write "10/s" or "10/min""#,
        ),
        (
            MISNAMED_KEY,
            r#"policies[free-search].match.categroy: unknown field; did you mean "category"?"#,
        ),
        (DUPLICATE_NAME, r#"policies[1].name: duplicate name "checkout""#),
        (
            OVERLAP,
            "policies[checkout-for-paid].match: matches exactly the same requests as policies[paid-checkout]",
        ),
    ];
    for (file, expected) in cases {
        let run = tollgate(&["check", file]);
        assert_eq!(run.code, Some(1), "{file}: {run:?}");
        assert_contains(&run.stdout, &format!("{file}: {expected}"));
        assert_contains(&run.stdout, "1 error in 1 of 1 file");
    }
}

#[test]
fn check_lists_every_error_of_every_file() {
    let run = tollgate(&["check", VALID, MISSING_UNIT, MISNAMED_KEY, DUPLICATE_NAME]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", run.stdout);
    assert!(lines[0].starts_with(&format!("{VALID}: ok")));
    assert!(lines[1].starts_with(&format!("{MISSING_UNIT}: policies[paid-checkout].quota")));
    assert!(lines[2].starts_with(&format!("{MISNAMED_KEY}: policies[free-search].match")));
    assert!(lines[3].starts_with(&format!("{DUPLICATE_NAME}: policies[1].name")));
    assert_eq!(lines[4], "3 errors in 3 of 4 files");
}

#[test]
fn check_reports_a_syntax_error_with_file_line_and_column() {
    let dir = TempDir::new();
    let path = dir.write("broken.toml", "schema = 1\nrevision = 1\npolicies = [\n");
    let run = tollgate(&[Path::new("check"), &path]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let prefix = format!("{}:", path.display());
    let line = run.stdout.lines().next().unwrap_or_default();
    let position = line
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{line}"));
    let mut parts = position.splitn(3, ':');
    let is_number = |s: Option<&str>| s.is_some_and(|s| s.parse::<usize>().is_ok());
    assert!(is_number(parts.next()) && is_number(parts.next()), "{line}");

    let run = tollgate(&[Path::new("check"), Path::new("--format=json"), &path]);
    let error = &run.json()["files"][0]["errors"][0];
    assert_eq!(error["kind"], "syntax");
    assert!(
        error["line"].is_u64() && error["column"].is_u64(),
        "{error}"
    );
}

#[test]
fn check_json_has_the_documented_shape() {
    let run = tollgate(&["check", "--format", "json", VALID, MISSING_UNIT]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let report = run.json();
    assert_eq!(report["ok"], false);
    let files = report["files"].as_array().expect("files");
    assert_eq!(files.len(), 2);

    assert_eq!(files[0]["file"], VALID);
    assert_eq!(files[0]["ok"], true);
    assert_eq!(files[0]["revision"], 41);
    assert_eq!(files[0]["errors"], Value::Array(vec![]));

    assert_eq!(files[1]["file"], MISSING_UNIT);
    assert_eq!(files[1]["ok"], false);
    assert_eq!(files[1]["revision"], Value::Null);
    let error = &files[1]["errors"][0];
    let mut keys: Vec<&str> = error
        .as_object()
        .expect("error object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["column", "hint", "kind", "line", "message", "path"]);
    assert_eq!(error["path"], "policies[paid-checkout].quota");
    assert_eq!(error["hint"], r#"write "10/s" or "10/min""#);
    assert_eq!(error["kind"], "quota.missing_unit");
    // where the value is: `quota = "10"` on line 10, the value at column 9
    assert_eq!(
        (&error["line"], &error["column"]),
        (&Value::from(10), &Value::from(9))
    );

    let ok = tollgate(&["check", "--format", "json", VALID]);
    assert_eq!(ok.code, Some(0));
    assert_eq!(ok.json()["ok"], true);
}

#[test]
fn check_documents_its_json_shape_in_help() {
    let run = tollgate(&["check", "--help"]);
    assert_eq!(run.code, Some(0));
    for key in [
        r#""ok""#,
        r#""files""#,
        r#""errors""#,
        r#""hint""#,
        r#""kind""#,
    ] {
        assert_contains(&run.stdout, key);
    }
}

#[test]
fn a_missing_file_exits_2_with_a_message_and_the_rest_is_still_checked() {
    let run = tollgate(&["check", "no-such-limits.toml", MISSING_UNIT]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_contains(&run.stderr, r#"error: cannot read "no-such-limits.toml""#);
    assert_contains(&run.stdout, "missing unit");

    let run = tollgate(&["check", "--format", "json", "no-such-limits.toml"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_eq!(run.json()["files"][0]["errors"][0]["kind"], "io");

    let run = tollgate(&["diff", VALID, "no-such-limits.toml"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_contains(&run.stderr, r#"cannot read "no-such-limits.toml""#);
}

#[test]
fn a_file_whose_format_cannot_be_told_exits_2_unless_given() {
    let dir = TempDir::new();
    let path = dir.write("limits", &sample(VALID));
    let run = tollgate(&[Path::new("check"), &path]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert_contains(&run.stderr, "cannot tell the format");
    assert_contains(&run.stderr, "--input-format");

    let run = tollgate(&[
        Path::new("check"),
        Path::new("--input-format"),
        Path::new("toml"),
        &path,
    ]);
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["check"][..],
        &["check", "--format", "xml", VALID][..],
        &["diff", VALID][..],
        &["diff", VALID, TIGHTENED, "--guard", "0.5"][..],
        &["diff", VALID, TIGHTENED, "--guard", "ten"][..],
        &["lint", VALID][..],
    ] {
        let run = tollgate(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(!run.stderr.is_empty(), "{args:?}");
    }
}

// diff

#[test]
fn diff_rejects_an_unacknowledged_tightening_and_says_how_to_acknowledge_it() {
    let run = tollgate(&["diff", VALID, TIGHTENED]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_contains(&run.stdout, "revision 41 → 42");
    assert_contains(
        &run.stdout,
        "changed  paid-checkout        quota 100/s;burst=250 → 100/min;burst=250: 60× tighter",
    );
    assert_contains(
        &run.stdout,
        &format!("{TIGHTENED}: policies[paid-checkout].quota: "),
    );
    assert_contains(&run.stdout, "beyond the guard of 10×");
    assert_contains(&run.stdout, ACKNOWLEDGEMENT.trim());
    assert!(
        run.stdout.ends_with("rejected: 1 error\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn diff_accepts_an_acknowledged_tightening() {
    let dir = TempDir::new();
    let acked = dir.write(
        "acked.toml",
        &format!("{}{ACKNOWLEDGEMENT}", sample(TIGHTENED)),
    );
    let run = tollgate(&[Path::new("diff"), Path::new(VALID), &acked]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_contains(&run.stdout, "60× tighter");
    assert_contains(&run.stdout, "acknowledged paid-checkout");
    assert!(
        run.stdout
            .ends_with("ok: every tightening beyond 10× is acknowledged\n"),
        "{}",
        run.stdout
    );
}

#[test]
fn diff_respects_the_guard() {
    let run = tollgate(&["diff", VALID, TIGHTENED, "--guard", "60"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_contains(&run.stdout, "ok: no tightening beyond 60×");
}

#[test]
fn diff_rejects_an_invalid_new_document() {
    let run = tollgate(&["diff", VALID, MISSING_UNIT]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_contains(
        &run.stdout,
        &format!("{MISSING_UNIT}: policies[paid-checkout].quota: missing unit"),
    );
}

#[test]
fn diff_rejects_a_change_that_does_not_raise_the_revision() {
    let run = tollgate(&["diff", TIGHTENED, VALID]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_contains(&run.stdout, "60× looser");
    assert_contains(
        &run.stdout,
        &format!("{VALID}: revision: revision 41 is not above"),
    );
}

#[test]
fn diff_writes_the_acknowledgement_in_the_new_document_s_format() {
    let dir = TempDir::new();
    let doc = |quota: &str, revision: u64| {
        format!("schema: 1\nrevision: {revision}\npolicies:\n  - name: api\n    match: {{ route: /api/* }}\n    quota: {quota}\n")
    };
    let old = dir.write("old.yaml", &doc("10/s", 1));
    let new = dir.write("new.yaml", &doc("10/min", 2));
    let run = tollgate(&[Path::new("diff"), &old, &new]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let entry = "acknowledge:\n  - policy: \"api\"\n    from: \"10/s\"\n    to: \"10/min\"\n";
    assert_contains(&run.stdout, entry);

    let acked = dir.write("acked.yaml", &format!("{}{entry}", doc("10/min", 2)));
    let run = tollgate(&[Path::new("diff"), &old, &acked]);
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn diff_writes_byte_bursts_as_the_document_does() {
    let dir = TempDir::new();
    let doc = |quota: &str, burst: &str, revision: u64| {
        format!(
            "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"link\"\n\
             match = {{ route = \"/replicate/*\" }}\nquota = \"{quota}\"\nburst = \"{burst}\"\n"
        )
    };
    let old = dir.write("old.toml", &doc("8Gbit/s", "256MiB", 1));
    let new = dir.write("new.toml", &doc("2Gbit/s", "16MiB", 2));
    let run = tollgate(&[Path::new("diff"), &old, &new]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_contains(
        &run.stdout,
        "changed  link                 quota 8Gbit/s;burst=256MiB → 2Gbit/s;burst=16MiB: 16× tighter",
    );
    let entry = "[[acknowledge]]\npolicy = \"link\"\nfrom = \"8Gbit/s;burst=256MiB\"\nto = \"2Gbit/s;burst=16MiB\"\n";
    assert_contains(&run.stdout, entry);
    // the entry, pasted, is accepted
    let acked = dir.write(
        "acked.toml",
        &format!("{}{entry}", doc("2Gbit/s", "16MiB", 2)),
    );
    let run = tollgate(&[Path::new("diff"), &old, &acked]);
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn diff_json_has_the_documented_shape() {
    let run = tollgate(&["diff", "--format", "json", VALID, TIGHTENED]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let report = run.json();
    assert_eq!(report["ok"], false);
    assert_eq!(report["old"], VALID);
    assert_eq!(report["new"], TIGHTENED);
    assert_eq!(report["guard"], 10.0);

    let diff = &report["diff"];
    assert_eq!(diff["from_revision"], 41);
    assert_eq!(diff["to_revision"], 42);
    for list in ["added", "removed", "moves"] {
        assert_eq!(diff[list], Value::Array(vec![]), "{list}");
    }
    let change = &diff["changed"][0];
    assert_eq!(change["policy"], "paid-checkout");
    assert_eq!(change["quota"]["from"], "100/s;burst=250");
    assert_eq!(change["quota"]["to"], "100/min;burst=250");
    assert_eq!(change["quota"]["factor"], 60.0);

    let unacknowledged = report["unacknowledged"].as_array().expect("list");
    assert_eq!(unacknowledged.len(), 1);
    assert_eq!(unacknowledged[0]["policy"], "paid-checkout");
    assert_eq!(unacknowledged[0]["from"], "100/s;burst=250");
    assert_eq!(unacknowledged[0]["to"], "100/min;burst=250");
    assert_eq!(unacknowledged[0]["factor"], 60.0);
    assert_eq!(unacknowledged[0]["acknowledge"], ACKNOWLEDGEMENT.trim());

    let error = &report["errors"][0];
    assert_eq!(error["file"], TIGHTENED);
    assert_eq!(error["path"], "policies[paid-checkout].quota");
    assert_eq!(error["kind"], "unacknowledged_tightening");
    assert!(error["hint"]
        .as_str()
        .is_some_and(|h| h.contains("[[acknowledge]]")));
    assert_eq!(error["line"], Value::Null);
    assert_eq!(error["column"], Value::Null);

    let ok = tollgate(&["diff", "--format", "json", VALID, VALID]);
    assert_eq!(ok.code, Some(0), "{ok:?}");
    let ok = ok.json();
    assert_eq!(ok["ok"], true);
    assert_eq!(ok["unacknowledged"], Value::Array(vec![]));
    assert_eq!(ok["errors"], Value::Array(vec![]));
}

#[test]
fn diff_json_of_an_invalid_document_has_no_diff_and_every_error() {
    let run = tollgate(&["diff", "--format", "json", MISNAMED_KEY, MISSING_UNIT]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let report = run.json();
    assert_eq!(report["diff"], Value::Null);
    let errors = report["errors"].as_array().expect("list");
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[0]["file"], MISNAMED_KEY);
    assert_eq!(errors[0]["kind"], "unknown_field");
    assert_eq!(errors[1]["file"], MISSING_UNIT);
}

#[test]
fn diff_documents_its_json_shape_in_help() {
    let run = tollgate(&["diff", "--help"]);
    assert_eq!(run.code, Some(0));
    for key in [
        r#""diff""#,
        r#""unacknowledged""#,
        r#""acknowledge""#,
        r#""errors""#,
    ] {
        assert_contains(&run.stdout, key);
    }
}
