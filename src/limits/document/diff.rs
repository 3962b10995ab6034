//! [`Diff`]: what changes between two documents, and which tightenings need an
//! acknowledgement ([`check_transition`]).

use core::fmt;
use std::collections::HashSet;

use serde::Serialize;

use super::change::{Factor, QuotaChange};
use super::model::{describe_classes, describe_retry_budget, Matcher, Policy};
use super::moves::{self, TrafficMove};
use super::Limits;
use crate::engine::error::{ConfigError, ConfigErrorKind};
use crate::engine::quota::Quota;

use super::ConfigErrors;

/// A value before and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Change<T> {
    /// Before.
    pub from: T,
    /// After.
    pub to: T,
}

/// What changed in one policy that both documents have (by name).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PolicyChange {
    /// The policy's name.
    pub policy: String,
    /// The quota change, if the quota changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaChange>,
    /// The matcher change, if the matcher changed.
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pub matcher: Option<Change<Matcher>>,
    /// The shadow flag change, if it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Change<bool>>,
    /// The `also` flag change (a policy that starts or stops applying in addition to the
    /// most specific one), if it changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub also: Option<Change<bool>>,
    /// The priority classes, described (`0 (reserve 0), 2 (reserve 0.5)`, or `none`), if
    /// they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<Change<String>>,
    /// The retry budget, described (`ratio 0.1 over 10s, floor 10/s`, or `none`), if it
    /// changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<Change<String>>,
}

/// A change that makes some requests' quota tighter: a policy's own quota change, or traffic
/// moving to a tighter policy. An acknowledgement names it by `policy`, `from` and `to`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Tightening {
    /// The policy whose quota the requests get after the change.
    pub policy: String,
    /// The quota before (of the policy the requests came from, for a move).
    pub from: Quota,
    /// The quota after.
    pub to: Quota,
    /// [`QuotaChange::tightening`]: how much tighter.
    pub factor: f64,
    /// For a move, the request classes that move (empty for a policy's own quota change).
    pub requests: Vec<String>,
    /// For a move, the policy the requests came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
}

impl fmt::Display for Tightening {
    /// `paid-checkout: 10/s → 10/min, 60× tighter`, and for a move the requests and the
    /// policy they come from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let change = QuotaChange::new(self.from, self.to);
        match &self.moved_from {
            None => write!(f, "{}: {change}", self.policy),
            Some(old) => write!(
                f,
                "requests of {} move from {old} to {}: {change}",
                self.requests.join(", "),
                self.policy
            ),
        }
    }
}

/// What changes from one document to the next: policies added, removed and changed (by name),
/// and the traffic that moves from one policy to another.
///
/// `Display` writes a table for people; `Serialize` the same for tools (`--format json`).
///
/// ```
/// use tollgate::limits::Limits;
///
/// let doc = |quota: &str, revision: u64| format!(
///     "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
/// );
/// let old = Limits::from_toml(&doc("10/s", 1))?;
/// let new = Limits::from_toml(&doc("10/min", 2))?;
/// let diff = Limits::diff(&old, &new);
/// assert_eq!(diff.changed()[0].quota.unwrap().to_string(), "10/s → 10/min: 60× tighter");
/// assert_eq!(diff.unacknowledged(&new, Limits::DEFAULT_GUARD).len(), 1);
/// assert!(diff.to_string().contains("api"));
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Diff {
    from_revision: u64,
    to_revision: u64,
    added: Vec<Policy>,
    removed: Vec<Policy>,
    changed: Vec<PolicyChange>,
    moves: Vec<TrafficMove>,
}

