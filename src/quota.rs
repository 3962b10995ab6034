//! TEMPORARY STUB (replaced by the real parser).
#![allow(missing_docs, dead_code)]
use core::fmt;
use core::num::{NonZeroU32, NonZeroU64};
use crate::gcra::{Params, Per, MAX_TAU};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota { count: u64, period: u64, burst: u64 }

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaErrorKind { MissingUnit }
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("missing unit in \"{0}\": write \"{0}/s\" or \"{0}/min\"")]
pub struct QuotaError(String);
impl QuotaError { pub fn kind(&self) -> QuotaErrorKind { QuotaErrorKind::MissingUnit } }

impl core::str::FromStr for Quota {
    type Err = QuotaError;
    fn from_str(s: &str) -> Result<Self, QuotaError> {
        let (rate, burst) = match s.split_once(";burst=") { Some((r, b)) => (r, Some(b)), None => (s, None) };
        let (c, u) = rate.split_once('/').ok_or(QuotaError(s.into()))?;
        let count: u64 = c.parse().map_err(|_| QuotaError(s.into()))?;
        let period = match u { "ms" => 1_000_000, "s" => 1_000_000_000, "min" => 60_000_000_000, "h" => 3_600_000_000_000, "d" => 86_400_000_000_000u64, _ => return Err(QuotaError(s.into())) };
        let burst = match burst { Some(b) => b.parse().map_err(|_| QuotaError(s.into()))?, None => count };
        Ok(Quota { count, period, burst })
    }
}
impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, "{}/{}ns;burst={}", self.count, self.period, self.burst) }
}
impl Quota {
    pub fn per_second(n: NonZeroU32) -> Self { Quota { count: n.get().into(), period: 1_000_000_000, burst: n.get().into() } }
    pub fn with_burst(self, b: impl Into<NonZeroU64>) -> Self { Quota { burst: b.into().get(), ..self } }
    pub fn burst(&self) -> u64 { self.params().burst }
    pub(crate) fn params(&self) -> Params {
        let t = self.period.div_ceil(self.count);
        let burst = self.burst.min(MAX_TAU / t);
        Params { per: Per::Request { t }, tau: burst * t, burst }
    }
}
