//! No input may cost quadratic time: loading, validating, diffing, checking a
//! transition and reloading scale near-linearly in the number of policies and of unknown
//! names, and a deeply nested or alias-bombed document is refused quickly with a typed error.
//!
//! Every assertion compares two runs of the same test (the 4n case against the n case, a
//! hostile document against a shallow one of similar size), each the fastest of a few
//! repetitions; none asserts an absolute time.
#![cfg(feature = "config")]

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;

#[path = "common/cpu_time.rs"]
mod cpu_time;
use cpu_time::thread_cpu_time;

use tollgate::limits::{ConfigErrorKind as Kind, Format, Limits, LimitsHandle};

/// Repetitions of each case; the fastest counts, which filters out scheduler noise.
const REPS: usize = 7;
/// Measurements of one case before a test gives up (see [`assert_near_linear`]).
const ATTEMPTS: usize = 5;
/// Near-linear: four times the input may cost at most this many times the time (linear is
/// 4, n log n a little more; quadratic is 16).
const MAX_RATIO: f64 = 6.0;

/// Bytes written before each timing: twice the largest last-level cache of the machines this
/// runs on (32 MiB), so that every case starts from cold caches.
const EVICT_BYTES: usize = 64 << 20;

/// Pushes the input `setup` just built out of the caches. Otherwise the n case's input, fresh
/// from its setup and small enough to stay in the last-level cache, is timed at cache speed
/// and the 4n case's at memory speed: a linear operation then reads as 9–12× on a 32 MiB L3
/// (`check_transition`, 6,250 vs 25,000 policies). From cold caches both run at memory speed.
fn evict_caches() {
    static BUFFER: Mutex<Vec<u8>> = Mutex::new(Vec::new());
    let mut buffer = BUFFER.lock().unwrap_or_else(|p| p.into_inner());
    if buffer.is_empty() {
        buffer.resize(EVICT_BYTES, 0);
    }
    // One write a cache line.
    for line in buffer.chunks_mut(64) {
        line[0] = line[0].wrapping_add(1);
    }
    black_box(&*buffer);
}

/// Times `f` on the input `setup` makes for each of `cases`, [`REPS`] rounds of the cases
/// in turn (so that every case sees the same machine: other builds may be running), and
/// returns the fastest time of each. The input is made and dropped, and the output dropped,
/// outside the timing.
fn fastest<S, T, const N: usize>(
    cases: [usize; N],
    mut setup: impl FnMut(usize) -> S,
    mut f: impl FnMut(&mut S) -> T,
) -> [Duration; N] {
    // One timing at a time: tests of this file must not compete for the cores and caches.
    static ALONE: Mutex<()> = Mutex::new(());
    let _alone = ALONE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut best = [Duration::MAX; N];
    for _ in 0..REPS {
        for (&case, best) in cases.iter().zip(&mut best) {
            let mut input = setup(case);
            evict_caches();
            let start = thread_cpu_time();
            let output = black_box(f(&mut input));
            *best = (*best).min(thread_cpu_time().saturating_sub(start));
            drop((output, input));
        }
    }
    best
}

/// Times the n case and the 4n case in the same test and asserts near-linear scaling. A
/// measurement that fails is taken again, up to [`ATTEMPTS`] in all: a quadratic cost fails
/// every one (16×), while other builds sharing the machine only spoil some.
fn assert_near_linear<S, T>(
    what: &str,
    mut setup: impl FnMut(usize) -> S,
    mut f: impl FnMut(&mut S) -> T,
    n: usize,
) {
    let mut seen = Vec::new();
    for _ in 0..ATTEMPTS {
        let [small, large] = fastest([n, 4 * n], &mut setup, &mut f);
        let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-9);
        eprintln!("{what}: n = {n}: {small:?}, 4n: {large:?}, ratio {ratio:.2}");
        if ratio < MAX_RATIO {
            return;
        }
        seen.push(format!("{ratio:.1}× ({large:?} vs {small:?})"));
    }
    panic!(
        "{what}: 4n took {} the time of n; near-linear is under {MAX_RATIO}×",
        seen.join(", then ")
    );
}

