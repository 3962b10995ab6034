//! Limits as code (incident 001): loading, validation errors with paths and hints, `resolve`,
//! `diff` and the tightening guard, serialization round trips, and the sample documents.
#![cfg(feature = "config")]

use proptest::prelude::*;
use tollgate::limits::{ConfigError, ConfigErrorKind as Kind, ConfigErrors, Direction, Limits};
use tollgate::QuotaErrorKind;

fn load_toml(doc: &str) -> Limits {
    Limits::from_toml(doc).unwrap_or_else(|e| panic!("rejected:\n{e}\n---\n{doc}"))
}

fn errors(result: Result<Limits, ConfigErrors>) -> Vec<ConfigError> {
    match result {
        Ok(limits) => panic!("accepted: {limits:?}"),
        Err(errs) => errs.into_vec(),
    }
}

/// A TOML document with the usual header and these policies.
fn doc(policies: &str) -> String {
    format!(
        "schema = 1\nrevision = 1\ncategories = [\"checkout\", \"search\"]\n\
         tiers = [\"free\", \"paid\"]\n{policies}"
    )
}

/// The one error of a document, checked for kind and rendering.
fn only(result: Result<Limits, ConfigErrors>, kind: Kind, line: &str) -> ConfigError {
    let errs = errors(result);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    let err = errs.into_iter().next().unwrap();
    assert_eq!(err.kind(), kind, "{err}");
    assert_eq!(err.to_string(), line);
    if err.path().is_empty() {
        let at = format!(
            "line {}, column {}: ",
            err.line().unwrap(),
            err.column().unwrap()
        );
        assert_eq!(format!("{at}{}", err.message()), line);
    } else {
        assert_eq!(format!("{}: {}", err.path(), err.message()), line);
    }
    assert!(err.hint().is_some(), "{err} has no hint");
    err
}

const MISSING_UNIT: &str =
    r#"policies[paid-checkout].quota: missing unit in "10": write "10/s" or "10/min""#;

// ---- incident 001 ----------------------------------------------------------------------

#[test]
fn incident_001_bare_quota_fails_with_the_hint_in_every_spelling() {
    let policy = |quota: &str| {
        doc(&format!(
            "[[policies]]\nname = \"paid-checkout\"\n\
             match = {{ tier = \"paid\", category = \"checkout\" }}\nquota = {quota}\n"
        ))
    };
    let kind = Kind::Quota(QuotaErrorKind::MissingUnit);
    for result in [
        Limits::from_toml(&policy("\"10\"")),
        Limits::from_toml(&policy("10")),
        Limits::from_yaml(
            "schema: 1\nrevision: 1\ncategories: [checkout]\ntiers: [paid]\npolicies:\n  \
             - name: paid-checkout\n    match: { tier: paid, category: checkout }\n    quota: 10\n",
        ),
        Limits::from_json(
            r#"{"schema": 1, "revision": 1, "categories": ["checkout"], "tiers": ["paid"],
                "policies": [{"name": "paid-checkout",
                              "match": {"tier": "paid", "category": "checkout"}, "quota": 10}]}"#,
        ),
    ] {
        let err = only(result, kind, MISSING_UNIT);
        assert_eq!(err.path(), "policies[paid-checkout].quota");
        assert_eq!(err.hint(), Some(r#"write "10/s" or "10/min""#));
    }
}

#[test]
fn incident_001_misnamed_category_key_fails_with_did_you_mean() {
    let text = doc("[[policies]]\nname = \"free-search\"\n\
                    match = { tier = \"free\", categroy = \"search\" }\nquota = \"10/s\"\n");
    let err = only(
        Limits::from_toml(&text),
        Kind::UnknownField,
        r#"policies[free-search].match.categroy: unknown field; did you mean "category"?"#,
    );
    assert_eq!(err.hint(), Some(r#"did you mean "category"?"#));
}

fn api(quota: &str, revision: u64, ack: &str) -> Limits {
    load_toml(&format!(
        "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\n\
         match = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n{ack}"
    ))
}

#[test]
fn incident_001_sixty_times_tighter_needs_an_acknowledgement() {
    let old = api("10/s", 1, "");
    let new = api("10/min", 2, "");
    let diff = Limits::diff(&old, &new);
    let change = diff.changed()[0].quota.unwrap();
    assert_eq!(change.to_string(), "10/s → 10/min: 60× tighter");
    assert_eq!(change.factor(), 60.0);
    assert_eq!(change.direction(), Direction::Tighter);

    let errs = Limits::check_transition(&old, &new, Limits::DEFAULT_GUARD).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].kind(), Kind::UnacknowledgedTightening);
    assert_eq!(errs[0].path(), "policies[api].quota");
    assert!(errs[0]
        .message()
        .starts_with("10/s → 10/min: 60× tighter, beyond the guard of 10×"));

    let acked = api(
        "10/min",
        2,
        "[[acknowledge]]\npolicy = \"api\"\nfrom = \"10/s\"\nto = \"10/min\"\n",
    );
    let diff = Limits::check_transition(&old, &acked, Limits::DEFAULT_GUARD).unwrap();
    assert_eq!(diff.tightenings_beyond(Limits::DEFAULT_GUARD).len(), 1);
    assert!(diff
        .unacknowledged(&acked, Limits::DEFAULT_GUARD)
        .is_empty());
    // an acknowledgement of another change does not count
    let wrong = api(
        "10/min",
        2,
        "[[acknowledge]]\npolicy = \"api\"\nfrom = \"10/s\"\nto = \"5/min\"\n",
    );
    assert!(Limits::check_transition(&old, &wrong, Limits::DEFAULT_GUARD).is_err());
    // within the guard: no acknowledgement needed
    assert!(Limits::check_transition(&old, &api("1/s", 2, ""), Limits::DEFAULT_GUARD).is_ok());
}

#[test]
fn incident_001_traffic_moving_to_a_tighter_policy_is_reported_and_guarded() {
    let header = "schema = 1\nrevision = {r}\ncategories = [\"checkout\", \"search\"]\n\
                  tiers = [\"free\", \"paid\"]\n";
    let old = load_toml(&format!(
        "{}[[policies]]\nname = \"paid\"\nmatch = {{ tier = \"paid\" }}\nquota = \"100/s\"\n\
         [[policies]]\nname = \"free-search\"\nmatch = {{ category = \"search\" }}\nquota = \"100/s\"\n",
        header.replace("{r}", "1")
    ));
    // meant: free search to 10/s; wrote the wrong category and lost the unit's meaning
    let new = load_toml(&format!(
        "{}[[policies]]\nname = \"paid\"\nmatch = {{ tier = \"paid\" }}\nquota = \"100/s\"\n\
         [[policies]]\nname = \"free-search\"\nmatch = {{ category = \"checkout\" }}\nquota = \"10/min\"\n",
        header.replace("{r}", "2")
    ));
    let diff = Limits::diff(&old, &new);
    let text = diff.to_string();
    assert!(
        text.contains(
            "requests of tier=paid category=checkout move from paid to free-search: \
             100/s → 10/min: 600× tighter"
        ),
        "{text}"
    );
    assert!(text.contains("requests of tier=paid category=search move from free-search to paid"));
    let tight = diff.tightenings_beyond(Limits::DEFAULT_GUARD);
    let moved = tight.iter().find(|t| t.moved_from.is_some()).unwrap();
    assert_eq!(moved.policy, "free-search");
    assert_eq!(moved.requests, ["tier=paid category=checkout"]);
    assert_eq!(moved.factor, 600.0);
    let errs = Limits::check_transition(&old, &new, Limits::DEFAULT_GUARD).unwrap_err();
    assert!(errs
        .iter()
        .any(|e| e.path() == "policies[free-search].match"));
}

// ---- one failing document per rule -----------------------------------------------------

fn policy(name: &str, matcher: &str, quota: &str) -> String {
    format!("[[policies]]\nname = \"{name}\"\nmatch = {{ {matcher} }}\nquota = \"{quota}\"\n")
}

#[test]
fn unknown_fields_everywhere_with_did_you_mean() {
    let text = format!(
        "polices = 1\n{}",
        doc(&format!(
            "{}qouta = \"1/s\"\n[[acknowledge]]\npolicy = \"a\"\nform = \"1/s\"\nto = \"1/s\"\n",
            policy("a", "tier = \"free\"", "10/s")
        ))
    );
    let errs = errors(Limits::from_toml(&text));
    let lines: Vec<String> = errs.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            r#"polices: unknown field; did you mean "policies"?"#,
            r#"policies[a].qouta: unknown field; did you mean "quota"?"#,
            r#"acknowledge[0].form: unknown field; did you mean "from"?"#,
            r#"acknowledge[0].from: missing field; add the quota with its unit, such as "100/s""#,
        ]
    );
    let err = only(
        Limits::from_toml(&doc(&format!(
            "{}colour = 1\n",
            policy("a", "tier = \"free\"", "1/s")
        ))),
        Kind::UnknownField,
        "policies[a].colour: unknown field; the fields here are name, match, quota, burst, shadow, also, classes, retry_budget",
    );
    assert_eq!(
        err.hint(),
        Some("the fields here are name, match, quota, burst, shadow, also, classes, retry_budget")
    );
}

