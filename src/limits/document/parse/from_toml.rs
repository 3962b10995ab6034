//! TOML: the `toml` crate's own parser gives a tree with the span of every key and value. It
//! stops by itself at its recursion limit (deeper than [`MAX_DEPTH`]); the walk here stops at
//! [`MAX_DEPTH`].

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{syntax, too_deep, LineIndex, Node, Pos, Value, MAX_DEPTH};
use crate::engine::error::ConfigError;
use crate::limits::document::Format;

pub(super) fn parse(text: &str) -> Result<Node<'_>, ConfigError> {
    let lines = LineIndex::new(text);
    let at = |span: Option<core::ops::Range<usize>>| {
        span.map_or_else(Pos::default, |s| lines.position(s.start))
    };
    let root = DeTable::parse(text).map_err(|e| {
        // The parser's own nesting limit; its wording is all that tells it apart.
        if e.message().contains("recursion") {
            too_deep(at(e.span()))
        } else {
            syntax(Format::Toml, e.message(), at(e.span()))
        }
    })?;
    let (span, table) = (root.span(), root.into_inner());
    Walk { lines: &lines }.table(table, lines.position(span.start), 1)
}

struct Walk<'a, 'b> {
    lines: &'b LineIndex<'a>,
}

impl Walk<'_, '_> {
    fn table<'t>(
        &self,
        table: DeTable<'t>,
        at: Pos,
        depth: usize,
    ) -> Result<Node<'t>, ConfigError> {
        if depth > MAX_DEPTH {
            return Err(too_deep(at));
        }
        let mut entries = Vec::with_capacity(table.len());
        for (key, value) in table {
            let key_at = self.lines.position(key.span().start);
            let key = Node::new(Value::Str(key.into_inner()), key_at);
            entries.push((key, self.value(value, depth + 1)?));
        }
        Ok(Node::new(Value::Map(entries), at))
    }

    fn value<'t>(
        &self,
        value: Spanned<DeValue<'t>>,
        depth: usize,
    ) -> Result<Node<'t>, ConfigError> {
        let at = self.lines.position(value.span().start);
        let value = match value.into_inner() {
            DeValue::String(s) => Value::Str(s),
            DeValue::Integer(n) => match i128::from_str_radix(n.as_str(), n.radix()) {
                Ok(n) => Value::Int(n),
                Err(_) => return Err(syntax(Format::Toml, "integer number overflowed", at)),
            },
            DeValue::Float(x) => match x.as_str().parse::<f64>() {
                Ok(f) if f.is_finite() || x.as_str().contains("inf") || f.is_nan() => {
                    Value::Float(f)
                }
                _ => return Err(syntax(Format::Toml, "floating-point number overflowed", at)),
            },
            DeValue::Boolean(b) => Value::Bool(b),
            DeValue::Datetime(_) => Value::Other("a date"),
            DeValue::Array(items) => {
                if depth > MAX_DEPTH {
                    return Err(too_deep(at));
                }
                let items = items.into_iter().map(|item| self.value(item, depth + 1));
                Value::List(items.collect::<Result<_, _>>()?)
            }
            DeValue::Table(table) => return self.table(table, at, depth),
        };
        Ok(Node::new(value, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_have_their_positions() {
        let tree = parse("a = 1\n[t]\nb = [\"x\", { c = 2.5 }]\n").unwrap(); // a test
        let Value::Map(entries) = &tree.value else {
            panic!("a table") // a test: a panic is its failure
        };
        let (key, value) = &entries[0];
        assert_eq!((key.at, value.at), (Pos::new(1, 1), Pos::new(1, 5)));
        assert_eq!(value.value, Value::Int(1));
        let (_, t) = &entries[1];
        let Value::Map(t) = &t.value else {
            panic!("a table") // a test: a panic is its failure
        };
        assert_eq!((t[0].0.at, t[0].1.at), (Pos::new(3, 1), Pos::new(3, 5)));
    }

    #[test]
    fn nesting_beyond_the_limit_is_too_deep() {
        let nested =
            |depth: usize| format!("a = {}{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        assert!(parse(&nested(MAX_DEPTH)).is_ok());
        let err = parse(&nested(MAX_DEPTH + 1)).unwrap_err(); // a test
        assert_eq!(err.kind(), crate::ConfigErrorKind::TooDeep);
        let err = parse(&format!("{}b = 1", "a.".repeat(1000))).unwrap_err(); // a test
        assert_eq!(err.kind(), crate::ConfigErrorKind::TooDeep);
    }
}
