//! The validated model: [`Policy`], its [`Matcher`] and an [`Acknowledgement`], and how a
//! [`Limits`](super::Limits) document is written back out.

use core::fmt;

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use super::duration::format_duration;
use crate::engine::quota::Quota;
use crate::shaping::priority::Priorities;
use crate::shaping::retry::RetryBudget;

/// One named policy: which requests it matches, the quota they get, and optionally the
/// priority classes and the retry budget of its limiter.
///
/// ```
/// use tollgate::limits::Limits;
///
/// let limits = Limits::from_toml(r#"
/// schema = 1
/// revision = 1
/// tiers = ["paid"]
/// [[policies]]
/// name = "paid"
/// match = { tier = "paid" }
/// quota = "100/s"
/// burst = 250
/// "#)?;
/// let policy = limits.policy("paid").unwrap();
/// assert_eq!(policy.name(), "paid");
/// assert_eq!(policy.matcher().tier(), Some("paid"));
/// assert_eq!(policy.quota(), "100/s;burst=250".parse()?);
/// assert!(!policy.shadow());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Policy {
    pub(super) name: String,
    pub(super) quota: Quota,
    #[serde(skip_serializing_if = "core::ops::Not::not")]
    pub(super) shadow: bool,
    #[serde(skip_serializing_if = "core::ops::Not::not")]
    pub(super) also: bool,
    #[serde(rename = "match")]
    pub(super) matcher: Matcher,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_classes"
    )]
    pub(super) classes: Option<Priorities>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_retry_budget"
    )]
    pub(super) retry_budget: Option<RetryBudget>,
}

impl Policy {
    /// The policy's name, unique in its document.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"all","match":{"route":"/*"},"quota":"10/s"}]}"#)?;
    /// assert_eq!(limits.policies()[0].name(), "all");
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Which requests the policy matches.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"all","match":{"route":"/*"},"quota":"10/s"}]}"#)?;
    /// assert_eq!(limits.policies()[0].matcher().route(), Some("/*"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }

    /// The quota, with the document's `burst` field applied.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"all","match":{"route":"/*"},"quota":"10/s","burst":5}]}"#)?;
    /// assert_eq!(limits.policies()[0].quota().burst(), 5);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Whether the policy is in shadow mode: evaluated and counted, never denying.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"all","match":{"route":"/*"},"quota":"10/s","shadow":true}]}"#)?;
    /// assert!(limits.policies()[0].shadow());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn shadow(&self) -> bool {
        self.shadow
    }

    /// Whether the policy applies *in addition* to the most specific policy (`also = true`),
    /// never instead of it: every matching `also` policy is checked as well, by
    /// [`LimitsHandle::check_all`](crate::limits::LimitsHandle::check_all) — a per-route limit plus
    /// a per-customer limit across all routes, or a per-second limit plus a per-day one.
    /// [`Limits::resolve`](super::Limits::resolve) never returns such a policy;
    /// [`Limits::resolve_all`](super::Limits::resolve_all) lists it after the most specific
    /// one.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_toml(r#"
    /// # schema = 1
    /// # revision = 1
    /// # [[policies]]
    /// # name = "per-customer"
    /// # match = { route = "/*" }
    /// # quota = "10000/day"
    /// also = true
    /// # "#)?;
    /// assert!(limits.policy("per-customer").unwrap().also());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn also(&self) -> bool {
        self.also
    }

    /// The priority classes of the policy's limiter (`classes`), if the document gives
    /// any; a check picks its class with [`Check::class`](crate::Check::class).
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_toml(r#"
    /// # schema = 1
    /// # revision = 1
    /// # [[policies]]
    /// # name = "link"
    /// # match = { route = "/replicate/*" }
    /// # quota = "2Gbit/s"
    /// # burst = "64MiB"
    /// classes = [{ class = 0, reserve = 0.0 }, { class = 2, reserve = 0.5 }]
    /// # "#)?;
    /// let classes = limits.policy("link").unwrap().classes().unwrap();
    /// assert_eq!(classes.reserve(2), 0.5);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn classes(&self) -> Option<&Priorities> {
        self.classes.as_ref()
    }

    /// The retry budget of the policy's limiter (`retry_budget`), if the document gives one.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let limits = tollgate::limits::Limits::from_toml(r#"
    /// # schema = 1
    /// # revision = 1
    /// # [[policies]]
    /// # name = "writes"
    /// # match = { route = "/v1/writes/*" }
    /// # quota = "100/s"
    /// retry_budget = { ratio = 0.1, period = "10s", floor = "10/s" }
    /// # "#)?;
    /// let budget = limits.policy("writes").unwrap().retry_budget().unwrap();
    /// assert_eq!((budget.ratio(), budget.period(), budget.floor()), (0.1, Duration::from_secs(10), 10));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn retry_budget(&self) -> Option<RetryBudget> {
        self.retry_budget
    }
}

