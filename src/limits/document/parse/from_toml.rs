//! TOML: the `toml` crate's own parser gives a tree with the span of every key and value. It
//! stops by itself at its recursion limit (deeper than [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH)); the walk here stops at
//! [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH).
//!
//! That parser builds its whole tree before anything can be looked at, so the policies are
//! counted first, by a scan of the text's tokens ([`count_policies`]) that stops at the one
//! past [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES).

use std::borrow::Cow;

use toml::de::{DeTable, DeValue};
use toml::Spanned;
use toml_parser::lexer::{Token, TokenKind};
use toml_parser::Source;

use super::{
    position_in, syntax, too_deep, too_many_policies, LineIndex, Node, Pos, Value, MAX_DEPTH,
    MAX_POLICIES,
};
use crate::engine::error::ConfigError;
use crate::limits::document::Format;

pub(super) fn parse(text: &str) -> Result<Node<'_>, ConfigError> {
    // A refusal reads only as far as the count did.
    count_policies(text).map_err(|offset| too_many_policies(position_in(text, offset)))?;
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

/// Counts the policies of a TOML text as the `toml` crate reads them — one per
/// `[[policies]]` header, or the items of a `policies = [ … ]` array at the root — and
/// stops at the one past [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES): `Err` with the byte offset where it starts.
///
/// A scan of the `toml` crate's own tokens, in constant memory: a string or a comment is
/// one token, so brackets in them are not seen. A text that is not valid TOML is counted
/// as well as it goes; the parser reports its error.
fn count_policies(text: &str) -> Result<(), usize> {
    let source = Source::new(text);
    let mut tokens = source
        .lex()
        .filter(|t| !matches!(t.kind(), TokenKind::Whitespace | TokenKind::Comment));
    let mut count = 0;
    let mut at_root = true;
    while let Some(first) = tokens.next() {
        match first.kind() {
            TokenKind::Newline => {}
            TokenKind::LeftSquareBracket => {
                // A header: `[table]`, or `[[array]]` with its brackets side by side.
                let mut next = tokens.next();
                let array = next.is_some_and(|t| {
                    t.kind() == TokenKind::LeftSquareBracket
                        && t.span().start() == first.span().end()
                });
                if array {
                    next = tokens.next();
                }
                let (policies, end) = read_key(&source, next, &mut tokens);
                at_root = false;
                if array && policies {
                    one_more(&mut count, first.span().start())?;
                }
                skip_value(end, &mut tokens);
            }
            _ => {
                let (policies, end) = read_key(&source, Some(first), &mut tokens);
                let value = tokens.next();
                let list = end.is_some_and(|t| t.kind() == TokenKind::Equals)
                    && value.is_some_and(|t| t.kind() == TokenKind::LeftSquareBracket);
                if at_root && policies && list {
                    count_items(&mut count, &mut tokens)?;
                    skip_value(None, &mut tokens);
                } else {
                    skip_value(value, &mut tokens);
                }
            }
        }
    }
    Ok(())
}

/// One more policy, starting at byte `offset`.
fn one_more(count: &mut usize, offset: usize) -> Result<(), usize> {
    *count += 1;
    if *count > MAX_POLICIES {
        return Err(offset);
    }
    Ok(())
}

/// Reads a key from its first token (`a`, `"a"`, `a.b`): whether it is `policies` alone, and
/// the token after it.
fn read_key(
    source: &Source<'_>,
    first: Option<Token>,
    tokens: &mut impl Iterator<Item = Token>,
) -> (bool, Option<Token>) {
    let mut next = first;
    let mut segments = 0;
    let mut policies = false;
    while let Some(t) = next {
        match t.kind() {
            TokenKind::Atom | TokenKind::BasicString | TokenKind::LiteralString => {
                segments += 1;
                policies = segments == 1
                    && source.get(t).is_some_and(|raw| {
                        let mut key = Cow::Borrowed("");
                        raw.decode_key(&mut key, &mut ());
                        key == "policies"
                    });
            }
            TokenKind::Dot => {}
            _ => break,
        }
        next = tokens.next();
    }
    (policies && segments == 1, next)
}

