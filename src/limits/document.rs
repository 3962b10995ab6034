//! Limits as code (feature `config`): one document in TOML, YAML or JSON that
//! names every policy, validated as a whole, compared with the running one before it ships.
//!
//! ```toml
//! schema = 1
//! revision = 42                        # the caller's version, an integer
//! categories = ["checkout", "search"]  # matchers may only name declared categories
//! tiers = ["free", "paid"]             # and declared tiers
//!
//! [[policies]]
//! name = "paid-checkout"               # unique
//! match = { tier = "paid", category = "checkout", route = "/v1/checkout/*" }
//! quota = "100/s"                      # the unit is required
//! burst = 250                          # optional
//! shadow = false                       # optional: evaluate and count, never deny
//! also = false                         # optional: apply in addition to the most specific
//! classes = [{ class = 0, reserve = 0.0 }, { class = 2, reserve = 0.5 }]  # optional
//! retry_budget = { ratio = 0.1, period = "10s", floor = "10/s" }           # optional
//!
//! [[acknowledge]]                      # a tightening beyond the guard, on purpose
//! policy = "paid-checkout"
//! from = "1000/s"
//! to = "100/s"
//! ```
//!
//! Policies are a list, not a map keyed by name, because map formats silently keep the last
//! of two duplicate keys. Loading is two-phase: a lenient parse into a tree that keeps unknown
//! fields (only a syntax error stops it, with its line and column), then a validator that
//! collects every error with its path by policy name and a fix hint
//! (`policies[paid-checkout].quota: missing unit in "10": write "10/s" or "10/min"`).

use core::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use crate::engine::error::{ConfigError, ConfigErrorKind, Quoted};

mod change;
mod diff;
mod duration;
mod emit;
mod errors;
mod fields;
mod format;
mod index;
mod model;
mod moves;
mod names;
mod parse;
mod path;
mod resolve;
mod validate;
mod write;

pub use change::{Direction, QuotaChange};
pub use diff::{Change, Diff, PolicyChange, Tightening};
pub use errors::ConfigErrors;
pub use format::Format;
pub use model::{Acknowledgement, Matcher, Policy};
pub use moves::TrafficMove;
pub(crate) use parse::MAX_DOCUMENT_BYTES;

pub(crate) const DEFAULT_GUARD: f64 = 10.0;

