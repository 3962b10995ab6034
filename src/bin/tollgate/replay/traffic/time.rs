//! The timestamps access logs write, read with `jiff`, and written back as RFC 3339.
//!
//! | written | read as |
//! |---|---|
//! | `2026-03-14T08:17:00Z`, `2026-03-14T09:17:00.25+01:00`, `2026-03-14 08:17:00Z` | RFC 3339 (an offset is required) |
//! | `14/Mar/2026:08:17:00 +0000`, `[14/Mar/2026:08:17:00 +0000]` | nginx `$time_local`, Apache `%t` |
//! | `1773476220.250` | epoch seconds with a fraction: nginx `$msec` |
//! | `1773476220` | epoch seconds (below 10^11) |
//! | `1773476220250` | epoch milliseconds (below 10^14) |
//! | `1773476220250000` | epoch microseconds (below 10^17) |
//!
//! A whole number's unit is told by its size: 10^11 seconds is the year 5138 and 10^11
//! milliseconds is 1973, so no log of this century is read in the wrong unit.

use jiff::Timestamp;

use super::parse::cut;

const SECONDS_BELOW: i64 = 100_000_000_000;
const MILLIS_BELOW: i64 = 100_000_000_000_000;
const MICROS_BELOW: i64 = 100_000_000_000_000_000;

/// Milliseconds since the Unix epoch, from any form in the module's table.
pub(crate) fn timestamp(v: &str) -> Result<i64, String> {
    let bad = || {
        format!(
            "timestamp {:?} is neither RFC 3339 (2026-03-14T08:17:00Z), nginx's \
             14/Mar/2026:08:17:00 +0000, nor epoch seconds, milliseconds or microseconds",
            cut(v)
        )
    };
    let b = v.as_bytes();
    if !b.is_empty() && b.iter().all(u8::is_ascii_digit) {
        let n: i64 = v
            .parse()
            .map_err(|_| format!("timestamp {:?} is out of range", cut(v)))?;
        return match n {
            n if n < SECONDS_BELOW => Ok(n * 1000),
            n if n < MILLIS_BELOW => Ok(n),
            n if n < MICROS_BELOW => Ok(n / 1000),
            _ => Err(format!(
                "timestamp {:?} is out of range (epoch microseconds at most)",
                cut(v)
            )),
        };
    }
    if let Some((secs, frac)) = v.split_once('.') {
        if !secs.is_empty()
            && secs.len() <= 11
            && secs.bytes().all(|c| c.is_ascii_digit())
            && !frac.is_empty()
            && frac.bytes().all(|c| c.is_ascii_digit())
        {
            let s: i64 = secs.parse().map_err(|_| bad())?;
            let ms = frac.bytes().chain(std::iter::repeat(b'0')).take(3);
            let ms = ms.fold(0, |acc, d| acc * 10 + i64::from(d - b'0'));
            return Ok(s * 1000 + ms);
        }
    }
    let t = if v.as_bytes().get(2) == Some(&b'/') || v.starts_with('[') {
        let inner = v.trim_start_matches('[').trim_end_matches(']');
        jiff::fmt::strtime::parse("%d/%b/%Y:%H:%M:%S %z", inner)
            .and_then(|p| p.to_timestamp())
            .map_err(|_| bad())?
    } else {
        v.parse::<Timestamp>().map_err(|_| bad())?
    };
    Ok(t.as_millisecond())
}

/// `--from`/`--to`: a timestamp in any form of the module's table.
pub(crate) fn parse_time(text: &str) -> Result<i64, String> {
    timestamp(text.trim())
}

/// `ms` since the epoch as RFC 3339 in UTC, to the millisecond when it has any.
pub(crate) fn rfc3339(ms: i64) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(t) if ms % 1000 == 0 => format!("{t:.0}"),
        Ok(t) => format!("{t:.3}"),
        Err(_) => format!("{ms} ms after the epoch"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_in_the_table() {
        let at = 1_773_476_220_000; // 2026-03-14T08:17:00Z
        for (text, ms) in [
            ("0", 0),
            ("1970-01-01T00:00:00Z", 0),
            ("2026-03-14T08:17:00Z", at),
            ("2026-03-14t08:17:00z", at),
            ("2026-03-14 08:17:00Z", at),
            ("2026-03-14T09:17:00.25+01:00", at + 250),
            ("2026-03-14T03:17:00-05:00", at),
            ("2024-02-29T00:00:00Z", 1_709_164_800_000),
            ("14/Mar/2026:08:17:00 +0000", at),
            ("[14/Mar/2026:09:17:00 +0100]", at),
            ("1773476220.250", at + 250),
            ("1773476220.2", at + 200),
            ("1773476220.123456", at + 123),
            ("1773476220", at),
            ("1773476220250", at + 250),
            ("1773476220250999", at + 250),
        ] {
            assert_eq!(timestamp(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn what_is_refused() {
        for bad in [
            "",
            "yesterday",
            "2026-02-30T00:00:00Z",
            "2026-03-14T08:17:00",
            "-5",
            "2026-03-14T08:17:00+1:00",
            "99999999999999999999999",
            "177347622025099999",
            "1773476220.",
            ".5",
            "14/Foo/2026:08:17:00 +0000",
            "14/Mar/2026:08:17:00",
        ] {
            assert!(timestamp(bad).is_err(), "{bad}");
        }
        let long = "9".repeat(1000);
        let message = timestamp(&format!("x{long}")).err().unwrap_or_default();
        assert!(message.len() < 300, "{message}");
    }

    #[test]
    fn written_back_as_rfc3339() {
        assert_eq!(rfc3339(1_773_476_220_000), "2026-03-14T08:17:00Z");
        assert_eq!(rfc3339(1_773_476_220_250), "2026-03-14T08:17:00.250Z");
    }
}