/// Counts the items of an array whose `[` was just read, up to its `]`.
fn count_items(count: &mut usize, tokens: &mut impl Iterator<Item = Token>) -> Result<(), usize> {
    let mut depth = 1usize;
    let mut expect_item = true;
    for t in tokens {
        let starts_item = depth == 1 && expect_item;
        match t.kind() {
            TokenKind::Newline => continue,
            TokenKind::Comma if depth == 1 => {
                expect_item = true;
                continue;
            }
            TokenKind::RightSquareBracket | TokenKind::RightCurlyBracket => {
                depth -= 1;
                if depth == 0 {
                    return Ok(());
                }
                continue;
            }
            TokenKind::LeftSquareBracket | TokenKind::LeftCurlyBracket => depth += 1,
            _ => {}
        }
        if starts_item {
            expect_item = false;
            one_more(count, t.span().start())?;
        }
    }
    Ok(())
}

/// Skips the rest of a line from `first` on: a value may span lines inside its brackets.
fn skip_value(first: Option<Token>, tokens: &mut impl Iterator<Item = Token>) {
    let mut depth = 0usize;
    let mut next = first;
    while let Some(t) = next {
        match t.kind() {
            TokenKind::Newline if depth == 0 => return,
            TokenKind::LeftSquareBracket | TokenKind::LeftCurlyBracket => depth += 1,
            TokenKind::RightSquareBracket | TokenKind::RightCurlyBracket => {
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        next = tokens.next();
    }
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
    fn policies_are_counted_as_the_toml_crate_reads_them() {
        let count = |text: &str| {
            let mut n = 0;
            let policies = parse(text).map(|tree| {
                if let Value::Map(entries) = tree.value {
                    for (key, value) in entries {
                        if let (Some("policies"), Value::List(items)) = (key.as_str(), &value.value)
                        {
                            n = items.len();
                        }
                    }
                }
            });
            assert!(policies.is_ok(), "{text}");
            n
        };
        let texts = [
            "[[policies]]\na = 1\n[[ policies ]]\n[[\"policies\"]]\n[['policies']]\n",
            "policies = [{}, { a = [1, 2] }, [3],\n  \"x\", # 1, 2\n 4,]\n[[other]]\n",
            "[[policies]]\n[[policies.x]]\n[t]\npolicies = [1, 2]\nt.policies = [3]\n",
            "s = \"\"\"\n[[policies]]\n\"\"\"\nq = '[[policies]]'\n# [[policies]]\n",
        ];
        for (text, expected) in texts.iter().zip([4, 5, 1, 0]) {
            assert!(count_policies(text).is_ok(), "{text}");
            assert_eq!(count(text), expected, "{text}");
        }
    }

    #[test]
    fn the_count_stops_at_the_policy_past_the_cap() {
        let headers = "[[policies]]\n".repeat(MAX_POLICIES);
        assert!(count_policies(&headers).is_ok());
        let more = format!("{headers}[[policies]]\n");
        assert_eq!(count_policies(&more), Err(headers.len()));
        let items = format!("policies = [{}]", "1, ".repeat(MAX_POLICIES));
        assert!(count_policies(&items).is_ok());
        let more = format!("policies = [{}1]", "1, ".repeat(MAX_POLICIES));
        assert_eq!(count_policies(&more), Err(more.len() - 2));
    }

    #[test]
    fn nesting_beyond_the_limit_is_too_deep() {
        let nested =
            |depth: usize| format!("a = {}{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
        assert!(parse(&nested(MAX_DEPTH)).is_ok());
        let err = parse(&nested(MAX_DEPTH + 1)).unwrap_err(); // a test
        assert_eq!(err.kind(), crate::limits::ConfigErrorKind::TooDeep);
        let err = parse(&format!("{}b = 1", "a.".repeat(1000))).unwrap_err(); // a test
        assert_eq!(err.kind(), crate::limits::ConfigErrorKind::TooDeep);
    }
}