#[test]
fn duplicate_field_in_json_is_not_silently_dropped() {
    only(
        Limits::from_json(r#"{"schema": 1, "revision": 1, "revision": 2, "policies": []}"#),
        Kind::DuplicateField,
        "revision: field given twice; remove one: JSON and YAML readers silently keep the last",
    );
}

#[test]
fn duplicate_names() {
    let text = doc(&format!(
        "{}{}",
        policy("checkout", "tier = \"free\"", "1/s"),
        policy("checkout", "tier = \"paid\"", "2/s")
    ));
    only(
        Limits::from_toml(&text),
        Kind::DuplicateName,
        r#"policies[1].name: duplicate name "checkout": policies[0] has it too; give each policy a unique name"#,
    );
}

#[test]
fn empty_and_missing_matchers() {
    only(
        Limits::from_toml(&doc(&policy("a", "", "1/s"))),
        Kind::EmptyMatcher,
        r#"policies[a].match: empty matcher; match at least one of tier, category and route (route "/*" matches every route)"#,
    );
    only(
        Limits::from_toml(&doc("[[policies]]\nname = \"a\"\nquota = \"1/s\"\n")),
        Kind::MissingField,
        "policies[a].match: missing field; add `match` with a tier, a category or a route",
    );
}

#[test]
fn overlapping_matchers() {
    let text = doc(&format!(
        "{}{}",
        policy(
            "paid-checkout",
            "tier = \"paid\", category = \"checkout\"",
            "100/s"
        ),
        policy(
            "checkout-for-paid",
            "category = \"checkout\", tier = \"paid\"",
            "50/s"
        )
    ));
    only(
        Limits::from_toml(&text),
        Kind::OverlappingMatchers,
        "policies[checkout-for-paid].match: matches exactly the same requests as \
         policies[paid-checkout]; merge the two policies, or make one match more specific",
    );
}

#[test]
fn undeclared_categories_and_tiers() {
    only(
        Limits::from_toml(&doc(&policy("a", "category = \"checkuot\"", "1/s"))),
        Kind::Undeclared,
        r#"policies[a].match.category: undeclared category "checkuot"; did you mean "checkout"?"#,
    );
    only(
        Limits::from_toml(&doc(&policy("a", "tier = \"enterprise\"", "1/s"))),
        Kind::Undeclared,
        r#"policies[a].match.tier: undeclared tier "enterprise"; declare it in `tiers`"#,
    );
    only(
        Limits::from_toml(&format!(
            "schema = 1\nrevision = 1\ntiers = [\"free\", \"free\"]\n{}",
            policy("a", "tier = \"free\"", "1/s")
        )),
        Kind::InvalidValue,
        r#"tiers[1]: "free" declared twice; remove the repeat"#,
    );
}

#[test]
fn every_quota_error_kind_keeps_the_parser_message() {
    let cases = [
        ("10", QuotaErrorKind::MissingUnit),
        ("10/sec", QuotaErrorKind::UnknownUnit),
        ("10/m", QuotaErrorKind::AmbiguousUnit),
        ("10/s;burst=5kB", QuotaErrorKind::UnexpectedUnit),
        ("10 /s", QuotaErrorKind::Malformed),
        ("0/s", QuotaErrorKind::Zero),
        ("1000001/ms", QuotaErrorKind::TooFast),
        (
            "1000000000000000000000000000000000000000000000000000000000000000/s",
            QuotaErrorKind::TooLong,
        ),
        ("99999999999999999999/s", QuotaErrorKind::Overflow),
        ("3bit/s", QuotaErrorKind::BurstTooSmall),
        ("1MB/s;burst=12bit", QuotaErrorKind::PartialByte),
    ];
    for (quota, kind) in cases {
        let parser = quota.parse::<tollgate::Quota>().unwrap_err();
        assert_eq!(parser.kind(), kind, "{quota}");
        let errs = errors(Limits::from_toml(&doc(&policy(
            "a",
            "tier = \"free\"",
            quota,
        ))));
        assert_eq!(errs.len(), 1, "{quota}: {errs:?}");
        assert_eq!(errs[0].kind(), Kind::Quota(kind), "{quota}");
        assert_eq!(errs[0].path(), "policies[a].quota");
        assert!(
            errs[0].message().starts_with(&parser.to_string()),
            "{}",
            errs[0]
        );
        let hint = errs[0].hint().unwrap();
        assert!(errs[0].message().ends_with(hint), "{}", errs[0]);
    }
}

#[test]
fn bursts() {
    let with = |quota: &str, burst: &str| {
        Limits::from_toml(&doc(&format!(
            "{}burst = {burst}\n",
            policy("a", "tier = \"free\"", quota)
        )))
    };
    assert_eq!(
        with("100/s", "250").unwrap().policies()[0].quota().burst(),
        250
    );
    assert_eq!(
        with("1MB/s", "\"64KiB\"").unwrap().policies()[0]
            .quota()
            .burst(),
        65536
    );
    only(
        with("100/s;burst=5", "250"),
        Kind::Quota(QuotaErrorKind::DuplicateBurst),
        r#"policies[a].burst: burst given twice: in the quota "100/s;burst=5" and in `burst`; remove one of them"#,
    );
    // The burst is read as written, on its own: the error quotes what the document says,
    // never a quota string it does not contain.
    only(
        with("1MB/s", "64"),
        Kind::Quota(QuotaErrorKind::MissingUnit),
        r#"policies[a].burst: missing unit on the burst of a byte budget in "64": write "64B""#,
    );
    let zero =
        r#"policies[a].burst: burst is zero in "0" at byte 0; counts and bursts are at least 1"#;
    only(with("1/s", "0"), Kind::Quota(QuotaErrorKind::Zero), zero);
    let yaml = "schema: 1\nrevision: 1\npolicies:\n  - name: a\n    match: { route: /a }\n    quota: 10/s\n    burst: 0\n";
    let json = r#"{"schema": 1, "revision": 1, "policies": [{"name": "a", "match": {"route": "/a"}, "quota": "10/s", "burst": 0}]}"#;
    only(
        Limits::from_yaml(yaml),
        Kind::Quota(QuotaErrorKind::Zero),
        zero,
    );
    only(
        Limits::from_json(json),
        Kind::Quota(QuotaErrorKind::Zero),
        zero,
    );
    only(
        with("100/s", "\"10kB\""),
        Kind::Quota(QuotaErrorKind::UnexpectedUnit),
        r#"policies[a].burst: unexpected unit "kB" on the burst of a request quota in "10kB": write "10""#,
    );
    only(
        with("1/s", "1.5"),
        Kind::WrongType,
        r#"policies[a].burst: expected an integer or a size, found a float; write an integer, or a size such as "64MiB" for a byte budget"#,
    );
}

#[test]
fn wrong_types() {
    let cases: [(&str, &str); 7] = [
        ("schema = \"1\"\nrevision = 1\npolicies = []\n", "schema: expected the integer 1, found a string; write `schema = 1`"),
        ("schema = 1\nrevision = \"42\"\npolicies = []\n", "revision: expected an integer, found a string; a revision is an integer from 0 to 9223372036854775807 (the largest TOML holds)"),
        ("schema = 1\nrevision = 1\ntiers = \"paid\"\npolicies = []\n", "tiers: expected a list of names, found a string; write a list of names, such as `tiers = [\"a\", \"b\"]`"),
        ("schema = 1\nrevision = 1\n[policies]\nname = \"a\"\n", "policies: expected a list of policies, found a table; write a list of tables (`[[policies]]` in TOML)"),
        ("schema = 1\nrevision = 1\n[[policies]]\nname = 5\nmatch = { route = \"/\" }\nquota = \"1/s\"\n", "policies[0].name: expected a string, found an integer; write the name as a string"),
        ("schema = 1\nrevision = 1\n[[policies]]\nname = \"a\"\nmatch = { route = \"/\" }\nquota = \"1/s\"\nshadow = \"yes\"\n", "policies[a].shadow: expected a boolean, found a string; write `shadow = true` or `shadow = false`"),
        ("schema = 1\nrevision = 1\n[[policies]]\nname = \"a\"\nmatch = \"paid\"\nquota = { rate = \"1/s\" }\n", "policies[a].match: expected a table, found a string; a table with the fields tier, category, route"),
    ];
    for (text, line) in cases {
        let errs = errors(Limits::from_toml(text));
        assert_eq!(errs[0].kind(), Kind::WrongType, "{text}");
        assert_eq!(errs[0].to_string(), line);
    }
    // a quota table is not the schema's spelling
    let errs = errors(Limits::from_toml(
        "schema = 1\nrevision = 1\n[[policies]]\nname = \"a\"\nmatch = { route = \"/\" }\nquota = { rate = \"1/s\" }\n",
    ));
    assert_eq!(
        errs[0].to_string(),
        r#"policies[a].quota: expected a quota string, found a table; write a string with a unit, such as "100/s""#
    );
    let errs = errors(Limits::from_toml(
        "schema = 1\nrevision = 1979-05-27\npolicies = []\n",
    ));
    assert_eq!(errs[0].message(), "expected an integer, found a date; a revision is an integer from 0 to 9223372036854775807 (the largest TOML holds)");
    // YAML null is not "any"
    let errs = errors(Limits::from_yaml(
        "schema: 1\nrevision: 1\npolicies:\n  - name: a\n    match: { tier: ~, route: / }\n    quota: 1/s\n",
    ));
    assert_eq!(errs[0].to_string(), "policies[a].match.tier: expected a string, found null; write it as a string; leave the field out to match any");
    // a float quota is a missing unit too
    let errs = errors(Limits::from_json(
        r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":10.5}]}"#,
    ));
    assert_eq!(errs[0].kind(), Kind::Quota(QuotaErrorKind::MissingUnit));
    assert_eq!(
        errs[0].to_string(),
        r#"policies[a].quota: missing unit in "10.5"; a quota is a string with a unit, such as "10/s""#
    );
}

#[test]
fn missing_schema_and_revision_and_bad_values() {
    let errs = errors(Limits::from_json("{}"));
    let paths: Vec<&str> = errs.iter().map(ConfigError::path).collect();
    assert_eq!(paths, ["schema", "revision", "policies"]);
    assert!(errs.iter().all(|e| e.kind() == Kind::MissingField));
    only(
        Limits::from_toml("schema = 2\nrevision = 1\npolicies = []\n"),
        Kind::UnsupportedSchema,
        "schema: unsupported schema 2; this version of tollgate reads schema 1",
    );
    only(
        Limits::from_toml("schema = 1\nrevision = -1\npolicies = []\n"),
        Kind::InvalidValue,
        "revision: negative revision; a revision is an integer from 0 to 9223372036854775807 (the largest TOML holds)",
    );
    let errs = errors(Limits::from_json(
        r#"{"schema":1,"revision":18446744073709551615,"policies":[]}"#,
    ));
    assert_eq!(errs[0].message(), "revision too large; a revision is an integer from 0 to 9223372036854775807 (the largest TOML holds)");
    let err = only(
        Limits::from_json("[1, 2]"),
        Kind::WrongType,
        "line 1, column 1: expected a table, found a list; a table with the fields schema, revision, categories, tiers, policies, acknowledge",
    );
    assert_eq!(err.path(), "");
}

#[test]
fn invalid_names_and_routes() {
    only(
        Limits::from_toml(&doc(&policy("paid checkout", "tier = \"paid\"", "1/s"))),
        Kind::InvalidValue,
        r#"policies[0].name: invalid name "paid checkout"; a name starts with a letter and has at most 64 letters, digits, '-', '_' or '.'"#,
    );
    let errs = errors(Limits::from_toml(&doc(&policy(
        "a",
        "route = \"/v1/*/cards\"",
        "1/s",
    ))));
    assert_eq!(errs[0].kind(), Kind::InvalidValue);
    assert_eq!(errs[0].path(), "policies[a].match.route");
    assert!(errs[0]
        .message()
        .starts_with(r#"invalid route "/v1/*/cards"; a route starts with '/'"#));
}

#[test]
fn acknowledgements_must_name_a_policy() {
    let text = doc(&format!(
        "{}[[acknowledge]]\npolicy = \"paid-chekout\"\nfrom = \"10/s\"\nto = \"10/min\"\n",
        policy("paid-checkout", "tier = \"paid\"", "10/min")
    ));
    only(
        Limits::from_toml(&text),
        Kind::UnknownPolicy,
        r#"acknowledge[0].policy: unknown policy "paid-chekout"; did you mean "paid-checkout"?"#,
    );
}

#[test]
fn syntax_errors_have_line_and_column() {
    let toml = errors(Limits::from_toml("schema = 1\nrevision = = 1\n"));
    assert_eq!(
        (toml[0].kind(), toml[0].line(), toml[0].column()),
        (Kind::Syntax, Some(2), Some(12))
    );
    assert!(
        toml[0]
            .to_string()
            .starts_with("line 2, column 12: invalid TOML: "),
        "{}",
        toml[0]
    );
    let yaml = errors(Limits::from_yaml("schema: 1\npolicies: [\n"));
    assert_eq!(yaml[0].kind(), Kind::Syntax);
    assert!(yaml[0].line().is_some());
    let json = errors(Limits::from_json("{\n  \"schema\": 1,\n  oops\n}"));
    assert_eq!(
        json[0].to_string(),
        "line 3, column 3: invalid JSON: key must be a string"
    );
    for e in toml.iter().chain(&yaml).chain(&json) {
        assert!(!e.to_string().contains('\n'));
    }
}

/// Where an error is: its path, line and column.
type Place = (String, usize, usize);

/// Every error of `text` as a [`Place`], and the places that `marks` say: each mark is a
/// path, a line and the text that starts the value (or key) on that line.
fn positions(
    result: Result<Limits, ConfigErrors>,
    text: &str,
    marks: &[(&str, usize, &str)],
) -> (Vec<Place>, Vec<Place>) {
    let got = errors(result)
        .iter()
        .map(|e| {
            (
                e.path().to_owned(),
                e.line().unwrap_or(0),
                e.column().unwrap_or(0),
            )
        })
        .collect();
    let lines: Vec<&str> = text.lines().collect();
    let want = marks
        .iter()
        .map(|&(path, line, start)| {
            let column = lines[line - 1]
                .find(start)
                .unwrap_or_else(|| panic!("{start}"))
                + 1;
            (path.to_owned(), line, column)
        })
        .collect();
    (got, want)
}

#[test]
fn validation_errors_carry_the_line_and_column_of_the_value_in_every_format() {
    let toml = r#"schema = 1
revision = 1
tiers = ["free"]

[[policies]]
name = "twin"
match = { tier = "gold" }
quota = "10"
colour = "red"

[[policies]]
name = "twin"
match = { route = "/x" }

[[policies]]
name = "b"
match = { route = "/x" }
quota = "10/s"
"#;
    let (got, want) = positions(
        Limits::from_toml(toml),
        toml,
        &[
            ("policies[0].colour", 9, "colour"),
            ("policies[0].match.tier", 7, "\"gold\""),
            ("policies[0].quota", 8, "\"10\""),
            ("policies[1].quota", 11, "[[policies]]"), // missing: where the table starts
            ("policies[1].name", 12, "\"twin\""),
            ("policies[b].match", 17, "{"),
        ],
    );
    assert_eq!(got, want);

    let yaml = "schema: 1
revision: 1
tiers: [free]
policies:
  - name: twin
    match: { tier: gold }
    quota: 10
    colour: red
  - name: twin
    match: { route: /x }
  - name: b
    match: { route: /x }
    quota: 10/s
";
    let (got, want) = positions(
        Limits::from_yaml(yaml),
        yaml,
        &[
            ("policies[0].colour", 8, "colour"),
            ("policies[0].match.tier", 6, "gold"),
            ("policies[0].quota", 7, "10"),
            ("policies[1].quota", 9, "name"), // missing: where the table starts
            ("policies[1].name", 9, "twin"),
            ("policies[b].match", 12, "{"),
        ],
    );
    assert_eq!(got, want);

    let json = r#"{
  "schema": 1,
  "revision": 1,
  "tiers": ["free"],
  "policies": [
    {"name": "twin", "match": {"tier": "gold"}, "quota": 10, "colour": "red"},
    {"name": "twin", "match": {"route": "/x"}},
    {"name": "b", "match": {"route": "/x"}, "quota": "10/s"}
  ]
}
"#;
    let (got, want) = positions(
        Limits::from_json(json),
        json,
        &[
            ("policies[0].colour", 6, "\"colour\""),
            ("policies[0].match.tier", 6, "\"gold\""),
            ("policies[0].quota", 6, "10,"),
            ("policies[1].quota", 7, "{"), // missing: where the table starts
            ("policies[1].name", 7, "\"twin\""),
            ("policies[b].match", 8, "{\"route"),
        ],
    );
    assert_eq!(got, want);
}

#[test]
fn every_error_is_collected_one_per_line() {
    let text = "schema = 3\nrevision = 1\ntiers = [\"paid\"]\n\
                [[policies]]\nname = \"a\"\nmatch = { tier = \"gold\" }\nquota = \"10\"\nshadow = 1\n\
                [[policies]]\nname = \"b\"\nmatch = {}\nquota = \"5/m\"\n";
    let errs = Limits::from_toml(text).unwrap_err();
    assert_eq!(errs.len(), 6, "{errs}");
    assert_eq!(errs.to_string().lines().count(), 6);
    assert_eq!(
        errs.to_string(),
        errs.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

// ---- resolve ---------------------------------------------------------------------------

const RESOLVE: &[(&str, &str, &str)] = &[
    ("paid", "tier = \"paid\"", "100/s"),
    ("checkout", "category = \"checkout\"", "50/s"),
    (
        "paid-checkout",
        "tier = \"paid\", category = \"checkout\"",
        "40/s",
    ),
    ("v1", "route = \"/v1/*\"", "30/s"),
    ("v1-cards", "route = \"/v1/cards/*\"", "20/s"),
    ("v1-cards-exact", "route = \"/v1/cards\"", "10/s"),
    ("free-v1", "tier = \"free\", route = \"/v1/*\"", "5/s"),
    ("all", "route = \"/*\"", "1000/s"),
];

fn resolver(reversed: bool) -> Limits {
    let mut list: Vec<_> = RESOLVE.iter().collect();
    if reversed {
        list.reverse();
    }
    let policies: String = list.iter().map(|(n, m, q)| policy(n, m, q)).collect();
    load_toml(&doc(&policies))
}

#[test]
fn resolve_most_specific_wins_whatever_the_order() {
    let cases = [
        // two fields beat one
        (("paid", "checkout", "/x"), Some("paid-checkout")),
        (("free", "search", "/v1/a"), Some("free-v1")),
        // exact route beats a prefix, a longer prefix beats a shorter one
        (("free", "search", "/v1/cards"), Some("free-v1")),
        (("paid", "search", "/v1/cards"), Some("v1-cards-exact")),
        (("paid", "search", "/v1/cards/9"), Some("v1-cards")),
        (("paid", "search", "/v1/x"), Some("v1")),
        (("paid", "search", "/v2"), Some("all")),
        // route beats category beats tier at one field each
        (("free", "checkout", "/v2"), Some("all")),
        (("free", "checkout", "v2"), Some("checkout")),
        (("paid", "search", "v2"), Some("paid")),
        (("free", "search", "v2"), None),
    ];
    for reversed in [false, true] {
        let limits = resolver(reversed);
        for ((t, c, r), want) in cases {
            let got = limits.resolve(t, c, r).map(|p| p.name());
            assert_eq!(got, want, "{t} {c} {r} (reversed: {reversed})");
        }
    }
}

// ---- diff ------------------------------------------------------------------------------

#[test]
fn diff_lists_added_removed_changed_and_serializes() {
    let old = load_toml(&doc(&format!(
        "{}{}",
        policy("a", "tier = \"free\"", "10/s"),
        policy("b", "tier = \"paid\"", "100/s")
    )));
    let new = load_toml(&doc(&format!(
        "{}{}shadow = true\n{}",
        policy("a", "tier = \"free\"", "20/s;burst=5"),
        policy("b", "tier = \"paid\", category = \"search\"", "100/s"),
        policy("c", "category = \"checkout\"", "1/s")
    )));
    let diff = Limits::diff(&old, &new);
    assert_eq!(diff.added()[0].name(), "c");
    assert!(diff.removed().is_empty());
    assert_eq!(diff.changed().len(), 2);
    let a = diff.changed()[0].quota.unwrap();
    assert_eq!(a.direction(), Direction::Mixed);
    assert_eq!(
        a.to_string(),
        "10/s → 20/s;burst=5: rate 2× looser, burst 2× tighter"
    );
    assert!(diff.changed()[1].shadow.is_some() && diff.changed()[1].matcher.is_some());
    let json = serde_json::to_value(&diff).unwrap();
    assert_eq!(json["changed"][0]["quota"]["direction"], "mixed");
    assert_eq!(json["changed"][0]["quota"]["from"], "10/s");
    assert_eq!(json["added"][0]["match"]["category"], "checkout");
    let text = diff.to_string();
    assert!(text.starts_with("revision 1 → 1\n"), "{text}");
    assert!(text.contains("added    c"), "{text}");
    assert!(
        text.contains("match tier=paid → tier=paid category=search"),
        "{text}"
    );
    // a changed document needs a higher revision
    let errs = Limits::check_transition(&old, &new, Limits::DEFAULT_GUARD).unwrap_err();
    assert_eq!(errs[0].kind(), Kind::StaleRevision);
    assert!(Limits::check_transition(&old, &old, Limits::DEFAULT_GUARD).is_ok());
}

#[test]
fn byte_budgets_compare_in_bytes() {
    let change =
        tollgate::limits::QuotaChange::new("1Gbit/s".parse().unwrap(), "1MB/s".parse().unwrap());
    assert_eq!(change.rate_factor(), 125.0);
    let mixed = tollgate::limits::QuotaChange::new("1/s".parse().unwrap(), "1B/s".parse().unwrap());
    assert_eq!(mixed.direction(), Direction::Incomparable);
    assert!(mixed.tightening().is_infinite());
}

// ---- samples ---------------------------------------------------------------------------

const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/limits/");

fn sample(name: &str) -> Result<Limits, ConfigErrors> {
    Limits::from_path(format!("{SAMPLES}{name}"))
}

#[test]
fn samples_load_or_fail_as_expected() {
    let valid = sample("valid.toml").unwrap();
    assert_eq!(valid.tiers(), ["free", "paid", "enterprise"]);
    assert_eq!(
        valid
            .resolve("paid", "checkout", "/v1/checkout/pay")
            .unwrap()
            .name(),
        "paid-checkout"
    );
    let name = |t, c, r| valid.resolve(t, c, r).map(|p| p.name());
    assert_eq!(name("paid", "checkout", "/v1/uploads/x"), Some("uploads"));
    assert_eq!(name("paid", "search", "/v1/search"), Some("paid-search"));
    assert_eq!(
        name("enterprise", "search", "/v1/search"),
        Some("enterprise")
    );
    assert_eq!(
        name("free", "checkout", "/v1/checkout/pay"),
        Some("free-checkout")
    );

    assert_eq!(
        errors(sample("missing-unit.toml"))[0].to_string(),
        MISSING_UNIT
    );
    let misnamed = errors(sample("misnamed-key.yaml"));
    assert_eq!(
        misnamed[0].to_string(),
        r#"policies[free-search].match.categroy: unknown field; did you mean "category"?"#
    );
    let dup = errors(sample("duplicate-name.json"));
    assert_eq!(dup[0].kind(), Kind::DuplicateName);
    assert_eq!(dup[0].path(), "policies[1].name");
    assert_eq!(
        errors(sample("overlap.toml"))[0].kind(),
        Kind::OverlappingMatchers
    );

    let tightened = sample("tightened.toml").unwrap();
    let errs = Limits::check_transition(&valid, &tightened, Limits::DEFAULT_GUARD).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert!(errs[0].message().starts_with(
        "100/s;burst=250 → 100/min;burst=250: 60× tighter, beyond the guard of 10×; "
    ));
    let text = std::fs::read_to_string(format!("{SAMPLES}tightened.toml")).unwrap();
    let acked = load_toml(&format!(
        "{text}\n[[acknowledge]]\npolicy = \"paid-checkout\"\nfrom = \"100/s;burst=250\"\nto = \"100/min;burst=250\"\n"
    ));
    assert!(Limits::check_transition(&valid, &acked, Limits::DEFAULT_GUARD).is_ok());

    let unknown = errors(Limits::from_path("limits.ini"));
    assert_eq!(unknown[0].kind(), Kind::UnknownFormat);
    let missing = errors(Limits::from_path(format!("{SAMPLES}absent.toml")));
    assert_eq!(missing[0].kind(), Kind::Io);
}

#[test]
fn the_valid_sample_reads_the_same_in_every_format() {
    let valid = sample("valid.toml").unwrap();
    assert_eq!(Limits::from_yaml(&valid.to_yaml()).unwrap(), valid);
    assert_eq!(Limits::from_json(&valid.to_json()).unwrap(), valid);
    assert_eq!(Limits::from_toml(&valid.to_toml()).unwrap(), valid);
}

// ---- properties ------------------------------------------------------------------------

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9._-]{0,8}"
}

fn route() -> impl Strategy<Value = String> {
    // printable ASCII, quotes, comment and YAML markers included, to test escaping
    ("/[!-)+-~]{0,12}", any::<bool>()).prop_map(|(r, star)| if star { r + "*" } else { r })
}

fn quota() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            1u64..100_000,
            prop::sample::select(vec!["ms", "s", "min", "h", "d"])
        )
            .prop_map(|(n, u)| format!("{n}/{u}")),
        (1u64..1000, 1u64..10_000).prop_map(|(n, b)| format!("{n}/s;burst={b}")),
        (
            1u64..1000,
            prop::sample::select(vec!["B", "kB", "MiB", "Gbit"])
        )
            .prop_map(|(n, w)| format!("{n}{w}/s")),
    ]
}

