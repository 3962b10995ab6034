//! Phase two: the validator walks the tree of any format and collects every error, each with
//! its path by policy name and one fix hint; a [`Limits`] comes out only when there is none.

use std::collections::HashSet;

use super::fields::{check_name, parse_quota, ACK_FIELDS, DOCUMENT_FIELDS};
use super::model::{Acknowledgement, Matcher, Policy};
use super::names::{did_you_mean, NameIndex};
use super::parse::{Node, Value};
use super::{ConfigErrors, Limits};

mod policy;
mod traffic;
use crate::engine::error::{ConfigError, ConfigErrorKind as Kind, Quoted};
use crate::engine::quota::Quota;
use crate::shaping::priority::Priorities;
use crate::shaping::retry::RetryBudget;

/// Validates a whole document.
pub(super) fn validate(root: &Node) -> Result<Limits, ConfigErrors> {
    let mut walk = Walk::default();
    let limits = walk.document(root);
    match (ConfigErrors::from_vec(walk.errors), limits) {
        (None, Some(limits)) => Ok(limits),
        (Some(errors), _) => Err(errors),
        // every path that drops the document reports why; this arm only keeps that a promise
        (None, None) => Err(ConfigErrors::one(ConfigError::new(
            Kind::InvalidValue,
            "",
            "invalid document",
            None,
        ))),
    }
}

/// `path.field`, or `field` at the top.
fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

/// A table's entries by name, after unknown, repeated and non-string keys were reported.
struct Table<'a> {
    fields: Vec<(&'a str, &'a Node<'a>)>,
}

impl<'a> Table<'a> {
    fn get(&self, name: &str) -> Option<&'a Node<'a>> {
        self.fields
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
    }
}

/// What a policy came to; a part is `None` when it had an error.
struct Draft {
    name: Option<String>,
    matcher: Option<Matcher>,
    quota: Option<Quota>,
    shadow: bool,
    classes: Option<Priorities>,
    retry_budget: Option<RetryBudget>,
}

/// The names a document declares; `None` when the list itself was unusable, so that the
/// matchers are not blamed for it.
type Declared = Option<NameIndex>;

#[derive(Default)]
struct Walk {
    errors: Vec<ConfigError>,
}

impl Walk {
    fn error(&mut self, kind: Kind, path: &str, what: impl core::fmt::Display, hint: &str) {
        let hint = (!hint.is_empty()).then(|| hint.to_owned());
        self.errors.push(ConfigError::new(kind, path, what, hint));
    }

    fn missing(&mut self, path: &str, hint: &str) {
        self.error(Kind::MissingField, path, "missing field", hint);
    }

    fn wrong_type(&mut self, path: &str, expected: &str, found: &Node, hint: &str) {
        let what = format!("expected {expected}, found {}", found.describe());
        self.error(Kind::WrongType, path, what, hint);
    }

