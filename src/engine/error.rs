//! Errors: caller mistakes and bad input. A denial is never an error; it is a
//! [`Verdict`](crate::Verdict).

use core::fmt;

/// A check asked for more than the cell can ever hold: its cost exceeds the burst (or, with
/// priority classes, the capacity of its class). Retrying will never succeed, so this is an
/// error, not a denial.
///
/// ```
/// use tollgate::{Quota, RateLimiter};
///
/// let lim = RateLimiter::new("10/s".parse()?);
/// let err = lim.check_n(11).unwrap_err();
/// assert_eq!(err.cost(), 11);
/// assert_eq!(err.capacity(), 10);
/// assert_eq!(err.to_string(), "cost 11 exceeds the capacity of 10 per check");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("cost {cost} exceeds the capacity of {capacity} per check")]
pub struct InsufficientCapacity {
    cost: u64,
    capacity: u64,
}

impl InsufficientCapacity {
    pub(crate) fn new(cost: u64, capacity: u64) -> Self {
        Self { cost, capacity }
    }

    /// The cost that was asked for.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The largest cost a single check may ask for (the effective burst).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// A clock that cannot be had on this target: the built-in clocks ([`Clock::monotonic`],
/// [`Clock::os`]) read the standard library's time, which `wasm32-unknown-unknown` does not
/// have. A builder left on its default clock returns this from `try_build`.
///
/// ```
/// use tollgate::ClockError;
///
/// let err = ClockError::Unavailable { target: "wasm32-unknown-unknown" };
/// assert_eq!(
///     err.to_string(),
///     "no built-in clock on wasm32-unknown-unknown (its standard library cannot read time): \
///      give the builder .clock(Clock::from_fn(..)) or a ManualClock"
/// );
/// ```
///
/// [`Clock::monotonic`]: crate::Clock::monotonic
/// [`Clock::os`]: crate::Clock::os
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ClockError {
    /// The target has no built-in clock.
    #[error(
        "no built-in clock on {target} (its standard library cannot read time): \
         give the builder .clock(Clock::from_fn(..)) or a ManualClock"
    )]
    Unavailable {
        /// The target triple, as `wasm32-unknown-unknown`.
        target: &'static str,
    },
}

/// Writes `input` as a quoted, escaped string cut to at most `max` characters of input, so an
/// error message never carries control characters or unbounded attacker-controlled text.
pub(crate) fn quote(f: &mut fmt::Formatter<'_>, input: &str, max: usize) -> fmt::Result {
    let mut chars = input.chars();
    f.write_str("\"")?;
    for c in chars.by_ref().take(max) {
        write!(f, "{}", c.escape_debug())?;
    }
    if chars.next().is_some() {
        f.write_str("…")?;
    }
    f.write_str("\"")
}

/// What was wrong with a quota string; see [`QuotaError::kind`].
///
/// ```
/// use tollgate::{Quota, QuotaErrorKind};
///
/// let err = "100/m".parse::<Quota>().unwrap_err();
/// assert_eq!(err.kind(), QuotaErrorKind::AmbiguousUnit);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuotaErrorKind {
    /// No time unit (`"100"`, `"10kB"`, `"100/"`), or a byte budget's burst without a work
    /// unit (`"1MB/s;burst=64"`). Also every bare number met by the serde deserializer.
    MissingUnit,
    /// A unit that is not in the table (`"10/sec"`, `"10/S"`, `"10kb/s"`, `"10/seconds"`).
    UnknownUnit,
    /// `m`, which could mean minute or milli: write `min` or `ms`.
    AmbiguousUnit,
    /// A work unit on the burst of a request quota (`"100/s;burst=10kB"`).
    UnexpectedUnit,
    /// Anything else that does not follow the grammar: whitespace, a sign, a leading zero, an
    /// exponent, a digit separator, a fraction, a non-ASCII character, a stray character.
    Malformed,
    /// A count or a burst of zero.
    Zero,
    /// A request rate faster than one per nanosecond (`"1000001/ms"`).
    TooFast,
    /// Input longer than 64 bytes; it is rejected without being scanned.
    TooLong,
    /// A count or a burst that does not fit in a `u64`.
    Overflow,
    /// A byte budget whose burst is below one byte (`"3bit/s"`: its default burst is 3 bits).
    BurstTooSmall,
    /// A byte burst that is not a whole number of bytes (`"1MB/s;burst=12bit"`).
    PartialByte,
    /// A burst given twice: in the rate string and in the `burst` field of a table.
    DuplicateBurst,
}

/// A quota string (or a serialized quota) that could not be parsed.
///
/// The message names the problem and quotes the input, escaped and cut to a bounded length.
///
/// ```
/// use tollgate::{Quota, QuotaErrorKind};
///
/// let err = "100".parse::<Quota>().unwrap_err();
/// assert_eq!(err.kind(), QuotaErrorKind::MissingUnit);
/// assert_eq!(err.offset(), 3);
/// assert_eq!(err.to_string(), r#"missing unit in "100": write "100/s" or "100/min""#);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct QuotaError {
    kind: QuotaErrorKind,
    offset: usize,
    message: Box<str>,
}