/// A validated limits document (feature `config`): its revision, declared tiers and
/// categories, policies and acknowledgements. Equal documents compare equal whatever their
/// format or spelling (quotas compare by meaning).
///
/// # The document
///
/// TOML, YAML and JSON load the same model:
///
/// ```toml
/// schema = 1                           # required, and 1
/// revision = 42                        # required: the caller's version, 0 to 2^63 - 1
/// categories = ["checkout", "search"]  # optional: matchers may only name declared categories
/// tiers = ["free", "paid"]             # optional: and declared tiers
///
/// [[policies]]                         # required (may be empty: `policies = []`)
/// name = "paid-checkout"               # required, unique
/// match = { tier = "paid", category = "checkout", route = "/v1/checkout/*" }  # at least one
/// quota = "100/s"                      # required, with its unit (see `Quota`)
/// burst = 250                          # optional; an integer, or a size such as "64MiB"
/// shadow = false                       # optional: evaluate and count, never deny
///
/// [[policies]]                         # applies in addition to the most specific policy
/// name = "per-customer"
/// match = { route = "/*" }
/// quota = "10000/day"
/// also = true                          # optional; see `Policy::also` and `resolve_all`
///
/// [[policies]]                         # a byte budget with priority classes and retries
/// name = "replication"
/// match = { route = "/replicate/*" }
/// quota = "2Gbit/s"                    # a byte rate: checks cost bytes
/// burst = "64MiB"                      # a byte budget's burst is a size with its unit
/// classes = [{ class = 0, reserve = 0.0 }, { class = 2, reserve = 0.5 }]  # optional
/// retry_budget = { ratio = 0.1, period = "10s", floor = "10/s" }           # optional
///
/// [[acknowledge]]                      # optional: a tightening beyond the guard, on purpose
/// policy = "paid-checkout"
/// from = "1000/s"
/// to = "100/s"
/// ```
///
/// **Priority classes** (`classes`, see [`Priorities`](crate::shaping::Priorities)): a list of
/// `{ class, reserve }`, the class an integer from 0 (most critical) to 255 and the reserve
/// the share of the burst it leaves to more critical classes, a number in `[0, 1)`. Class 0
/// is implied with no reserve when not listed; an unlisted class gets the reserve of the
/// least critical listed one. A class listed twice, a less critical class reserving less
/// than a more critical one, and a reserve that leaves a class less than one request (or
/// byte) of the burst are errors. An empty list means no classes.
///
/// **Retry budget** (`retry_budget`, see [`RetryBudget`](crate::shaping::RetryBudget)): a table of
/// `ratio` (retries allowed per original, a number from 0 to 1000; default 0.1), `period`
/// (a duration with its unit — `ms`, `s`, `min`, `h`, `d` — from `"1s"` to `"1d"`; default
/// `"10s"`) and `floor` (retries always allowed, a request rate that is a whole number per
/// second such as `"10/s"` or `"600/min"`, `"0/s"` for none; default `"10/s"`), each
/// optional. As with quotas, a bare number where a unit belongs is an error with a hint:
/// `period = 10` gives `missing unit in "10": write "10s" or "10min"`.
///
/// **Byte budgets** are quotas with a work unit (`"2Gbit/s"`, `"256MiB/s"`); their `burst`
/// is a size with its own unit (`"64MiB"`), and a unitless byte burst is an error.
///
/// Names (of policies, tiers and categories) start with an ASCII letter and have at most 64
/// letters, digits, `-`, `_` or `.`. A route starts with `/`, is printable ASCII without
/// spaces, at most 256 bytes, and may end in `*` for a prefix match. Policies are a list, not a
/// map keyed by name, because map formats silently keep the last of two duplicate keys; a
/// field given twice in one table is an error for the same reason.
///
/// Loading is two-phase: a lenient parse into a tree that keeps unknown fields and where each
/// value is (only a syntax error stops it, with its line and column), then a validator that
/// collects every error with its path by policy name, its line and column, and a fix hint,
/// such as
/// `policies[paid-checkout].quota: missing unit in "10": write "10/s" or "10/min"` or
/// `policies[free-search].match.categroy: unknown field; did you mean "category"?`.
///
/// **Limits.** Every input costs time and memory linear in its length: a document longer than
/// [`MAX_DOCUMENT_BYTES`](crate::limits::Limits::MAX_DOCUMENT_BYTES) (16 MiB) is refused before it is parsed, and YAML aliases may copy
/// at most about the document's own size ([`ConfigErrorKind::TooLarge`]); nesting deeper
/// than [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH) (64 levels) is refused where the parser meets it
/// ([`ConfigErrorKind::TooDeep`]). A document has at most [`Limits::MAX_POLICIES`] (100,000)
/// policies, refused where the parser meets the one past the cap, before the rest is read
/// ([`ConfigErrorKind::TooManyPolicies`]), and at most [`MAX_ALSO_POLICIES`](crate::limits::Limits::MAX_ALSO_POLICIES) (64) of them
/// marked `also`, since a request is checked against each that matches
/// ([`ConfigErrorKind::TooManyAlsoPolicies`]). Of the errors found, the first
/// [`MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS) (1,000) are listed and the rest counted
/// ([`ConfigErrors::omitted`]).
///
/// ```
/// use tollgate::limits::{ConfigErrorKind, Limits};
///
/// let policy = "[[policies]]\nname = \"p\"\nmatch = { route = \"/\" }\nquota = \"1/s\"\n";
/// let doc = format!("schema = 1\nrevision = 1\n{}", policy.repeat(Limits::MAX_POLICIES + 1));
/// let errs = Limits::from_toml(&doc).unwrap_err();
/// assert_eq!((errs.len(), errs[0].kind()), (1, ConfigErrorKind::TooManyPolicies));
/// assert_eq!(errs[0].line(), Some(3 + 4 * Limits::MAX_POLICIES)); // where the 100,001st starts
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
///
/// ```
/// use tollgate::limits::Limits;
///
/// let limits = Limits::from_yaml(r#"
/// schema: 1
/// revision: 3
/// tiers: [free, paid]
/// policies:
///   - name: free
///     match: { tier: free }
///     quota: 10/s
///   - name: paid
///     match: { tier: paid }
///     quota: 100/s
/// "#)?;
/// assert_eq!(limits.revision(), 3);
/// assert_eq!(limits.resolve("paid", "search", "/v1/search").unwrap().name(), "paid");
/// assert_eq!(Limits::from_json(&limits.to_json())?, limits);
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
#[derive(Clone)]
pub struct Limits {
    revision: u64,
    categories: Vec<String>,
    tiers: Vec<String>,
    policies: Vec<Policy>,
    acknowledgements: Vec<Acknowledgement>,
    /// The policies by name and by matcher; derived from `policies`, shared by clones.
    index: Arc<index::PolicyIndex>,
}

