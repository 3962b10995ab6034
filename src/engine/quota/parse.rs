//! The strict parser of quota strings; the grammar is documented on [`Quota`](super::Quota).
//!
//! It scans left to right over ASCII bytes and stops at the first problem, so every error has
//! one offset. Hints are only given when the hinted spelling is itself valid.

use super::units::{Period, MAX_PERIOD_NS};
use super::{Quota, TimeUnit, WorkUnit};
use crate::engine::error::{QuotaError, QuotaErrorKind as Kind, Quoted};

/// The longest accepted input, in bytes; longer input is rejected before it is scanned.
const MAX_LEN: usize = 64;

const TIME_UNITS: [(&str, TimeUnit); 12] = [
    ("ms", TimeUnit::Milli),
    ("s", TimeUnit::Second),
    ("second", TimeUnit::Second),
    ("min", TimeUnit::Minute),
    ("minute", TimeUnit::Minute),
    ("h", TimeUnit::Hour),
    ("hour", TimeUnit::Hour),
    ("d", TimeUnit::Day),
    ("day", TimeUnit::Day),
    ("w", TimeUnit::Week),
    ("week", TimeUnit::Week),
    ("month", TimeUnit::Month),
];

/// Spellings people write that we reject, with the short form to suggest.
const TIME_ALIASES: [(&str, &str); 18] = [
    ("millis", "ms"),
    ("msec", "ms"),
    ("millisecond", "ms"),
    ("milliseconds", "ms"),
    ("sec", "s"),
    ("secs", "s"),
    ("seconds", "s"),
    ("mins", "min"),
    ("minutes", "min"),
    ("hr", "h"),
    ("hrs", "h"),
    ("hours", "h"),
    ("days", "d"),
    ("wk", "w"),
    ("weeks", "w"),
    ("mo", "month"),
    ("mon", "month"),
    ("months", "month"),
];

const WORK_UNITS: [WorkUnit; 11] = [
    WorkUnit::Byte,
    WorkUnit::KiloByte,
    WorkUnit::MegaByte,
    WorkUnit::GigaByte,
    WorkUnit::KibiByte,
    WorkUnit::MebiByte,
    WorkUnit::GibiByte,
    WorkUnit::Bit,
    WorkUnit::KiloBit,
    WorkUnit::MegaBit,
    WorkUnit::GigaBit,
];

const WORK_ALIASES: [(&str, &str); 6] = [
    ("byte", "B"),
    ("bytes", "B"),
    ("bits", "bit"),
    ("kbits", "kbit"),
    ("mbits", "Mbit"),
    ("gbits", "Gbit"),
];

/// A quota string split into its parts, before the rate is checked.
#[derive(Clone, Copy, Debug)]
pub(super) struct Parsed {
    pub(super) count: u64,
    pub(super) work: Option<WorkUnit>,
    pub(super) time: Period,
    /// The burst in requests or bytes, if one was written.
    pub(super) burst: Option<u128>,
}

impl Parsed {
    /// Checks the rate and builds the quota; `input` is quoted in errors.
    pub(super) fn build(self, input: &str) -> Result<Quota, QuotaError> {
        if self.work.is_none() && self.count > self.time.nanos() {
            let msg = format!(
                "rate faster than one request per nanosecond in {}",
                Quoted(input)
            );
            return Err(QuotaError::new(Kind::TooFast, 0, msg));
        }
        let quota = Quota::from_parts(self.count, self.work, self.time, self.burst);
        if quota.burst() == 0 {
            let msg = format!(
                "burst below one byte in {}: the default burst is the count in whole bytes, \
                 rounded down",
                Quoted(input)
            );
            return Err(QuotaError::new(Kind::BurstTooSmall, 0, msg));
        }
        Ok(quota)
    }
}

