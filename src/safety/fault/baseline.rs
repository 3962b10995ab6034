//! The trailing baseline: hourly samples over 7 days, summarised by their median.

pub(crate) const BASELINE_HOURS: usize = 7 * 24;
pub(crate) const BASELINE_MIN_HOURS: usize = 24;

/// One hour of normal operation, as the detector measured it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HourSample {
    /// Keyed limiters: the mean share of previously conforming panel keys that were denied.
    pub breadth: f64,
    /// Direct limiters: the mean share of checks denied.
    pub deny_ratio: f64,
    /// Direct limiters: the mean allowed checks per second.
    pub allowed_per_sec: f64,
}

/// What "normal" looks like for one limiter: the median of up to 7 days of hourly samples,
/// anomalous hours left out. It exists once it has 24 samples; until then the detector only
/// alerts.
///
/// Export it with [`FaultDetector::baseline`](crate::safety::FaultDetector::baseline) and import it
/// with [`FaultDetectorBuilder::baseline`](crate::safety::FaultDetectorBuilder::baseline), so a
/// restart or a deploy is not a cold start. It is pinned to a config revision: samples are
/// learned only while that revision (the last known-good one) is in force.
///
/// ```
/// use tollgate::safety::{Baseline, HourSample};
///
/// let normal = HourSample { breadth: 0.01, deny_ratio: 0.02, allowed_per_sec: 80.0 };
/// let b = Baseline::from_hours(7, std::iter::repeat(normal).take(24));
/// assert!(b.is_ready());
/// assert_eq!(b.breadth(), Some(0.01));
/// assert_eq!(b.revision(), 7);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(try_from = "BaselineRepr"))]
pub struct Baseline {
    revision: u64,
    hours: Vec<HourSample>,
}

/// What a serialised baseline holds, checked on the way in: an imported baseline keeps the
/// same rules as a learned one (finite, non-negative samples, at most 7 days).
#[cfg(feature = "serde")]
#[derive(serde::Deserialize)]
struct BaselineRepr {
    revision: u64,
    hours: Vec<HourSample>,
}

#[cfg(feature = "serde")]
impl TryFrom<BaselineRepr> for Baseline {
    type Error = &'static str;

    fn try_from(r: BaselineRepr) -> Result<Self, Self::Error> {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if r.hours
            .iter()
            .any(|h| !(ok(h.breadth) && ok(h.deny_ratio) && ok(h.allowed_per_sec)))
        {
            return Err("a baseline sample is negative or not finite");
        }
        Ok(Baseline::from_hours(r.revision, r.hours))
    }
}

impl Baseline {
    /// An empty baseline learned under config `revision`.
    pub fn new(revision: u64) -> Self {
        Self {
            revision,
            hours: Vec::new(),
        }
    }

    /// A baseline from hourly samples, oldest first; keeps the newest 7 days. Samples with a
    /// non-finite or negative figure are dropped.
    pub fn from_hours(revision: u64, hours: impl IntoIterator<Item = HourSample>) -> Self {
        let mut b = Self::new(revision);
        for h in hours {
            b.push(h);
        }
        b
    }

    /// Adds the newest hour, dropping the oldest past 7 days. Ignores a sample with a
    /// non-finite or negative figure.
    pub fn push(&mut self, hour: HourSample) {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !(ok(hour.breadth) && ok(hour.deny_ratio) && ok(hour.allowed_per_sec)) {
            return;
        }
        self.hours.push(hour);
        if self.hours.len() > BASELINE_HOURS {
            let excess = self.hours.len() - BASELINE_HOURS;
            self.hours.drain(..excess);
        }
    }

    /// The config revision this baseline was learned under.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The hourly samples, oldest first.
    pub fn hours(&self) -> &[HourSample] {
        &self.hours
    }

    /// `true` once there are at least 24 samples.
    pub fn is_ready(&self) -> bool {
        self.hours.len() >= BASELINE_MIN_HOURS
    }

    /// The median breadth, once ready.
    pub fn breadth(&self) -> Option<f64> {
        self.median(|h| h.breadth)
    }

    /// The median deny ratio, once ready.
    pub fn deny_ratio(&self) -> Option<f64> {
        self.median(|h| h.deny_ratio)
    }

    /// The median allowed checks per second, once ready.
    pub fn allowed_per_sec(&self) -> Option<f64> {
        self.median(|h| h.allowed_per_sec)
    }

    pub(crate) fn set_revision(&mut self, revision: u64) {
        self.revision = revision;
    }

    fn median(&self, field: impl Fn(&HourSample) -> f64) -> Option<f64> {
        if !self.is_ready() {
            return None;
        }
        let mut v: Vec<f64> = self.hours.iter().map(field).collect();
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        Some(if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        })
    }
}

impl Baseline {
    /// The most hourly samples kept: 7 days.
    pub const HOURS: usize = crate::safety::fault::baseline::BASELINE_HOURS;
    /// The fewest hourly samples for a baseline to exist: one day.
    pub const MIN_HOURS: usize = crate::safety::fault::baseline::BASELINE_MIN_HOURS;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(breadth: f64) -> HourSample {
        HourSample {
            breadth,
            deny_ratio: breadth,
            allowed_per_sec: 1.0,
        }
    }

    #[test]
    fn median_needs_a_day_and_keeps_a_week() {
        let mut b = Baseline::new(1);
        for i in 0..23 {
            b.push(h(f64::from(i)));
        }
        assert_eq!(b.breadth(), None);
        b.push(h(23.0));
        assert_eq!(b.breadth(), Some(11.5));
        for _ in 0..BASELINE_HOURS {
            b.push(h(2.0));
        }
        assert_eq!(b.hours().len(), BASELINE_HOURS);
        assert_eq!(b.breadth(), Some(2.0));
        b.push(h(f64::NAN));
        assert_eq!(b.hours().len(), BASELINE_HOURS);
    }
}