/// Equal documents have equal fields; the index follows from the policies.
impl PartialEq for Limits {
    fn eq(&self, other: &Limits) -> bool {
        self.revision == other.revision
            && self.categories == other.categories
            && self.tiers == other.tiers
            && self.policies == other.policies
            && self.acknowledgements == other.acknowledgements
    }
}

impl Eq for Limits {}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("revision", &self.revision)
            .field("categories", &self.categories)
            .field("tiers", &self.tiers)
            .field("policies", &self.policies)
            .field("acknowledgements", &self.acknowledgements)
            .finish()
    }
}

impl Limits {
    /// A validated document, indexed.
    fn new(
        revision: u64,
        categories: Vec<String>,
        tiers: Vec<String>,
        policies: Vec<Policy>,
        acknowledgements: Vec<Acknowledgement>,
    ) -> Limits {
        Limits {
            index: Arc::new(index::PolicyIndex::new(&policies)),
            revision,
            categories,
            tiers,
            policies,
            acknowledgements,
        }
    }

    /// Loads a TOML document.
    ///
    /// # Errors
    ///
    /// Every problem found, in document order ([`ConfigErrors`]).
    ///
    /// ```
    /// let limits = tollgate::limits::Limits::from_toml("schema = 1\nrevision = 1\npolicies = []\n")?;
    /// assert!(limits.policies().is_empty());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn from_toml(text: &str) -> Result<Limits, ConfigErrors> {
        Limits::parse(text, Format::Toml)
    }

    /// Loads a YAML document.
    ///
    /// # Errors
    ///
    /// Every problem found, in document order ([`ConfigErrors`]).
    ///
    /// ```
    /// let limits = tollgate::limits::Limits::from_yaml("schema: 1\nrevision: 1\npolicies: []\n")?;
    /// assert_eq!(limits.revision(), 1);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn from_yaml(text: &str) -> Result<Limits, ConfigErrors> {
        Limits::parse(text, Format::Yaml)
    }

    /// Loads a JSON document.
    ///
    /// # Errors
    ///
    /// Every problem found, in document order ([`ConfigErrors`]).
    ///
    /// ```
    /// let limits = tollgate::limits::Limits::from_json(r#"{"schema": 1, "revision": 1, "policies": []}"#)?;
    /// assert_eq!(limits.revision(), 1);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn from_json(text: &str) -> Result<Limits, ConfigErrors> {
        Limits::parse(text, Format::Json)
    }

    /// Loads a document in the given format.
    ///
    /// # Errors
    ///
    /// A syntax error alone, or every problem the validator found ([`ConfigErrors`]).
    ///
    /// ```
    /// use tollgate::limits::{Format, Limits};
    ///
    /// let limits = Limits::parse("schema = 1\nrevision = 9\npolicies = []\n", Format::Toml)?;
    /// assert_eq!(limits.revision(), 9);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn parse(text: &str, format: Format) -> Result<Limits, ConfigErrors> {
        let tree = parse::parse(text, format).map_err(ConfigErrors::one)?;
        validate::validate(&tree)
    }

    /// Reads and loads a file, in the format its extension says (see [`Format::from_path`]).
    /// At most [`MAX_DOCUMENT_BYTES`](crate::limits::Limits::MAX_DOCUMENT_BYTES) and one more are read: a longer file is refused without
    /// being read whole.
    ///
    /// # Errors
    ///
    /// [`ConfigErrorKind::UnknownFormat`], [`ConfigErrorKind::Io`] (also for a file that is
    /// not UTF-8) or [`ConfigErrorKind::TooLarge`], or the document's errors.
    ///
    /// ```no_run
    /// let limits = tollgate::limits::Limits::from_path("examples/limits/valid.toml")?;
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn from_path(path: impl AsRef<Path>) -> Result<Limits, ConfigErrors> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let Some(format) = Format::from_path(path) else {
            let what = format!("unknown format of {}", Quoted(&shown));
            let hint = "name the file .toml, .yaml, .yml or .json".to_owned();
            let err = ConfigError::new(ConfigErrorKind::UnknownFormat, "", what, Some(hint));
            return Err(ConfigErrors::one(err));
        };
        let cannot_read = |e: &dyn core::fmt::Display| {
            let what = format!("cannot read {}: {e}", Quoted(&shown));
            ConfigErrors::one(ConfigError::new(ConfigErrorKind::Io, "", what, None))
        };
        let mut bytes = Vec::new();
        let limit = MAX_DOCUMENT_BYTES as u64 + 1;
        std::fs::File::open(path)
            .and_then(|file| file.take(limit).read_to_end(&mut bytes))
            .map_err(|e| cannot_read(&e))?;
        if bytes.len() > MAX_DOCUMENT_BYTES {
            let size = std::fs::metadata(path).map_or(limit, |m| m.len());
            return Err(ConfigErrors::one(parse::too_large(size)));
        }
        let text = String::from_utf8(bytes).map_err(|e| cannot_read(&e))?;
        Limits::parse(&text, format)
    }

    /// The caller's version of the document.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_toml("schema = 1\nrevision = 42\npolicies = []\n")?;
    /// assert_eq!(limits.revision(), 42);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The declared tiers, in document order.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_toml("schema = 1\nrevision = 1\ntiers = [\"free\"]\npolicies = []\n")?;
    /// assert_eq!(limits.tiers(), ["free"]);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn tiers(&self) -> &[String] {
        &self.tiers
    }

    /// The declared categories, in document order.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_toml("schema = 1\nrevision = 1\ncategories = [\"search\"]\npolicies = []\n")?;
    /// assert_eq!(limits.categories(), ["search"]);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn categories(&self) -> &[String] {
        &self.categories
    }

    /// The policies, in document order.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/s"}]}"#)?;
    /// assert_eq!(limits.policies().len(), 1);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The policy with this name.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/s"}]}"#)?;
    /// assert_eq!(limits.policy("a").unwrap().quota(), "10/s".parse()?);
    /// assert!(limits.policy("b").is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.index.position(name).map(|i| &self.policies[i])
    }

    /// The acknowledged tightenings, in document order.
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[]}"#)?;
    /// assert!(limits.acknowledgements().is_empty());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn acknowledgements(&self) -> &[Acknowledgement] {
        &self.acknowledgements
    }

    /// What changes from `old` to `new`; see [`Diff`].
    ///
    /// ```
    /// # let old = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[]}"#)?;
    /// let diff = tollgate::limits::Limits::diff(&old, &old);
    /// assert!(diff.is_empty());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn diff(old: &Limits, new: &Limits) -> Diff {
        Diff::new(old, new)
    }

    /// Whether `new` may replace `old`: every tightening beyond `guard` (use
    /// [`Limits::DEFAULT_GUARD`]) must be acknowledged in `new`, and a changed document must have a
    /// higher revision.
    ///
    /// # Errors
    ///
    /// One [`ConfigErrorKind::UnacknowledgedTightening`] per unacknowledged tightening (its
    /// hint is the acknowledgement to add), and [`ConfigErrorKind::StaleRevision`].
    ///
    /// ```
    /// use tollgate::limits::{ConfigErrorKind, Limits};
    ///
    /// let doc = |quota: &str, revision: u64| format!(
    ///     "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\nmatch = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n"
    /// );
    /// let old = Limits::from_toml(&doc("10/s", 1))?;
    /// let new = Limits::from_toml(&doc("10/min", 2))?;
    /// let errs = Limits::check_transition(&old, &new, Limits::DEFAULT_GUARD).unwrap_err();
    /// assert_eq!(errs[0].kind(), ConfigErrorKind::UnacknowledgedTightening);
    /// assert_eq!(errs[0].to_string(), "policies[api].quota: 10/s → 10/min: 60× tighter, beyond the guard of 10×; \
    ///     acknowledge it in the new document: [[acknowledge]] policy = \"api\", from = \"10/s\", to = \"10/min\"");
    /// let looser = Limits::from_toml(&doc("20/s", 3))?;
    /// assert!(Limits::check_transition(&new, &looser, Limits::DEFAULT_GUARD).is_ok());
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn check_transition(old: &Limits, new: &Limits, guard: f64) -> Result<Diff, ConfigErrors> {
        diff::check_transition(old, new, guard)
    }
}

