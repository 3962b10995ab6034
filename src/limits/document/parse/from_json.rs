//! JSON: a scan that knows strings and escapes measures the nesting and notes where every
//! value and key starts, before `serde_json` parses the text; the positions are then laid on
//! the tree in document order.
//!
//! In valid JSON every token but `,`, `:`, `]` and `}` starts exactly one value or key, in
//! the order in which the parser builds them, so the n-th start belongs to the n-th node of a
//! pre-order walk.
//!
//! The same scan counts the items of the root's `policies` list and stops at the one past
//! [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES), before `serde_json` builds anything.

use core::fmt;
use std::borrow::Cow;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{
    position_in, syntax, too_deep, too_many_policies, LineIndex, Node, Pos, Value, MAX_DEPTH,
    MAX_POLICIES,
};
use crate::engine::error::ConfigError;
use crate::limits::document::Format;

pub(super) fn parse(text: &str) -> Result<Node<'_>, ConfigError> {
    // The text is indexed once it is known to be worth it: a refusal reads only as far as
    // the scan did.
    let starts = scan(text).map_err(|stop| match stop {
        Stop::TooDeep(at) => too_deep(position_in(text, at)),
        Stop::TooManyPolicies(at) => too_many_policies(position_in(text, at)),
    })?;
    let lines = LineIndex::new(text);
    let mut tree = serde_json::from_str::<Node>(text).map_err(|e| {
        let at = if e.line() > 0 {
            Pos::new(e.line(), e.column())
        } else {
            Pos::default()
        };
        syntax(Format::Json, &e.to_string(), at)
    })?;
    let mut starts = starts.into_iter();
    place(&mut tree, &mut starts, &lines);
    Ok(tree)
}

/// Why the scan stopped before the end, at a byte offset.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The bracket that opens one level more than [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH).
    TooDeep(usize),
    /// The start of the item of the root's `policies` list past [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES).
    TooManyPolicies(usize),
}

/// The byte offset of every token that starts a value or a key, in order, or why the scan
/// stopped: nesting too deep, or too many policies.
fn scan(text: &str) -> Result<Vec<usize>, Stop> {
    let bytes = text.as_bytes();
    let mut starts = Vec::new();
    let mut policies = PolicyCount::default();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | b',' | b':' => i += 1,
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                policies.closed(depth);
                i += 1;
            }
            b'[' | b'{' => {
                policies.value(b, i, depth)?;
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Stop::TooDeep(i));
                }
                starts.push(i);
                i += 1;
            }
            b'"' => {
                let start = i;
                starts.push(i);
                i += 1;
                while let Some(&b) = bytes.get(i) {
                    i += if b == b'\\' { 2 } else { 1 };
                    if b == b'"' {
                        break;
                    }
                }
                // Only the root's keys matter: is this one `policies`?
                let key = depth == 1 && next_is_colon(&bytes[i.min(bytes.len())..]);
                match text.get(start..i) {
                    Some(raw) if key => policies.key(raw),
                    _ => policies.value(b, start, depth)?,
                }
            }
            _ => {
                policies.value(b, i, depth)?;
                starts.push(i);
                while bytes
                    .get(i)
                    .is_some_and(|b| !b" \t\n\r,:[]{}\"".contains(b))
                {
                    i += 1;
                }
            }
        }
    }
    Ok(starts)
}

/// Whether the next byte that is not whitespace is `:` (what follows a key).
fn next_is_colon(rest: &[u8]) -> bool {
    rest.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|b| *b == b':')
}

/// The items of the root's `policies` list, counted as the scan meets them.
#[derive(Debug, Default)]
struct PolicyCount {
    /// The root is an object (only then does it have keys).
    root_object: bool,
    /// The root's key just read is `policies`, its value not yet met.
    named: bool,
    /// Inside the list that is that value: its items so far.
    items: Option<usize>,
}

impl PolicyCount {
    /// A key of the root, quotes and escapes included.
    fn key(&mut self, raw: &str) {
        self.named = self.root_object
            && (raw == "\"policies\""
                || raw.contains('\\')
                    && serde_json::from_str::<String>(raw).is_ok_and(|k| k == "policies"));
    }

