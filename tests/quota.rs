//! The quota string grammar, `Display`, `Eq`, constructors and serde.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Quota, QuotaError, QuotaErrorKind as Kind};

fn q(s: &str) -> Quota {
    s.parse()
        .unwrap_or_else(|e: QuotaError| panic!("{s:?} rejected: {e}"))
}

fn err(s: &str) -> QuotaError {
    match s.parse::<Quota>() {
        Ok(q) => panic!("{s:?} accepted as {q}"),
        Err(e) => e,
    }
}

fn nz32(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn hash_of(q: &Quota) -> u64 {
    let mut h = DefaultHasher::new();
    q.hash(&mut h);
    h.finish()
}

/// Accepted input and its canonical `Display`.
const ACCEPTED: &[(&str, &str)] = &[
    ("1/s", "1/s"),
    ("100/s", "100/s"),
    ("100/s;burst=250", "100/s;burst=250"),
    ("100/s;burst=100", "100/s"),
    ("100/s;burst=1", "100/s;burst=1"),
    ("6000/min", "6000/min"),
    ("10/second", "10/s"),
    ("10/minute", "10/min"),
    ("10/hour", "10/h"),
    ("10/day", "10/d"),
    ("100/second;burst=250", "100/s;burst=250"),
    ("1/hour;burst=2", "1/h;burst=2"),
    ("5/ms", "5/ms"),
    ("1/ms", "1/ms"),
    ("1000000/ms", "1000000/ms"),
    ("999999999/s", "999999999/s"),
    ("1000000000/s", "1000000000/s"),
    ("60000000000/min", "60000000000/min"),
    ("86400000000000/d", "86400000000000/d"),
    ("42/h", "42/h"),
    ("3/h;burst=1", "3/h;burst=1"),
    ("7/min;burst=3", "7/min;burst=3"),
    ("1/d;burst=18446744073709551615", "1/d;burst=53375"),
    ("10B/s", "10B/s"),
    ("1kB/s", "1kB/s"),
    ("2Gbit/s", "2Gbit/s"),
    ("2Gbit/s;burst=64MiB", "2Gbit/s;burst=64MiB"),
    ("2Gbit/s;burst=250MB", "2Gbit/s"),
    ("256MiB/s", "256MiB/s"),
    ("100GB/s", "100GB/s"),
    ("1MB/s;burst=1kB", "1MB/s;burst=1kB"),
    ("1KiB/s;burst=2KiB", "1KiB/s;burst=2KiB"),
    ("1MiB/s;burst=512KiB", "1MiB/s;burst=512KiB"),
    ("1GiB/h", "1GiB/h"),
    ("5GB/d;burst=1GB", "5GB/d;burst=1GB"),
    ("8bit/s", "8bit/s"),
    ("12bit/s", "12bit/s"),
    ("3bit/s;burst=1B", "3bit/s;burst=1B"),
    ("1kbit/s;burst=125B", "1kbit/s"),
    ("1kbit/s;burst=1B", "1kbit/s;burst=1B"),
    ("64kbit/s;burst=16kbit", "64kbit/s;burst=16kbit"),
    ("1Gbit/s;burst=8bit", "1Gbit/s;burst=1B"),
    ("10Mbit/min", "10Mbit/min"),
    ("18446744073709551615GB/ms", "18446744073709551615GB/ms"),
    ("1B/d;burst=18446744073709551615B", "1B/d;burst=53375B"),
    ("1B/day;burst=1kB", "1B/d;burst=1kB"),
    // a byte burst in the largest unit of the rate's family that is exact, else in the
    // largest exact byte unit
    ("1MB/s;burst=2000000000B", "1MB/s;burst=2GB"),
    ("1MB/s;burst=1024000B", "1MB/s;burst=1024kB"),
    ("1MB/s;burst=4096B", "1MB/s;burst=4KiB"),
    ("10B/s;burst=3B", "10B/s;burst=3B"),
    ("10B/s;burst=2048B", "10B/s;burst=2KiB"),
    ("1GiB/s;burst=1048576kB", "1GiB/s;burst=1000MiB"),
    ("8Gbit/s;burst=256MiB", "8Gbit/s;burst=256MiB"),
    ("1Mbit/s;burst=1Gbit", "1Mbit/s;burst=1Gbit"),
    ("1Mbit/s;burst=2MB", "1Mbit/s;burst=16Mbit"),
    ("100MB/s;burst=1Gbit", "100MB/s;burst=125MB"),
    // a period of several units: written with its span, as given
    ("1/90ms", "1/90ms"),
    ("1/2d", "1/2d"),
    ("100/15min", "100/15min"),
    ("10/5s", "10/5s"),
    ("1/1000ms", "1/1000ms"),
    ("3/90second;burst=1", "3/90s;burst=1"),
    ("1MB/10s;burst=64KiB", "1MB/10s;burst=64KiB"),
    ("1/6671d", "1/6671d"),
];

#[test]
fn accepted_strings_display_canonically() {
    assert!(ACCEPTED.len() >= 40);
    for &(input, display) in ACCEPTED {
        let quota = q(input);
        assert_eq!(quota.to_string(), display, "{input}");
        assert!(display.len() <= 64, "{display}");
        let again = q(display);
        assert_eq!(again, quota, "{input}");
        assert_eq!(again.to_string(), display, "{input}");
        assert_eq!(again.burst(), quota.burst(), "{input}");
        assert_eq!(again.interval(), quota.interval(), "{input}");
        assert_eq!(hash_of(&again), hash_of(&quota), "{input}");
    }
}

#[test]
fn burst_and_interval() {
    let cases: &[(&str, u64, Duration)] = &[
        ("100/s", 100, Duration::from_millis(10)),
        ("100/s;burst=250", 250, Duration::from_millis(10)),
        ("3/s", 3, Duration::from_nanos(333_333_334)),
        ("1000000/ms", 1_000_000, Duration::from_nanos(1)),
        ("1/d", 1, Duration::from_secs(86_400)),
        (
            "1/d;burst=18446744073709551615",
            (1 << 62) / 86_400_000_000_000,
            Duration::from_secs(86_400),
        ),
        ("2Gbit/s", 250_000_000, Duration::from_nanos(4)),
        ("2Gbit/s;burst=64MiB", 64 << 20, Duration::from_nanos(4)),
        ("100GB/s", 100_000_000_000, Duration::from_nanos(1)),
        ("1kB/s", 1000, Duration::from_millis(1)),
        ("3B/s", 3, Duration::from_nanos(333_333_334)),
        ("12bit/s", 1, Duration::from_nanos(666_666_667)),
        ("1KiB/s;burst=2KiB", 2048, Duration::from_nanos(976_563)),
    ];
    for &(input, burst, interval) in cases {
        let quota = q(input);
        assert_eq!(quota.burst(), burst, "{input}");
        assert_eq!(quota.interval(), interval, "{input}");
    }
}

#[test]
fn accessors() {
    let b = q("2Gbit/s;burst=64MiB");
    assert!(b.is_bytes());
    assert_eq!(b.count(), 2);
    assert_eq!(b.period(), Duration::from_secs(1));
    let r = q("6000/minute");
    assert!(!r.is_bytes());
    assert_eq!(r.count(), 6000);
    assert_eq!(r.period(), Duration::from_secs(60));
    assert_eq!(q("1/ms").period(), Duration::from_millis(1));
    assert_eq!(q("1/h").period(), Duration::from_secs(3600));
    assert_eq!(q("1/day").period(), Duration::from_secs(86_400));
}

/// Rejected input, its kind and (where given) its offset.
const REJECTED: &[(&str, Kind, Option<usize>)] = &[
    ("", Kind::Malformed, Some(0)),
    (" 10/s", Kind::Malformed, Some(0)),
    ("10/s ", Kind::Malformed, Some(4)),
    ("10 /s", Kind::Malformed, Some(2)),
    ("10/ s", Kind::Malformed, Some(3)),
    ("\t10/s", Kind::Malformed, Some(0)),
    ("10/s\n", Kind::Malformed, Some(4)),
    ("+10/s", Kind::Malformed, Some(0)),
    ("-10/s", Kind::Malformed, Some(0)),
    ("010/s", Kind::Malformed, Some(0)),
    ("00/s", Kind::Malformed, Some(0)),
    ("1e3/s", Kind::Malformed, Some(1)),
    ("1E3/s", Kind::Malformed, Some(1)),
    ("1_000/s", Kind::Malformed, Some(1)),
    ("1,000/s", Kind::Malformed, Some(1)),
    ("1.5/s", Kind::Malformed, Some(1)),
    ("ten/s", Kind::Malformed, Some(0)),
    ("/s", Kind::Malformed, Some(0)),
    ("10/s/s", Kind::Malformed, Some(4)),
    ("10/s;", Kind::Malformed, Some(5)),
    ("10/0s", Kind::Zero, Some(3)),
    ("10/05s", Kind::Malformed, Some(3)),
    ("1/-5s", Kind::Malformed, Some(2)),
    ("1/+5s", Kind::Malformed, Some(2)),
    ("1/5.5s", Kind::Malformed, Some(3)),
    ("1/5 s", Kind::Malformed, Some(3)),
    ("1/5m", Kind::AmbiguousUnit, Some(3)),
    ("1/5", Kind::MissingUnit, Some(3)),
    ("1/5secs", Kind::UnknownUnit, Some(3)),
    ("1/99999999999999999999s", Kind::Overflow, Some(2)),
    ("1/6672d", Kind::Overflow, Some(2)),
    ("1/18446744073709551615d", Kind::Overflow, Some(2)),
    ("1000001/1ms", Kind::TooFast, Some(0)),
    ("10/\u{b5}s", Kind::Malformed, Some(3)),
    ("\u{ff11}0/s", Kind::Malformed, Some(0)),
    ("10/\u{ff53}", Kind::Malformed, Some(3)),
    ("10/S", Kind::UnknownUnit, Some(3)),
    ("10/Min", Kind::UnknownUnit, Some(3)),
    ("10/sec", Kind::UnknownUnit, Some(3)),
    ("10/seconds", Kind::UnknownUnit, Some(3)),
    ("10/minutes", Kind::UnknownUnit, Some(3)),
    ("10/hours", Kind::UnknownUnit, Some(3)),
    ("10/days", Kind::UnknownUnit, Some(3)),
    ("10kb/s", Kind::UnknownUnit, Some(2)),
    ("10KB/s", Kind::UnknownUnit, Some(2)),
    ("10xB/s", Kind::UnknownUnit, Some(2)),
    ("1bytes/s", Kind::UnknownUnit, Some(1)),
    ("10s", Kind::UnknownUnit, Some(2)),
    ("10m", Kind::UnknownUnit, Some(2)),
    ("10/m", Kind::AmbiguousUnit, Some(3)),
    ("10kB/m", Kind::AmbiguousUnit, Some(5)),
    ("10", Kind::MissingUnit, Some(2)),
    ("10kB", Kind::MissingUnit, Some(4)),
    ("10/", Kind::MissingUnit, Some(3)),
    ("10;burst=5", Kind::MissingUnit, Some(2)),
    ("0", Kind::Zero, Some(0)),
    ("0/s", Kind::Zero, Some(0)),
    ("0kB/s", Kind::Zero, Some(0)),
    ("18446744073709551616/s", Kind::Overflow, Some(0)),
    ("100000000000000000000000000000", Kind::Overflow, Some(0)),
    ("1000001/ms", Kind::TooFast, Some(0)),
    ("1000000001/s", Kind::TooFast, Some(0)),
    ("18446744073709551615/d", Kind::TooFast, Some(0)),
    ("3bit/s", Kind::BurstTooSmall, None),
    ("1bit/d", Kind::BurstTooSmall, None),
    ("100/s;burst=0", Kind::Zero, Some(12)),
    ("1MB/s;burst=0B", Kind::Zero, Some(12)),
    ("100/s;burst=10kB", Kind::UnexpectedUnit, Some(14)),
    ("1MB/s;burst=64", Kind::MissingUnit, Some(14)),
    ("1MB/s;burst=12bit", Kind::PartialByte, Some(12)),
    ("1MB/s;burst=10kb", Kind::UnknownUnit, Some(14)),
    ("100/s;burst=", Kind::Malformed, Some(12)),
    ("100/s;burst", Kind::Malformed, Some(6)),
    ("100/s;bursts=5", Kind::Malformed, Some(6)),
    ("100/s;Burst=5", Kind::Malformed, Some(6)),
    ("100/s;burst=05", Kind::Malformed, Some(12)),
    ("100/s;burst=+5", Kind::Malformed, Some(12)),
    ("100/s;burst=1.5", Kind::Malformed, Some(13)),
    ("100/s;burst=5;burst=6", Kind::Malformed, Some(13)),
    ("100/s;burst=18446744073709551616", Kind::Overflow, Some(12)),
];

#[test]
fn rejected_strings_have_kinds_and_offsets() {
    assert!(REJECTED.len() >= 40);
    for &(input, kind, offset) in REJECTED {
        let e = err(input);
        assert_eq!(e.kind(), kind, "{input:?}: {e}");
        if let Some(offset) = offset {
            assert_eq!(e.offset(), offset, "{input:?}: {e}");
        }
        let msg = e.to_string();
        assert!(!msg.ends_with('.'), "{msg}");
        assert!(msg.starts_with(|c: char| c.is_lowercase()), "{msg}");
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
    }
}

#[test]
fn too_long_is_rejected_unscanned() {
    let input = format!("{}/s", "1".repeat(63));
    assert_eq!(input.len(), 65);
    let e = err(&input);
    assert_eq!(e.kind(), Kind::TooLong);
    assert_eq!(e.offset(), 64);
    // 64 bytes pass the length check (and then overflow)
    assert_eq!(err(&input[1..]).kind(), Kind::Overflow);
}

#[test]
fn missing_unit_hints() {
    let cases = [
        ("10", r#"missing unit in "10": write "10/s" or "10/min""#),
        ("1", r#"missing unit in "1": write "1/s" or "1/min""#),
        ("10kB", r#"missing unit in "10kB": write "10kB/s""#),
        ("2Gbit", r#"missing unit in "2Gbit": write "2Gbit/s""#),
        (
            "5000000000",
            r#"missing unit in "5000000000": write "5000000000/min" or "5000000000/h""#,
        ),
        // "3bit/s" would be invalid (burst below one byte): no hint
        ("3bit", r#"missing unit in "3bit""#),
        ("10;burst=5", r#"missing unit in "10;burst=5""#),
    ];
    for (input, message) in cases {
        let e = err(input);
        assert_eq!(e.kind(), Kind::MissingUnit, "{input}");
        assert_eq!(e.to_string(), message);
    }
    // no hint that would itself be invalid
    for input in ["0", "007", "100000000000000000000000000000"] {
        let e = err(input);
        assert_ne!(e.kind(), Kind::MissingUnit, "{input}");
        assert!(!e.to_string().contains("write"), "{e}");
    }
    assert_eq!(
        err("1MB/s;burst=64").to_string(),
        r#"missing unit on the burst of a byte budget in "1MB/s;burst=64": write "64B""#
    );
}

#[test]
fn other_messages() {
    assert_eq!(
        err("10/m").to_string(),
        r#"ambiguous unit "m" in "10/m": minute or milli? write "min" or "ms""#
    );
    assert_eq!(
        err("10/seconds").to_string(),
        r#"unknown time unit "seconds" in "10/seconds": did you mean "s"?"#
    );
    assert_eq!(
        err("10/S").to_string(),
        r#"unknown time unit "S" in "10/S": did you mean "s"?"#
    );
    assert_eq!(
        err("10kb/s").to_string(),
        r#"unknown work unit "kb" in "10kb/s": did you mean "kB"?"#
    );
    assert_eq!(
        err("10s").to_string(),
        r#"unknown work unit "s" in "10s": write "10/s""#
    );
    assert_eq!(
        err("10/fortnight").to_string(),
        r#"unknown time unit "fortnight" in "10/fortnight": expected "ms", "s", "min", "h", "d", "w" or "month""#
    );
    assert_eq!(
        err("1_000/s").to_string(),
        r#"a digit separator is not allowed in "1_000/s" at byte 1"#
    );
    assert_eq!(
        err("1000001/ms").to_string(),
        r#"rate faster than one request per nanosecond in "1000001/ms""#
    );
    assert!(err("1MB/s;burst=12bit")
        .to_string()
        .contains("not a whole number of bytes"));
    assert!(err("3bit/s").to_string().contains("below one byte"));
}

#[test]
fn messages_escape_and_bound_the_input() {
    let e = err("10/s\u{7}\u{1b}[31m");
    let msg = e.to_string();
    assert!(msg.contains(r"\u{7}\u{1b}[31m"), "{msg}");
    assert!(!msg.chars().any(char::is_control), "{msg:?}");

    let long = format!("10/s{}", "\u{1b}".repeat(100_000));
    let msg = err(&long).to_string();
    assert_eq!(err(&long).kind(), Kind::TooLong);
    assert!(msg.len() < 1_000, "{} bytes", msg.len());
    assert!(msg.contains('…'));
    assert!(!msg.chars().any(char::is_control));

    let msg = err(&"é".repeat(32)).to_string();
    assert!(msg.len() < 200, "{msg}");
}

#[test]
fn eq_compares_meaning() {
    let equal = [
        ("2Gbit/s", "250MB/s"),
        ("100/s", "6000/min;burst=100"),
        ("6000/min", "100/s;burst=6000"),
        ("100/s", "100/second"),
        ("1/s", "60/min;burst=1"),
        ("1KiB/s", "8192bit/s"),
        ("1kB/ms", "1MB/s;burst=1kB"),
        ("8bit/s", "1B/s"),
        ("100/s;burst=100", "100/s"),
    ];
    for (a, b) in equal {
        assert_eq!(q(a), q(b), "{a} == {b}");
        assert_eq!(hash_of(&q(a)), hash_of(&q(b)), "{a} == {b}");
    }
    let different = [
        ("100/s", "100/s;burst=250"),
        ("100/s", "100B/s"),
        ("2Gbit/s", "2GB/s"),
        ("1000000000/s", "999999999/s"),
        // the default burst is the count: 6000 at once is not 100 at once
        ("100/s", "6000/min"),
        ("60/min", "1/s"),
        ("1kB/s", "1KiB/s"),
    ];
    for (a, b) in different {
        assert_ne!(q(a), q(b), "{a} != {b}");
    }
}

#[test]
fn constructors() {
    assert_eq!(Quota::per_second(nz32(100)), q("100/s"));
    assert_eq!(Quota::per_second(nz32(100)).to_string(), "100/s");
    assert_eq!(
        Quota::per_second(u32::MAX.try_into().unwrap()),
        q("1000000000/s")
    );
    assert_eq!(
        Quota::per_second(NonZeroU32::MAX).to_string(),
        "1000000000/s"
    );
    assert_eq!(Quota::per_minute(nz32(6000)), q("100/s;burst=6000"));
    assert_eq!(
        Quota::per_minute(NonZeroU32::MAX).to_string(),
        "4294967295/min"
    );
    assert_eq!(Quota::per_hour(nz32(3600)), q("1/s;burst=3600"));
    assert_eq!(Quota::per_hour(nz32(3600)).with_burst(nz32(1)), q("1/s"));
    assert_eq!(Quota::per_day(nz32(86_400)), q("1/s;burst=86400"));
    assert_eq!(Quota::per_day(NonZeroU32::MAX).to_string(), "4294967295/d");
}

#[test]
fn with_burst() {
    let quota = Quota::per_second(nz32(100)).with_burst(nz32(250));
    assert_eq!(quota, q("100/s;burst=250"));
    assert_eq!(quota.to_string(), "100/s;burst=250");
    assert_eq!(quota.with_burst(nz32(100)).to_string(), "100/s");

    let bytes = q("2Gbit/s").with_burst(NonZeroU64::new(64 << 20).unwrap());
    assert_eq!(bytes, q("2Gbit/s;burst=64MiB"));
    assert_eq!(bytes.burst(), 64 << 20);

    // a burst too large for 2^62 ns is lowered, and still round-trips
    let huge = Quota::per_day(nz32(1)).with_burst(NonZeroU64::MAX);
    assert_eq!(huge.burst(), (1 << 62) / 86_400_000_000_000);
    assert_eq!(huge, q("1/d;burst=18446744073709551615"));
    assert_eq!(q(&huge.to_string()), huge);
    assert_eq!(
        Quota::per_second(nz32(1))
            .with_burst(NonZeroU64::MAX)
            .burst(),
        (1 << 62) / 1_000_000_000
    );
}

#[test]
fn quota_is_a_value_type() {
    fn traits<T: Copy + Send + Sync + Eq + Hash + std::fmt::Debug + std::fmt::Display>() {}
    traits::<Quota>();
    fn error<T: std::error::Error + Clone + Eq + Send + Sync + 'static>() {}
    error::<QuotaError>();
}

#[cfg(feature = "serde")]
mod serde_forms {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize, Serialize, PartialEq)]
    struct Config {
        quota: Quota,
    }

    fn toml(s: &str) -> Result<Quota, String> {
        toml::from_str::<Config>(s)
            .map(|c| c.quota)
            .map_err(|e| e.to_string())
    }

    fn yaml(s: &str) -> Result<Quota, String> {
        serde_yaml_ng::from_str::<Config>(s)
            .map(|c| c.quota)
            .map_err(|e| e.to_string())
    }

    fn json(s: &str) -> Result<Quota, String> {
        serde_json::from_str::<Config>(s)
            .map(|c| c.quota)
            .map_err(|e| e.to_string())
    }

    const HINT: &str = r#"missing unit in "10": write "10/s" or "10/min""#;

    #[test]
    fn toml_forms() {
        assert_eq!(toml(r#"quota = "100/s""#), Ok(q("100/s")));
        assert_eq!(
            toml(r#"quota = { rate = "100/s", burst = 250 }"#),
            Ok(q("100/s;burst=250"))
        );
        assert_eq!(
            toml(r#"quota = { rate = "100/s", burst = "250" }"#),
            Ok(q("100/s;burst=250"))
        );
        assert_eq!(
            toml(r#"quota = { rate = "100/s;burst=250" }"#),
            Ok(q("100/s;burst=250"))
        );
        assert_eq!(
            toml("[quota]\nburst = \"64MiB\"\nrate = \"2Gbit/s\"\n"),
            Ok(q("2Gbit/s;burst=64MiB"))
        );
        assert_eq!(
            toml(r#"quota = { rate = "3bit/s", burst = "1B" }"#),
            Ok(q("3bit/s;burst=1B"))
        );

        let e = toml(r#"quota = { rate = "100/s;burst=5", burst = 250 }"#).unwrap_err();
        assert!(
            e.contains(r#"burst given twice: in the rate "100/s;burst=5" and in the table"#),
            "{e}"
        );
        let e = toml("quota = 10").unwrap_err();
        assert!(e.contains(HINT), "{e}");
        let e = toml(r#"quota = { rate = 10 }"#).unwrap_err();
        assert!(e.contains(HINT), "{e}");
        let e = toml("quota = 1.5").unwrap_err();
        assert!(e.contains(r#"missing unit in "1.5""#), "{e}");
        let e = toml("quota = -10").unwrap_err();
        assert!(e.contains(r#"missing unit in "-10""#), "{e}");
        let e = toml(r#"quota = { rate = "100/s", brust = 5 }"#).unwrap_err();
        assert!(e.contains("unknown field `brust`"), "{e}");
        let e = toml(r#"quota = { burst = 5 }"#).unwrap_err();
        assert!(e.contains("missing field `rate`"), "{e}");
        let e = toml(r#"quota = { rate = "1MB/s", burst = 64 }"#).unwrap_err();
        assert!(
            e.contains(r#"missing unit on the burst of a byte budget in "64": write "64B""#),
            "{e}"
        );
        let e = toml(r#"quota = { rate = "100/s", burst = "10kB" }"#).unwrap_err();
        assert!(e.contains("unexpected unit"), "{e}");
        let e = toml(r#"quota = { rate = "100/s", burst = 0 }"#).unwrap_err();
        assert!(e.contains("burst is zero"), "{e}");
        let e = toml(r#"quota = "100/m""#).unwrap_err();
        assert!(e.contains("minute or milli?"), "{e}");

        let out = toml::to_string(&Config {
            quota: q("100/s;burst=250"),
        })
        .unwrap();
        assert_eq!(out, "quota = \"100/s;burst=250\"\n");
    }

    #[test]
    fn yaml_forms() {
        assert_eq!(yaml("quota: 100/s"), Ok(q("100/s")));
        assert_eq!(
            yaml("quota: \"2Gbit/s;burst=64MiB\""),
            Ok(q("2Gbit/s;burst=64MiB"))
        );
        assert_eq!(
            yaml("quota: {rate: 100/s, burst: 250}"),
            Ok(q("100/s;burst=250"))
        );
        assert_eq!(
            yaml("quota:\n  rate: 2Gbit/s\n  burst: 64MiB\n"),
            Ok(q("2Gbit/s;burst=64MiB"))
        );
        let e = yaml("quota: {rate: 100/s;burst=1, burst: 250}").unwrap_err();
        assert!(e.contains("burst given twice"), "{e}");
        let e = yaml("quota: 10").unwrap_err();
        assert!(e.contains(HINT), "{e}");
        let e = yaml("quota: 10.0").unwrap_err();
        assert!(e.contains(r#"missing unit in "10.0""#), "{e}");
        let e = yaml("quota: -5").unwrap_err();
        assert!(e.contains(r#"missing unit in "-5""#), "{e}");
        let e = yaml("quota: 0").unwrap_err();
        assert!(e.contains(r#"missing unit in "0""#), "{e}");
        let e = yaml("quota: {rate: 100/s, extra: 1}").unwrap_err();
        assert!(e.contains("unknown field `extra`"), "{e}");
        let out = serde_yaml_ng::to_string(&Config {
            quota: q("6000/minute"),
        })
        .unwrap();
        assert_eq!(out, "quota: 6000/min\n");
    }

    #[test]
    fn json_forms() {
        assert_eq!(json(r#"{"quota": "100/s"}"#), Ok(q("100/s")));
        assert_eq!(
            json(r#"{"quota": {"rate": "100/s", "burst": 250}}"#),
            Ok(q("100/s;burst=250"))
        );
        assert_eq!(
            json(r#"{"quota": {"burst": "64MiB", "rate": "2Gbit/s"}}"#),
            Ok(q("2Gbit/s;burst=64MiB"))
        );
        let e = json(r#"{"quota": {"rate": "100/s;burst=1", "burst": 250}}"#).unwrap_err();
        assert!(e.contains("burst given twice"), "{e}");
        let e = json(r#"{"quota": {"rate": "100/s", "burst": 1, "burst": 2}}"#).unwrap_err();
        assert!(e.contains("duplicate field `burst`"), "{e}");
        let e = json(r#"{"quota": 10}"#).unwrap_err();
        assert!(e.contains(HINT), "{e}");
        let e = json(r#"{"quota": 2.5}"#).unwrap_err();
        assert!(e.contains(r#"missing unit in "2.5""#), "{e}");
        let e = json(r#"{"quota": true}"#).unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
        let e = json(r#"{"quota": "10 /s"}"#).unwrap_err();
        assert!(e.contains("whitespace"), "{e}");

        let config = Config {
            quota: q("2Gbit/s;burst=64MiB"),
        };
        let out = serde_json::to_string(&config).unwrap();
        assert_eq!(out, r#"{"quota":"2Gbit/s;burst=64MiB"}"#);
        assert_eq!(serde_json::from_str::<Config>(&out).unwrap(), config);
    }
}

const TIME: &[&str] = &[
    "ms", "s", "min", "h", "d", "second", "minute", "hour", "day",
];
const WORK: &[&str] = &[
    "", "B", "kB", "MB", "GB", "KiB", "MiB", "GiB", "bit", "kbit", "Mbit", "Gbit",
];

fn count() -> impl Strategy<Value = u64> {
    prop_oneof![1..=1_000u64, 1..=u64::from(u32::MAX), 1..=u64::MAX]
}

fn quota_string() -> impl Strategy<Value = String> {
    let burst = prop_oneof![
        Just(None),
        (count(), prop::sample::select(WORK)).prop_map(Some),
    ];
    // a period of one unit, or of several (`1/90ms`)
    let span = prop_oneof![
        3 => Just(String::new()),
        1 => (2..=100_000u64).prop_map(|n| n.to_string()),
        1 => (1..=u64::MAX).prop_map(|n| n.to_string()),
    ];
    (
        count(),
        prop::sample::select(WORK),
        (span, prop::sample::select(TIME)),
        burst,
    )
        .prop_map(|(n, work, (span, time), burst)| {
            let mut s = format!("{n}{work}/{span}{time}");
            if let Some((b, burst_work)) = burst {
                // a burst takes a work unit exactly when the rate has one
                let burst_work = if work.is_empty() {
                    ""
                } else if burst_work.is_empty() {
                    "B"
                } else {
                    burst_work
                };
                s.push_str(&format!(";burst={b}{burst_work}"));
            }
            s
        })
}

/// The unit a byte burst is shown in, from the rule in `Quota`'s documentation: the largest
/// unit of the rate's own family (kilo and up) that divides it exactly, else the largest
/// exact one of kB, MB, GB, KiB, MiB, GiB, else B.
fn burst_unit_oracle(bytes: u64, rate_unit: &str) -> &'static str {
    let bits = u128::from(bytes) * 8;
    const BITS: [(&str, u128); 10] = [
        ("kB", 8_000),
        ("MB", 8_000_000),
        ("GB", 8_000_000_000),
        ("KiB", 8 << 10),
        ("MiB", 8 << 20),
        ("GiB", 8 << 30),
        ("bit", 1),
        ("kbit", 1_000),
        ("Mbit", 1_000_000),
        ("Gbit", 1_000_000_000),
    ];
    let size = |unit: &str| BITS.iter().find(|(u, _)| *u == unit).map_or(8, |(_, b)| *b);
    let family: &[&'static str] = match rate_unit {
        "kB" | "MB" | "GB" => &["GB", "MB", "kB"],
        "KiB" | "MiB" | "GiB" => &["GiB", "MiB", "KiB"],
        "bit" | "kbit" | "Mbit" | "Gbit" => &["Gbit", "Mbit", "kbit"],
        _ => &[],
    };
    let mut bytes_units = ["kB", "MB", "GB", "KiB", "MiB", "GiB"];
    bytes_units.sort_by_key(|u| std::cmp::Reverse(size(u)));
    let exact = |u: &&&'static str| bits % size(u) == 0;
    family
        .iter()
        .find(exact)
        .or_else(|| bytes_units.iter().find(exact))
        .copied()
        .unwrap_or("B")
}

proptest! {
    #[test]
    fn display_round_trips(s in quota_string()) {
        if let Ok(quota) = s.parse::<Quota>() {
            let shown = quota.to_string();
            prop_assert!(shown.len() <= 64, "{}", shown);
            let again: Quota = shown.parse().map_err(|e| TestCaseError::fail(format!("{shown}: {e}")))?;
            prop_assert_eq!(again, quota);
            prop_assert_eq!(again.to_string(), shown);
            prop_assert_eq!(again.burst(), quota.burst());
            prop_assert_eq!(again.interval(), quota.interval());
            prop_assert_eq!(hash_of(&again), hash_of(&quota));
            prop_assert!(quota.burst() >= 1);
        }
    }

    #[test]
    fn a_byte_burst_is_shown_in_the_largest_exact_unit(s in quota_string()) {
        if let Ok(quota) = s.parse::<Quota>() {
            let shown = quota.to_string();
            if let (true, Some((rate, burst))) = (quota.is_bytes(), shown.split_once(";burst=")) {
                let rate_unit = rate.split('/').next().unwrap_or("").trim_start_matches(|c: char| c.is_ascii_digit());
                let digits = burst.trim_end_matches(|c: char| c.is_ascii_alphabetic());
                let unit = &burst[digits.len()..];
                prop_assert_eq!(unit, burst_unit_oracle(quota.burst(), rate_unit), "{}", shown);
            }
        }
    }

    #[test]
    fn small_quotas_parse(n in 1..=1_000_000u64, work in prop::sample::select(WORK), time in prop::sample::select(TIME)) {
        let s = format!("{n}{work}/{time}");
        let bytes_too_small = work == "bit" && n < 8;
        prop_assert_eq!(s.parse::<Quota>().is_ok(), !bytes_too_small, "{}", s);
    }

    #[test]
    fn constructors_round_trip(n in 1..=u32::MAX, burst in 1..=u64::MAX) {
        let n = NonZeroU32::new(n).unwrap();
        let burst = NonZeroU64::new(burst).unwrap();
        for quota in [Quota::per_second(n), Quota::per_minute(n), Quota::per_hour(n), Quota::per_day(n)] {
            for quota in [quota, quota.with_burst(burst)] {
                prop_assert_eq!(q(&quota.to_string()), quota);
            }
        }
    }

    #[test]
    fn arbitrary_strings_never_panic(s in any::<String>()) {
        check_no_panic(&s)?;
    }

    #[test]
    fn grammar_alphabet_never_panics(s in "[0-9BkMGibtKmsdhinuoecary/;=_.,+ \t-]{0,70}") {
        check_no_panic(&s)?;
    }

    #[test]
    fn near_misses_never_panic(s in quota_string(), at in any::<prop::sample::Index>(), c in "[0-9a-zA-Z/;=. ]") {
        let i = at.index(s.len() + 1);
        let mut mutated = s.clone();
        mutated.insert_str(i, &c);
        check_no_panic(&mutated)?;
        let mut cut = s;
        cut.truncate(i);
        check_no_panic(&cut)?;
    }
}

fn check_no_panic(s: &str) -> Result<(), TestCaseError> {
    match s.parse::<Quota>() {
        Ok(quota) => {
            prop_assert!(s.len() <= 64);
            prop_assert_eq!(q(&quota.to_string()), quota);
        }
        Err(e) => {
            prop_assert!(
                e.offset() <= s.len().min(64),
                "{:?}: offset {}",
                s,
                e.offset()
            );
            let msg = e.to_string();
            prop_assert!(msg.len() < 1_000, "{}", msg);
            prop_assert!(!msg.chars().any(char::is_control), "{:?}", msg);
        }
    }
    Ok(())
}

/// A quota given by its interval: a constructor and the string spelling agree, round-trip
/// through the string form, and say exactly one request per interval.
#[test]
fn quotas_by_their_interval() {
    for (interval, text) in [
        (Duration::from_millis(90), "1/90ms"),
        (Duration::from_millis(1), "1/ms"),
        (Duration::from_secs(1), "1/s"),
        (Duration::from_millis(1500), "1/1500ms"),
        (Duration::from_secs(90), "1/90s"),
        (Duration::from_secs(120), "1/2min"),
        (Duration::from_secs(2 * 86_400), "1/2d"),
        (Duration::from_secs(36 * 3600), "1/36h"),
    ] {
        let by_interval = Quota::with_interval(interval).unwrap();
        assert_eq!(by_interval.to_string(), text);
        assert_eq!(by_interval, q(text));
        assert_eq!(by_interval.interval(), interval, "{text}");
        assert_eq!(by_interval.period(), interval, "{text}");
        assert_eq!(by_interval.burst(), 1, "{text}");
    }
    // Below a millisecond: a count per millisecond, one at a time.
    let fast = Quota::with_interval(Duration::from_micros(100)).unwrap();
    assert_eq!(
        (fast.to_string(), fast.burst()),
        ("10/ms;burst=1".to_owned(), 1)
    );
    assert_eq!(fast.interval(), Duration::from_micros(100));
    for (bad, kind) in [
        (Duration::ZERO, Kind::Zero),
        (Duration::from_nanos(3), Kind::Malformed),
        (Duration::from_micros(1500), Kind::Malformed),
        (Duration::from_nanos(1_000_000_001), Kind::Malformed),
        (Duration::from_secs(213_504 * 86_400), Kind::Overflow),
        (Duration::MAX, Kind::Overflow),
    ] {
        assert_eq!(
            Quota::with_interval(bad).unwrap_err().kind(),
            kind,
            "{bad:?}"
        );
    }
}

/// Serde writes and reads the spelling with a span.
#[cfg(feature = "serde")]
#[test]
fn periods_with_a_span_round_trip_through_serde() {
    for s in ["1/90ms", "1/2d", "100/15min;burst=7"] {
        let json = serde_json::to_string(&q(s)).unwrap();
        assert_eq!(json, format!("{s:?}"));
        assert_eq!(serde_json::from_str::<Quota>(&json).unwrap(), q(s));
    }
}
