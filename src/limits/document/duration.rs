//! Durations in a limits document (a retry budget's `period`): an integer with its unit,
//! never a bare number — the same rule as quotas (a dropped unit once read `10/s` as `10/min`).
//!
//! Grammar: `<count><unit>`, ASCII, no sign, no leading zero, no spaces, no fraction; units
//! `ms`, `s`, `min`, `h`, `d`. `m` is rejected on purpose (minute or milli?), as in quotas.

use core::time::Duration;

use crate::engine::error::{ConfigError, ConfigErrorKind as Kind, Quoted};

use super::parse::{Node, Value};
use super::path::Path;

/// The units, longest spelling first where one is a prefix of another.
const UNITS: &[(&str, u64)] = &[
    ("ms", 1_000_000),
    ("min", 60_000_000_000),
    ("s", 1_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// The longest duration string read (longer ones are rejected unscanned).
const MAX_LEN: usize = 32;

/// Parses a duration field: a string such as `"10s"`. A bare number is a missing-unit error
/// with a hint, like a quota's.
pub(super) fn parse_duration(node: &Node<'_>, path: &Path<'_>) -> Result<Duration, ConfigError> {
    let text = match &node.value {
        Value::Str(s) => s.as_ref(),
        Value::Int(n) => return Err(missing_unit(path, &n.to_string(), Some(*n))),
        Value::Float(x) => return Err(missing_unit(path, &format!("{x:?}"), None)),
        other => {
            return Err(ConfigError::new(
                Kind::WrongType,
                path.to_string(),
                format_args!("expected a duration string, found {}", other.describe()),
                Some(r#"write a string with a unit, such as "10s""#.to_owned()),
            ))
        }
    };
    parse_text(text, path)
}

fn parse_text(text: &str, path: &Path<'_>) -> Result<Duration, ConfigError> {
    let invalid = |what: String, hint: &str| {
        ConfigError::new(
            Kind::InvalidValue,
            path.to_string(),
            what,
            Some(hint.to_owned()),
        )
    };
    const SHAPE: &str = r#"write a whole number and a unit (ms, s, min, h, d), such as "10s""#;
    if text.len() > MAX_LEN {
        return Err(invalid(
            format!("duration {} is too long", Quoted(text)),
            SHAPE,
        ));
    }
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (count, unit) = text.split_at(digits);
    if count.is_empty() || (count.len() > 1 && count.starts_with('0')) {
        return Err(invalid(format!("invalid duration {}", Quoted(text)), SHAPE));
    }
    if unit.is_empty() {
        let n = count.parse::<i128>().ok();
        return Err(missing_unit(path, text, n));
    }
    let Some(&(_, scale)) = UNITS.iter().find(|(u, _)| *u == unit) else {
        let what = format!("unknown unit {} in {}", Quoted(unit), Quoted(text));
        return Err(if unit == "m" {
            let what = format!("ambiguous unit \"m\" in {}", Quoted(text));
            invalid(what, &format!(r#"write "{count}min" or "{count}ms""#))
        } else {
            invalid(what, "the units are ms, s, min, h and d")
        });
    };
    let nanos = count.parse::<u64>().ok().and_then(|n| n.checked_mul(scale));
    match nanos {
        Some(nanos) => Ok(Duration::from_nanos(nanos)),
        None => Err(invalid(
            format!("duration {} is too long", Quoted(text)),
            "a duration is at most 584 years",
        )),
    }
}

/// `missing unit in "10": write "10s" or "10min"`, worded like a quota's, for a positive
/// integer; a general hint otherwise, so the hint is never itself invalid.
fn missing_unit(path: &Path<'_>, text: &str, n: Option<i128>) -> ConfigError {
    let what = format!("missing unit in {}", Quoted(text));
    match n {
        Some(n) if n > 0 => {
            let hint = format!(r#"write "{n}s" or "{n}min""#);
            ConfigError::with_message(
                Kind::InvalidValue,
                path.to_string(),
                format!("{what}: {hint}"),
                Some(hint),
            )
        }
        _ => {
            let hint = r#"a duration is a string with a unit, such as "10s" or "500ms""#;
            ConfigError::new(
                Kind::InvalidValue,
                path.to_string(),
                what,
                Some(hint.to_owned()),
            )
        }
    }
}

/// The canonical form: the largest unit that divides the duration exactly (`"10s"`,
/// `"2min"`, `"1500ms"`); sub-millisecond remainders (never produced by the parser) are
/// rounded up to the next millisecond.
pub(super) fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    for &(unit, scale) in [
        ("d", 86_400_000_000_000u64),
        ("h", 3_600_000_000_000),
        ("min", 60_000_000_000),
        ("s", 1_000_000_000),
    ]
    .iter()
    {
        let scale = u128::from(scale);
        if nanos >= scale && nanos % scale == 0 {
            return format!("{}{unit}", nanos / scale);
        }
    }
    format!("{}ms", nanos.div_ceil(1_000_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Duration, String> {
        parse_text(s, &Path::Root).map_err(|e| e.message().to_owned())
    }

    #[test]
    fn durations_need_their_unit() {
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(
            parse("10"),
            Err(r#"missing unit in "10": write "10s" or "10min""#.to_owned())
        );
        assert_eq!(
            parse("10m"),
            Err(r#"ambiguous unit "m" in "10m"; write "10min" or "10ms""#.to_owned())
        );
        assert!(parse("010s").is_err());
        assert!(parse("-1s").is_err());
        assert!(parse("1.5s").is_err());
        assert!(parse("10 s").is_err());
        assert!(parse("10sec").is_err());
        assert!(parse("99999999999999999999d").is_err());
        assert!(parse(&"9".repeat(40)).is_err());
    }

    #[test]
    fn canonical_form_round_trips() {
        for s in ["10s", "1500ms", "2min", "1h", "3d", "61s", "1ms"] {
            assert_eq!(format_duration(parse(s).unwrap()), s); // a test: a panic is its failure
        }
        assert_eq!(format_duration(Duration::from_nanos(1)), "1ms");
    }
}