/// Splits a whole quota string into its parts.
pub(super) fn parse(input: &str) -> Result<Parsed, QuotaError> {
    let mut cur = Cursor::new(input)?;
    let count = cur.count("count")?;
    let digits_end = cur.pos;
    let word = cur.word();
    let work = match word {
        "" => None,
        _ => Some(cur.work_unit(word, digits_end)?),
    };
    match cur.peek() {
        Some(b'/') => cur.pos += 1,
        Some(b';') | None => return Err(cur.missing_time_unit(work)),
        Some(_) => return Err(cur.unexpected()),
    }
    // A period of several units: `1/90ms`, `1/2d`.
    let span_at = cur.pos;
    let span = match cur.peek() {
        Some(b) if b.is_ascii_digit() => cur.count("period")?,
        _ => 1,
    };
    let time_at = cur.pos;
    let unit = match cur.word() {
        "" => return Err(cur.no_time_unit()),
        word => time_unit(word, time_at, input)?,
    };
    let Some(time) = Period::new(span, unit) else {
        let msg = format!(
            "period longer than {MAX_PERIOD_NS} ns (about 18 years) in {}",
            Quoted(input)
        );
        return Err(QuotaError::new(Kind::Overflow, span_at, msg));
    };
    let burst = match cur.peek() {
        None => None,
        Some(b';') => {
            cur.pos += 1;
            if !cur.rest().starts_with("burst=") {
                return Err(cur.malformed(r#"expected "burst=" after ";""#));
            }
            cur.pos += "burst=".len();
            Some(cur.burst(work)?)
        }
        Some(_) => return Err(cur.unexpected()),
    };
    Ok(Parsed {
        count,
        work,
        time,
        burst,
    })
}

/// Parses a burst given on its own (the `burst` field of a serialized table), in requests or
/// in bytes as `work` says.
#[cfg(feature = "serde")]
pub(super) fn parse_burst(input: &str, work: Option<WorkUnit>) -> Result<u128, QuotaError> {
    Cursor::new(input)?.burst(work)
}

fn time_unit(word: &str, at: usize, input: &str) -> Result<TimeUnit, QuotaError> {
    if let Some(&(_, unit)) = TIME_UNITS.iter().find(|(s, _)| *s == word) {
        return Ok(unit);
    }
    if word == "m" {
        let msg = format!(
            r#"ambiguous unit "m" in {}: minute or milli? write "min" or "ms""#,
            Quoted(input)
        );
        return Err(QuotaError::new(Kind::AmbiguousUnit, at, msg));
    }
    if word == "M" {
        let msg = format!(
            r#"ambiguous unit "M" in {}: month or minute? write "month" or "min""#,
            Quoted(input)
        );
        return Err(QuotaError::new(Kind::AmbiguousUnit, at, msg));
    }
    let hint = TIME_UNITS
        .iter()
        .map(|&(s, unit)| (s, unit.symbol()))
        .chain(TIME_ALIASES)
        .find(|(s, _)| s.eq_ignore_ascii_case(word))
        .map_or_else(
            || r#": expected "ms", "s", "min", "h", "d", "w" or "month""#.to_owned(),
            |(_, short)| format!(r#": did you mean "{short}"?"#),
        );
    Err(unknown_unit("time unit", word, at, input, &hint))
}

/// `hint` is appended as it is: empty, or starting with `": "`.
fn unknown_unit(what: &str, word: &str, at: usize, input: &str, hint: &str) -> QuotaError {
    let msg = format!("unknown {what} {} in {}{hint}", Quoted(word), Quoted(input));
    QuotaError::new(Kind::UnknownUnit, at, msg)
}

/// The spelling `candidate`, if it parses: a hint must never be wrong itself.
fn valid(candidate: String) -> Option<String> {
    candidate.parse::<Quota>().ok().map(|_| candidate)
}

/// A position in an ASCII input of at most [`MAX_LEN`] bytes.
struct Cursor<'a> {
    input: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Checks the length before anything else, then that the input is ASCII, so that byte
    /// offsets are character offsets and slicing never splits a character.
    fn new(input: &'a str) -> Result<Self, QuotaError> {
        if input.len() > MAX_LEN {
            let msg = format!(
                "input of {} bytes is too long, at most {MAX_LEN} are allowed: {}",
                input.len(),
                Quoted(input)
            );
            return Err(QuotaError::new(Kind::TooLong, MAX_LEN, msg));
        }
        if let Some(at) = input.bytes().position(|b| !b.is_ascii()) {
            let msg = format!("non-ASCII character in {} at byte {at}", Quoted(input));
            return Err(QuotaError::new(Kind::Malformed, at, msg));
        }
        Ok(Cursor { input, pos: 0 })
    }

    fn peek(&self) -> Option<u8> {
        self.input.as_bytes().get(self.pos).copied()
    }

    fn rest(&self) -> &'a str {
        self.input.get(self.pos..).unwrap_or("")
    }

    /// Takes the longest run of bytes matching `pred`.
    fn take(&mut self, pred: fn(&u8) -> bool) -> &'a str {
        let start = self.pos;
        let len = self.rest().bytes().take_while(pred).count();
        self.pos += len;
        self.input.get(start..self.pos).unwrap_or("")
    }

    fn word(&mut self) -> &'a str {
        self.take(u8::is_ascii_alphabetic)
    }

    fn error(&self, kind: Kind, at: usize, what: &str) -> QuotaError {
        let msg = format!("{what} in {} at byte {at}", Quoted(self.input));
        QuotaError::new(kind, at, msg)
    }

    fn malformed(&self, what: &str) -> QuotaError {
        self.error(Kind::Malformed, self.pos, what)
    }

    /// The byte at the cursor does not belong there.
    fn unexpected(&self) -> QuotaError {
        match self.peek() {
            None => self.malformed("unexpected end"),
            Some(b) if b.is_ascii_whitespace() => self.malformed("whitespace is not allowed"),
            Some(b'+' | b'-') => self.malformed("a sign is not allowed"),
            Some(_) => {
                let c = self.input.get(self.pos..=self.pos).unwrap_or("");
                self.malformed(&format!("unexpected character {}", Quoted(c)))
            }
        }
    }

    /// A decimal count of at least 1: no sign, no leading zero, no fraction, no exponent, no
    /// separator. `what` names it in messages.
    fn count(&mut self, what: &str) -> Result<u64, QuotaError> {
        let start = self.pos;
        let digits = self.take(u8::is_ascii_digit);
        if digits.is_empty() {
            return Err(match self.peek() {
                None => self.malformed(&format!("missing {what}")),
                Some(b) if b.is_ascii_alphabetic() || b == b'/' => {
                    self.malformed(&format!("missing {what} before the unit"))
                }
                Some(_) => self.unexpected(),
            });
        }
        if digits.len() > 1 && digits.starts_with('0') {
            return Err(self.error(Kind::Malformed, start, "a leading zero is not allowed"));
        }
        let next_is_digit = self
            .input
            .as_bytes()
            .get(self.pos + 1)
            .is_some_and(|b| b.is_ascii_digit() || *b == b'+' || *b == b'-');
        match self.peek() {
            Some(b'.') => return Err(self.malformed("a fraction is not allowed")),
            Some(b'_' | b',' | b'\'') => {
                return Err(self.malformed("a digit separator is not allowed"))
            }
            Some(b'e' | b'E') if next_is_digit => {
                return Err(self.malformed("an exponent is not allowed"))
            }
            _ => {}
        }
        let n: u64 = digits.parse().map_err(|_| {
            let msg = format!("{what} {digits} does not fit in 64 bits");
            self.error(Kind::Overflow, start, &msg)
        })?;
        if n == 0 {
            let msg = format!("{what} is zero");
            return Err(self.error(Kind::Zero, start, &msg));
        }
        Ok(n)
    }

    fn work_unit(&self, word: &str, at: usize) -> Result<WorkUnit, QuotaError> {
        if let Some(&unit) = WORK_UNITS.iter().find(|u| u.symbol() == word) {
            return Ok(unit);
        }
        // "10s" is "10/s" without its slash
        let hint = if TIME_UNITS.iter().any(|(s, _)| *s == word) {
            let (count, unit) = self.input.split_at(at.min(self.input.len()));
            let fixed = format!("{count}/{unit}");
            valid(fixed).map(|fixed| format!(r#": write "{fixed}""#))
        } else {
            WORK_UNITS
                .iter()
                .map(|u| (u.symbol(), u.symbol()))
                .chain(WORK_ALIASES)
                .find(|(s, _)| s.eq_ignore_ascii_case(word))
                .map(|(_, unit)| format!(r#": did you mean "{unit}"?"#))
        };
        let hint = hint.unwrap_or_default();
        Err(unknown_unit("work unit", word, at, self.input, &hint))
    }

    /// The input stopped (or reached `;`) where `/` and a time unit belong.
    fn missing_time_unit(&self, work: Option<WorkUnit>) -> QuotaError {
        let written = self.input.get(..self.pos).unwrap_or("");
        let mut msg = format!("missing unit in {}", Quoted(self.input));
        if self.peek().is_none() {
            // a request count above 10^9 is too fast per second: hint the next units
            let units: &[&str] = match work {
                None => &["s", "min", "h", "d"],
                Some(_) => &["s"],
            };
            let hints: Vec<String> = units
                .iter()
                .filter_map(|unit| valid(format!("{written}/{unit}")))
                .take(2)
                .map(|hint| format!(r#""{hint}""#))
                .collect();
            if !hints.is_empty() {
                msg.push_str(&format!(": write {}", hints.join(" or ")));
            }
        }
        QuotaError::new(Kind::MissingUnit, self.pos, msg)
    }

    /// Nothing usable after `/`.
    fn no_time_unit(&self) -> QuotaError {
        match self.peek() {
            None | Some(b';') => {
                let msg = format!(r#"missing time unit after "/" in {}"#, Quoted(self.input));
                QuotaError::new(Kind::MissingUnit, self.pos, msg)
            }
            Some(_) => self.unexpected(),
        }
    }

    /// `<count>` for requests, `<count><work-unit>` for bytes, up to the end of the input.
    fn burst(&mut self, work: Option<WorkUnit>) -> Result<u128, QuotaError> {
        let count_at = self.pos;
        let n = self.count("burst")?;
        let unit_at = self.pos;
        let word = self.word();
        if self.peek().is_some() {
            return Err(self.unexpected());
        }
        let digits = self.input.get(count_at..unit_at).unwrap_or("");
        match (work, word) {
            (None, "") => Ok(u128::from(n)),
            (None, _) => {
                let msg = format!(
                    "unexpected unit {} on the burst of a request quota in {}: write {}",
                    Quoted(word),
                    Quoted(self.input),
                    Quoted(digits),
                );
                Err(QuotaError::new(Kind::UnexpectedUnit, unit_at, msg))
            }
            (Some(_), "") => {
                let mut msg = format!(
                    "missing unit on the burst of a byte budget in {}",
                    Quoted(self.input)
                );
                if self.input.len() < MAX_LEN {
                    msg.push_str(&format!(r#": write "{digits}B""#));
                }
                Err(QuotaError::new(Kind::MissingUnit, unit_at, msg))
            }
            (Some(_), _) => {
                let unit = self.work_unit(word, unit_at)?;
                let bits = u128::from(n) * u128::from(unit.bits());
                if bits % 8 != 0 {
                    let msg = format!(
                        "burst {} is not a whole number of bytes in {}: write a multiple of 8bit",
                        Quoted(self.input.get(count_at..).unwrap_or("")),
                        Quoted(self.input),
                    );
                    return Err(QuotaError::new(Kind::PartialByte, count_at, msg));
                }
                Ok(bits / 8)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(s: &str) -> Kind {
        match parse(s) {
            Ok(p) => panic!("{s} parsed as {p:?}"),
            Err(e) => e.kind(),
        }
    }

    #[test]
    fn tables_are_consistent() {
        for (spelling, unit) in TIME_UNITS {
            assert!(
                spelling == unit.symbol() || spelling.len() > 2,
                "{spelling}"
            );
        }
        for (alias, short) in TIME_ALIASES {
            assert!(TIME_UNITS.iter().all(|(s, _)| *s != alias), "{alias}");
            assert!(TIME_UNITS.iter().any(|(s, _)| s == &short), "{short}");
        }
        for (alias, unit) in WORK_ALIASES {
            assert!(WORK_UNITS.iter().all(|u| u.symbol() != alias), "{alias}");
            assert!(WORK_UNITS.iter().any(|u| u.symbol() == unit), "{unit}");
        }
    }

    #[test]
    fn splits_parts() {
        let p = parse("2Gbit/s;burst=64MiB").unwrap(); // a test: a panic is its failure
        assert_eq!(p.count, 2);
        assert_eq!(p.work, Some(WorkUnit::GigaBit));
        assert_eq!(p.time, Period::of(TimeUnit::Second));
        assert_eq!(p.burst, Some(64 << 20));
        let p = parse("100/minute;burst=250").unwrap(); // a test: a panic is its failure
        assert_eq!(
            (p.count, p.work, p.time),
            (100, None, Period::of(TimeUnit::Minute))
        );
        assert_eq!(p.burst, Some(250));
    }

    #[test]
    fn count_rules() {
        assert_eq!(kind("/s"), Kind::Malformed);
        assert_eq!(kind("01/s"), Kind::Malformed);
        assert_eq!(kind("0/s"), Kind::Zero);
        assert_eq!(kind("1e3/s"), Kind::Malformed);
        assert_eq!(kind("1e/s"), Kind::UnknownUnit);
        assert_eq!(kind("99999999999999999999/s"), Kind::Overflow);
    }

    #[test]
    #[cfg(feature = "serde")]
    fn burst_alone() {
        assert_eq!(parse_burst("250", None), Ok(250));
        assert_eq!(parse_burst("2KiB", Some(WorkUnit::Byte)), Ok(2048));
        let err = parse_burst("64", Some(WorkUnit::Byte)).unwrap_err();
        assert_eq!(err.kind(), Kind::MissingUnit);
        assert_eq!(err.offset(), 2);
    }

    #[test]
    fn valid_rejects_invalid_hints() {
        assert_eq!(valid("3bit/s".into()), None);
        assert_eq!(valid("3/s".into()).as_deref(), Some("3/s"));
    }
}