/// What every policy of a test document has besides its name, matcher and quota: priority
/// classes and a retry budget, as production documents do (and so that even the n case's
/// trees outgrow the processor's caches: both cases then run at the same memory speed).
const EXTRA: &str = "classes = [{ class = 0, reserve = 0.0 }, { class = 2, reserve = 0.5 }]\n\
                     retry_budget = { ratio = 0.1, period = \"10s\", floor = \"10/s\" }\n";

/// A document of `n` policies named `{prefix}{i}` with quota `quota`, four declared tiers and
/// categories, and matchers that are all different: a tier and a route prefix, a category
/// and an exact route, or a route prefix alone. With `acks`, every policy's change from
/// `acks` to `quota` is acknowledged.
fn document(n: usize, prefix: &str, quota: &str, revision: u64, acks: Option<&str>) -> String {
    document_with_tiers(4, n, prefix, quota, revision, acks)
}

/// [`document`] with `tiers` declared tiers.
fn document_with_tiers(
    tiers: usize,
    n: usize,
    prefix: &str,
    quota: &str,
    revision: u64,
    acks: Option<&str>,
) -> String {
    let tiers: Vec<String> = (0..tiers).map(|i| format!("\"t{i}\"")).collect();
    let mut text = format!(
        "schema = 1\nrevision = {revision}\ntiers = [{}]\n\
         categories = [\"c0\", \"c1\", \"c2\", \"c3\"]\n",
        tiers.join(", ")
    );
    for i in 0..n {
        let matcher = match i % 3 {
            0 => format!("tier = \"t{}\", route = \"/r{i}/*\"", i % tiers.len()),
            1 => format!("category = \"c{}\", route = \"/r{i}\"", i % 4),
            _ => format!("route = \"/r{i}/*\""),
        };
        text.push_str(&format!(
            "\n[[policies]]\nname = \"{prefix}{i}\"\nmatch = {{ {matcher} }}\nquota = \"{quota}\"\n{EXTRA}"
        ));
    }
    if let Some(from) = acks {
        for i in 0..n {
            text.push_str(&format!(
                "\n[[acknowledge]]\npolicy = \"{prefix}{i}\"\nfrom = \"{from}\"\nto = \"{quota}\"\n"
            ));
        }
    }
    text
}

fn load(text: &str) -> Limits {
    Limits::from_toml(text).unwrap_or_else(|e| panic!("a valid test document: {e}"))
}

/// The running document and its successor: every policy 100× tighter, each acknowledged.
fn transition(n: usize) -> (Limits, Limits) {
    let old = load(&document(n, "p", "1000/s", 1, None));
    let new = load(&document(n, "p", "10/s", 2, Some("1000/s")));
    warm(old, new)
}

/// Both documents, read through once (untimed) by a diff, as a service that holds them has
/// them: a timing right after the parse would measure where the allocator left them.
fn warm(old: Limits, new: Limits) -> (Limits, Limits) {
    black_box(Limits::diff(&old, &new));
    (old, new)
}

// ---- size: n and 4n policies ------------------------------------------------------------

/// The n case of the policy-count tests; the 4n case has 25,000 policies (a 2 MB document).
const POLICIES: usize = 6_250;

#[test]
fn load_and_validate_scale_near_linearly_in_every_format() {
    const FORMATS: [Format; 3] = [Format::Toml, Format::Yaml, Format::Json];
    // As many tiers as policies, every policy acknowledged: each is looked up by name.
    let texts = |n: usize| {
        let limits = load(&document_with_tiers(n, n, "p", "10/s", 2, Some("1000/s")));
        FORMATS.map(|f| limits.to_format(f))
    };
    let (small, large) = (texts(POLICIES), texts(4 * POLICIES));
    for (i, format) in FORMATS.into_iter().enumerate() {
        assert_near_linear(
            &format!("load + validate ({format})"),
            |n| if n == POLICIES { &small[i] } else { &large[i] },
            |text| Limits::parse(text, format),
            POLICIES,
        );
    }
}