impl Diff {
    pub(super) fn new(old: &Limits, new: &Limits) -> Diff {
        // Each old policy is paired with the new one of its name: at the same place when the
        // order is kept (the usual case, read in order), else through the new index.
        let (mut removed, mut pairs) = (Vec::new(), Vec::new());
        let mut paired = vec![false; new.policies.len()];
        for (i, o) in old.policies.iter().enumerate() {
            let j = match new.policies.get(i) {
                Some(n) if n.name == o.name => Some(i),
                _ => new.index.position(&o.name),
            };
            match j {
                None => removed.push(o),
                Some(j) => {
                    paired[j] = true;
                    pairs.push((o, &new.policies[j]));
                }
            }
        }
        // names are unique, so a new policy is in the old document if and only if it paired
        let added: Vec<&Policy> = new
            .policies
            .iter()
            .zip(&paired)
            .filter_map(|(p, paired)| (!paired).then_some(p))
            .collect();
        // the matchers not in both documents under the same name: the traffic that can move
        let rematched = pairs
            .iter()
            // a flipped `also` flag moves the policy in or out of the most specific choice
            .filter(|(o, n)| o.matcher != n.matcher || o.also != n.also)
            .flat_map(|(o, n)| [&o.matcher, &n.matcher]);
        let changed_matchers: Vec<&Matcher> = removed
            .iter()
            .chain(&added)
            .map(|p| &p.matcher)
            .chain(rematched)
            .collect();
        let moves = moves::moves(old, new, &changed_matchers);
        // the pairs that differ first, so the changes (large) are written in one allocation
        let differ: Vec<(&Policy, &Policy)> = pairs.into_iter().filter(|(o, n)| o != n).collect();
        let changed = differ.into_iter().map(policy_change).collect();
        Diff {
            from_revision: old.revision,
            to_revision: new.revision,
            added: added.into_iter().cloned().collect(),
            removed: removed.into_iter().cloned().collect(),
            changed,
            moves,
        }
    }