impl QuotaError {
    pub(crate) fn new(kind: QuotaErrorKind, offset: usize, message: String) -> Self {
        Self {
            kind,
            offset,
            message: message.into_boxed_str(),
        }
    }

    /// What kind of mistake this is.
    pub fn kind(&self) -> QuotaErrorKind {
        self.kind
    }

    /// The byte offset in the input at which the problem starts (for a missing unit: where
    /// the unit should have been; for a burst given in a table: an offset in that burst).
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// The longest piece of input, in characters, that an error message quotes.
pub(crate) const QUOTE_MAX: usize = 64;

/// Displays a piece of input the way [`quote`] writes it, cut to [`QUOTE_MAX`] characters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Quoted<'a>(pub(crate) &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        quote(f, self.0, QUOTE_MAX)
    }
}

/// What was wrong with a limits document; see [`ConfigError::kind`].
///
/// ```
/// use tollgate::QuotaErrorKind;
/// use tollgate::limits::{ConfigErrorKind, Limits};
///
/// let errs = Limits::from_toml("schema = 1\nrevision = 1\npolicies = [{ name = \"a\", match = { route = \"/\" }, quota = \"10\" }]\n").unwrap_err();
/// assert_eq!(errs[0].kind(), ConfigErrorKind::Quota(QuotaErrorKind::MissingUnit));
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The text is not valid TOML, YAML or JSON; [`line`](ConfigError::line) and
    /// [`column`](ConfigError::column) say where, when the format tells.
    Syntax,
    /// The file could not be read.
    Io,
    /// A file name whose extension is not `.toml`, `.yaml`, `.yml` or `.json`.
    UnknownFormat,
    /// A required field is absent (`schema`, `revision`, `policies`, a policy's `name`,
    /// `match` or `quota`, an acknowledgement's `policy`, `from` or `to`).
    MissingField,
    /// A field the schema does not know, usually a misspelling (`categroy`).
    UnknownField,
    /// The same field twice in one table (JSON and YAML parsers would keep the last one).
    DuplicateField,
    /// A value of the wrong type: a string where a list belongs, a number where a string does.
    WrongType,
    /// A value of the right type that is not allowed: a badly formed name or route, a
    /// negative revision, a category declared twice.
    InvalidValue,
    /// A `schema` other than 1.
    UnsupportedSchema,
    /// Two policies with the same name.
    DuplicateName,
    /// A `match` that names none of tier, category and route.
    EmptyMatcher,
    /// Two policies that match exactly the same requests at the same specificity.
    OverlappingMatchers,
    /// A tier or category that the document does not declare.
    Undeclared,
    /// A quota that does not parse, or a burst given both in the quota and in `burst`
    /// ([`QuotaErrorKind::DuplicateBurst`]).
    Quota(QuotaErrorKind),
    /// An acknowledgement naming a policy that the document does not have.
    UnknownPolicy,
    /// A change tighter than the guard that the new document does not acknowledge.
    UnacknowledgedTightening,
    /// A changed document whose revision is not above the running one.
    StaleRevision,
    /// Lists and tables nested deeper than [`MAX_DEPTH`](crate::limits::Limits::MAX_DEPTH) levels; refused
    /// where the parser meets it, with its line and column.
    TooDeep,
    /// A document longer than [`MAX_DOCUMENT_BYTES`](crate::limits::Limits::MAX_DOCUMENT_BYTES), refused
    /// before it is parsed, or YAML aliases that would copy more than the document's own
    /// size (an alias bomb).
    TooLarge,
    /// More than [`MAX_POLICIES`](crate::limits::Limits::MAX_POLICIES) policies, refused as the parser meets
    /// the one past the cap (with its line and column), before the rest is read.
    TooManyPolicies,
    /// More than [`MAX_ALSO_POLICIES`](crate::limits::Limits::MAX_ALSO_POLICIES) policies marked `also`: a
    /// request is checked against every one of them that matches.
    TooManyAlsoPolicies,
}

