//! YAML: the tree is built here from `saphyr-parser`'s events, each with its position, so the
//! limits apply as the parser goes: a collection opened deeper than [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH) stops it
//! (block indentation and flow brackets alike; brackets in quoted strings and comments are
//! not events), and aliases are copied under a budget.
//!
//! **The alias budget.** An alias (`*name`) is a copy of the node its anchor (`&name`)
//! marks. A value weighs 1 plus the bytes of its string, a list or table 1 plus its
//! contents; the copies made for anchors and aliases together may weigh at most the
//! document's length plus 64 KiB. So the tree stays within a small multiple of the text,
//! and an alias bomb (each level ten aliases of the one before) is refused after a few
//! thousand copies instead of being expanded a billion times.
//!
//! Scalars are read by the YAML 1.2 core schema, as `serde_yaml` did: `~`, `null` and the
//! empty scalar are null; `true`, `false` (also capitalised or in capitals) are booleans;
//! decimal, `0x`, `0o` and `0b` integers with an optional sign (a leading zero makes a
//! string); floats, `.inf` and `.nan`; anything else, and every quoted or block scalar, is a
//! string. A tag other than the core schema's (`!Tag value`) makes the value unusable.
//!
//! The items of the root's `policies` list are counted as they are built: the one past
//! [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES) stops the parser.

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, ScanError, Tag};

use super::{
    located, syntax, too_deep, too_many_policies, Node, Pos, Value, MAX_DEPTH, MAX_POLICIES,
};
use crate::engine::error::{ConfigError, ConfigErrorKind};
use crate::limits::document::Format;

/// What the copies of anchors and aliases may weigh beyond the document's length.
const ALIAS_ALLOWANCE: usize = 64 << 10;

pub(super) fn parse(text: &str) -> Result<Node<'_>, ConfigError> {
    let mut parser = Parser::new_from_str(text);
    let mut tree = Tree::new(text.len().saturating_add(ALIAS_ALLOWANCE));
    let mut documents = 0;
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| scan_error(&e))?;
        let at = position(span.start);
        match event {
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    let what = "more than one document in the stream";
                    return Err(syntax(Format::Yaml, what, at));
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let value = scalar(text, style, tag.as_deref());
                tree.finish(Node::new(value, at), 0, anchor)?;
            }
            Event::SequenceStart(anchor, tag) => tree.open(false, anchor, tag.as_deref(), at)?,
            Event::MappingStart(anchor, tag) => tree.open(true, anchor, tag.as_deref(), at)?,
            Event::SequenceEnd | Event::MappingEnd => tree.close()?,
            Event::Alias(id) => tree.alias(id, at)?,
            _ => {}
        }
    }
    Ok(tree
        .root
        .unwrap_or_else(|| Node::new(Value::Null, Pos::new(1, 1))))
}

fn position(mark: Marker) -> Pos {
    Pos::new(mark.line(), mark.col() + 1)
}

fn scan_error(e: &ScanError) -> ConfigError {
    let at = position(*e.marker());
    // The parser's own limit on flow nesting; its wording is all that tells it apart.
    if e.info().contains("recursion limit") {
        too_deep(at)
    } else {
        syntax(Format::Yaml, e.info(), at)
    }
}

/// A list or table being read.
struct Open<'a> {
    at: Pos,
    map: bool,
    anchor: usize,
    tagged: bool,
    /// The items, or the keys and values in turn.
    items: Vec<Node<'a>>,
    /// The greatest height of an item (a scalar is 0, a list or table 1 more than its items).
    height: usize,
    /// This is the root's `policies` list: its items are counted as they come.
    policies: bool,
}

/// An anchored node, ready to be copied by its aliases.
struct Anchored<'a> {
    node: Node<'a>,
    height: usize,
    weight: usize,
}

/// The tree as the events build it.
struct Tree<'a> {
    open: Vec<Open<'a>>,
    root: Option<Node<'a>>,
    anchors: HashMap<usize, Anchored<'a>>,
    /// What copies may still weigh.
    budget: usize,
}

impl<'a> Tree<'a> {
    fn new(budget: usize) -> Self {
        Tree {
            open: Vec::new(),
            root: None,
            anchors: HashMap::new(),
            budget,
        }
    }