#[test]
fn diff_of_unrelated_documents_scales_near_linearly() {
    // Every policy is renamed and its quota changed: everything is added, removed, and all
    // traffic moves (the 2 MB case took over 20 s).
    let pair = |n: usize| {
        let old = load(&document(n, "a", "100/s", 1, None));
        let new = load(&document(n, "b", "50/s", 2, None));
        warm(old, new)
    };
    assert_near_linear(
        "diff of unrelated documents",
        pair,
        |(old, new)| Limits::diff(old, new),
        POLICIES,
    );
}

#[test]
fn check_transition_scales_near_linearly() {
    assert_near_linear(
        "check_transition",
        transition,
        |(old, new)| {
            Limits::check_transition(old, new, Limits::DEFAULT_GUARD)
                .unwrap_or_else(|e| panic!("every tightening is acknowledged: {e}"))
        },
        POLICIES,
    );
}

#[test]
fn reload_scales_near_linearly() {
    assert_near_linear(
        "LimitsHandle::reload",
        |n| {
            let (old, new) = transition(n);
            let handle = LimitsHandle::builder(old).max_keys(16).build();
            // A handle in service: every policy's limiter built (by its first check), so the
            // reload re-quotas each. Unbuilt ones cost little more than the transition check,
            // whose memory-bound share then makes the 4n case look super-linear in time
            // while its instructions stay linear (callgrind: 18.8 M at n, 76.3 M at 4n).
            for policy in handle.limits().policies() {
                let _ = handle.limiter(policy.name());
            }
            (handle, Some(new))
        },
        |(handle, new)| {
            let new = new
                .take()
                .unwrap_or_else(|| panic!("one reload per handle"));
            handle
                .reload(new)
                .unwrap_or_else(|e| panic!("every tightening is acknowledged: {e}"))
        },
        POLICIES,
    );
}

// ---- unknown names ----------------------------------------------------------------------

/// `n` declared tiers and `n` policies each naming an undeclared one (4,000 took 5.4 s):
/// every name is a near miss of many declared ones.
fn undeclared(n: usize) -> String {
    let tiers: Vec<String> = (0..n).map(|i| format!("\"tier{i:05}\"")).collect();
    let mut text = format!("schema = 1\nrevision = 1\ntiers = [{}]\n", tiers.join(", "));
    for i in 0..n {
        text.push_str(&format!(
            "\n[[policies]]\nname = \"p{i}\"\nmatch = {{ tier = \"teir{i:05}\", route = \"/r{i}\" }}\nquota = \"10/s\"\n"
        ));
    }
    text
}

#[test]
fn unknown_names_scale_near_linearly() {
    assert_near_linear(
        "validate with undeclared tiers",
        undeclared,
        |text| {
            let errors = Limits::from_toml(text).expect_err("every tier is undeclared");
            assert!(errors.iter().all(|e| e.kind() == Kind::Undeclared));
            errors.len()
        },
        1_000,
    );
}

// ---- nesting, aliases and size -------------------------------------------------------------

/// A valid document of about `bytes` bytes in `format`: the shallow yardstick.
fn shallow(bytes: usize, format: Format) -> String {
    let per_policy = 80;
    load(&document(bytes / per_policy, "p", "10/s", 1, None)).to_format(format)
}

/// Asserts that `hostile` fails with `kind` in `format`, at most a few times slower than
/// loading a shallow valid document of similar size.
fn assert_refused_quickly(what: &str, format: Format, hostile: &str, kind: Kind) {
    assert_refused_within(what, format, hostile, kind, hostile.len());
}

