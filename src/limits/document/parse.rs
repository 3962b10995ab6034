//! Phase one: the lenient parse. Any of the three formats becomes a [`Node`] tree that keeps
//! every field, unknown ones and duplicates included, each value with its line and column,
//! and never fails on shape: only a text that is not valid TOML, YAML or JSON is an error
//! here, with its line and column, and so is a text beyond the limits that keep every input
//! linear in time and memory:
//!
//! * a text longer than [`MAX_DOCUMENT_BYTES`](crate::limits::Limits::MAX_DOCUMENT_BYTES) is refused before any parser sees it;
//! * nesting deeper than [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH) is refused by the parsers as they meet it (each stops
//!   there; TOML's, JSON's and YAML's own parsers refuse even deeper flow nesting first, with
//!   the same error);
//! * YAML aliases are copied into the tree under a budget (see `from_yaml.rs`), so an alias
//!   bomb is refused instead of expanded;
//! * a `policies` list longer than [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES) is refused where the parser meets the
//!   policy past the cap (TOML's is counted by a scan of its tokens before the `toml` crate
//!   builds its tree, JSON's by the scan that measures nesting, YAML's as its events come).

use std::borrow::Cow;

use super::Format;
use crate::engine::error::{ConfigError, ConfigErrorKind};

mod from_json;
mod from_toml;
mod from_yaml;

pub(crate) const MAX_DOCUMENT_BYTES: usize = 16 << 20;

pub(crate) const MAX_DEPTH: usize = 64;

/// The levels a valid limits document uses at most, for the hint of a nesting error.
const DEPTH_USED: usize = 5;

pub(crate) const MAX_POLICIES: usize = 100_000;

/// Where a value starts in the text: 1-based line and column (in characters); 0 when unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Pos {
    pub(super) line: u32,
    pub(super) column: u32,
}

impl Pos {
    pub(super) fn new(line: usize, column: usize) -> Pos {
        let cap = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Pos {
            line: cap(line),
            column: cap(column),
        }
    }
}

/// A value of any of the three formats with where it starts, as the validator walks it.
/// Strings borrow from the text where the format allows (no escapes), so that a large
/// document costs few allocations.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Node<'a> {
    pub(super) value: Value<'a>,
    pub(super) at: Pos,
}

impl<'a> Node<'a> {
    pub(super) fn new(value: Value<'a>, at: Pos) -> Node<'a> {
        Node { value, at }
    }

    /// What the value is, for "expected …, found …" messages.
    pub(super) fn describe(&self) -> &'static str {
        self.value.describe()
    }

    /// The string, if the value is one.
    pub(super) fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl Value<'_> {
    /// What the value is, for "expected …, found …" messages.
    pub(super) fn describe(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::List(_) => "a list",
            Value::Map(_) => "a table",
            Value::Other(what) => what,
        }
    }
}

/// The value of a [`Node`].
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Value<'a> {
    Null,
    Bool(bool),
    /// Every integer that fits: TOML's i64, YAML's and JSON's u64 and i64.
    Int(i128),
    Float(f64),
    Str(Cow<'a, str>),
    List(Vec<Node<'a>>),
    /// Entries in document order; keys may repeat and need not be strings (YAML).
    Map(Vec<(Node<'a>, Node<'a>)>),
    /// Something no schema field takes (a YAML tag, a TOML date), named for messages.
    Other(&'static str),
}

/// Parses `text` in `format` into a tree.
pub(super) fn parse(text: &str, format: Format) -> Result<Node<'_>, ConfigError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(too_large(text.len() as u64));
    }
    match format {
        Format::Toml => from_toml::parse(text),
        Format::Yaml => from_yaml::parse(text),
        Format::Json => from_json::parse(text),
    }
}

/// The error for a document of `bytes` bytes, more than [`MAX_DOCUMENT_BYTES`](crate::limits::Limits::MAX_DOCUMENT_BYTES).
pub(super) fn too_large(bytes: u64) -> ConfigError {
    let what = format!(
        "document of {bytes} bytes is larger than the limit of {} MiB",
        MAX_DOCUMENT_BYTES >> 20
    );
    ConfigError::new(ConfigErrorKind::TooLarge, "", what, None)
}

/// A JSON text as a tree, whatever its length: for writing documents, which are valid and
/// shallow but may come out longer than [`MAX_DOCUMENT_BYTES`](crate::limits::Limits::MAX_DOCUMENT_BYTES) in another format.
pub(super) fn json_tree(text: &str) -> Result<Node<'_>, ConfigError> {
    from_json::parse(text)
}

/// Whether a YAML reader takes the plain scalar `s` for a string (not a number, boolean or
/// null).
pub(super) fn reads_as_string(s: &str) -> bool {
    matches!(from_yaml::plain(Cow::Borrowed(s)), Value::Str(_))
}