    fn open(
        &mut self,
        map: bool,
        anchor: usize,
        tag: Option<&Tag>,
        at: Pos,
    ) -> Result<(), ConfigError> {
        if self.open.len() >= MAX_DEPTH {
            return Err(too_deep(at));
        }
        let tagged = tag.is_some_and(|t| !t.is_yaml_core_schema());
        // The value of the root table's key `policies` (its keys and values alternate).
        let policies = match self.open.as_slice() {
            [root] if !map && root.map && root.items.len() % 2 == 1 => root
                .items
                .last()
                .is_some_and(|key| key.as_str() == Some("policies")),
            _ => false,
        };
        self.open.push(Open {
            at,
            map,
            anchor,
            tagged,
            items: Vec::new(),
            height: 0,
            policies,
        });
        Ok(())
    }

    fn close(&mut self) -> Result<(), ConfigError> {
        let Some(open) = self.open.pop() else {
            return Ok(());
        };
        let value = if open.tagged {
            Value::Other("a tagged value")
        } else if open.map {
            let mut entries = Vec::with_capacity(open.items.len() / 2);
            let mut items = open.items.into_iter();
            while let (Some(key), Some(value)) = (items.next(), items.next()) {
                entries.push((key, value));
            }
            Value::Map(entries)
        } else {
            Value::List(open.items)
        };
        self.finish(Node::new(value, open.at), open.height + 1, open.anchor)
    }

    /// A node is complete: keep a copy for its anchor, then give it to the open collection.
    fn finish(&mut self, node: Node<'a>, height: usize, anchor: usize) -> Result<(), ConfigError> {
        if anchor != 0 {
            let weight = weight(&node);
            self.spend(weight, node.at)?;
            let copy = Anchored {
                node: node.clone(),
                height,
                weight,
            };
            self.anchors.insert(anchor, copy);
        }
        match self.open.last_mut() {
            Some(open) if open.policies && open.items.len() >= MAX_POLICIES => {
                Err(too_many_policies(node.at))
            }
            Some(open) => {
                open.height = open.height.max(height);
                open.items.push(node);
                Ok(())
            }
            None => {
                self.root = Some(node);
                Ok(())
            }
        }
    }

    fn alias(&mut self, id: usize, at: Pos) -> Result<(), ConfigError> {
        let Some(anchored) = self.anchors.get(&id) else {
            let what = "an alias of a node that is not complete (a node cannot contain itself)";
            return Err(syntax(Format::Yaml, what, at));
        };
        if self.open.len() + anchored.height > MAX_DEPTH {
            return Err(too_deep(at));
        }
        let (node, height, weight) = (anchored.node.clone(), anchored.height, anchored.weight);
        self.spend(weight, at)?;
        self.finish(Node { at, ..node }, height, 0)
    }

    fn spend(&mut self, weight: usize, at: Pos) -> Result<(), ConfigError> {
        match self.budget.checked_sub(weight) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => {
                let what = "YAML aliases copy more than the document's own size";
                let hint = "write the repeated values out, or alias fewer or smaller ones";
                let kind = ConfigErrorKind::TooLarge;
                Err(located(
                    ConfigError::new(kind, "", what, Some(hint.to_owned())),
                    at,
                ))
            }
        }
    }
}

/// What copying `node` costs: 1 per value plus the bytes of its strings.
fn weight(node: &Node<'_>) -> usize {
    1 + match &node.value {
        Value::Str(s) => s.len(),
        Value::List(items) => items.iter().map(weight).sum(),
        Value::Map(entries) => entries.iter().map(|(k, v)| weight(k) + weight(v)).sum(),
        _ => 0,
    }
}

/// A scalar's value: plain ones by the core schema, quoted and block ones as strings.
fn scalar<'a>(text: Cow<'a, str>, style: ScalarStyle, tag: Option<&Tag>) -> Value<'a> {
    match tag {
        Some(tag) if tag.is_yaml_core_schema() => match tag.suffix.as_str() {
            "str" => Value::Str(text),
            "null" | "bool" | "int" | "float" => plain(text),
            _ => Value::Other("a tagged value"),
        },
        Some(_) => Value::Other("a tagged value"),
        None if matches!(style, ScalarStyle::Plain) => plain(text),
        None => Value::Str(text),
    }
}

