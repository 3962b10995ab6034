//! Phase two: the validator walks the tree of any format and collects every error, each with
//! its path by policy name, its line and column, and one fix hint; a [`Limits`] comes out only
//! when there is none.

use core::fmt;
use std::collections::HashSet;

use super::errors::ErrorList;
use super::fields::{check_name, parse_quota, ACK_FIELDS, DOCUMENT_FIELDS};
use super::model::{Acknowledgement, Matcher, Policy};
use super::names::{did_you_mean, NameIndex};
use super::parse::{located, too_many_policies, Node, Pos, Value, MAX_POLICIES};
use super::path::Path;
use super::{ConfigErrors, Limits};

mod policy;
mod traffic;
use crate::engine::error::{ConfigError, ConfigErrorKind as Kind, Quoted};
use crate::engine::quota::Quota;
use crate::shaping::priority::Priorities;
use crate::shaping::retry::RetryBudget;
pub(crate) use policy::MAX_ALSO_POLICIES;

/// Validates a whole document.
pub(super) fn validate(root: &Node<'_>) -> Result<Limits, ConfigErrors> {
    let mut walk = Walk::default();
    let limits = walk.document(root);
    match (ConfigErrors::from_list(walk.errors), limits) {
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

/// A table's entries by name, after unknown, repeated and non-string keys were reported.
struct Table<'a> {
    /// Where the table starts: a missing field is reported there.
    at: Pos,
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
    /// Where the name and the matcher are, for the errors that compare policies.
    name_at: Pos,
    match_at: Pos,
    matcher: Option<Matcher>,
    quota: Option<Quota>,
    shadow: bool,
    also: bool,
    /// Where `also` is, for the error of too many.
    also_at: Pos,
    classes: Option<Priorities>,
    retry_budget: Option<RetryBudget>,
}

/// The names a document declares; `None` when the list itself was unusable, so that the
/// matchers are not blamed for it.
type Declared = Option<NameIndex<String>>;

#[derive(Default)]
struct Walk {
    errors: ErrorList,
}

impl Walk {
    /// An error at `path`, located at `at` in the text.
    fn error(&mut self, kind: Kind, path: &Path<'_>, at: Pos, what: impl fmt::Display, hint: &str) {
        if self.errors.is_full() {
            // Counted only: not worth writing out.
            self.errors.count();
            return;
        }
        let hint = (!hint.is_empty()).then(|| hint.to_owned());
        self.push(ConfigError::new(kind, path.to_string(), what, hint), at);
    }

    /// An error made by a check of a single value, located at `at` in the text.
    fn push(&mut self, error: ConfigError, at: Pos) {
        self.errors.push(located(error, at));
    }

    /// A field missing from the table at `at`.
    fn missing(&mut self, path: &Path<'_>, at: Pos, hint: &str) {
        self.error(Kind::MissingField, path, at, "missing field", hint);
    }

    fn wrong_type(&mut self, path: &Path<'_>, expected: &str, found: &Node<'_>, hint: &str) {
        let what = format!("expected {expected}, found {}", found.describe());
        self.error(Kind::WrongType, path, found.at, what, hint);
    }

    /// Opens a table, reporting keys that are unknown, repeated or not strings.
    fn table<'a>(
        &mut self,
        node: &'a Node<'a>,
        path: &Path<'_>,
        known: &[&str],
    ) -> Option<Table<'a>> {
        let Value::Map(entries) = &node.value else {
            let hint = format!("a table with the fields {}", known.join(", "));
            self.wrong_type(path, "a table", node, &hint);
            return None;
        };
        let mut fields: Vec<(&str, &Node<'_>)> = Vec::with_capacity(entries.len());
        for (key, value) in entries {
            let Value::Str(name) = &key.value else {
                let what = format!("a field name is {}, not a string", key.describe());
                self.error(Kind::WrongType, path, key.at, what, "quote the field name");
                continue;
            };
            if known.contains(&name.as_ref()) && !fields.iter().any(|(k, _)| k == name) {
                fields.push((name, value));
                continue;
            }
            let shown = if name.len() <= 64 && name.bytes().all(|b| b.is_ascii_graphic()) {
                name.to_string()
            } else {
                Quoted(name).to_string()
            };
            let field = path.field(&shown);
            if known.contains(&name.as_ref()) {
                let hint = "remove one: JSON and YAML readers silently keep the last";
                self.error(
                    Kind::DuplicateField,
                    &field,
                    key.at,
                    "field given twice",
                    hint,
                );
            } else {
                let hint = match did_you_mean(name, known) {
                    Some(near) => format!("did you mean \"{near}\"?"),
                    None => format!("the fields here are {}", known.join(", ")),
                };
                self.error(Kind::UnknownField, &field, key.at, "unknown field", &hint);
            }
        }
        Some(Table {
            at: node.at,
            fields,
        })
    }

    /// A string field; `None` (reported) when it has another type.
    fn string<'a>(&mut self, node: &'a Node<'_>, path: &Path<'_>, hint: &str) -> Option<&'a str> {
        match &node.value {
            Value::Str(s) => Some(s),
            _ => {
                self.wrong_type(path, "a string", node, hint);
                None
            }
        }
    }

    fn document(&mut self, root: &Node<'_>) -> Option<Limits> {
        let top = Path::Root;
        let doc = self.table(root, &top, DOCUMENT_FIELDS)?;
        let schema = top.field("schema");
        match doc.get("schema") {
            None => self.missing(&schema, doc.at, "add `schema = 1`"),
            Some(node) => match node.value {
                Value::Int(1) => {}
                Value::Int(n) => {
                    let what = format!("unsupported schema {n}");
                    let hint = "this version of tollgate reads schema 1";
                    self.error(Kind::UnsupportedSchema, &schema, node.at, what, hint);
                }
                _ => self.wrong_type(&schema, "the integer 1", node, "write `schema = 1`"),
            },
        }
        let revision = self.revision(doc.get("revision"), &top, doc.at);
        let categories = self.declared(doc.get("categories"), &top, "categories");
        let tiers = self.declared(doc.get("tiers"), &top, "tiers");
        let list = top.field("policies");
        let policies = match doc.get("policies") {
            None => {
                self.missing(&list, doc.at, "add `policies`, a list of policies");
                None
            }
            // Counted by the parsers already; again here, for a YAML alias of a long list.
            Some(Node {
                value: Value::List(items),
                ..
            }) if items.len() > MAX_POLICIES => {
                self.push(too_many_policies(items[MAX_POLICIES].at), Pos::default());
                None
            }
            Some(Node {
                value: Value::List(items),
                ..
            }) => Some(self.policies(items, &list, &tiers, &categories)),
            Some(other) => {
                let hint = "write a list of tables (`[[policies]]` in TOML)";
                self.wrong_type(&list, "a list of policies", other, hint);
                None
            }
        };
        let names = policies.as_ref().map(|p: &Vec<Draft>| {
            NameIndex::new(p.iter().filter_map(|d| d.name.as_deref()).collect())
        });
        let acknowledgements = self.acknowledgements(doc.get("acknowledge"), &top, names.as_ref());
        let policies = policies?
            .into_iter()
            .map(|d| {
                Some(Policy {
                    name: d.name?,
                    matcher: d.matcher?,
                    quota: d.quota?,
                    shadow: d.shadow,
                    also: d.also,
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

    fn revision(&mut self, node: Option<&Node<'_>>, top: &Path<'_>, doc_at: Pos) -> Option<u64> {
        let path = top.field("revision");
        let hint =
            "a revision is an integer from 0 to 9223372036854775807 (the largest TOML holds)";
        let Some(node) = node else {
            let hint = "add `revision`, the document's version (an integer)";
            self.missing(&path, doc_at, hint);
            return None;
        };
        match node.value {
            Value::Int(n) => match u64::try_from(n) {
                Ok(n) if i64::try_from(n).is_ok() => return Some(n),
                Ok(_) => self.error(
                    Kind::InvalidValue,
                    &path,
                    node.at,
                    "revision too large",
                    hint,
                ),
                Err(_) => self.error(
                    Kind::InvalidValue,
                    &path,
                    node.at,
                    "negative revision",
                    hint,
                ),
            },
            _ => self.wrong_type(&path, "an integer", node, hint),
        }
        None
    }

    fn declared(&mut self, node: Option<&Node<'_>>, top: &Path<'_>, field: &str) -> Declared {
        let list = top.field(field);
        let items = match node {
            None => return Some(NameIndex::default()),
            Some(Node {
                value: Value::List(items),
                ..
            }) => items,
            Some(other) => {
                let hint = format!("write a list of names, such as `{field} = [\"a\", \"b\"]`");
                self.wrong_type(&list, "a list of names", other, &hint);
                return None;
            }
        };
        let mut names: Vec<String> = Vec::with_capacity(items.len());
        let mut seen: HashSet<&str> = HashSet::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = list.item(i);
            let Some(name) = self.string(item, &path, "write the name as a string") else {
                continue;
            };
            if let Err(e) = check_name(name, &path) {
                self.push(e, item.at);
            } else if !seen.insert(name) {
                let what = format!("{} declared twice", Quoted(name));
                self.error(
                    Kind::InvalidValue,
                    &path,
                    item.at,
                    what,
                    "remove the repeat",
                );
            } else {
                names.push(name.to_owned());
            }
        }
        Some(NameIndex::new(names))
    }

    fn acknowledgements(
        &mut self,
        node: Option<&Node<'_>>,
        top: &Path<'_>,
        names: Option<&NameIndex<&str>>,
    ) -> Option<Vec<Acknowledgement>> {
        let list = top.field("acknowledge");
        let items = match node {
            None => return Some(Vec::new()),
            Some(Node {
                value: Value::List(items),
                ..
            }) => items,
            Some(other) => {
                let hint = "write a list of tables (`[[acknowledge]]` in TOML)";
                self.wrong_type(&list, "a list of acknowledgements", other, hint);
                return None;
            }
        };
        let mut acks = Some(Vec::with_capacity(items.len()));
        for (i, item) in items.iter().enumerate() {
            let ack = self.acknowledgement(item, &list.item(i), names);
            match (&mut acks, ack) {
                (Some(acks), Some(ack)) => acks.push(ack),
                _ => acks = None,
            }
        }
        acks
    }

    fn acknowledgement(
        &mut self,
        node: &Node<'_>,
        path: &Path<'_>,
        names: Option<&NameIndex<&str>>,
    ) -> Option<Acknowledgement> {
        let table = self.table(node, path, ACK_FIELDS)?;
        let policy_path = path.field("policy");
        let policy = match table.get("policy") {
            None => {
                let hint = "add `policy`, the name of the policy that changes";
                self.missing(&policy_path, table.at, hint);
                None
            }
            Some(node) => {
                let hint = "write the policy's name as a string";
                self.string(node, &policy_path, hint).map(|p| (p, node.at))
            }
        };
        if let (Some((policy, at)), Some(names)) = (policy, names) {
            if !names.contains(policy) {
                let hint = match names.suggest(policy) {
                    Some(near) => format!("did you mean \"{near}\"?"),
                    None => "name a policy of this document".to_owned(),
                };
                let what = format!("unknown policy {}", Quoted(policy));
                self.error(Kind::UnknownPolicy, &policy_path, at, what, &hint);
            }
        }
        let quota = |walk: &mut Walk, key: &str| {
            let path = path.field(key);
            match table.get(key) {
                None => {
                    let hint = r#"add the quota with its unit, such as "100/s""#;
                    walk.missing(&path, table.at, hint);
                    None
                }
                Some(node) => parse_quota(node, &path)
                    .map_err(|e| walk.push(e, node.at))
                    .ok(),
            }
        };
        let from = quota(self, "from");
        let to = quota(self, "to");
        Some(Acknowledgement {
            policy: policy?.0.to_owned(),
            from: from?,
            to: to?,
        })
    }
}