/// `Limits::resolve`'s order, spelled out from its documentation: fields set, then the route
/// (exact above the longest prefix above none), then category, then tier.
fn specificity(m: &tollgate::limits::Matcher) -> (usize, usize, bool, bool) {
    let fields = [m.tier(), m.category(), m.route()];
    let route = match m.route() {
        None => 0,
        Some(r) => r
            .strip_suffix('*')
            .map_or(usize::MAX, |prefix| prefix.len() + 1),
    };
    let set = fields.iter().filter(|f| f.is_some()).count();
    (set, route, m.category().is_some(), m.tier().is_some())
}

prop_compose! {
    fn document()(
        revision in 0u64..=i64::MAX as u64,
        tiers in prop::collection::btree_set(name(), 0..4),
        cats in prop::collection::btree_set(name(), 0..4),
        raw in prop::collection::vec(
            (name(), any::<u8>(), any::<u8>(), prop::option::of(route()), quota(), any::<bool>()),
            0..8,
        ),
    ) -> serde_json::Value {
        let tiers: Vec<String> = tiers.into_iter().collect();
        let cats: Vec<String> = cats.into_iter().collect();
        let mut names = std::collections::BTreeSet::new();
        let mut matchers = std::collections::BTreeSet::new();
        let mut policies = Vec::new();
        for (name, t, c, route, quota, shadow) in raw {
            let tier = (!tiers.is_empty() && t % 2 == 0).then(|| tiers[usize::from(t) % tiers.len()].clone());
            let cat = (!cats.is_empty() && c % 2 == 0).then(|| cats[usize::from(c) % cats.len()].clone());
            let key = (tier.clone(), cat.clone(), route.clone());
            if key == (None, None, None) || !matchers.insert(key) || !names.insert(name.clone()) {
                continue;
            }
            let mut m = serde_json::Map::new();
            for (k, v) in [("tier", tier), ("category", cat), ("route", route)] {
                if let Some(v) = v {
                    m.insert(k.into(), v.into());
                }
            }
            policies.push(serde_json::json!({"name": name, "match": m, "quota": quota, "shadow": shadow}));
        }
        let ack: Vec<_> = policies.iter().take(1).map(|p| serde_json::json!({
            "policy": p["name"], "from": "1/s", "to": p["quota"],
        })).collect();
        serde_json::json!({
            "schema": 1, "revision": revision, "tiers": tiers, "categories": cats,
            "policies": policies, "acknowledge": ack,
        })
    }
}