/// A plain scalar by the YAML 1.2 core schema.
pub(super) fn plain(text: Cow<'_, str>) -> Value<'_> {
    match text.as_ref() {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        s => match (integer(s), float(s)) {
            (Some(n), _) => Value::Int(n),
            (None, Some(x)) => Value::Float(x),
            (None, None) => Value::Str(text),
        },
    }
}

fn integer(s: &str) -> Option<i128> {
    let (negative, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = [("0x", 16), ("0o", 8), ("0b", 2)]
        .iter()
        .find_map(|(prefix, radix)| unsigned.strip_prefix(prefix).map(|d| (*radix, d)))
        .unwrap_or((10, unsigned));
    let valid = !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
    if !valid || leading_zero(s) {
        return None;
    }
    let n = i128::from_str_radix(digits, radix).ok()?;
    Some(if negative { -n } else { n })
}

fn float(s: &str) -> Option<f64> {
    let unsigned = match s.strip_prefix('+') {
        Some(rest) if rest.starts_with(['+', '-']) => return None,
        Some(rest) => rest,
        None => s,
    };
    match (s, unsigned) {
        (_, ".inf" | ".Inf" | ".INF") => Some(f64::INFINITY),
        ("-.inf" | "-.Inf" | "-.INF", _) => Some(f64::NEG_INFINITY),
        (".nan" | ".NaN" | ".NAN", _) => Some(f64::NAN),
        _ if leading_zero(s) => None,
        _ => unsigned.parse::<f64>().ok().filter(|x| x.is_finite()),
    }
}

/// Digits with a leading zero (`007`) are a string in YAML 1.2.
fn leading_zero(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    s.len() > 1 && s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(s: &str) -> Value<'_> {
        plain(Cow::Borrowed(s))
    }

    #[test]
    fn plain_scalars_follow_the_core_schema() {
        assert_eq!(value("~"), Value::Null);
        assert_eq!(value(""), Value::Null);
        assert_eq!(value("True"), Value::Bool(true));
        assert_eq!(value("yes"), Value::Str("yes".into()));
        assert_eq!(value("10"), Value::Int(10));
        assert_eq!(value("-10"), Value::Int(-10));
        assert_eq!(value("+10"), Value::Int(10));
        assert_eq!(value("0x1F"), Value::Int(31));
        assert_eq!(value("0o17"), Value::Int(15));
        assert_eq!(value("007"), Value::Str("007".into()));
        assert_eq!(value("10.0"), Value::Float(10.0));
        assert_eq!(value("1e3"), Value::Float(1000.0));
        assert_eq!(value("-.inf"), Value::Float(f64::NEG_INFINITY));
        assert_eq!(value("+-1"), Value::Str("+-1".into()));
        assert_eq!(value("10/s"), Value::Str("10/s".into()));
        assert_eq!(value("inf"), Value::Str("inf".into()));
        assert!(matches!(value(".nan"), Value::Float(x) if x.is_nan()));
    }

    #[test]
    fn quoted_and_tagged_scalars() {
        let tree = parse("a: '10'\nb: !!str 10\nc: !Tag 10\nd: !!int 10\n").unwrap(); // a test
        let Value::Map(entries) = tree.value else {
            panic!("a table") // a test: a panic is its failure
        };
        let values: Vec<Value> = entries.into_iter().map(|(_, v)| v.value).collect();
        assert_eq!(
            values,
            [
                Value::Str("10".into()),
                Value::Str("10".into()),
                Value::Other("a tagged value"),
                Value::Int(10)
            ]
        );
    }

    #[test]
    fn aliases_are_copied_with_the_alias_position() {
        let tree = parse("a: &x [1, 2]\nb: *x\n").unwrap(); // a test
        let Value::Map(entries) = tree.value else {
            panic!("a table") // a test: a panic is its failure
        };
        assert_eq!(entries[0].1.value, entries[1].1.value);
        assert_eq!(entries[1].1.at, Pos::new(2, 4));
        assert_eq!(entries[1].0.at, Pos::new(2, 1));
    }

    #[test]
    fn limits() {
        let err = parse(&format!("a:\n{}x", "- ".repeat(MAX_DEPTH))).unwrap_err(); // a test
        assert_eq!(err.kind(), ConfigErrorKind::TooDeep);
        assert!(parse(&format!("a:\n{}x", "- ".repeat(MAX_DEPTH - 1))).is_ok());
        let err = parse("a: &a [*a]").unwrap_err(); // a test
        assert_eq!(err.kind(), ConfigErrorKind::Syntax);
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err(); // a test
        assert_eq!(err.line(), Some(2));
    }
}