/// Asserts that `hostile` fails with `kind` in `format`, at most a few times slower than
/// loading a shallow valid document of `bytes` bytes (at most 1 MiB).
fn assert_refused_within(what: &str, format: Format, hostile: &str, kind: Kind, bytes: usize) {
    let errors = Limits::parse(hostile, format).expect_err(what);
    assert_eq!(errors.len(), 1, "{what}: {errors}");
    assert_eq!(errors[0].kind(), kind, "{what}: {errors}");
    let yardstick = shallow(bytes.min(1 << 20), format);
    let texts = [hostile, yardstick.as_str()];
    let [bad, good] = fastest([0, 1], |i| texts[i], |text| Limits::parse(text, format));
    let ratio = bad.as_secs_f64() / good.as_secs_f64().max(1e-9);
    eprintln!("{what}: {bad:?} vs a shallow document's {good:?}, ratio {ratio:.3}");
    assert!(
        ratio < 4.0,
        "{what} took {ratio:.1}× as long as a shallow document of its size ({bad:?} vs {good:?})"
    );
}

const DEEP: usize = 100_000;

#[test]
fn nesting_100_000_levels_is_a_typed_error_in_every_format() {
    let flow = "[".repeat(DEEP);
    assert_refused_quickly(
        "JSON arrays",
        Format::Json,
        &format!("{{\"policies\": {flow}"),
        Kind::TooDeep,
    );
    assert_refused_quickly(
        "JSON objects",
        Format::Json,
        &"{\"a\": ".repeat(DEEP),
        Kind::TooDeep,
    );
    assert_refused_quickly(
        "TOML arrays",
        Format::Toml,
        &format!("policies = {flow}"),
        Kind::TooDeep,
    );
    assert_refused_quickly(
        "TOML inline tables",
        Format::Toml,
        &format!("policies = {}", "{ a = ".repeat(DEEP)),
        Kind::TooDeep,
    );
    assert_refused_quickly(
        "TOML dotted keys",
        Format::Toml,
        &format!("{}b = 1", "a.".repeat(DEEP)),
        Kind::TooDeep,
    );
    assert_refused_quickly(
        "YAML flow sequences",
        Format::Yaml,
        &format!("policies: {flow}"),
        Kind::TooDeep,
    );
    assert_refused_quickly(
        "YAML flow mappings",
        Format::Yaml,
        &format!("policies: {}", "{a: ".repeat(DEEP)),
        Kind::TooDeep,
    );
    assert_refused_quickly(
        "YAML block sequences",
        Format::Yaml,
        &format!("policies:\n{}x\n", "- ".repeat(DEEP)),
        Kind::TooDeep,
    );
    // Block indentation: 1,500 levels is a 1 MB document.
    let block: String = (0..1_500)
        .map(|i| format!("{}a:\n", " ".repeat(i)))
        .collect();
    assert_refused_quickly("YAML block mappings", Format::Yaml, &block, Kind::TooDeep);
}

#[test]
fn nesting_at_the_limit_is_accepted_and_one_more_level_is_not() {
    // The document is the first level; `tiers` nests the rest.
    let head = r#"{"schema": 1, "revision": 1, "policies": [], "tiers": "#;
    let nested = |depth: usize| {
        let (open, close) = ("[".repeat(depth - 1), "]".repeat(depth - 1));
        format!("{head}{open}{close}}}")
    };
    let errors = Limits::from_json(&nested(Limits::MAX_DEPTH)).expect_err("tiers holds no names");
    assert!(errors.iter().all(|e| e.kind() != Kind::TooDeep), "{errors}");
    let errors = Limits::from_json(&nested(Limits::MAX_DEPTH + 1)).expect_err("too deep");
    assert_eq!(errors.len(), 1, "{errors}");
    assert_eq!(errors[0].kind(), Kind::TooDeep, "{errors}");
    assert_eq!(
        errors[0].to_string(),
        format!(
            "line 1, column {}: nesting deeper than 64 levels; a limits document needs 5",
            head.len() + Limits::MAX_DEPTH
        )
    );
}

