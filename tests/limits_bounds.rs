//! Bounds on a limits document: at most [`Limits::MAX_POLICIES`] policies, refused as the
//! parser meets the one past the cap; at most [`Limits::MAX_ALSO_POLICIES`] policies marked `also`;
//! at most [`Limits::MAX_LISTED_ERRORS`] errors listed, then a count of the rest — in every format.
//!
//! The one timing assertion compares two refusals in thread CPU time, as `tests/scaling.rs`
//! does; none asserts an absolute time.
#![cfg(feature = "config")]

use std::hint::black_box;
use std::time::Duration;

#[path = "common/cpu_time.rs"]
mod cpu_time;
use cpu_time::thread_cpu_time;

use tollgate::limits::{ConfigErrorKind as Kind, Format, Limits};

const FORMATS: [Format; 3] = [Format::Toml, Format::Yaml, Format::Json];

/// A policy of `fields` (a JSON object's inside), the way `format` writes one list item.
fn item(format: Format, name: &str, fields: &str) -> String {
    match format {
        Format::Toml => format!("[[policies]]\nname = \"{name}\"\n{fields}\n"),
        Format::Yaml => format!("- {{ name: \"{name}\", {fields} }}\n"),
        _ => format!("{{\"name\": \"{name}\", {fields}}}"),
    }
}

/// The fields of a small valid policy matching the route `/{i}`, in `format`.
fn valid_fields(format: Format, i: usize, quota: &str, also: bool) -> String {
    match format {
        Format::Toml => {
            format!("match = {{ route = \"/{i}\" }}\nquota = \"{quota}\"\nalso = {also}")
        }
        Format::Yaml => format!("match: {{ route: \"/{i}\" }}, quota: \"{quota}\", also: {also}"),
        _ => {
            format!("\"match\": {{\"route\": \"/{i}\"}}, \"quota\": \"{quota}\", \"also\": {also}")
        }
    }
}

/// A document whose policies are `items` (already written by [`item`]).
fn document(format: Format, revision: u64, items: &[String]) -> String {
    match format {
        Format::Toml => format!("schema = 1\nrevision = {revision}\n{}", items.concat()),
        Format::Yaml => format!(
            "schema: 1\nrevision: {revision}\npolicies:\n{}",
            items.concat()
        ),
        _ => format!(
            "{{\"schema\": 1, \"revision\": {revision}, \"policies\": [\n{}\n]}}",
            items.join(",\n")
        ),
    }
}

/// `n` valid policies, the first `also` of them marked `also = true`.
fn valid(format: Format, n: usize, also: usize, quota: &str, revision: u64) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| {
            item(
                format,
                &format!("p{i}"),
                &valid_fields(format, i, quota, i < also),
            )
        })
        .collect();
    document(format, revision, &items)
}

/// `n` policies that are empty tables (the smallest a policy can be written).
fn empty_policies(format: Format, n: usize) -> String {
    match format {
        Format::Toml => format!("schema = 1\nrevision = 1\n{}", "[[policies]]\n".repeat(n)),
        Format::Yaml => format!("schema: 1\nrevision: 1\npolicies:\n{}", "- {}\n".repeat(n)),
        _ => {
            let items = vec!["{}"; n].join(",");
            format!("{{\"schema\": 1, \"revision\": 1, \"policies\": [{items}]}}")
        }
    }
}

fn assert_too_many_policies(format: Format, text: &str, line: usize) {
    let errors = Limits::parse(text, format).expect_err("one policy too many");
    assert_eq!(
        errors.len(),
        1,
        "{format}: {}",
        first_lines(&errors.to_string())
    );
    let err = &errors[0];
    assert_eq!(err.kind(), Kind::TooManyPolicies, "{format}: {err}");
    assert_eq!(err.path(), "policies", "{format}");
    assert_eq!(
        err.line(),
        Some(line),
        "{format}: where the 100,001st policy starts"
    );
    assert!(
        err.message().contains("100000"),
        "{format}: the message names the cap: {err}"
    );
    assert_eq!(
        err.to_string(),
        "policies: more than 100000 policies; a document may have at most 100000 \
         (tollgate::limits::Limits::MAX_POLICIES): split it, or merge policies that share a quota",
        "{format}"
    );
}

fn first_lines(text: &str) -> String {
    text.lines().take(3).collect::<Vec<_>>().join("\n")
}

