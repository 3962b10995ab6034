//! [`QuotaChange`]: one quota replaced by another, and by how much.

use core::fmt;

use serde::Serialize;

use crate::engine::quota::Quota;

/// Which way a quota moved; see [`QuotaChange::direction`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Direction {
    /// Lower rate or burst, and nothing higher.
    Tighter,
    /// Higher rate or burst, and nothing lower.
    Looser,
    /// One of rate and burst went up and the other down (or the change is below f64
    /// precision).
    Mixed,
    /// From requests to bytes or back: no factor compares them.
    Incomparable,
}

/// One quota replaced by another, with how much tighter or looser it is.
///
/// Each factor is old ÷ new: the rate factor compares the sustained rates (count per
/// period, in bytes for a byte budget), the burst factor the effective bursts; a factor
/// above 1 is a tightening. [`factor`](QuotaChange::factor) is the larger of the two, each
/// taken in whichever direction it moved.
///
/// ```
/// use tollgate::limits::{Direction, QuotaChange};
///
/// let change = QuotaChange::new("100/s".parse()?, "10/min".parse()?);
/// assert_eq!(change.direction(), Direction::Tighter);
/// assert_eq!(change.factor(), 600.0);
/// assert_eq!(change.to_string(), "100/s → 10/min: 600× tighter");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct QuotaChange {
    from: Quota,
    to: Quota,
    direction: Direction,
    factor: f64,
    rate_factor: f64,
    burst_factor: f64,
}

impl QuotaChange {
    /// Compares two quotas.
    ///
    /// ```
    /// use tollgate::limits::QuotaChange;
    ///
    /// let change = QuotaChange::new("10/s".parse()?, "10/min".parse()?);
    /// assert_eq!(change.rate_factor(), 60.0);
    /// assert_eq!(change.burst_factor(), 1.0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(from: Quota, to: Quota) -> QuotaChange {
        if from.is_bytes() != to.is_bytes() {
            let inf = f64::INFINITY;
            return QuotaChange {
                from,
                to,
                direction: Direction::Incomparable,
                factor: inf,
                rate_factor: inf,
                burst_factor: inf,
            };
        }
        let rate_factor = rate_ratio(&from, &to);
        let burst_factor = from.burst() as f64 / to.burst() as f64;
        let tighter = rate_factor > 1.0 || burst_factor > 1.0;
        let looser = rate_factor < 1.0 || burst_factor < 1.0;
        let direction = match (tighter, looser) {
            (true, false) => Direction::Tighter,
            (false, true) => Direction::Looser,
            _ => Direction::Mixed,
        };
        let either_way = |f: f64| f.max(1.0 / f);
        QuotaChange {
            from,
            to,
            direction,
            factor: either_way(rate_factor).max(either_way(burst_factor)),
            rate_factor,
            burst_factor,
        }
    }

    /// The quota before.
    ///
    /// ```
    /// let change = tollgate::limits::QuotaChange::new("10/s".parse()?, "5/s".parse()?);
    /// assert_eq!(change.from().count(), 10);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn from(&self) -> Quota {
        self.from
    }

    /// The quota after.
    ///
    /// ```
    /// let change = tollgate::limits::QuotaChange::new("10/s".parse()?, "5/s".parse()?);
    /// assert_eq!(change.to().count(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn to(&self) -> Quota {
        self.to
    }

    /// Tighter, looser, mixed, or incomparable.
    ///
    /// ```
    /// use tollgate::limits::{Direction, QuotaChange};
    ///
    /// let change = QuotaChange::new("10/s".parse()?, "5/s;burst=20".parse()?);
    /// assert_eq!(change.direction(), Direction::Mixed);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The larger of the rate and burst factors, each taken in the direction it moved (so at
    /// least 1); infinite when the change is [`Incomparable`](Direction::Incomparable).
    ///
    /// ```
    /// let change = tollgate::limits::QuotaChange::new("10/s".parse()?, "100/s".parse()?);
    /// assert_eq!(change.factor(), 10.0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// Old sustained rate ÷ new sustained rate: above 1 is tighter.
    ///
    /// ```
    /// let change = tollgate::limits::QuotaChange::new("2Gbit/s".parse()?, "125MB/s".parse()?);
    /// assert_eq!(change.rate_factor(), 2.0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn rate_factor(&self) -> f64 {
        self.rate_factor
    }

    /// Old effective burst ÷ new effective burst: above 1 is tighter.
    ///
    /// ```
    /// let change = tollgate::limits::QuotaChange::new("100/s;burst=250".parse()?, "100/s".parse()?);
    /// assert_eq!(change.burst_factor(), 2.5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn burst_factor(&self) -> f64 {
        self.burst_factor
    }

    /// How much tighter anything got: the larger of the rate and burst factors, at least 1
    /// (1 for a pure loosening); infinite when incomparable. This is what the guard checks.
    ///
    /// ```
    /// let change = tollgate::limits::QuotaChange::new("10/s".parse()?, "5/s;burst=20".parse()?);
    /// assert_eq!(change.tightening(), 2.0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn tightening(&self) -> f64 {
        self.rate_factor.max(self.burst_factor).max(1.0)
    }
}