proptest! {
    #[test]
    fn valid_documents_round_trip_through_every_format(doc in document()) {
        let limits = Limits::from_json(&doc.to_string()).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        prop_assert_eq!(&Limits::from_toml(&limits.to_toml()).unwrap(), &limits);
        prop_assert_eq!(&Limits::from_yaml(&limits.to_yaml()).unwrap(), &limits);
        prop_assert_eq!(&Limits::from_json(&limits.to_json()).unwrap(), &limits);
        // and the diff of a document with itself is empty, with every request resolved
        prop_assert!(Limits::diff(&limits, &limits).is_empty());
    }

    #[test]
    fn resolve_agrees_with_a_scan_of_every_policy(
        doc in document(),
        requests in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), "[a-z/]{0,3}"), 1..24),
    ) {
        let limits = Limits::from_json(&doc.to_string()).unwrap();
        let mut tiers: Vec<&str> = limits.tiers().iter().map(String::as_str).collect();
        let mut cats: Vec<&str> = limits.categories().iter().map(String::as_str).collect();
        tiers.push("other");
        cats.push("other");
        let routes: Vec<&str> = limits.policies().iter().filter_map(|p| p.matcher().route()).collect();
        for (t, c, r, tail) in requests {
            let tier = tiers[usize::from(t) % tiers.len()];
            let category = cats[usize::from(c) % cats.len()];
            // a policy's route (a prefix cut short, exact, or extended), or another
            let route = match routes.get(usize::from(r) % (routes.len() + 1)) {
                Some(pattern) => format!("{}{tail}", pattern.trim_end_matches('*')),
                None => format!("/{tail}"),
            };
            let oracle = limits
                .policies()
                .iter()
                .filter(|p| p.matcher().matches(tier, category, &route))
                .max_by_key(|p| specificity(p.matcher()))
                .map(|p| p.name());
            prop_assert_eq!(limits.resolve(tier, category, &route).map(|p| p.name()), oracle);
        }
    }

    #[test]
    fn diffs_of_any_two_documents_never_panic(a in document(), b in document()) {
        let (a, b) = (Limits::from_json(&a.to_string()).unwrap(), Limits::from_json(&b.to_string()).unwrap());
        let diff = Limits::diff(&a, &b);
        let _ = diff.to_string();
        let _ = serde_json::to_string(&diff).unwrap();
        let _ = Limits::check_transition(&a, &b, Limits::DEFAULT_GUARD);
    }

    #[test]
    fn parsers_never_panic_on_any_string(text in any::<String>()) {
        for result in [Limits::from_toml(&text), Limits::from_yaml(&text), Limits::from_json(&text)] {
            if let Err(errs) = result {
                prop_assert!(errs.len() >= 1);
                let _ = errs.to_string();
            }
        }
    }

    #[test]
    fn parsers_never_panic_on_document_like_text(
        text in r#"(schema|revision|policies|name|match|quota|tier|route|\[|\]|\{|\}|=|:|"|,|-| |\n|1|10/s|/v1/\*|\[\[policies\]\]|~|!tag|&a|\*a)*"#
    ) {
        let _ = Limits::from_toml(&text).map_err(|e| e.to_string());
        let _ = Limits::from_yaml(&text).map_err(|e| e.to_string());
        let _ = Limits::from_json(&text).map_err(|e| e.to_string());
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = "[".repeat(100_000);
    assert!(Limits::from_json(&deep).is_err());
    assert!(Limits::from_yaml(&deep).is_err());
    assert!(Limits::from_toml(&format!("a = {deep}")).is_err());
    let tagged = Limits::from_yaml("schema: !int 1\nrevision: 1\npolicies: []\n");
    assert_eq!(
        errors(tagged)[0].to_string(),
        "schema: expected the integer 1, found a tagged value; write `schema = 1`"
    );
}