/// `classes = [{ class = 0, reserve = 0.0 }, …]`, class 0 included.
fn serialize_classes<S: Serializer>(classes: &Option<Priorities>, s: S) -> Result<S::Ok, S::Error> {
    let Some(classes) = classes else {
        return s.serialize_none();
    };
    let mut seq = s.serialize_seq(Some(classes.classes().count()))?;
    for (class, reserve) in classes.classes() {
        seq.serialize_element(&ClassEntry { class, reserve })?;
    }
    seq.end()
}

#[derive(Serialize)]
struct ClassEntry {
    class: u8,
    reserve: f64,
}

/// `retry_budget = { ratio = 0.1, period = "10s", floor = "10/s" }`, every field written.
fn serialize_retry_budget<S: Serializer>(
    budget: &Option<RetryBudget>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let Some(budget) = budget else {
        return s.serialize_none();
    };
    let mut st = s.serialize_struct("RetryBudget", 3)?;
    st.serialize_field("ratio", &budget.ratio())?;
    st.serialize_field("period", &format_duration(budget.period()))?;
    st.serialize_field("floor", &format!("{}/s", budget.floor()))?;
    st.end()
}

/// The classes in a line, for diffs: `0 (reserve 0), 2 (reserve 0.5)`, or `none`.
pub(super) fn describe_classes(classes: Option<&Priorities>) -> String {
    match classes {
        None => "none".to_owned(),
        Some(c) => c
            .classes()
            .map(|(class, reserve)| format!("{class} (reserve {reserve})"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A retry budget in a line, for diffs: `ratio 0.1 over 10s, floor 10/s`, or `none`.
pub(super) fn describe_retry_budget(budget: Option<RetryBudget>) -> String {
    match budget {
        None => "none".to_owned(),
        Some(b) => format!(
            "ratio {} over {}, floor {}/s",
            b.ratio(),
            format_duration(b.period()),
            b.floor()
        ),
    }
}

/// Which requests a policy matches: each field that is set must match, an unset one matches
/// anything, and at least one is set.
///
/// A route ending in `*` matches every route that starts with what comes before the `*`
/// (`/v1/checkout/*` matches `/v1/checkout/` and `/v1/checkout/cards`); any other route
/// matches itself only. [`Limits::resolve`](super::Limits::resolve) explains which of several
/// matching policies wins.
///
/// ```
/// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"tiers":["paid"],"policies":[{"name":"p","match":{"tier":"paid","route":"/v1/*"},"quota":"10/s"}]}"#)?;
/// let m = limits.policies()[0].matcher();
/// assert!(m.matches("paid", "search", "/v1/search"));
/// assert!(!m.matches("free", "search", "/v1/search"));
/// assert_eq!(m.to_string(), "tier=paid route=/v1/*");
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
#[non_exhaustive]
pub struct Matcher {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tier: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) category: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) route: Option<String>,
}

/// How specific a matcher is; the larger wins (see [`Limits::resolve`](super::Limits::resolve)).
pub(super) type Specificity = (u8, u32, bool, bool);

impl Matcher {
    /// The tier the matcher names, if any.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"tiers":["paid"],"policies":[{"name":"p","match":{"tier":"paid"},"quota":"10/s"}]}"#)?;
    /// assert_eq!(limits.policies()[0].matcher().tier(), Some("paid"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn tier(&self) -> Option<&str> {
        self.tier.as_deref()
    }

    /// The category the matcher names, if any.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"categories":["search"],"policies":[{"name":"p","match":{"category":"search"},"quota":"10/s"}]}"#)?;
    /// assert_eq!(limits.policies()[0].matcher().category(), Some("search"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn category(&self) -> Option<&str> {
        self.category.as_deref()
    }

    /// The route pattern the matcher names, if any: exact, or a prefix ending in `*`.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"p","match":{"route":"/v1/*"},"quota":"10/s"}]}"#)?;
    /// assert_eq!(limits.policies()[0].matcher().route(), Some("/v1/*"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }

    /// Whether a request of this tier, category and route matches.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"p","match":{"route":"/v1/*"},"quota":"10/s"}]}"#)?;
    /// let m = limits.policies()[0].matcher();
    /// assert!(m.matches("free", "search", "/v1/search"));
    /// assert!(!m.matches("free", "search", "/v2/search"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn matches(&self, tier: &str, category: &str, route: &str) -> bool {
        self.tier.as_ref().is_none_or(|t| t == tier)
            && self.category.as_ref().is_none_or(|c| c == category)
            && self
                .route
                .as_ref()
                .is_none_or(|pattern| route_matches(pattern, route))
    }

    /// Fields set, then the route (exact above the longest prefix above none), then
    /// category, then tier. Two different matchers that both match one request never tie.
    pub(super) fn specificity(&self) -> Specificity {
        let fields = [
            self.tier.is_some(),
            self.category.is_some(),
            self.route.is_some(),
        ];
        let route = match self.route.as_deref() {
            None => 0,
            Some(pattern) => match pattern.strip_suffix('*') {
                Some(prefix) => u32::try_from(prefix.len())
                    .map_or(u32::MAX - 1, |n| n.saturating_add(1).min(u32::MAX - 1)),
                None => u32::MAX,
            },
        };
        let count = fields.iter().filter(|f| **f).count() as u8;
        (count, route, self.category.is_some(), self.tier.is_some())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.tier.is_none() && self.category.is_none() && self.route.is_none()
    }
}