/// One problem in a limits document: where it is ([`path`](ConfigError::path), by policy
/// name, and [`line`](ConfigError::line) and [`column`](ConfigError::column) in the text),
/// what is wrong ([`message`](ConfigError::message)) and how to fix it
/// ([`hint`](ConfigError::hint)).
///
/// `Display` writes `path: message`, or `line L, column C: message` for an error about the
/// text itself (a syntax error, nesting too deep), which has no path. The message already
/// ends with the hint when there is one; `hint` gives it alone.
///
/// ```
/// use tollgate::limits::{ConfigErrorKind, Limits};
///
/// let doc = r#"
/// schema = 1
/// revision = 7
/// categories = ["search"]
/// [[policies]]
/// name = "free-search"
/// match = { categroy = "search" }
/// quota = "10/s"
/// "#;
/// let errs = Limits::from_toml(doc).unwrap_err();
/// let err = &errs[0];
/// assert_eq!(err.kind(), ConfigErrorKind::UnknownField);
/// assert_eq!(err.path(), "policies[free-search].match.categroy");
/// assert_eq!((err.line(), err.column()), (Some(7), Some(11)));
/// assert_eq!(err.hint(), Some(r#"did you mean "category"?"#));
/// assert_eq!(
///     err.to_string(),
///     r#"policies[free-search].match.categroy: unknown field; did you mean "category"?"#
/// );
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    kind: ConfigErrorKind,
    path: Box<str>,
    message: Box<str>,
    hint: Option<Box<str>>,
    position: Option<(usize, usize)>,
}

#[cfg(feature = "config")]
impl ConfigError {
    /// An error whose message is `what`, followed by `; hint` when there is a hint.
    pub(crate) fn new(
        kind: ConfigErrorKind,
        path: impl Into<String>,
        what: impl fmt::Display,
        hint: Option<String>,
    ) -> Self {
        let message = match &hint {
            Some(hint) => format!("{what}; {hint}"),
            None => what.to_string(),
        };
        Self::with_message(kind, path, message, hint)
    }

    /// An error whose message is given whole, already carrying its `hint` if any.
    pub(crate) fn with_message(
        kind: ConfigErrorKind,
        path: impl Into<String>,
        message: String,
        hint: Option<String>,
    ) -> Self {
        Self {
            kind,
            path: path.into().into_boxed_str(),
            message: one_line(&message).into_boxed_str(),
            hint: hint.map(|h| one_line(&h).into_boxed_str()),
            position: None,
        }
    }

    /// The same error at a line and column of the text (1-based).
    pub(crate) fn at(mut self, line: usize, column: usize) -> Self {
        self.position = Some((line, column));
        self
    }

    /// What kind of mistake this is.
    ///
    /// ```
    /// use tollgate::limits::{ConfigErrorKind, Limits};
    ///
    /// let errs = Limits::from_json(r#"{"schema": 2, "revision": 1, "policies": []}"#).unwrap_err();
    /// assert_eq!(errs[0].kind(), ConfigErrorKind::UnsupportedSchema);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// Where in the document: `policies[paid-checkout].quota`, `revision`, or
    /// `policies[3].name` for a policy without a usable name (by 0-based index). Empty for
    /// errors about the text or the file as a whole (syntax, I/O).
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let errs = Limits::from_json(r#"{"schema": 1, "policies": []}"#).unwrap_err();
    /// assert_eq!(errs[0].path(), "revision");
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong, ending with the hint when there is one, on one line.
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let errs = Limits::from_json(r#"{"schema": 1, "policies": []}"#).unwrap_err();
    /// assert_eq!(errs[0].message(), "missing field; add `revision`, the document's version (an integer)");
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The fix alone, such as `write "10/s" or "10/min"` or `did you mean "category"?`.
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let errs = Limits::from_json(r#"{"schema": 1, "policies": []}"#).unwrap_err();
    /// assert_eq!(errs[0].hint(), Some("add `revision`, the document's version (an integer)"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The 1-based line where the error is: of the offending value (or of its key, for an
    /// unknown or repeated field; of the table, for a missing one), or of a syntax error.
    /// `None` for errors about no place in the text: I/O, the file name, and the errors of
    /// a transition between two documents ([`Limits::check_transition`](crate::limits::Limits::check_transition)).
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let errs = Limits::from_json("{\n  \"schema\": 1,\n  oops\n}").unwrap_err();
    /// assert_eq!(errs[0].line(), Some(3));
    /// let errs = Limits::from_yaml("schema: 1\nrevision: 1\npolicies:\n  - name: a\n    match: { route: /a }\n    quota: 10\n").unwrap_err();
    /// assert_eq!((errs[0].path(), errs[0].line()), ("policies[a].quota", Some(6)));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn line(&self) -> Option<usize> {
        self.position.map(|(line, _)| line)
    }

    /// The 1-based column (in characters) where the error is; see [`line`](ConfigError::line).
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let errs = Limits::from_json("{\n  \"schema\": 1,\n  oops\n}").unwrap_err();
    /// assert_eq!(errs[0].column(), Some(3));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn column(&self) -> Option<usize> {
        self.position.map(|(_, column)| column)
    }
}

/// Replaces control characters (newlines included) so that an error stays on one line.
#[cfg(feature = "config")]
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(feature = "config")]
impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.path.is_empty(), self.position) {
            (false, _) => write!(f, "{}: ", self.path)?,
            (true, Some((line, column))) => write!(f, "line {line}, column {column}: ")?,
            (true, None) => {}
        }
        f.write_str(&self.message)
    }
}

#[cfg(feature = "config")]
impl std::error::Error for ConfigError {}