#[test]
fn brackets_in_strings_and_comments_do_not_count_as_nesting() {
    let brackets = "[{".repeat(DEEP);
    let yaml = format!(
        "# {brackets}\nschema: 1\nrevision: 1\npolicies:\n  - name: \"a\"\n    match: {{ route: '/{brackets}' }}\n    quota: 10/s\n"
    );
    let toml = format!(
        "# {brackets}\nschema = 1\nrevision = 1\n[[policies]]\nname = \"a\"\nmatch = {{ route = '/{brackets}' }}\nquota = \"10/s\"\n"
    );
    let json = format!(
        "{{\"schema\": 1, \"revision\": 1, \"policies\": [{{\"name\": \"a\", \"match\": {{\"route\": \"/{brackets}\"}}, \"quota\": \"10/s\"}}]}}"
    );
    for (format, text) in [
        (Format::Yaml, yaml),
        (Format::Toml, toml),
        (Format::Json, json),
    ] {
        // The route is too long to be valid, but the document parses.
        let errors = Limits::parse(&text, format).expect_err("the route is too long");
        assert_eq!(errors.len(), 1, "{format}: {errors}");
        assert_eq!(errors[0].kind(), Kind::InvalidValue, "{format}: {errors}");
        assert_eq!(errors[0].path(), "policies[a].match.route", "{format}");
    }
}

#[test]
fn a_yaml_alias_bomb_is_refused_without_expanding_it() {
    // Billion laughs: nine levels of ten aliases each would be 10^9 strings.
    let mut text = String::from("a: &a [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        let refs = vec![format!("*{prev}"); 10].join(", ");
        text.push_str(&format!("{next}: &{next} [{refs}]\n"));
    }
    // Aliases may copy about the document's size plus 64 KiB: no slower than reading 128 KiB.
    let bomb = "a YAML alias bomb";
    assert_refused_within(bomb, Format::Yaml, &text, Kind::TooLarge, 128 << 10);
    // A few aliases are fine.
    let shared = "schema: 1\nrevision: 1\npolicies:\n  - name: a\n    match: &m { route: /a }\n    quota: 10/s\n  - name: b\n    match: *m\n    quota: 10/s\n";
    let errors = Limits::from_yaml(shared).expect_err("two policies with one matcher");
    assert_eq!(errors[0].kind(), Kind::OverlappingMatchers, "{errors}");
}

#[test]
fn a_document_beyond_the_size_limit_is_refused_before_parsing() {
    let filler = "#".repeat(Limits::MAX_DOCUMENT_BYTES);
    for format in [Format::Toml, Format::Yaml, Format::Json] {
        // Not even valid syntax: the size is checked first.
        let text = format!("{filler}\n{{[");
        let errors = Limits::parse(&text, format).expect_err("too large");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].kind(), Kind::TooLarge, "{format}: {errors}");
        assert_eq!(
            errors[0].to_string(),
            format!(
                "document of {} bytes is larger than the limit of 16 MiB",
                text.len()
            )
        );
    }
    // A file is not read whole either; one at the limit is read and parsed.
    let dir = std::env::temp_dir().join(format!("tollgate-scaling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let (big, edge) = (dir.join("big.toml"), dir.join("edge.toml"));
    let write = |path: &std::path::Path, text: &str| {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    };
    write(&big, &format!("{filler}\n"));
    let errors = Limits::from_path(&big).expect_err("too large");
    assert_eq!(errors[0].kind(), Kind::TooLarge, "{errors}");
    let header = "schema = 1\nrevision = 1\npolicies = []\n";
    write(&edge, &format!("{header}{}", &filler[header.len()..]));
    let limits = Limits::from_path(&edge).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(limits.revision(), 1);
    std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
}
