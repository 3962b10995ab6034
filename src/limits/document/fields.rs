//! The schema's field names, in one place, and the checks on names, routes and quotas that
//! the validator applies to single values.
//!
//! A policy's priority `classes` and `retry_budget` are walked in
//! `validate/traffic.rs`; their durations are read by `duration.rs`.

use super::path::Path;
use crate::engine::error::{ConfigError, ConfigErrorKind as Kind, Quoted};
use crate::engine::error::{QuotaError, QuotaErrorKind};
use crate::engine::quota::Quota;

/// The fields of the document's top-level table.
pub(super) const DOCUMENT_FIELDS: &[&str] = &[
    "schema",
    "revision",
    "categories",
    "tiers",
    "policies",
    "acknowledge",
];
/// The fields of a policy.
pub(super) const POLICY_FIELDS: &[&str] = &[
    "name",
    "match",
    "quota",
    "burst",
    "shadow",
    "also",
    "classes",
    "retry_budget",
];
/// The fields of one entry of a policy's `classes`.
pub(super) const CLASS_FIELDS: &[&str] = &["class", "reserve"];
/// The fields of a policy's `retry_budget`.
pub(super) const RETRY_BUDGET_FIELDS: &[&str] = &["ratio", "period", "floor"];
/// The fields of a policy's `match`.
pub(super) const MATCH_FIELDS: &[&str] = &["tier", "category", "route"];
/// The fields of an acknowledgement.
pub(super) const ACK_FIELDS: &[&str] = &["policy", "from", "to"];

/// The longest name of a policy, tier or category.
const NAME_MAX: usize = 64;
/// The longest route pattern.
const ROUTE_MAX: usize = 256;

/// Checks a policy, tier or category name: an ASCII letter, then letters, digits, `-`, `_`
/// or `.`, at most 64 in all. Names appear in error paths, so they stay plain.
pub(super) fn check_name(name: &str, path: &Path<'_>) -> Result<(), ConfigError> {
    if is_name(name) {
        return Ok(());
    }
    Err(ConfigError::new(
        Kind::InvalidValue,
        path.to_string(),
        format_args!("invalid name {}", Quoted(name)),
        Some(format!(
            "a name starts with a letter and has at most {NAME_MAX} letters, digits, '-', '_' or '.'"
        )),
    ))
}

/// Whether `name` is a valid name (see [`check_name`]).
pub(super) fn is_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= NAME_MAX
        && bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Checks a route pattern: `/`, then printable ASCII without spaces, at most 256 bytes, and
/// `*` only at the end (a prefix match).
pub(super) fn check_route(route: &str, path: &Path<'_>) -> Result<(), ConfigError> {
    let body = route.strip_suffix('*').unwrap_or(route);
    let ok = route.len() <= ROUTE_MAX
        && route.starts_with('/')
        && body.bytes().all(|b| b.is_ascii_graphic() && b != b'*');
    if ok {
        return Ok(());
    }
    Err(ConfigError::new(
        Kind::InvalidValue,
        path.to_string(),
        format_args!("invalid route {}", Quoted(route)),
        Some(format!(
            "a route starts with '/', has at most {ROUTE_MAX} printable ASCII characters \
             without spaces, and may end in '*' for a prefix match, such as \"/v1/checkout/*\""
        )),
    ))
}

/// The error for a quota that did not parse from `input`: the parser's message, whose hint
/// (`write "10/s" or "10/min"`) is also given alone; a general hint is added when the parser
/// gives none.
pub(super) fn quota_error(path: &Path<'_>, input: &str, err: &QuotaError) -> ConfigError {
    let message = err.to_string();
    let quoted = Quoted(input).to_string();
    let tail = message
        .find(&quoted)
        .map_or("", |at| &message[at + quoted.len()..]);
    let tail = match tail.strip_prefix(" at byte ") {
        Some(rest) => rest.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => tail,
    };
    let kind = Kind::Quota(err.kind());
    match tail.strip_prefix(": ") {
        Some(hint) if !hint.is_empty() => ConfigError::with_message(
            kind,
            path.to_string(),
            message.clone(),
            Some(hint.to_owned()),
        ),
        _ => ConfigError::new(
            kind,
            path.to_string(),
            message,
            Some(fallback_hint(err.kind()).to_owned()),
        ),
    }
}