    /// Whether nothing changed but (perhaps) the revision.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[]}"#)?;
    /// assert!(tollgate::limits::Limits::diff(&limits, &limits).is_empty());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.moves.is_empty()
    }

    /// The old and the new document's revisions.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":7,"policies":[]}"#)?;
    /// assert_eq!(tollgate::limits::Limits::diff(&limits, &limits).revisions(), (7, 7));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn revisions(&self) -> (u64, u64) {
        (self.from_revision, self.to_revision)
    }

    /// Policies only the new document has.
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[]}"#)?;
    /// # let new = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":2,"policies":[{"name":"a","match":{"route":"/"},"quota":"1/s"}]}"#)?;
    /// assert_eq!(tollgate::limits::Limits::diff(&old, &new).added()[0].name(), "a");
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn added(&self) -> &[Policy] {
        &self.added
    }

    /// Policies only the old document has.
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"1/s"}]}"#)?;
    /// # let new = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":2,"policies":[]}"#)?;
    /// assert_eq!(tollgate::limits::Limits::diff(&old, &new).removed()[0].name(), "a");
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn removed(&self) -> &[Policy] {
        &self.removed
    }

    /// Policies both documents have, with what changed in each.
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"1/s"}]}"#)?;
    /// # let new = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":2,"policies":[{"name":"a","match":{"route":"/"},"quota":"2/s"}]}"#)?;
    /// let diff = tollgate::limits::Limits::diff(&old, &new);
    /// assert_eq!(diff.changed()[0].quota.unwrap().factor(), 2.0);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn changed(&self) -> &[PolicyChange] {
        &self.changed
    }

    /// The traffic that another policy handles after the change.
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"1/s"}]}"#)?;
    /// # let new = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":2,"policies":[{"name":"b","match":{"route":"/"},"quota":"1/s"}]}"#)?;
    /// let diff = tollgate::limits::Limits::diff(&old, &new);
    /// assert_eq!(diff.moves()[0].requests, ["route=/"]);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn moves(&self) -> &[TrafficMove] {
        &self.moves
    }

    /// Every tightening by more than `guard` (a factor; below 1 or NaN counts as 1): quota
    /// changes of a policy, and traffic moving to a tighter policy. Traffic that had no
    /// policy (and so no limit) and gets one is listed in [`moves`](Diff::moves) but is not
    /// a tightening here, or every new policy would need an acknowledgement — the same holds
    /// for an added policy marked `also = true`, which adds a limit on top of the ones the
    /// requests had; the shadow flag is not taken into account.
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/s"}]}"#)?;
    /// # let new = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":2,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/min"}]}"#)?;
    /// let diff = tollgate::limits::Limits::diff(&old, &new);
    /// assert_eq!(diff.tightenings_beyond(10.0)[0].factor, 60.0);
    /// assert!(diff.tightenings_beyond(60.0).is_empty());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn tightenings_beyond(&self, guard: f64) -> Vec<Tightening> {
        self.beyond(guard).map(Candidate::tightening).collect()
    }

    /// The tightenings beyond `guard`, not yet written out.
    fn beyond(&self, guard: f64) -> impl Iterator<Item = Candidate<'_>> {
        let guard = if guard >= 1.0 { guard } else { 1.0 };
        let own = self.changed.iter().filter_map(|c| {
            let q = c.quota.as_ref()?;
            Some(Candidate {
                policy: &c.policy,
                change: q,
                moved: None,
            })
        });
        let moved = self.moves.iter().filter_map(|m| {
            Some(Candidate {
                policy: m.to.as_deref()?,
                change: m.quota.as_ref()?,
                moved: Some(m),
            })
        });
        own.chain(moved)
            .filter(move |c| c.change.tightening() > guard)
    }

    /// The tightenings beyond `guard` that `new`'s `[[acknowledge]]` list does not name
    /// (by policy, from and to, the quotas compared by meaning).
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/s"}]}"#)?;
    /// # let new = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":2,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/min"}],"acknowledge":[{"policy":"a","from":"10/s","to":"10/min"}]}"#)?;
    /// let diff = tollgate::limits::Limits::diff(&old, &new);
    /// assert!(diff.unacknowledged(&new, 10.0).is_empty());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn unacknowledged(&self, new: &Limits, guard: f64) -> Vec<Tightening> {
        // Acknowledgements pasted from `tollgate diff` list the tightenings in this order, so
        // the next one in the list is tried first (read in order); the set of all of them is
        // built only when one is met out of order.
        let acks = &new.acknowledgements;
        let mut next = 0;
        let mut all: Option<HashSet<(&str, &Quota, &Quota)>> = None;
        let mut acknowledged = |c: &Candidate<'_>| {
            let (from, to) = (c.change.from(), c.change.to());
            if let Some(a) = acks.get(next) {
                if a.policy == c.policy && a.from == from && a.to == to {
                    next += 1;
                    return true;
                }
            }
            let all = all.get_or_insert_with(|| {
                acks.iter()
                    .map(|a| (a.policy.as_str(), &a.from, &a.to))
                    .collect()
            });
            all.contains(&(c.policy, &from, &to))
        };
        self.beyond(guard)
            .filter(|c| !acknowledged(c))
            .map(Candidate::tightening)
            .collect()
    }

    /// What stands in the way of the change this diff describes, as
    /// [`Limits::check_transition`] reports it: a stale revision, and every tightening beyond
    /// `guard` that `new` (the document this diff leads to) does not acknowledge. For a tool
    /// that shows the diff and the errors both, without comparing the documents twice.
    ///
    /// # Errors
    ///
    /// One [`ConfigErrorKind::UnacknowledgedTightening`] per unacknowledged tightening (its
    /// hint is the acknowledgement to add), and [`ConfigErrorKind::StaleRevision`].
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/s"}]}"#)?;
    /// # let new = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"20/s"}]}"#)?;
    /// let diff = tollgate::limits::Limits::diff(&old, &new);
    /// let errs = diff.check(&new, tollgate::limits::Limits::DEFAULT_GUARD).unwrap_err();
    /// assert_eq!(errs[0].kind(), tollgate::limits::ConfigErrorKind::StaleRevision);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn check(&self, new: &Limits, guard: f64) -> Result<(), ConfigErrors> {
        let (old_revision, new_revision) = (self.from_revision, self.to_revision);
        let mut errors = Vec::new();
        if !self.is_empty() && new_revision <= old_revision {
            let what =
                format!("revision {new_revision} is not above the running revision {old_revision}");
            let hint = format!("raise `revision` above {old_revision}");
            let kind = ConfigErrorKind::StaleRevision;
            errors.push(ConfigError::new(kind, "revision", what, Some(hint)));
        }
        for t in self.unacknowledged(new, guard) {
            let change = QuotaChange::new(t.from, t.to);
            let (path, what) = match &t.moved_from {
                None => (format!("policies[{}].quota", t.policy), change.to_string()),
                Some(_) => (format!("policies[{}].match", t.policy), t.to_string()),
            };
            let guard = Factor(if guard >= 1.0 { guard } else { 1.0 });
            let what = format!("{what}, beyond the guard of {guard}");
            let hint = format!(
                "acknowledge it in the new document: [[acknowledge]] policy = \"{}\", from = \"{}\", to = \"{}\"",
                t.policy, t.from, t.to
            );
            let kind = ConfigErrorKind::UnacknowledgedTightening;
            errors.push(ConfigError::new(kind, path, what, Some(hint)));
        }
        match ConfigErrors::from_vec(errors) {
            None => Ok(()),
            Some(errors) => Err(errors),
        }
    }
}

