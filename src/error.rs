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
