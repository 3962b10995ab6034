//! The validator's walk over `policies`: names, matchers, quotas and bursts, then the checks
//! across policies (duplicate names, overlapping matchers).

use std::collections::HashMap;

use super::{Declared, Draft, Walk};
use crate::engine::error::QuotaErrorKind;
use crate::engine::error::{ConfigError, ConfigErrorKind as Kind, Quoted};
use crate::engine::quota::Quota;
use crate::limits::document::fields::{
    check_name, check_route, is_name, parse_quota, quota_error, MATCH_FIELDS, POLICY_FIELDS,
};
use crate::limits::document::model::Matcher;
use crate::limits::document::parse::{Node, Value};
use crate::limits::document::path::Path;

pub(crate) const MAX_ALSO_POLICIES: usize = 64;

impl Walk {
    pub(super) fn policies(
        &mut self,
        items: &[Node<'_>],
        list: &Path<'_>,
        tiers: &Declared,
        categories: &Declared,
    ) -> Vec<Draft> {
        let raw: Vec<Option<&str>> = items.iter().map(raw_name).collect();
        let mut count: HashMap<&str, usize> = HashMap::new();
        for name in raw.iter().flatten() {
            *count.entry(name).or_default() += 1;
        }
        // a policy is named in paths when its name identifies it, else by 0-based index
        let labels: Vec<Path<'_>> = raw
            .iter()
            .enumerate()
            .map(|(i, name)| match name {
                Some(name) if count[name] == 1 => list.named(name),
                _ => list.item(i),
            })
            .collect();
        let drafts: Vec<Draft> = items
            .iter()
            .zip(&labels)
            .map(|(item, label)| self.policy(item, label, tiers, categories))
            .collect();
        let mut first_name: HashMap<&str, &Path<'_>> = HashMap::new();
        let mut first_match: HashMap<&Matcher, &Path<'_>> = HashMap::new();
        for (draft, label) in drafts.iter().zip(&labels) {
            if let Some(name) = draft.name.as_deref() {
                if let Some(first) = first_name.insert(name, label) {
                    first_name.insert(name, first);
                    let what = format!("duplicate name {}: {first} has it too", Quoted(name));
                    let hint = "give each policy a unique name";
                    let path = label.field("name");
                    self.error(Kind::DuplicateName, &path, draft.name_at, what, hint);
                }
            }
            // Policies that apply in addition may share a matcher with any other (a per-second
            // and a per-day limit on the same requests); the most specific one must be unique.
            if let Some(matcher) = draft.matcher.as_ref().filter(|_| !draft.also) {
                if let Some(first) = first_match.insert(matcher, label) {
                    first_match.insert(matcher, first);
                    let what = format!("matches exactly the same requests as {first}");
                    let hint = "merge the two policies, or make one match more specific";
                    let (path, at) = (label.field("match"), draft.match_at);
                    self.error(Kind::OverlappingMatchers, &path, at, what, hint);
                }
            }
        }
        let mut also = drafts.iter().zip(&labels).filter(|(d, _)| d.also);
        if let Some((first_past, label)) = also.nth(MAX_ALSO_POLICIES) {
            let n = MAX_ALSO_POLICIES + 1 + also.count();
            let what = format!("{n} policies marked `also`, more than {MAX_ALSO_POLICIES}");
            let hint = format!(
                "every request is checked against each one that matches: keep at most \
                 {MAX_ALSO_POLICIES} (tollgate::limits::Limits::MAX_ALSO_POLICIES), or give their limits to \
                 fewer policies"
            );
            let (path, at) = (label.field("also"), first_past.also_at);
            self.error(Kind::TooManyAlsoPolicies, &path, at, what, &hint);
        }
        drafts
    }

    fn policy(
        &mut self,
        node: &Node<'_>,
        path: &Path<'_>,
        tiers: &Declared,
        cats: &Declared,
    ) -> Draft {
        let mut draft = Draft {
            name: None,
            name_at: node.at,
            match_at: node.at,
            matcher: None,
            quota: None,
            shadow: false,
            also: false,
            also_at: node.at,
            classes: None,
            retry_budget: None,
        };
        let Some(table) = self.table(node, path, POLICY_FIELDS) else {
            return draft;
        };
        let name_path = path.field("name");
        match table.get("name") {
            None => self.missing(&name_path, table.at, "add `name`, unique in the document"),
            Some(node) => {
                draft.name_at = node.at;
                if let Some(name) = self.string(node, &name_path, "write the name as a string") {
                    match check_name(name, &name_path) {
                        Ok(()) => draft.name = Some(name.to_owned()),
                        Err(e) => self.push(e, node.at),
                    }
                }
            }
        }
        let match_path = path.field("match");
        match table.get("match") {
            None => {
                let hint = "add `match` with a tier, a category or a route";
                self.missing(&match_path, table.at, hint);
            }
            Some(node) => {
                draft.match_at = node.at;
                draft.matcher = self.matcher(node, &match_path, tiers, cats);
            }
        }
        let quota_path = path.field("quota");
        match table.get("quota") {
            None => {
                let hint = r#"add a quota with its unit, such as "100/s""#;
                self.missing(&quota_path, table.at, hint);
            }
            Some(node) => match parse_quota(node, &quota_path) {
                Ok(quota) => draft.quota = Some(quota),
                Err(e) => self.push(e, node.at),
            },
        }
        if let Some(burst) = table.get("burst") {
            let written = table.get("quota").and_then(Node::as_str);
            let quota = draft.quota.zip(written);
            draft.quota = self.burst(burst, quota, &path.field("burst"));
        }
        match table.get("shadow") {
            None => {}
            Some(Node {
                value: Value::Bool(b),
                ..
            }) => draft.shadow = *b,
            Some(other) => {
                let hint = "write `shadow = true` or `shadow = false`";
                self.wrong_type(&path.field("shadow"), "a boolean", other, hint);
            }
        }
        match table.get("also") {
            None => {}
            Some(Node {
                value: Value::Bool(b),
                at,
            }) => (draft.also, draft.also_at) = (*b, *at),
            Some(other) => {
                let hint = "write `also = true` for a policy that applies in addition to the \
                            most specific one, or leave it out";
                self.wrong_type(&path.field("also"), "a boolean", other, hint);
            }
        }
        if let Some(node) = table.get("classes") {
            let classes_path = path.field("classes");
            draft.classes = self.classes(node, &classes_path);
            if let (Some(quota), Some(classes)) = (draft.quota, &draft.classes) {
                self.class_capacity(quota, classes, &classes_path, node.at);
            }
        }
        if let Some(node) = table.get("retry_budget") {
            draft.retry_budget = self.retry_budget(node, &path.field("retry_budget"));
        }
        draft
    }

    /// Applies `burst` to `quota`, written as `written` (`None` when the quota had an error).
    /// The burst is read on its own, so that an error quotes what the document says.
    fn burst(
        &mut self,
        node: &Node<'_>,
        quota: Option<(Quota, &str)>,
        path: &Path<'_>,
    ) -> Option<Quota> {
        let text = match &node.value {
            Value::Int(n) => n.to_string(),
            Value::Str(s) => s.to_string(),
            _ => {
                let hint = r#"write an integer, or a size such as "64MiB" for a byte budget"#;
                self.wrong_type(path, "an integer or a size", node, hint);
                return None;
            }
        };
        let (quota, written) = quota?;
        if written.contains(';') {
            let what = format!(
                "burst given twice: in the quota {} and in `burst`",
                Quoted(written)
            );
            let kind = Kind::Quota(QuotaErrorKind::DuplicateBurst);
            self.error(kind, path, node.at, what, "remove one of them");
            return None;
        }
        match quota.with_burst_text(&text) {
            Ok(quota) => Some(quota),
            Err(e) => {
                self.push(quota_error(path, &text, &e), node.at);
                None
            }
        }
    }

    fn matcher(
        &mut self,
        node: &Node<'_>,
        path: &Path<'_>,
        tiers: &Declared,
        cats: &Declared,
    ) -> Option<Matcher> {
        let table = self.table(node, path, MATCH_FIELDS)?;
        let mut ok = true;
        let mut field = |walk: &mut Walk, key: &str, declared: Option<(&Declared, &str)>| {
            let node = table.get(key)?;
            let at = path.field(key);
            let hint = "write it as a string; leave the field out to match any";
            let Some(value) = walk.string(node, &at, hint) else {
                ok = false;
                return None;
            };
            let checked = match declared {
                Some((declared, list)) => {
                    check_name(value, &at).and_then(|()| check_declared(value, declared, list, &at))
                }
                None => check_route(value, &at),
            };
            match checked {
                Ok(()) => Some(value.to_owned()),
                Err(e) => {
                    walk.push(e, node.at);
                    ok = false;
                    None
                }
            }
        };
        let matcher = Matcher {
            tier: field(self, "tier", Some((tiers, "tiers"))),
            category: field(self, "category", Some((cats, "categories"))),
            route: field(self, "route", None),
        };
        if !ok {
            return None;
        }
        if matcher.is_empty() {
            let hint = r#"match at least one of tier, category and route (route "/*" matches every route)"#;
            self.error(Kind::EmptyMatcher, path, node.at, "empty matcher", hint);
            return None;
        }
        Some(matcher)
    }
}

/// The name a policy would be labelled by: its `name`, if it is a valid name.
fn raw_name<'a>(node: &'a Node<'_>) -> Option<&'a str> {
    let Value::Map(entries) = &node.value else {
        return None;
    };
    entries
        .iter()
        .find_map(|(k, v)| match (&k.value, &v.value) {
            (Value::Str(k), Value::Str(v)) if k == "name" && is_name(v) => Some(v.as_ref()),
            _ => None,
        })
}

fn check_declared(
    value: &str,
    declared: &Declared,
    list: &str,
    path: &Path<'_>,
) -> Result<(), ConfigError> {
    let Some(declared) = declared else {
        return Ok(());
    };
    if declared.contains(value) {
        return Ok(());
    }
    let hint = match declared.suggest(value) {
        Some(near) => format!("did you mean \"{near}\"?"),
        None => format!("declare it in `{list}`"),
    };
    let singular = if list == "tiers" { "tier" } else { "category" };
    let what = format!("undeclared {singular} {}", Quoted(value));
    Err(ConfigError::new(
        Kind::Undeclared,
        path.to_string(),
        what,
        Some(hint),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::document::parse::Pos;

    fn node(value: Value<'_>) -> Node<'_> {
        Node::new(value, Pos::default())
    }

    fn named(name: &str) -> Node<'_> {
        node(Value::Map(vec![(
            node(Value::Str("name".into())),
            node(Value::Str(name.into())),
        )]))
    }

    #[test]
    fn labels_come_from_valid_names_only() {
        assert_eq!(raw_name(&named("a")), Some("a"));
        assert_eq!(raw_name(&named("a]")), None);
        assert_eq!(raw_name(&node(Value::List(vec![]))), None);
    }
}