// ---- incident 003: priority classes, retry budgets, byte budgets --------------------------

/// A one-policy document: a route policy with `quota` and the extra lines.
fn link(quota: &str, extra: &str) -> String {
    doc(&format!(
        "[[policies]]\nname = \"link\"\nmatch = {{ route = \"/replicate/*\" }}\nquota = \"{quota}\"\n{extra}\n"
    ))
}

#[test]
fn incident_003_classes_retry_budgets_and_byte_budgets_load() {
    let limits = sample("shared-link.toml").unwrap();
    let replication = limits.policy("replication").unwrap();
    assert_eq!(replication.quota(), "2Gbit/s;burst=64MiB".parse().unwrap());
    assert_eq!(replication.quota().burst(), 64 << 20);
    let classes = replication.classes().unwrap();
    assert_eq!(classes.classes().collect::<Vec<_>>(), [(0, 0.0), (2, 0.5)]);
    assert!(replication.retry_budget().is_none());

    let writes = limits.policy("writes").unwrap();
    let budget = writes.retry_budget().unwrap();
    assert_eq!(budget, tollgate::shaping::RetryBudget::new()); // the defaults, written out
    assert!(writes.classes().is_none());

    let uploads = limits.policy("uploads").unwrap();
    assert_eq!(uploads.classes().unwrap().reserve(1), 0.2);
    let budget = uploads.retry_budget().unwrap();
    assert_eq!(
        (budget.ratio(), budget.period(), budget.floor()),
        (0.05, std::time::Duration::from_secs(60), 1)
    );

    // Every field of a retry budget is optional; the table form of a byte quota works too.
    let l = load_toml(&link(
        "2Gbit/s",
        "burst = \"64MiB\"\nretry_budget = { period = \"1500ms\" }\nclasses = []",
    ));
    let p = l.policy("link").unwrap();
    assert_eq!(
        p.retry_budget(),
        Some(
            tollgate::shaping::RetryBudget::new()
                .with_period(std::time::Duration::from_millis(1500))
        )
    );
    assert!(p.classes().is_none(), "an empty list is no classes");
    let l = load_toml(&link(
        "600/min",
        "retry_budget = { ratio = 1, floor = \"600/min\" }",
    ));
    let b = l.policy("link").unwrap().retry_budget().unwrap();
    assert_eq!((b.ratio(), b.floor()), (1.0, 10));
    let l = load_toml(&link("10/s", "retry_budget = { floor = \"0/s\" }"));
    assert_eq!(l.policy("link").unwrap().retry_budget().unwrap().floor(), 0);
}

