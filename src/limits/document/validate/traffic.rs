//! The validator's walk over a policy's priority `classes` and `retry_budget`.

use super::Walk;
use crate::engine::error::{ConfigErrorKind as Kind, Quoted};
use crate::engine::quota::Quota;
use crate::limits::document::duration::parse_duration;
use crate::limits::document::fields::{parse_quota, CLASS_FIELDS, RETRY_BUDGET_FIELDS};
use crate::limits::document::parse::{Node, Pos, Value};
use crate::limits::document::path::Path;
use crate::shaping::priority::{Priorities, PriorityError};
use crate::shaping::retry::RetryBudget;

/// The shortest retry-budget period: the budget keeps tenths of it, of at least 100 ms.
const MIN_PERIOD_SECS: u64 = 1;
/// The longest retry-budget period.
const MAX_PERIOD_SECS: u64 = 86_400;
/// The largest retry ratio ([`RetryBudget::with_ratio`] clamps there).
const MAX_RATIO: f64 = 1_000.0;
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// One entry of `classes`, with where its fields are.
struct Entry {
    class: u8,
    reserve: f64,
    class_at: Pos,
    reserve_at: Pos,
}

impl Walk {
    /// `classes = [{ class = 0, reserve = 0.0 }, { class = 2, reserve = 0.5 }]`; an empty
    /// list is no classes.
    pub(super) fn classes(&mut self, node: &Node<'_>, path: &Path<'_>) -> Option<Priorities> {
        const HINT: &str =
            "write a list such as [{ class = 0, reserve = 0.0 }, { class = 2, reserve = 0.5 }]";
        let Value::List(items) = &node.value else {
            self.wrong_type(path, "a list of classes", node, HINT);
            return None;
        };
        let mut entries: Vec<Entry> = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.class(item, &path.item(i)) {
                Some(entry) => entries.push(entry),
                None => ok = false,
            }
        }
        if !ok || entries.is_empty() {
            return None;
        }
        // the `nth` entry of `class`, for an error about it
        let entry = |class: u8, nth: usize| {
            let mut of_class = entries.iter().enumerate().filter(|(_, e)| e.class == class);
            of_class.nth(nth).unwrap_or((0, &entries[0]))
        };
        let error = match Priorities::new(entries.iter().map(|e| (e.class, e.reserve))) {
            Ok(p) => return Some(p),
            Err(PriorityError::Share { class, .. }) => {
                // Checked per entry above; kept for a future rule of `Priorities::new`.
                let hint = "a reserve is a share of the burst in [0, 1), such as 0.5";
                let what = format!("invalid reserve of class {class}");
                let (i, e) = entry(class, 0);
                (i, "reserve", e.reserve_at, what, hint.to_owned())
            }
            Err(e @ PriorityError::Duplicate { class }) => {
                let (i, repeat) = entry(class, 1);
                let hint = "list each class once".to_owned();
                (i, "class", repeat.class_at, e.to_string(), hint)
            }
            Err(e @ PriorityError::Inverted { class, above }) => {
                let hint = format!(
                    "a less critical class (a higher number) must reserve at least as much: \
                     raise class {class}'s reserve or lower class {above}'s"
                );
                let (i, entry) = entry(class, 0);
                (i, "reserve", entry.reserve_at, e.to_string(), hint)
            }
            Err(e @ PriorityError::Starved { class, .. }) => {
                // Not a rule of `Priorities::new`, which knows no quota: `class_capacity`
                // applies it once the policy's quota is known. Kept for completeness.
                let hint = "lower the reserve, or raise the burst".to_owned();
                let (i, entry) = entry(class, 0);
                (i, "reserve", entry.reserve_at, e.to_string(), hint)
            }
        };
        let (i, field, at, what, hint) = error;
        let item = path.item(i);
        self.error(Kind::InvalidValue, &item.field(field), at, what, &hint);
        None
    }

    /// One `{ class = 2, reserve = 0.5 }`.
    fn class(&mut self, node: &Node<'_>, path: &Path<'_>) -> Option<Entry> {
        let table = self.table(node, path, CLASS_FIELDS)?;
        let class_path = path.field("class");
        const CLASS: &str = "a class is an integer from 0 (most critical) to 255";
        let class = match table.get("class") {
            None => {
                self.missing(
                    &class_path,
                    table.at,
                    "add `class`, from 0 (most critical) to 255",
                );
                None
            }
            Some(node) => match node.value {
                Value::Int(n) => match u8::try_from(n) {
                    Ok(c) => Some((c, node.at)),
                    Err(_) => {
                        let what = format!("class {n} is not in 0..=255");
                        self.error(Kind::InvalidValue, &class_path, node.at, what, CLASS);
                        None
                    }
                },
                _ => {
                    self.wrong_type(&class_path, "an integer", node, CLASS);
                    None
                }
            },
        };
        let reserve_path = path.field("reserve");
        const RESERVE: &str =
            "a reserve is the share of the burst left to more critical classes, in [0, 1), such as 0.5";
        let reserve = match table.get("reserve") {
            None => {
                self.missing(&reserve_path, table.at, RESERVE);
                None
            }
            Some(node) => match number(node) {
                Some(r) if (0.0..1.0).contains(&r) => Some((r, node.at)),
                Some(r) => {
                    let what = format!("reserve {r} is not in [0, 1)");
                    self.error(Kind::InvalidValue, &reserve_path, node.at, what, RESERVE);
                    None
                }
                None => {
                    self.wrong_type(&reserve_path, "a number", node, RESERVE);
                    None
                }
            },
        };
        let ((class, class_at), (reserve, reserve_at)) = (class?, reserve?);
        Some(Entry {
            class,
            reserve,
            class_at,
            reserve_at,
        })
    }

    /// Each listed class must be able to send at least one unit: a reserve that leaves a
    /// class less than one request (or byte) of the burst would make its every check an
    /// `InsufficientCapacity` ([`Priorities::for_quota`] applies the same rule). `path` and
    /// `at` are the `classes` list's.
    pub(super) fn class_capacity(
        &mut self,
        quota: Quota,
        classes: &Priorities,
        path: &Path<'_>,
        at: Pos,
    ) {
        for starved in classes.starved(&quota) {
            let hint = "lower the reserve, or raise the burst";
            self.error(Kind::InvalidValue, path, at, starved.to_string(), hint);
        }
    }

    /// `retry_budget = { ratio = 0.1, period = "10s", floor = "10/s" }`; each field optional
    /// (defaults: 0.1, `"10s"`, `"10/s"`).
    pub(super) fn retry_budget(&mut self, node: &Node<'_>, path: &Path<'_>) -> Option<RetryBudget> {
        let table = self.table(node, path, RETRY_BUDGET_FIELDS)?;
        let mut budget = RetryBudget::new();
        let mut ok = true;
        if let Some(node) = table.get("ratio") {
            let at = path.field("ratio");
            const RATIO: &str =
                "the ratio is the retries allowed per original, from 0 to 1000, such as 0.1 for 10 %";
            match number(node) {
                Some(r) if (0.0..=MAX_RATIO).contains(&r) => budget = budget.with_ratio(r),
                Some(r) => {
                    let what = format!("ratio {r} is out of range");
                    self.error(Kind::InvalidValue, &at, node.at, what, RATIO);
                    ok = false;
                }
                None => {
                    self.wrong_type(&at, "a number", node, RATIO);
                    ok = false;
                }
            }
        }
        if let Some(node) = table.get("period") {
            let at = path.field("period");
            match parse_duration(node, &at) {
                Ok(d) if d.as_secs() < MIN_PERIOD_SECS => {
                    let what = format!("period {d:?} is below 1s");
                    let hint = r#"a retry budget's period is at least "1s""#;
                    self.error(Kind::InvalidValue, &at, node.at, what, hint);
                    ok = false;
                }
                Ok(d) if d.as_nanos() > u128::from(MAX_PERIOD_SECS) * NANOS_PER_SEC => {
                    let what = format!("period {d:?} is above 1d");
                    let hint = r#"a retry budget's period is at most "1d""#;
                    self.error(Kind::InvalidValue, &at, node.at, what, hint);
                    ok = false;
                }
                Ok(d) => budget = budget.with_period(d),
                Err(e) => {
                    self.push(e, node.at);
                    ok = false;
                }
            }
        }
        if let Some(node) = table.get("floor") {
            match self.floor(node, &path.field("floor")) {
                Some(per_sec) => budget = budget.with_floor(per_sec),
                None => ok = false,
            }
        }
        ok.then_some(budget)
    }

    /// A floor: a request rate that is a whole number of retries per second (`"10/s"`,
    /// `"600/min"`), or `"0/s"` for none.
    fn floor(&mut self, node: &Node<'_>, path: &Path<'_>) -> Option<u32> {
        const FLOOR: &str =
            r#"a floor is the retries always allowed, such as "10/s" ("0/s" for none)"#;
        if let Value::Str(s) = &node.value {
            if let Some(rest) = s.strip_prefix("0/") {
                return match format!("1/{rest}").parse::<Quota>() {
                    Ok(q) if !q.is_bytes() && !rest.contains(';') => Some(0),
                    _ => {
                        let what = format!("invalid floor {}", Quoted(s));
                        self.error(Kind::InvalidValue, path, node.at, what, FLOOR);
                        None
                    }
                };
            }
        }
        let quota = match parse_quota(node, path) {
            Ok(q) => q,
            Err(e) => {
                self.push(e, node.at);
                return None;
            }
        };
        let written = node.as_str().unwrap_or("");
        if quota.is_bytes() || written.contains(';') {
            let what = format!("floor {} is not a plain request rate", Quoted(written));
            let hint =
                r#"a floor counts retries, not bytes, and has no burst: write such as "10/s""#;
            self.error(Kind::InvalidValue, path, node.at, what, hint);
            return None;
        }
        let per_sec = u128::from(quota.count()) * NANOS_PER_SEC;
        let period = quota.period().as_nanos();
        match u32::try_from(per_sec / period) {
            Ok(n) if per_sec % period == 0 => Some(n),
            Ok(_) => {
                let what = format!(
                    "floor {} is not a whole number of retries per second",
                    Quoted(written)
                );
                let hint = r#"write it per second, such as "1/s""#;
                self.error(Kind::InvalidValue, path, node.at, what, hint);
                None
            }
            Err(_) => {
                let what = format!("floor {} is too large", Quoted(written));
                let hint = "a floor is at most 4294967295 retries per second";
                self.error(Kind::InvalidValue, path, node.at, what, hint);
                None
            }
        }
    }
}

/// An integer or a float, as a float (NaN is not a number here).
fn number(node: &Node<'_>) -> Option<f64> {
    match node.value {
        Value::Int(n) => Some(n as f64),
        Value::Float(x) if !x.is_nan() => Some(x),
        _ => None,
    }
}