pub(super) fn route_matches(pattern: &str, route: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => route.starts_with(prefix),
        None => pattern == route,
    }
}

impl fmt::Display for Matcher {
    /// `tier=paid category=checkout route=/v1/checkout/*`, the fields that are set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = [
            ("tier", &self.tier),
            ("category", &self.category),
            ("route", &self.route),
        ];
        let mut first = true;
        for (key, value) in fields {
            if let Some(value) = value {
                if !first {
                    f.write_str(" ")?;
                }
                write!(f, "{key}={value}")?;
                first = false;
            }
        }
        Ok(())
    }
}

/// An explicit acknowledgement of one tightening beyond the guard: the policy, and the quota
/// it had and now has (compared by meaning, so `"6000/min"` acknowledges `"100/s;burst=6000"`).
///
/// ```
/// use tollgate::limits::Limits;
///
/// let limits = Limits::from_toml(r#"
/// schema = 1
/// revision = 2
/// [[policies]]
/// name = "api"
/// match = { route = "/api/*" }
/// quota = "10/min"
/// [[acknowledge]]
/// policy = "api"
/// from = "10/s"
/// to = "10/min"
/// "#)?;
/// let ack = &limits.acknowledgements()[0];
/// assert_eq!(ack.policy(), "api");
/// assert_eq!(ack.from(), "10/s".parse()?);
/// assert_eq!(ack.to(), "10/min".parse()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub struct Acknowledgement {
    pub(super) policy: String,
    pub(super) from: Quota,
    pub(super) to: Quota,
}

impl Acknowledgement {
    /// The policy whose quota changes (for traffic moving between policies: the one it moves
    /// to).
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"p","match":{"route":"/"},"quota":"1/s"}],"acknowledge":[{"policy":"p","from":"10/s","to":"1/s"}]}"#)?;
    /// assert_eq!(limits.acknowledgements()[0].policy(), "p");
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The quota before the change.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"p","match":{"route":"/"},"quota":"1/s"}],"acknowledge":[{"policy":"p","from":"10/s","to":"1/s"}]}"#)?;
    /// assert_eq!(limits.acknowledgements()[0].from().count(), 10);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn from(&self) -> Quota {
        self.from
    }

    /// The quota after the change.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"p","match":{"route":"/"},"quota":"1/s"}],"acknowledge":[{"policy":"p","from":"10/s","to":"1/s"}]}"#)?;
    /// assert_eq!(limits.acknowledgements()[0].to().count(), 1);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn to(&self) -> Quota {
        self.to
    }
}

/// The document as it is written out: `burst` folded into the quota string, defaults left out.
#[derive(Serialize)]
pub(super) struct Document<'a> {
    pub(super) schema: u64,
    pub(super) revision: u64,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(super) categories: &'a [String],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(super) tiers: &'a [String],
    pub(super) policies: &'a [Policy],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(super) acknowledge: &'a [Acknowledgement],
}