#[test]
fn incident_003_fields_round_trip_in_every_format() {
    let limits = sample("shared-link.toml").unwrap();
    let toml = limits.to_toml();
    assert!(
        toml.contains("[policies.retry_budget]\nratio = 0.1\nperiod = \"10s\"\nfloor = \"10/s\"")
    );
    assert!(toml.contains("[[policies.classes]]\nclass = 2\nreserve = 0.5"));
    assert_eq!(Limits::from_toml(&toml).unwrap(), limits);
    assert_eq!(Limits::from_yaml(&limits.to_yaml()).unwrap(), limits);
    assert_eq!(Limits::from_json(&limits.to_json()).unwrap(), limits);
    // Awkward values keep their meaning.
    let odd = load_toml(&link(
        "10/s",
        "classes = [{ class = 7, reserve = 0.333333 }, { class = 3, reserve = 0 }]\n\
         retry_budget = { ratio = 0.125, period = \"90s\", floor = \"7200/h\" }",
    ));
    let text = odd.to_yaml();
    assert!(
        text.contains("period: 90s") && text.contains("floor: 2/s"),
        "{text}"
    );
    assert_eq!(Limits::from_yaml(&text).unwrap(), odd);
    assert_eq!(Limits::from_toml(&odd.to_toml()).unwrap(), odd);
    assert_eq!(Limits::from_json(&odd.to_json()).unwrap(), odd);
}

