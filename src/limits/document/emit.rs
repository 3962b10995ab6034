//! Writing a document as YAML: block style, keys in the order the model serializes them,
//! strings plain when no YAML reader could take them for anything else (`quota: 10/s`) and
//! double-quoted otherwise (a JSON string is a valid YAML double-quoted scalar).
//!
//! The model is serialized as JSON (which keeps field order) and read back into a [`Node`]
//! tree, so this writer only knows the handful of values a tree holds.

use super::parse::{Node, Value};

/// `tree` as a YAML document.
pub(super) fn yaml(tree: &Node<'_>) -> String {
    let mut out = String::new();
    match &tree.value {
        Value::Map(entries) if !entries.is_empty() => block(&mut out, &tree.value, 0, false),
        Value::List(items) if !items.is_empty() => block(&mut out, &tree.value, 0, false),
        other => {
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
    out
}

/// A non-empty list or table, one entry per line at `indent`; with `inline`, the first line
/// continues the current one (after `- `).
fn block(out: &mut String, value: &Value<'_>, indent: usize, inline: bool) {
    let mut first = true;
    let mut pad = |out: &mut String| {
        if !(inline && first) {
            out.push_str(&" ".repeat(indent));
        }
        first = false;
    };
    match value {
        Value::Map(entries) => {
            for (key, value) in entries {
                pad(out);
                out.push_str(&scalar(&key.value));
                out.push(':');
                after_key(out, &value.value, indent);
            }
        }
        Value::List(items) => {
            for item in items {
                pad(out);
                out.push('-');
                if is_block(&item.value) {
                    out.push(' ');
                    block(out, &item.value, indent + 2, true);
                } else {
                    out.push(' ');
                    out.push_str(&scalar(&item.value));
                    out.push('\n');
                }
            }
        }
        _ => {}
    }
}

/// The value of a table entry whose key sits at `indent`: a table below, indented; a list
/// below, at the key's indentation; anything else on the key's line.
fn after_key(out: &mut String, value: &Value<'_>, indent: usize) {
    match value {
        Value::Map(_) if is_block(value) => {
            out.push('\n');
            block(out, value, indent + 2, false);
        }
        Value::List(_) if is_block(value) => {
            out.push('\n');
            block(out, value, indent, false);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

/// A list or table with something in it (empty ones are written `[]` and `{}`).
fn is_block(value: &Value<'_>) -> bool {
    match value {
        Value::Map(entries) => !entries.is_empty(),
        Value::List(items) => !items.is_empty(),
        _ => false,
    }
}

fn scalar(value: &Value<'_>) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Int(n) => n.to_string(),
        // `{:?}` keeps the point (`0.0`) and uses an exponent only when shorter (`1e21`),
        // both read back as the same float
        Value::Float(x) => format!("{x:?}"),
        Value::Str(s) if is_plain(s) => s.to_string(),
        Value::Str(s) => serde_json::Value::String(s.to_string()).to_string(),
        Value::List(_) => "[]".to_owned(),
        Value::Map(_) => "{}".to_owned(),
        Value::Other(what) => format!("\"{what}\""),
    }
}

/// The spellings that YAML 1.1 readers (still common) take for booleans.
const YAML_1_1_BOOLEANS: &[&str] = &[
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
    "OFF",
];

/// Whether `s` may be written unquoted: a letter, digit or `/` first, then only characters
/// without a meaning in YAML, and nothing that reads as another type.
fn is_plain(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'/')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"_./*;=+-".contains(&b))
        && !YAML_1_1_BOOLEANS.contains(&s)
        && super::parse::reads_as_string(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_plain_only_when_nothing_else_reads_them() {
        for s in [
            "10/s",
            "/v1/checkout/*",
            "paid-checkout",
            "2Gbit/s;burst=64MiB",
            "90s",
        ] {
            assert!(is_plain(s), "{s}");
        }
        for s in [
            "", "10", "1e3", "true", "null", "no", "a: b", "*x", "-a", "a#b", "0x1F", ".5",
        ] {
            assert!(!is_plain(s), "{s}");
        }
    }
}