/// The error for nesting deeper than [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH), at `at` when known.
fn too_deep(at: Pos) -> ConfigError {
    let what = format!("nesting deeper than {MAX_DEPTH} levels");
    let hint = format!("a limits document needs {DEPTH_USED}");
    located(
        ConfigError::new(ConfigErrorKind::TooDeep, "", what, Some(hint)),
        at,
    )
}

/// The error for a list of policies longer than [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES), at the first policy past
/// the cap when known.
pub(super) fn too_many_policies(at: Pos) -> ConfigError {
    let what = format!("more than {MAX_POLICIES} policies");
    let hint = format!(
        "a document may have at most {MAX_POLICIES} (tollgate::limits::Limits::MAX_POLICIES): split it, or \
         merge policies that share a quota"
    );
    let kind = ConfigErrorKind::TooManyPolicies;
    located(ConfigError::new(kind, "policies", what, Some(hint)), at)
}

/// A syntax error; the position is taken out of the message, which says it separately.
fn syntax(format: Format, message: &str, at: Pos) -> ConfigError {
    let mut message = message.trim();
    if at.line > 0 {
        for suffix in [
            format!(" at line {} column {}", at.line, at.column),
            format!(" at position {}", at.column.saturating_sub(1)),
        ] {
            message = message.strip_suffix(suffix.as_str()).unwrap_or(message);
        }
    }
    let what = format!("invalid {format}: {message}");
    located(
        ConfigError::new(ConfigErrorKind::Syntax, "", what, None),
        at,
    )
}

/// `err` at `at`, when `at` is known.
pub(super) fn located(err: ConfigError, at: Pos) -> ConfigError {
    if at.line == 0 {
        err
    } else {
        err.at(at.line as usize, at.column as usize)
    }
}

/// The position of byte `offset` of `text`, reading only the text before it: for an error
/// found before the whole text was indexed.
fn position_in(text: &str, offset: usize) -> Pos {
    let before = text.get(..offset).unwrap_or(text);
    LineIndex::new(before).position(offset)
}

/// Byte offsets to lines and columns (in characters) in time independent of the line's
/// length, so that a document on one long line costs no more than one with many lines.
struct LineIndex<'a> {
    text: &'a str,
    /// The byte offset at which each line starts.
    line_starts: Vec<usize>,
    /// The characters before each block of [`BLOCK`] bytes; empty when the text is ASCII,
    /// where a byte is a character.
    chars_before_block: Vec<usize>,
}

/// The bytes between two checkpoints of [`LineIndex::chars_before_block`].
const BLOCK: usize = 64;

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let bytes = text.as_bytes();
        let mut line_starts = vec![0];
        line_starts.extend(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        );
        let mut chars_before_block = Vec::new();
        if !text.is_ascii() {
            chars_before_block.reserve(bytes.len() / BLOCK + 1);
            let mut chars = 0;
            for block in bytes.chunks(BLOCK) {
                chars_before_block.push(chars);
                chars += block.iter().filter(|b| !is_continuation(**b)).count();
            }
            chars_before_block.push(chars);
        }
        LineIndex {
            text,
            line_starts,
            chars_before_block,
        }
    }

    /// The characters before byte `offset`.
    fn chars_before(&self, offset: usize) -> usize {
        let offset = offset.min(self.text.len());
        if self.chars_before_block.is_empty() {
            return offset;
        }
        let block = offset / BLOCK;
        let tail = &self.text.as_bytes()[block * BLOCK..offset];
        self.chars_before_block[block] + tail.iter().filter(|b| !is_continuation(**b)).count()
    }

    /// The position of byte `offset`.
    fn position(&self, offset: usize) -> Pos {
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let start = self.line_starts[line.max(1) - 1];
        let column = self.chars_before(offset) - self.chars_before(start) + 1;
        Pos::new(line.max(1), column)
    }
}

/// Whether `b` continues a UTF-8 character rather than starting one.
fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_index_counts_characters_not_bytes() {
        let text = "ab\ncé\u{1F600}x\n\ny";
        let index = LineIndex::new(text);
        let at = |needle: &str| index.position(text.find(needle).unwrap()); // a test
        assert_eq!(at("a"), Pos::new(1, 1));
        assert_eq!(at("b"), Pos::new(1, 2));
        assert_eq!(at("c"), Pos::new(2, 1));
        assert_eq!(at("x"), Pos::new(2, 4));
        assert_eq!(at("y"), Pos::new(4, 1));
        let long = format!("{}é{}z", "a".repeat(200), "b".repeat(100));
        let index = LineIndex::new(&long);
        assert_eq!(index.position(long.find('z').unwrap()), Pos::new(1, 302)); // a test
        let whole = LineIndex::new(text);
        for (offset, _) in text.char_indices() {
            assert_eq!(
                position_in(text, offset),
                whole.position(offset),
                "at {offset}"
            );
        }
    }
}
