//! Serde support (feature `serde`): a quota serializes as its canonical string and
//! deserializes from that string or from a table `{ rate = "100/s", burst = 250 }`.
//!
//! The visitor takes numbers on purpose: a bare number (`quota = 10`) is the unit going
//! missing (as when a push turned `10/s` into `10`, read as `10/min`), so it gets the
//! missing-unit message with its hint rather than serde's generic "invalid type".

use core::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, Serializer};

use super::parse;
use super::Quota;
use crate::engine::error::{QuotaError, QuotaErrorKind, Quoted};

impl Serialize for Quota {
    /// Serializes as the [`Display`](core::fmt::Display) string, such as `"100/s;burst=250"`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quota {
    /// Deserializes from a quota string, or from a table with a `rate` string and an optional
    /// `burst` (an integer, or a string such as `"64MiB"` for a byte budget); giving a burst
    /// in both the rate and the table is an error, and so are other fields. Formats that are
    /// not self-describing read the string.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Quota, D::Error> {
        if deserializer.is_human_readable() {
            deserializer.deserialize_any(QuotaVisitor)
        } else {
            deserializer.deserialize_str(QuotaVisitor)
        }
    }
}

/// The error for a bare number where a quota belongs: the parser's missing-unit error (with
/// its hint) for a positive integer, a missing-unit error without a hint for anything else.
fn bare_number(text: &str) -> QuotaError {
    match text.parse::<Quota>() {
        Err(err) if err.kind() == QuotaErrorKind::MissingUnit => err,
        _ => {
            let msg = format!(
                r#"missing unit in {}: a quota is a string with a unit, such as "10/s""#,
                Quoted(text)
            );
            QuotaError::new(QuotaErrorKind::MissingUnit, text.len(), msg)
        }
    }
}

/// Implements the number visits of a visitor as `$body(text)` with the number's text.
macro_rules! visit_numbers {
    ($body:expr) => {
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            $body(v.to_string())
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            $body(v.to_string())
        }

        fn visit_u128<E: de::Error>(self, v: u128) -> Result<Self::Value, E> {
            $body(v.to_string())
        }

        fn visit_i128<E: de::Error>(self, v: i128) -> Result<Self::Value, E> {
            $body(v.to_string())
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            // `{:?}` keeps the point: 10.0 is not the integer 10
            $body(format!("{v:?}"))
        }
    };
}

struct QuotaVisitor;

impl<'de> Visitor<'de> for QuotaVisitor {
    type Value = Quota;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a quota string such as "100/s", or a table with "rate" and "burst""#)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Quota, E> {
        v.parse().map_err(E::custom)
    }

    visit_numbers!(|text: String| Err(E::custom(bare_number(&text))));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Quota, A::Error> {
        let mut rate: Option<String> = None;
        let mut burst: Option<String> = None;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Rate if rate.is_some() => return Err(de::Error::duplicate_field("rate")),
                Field::Burst if burst.is_some() => return Err(de::Error::duplicate_field("burst")),
                Field::Rate => rate = Some(map.next_value::<RateText>()?.0),
                Field::Burst => burst = Some(map.next_value::<BurstText>()?.0),
            }
        }
        let rate = rate.ok_or_else(|| de::Error::missing_field("rate"))?;
        from_table(&rate, burst.as_deref()).map_err(de::Error::custom)
    }
}

fn from_table(rate: &str, burst: Option<&str>) -> Result<Quota, QuotaError> {
    let mut parsed = parse::parse(rate)?;
    if let Some(burst) = burst {
        if parsed.burst.is_some() {
            let at = rate.find(';').unwrap_or(0);
            let msg = format!(
                "burst given twice: in the rate {} and in the table",
                Quoted(rate)
            );
            return Err(QuotaError::new(QuotaErrorKind::DuplicateBurst, at, msg));
        }
        parsed.burst = Some(parse::parse_burst(burst, parsed.work)?);
    }
    parsed.build(rate)
}

const FIELDS: &[&str] = &["rate", "burst"];

enum Field {
    Rate,
    Burst,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Field, D::Error> {
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

struct FieldVisitor;

impl Visitor<'_> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#""rate" or "burst""#)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
        match v {
            "rate" => Ok(Field::Rate),
            "burst" => Ok(Field::Burst),
            _ => Err(E::unknown_field(v, FIELDS)),
        }
    }
}

/// The `rate` of a table: a string; a bare number gets the missing-unit message.
struct RateText(String);

impl<'de> Deserialize<'de> for RateText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RateText, D::Error> {
        deserializer.deserialize_any(RateVisitor)
    }
}

struct RateVisitor;

impl Visitor<'_> for RateVisitor {
    type Value = RateText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a rate string such as "100/s""#)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RateText, E> {
        Ok(RateText(v.to_owned()))
    }

    visit_numbers!(|text: String| Err(E::custom(bare_number(&text))));
}

/// The `burst` of a table, as the text `;burst=` would carry: numbers become their digits.
struct BurstText(String);

impl<'de> Deserialize<'de> for BurstText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<BurstText, D::Error> {
        deserializer.deserialize_any(BurstVisitor)
    }
}

struct BurstVisitor;

impl Visitor<'_> for BurstVisitor {
    type Value = BurstText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a burst: an integer, or a size such as "64MiB""#)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<BurstText, E> {
        Ok(BurstText(v.to_owned()))
    }

    visit_numbers!(|text: String| Ok(BurstText(text)));
}