#[test]
fn incident_003_diff_reports_classes_and_retry_budget_changes() {
    let old = load_toml(&link("10/s", ""));
    let new = load_toml(&link(
        "10/s",
        "classes = [{ class = 2, reserve = 0.5 }]\nretry_budget = {}",
    ))
    .to_toml()
    .replace("revision = 1", "revision = 2");
    let new = load_toml(&new);
    let diff = Limits::diff(&old, &new);
    let change = &diff.changed()[0];
    assert!(change.quota.is_none());
    let classes = change.classes.as_ref().unwrap();
    assert_eq!(
        (classes.from.as_str(), classes.to.as_str()),
        ("none", "0 (reserve 0), 2 (reserve 0.5)")
    );
    assert_eq!(
        change.retry_budget.as_ref().unwrap().to,
        "ratio 0.1 over 10s, floor 10/s"
    );
    let text = diff.to_string();
    assert!(
        text.contains("classes none → 0 (reserve 0), 2 (reserve 0.5)"),
        "{text}"
    );
    assert!(
        text.contains("retry_budget none → ratio 0.1 over 10s, floor 10/s"),
        "{text}"
    );
    assert!(Limits::check_transition(&old, &new, Limits::DEFAULT_GUARD).is_ok());
    let json = serde_json::to_string(&diff).unwrap();
    assert!(json.contains(r#""classes":{"from":"none","to":"0 (reserve 0), 2 (reserve 0.5)"}"#));
}

#[test]
fn incident_003_reserve_outside_zero_one_is_an_error() {
    for reserve in ["1.0", "1", "-0.1", "1.5"] {
        let errs = errors(Limits::from_toml(&link(
            "10/s",
            &format!("classes = [{{ class = 1, reserve = {reserve} }}]"),
        )));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].kind(), Kind::InvalidValue);
        assert_eq!(errs[0].path(), "policies[link].classes[0].reserve");
        assert!(
            errs[0].message().contains("is not in [0, 1)"),
            "{}",
            errs[0]
        );
        assert!(errs[0].hint().unwrap().contains("share of the burst"));
    }
    only(
        Limits::from_toml(&link(
            "10/s",
            "classes = [{ class = 1, reserve = \"50%\" }]",
        )),
        Kind::WrongType,
        "policies[link].classes[0].reserve: expected a number, found a string; a reserve is \
         the share of the burst left to more critical classes, in [0, 1), such as 0.5",
    );
}

#[test]
fn incident_003_duplicate_class_is_an_error() {
    only(
        Limits::from_toml(&link(
            "10/s",
            "classes = [{ class = 2, reserve = 0.5 }, { class = 2, reserve = 0.6 }]",
        )),
        Kind::InvalidValue,
        "policies[link].classes[1].class: class 2 is listed twice; list each class once",
    );
}

