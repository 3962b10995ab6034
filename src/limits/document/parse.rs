//! Phase one: the lenient parse. Any of the three formats becomes a [`Node`] tree that keeps
//! every field, unknown ones and duplicates included, and never fails on shape: only a text
//! that is not valid TOML, YAML or JSON is an error here, with its line and column.

use core::fmt;

use serde::de::{self, Deserialize, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};

use super::Format;
use crate::engine::error::{ConfigError, ConfigErrorKind};

/// A value of any of the three formats, as the validator walks it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Node {
    Null,
    Bool(bool),
    /// Every integer that fits: TOML's i64, YAML's and JSON's u64 and i64.
    Int(i128),
    Float(f64),
    Str(String),
    List(Vec<Node>),
    /// Entries in document order; keys may repeat and need not be strings (YAML).
    Map(Vec<(Node, Node)>),
    /// Something no schema field takes (a YAML tag, a TOML date), named for messages.
    Other(&'static str),
}

impl Node {
    /// What the value is, for "expected …, found …" messages.
    pub(super) fn describe(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a float",
            Node::Str(_) => "a string",
            Node::List(_) => "a list",
            Node::Map(_) => "a table",
            Node::Other(what) => what,
        }
    }
}

/// Parses `text` in `format` into a tree.
pub(super) fn parse(text: &str, format: Format) -> Result<Node, ConfigError> {
    match format {
        Format::Toml => toml::from_str(text).map_err(|e| toml_error(text, &e)),
        Format::Yaml => serde_yaml::from_str(text).map_err(|e| {
            let at = e.location().map(|l| (l.line(), l.column()));
            syntax(format, &e.to_string(), at)
        }),
        Format::Json => serde_json::from_str(text).map_err(|e| {
            let at = (e.line() > 0).then(|| (e.line(), e.column()));
            syntax(format, &e.to_string(), at)
        }),
    }
}

fn toml_error(text: &str, err: &toml::de::Error) -> ConfigError {
    let at = err.span().map(|span| line_column(text, span.start));
    syntax(Format::Toml, err.message(), at)
}

/// The 1-based line and column (in characters) of byte `offset`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// A syntax error; the position is taken out of the message, which says it separately.
fn syntax(format: Format, message: &str, at: Option<(usize, usize)>) -> ConfigError {
    let mut message = message.trim();
    if let Some((line, column)) = at {
        for suffix in [
            format!(" at line {line} column {column}"),
            format!(" at position {}", column.saturating_sub(1)),
        ] {
            message = message.strip_suffix(suffix.as_str()).unwrap_or(message);
        }
    }
    let what = format!("invalid {format}: {message}");
    let err = ConfigError::new(ConfigErrorKind::Syntax, "", what, None);
    match at {
        Some((line, column)) => err.at(line, column),
        None => err,
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        Ok(i128::try_from(v).map_or(Node::Float(v as f64), Node::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Node, E> {
        Ok(Node::Other("bytes"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        // a TOML date arrives as a one-entry map with a private key
        if let [(Node::Str(key), _)] = entries.as_slice() {
            if key.starts_with("$__toml_private") {
                return Ok(Node::Other("a date"));
            }
        }
        Ok(Node::Map(entries))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Node, A::Error> {
        // a YAML tag (`!Tag value`): keep the document readable, reject the value later
        let (_, variant) = data.variant::<Node>()?;
        de::VariantAccess::newtype_variant::<Node>(variant)?;
        Ok(Node::Other("a tagged value"))
    }
}