    /// Opens a table, reporting keys that are unknown, repeated or not strings.
    fn table<'a>(&mut self, node: &'a Node, path: &str, known: &[&str]) -> Option<Table<'a>> {
        let Value::Map(entries) = &node.value else {
            let hint = format!("a table with the fields {}", known.join(", "));
            self.wrong_type(path, "a table", node, &hint);
            return None;
        };
        let mut fields: Vec<(&str, &Node)> = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let Value::Str(key) = &key.value else {
                let what = format!("a field name is {}, not a string", key.describe());
                self.error(Kind::WrongType, path, what, "quote the field name");
                continue;
            };
            let shown = if key.len() <= 64 && key.bytes().all(|b| b.is_ascii_graphic()) {
                key.to_string()
            } else {
                Quoted(key).to_string()
            };
            let at = join(path, &shown);
            if !known.contains(&key.as_ref()) {
                let hint = match did_you_mean(key, known) {
                    Some(near) => format!("did you mean \"{near}\"?"),
                    None => format!("the fields here are {}", known.join(", ")),
                };
                self.error(Kind::UnknownField, &at, "unknown field", &hint);
            } else if fields.iter().any(|(k, _)| k == key) {
                let hint = "remove one: JSON and YAML readers silently keep the last";
                self.error(Kind::DuplicateField, &at, "field given twice", hint);
            } else {
                fields.push((key, value));
            }
        }
        Some(Table { fields })
    }

    /// A string field; `None` (reported) when it has another type.
    fn string<'a>(&mut self, node: &'a Node, path: &str, hint: &str) -> Option<&'a str> {
        match &node.value {
            Value::Str(s) => Some(s),
            _ => {
                self.wrong_type(path, "a string", node, hint);
                None
            }
        }
    }

    fn document(&mut self, root: &Node) -> Option<Limits> {
        let doc = self.table(root, "", DOCUMENT_FIELDS)?;
        match doc.get("schema").map(|n| &n.value) {
            None => self.missing("schema", "add `schema = 1`"),
            Some(Value::Int(1)) => {}
            Some(Value::Int(n)) => {
                let what = format!("unsupported schema {n}");
                let hint = "this version of tollgate reads schema 1";
                self.error(Kind::UnsupportedSchema, "schema", what, hint);
            }
            Some(_) => {
                let other = doc.get("schema").unwrap_or(root);
                self.wrong_type("schema", "the integer 1", other, "write `schema = 1`");
            }
        }
        let revision = self.revision(doc.get("revision"));
        let categories = self.declared(doc.get("categories"), "categories");
        let tiers = self.declared(doc.get("tiers"), "tiers");
        let policies = match doc.get("policies") {
            None => {
                self.missing("policies", "add `policies`, a list of policies");
                None
            }
            Some(Node {
                value: Value::List(items),
                ..
            }) => Some(self.policies(items, &tiers, &categories)),
            Some(other) => {
                let hint = "write a list of tables (`[[policies]]` in TOML)";
                self.wrong_type("policies", "a list of policies", other, hint);
                None
            }
        };
        let names = policies.as_ref().map(|p: &Vec<Draft>| {
            NameIndex::new(p.iter().filter_map(|d| d.name.clone()).collect())
        });
        let acknowledgements = self.acknowledgements(doc.get("acknowledge"), names.as_ref());
        let policies = policies?
            .into_iter()
            .map(|d| {
                Some(Policy {
                    name: d.name?,
                    matcher: d.matcher?,
                    quota: d.quota?,
                    shadow: d.shadow,
                    classes: d.classes,
                    retry_budget: d.retry_budget,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Limits::new(
            revision?,
            categories?.into_names(),
            tiers?.into_names(),
            policies,
            acknowledgements?,
        ))
    }

    fn revision(&mut self, node: Option<&Node>) -> Option<u64> {
        let hint =
            "a revision is an integer from 0 to 9223372036854775807 (the largest TOML holds)";
        match node {
            None => self.missing(
                "revision",
                "add `revision`, the document's version (an integer)",
            ),
            Some(Node {
                value: Value::Int(n),
                ..
            }) => match u64::try_from(*n) {
                Ok(n) if i64::try_from(n).is_ok() => return Some(n),
                Ok(_) => self.error(Kind::InvalidValue, "revision", "revision too large", hint),
                Err(_) => self.error(Kind::InvalidValue, "revision", "negative revision", hint),
            },
            Some(other) => self.wrong_type("revision", "an integer", other, hint),
        }
        None
    }

    fn declared(&mut self, node: Option<&Node>, field: &str) -> Declared {
        let items = match node {
            None => return Some(NameIndex::default()),
            Some(Node {
                value: Value::List(items),
                ..
            }) => items,
            Some(other) => {
                let hint = format!("write a list of names, such as `{field} = [\"a\", \"b\"]`");
                self.wrong_type(field, "a list of names", other, &hint);
                return None;
            }
        };
        let mut names: Vec<String> = Vec::with_capacity(items.len());
        let mut seen: HashSet<&str> = HashSet::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("{field}[{i}]");
            let Some(name) = self.string(item, &path, "write the name as a string") else {
                continue;
            };
            if let Err(e) = check_name(name, &path) {
                self.errors.push(e);
            } else if !seen.insert(name) {
                let what = format!("{} declared twice", Quoted(name));
                self.error(Kind::InvalidValue, &path, what, "remove the repeat");
            } else {
                names.push(name.to_owned());
            }
        }
        Some(NameIndex::new(names))
    }

    fn acknowledgements(
        &mut self,
        node: Option<&Node>,
        names: Option<&NameIndex>,
    ) -> Option<Vec<Acknowledgement>> {
        let items = match node {
            None => return Some(Vec::new()),
            Some(Node {
                value: Value::List(items),
                ..
            }) => items,
            Some(other) => {
                let hint = "write a list of tables (`[[acknowledge]]` in TOML)";
                self.wrong_type("acknowledge", "a list of acknowledgements", other, hint);
                return None;
            }
        };
        let mut acks = Some(Vec::with_capacity(items.len()));
        for (i, item) in items.iter().enumerate() {
            let ack = self.acknowledgement(item, &format!("acknowledge[{i}]"), names);
            match (&mut acks, ack) {
                (Some(acks), Some(ack)) => acks.push(ack),
                _ => acks = None,
            }
        }
        acks
    }

    fn acknowledgement(
        &mut self,
        node: &Node,
        path: &str,
        names: Option<&NameIndex>,
    ) -> Option<Acknowledgement> {
        let table = self.table(node, path, ACK_FIELDS)?;
        let policy_path = join(path, "policy");
        let policy = match table.get("policy") {
            None => {
                self.missing(
                    &policy_path,
                    "add `policy`, the name of the policy that changes",
                );
                None
            }
            Some(node) => self.string(node, &policy_path, "write the policy's name as a string"),
        };
        if let (Some(policy), Some(names)) = (policy, names) {
            if !names.contains(policy) {
                let hint = match names.suggest(policy) {
                    Some(near) => format!("did you mean \"{near}\"?"),
                    None => "name a policy of this document".to_owned(),
                };
                let what = format!("unknown policy {}", Quoted(policy));
                self.error(Kind::UnknownPolicy, &policy_path, what, &hint);
            }
        }
        let quota = |walk: &mut Walk, key: &str| {
            let at = join(path, key);
            match table.get(key) {
                None => {
                    walk.missing(&at, r#"add the quota with its unit, such as "100/s""#);
                    None
                }
                Some(node) => parse_quota(node, &at).map_err(|e| walk.errors.push(e)).ok(),
            }
        };
        let from = quota(self, "from");
        let to = quota(self, "to");
        Some(Acknowledgement {
            policy: policy?.to_owned(),
            from: from?,
            to: to?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("p", "a"), "p.a");
    }
}