fn fallback_hint(kind: QuotaErrorKind) -> &'static str {
    match kind {
        QuotaErrorKind::MissingUnit | QuotaErrorKind::UnknownUnit => {
            r#"write a time unit: "ms", "s", "min", "h", "d", "w" or "month", such as "100/s""#
        }
        QuotaErrorKind::Zero => "counts and bursts are at least 1",
        QuotaErrorKind::TooFast => {
            "write the rate over a longer period: at most one request per nanosecond"
        }
        QuotaErrorKind::TooLong => "a quota is at most 64 bytes",
        QuotaErrorKind::Overflow => "counts and bursts fit in 64 bits",
        QuotaErrorKind::BurstTooSmall => r#"give a burst of at least one byte, such as "1B""#,
        _ => r#"write a quota such as "100/s" or "100/s;burst=250""#,
    }
}

/// Parses a quota written as a string; anything else is the missing-unit error of a bare
/// number (incident 001: `quota = 10`) or a wrong type.
pub(super) fn parse_quota(
    node: &super::parse::Node<'_>,
    path: &Path<'_>,
) -> Result<Quota, ConfigError> {
    use super::parse::Value;
    let text = match &node.value {
        Value::Str(s) => return s.parse().map_err(|e| quota_error(path, s, &e)),
        Value::Int(n) => n.to_string(),
        // `{:?}` keeps the point: 10.0 is not the integer 10
        Value::Float(x) => format!("{x:?}"),
        other => {
            return Err(ConfigError::new(
                Kind::WrongType,
                path.to_string(),
                format_args!("expected a quota string, found {}", other.describe()),
                Some(r#"write a string with a unit, such as "100/s""#.to_owned()),
            ))
        }
    };
    match text.parse::<Quota>() {
        Err(err) if err.kind() == QuotaErrorKind::MissingUnit => {
            Err(quota_error(path, &text, &err))
        }
        _ => Err(ConfigError::new(
            Kind::Quota(QuotaErrorKind::MissingUnit),
            path.to_string(),
            format_args!("missing unit in {}", Quoted(&text)),
            Some(r#"a quota is a string with a unit, such as "10/s""#.to_owned()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_routes() {
        assert!(check_name("paid-checkout", &Path::Root).is_ok());
        assert!(check_name("3p", &Path::Root).is_err());
        assert!(check_name("a]b", &Path::Root).is_err());
        assert!(check_route("/v1/*", &Path::Root).is_ok());
        assert!(check_route("/v1/*/x", &Path::Root).is_err());
        assert!(check_route("v1", &Path::Root).is_err());
        assert!(check_route("/a b", &Path::Root).is_err());
    }

    #[test]
    fn quota_hints() {
        let e = quota_error(&Path::Root, "10", &"10".parse::<Quota>().unwrap_err());
        assert_eq!(e.hint(), Some(r#"write "10/s" or "10/min""#));
        assert_eq!(
            e.message(),
            r#"missing unit in "10": write "10/s" or "10/min""#
        );
        let e = quota_error(&Path::Root, "0/s", &"0/s".parse::<Quota>().unwrap_err());
        assert_eq!(e.hint(), Some("counts and bursts are at least 1"));
        let input = r#"1: write "5/s""#;
        let e = quota_error(&Path::Root, input, &input.parse::<Quota>().unwrap_err());
        assert_eq!(
            e.hint(),
            Some(r#"write a quota such as "100/s" or "100/s;burst=250""#)
        );
    }
}