#[test]
fn one_policy_past_the_cap_is_refused_naming_the_cap_in_every_format() {
    assert_eq!(Limits::MAX_POLICIES, 100_000);
    for format in FORMATS {
        let text = valid(format, Limits::MAX_POLICIES + 1, 0, "1/s", 1);
        // The 100,001st policy starts on this line: TOML spends 5 lines a policy after the
        // 2-line header, YAML 1 after 3, JSON 1 after 1.
        let line = match format {
            Format::Toml => 3 + 5 * Limits::MAX_POLICIES,
            Format::Yaml => 4 + Limits::MAX_POLICIES,
            _ => 2 + Limits::MAX_POLICIES,
        };
        assert_too_many_policies(format, &text, line);
    }
}

#[test]
fn exactly_the_cap_is_accepted_in_every_format() {
    for format in FORMATS {
        let text = valid(format, Limits::MAX_POLICIES, 0, "1/s", 1);
        let limits = Limits::parse(&text, format)
            .unwrap_or_else(|e| panic!("{format}: {}", first_lines(&e.to_string())));
        assert_eq!(limits.policies().len(), Limits::MAX_POLICIES, "{format}");
    }
}

#[test]
fn policies_written_as_an_inline_toml_array_count_too() {
    let items: Vec<String> = (0..=Limits::MAX_POLICIES)
        .map(|i| format!("{{ name = \"p{i}\", match = {{ route = \"/{i}\" }}, quota = \"1/s\" }}"))
        .collect();
    let text = format!(
        "schema = 1\nrevision = 1\npolicies = [\n{}\n]\n",
        items.join(",\n")
    );
    assert_too_many_policies(Format::Toml, &text, 4 + Limits::MAX_POLICIES);
    // Brackets and the word in strings and comments are not policies.
    let tricky = "schema = 1\nrevision = 1\n# [[policies]]\nnote = \"\"\"\n[[policies]]\n\"\"\"\n\
                  policies = [ { name = \"a\", match = { route = \"/[x]\" }, quota = \"1/s\" } ]\n";
    let errors = Limits::from_toml(tricky).expect_err("an unknown field");
    assert_eq!(errors[0].kind(), Kind::UnknownField);
}

#[test]
fn a_yaml_alias_cannot_slip_more_policies_past_the_cap() {
    // The list is built under another key (not counted as it is read), then aliased.
    let items = "- {}\n".repeat(Limits::MAX_POLICIES + 1);
    let text = format!("x: &all\n{items}schema: 1\nrevision: 1\npolicies: *all\n");
    let errors = Limits::from_yaml(&text).expect_err("too many");
    let kinds: Vec<Kind> = errors.iter().take(3).map(|e| e.kind()).collect();
    assert_eq!(kinds, [Kind::UnknownField, Kind::TooManyPolicies]);
}

/// The fastest of a few refusals of `text`.
fn refusal_time(format: Format, text: &str) -> Duration {
    (0..5)
        .map(|_| {
            let start = thread_cpu_time();
            let refused = black_box(Limits::parse(text, format)).is_err();
            let spent = thread_cpu_time().saturating_sub(start);
            assert!(refused);
            spent
        })
        .min()
        .unwrap_or(Duration::MAX)
}

#[test]
fn refusing_four_times_the_cap_costs_about_what_one_past_it_does() {
    for format in FORMATS {
        let (small, large) = (Limits::MAX_POLICIES + 1, 4 * (Limits::MAX_POLICIES + 1));
        let (small, large) = (empty_policies(format, small), empty_policies(format, large));
        let errors = Limits::parse(&large, format).expect_err("too many");
        assert_eq!(
            errors.len(),
            1,
            "{format}: {}",
            first_lines(&errors.to_string())
        );
        assert_eq!(errors[0].kind(), Kind::TooManyPolicies, "{format}");
        // Stopping at the cap, both refusals parse the same 100,001 policies (the larger one
        // only indexes its lines on top); parsing all of them would cost 4×.
        let mut seen = Vec::new();
        let passed = (0..3).any(|_| {
            let (a, b) = (refusal_time(format, &small), refusal_time(format, &large));
            let ratio = b.as_secs_f64() / a.as_secs_f64().max(1e-9);
            eprintln!("{format}: refusing 100,001: {a:?}, 400,004: {b:?}, ratio {ratio:.2}");
            seen.push(format!("{ratio:.2}"));
            ratio < 2.0
        });
        assert!(passed, "{format}: ratios {seen:?}, expected under 2");
    }
}

