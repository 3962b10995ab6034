//! JSON: a scan that knows strings and escapes measures the nesting and notes where every
//! value and key starts, before `serde_json` parses the text; the positions are then laid on
//! the tree in document order.
//!
//! In valid JSON every token but `,`, `:`, `]` and `}` starts exactly one value or key, in
//! the order in which the parser builds them, so the n-th start belongs to the n-th node of a
//! pre-order walk.

use core::fmt;
use std::borrow::Cow;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{syntax, too_deep, LineIndex, Node, Pos, Value, MAX_DEPTH};
use crate::engine::error::ConfigError;
use crate::limits::document::Format;

pub(super) fn parse(text: &str) -> Result<Node<'_>, ConfigError> {
    let lines = LineIndex::new(text);
    let starts = scan(text).map_err(|at| too_deep(lines.position(at)))?;
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

/// The byte offset of every token that starts a value or a key, in order; `Err` with the
/// offset of the bracket that opens one level more than [`MAX_DEPTH`].
fn scan(text: &str) -> Result<Vec<usize>, usize> {
    let bytes = text.as_bytes();
    let mut starts = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | b',' | b':' => i += 1,
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(i);
                }
                starts.push(i);
                i += 1;
            }
            b'"' => {
                starts.push(i);
                i += 1;
                while let Some(&b) = bytes.get(i) {
                    i += if b == b'\\' { 2 } else { 1 };
                    if b == b'"' {
                        break;
                    }
                }
            }
            _ => {
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
        assert_eq!(scan(&deep), Err(MAX_DEPTH));
        assert!(scan(&"[".repeat(MAX_DEPTH)).is_ok());
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
