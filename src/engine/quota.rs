//! [`Quota`]: a rate and a burst, counted in requests or in bytes, with a strict string form
//! (the grammar and every accepted spelling are in [`Quota`]'s documentation, under Syntax).

use core::fmt;
use core::num::{NonZeroU32, NonZeroU64};
use core::str::FromStr;
use core::time::Duration;

use crate::engine::error::QuotaError;
use crate::engine::gcra::{Params, Per};

use arith::{saturating_u64, weight};
use units::{burst_unit, Period, TimeUnit, WorkUnit};

mod arith;
mod parse;
#[cfg(feature = "serde")]
mod serde_impl;
mod units;

/// A rate and a burst: `count` work units per period, at most `burst` of them at once.
///
/// A quota counts either **requests** (`"100/s"`: a check of cost `n` is `n` requests) or
/// **bytes** (`"2Gbit/s"`, `"256MiB/s"`: a check of cost `n` is `n` bytes). The burst is the
/// largest cost a single check may ask for, and how much a full cell lets through at once; it
/// defaults to the count (for a byte budget: the count converted to bytes, rounded down to
/// whole bytes).
///
/// Parse one from its string form (see [Syntax](#syntax)) or build a request quota with
/// [`per_second`](Quota::per_second) and friends:
///
/// ```
/// use core::num::NonZeroU32;
/// use tollgate::Quota;
///
/// let q: Quota = "100/s;burst=250".parse()?;
/// assert_eq!(q.burst(), 250);
/// assert_eq!(q, Quota::per_second(NonZeroU32::new(100).unwrap()).with_burst(NonZeroU32::new(250).unwrap()));
/// assert_eq!(q.to_string(), "100/s;burst=250");
///
/// let b: Quota = "2Gbit/s;burst=64MiB".parse()?;
/// assert!(b.is_bytes());
/// assert_eq!(b.burst(), 64 << 20);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// # Syntax
///
/// `<count><work-unit>?/<span>?<time-unit>[;burst=<size>]`; the unit is never optional. A
/// period of several units takes their number before the unit: `"1/90ms"` (one request every
/// 90 ms), `"1/2d"`, `"100/15min"`; the span follows the count's rules (at least 1, no leading
/// zero), and the period is at most 2^59 ns (about 18 years). Every accepted spelling:
///
/// | part | spellings | meaning |
/// |---|---|---|
/// | time unit | `ms`; `s` or `second`; `min` or `minute`; `h` or `hour`; `d` or `day`; `w` or `week`; `month` | the period `P` (see [Time units](#time-units)) |
/// | work unit | none | requests: a check of cost `n` is `n` requests |
/// | | `B`, `kB`, `MB`, `GB` | bytes: ×1, ×10^3, ×10^6, ×10^9 |
/// | | `KiB`, `MiB`, `GiB` | bytes: ×2^10, ×2^20, ×2^30 |
/// | | `bit`, `kbit`, `Mbit`, `Gbit` | bits: ×1, ×10^3, ×10^6, ×10^9 (8 bits are a byte) |
/// | burst | `;burst=250` for requests; `;burst=64MiB` for bytes (a size with its own work unit) | the largest cost of one check |
///
/// ASCII only, case-sensitive, no whitespace, no sign, no leading zero, no exponent, no
/// fraction, no digit separator, at most 64 bytes (longer input is rejected unscanned). Counts
/// and bursts are `u64`, at least 1. `m` is rejected on purpose: minute or milli? So is `M`:
/// month or minute? Plurals (`seconds`, `weeks`, `months`) and other spellings (`sec`, `S`,
/// `wk`, `mo`, `kb`) are rejected, with a hint. A byte burst
/// must be a whole number of bytes (`;burst=12bit` is rejected), and a byte budget whose
/// default burst is below one byte (`"3bit/s"`) needs an explicit one.
///
/// ## Time units
///
/// | unit | spellings | shown as | length |
/// |---|---|---|---|
/// | millisecond | `ms` | `ms` | 10^6 ns |
/// | second | `s`, `second` | `s` | 10^9 ns |
/// | minute | `min`, `minute` | `min` | 60 s |
/// | hour | `h`, `hour` | `h` | 3600 s |
/// | day | `d`, `day` | `d` | 86 400 s |
/// | week | `w`, `week` | `w` | 7 days, 604 800 s |
/// | month | `month` | `month` | 30 days, 2 592 000 s |
///
/// A period keeps the unit it was written in: `"28/7d"` shows as `"28/7d"` and `"4/week"` as
/// `"4/w"`; they are equal quotas (`==` compares meaning).
///
/// `/month` is a **rolling 30 days**, not a calendar month: GCRA has no calendar, only a
/// steady rate and a tolerance, so `"10000/month"` admits one request every 259.2 s on
/// average with a burst of 10000, and a spent burst comes back gradually, never all at once
/// on the 1st. A calendar-aligned reset (a fresh allowance on the 1st of each month) would
/// need a fixed-window counter keyed by the calendar period and expiring at the period's end;
/// this crate does not build one.
///
/// ```
/// use tollgate::{Quota, QuotaErrorKind};
///
/// let q: Quota = "10000/month".parse()?;
/// assert_eq!(q.to_string(), "10000/month");
/// assert_eq!(q.period().as_secs(), 30 * 86_400);
/// assert_eq!("4/week".parse::<Quota>()?.to_string(), "4/w");
/// assert_eq!("4/w".parse::<Quota>()?, "4/7d".parse()?);
/// assert_eq!("1/M".parse::<Quota>().unwrap_err().kind(), QuotaErrorKind::AmbiguousUnit);
/// let err = "1/months".parse::<Quota>().unwrap_err();
/// assert_eq!(err.kind(), QuotaErrorKind::UnknownUnit);
/// assert!(err.to_string().contains(r#"did you mean "month"?"#));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// [`Display`](fmt::Display) writes the short units and `;burst=` only when the effective
/// burst differs from the default. A byte burst is written in the largest unit that holds it
/// exactly, looking first at the units of the rate's own family:
///
/// | rate in | the burst in the largest exact of | else |
/// |---|---|---|
/// | `kB`, `MB`, `GB` | `GB`, `MB`, `kB` | the largest exact of `GiB`, `GB`, `MiB`, `MB`, `KiB`, `kB`; else `B` |
/// | `KiB`, `MiB`, `GiB` | `GiB`, `MiB`, `KiB` | the same |
/// | `bit`, `kbit`, `Mbit`, `Gbit` | `Gbit`, `Mbit`, `kbit` | the same |
/// | `B` | — | the same |
///
/// So `"2Gbit/s;burst=64MiB"` shows as written, `"1MB/s;burst=2000000000B"` as
/// `"1MB/s;burst=2GB"`, and a burst of 3 bytes as `3B`. Parsing the display of a quota gives
/// back an equal quota.
///
/// ```
/// use tollgate::Quota;
///
/// let q: Quota = "10/second;burst=5".parse()?;
/// assert_eq!(q.to_string(), "10/s;burst=5");
/// let b: Quota = "1MiB/s;burst=524288B".parse()?;
/// assert_eq!(b.to_string(), "1MiB/s;burst=512KiB");
/// assert_eq!(b.to_string().parse::<Quota>()?, b);
/// let link: Quota = "2Gbit/s;burst=67108864B".parse()?;
/// assert_eq!(link.to_string(), "2Gbit/s;burst=64MiB");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// # Equality
///
/// `==` and `Hash` compare meaning, not spelling: whether the quota counts requests or bytes,
/// the exact rate (a reduced fraction) and the effective burst. So `"2Gbit/s" == "250MB/s"`
/// and `"100/s;burst=6000" == "6000/min"`, but `"100/s" != "100/s;burst=250"` and
/// `"100/s" != "6000/min"` (the default burst is the count: 100 at once is not 6000 at once).
///
/// # Rounding
///
/// A request quota `C/P` has the interval `T = ⌈P/C⌉` ns ([`interval`](Quota::interval)).
/// Rounding up means the effective rate never exceeds the written one; below 10^6 requests
/// per second it is less than 0.1 % slower. Above that, whole nanoseconds are coarse: every
/// rate from 500,000,001/s to 999,999,999/s has `T = 2` ns and runs at 500,000,000/s, so
/// `"600000000/s"` admits 500 million a second, not 600.
///
/// ```
/// use core::time::Duration;
/// use tollgate::Quota;
///
/// let q: Quota = "600000000/s".parse()?;
/// assert_eq!(q.interval(), Duration::from_nanos(2)); // ⌈10^9 / 6·10^8⌉
/// assert_eq!(1_000_000_000 / q.interval().as_nanos(), 500_000_000); // the effective rate
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
/// A byte budget keeps its exact rate (a cost of `n`
/// bytes weighs `⌈n·P/C⌉` ns, with `P/C` in ns per byte), so it may be arbitrarily fast.
///
/// # Limits
///
/// A request rate faster than one per nanosecond is rejected by the parser and saturated by
/// the constructors. The tolerance `burst·T` is capped at 2^62 ns (about 146 years): a
/// larger burst is lowered to the largest that fits, and [`burst`](Quota::burst) reports that
/// effective burst (a byte burst is also capped at `u64::MAX` bytes).
#[derive(Clone, Copy)]
pub struct Quota {
    /// The count as written, in `work` units (requests when `work` is `None`).
    count: u64,
    work: Option<WorkUnit>,
    time: Period,
    /// The exact cost of one request or byte in ns, as the reduced fraction
    /// `ns_num / ns_den`: what `==` compares, with the kind and the effective burst.
    ns_num: u64,
    ns_den: u128,
    /// Computed once here so that limiters only copy them.
    params: Params,
}