/// What changed in a policy that both documents have.
fn policy_change((o, n): (&Policy, &Policy)) -> PolicyChange {
    PolicyChange {
        policy: o.name.clone(),
        quota: (o.quota != n.quota).then(|| QuotaChange::new(o.quota, n.quota)),
        matcher: (o.matcher != n.matcher).then(|| Change {
            from: o.matcher.clone(),
            to: n.matcher.clone(),
        }),
        shadow: (o.shadow != n.shadow).then_some(Change {
            from: o.shadow,
            to: n.shadow,
        }),
        also: (o.also != n.also).then_some(Change {
            from: o.also,
            to: n.also,
        }),
        classes: (o.classes != n.classes).then(|| Change {
            from: describe_classes(o.classes.as_ref()),
            to: describe_classes(n.classes.as_ref()),
        }),
        retry_budget: (o.retry_budget != n.retry_budget).then(|| Change {
            from: describe_retry_budget(o.retry_budget),
            to: describe_retry_budget(n.retry_budget),
        }),
    }
}

/// A tightening before it is written out as a [`Tightening`]: most are acknowledged, and
/// are never copied.
struct Candidate<'a> {
    policy: &'a str,
    change: &'a QuotaChange,
    moved: Option<&'a TrafficMove>,
}

impl Candidate<'_> {
    fn tightening(self) -> Tightening {
        Tightening {
            policy: self.policy.to_owned(),
            from: self.change.from(),
            to: self.change.to(),
            factor: self.change.tightening(),
            requests: self.moved.map_or_else(Vec::new, |m| m.requests.clone()),
            moved_from: self.moved.and_then(|m| m.from.clone()),
        }
    }
}

impl fmt::Display for Diff {
    /// One line per change: `added`, `removed`, `changed` (quota, match, shadow, also,
    /// classes, retry_budget), `moved`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "revision {} → {}", self.from_revision, self.to_revision)?;
        if self.is_empty() {
            return f.write_str("\n  no changes");
        }
        for p in &self.added {
            write!(
                f,
                "\n  added    {:<20} {} ({}{})",
                p.name,
                p.quota,
                p.matcher,
                also(p)
            )?;
        }
        for p in &self.removed {
            write!(
                f,
                "\n  removed  {:<20} {} ({}{})",
                p.name,
                p.quota,
                p.matcher,
                also(p)
            )?;
        }
        for c in &self.changed {
            if let Some(q) = &c.quota {
                write!(f, "\n  changed  {:<20} quota {q}", c.policy)?;
            }
            if let Some(m) = &c.matcher {
                write!(
                    f,
                    "\n  changed  {:<20} match {} → {}",
                    c.policy, m.from, m.to
                )?;
            }
            if let Some(s) = &c.shadow {
                write!(
                    f,
                    "\n  changed  {:<20} shadow {} → {}",
                    c.policy, s.from, s.to
                )?;
            }
            if let Some(s) = &c.also {
                write!(
                    f,
                    "\n  changed  {:<20} also {} → {}",
                    c.policy, s.from, s.to
                )?;
            }
            if let Some(s) = &c.classes {
                write!(
                    f,
                    "\n  changed  {:<20} classes {} → {}",
                    c.policy, s.from, s.to
                )?;
            }
            if let Some(s) = &c.retry_budget {
                write!(
                    f,
                    "\n  changed  {:<20} retry_budget {} → {}",
                    c.policy, s.from, s.to
                )?;
            }
        }
        for m in &self.moves {
            let name = |p: &Option<String>| p.clone().unwrap_or_else(|| "(no policy)".into());
            write!(
                f,
                "\n  moved    requests of {} move from {} to {}",
                m.requests.join(", "),
                name(&m.from),
                name(&m.to)
            )?;
            if let Some(q) = &m.quota {
                write!(f, ": {q}")?;
            }
        }
        Ok(())
    }
}

/// `, also` after the matcher of a policy that applies in addition.
fn also(p: &Policy) -> &'static str {
    if p.also {
        ", also"
    } else {
        ""
    }
}

/// [`Limits::check_transition`]: the stale revision and every unacknowledged tightening.
pub(super) fn check_transition(
    old: &Limits,
    new: &Limits,
    guard: f64,
) -> Result<Diff, ConfigErrors> {
    let diff = Diff::new(old, new);
    diff.check(new, guard)?;
    Ok(diff)
}