/// Old rate ÷ new rate, as `(count·bits·period)` products of exact integers so that round
/// ratios such as 60 come out exact.
fn rate_ratio(from: &Quota, to: &Quota) -> f64 {
    let per_period = |q: &Quota| q.count() as f64 * work_unit_bits(q);
    let nanos = |q: &Quota| q.period().as_nanos() as f64;
    (per_period(from) * nanos(to)) / (per_period(to) * nanos(from))
}

/// The bits of one unit of the quota's count: 8 for a request (the unit cancels out), and for
/// a byte budget its work unit, which `Quota` does not expose but its canonical string spells.
fn work_unit_bits(q: &Quota) -> f64 {
    if !q.is_bytes() {
        return 8.0;
    }
    let canonical = q.to_string();
    let rate = canonical.split('/').next().unwrap_or("");
    let unit = rate.trim_start_matches(|c: char| c.is_ascii_digit());
    match unit {
        "kB" => 8e3,
        "MB" => 8e6,
        "GB" => 8e9,
        "KiB" => 8.0 * 1024.0,
        "MiB" => 8.0 * 1024.0 * 1024.0,
        "GiB" => 8.0 * 1024.0 * 1024.0 * 1024.0,
        "bit" => 1.0,
        "kbit" => 1e3,
        "Mbit" => 1e6,
        "Gbit" => 1e9,
        _ => 8.0,
    }
}

/// A factor as people read it: `600×`, `2.5×`, `∞×`.
pub(super) struct Factor(pub(super) f64);

impl fmt::Display for Factor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        if x.is_infinite() {
            f.write_str("∞×")
        } else if (x - x.round()).abs() < 0.005 {
            write!(f, "{}×", x.round())
        } else {
            write!(f, "{x:.2}×")
        }
    }
}

impl fmt::Display for QuotaChange {
    /// `100/s → 10/min: 600× tighter`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} → {}: ", self.from, self.to)?;
        let inv = |x: f64| 1.0 / x;
        match self.direction {
            Direction::Tighter => write!(f, "{} tighter", Factor(self.factor)),
            Direction::Looser => write!(f, "{} looser", Factor(self.factor)),
            Direction::Incomparable => f.write_str("requests and bytes do not compare"),
            Direction::Mixed => {
                let part = |x: f64| match x {
                    x if x > 1.0 => format!("{} tighter", Factor(x)),
                    x if x < 1.0 => format!("{} looser", Factor(inv(x))),
                    _ => "unchanged".to_owned(),
                };
                let (rate, burst) = (part(self.rate_factor), part(self.burst_factor));
                write!(f, "rate {rate}, burst {burst}")
            }
        }
    }
}