/// `10^9`: the fastest request rate per second, one per nanosecond.
const MAX_PER_SECOND: u64 = 1_000_000_000;

impl Quota {
    /// `n` requests per second, with a burst of `n`; past 10^9 both the rate and the burst
    /// saturate to 10^9.
    ///
    /// Never panics: a rate above 10^9 per second (faster than one per nanosecond) saturates
    /// to `1000000000/s`, and with it the default burst: `per_second(NonZeroU32::MAX)` has a
    /// burst of 10^9, not 2^32 − 1 (give a larger one with [`with_burst`](Quota::with_burst)).
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::per_second(NonZeroU32::new(100).unwrap());
    /// assert_eq!(q, "100/s".parse()?);
    /// assert_eq!(Quota::per_second(NonZeroU32::MAX), "1000000000/s".parse()?);
    /// assert_eq!(Quota::per_second(NonZeroU32::MAX).burst(), 1_000_000_000);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_second(n: NonZeroU32) -> Quota {
        let count = u64::from(n.get()).min(MAX_PER_SECOND);
        Quota::from_parts(count, None, Period::of(TimeUnit::Second), None)
    }

    /// `n` requests per minute, with a burst of `n`.
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::per_minute(NonZeroU32::new(6000).unwrap());
    /// assert_eq!(q, "6000/min".parse()?);
    /// // the same rate as 100/s, but a burst of 6000
    /// assert_eq!(q, "100/s;burst=6000".parse()?);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_minute(n: NonZeroU32) -> Quota {
        Quota::from_parts(u64::from(n.get()), None, Period::of(TimeUnit::Minute), None)
    }

    /// `n` requests per hour, with a burst of `n`.
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use tollgate::Quota;
    ///
    /// assert_eq!(Quota::per_hour(NonZeroU32::new(3600).unwrap()).to_string(), "3600/h");
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_hour(n: NonZeroU32) -> Quota {
        Quota::from_parts(u64::from(n.get()), None, Period::of(TimeUnit::Hour), None)
    }

    /// `n` requests per day, with a burst of `n`.
    ///
    /// ```
    /// use core::num::NonZeroU32;
    /// use tollgate::Quota;
    ///
    /// assert_eq!(Quota::per_day(NonZeroU32::new(10).unwrap()), "10/day".parse()?);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_day(n: NonZeroU32) -> Quota {
        Quota::from_parts(u64::from(n.get()), None, Period::of(TimeUnit::Day), None)
    }

    /// One request every `interval`, one at a time (a burst of 1): a check every 90 ms, one a
    /// day, one every two days. Its string form writes the period with a span,
    /// `"1/90ms"`, `"1/2d"`, in the largest unit up to days that holds it exactly (a week
    /// is `"1/7d"`, never `"1/w"`).
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q = Quota::with_interval(Duration::from_millis(90))?;
    /// assert_eq!(q.to_string(), "1/90ms");
    /// assert_eq!(q.interval(), Duration::from_millis(90));
    /// assert_eq!(q, "1/90ms".parse()?);
    /// let two_days = Quota::with_interval(Duration::from_secs(2 * 86_400))?;
    /// assert_eq!(two_days.to_string(), "1/2d");
    /// let week = Quota::with_interval(Duration::from_secs(7 * 86_400))?;
    /// assert_eq!((week.to_string(), week == "1/w".parse()?), ("1/7d".to_owned(), true));
    /// // Below a millisecond, as a count per millisecond when it divides one exactly.
    /// let fast = Quota::with_interval(Duration::from_micros(250))?;
    /// assert_eq!((fast.to_string(), fast.burst()), ("4/ms;burst=1".to_owned(), 1));
    /// assert!(Quota::with_interval(Duration::ZERO).is_err());
    /// assert!(Quota::with_interval(Duration::from_micros(1500)).is_err()); // 1.5 ms
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`QuotaErrorKind::Zero`](crate::QuotaErrorKind::Zero) for a zero interval;
    /// [`Malformed`](crate::QuotaErrorKind::Malformed) for one that is neither a whole number
    /// of milliseconds nor an exact fraction of one (the string form could not say it);
    /// [`Overflow`](crate::QuotaErrorKind::Overflow) past 2^59 ns (about 18 years).
    pub fn with_interval(interval: Duration) -> Result<Quota, QuotaError> {
        use crate::engine::error::QuotaErrorKind as Kind;
        let err = |kind, what: &str| {
            Err(QuotaError::new(
                kind,
                0,
                format!("interval {interval:?} {what}"),
            ))
        };
        let Ok(ns) = u64::try_from(interval.as_nanos()) else {
            return err(Kind::Overflow, "is longer than 2^59 ns (about 18 years)");
        };
        const MS: u64 = 1_000_000;
        if ns == 0 {
            return err(Kind::Zero, "is zero");
        }
        if ns < MS {
            if MS % ns != 0 {
                return err(
                    Kind::Malformed,
                    "is not a whole number of milliseconds nor an exact fraction of one",
                );
            }
            let per_ms = Quota::from_parts(MS / ns, None, Period::of(TimeUnit::Milli), Some(1));
            return Ok(per_ms);
        }
        if ns > units::MAX_PERIOD_NS {
            return err(Kind::Overflow, "is longer than 2^59 ns (about 18 years)");
        }
        match Period::from_nanos(ns) {
            Some(period) => Ok(Quota::from_parts(1, None, period, None)),
            None => err(
                Kind::Malformed,
                "is not a whole number of milliseconds nor an exact fraction of one",
            ),
        }
    }

    /// The same rate with another burst: requests for a request quota, bytes for a byte
    /// budget. A burst whose tolerance would exceed 2^62 ns is lowered to the largest that
    /// fits (see [`burst`](Quota::burst)).
    ///
    /// ```
    /// use core::num::NonZeroU64;
    /// use tollgate::Quota;
    ///
    /// let q: Quota = "1MB/s".parse()?;
    /// let q = q.with_burst(NonZeroU64::new(4096).unwrap());
    /// assert_eq!(q.burst(), 4096);
    /// assert_eq!(q.to_string(), "1MB/s;burst=4KiB");
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[must_use]
    pub fn with_burst(self, burst: impl Into<NonZeroU64>) -> Quota {
        let burst = u128::from(burst.into().get());
        Quota::from_parts(self.count, self.work, self.time, Some(burst))
    }

    /// Whether this is a byte budget (costs and bursts in bytes) rather than a request quota.
    ///
    /// ```
    /// use tollgate::Quota;
    ///
    /// assert!("10MiB/s".parse::<Quota>()?.is_bytes());
    /// assert!(!"10/s".parse::<Quota>()?.is_bytes());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_bytes(&self) -> bool {
        self.work.is_some()
    }

    /// The count as written, in the quota's own work unit: 100 for `"100/s"`, 2 for
    /// `"2Gbit/s"`.
    ///
    /// ```
    /// use tollgate::Quota;
    ///
    /// assert_eq!("2Gbit/s".parse::<Quota>()?.count(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period the count is spread over: one unit of time, or as many as written before
    /// the unit.
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::Quota;
    ///
    /// assert_eq!("5/min".parse::<Quota>()?.period(), Duration::from_secs(60));
    /// assert_eq!("1/90ms".parse::<Quota>()?.period(), Duration::from_millis(90));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.time.nanos())
    }

    /// The effective burst, in requests or bytes: the largest cost one check may ask for.
    ///
    /// It is the written burst (or the default: the count, converted to whole bytes rounded
    /// down for a byte budget), lowered when its tolerance would exceed 2^62 ns.
    ///
    /// ```
    /// use tollgate::Quota;
    ///
    /// assert_eq!("100/s".parse::<Quota>()?.burst(), 100);
    /// assert_eq!("100/s;burst=250".parse::<Quota>()?.burst(), 250);
    /// assert_eq!("12bit/s".parse::<Quota>()?.burst(), 1);
    /// // 2^62 ns is 53375 days
    /// assert_eq!("1/d;burst=1000000".parse::<Quota>()?.burst(), 53375);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn burst(&self) -> u64 {
        self.params.burst
    }

    /// The interval `T = ⌈P/C⌉` between requests at the sustained rate; for a byte budget,
    /// the weight of one byte, `⌈P/C⌉` ns with `C` in bytes (at least 1 ns).
    ///
    /// ```
    /// use core::time::Duration;
    /// use tollgate::Quota;
    ///
    /// assert_eq!("100/s".parse::<Quota>()?.interval(), Duration::from_millis(10));
    /// assert_eq!("3/s".parse::<Quota>()?.interval(), Duration::from_nanos(333_333_334));
    /// assert_eq!("1kB/s".parse::<Quota>()?.interval(), Duration::from_millis(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        let nanos = match self.params.per {
            Per::Request { t } => t,
            Per::Byte { .. } => saturating_u64(weight(self.params.per, 1)),
        };
        Duration::from_nanos(nanos)
    }

    /// The GCRA parameters of a cell with this quota.
    pub(crate) fn params(&self) -> Params {
        self.params
    }

    /// This rate with the burst written on its own as `text` (`"250"`, or `"64MiB"` for a
    /// byte budget), as `;burst=` takes it; errors quote `text` alone.
    #[cfg(feature = "config")]
    pub(crate) fn with_burst_text(self, text: &str) -> Result<Quota, QuotaError> {
        let burst = parse::parse_burst(text, self.work)?;
        let parsed = parse::Parsed {
            count: self.count,
            work: self.work,
            time: self.time,
            burst: Some(burst),
        };
        parsed.build(text)
    }
}