impl Limits {
    /// The longest document accepted, in bytes: 16 MiB. Longer text is refused before it is
    /// parsed ([`ConfigErrorKind::TooLarge`]).
    pub const MAX_DOCUMENT_BYTES: usize = crate::limits::document::parse::MAX_DOCUMENT_BYTES;
    /// The most policies a document may have: 100,000. Each costs a limiter once it is
    /// served, and validation, diffs and reloads are linear in them. The parsers count the
    /// items of `policies` as they read them and stop at the one past the cap
    /// ([`ConfigErrorKind::TooManyPolicies`]), so a longer list is never built whole; the
    /// validator counts again (a YAML alias may name a list built under another key).
    pub const MAX_POLICIES: usize = crate::limits::document::parse::MAX_POLICIES;
    /// The deepest nesting of lists and tables accepted: 64 levels, the document itself being
    /// the first. A limits document needs 5 (document, `policies`, a policy, `classes`, a
    /// class); deeper nesting is refused as the parser meets it ([`ConfigErrorKind::TooDeep`]).
    pub const MAX_DEPTH: usize = crate::limits::document::parse::MAX_DEPTH;
    /// The most policies marked `also` a document may have: 64. A request is checked against
    /// every one of them that matches ([`LimitsHandle::check_all`](crate::limits::LimitsHandle::check_all)),
    /// so they bound the work of each request, where the other policies (one of which applies)
    /// do not; more is [`ConfigErrorKind::TooManyAlsoPolicies`](crate::limits::ConfigErrorKind::TooManyAlsoPolicies).
    pub const MAX_ALSO_POLICIES: usize = crate::limits::document::validate::MAX_ALSO_POLICIES;
    /// The most errors a [`ConfigErrors`] lists: 1,000. Beyond them it only counts
    /// ([`ConfigErrors::omitted`]): a document of 100,000 broken policies still gives a report
    /// of bounded size, and nobody reads past the first thousand anyway.
    pub const MAX_LISTED_ERRORS: usize = crate::limits::document::errors::MAX_LISTED_ERRORS;
    /// The tightening factor beyond which a change needs an acknowledgement: 10×.
    pub const DEFAULT_GUARD: f64 = crate::limits::document::DEFAULT_GUARD;
}