    /// A value starting with byte `b` at offset `at`, `depth` levels in (before it opens
    /// one itself).
    fn value(&mut self, b: u8, at: usize, depth: usize) -> Result<(), Stop> {
        match depth {
            0 => self.root_object = b == b'{',
            1 => {
                self.items = (self.named && b == b'[').then_some(0);
                self.named = false;
            }
            2 => {
                if let Some(n) = &mut self.items {
                    *n += 1;
                    if *n > MAX_POLICIES {
                        return Err(Stop::TooManyPolicies(at));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A list or table closed, leaving `depth` levels open.
    fn closed(&mut self, depth: usize) {
        if depth <= 1 {
            self.items = None;
        }
    }
}

/// Gives `node` and its descendants, in pre-order, the next positions of `starts`.
fn place(node: &mut Node<'_>, starts: &mut impl Iterator<Item = usize>, lines: &LineIndex<'_>) {
    if let Some(offset) = starts.next() {
        node.at = lines.position(offset);
    }
    match &mut node.value {
        Value::List(items) => {
            for item in items {
                place(item, starts, lines);
            }
        }
        Value::Map(entries) => {
            for (key, value) in entries {
                place(key, starts, lines);
                place(value, starts, lines);
            }
        }
        _ => {}
    }
}

/// The tree without positions, as `serde_json` reads it; [`place`] adds them.
impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node<'de>, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

fn node(value: Value<'_>) -> Node<'_> {
    Node::new(value, Pos::default())
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node<'de>, E> {
        Ok(node(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node<'de>, E> {
        Ok(node(Value::Int(v.into())))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node<'de>, E> {
        Ok(node(Value::Int(v.into())))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node<'de>, E> {
        Ok(node(Value::Float(v)))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Node<'de>, E> {
        Ok(node(Value::Str(Cow::Borrowed(v))))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node<'de>, E> {
        Ok(node(Value::Str(Cow::Owned(v.to_owned()))))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node<'de>, E> {
        Ok(node(Value::Str(Cow::Owned(v))))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node<'de>, E> {
        Ok(node(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(node(Value::List(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(node(Value::Map(entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_finds_every_value_and_key_and_skips_strings() {
        let text = r#"{"a": [1, "x]\"[", true], "b": {}}"#;
        let starts: Vec<&str> = scan(text)
            .unwrap() // a test: a panic is its failure
            .into_iter()
            .map(|i| &text[i..=i])
            .collect();
        assert_eq!(starts, ["{", "\"", "[", "1", "\"", "t", "\"", "{"]);
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert_eq!(scan(&deep), Err(Stop::TooDeep(MAX_DEPTH)));
        assert!(scan(&"[".repeat(MAX_DEPTH)).is_ok());
    }

    #[test]
    fn the_scan_counts_the_items_of_the_root_s_policies_only() {
        let doc = |key: &str, n: usize| {
            let (tables, ints) = (vec!["{}"; n].join(","), vec!["1"; n].join(","));
            format!(r#"{{"{key}": [{tables}], "x": {{"policies": [{ints}]}}}}"#)
        };
        assert!(scan(&doc("policies", MAX_POLICIES)).is_ok());
        let too_many = |key| {
            matches!(
                scan(&doc(key, MAX_POLICIES + 1)),
                Err(Stop::TooManyPolicies(_))
            )
        };
        assert!(too_many("policies"));
        assert!(
            too_many("polic\\u0069es"),
            "an escaped key is read as serde_json reads it"
        );
        assert!(
            !too_many("tiers"),
            "nor are other lists, nor `policies` deeper in"
        );
        let at = scan(r#"[{"policies": [1]}]"#);
        assert!(at.is_ok(), "a root that is a list has no policies");
    }

    #[test]
    fn positions_are_laid_in_document_order() {
        let tree = parse("{\n  \"a\": [1,\n    \"é\", 2]}").unwrap(); // a test
        let Value::Map(entries) = &tree.value else {
            panic!("a table") // a test: a panic is its failure
        };
        let (key, list) = &entries[0];
        assert_eq!(
            (tree.at, key.at, list.at),
            (Pos::new(1, 1), Pos::new(2, 3), Pos::new(2, 8))
        );
        let Value::List(items) = &list.value else {
            panic!("a list") // a test: a panic is its failure
        };
        let at: Vec<Pos> = items.iter().map(|n| n.at).collect();
        assert_eq!(at, [Pos::new(2, 9), Pos::new(3, 5), Pos::new(3, 10)]);
    }
}