#[test]
fn more_also_policies_than_the_cap_are_one_error_naming_it() {
    assert_eq!(Limits::MAX_ALSO_POLICIES, 64);
    for format in FORMATS {
        let ok = Limits::parse(
            &valid(format, 100, Limits::MAX_ALSO_POLICIES, "1/s", 1),
            format,
        )
        .unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(ok.policies().iter().filter(|p| p.also()).count(), 64);
        let errors = Limits::parse(&valid(format, 100, 80, "1/s", 1), format)
            .expect_err("65 and more `also` policies");
        assert_eq!(errors.len(), 1, "{format}: {errors}");
        let err = &errors[0];
        assert_eq!(err.kind(), Kind::TooManyAlsoPolicies, "{format}: {err}");
        assert_eq!(err.path(), "policies[p64].also", "{format}: the 65th");
        assert_eq!(
            err.message(),
            "80 policies marked `also`, more than 64; every request is checked against each \
             one that matches: keep at most 64 (tollgate::limits::Limits::MAX_ALSO_POLICIES), or give their \
             limits to fewer policies",
            "{format}"
        );
        assert!(err.line().is_some(), "{format}");
    }
}

/// A document of `n` policies, each with a quota missing its unit (one error each).
fn one_error_each(format: Format, n: usize) -> String {
    valid(format, n, 0, "10", 1)
}

#[test]
fn errors_are_listed_up_to_the_cap_then_counted_in_every_format() {
    assert_eq!(Limits::MAX_LISTED_ERRORS, 1_000);
    for format in FORMATS {
        let errors = Limits::parse(&one_error_each(format, 2_500), format).expect_err("2,500");
        assert_eq!(errors.len(), Limits::MAX_LISTED_ERRORS, "{format}");
        assert_eq!(errors.omitted(), 1_500, "{format}");
        assert_eq!(errors.iter().count(), 1_000);
        assert_eq!(
            errors[999].path(),
            "policies[p999].quota",
            "{format}: in document order"
        );
        let text = errors.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1_001, "{format}");
        assert_eq!(lines[1_000], "… and 1500 more errors", "{format}");
        // Exactly at the cap: every error listed, nothing counted apart.
        let errors = Limits::parse(&one_error_each(format, 1_000), format).expect_err("1,000");
        assert_eq!((errors.len(), errors.omitted()), (1_000, 0), "{format}");
        assert!(!errors.to_string().contains("more error"), "{format}");
    }
    let errors = Limits::from_toml(&one_error_each(Format::Toml, 1_001)).expect_err("1,001");
    assert_eq!((errors.len(), errors.omitted()), (1_000, 1));
    assert!(errors.to_string().ends_with("\n… and 1 more error"));
}

#[test]
fn a_transition_lists_at_most_the_cap_of_unacknowledged_tightenings() {
    let old = Limits::from_toml(&valid(Format::Toml, 1_200, 0, "1000/s", 1)).expect("valid");
    let new = Limits::from_toml(&valid(Format::Toml, 1_200, 0, "1/s", 2)).expect("valid");
    let errors = Limits::check_transition(&old, &new, Limits::DEFAULT_GUARD).expect_err("tighter");
    assert_eq!((errors.len(), errors.omitted()), (1_000, 200));
    assert!(errors
        .iter()
        .all(|e| e.kind() == Kind::UnacknowledgedTightening));
    assert!(errors.to_string().ends_with("\n… and 200 more errors"));
}

#[cfg(feature = "cli")]
mod cli {
    use super::*;
    use std::process::Command;

    fn run(args: &[&str]) -> (Option<i32>, String) {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(args)
            .output()
            .expect("the binary runs");
        let stdout = String::from_utf8(output.stdout).expect("UTF-8");
        (output.status.code(), stdout)
    }

    #[test]
    fn check_lists_the_capped_errors_then_the_count_of_the_rest() {
        let dir = std::env::temp_dir().join(format!("tollgate-bounds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("many-errors.toml");
        std::fs::write(&path, one_error_each(Format::Toml, 1_500)).expect("written");
        let file = path.to_str().expect("UTF-8 path");

        let (code, out) = run(&["check", file]);
        assert_eq!(code, Some(1));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines.len(),
            1_002,
            "1,000 errors, the rest counted, the summary"
        );
        assert!(
            lines[999].contains("policies[p999].quota"),
            "{}",
            lines[999]
        );
        assert_eq!(lines[1_000], format!("{file}: … and 500 more errors"));
        assert_eq!(lines[1_001], "1500 errors in 1 of 1 file");

        let (code, out) = run(&["check", "--format", "json", file]);
        assert_eq!(code, Some(1));
        let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        let report = &json["files"][0];
        assert_eq!(report["errors"].as_array().map(Vec::len), Some(1_000));
        assert_eq!(report["more_errors"], 500);
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