impl FromStr for Quota {
    type Err = QuotaError;

    /// Parses the string form; see [`Quota`] for the grammar.
    ///
    /// # Errors
    ///
    /// A [`QuotaError`] naming the first problem: its [`kind`](QuotaError::kind) and
    /// [`offset`](QuotaError::offset).
    ///
    /// ```
    /// use tollgate::{Quota, QuotaErrorKind};
    ///
    /// let q: Quota = "6000/minute".parse()?;
    /// assert_eq!(q.to_string(), "6000/min");
    /// assert_eq!("10/m".parse::<Quota>().unwrap_err().kind(), QuotaErrorKind::AmbiguousUnit);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn from_str(s: &str) -> Result<Quota, QuotaError> {
        parse::parse(s)?.build(s)
    }
}

impl fmt::Display for Quota {
    /// The canonical string form: short units, and `;burst=` only when the effective burst
    /// differs from the default. A byte burst is written in the largest exact unit, as the
    /// type's documentation says. Parsing it gives back an equal quota.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let work = self.work.map_or("", WorkUnit::symbol);
        write!(f, "{}{}/{}", self.count, work, self.time)?;
        let burst = self.params.burst;
        if burst == self.default_burst() {
            return Ok(());
        }
        match self.work {
            None => write!(f, ";burst={burst}"),
            Some(rate) => {
                let bits = u128::from(burst) * 8;
                let unit = burst_unit(bits, rate);
                write!(
                    f,
                    ";burst={}{}",
                    bits / u128::from(unit.bits()),
                    unit.symbol()
                )
            }
        }
    }
}

/// Debug shows the canonical string, which says everything the quota means.
impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quota(\"{self}\")")
    }
}