#[test]
fn incident_003_inverted_reserves_are_an_error() {
    let errs = errors(sample("bad-retry-budget.toml"));
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert_eq!(
        errs[2].to_string(),
        "policies[replication].classes[1].reserve: class 2 reserves less than the more \
         critical class 1; a less critical class (a higher number) must reserve at least as \
         much: raise class 2's reserve or lower class 1's"
    );
    // Listed out of order, the path still names the entry.
    let errs = errors(Limits::from_toml(&link(
        "10/s",
        "classes = [{ class = 3, reserve = 0.1 }, { class = 0, reserve = 0.2 }]",
    )));
    assert_eq!(errs[0].path(), "policies[link].classes[0].reserve");
}

#[test]
fn incident_003_class_number_and_entry_shape_are_checked() {
    only(
        Limits::from_toml(&link("10/s", "classes = [{ class = 256, reserve = 0.5 }]")),
        Kind::InvalidValue,
        "policies[link].classes[0].class: class 256 is not in 0..=255; a class is an integer \
         from 0 (most critical) to 255",
    );
    let errs = errors(Limits::from_toml(&link(
        "10/s",
        "classes = [{ class = 1, reserv = 0.5 }]",
    )));
    assert_eq!(errs.len(), 2);
    assert_eq!(
        errs[0].to_string(),
        "policies[link].classes[0].reserv: unknown field; did you mean \"reserve\"?"
    );
    assert_eq!(errs[1].kind(), Kind::MissingField);
    assert_eq!(errs[1].path(), "policies[link].classes[0].reserve");
    only(
        Limits::from_toml(&link("10/s", "classes = { class = 1, reserve = 0.5 }")),
        Kind::WrongType,
        "policies[link].classes: expected a list of classes, found a table; write a list such \
         as [{ class = 0, reserve = 0.0 }, { class = 2, reserve = 0.5 }]",
    );
}

#[test]
fn incident_003_a_reserve_that_leaves_a_class_nothing_is_an_error() {
    only(
        Limits::from_toml(&link(
            "10/s;burst=1",
            "classes = [{ class = 1, reserve = 0.5 }]",
        )),
        Kind::InvalidValue,
        "policies[link].classes: class 1 can never send: a reserve of 0.5 leaves it less than \
         one request of the burst of 1; lower the reserve, or raise the burst",
    );
    assert!(Limits::from_toml(&link(
        "10/s;burst=2",
        "classes = [{ class = 1, reserve = 0.5 }]"
    ))
    .is_ok());
}

#[test]
fn incident_003_period_without_unit_fails_with_the_hint() {
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { period = 10 }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.period: missing unit in "10": write "10s" or "10min""#,
    );
    only(
        Limits::from_yaml(
            "schema: 1\nrevision: 1\npolicies:\n  - name: link\n    match: { route: /x }\n    quota: 10/s\n    retry_budget: { period: \"10\" }\n",
        ),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.period: missing unit in "10": write "10s" or "10min""#,
    );
    only(
        Limits::from_json(
            r#"{"schema":1,"revision":1,"policies":[{"name":"link","match":{"route":"/x"},"quota":"10/s","retry_budget":{"period":2.5}}]}"#,
        ),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.period: missing unit in "2.5"; a duration is a string with a unit, such as "10s" or "500ms""#,
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { period = \"10m\" }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.period: ambiguous unit "m" in "10m"; write "10min" or "10ms""#,
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { period = \"10sec\" }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.period: unknown unit "sec" in "10sec"; the units are ms, s, min, h and d"#,
    );
}

#[test]
fn incident_003_period_out_of_range_is_an_error() {
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { period = \"500ms\" }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.period: period 500ms is below 1s; a retry budget's period is at least "1s""#,
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { period = \"2d\" }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.period: period 172800s is above 1d; a retry budget's period is at most "1d""#,
    );
}

#[test]
fn incident_003_floor_is_a_request_rate_with_its_unit() {
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { floor = 10 }")),
        Kind::Quota(QuotaErrorKind::MissingUnit),
        r#"policies[link].retry_budget.floor: missing unit in "10": write "10/s" or "10/min""#,
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { floor = \"10MB/s\" }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.floor: floor "10MB/s" is not a plain request rate; a floor counts retries, not bytes, and has no burst: write such as "10/s""#,
    );
    only(
        Limits::from_toml(&link(
            "10/s",
            "retry_budget = { floor = \"10/s;burst=20\" }",
        )),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.floor: floor "10/s;burst=20" is not a plain request rate; a floor counts retries, not bytes, and has no burst: write such as "10/s""#,
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { floor = \"1/min\" }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.floor: floor "1/min" is not a whole number of retries per second; write it per second, such as "1/s""#,
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { floor = \"0/m\" }")),
        Kind::InvalidValue,
        r#"policies[link].retry_budget.floor: invalid floor "0/m"; a floor is the retries always allowed, such as "10/s" ("0/s" for none)"#,
    );
}

#[test]
fn incident_003_ratio_and_retry_budget_shape_are_checked() {
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { ratio = -0.1 }")),
        Kind::InvalidValue,
        "policies[link].retry_budget.ratio: ratio -0.1 is out of range; the ratio is the \
         retries allowed per original, from 0 to 1000, such as 0.1 for 10 %",
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { ratio = \"10%\" }")),
        Kind::WrongType,
        "policies[link].retry_budget.ratio: expected a number, found a string; the ratio is \
         the retries allowed per original, from 0 to 1000, such as 0.1 for 10 %",
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = { ratoi = 0.1 }")),
        Kind::UnknownField,
        "policies[link].retry_budget.ratoi: unknown field; did you mean \"ratio\"?",
    );
    only(
        Limits::from_toml(&link("10/s", "retry_budget = 0.1")),
        Kind::WrongType,
        "policies[link].retry_budget: expected a table, found a float; a table with the \
         fields ratio, period, floor",
    );
    only(
        Limits::from_toml(&link("10/s", "retry_buget = {}")),
        Kind::UnknownField,
        "policies[link].retry_buget: unknown field; did you mean \"retry_budget\"?",
    );
}

#[test]
fn incident_003_byte_budget_bursts_carry_their_unit() {
    let l = load_toml(&link("2Gbit/s", "burst = \"64MiB\""));
    assert_eq!(l.policy("link").unwrap().quota().burst(), 64 << 20);
    let errs = errors(Limits::from_toml(&link("2Gbit/s", "burst = 64")));
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].path(), "policies[link].burst");
    assert!(matches!(errs[0].kind(), Kind::Quota(_)), "{}", errs[0]);
    assert!(errs[0].hint().is_some());
    let errs = errors(Limits::from_toml(&link("100/s", "burst = \"64MiB\"")));
    assert_eq!(errs[0].path(), "policies[link].burst");
    // A byte budget's burst may not be given twice either.
    let errs = errors(Limits::from_toml(&link(
        "2Gbit/s;burst=1MiB",
        "burst = \"64MiB\"",
    )));
    assert_eq!(errs[0].kind(), Kind::Quota(QuotaErrorKind::DuplicateBurst));
}
