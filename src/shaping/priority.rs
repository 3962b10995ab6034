//! Priority classes: classes share one cell, and each class keeps a
//! share of the burst in reserve for the classes above it.
//!
//! A class `c` with reserve `r_c` sees the tolerance `τ_c = ⌊τ·(1 − r_c)⌋` on the cell's own
//! TAT: it is allowed iff `max(tat, now) + w − now ≤ τ_c`. The clamp before the step still
//! uses the full τ, so a check of a low class never lowers a TAT that a critical class left
//! between `now + τ_c` and `now + τ`. A low-class allow therefore leaves the TAT at most
//! `now + τ_c` ahead: the last `r_c·τ` of the burst is used only by more critical classes.
//!
//! No class is ever left with no capacity: `τ_c` is at least the weight of one unit (capped
//! at τ). A reserve that needs this floor is one [`Priorities::for_quota`] and the limits
//! document reject; a limiter given one anyway (its builder and `set_quota` cannot fail)
//! lets that class reach into the reserve by less than one unit rather than never send.

use crate::engine::error::InsufficientCapacity;
use crate::engine::gcra::Params;
use crate::engine::quota::Quota;

/// One million: reserves are kept in parts per million of τ.
const PPM: u32 = 1_000_000;

/// Priority classes on one cell: the share of the burst each class leaves to the classes
/// above it (class 0 is the most critical).
///
/// Attach them with [`RateLimiterBuilder::priorities`](crate::limiter::RateLimiterBuilder::priorities)
/// or [`KeyedRateLimiterBuilder::priorities`](crate::limiter::KeyedRateLimiterBuilder::priorities), and
/// choose a class per check with [`Check::class`](crate::Check::class). A plain
/// [`check`](crate::RateLimiter::check) is class 0.
///
/// * A class listed with reserve `r` sees `(1 − r)` of the tolerance τ (the burst, in time):
///   `Priorities::new([(0, 0.0), (1, 0.2), (2, 0.5)])` lets class 1 fill the cell up to 80 %
///   and class 2 up to 50 %, so class 0 always finds at least half the burst.
/// * Class 0 is always configured: if it is not listed it has no reserve (the whole burst).
/// * A class that is not listed gets the reserve of the *least critical* listed class (the
///   highest number): unknown traffic is background traffic.
/// * A cost above a class's own capacity (`⌊τ_c / T⌋` units; for byte budgets the bytes that
///   weigh at most `τ_c`) is [`InsufficientCapacity`] with that capacity.
/// * Reserves are a share of the burst, not of the rate: in steady state every class may use
///   the whole rate when the others are idle. They follow [`set_quota`](crate::RateLimiter::set_quota).
/// * Every class can always send one unit. A reserve that would leave a class less than one
///   unit of a quota's burst (0.95 of a burst of 10) is an error from
///   [`for_quota`](Self::for_quota), the check to run before attaching classes or setting a
///   quota (the limits document runs it on every policy). A limiter given such a pair anyway
///   (attaching and [`set_quota`](crate::RateLimiter::set_quota) cannot fail) gives that
///   class one unit of capacity instead of none: it may then reach into the reserve by less
///   than one unit.
/// * On a concurrency limiter ([`ConcurrencyLimiterBuilder::priorities`](crate::concurrency::ConcurrencyLimiterBuilder::priorities)),
///   a class with reserve `r` may hold at most `max(1, ⌊limit·(1 − r)⌋)` of the permits.
/// * While the limiter passes traffic through (a fault detector or watchdog tripped), classes
///   are not applied: the pass-through ceiling applies to every class alike.
///
/// ```
/// use tollgate::{Check, ManualClock, RateLimiter};
/// use tollgate::shaping::Priorities;
///
/// let classes = Priorities::new([(0, 0.0), (1, 0.2), (2, 0.5)])?;
/// let lim = RateLimiter::builder("10/s".parse()?)
///     .clock(ManualClock::new())
///     .priorities(classes)
///     .build();
/// // Background traffic (class 2) stops at half the burst ...
/// assert!(lim.check_with(Check::cost(5).class(2))?.is_permitted());
/// assert!(!lim.check_with(Check::cost(1).class(2))?.is_permitted());
/// // ... and critical traffic still finds the other half.
/// assert!(lim.check_with(Check::cost(5).class(0))?.is_permitted());
/// // Class 2 can never ask for more than its own capacity.
/// assert_eq!(lim.check_with(Check::cost(6).class(2)).unwrap_err().capacity(), 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Priorities {
    /// `(class, reserve in ppm of τ)`, sorted by class, class 0 first, reserves
    /// non-decreasing.
    classes: Vec<(u8, u32)>,
}

impl Priorities {
    /// Classes from `(class, reserve)` pairs, the reserve a share of the burst in `[0, 1)`.
    ///
    /// Shares are kept to parts per million (rounded to nearest).
    ///
    /// # Errors
    ///
    /// [`PriorityError`] if a reserve is not in `[0, 1)`, a class is listed twice, or a less
    /// critical class (higher number) reserves less than a more critical one.
    ///
    /// ```
    /// use tollgate::shaping::{Priorities, PriorityError};
    ///
    /// let p = Priorities::new([(1, 0.2), (2, 0.5)])?;
    /// assert_eq!(p.reserve(0), 0.0); // class 0 is implied, with no reserve
    /// assert_eq!(p.reserve(7), 0.5); // unknown classes: the least critical one's reserve
    /// assert!(matches!(Priorities::new([(1, 1.0)]), Err(PriorityError::Share { .. })));
    /// # Ok::<(), PriorityError>(())
    /// ```
    pub fn new(classes: impl IntoIterator<Item = (u8, f64)>) -> Result<Self, PriorityError> {
        let mut list = Vec::new();
        for (class, share) in classes {
            let ppm = to_ppm(share).ok_or(PriorityError::Share { class, share })?;
            list.push((class, ppm));
        }
        list.sort_by_key(|&(class, _)| class);
        if let Some(w) = list.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(PriorityError::Duplicate { class: w[0].0 });
        }
        if list.first().is_none_or(|&(class, _)| class != 0) {
            list.insert(0, (0, 0));
        }
        if let Some(w) = list.windows(2).find(|w| w[1].1 < w[0].1) {
            return Err(PriorityError::Inverted {
                class: w[1].0,
                above: w[0].0,
            });
        }
        Ok(Self { classes: list })
    }

    /// The share of the burst `class` leaves to more critical classes (after the fallback for
    /// unlisted classes).
    ///
    /// ```
    /// use tollgate::shaping::Priorities;
    ///
    /// let p = Priorities::new([(0, 0.0), (3, 0.25)])?;
    /// assert_eq!(p.reserve(3), 0.25);
    /// assert_eq!(p.reserve(1), 0.25);
    /// # Ok::<(), tollgate::shaping::PriorityError>(())
    /// ```
    pub fn reserve(&self, class: u8) -> f64 {
        f64::from(self.reserve_of(class).0) / f64::from(PPM)
    }

    /// The classes as configured, most critical first, with their reserves (class 0
    /// included).
    ///
    /// ```
    /// use tollgate::shaping::Priorities;
    ///
    /// let p = Priorities::new([(2, 0.5)])?;
    /// assert_eq!(p.classes().collect::<Vec<_>>(), [(0, 0.0), (2, 0.5)]);
    /// # Ok::<(), tollgate::shaping::PriorityError>(())
    /// ```
    pub fn classes(&self) -> impl Iterator<Item = (u8, f64)> + '_ {
        self.classes
            .iter()
            .map(|&(c, ppm)| (c, f64::from(ppm) / f64::from(PPM)))
    }

    /// These classes, if each can send at least one unit (request or byte) of `quota`'s
    /// burst through its reserve alone; the limits document applies the same rule to a
    /// policy's `classes`.
    ///
    /// Run it before attaching classes to a limiter with a quota, and before
    /// [`set_quota`](crate::RateLimiter::set_quota) lowers the burst: neither can fail, and
    /// they give a class that the reserve leaves empty one unit (see [`Priorities`]).
    ///
    /// # Errors
    ///
    /// [`PriorityError::Starved`] for the most critical class that the reserve leaves less
    /// than one unit.
    ///
    /// ```
    /// use tollgate::Quota;
    /// use tollgate::shaping::{Priorities, PriorityError};
    ///
    /// let quota: Quota = "10/s".parse()?;
    /// let classes = Priorities::new([(1, 0.5), (2, 0.95)])?;
    /// let err = classes.clone().for_quota(&quota).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "class 2 can never send: a reserve of 0.95 leaves it less than one request of the burst of 10"
    /// );
    /// assert_eq!(classes.clone().for_quota(&"20/s".parse()?)?, classes);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_quota(self, quota: &Quota) -> Result<Self, PriorityError> {
        let starved = self.starved(quota).next();
        starved.map_or(Ok(self), Err)
    }

    /// Each listed class (most critical first) whose reserve leaves it less than one unit of
    /// `quota`'s burst: the one rule behind [`for_quota`](Self::for_quota) and the limits
    /// document's validation.
    pub(crate) fn starved<'a>(
        &'a self,
        quota: &'a Quota,
    ) -> impl Iterator<Item = PriorityError> + 'a {
        let p = quota.params();
        self.classes
            .iter()
            .filter(move |&&(_, ppm)| p.units_in(Reserve(ppm).share_of(p.tau)) == 0)
            .map(move |&(class, ppm)| PriorityError::Starved {
                class,
                reserve: f64::from(ppm) / f64::from(PPM),
                burst: quota.burst(),
                bytes: quota.is_bytes(),
            })
    }

    #[inline]
    pub(crate) fn reserve_of(&self, class: u8) -> Reserve {
        let ppm = match self.classes.binary_search_by_key(&class, |&(c, _)| c) {
            Ok(i) => self.classes[i].1,
            // Never empty: class 0 is always present.
            Err(_) => self.classes.last().map_or(0, |&(_, ppm)| ppm),
        };
        Reserve(ppm)
    }
}

fn to_ppm(share: f64) -> Option<u32> {
    if !(0.0..1.0).contains(&share) {
        return None;
    }
    // share ∈ [0, 1): the product is in [0, 10^6], an exact conversion after rounding.
    let ppm = (share * f64::from(PPM)).round() as u32;
    (ppm < PPM).then_some(ppm)
}

/// A mistake in a [`Priorities`] list.
///
/// ```
/// use tollgate::shaping::{Priorities, PriorityError};
///
/// let err = Priorities::new([(1, 0.5), (2, 0.2)]).unwrap_err();
/// assert_eq!(err, PriorityError::Inverted { class: 2, above: 1 });
/// assert_eq!(err.to_string(), "class 2 reserves less than the more critical class 1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PriorityError {
    /// A reserve outside `[0, 1)` (or NaN).
    #[error("reserve {share} of class {class} is not in [0, 1)")]
    Share {
        /// The class.
        class: u8,
        /// The reserve as given.
        share: f64,
    },
    /// A class listed twice.
    #[error("class {class} is listed twice")]
    Duplicate {
        /// The class.
        class: u8,
    },
    /// A less critical class that reserves less than a more critical one: it would reach into
    /// the reserve kept for the class above it.
    #[error("class {class} reserves less than the more critical class {above}")]
    Inverted {
        /// The less critical class.
        class: u8,
        /// The more critical class with the larger reserve.
        above: u8,
    },
    /// A reserve that leaves its class less than one unit of a quota's burst: every check of
    /// that class would be [`InsufficientCapacity`] ([`Priorities::for_quota`]).
    #[error(
        "class {class} can never send: a reserve of {reserve} leaves it less than one {unit} of \
         the burst of {burst}",
        unit = if *bytes { "byte" } else { "request" }
    )]
    Starved {
        /// The class.
        class: u8,
        /// Its reserve.
        reserve: f64,
        /// The quota's burst, in requests or bytes.
        burst: u64,
        /// Whether the quota is a byte budget (the burst is in bytes).
        bytes: bool,
    },
}

/// The reserve of one class, in parts per million of τ; 0 means the whole tolerance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reserve(u32);

impl Reserve {
    /// No reserve: the whole tolerance (class 0, or no classes configured).
    pub(crate) const NONE: Reserve = Reserve(0);

    /// The tolerance of a class on a cell of parameters `p`: its share of τ, and never less
    /// than one unit's weight (capped at τ), so that no class is left with no capacity.
    #[inline]
    pub(crate) fn tolerance(self, p: &Params) -> u64 {
        if self.0 == 0 {
            return p.tau;
        }
        p.at_least_one_unit(self.share_of(p.tau))
    }

    /// The slots a class may fill of a concurrency limit of `limit` permits:
    /// `⌊limit·(10^6 − r)/10^6⌋`, rounded down so that a class never reaches into the
    /// reserve, and never less than one slot (no class is left unable to run). A class with
    /// no reserve (class 0 by default) has the whole limit.
    #[inline]
    pub(crate) fn slots(self, limit: u32) -> u32 {
        if self.0 == 0 {
            return limit;
        }
        // limit·keep < 2^32·2^20 fits u64, and the quotient is at most `limit`.
        let keep = u64::from(limit) * u64::from(PPM - self.0) / u64::from(PPM);
        u32::try_from(keep).unwrap_or(limit).max(1)
    }

    /// `⌊τ·(10^6 − r)/10^6⌋`: rounded down, so a class never reaches into the reserve.
    #[inline]
    fn share_of(self, tau: u64) -> u64 {
        let keep = PPM - self.0;
        // τ·keep < 2^44·2^20 fits u64 (keep ≤ 10^6 < 2^20): a multiply and a division by a
        // constant, without the u128 division call that larger τ need.
        if tau < 1 << 44 {
            return tau * u64::from(keep) / u64::from(PPM);
        }
        let keep = u128::from(tau) * u128::from(keep) / u128::from(PPM);
        // keep ≤ tau.
        keep as u64
    }
}

/// The weight of `cost` units for a class of tolerance `tol`, or the class's capacity as an
/// [`InsufficientCapacity`].
#[inline]
pub(crate) fn weight_within(p: &Params, cost: u64, tol: u64) -> Result<u64, InsufficientCapacity> {
    match p.weight(cost) {
        Some(w) if w <= tol => Ok(w),
        _ => Err(InsufficientCapacity::new(cost, p.units_in(tol))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_rounds_down_and_keeps_class_zero_whole() {
        assert_eq!(Reserve::NONE.share_of(1_000), 1_000);
        assert_eq!(Reserve(200_000).share_of(1_000), 800);
        assert_eq!(Reserve(333_333).share_of(10), 6);
        assert_eq!(Reserve(999_999).share_of(u64::MAX), u64::MAX / 1_000_000);
        // Both sides of the u64 shortcut agree with the exact u128 product.
        for tau in [(1 << 44) - 1, 1 << 44, (1 << 44) + 12_345, 1 << 62] {
            for r in [1, 200_000, 999_999] {
                let exact = u128::from(tau) * u128::from(PPM - r) / u128::from(PPM);
                assert_eq!(u128::from(Reserve(r).share_of(tau)), exact, "{tau} {r}");
            }
        }
        // T = 1 ns, τ = 1,000 ns.
        let p = Params::request(1, 1_000);
        assert_eq!(Reserve::NONE.tolerance(&p), 1_000);
        assert_eq!(Reserve(200_000).tolerance(&p), 800);
    }

    #[test]
    fn slots_round_down_keep_one_and_keep_class_zero_whole() {
        assert_eq!(Reserve::NONE.slots(10), 10);
        assert_eq!(Reserve::NONE.slots(u32::MAX), u32::MAX);
        assert_eq!(Reserve(200_000).slots(10), 8);
        assert_eq!(Reserve(500_000).slots(10), 5);
        assert_eq!(Reserve(333_333).slots(10), 6);
        // Never below one slot.
        assert_eq!(Reserve(950_000).slots(10), 1);
        assert_eq!(Reserve(999_999).slots(1), 1);
        assert_eq!(Reserve(999_999).slots(u32::MAX), 4_294);
    }

    #[test]
    fn tolerance_is_never_below_one_unit() {
        // T = 100 ns, τ = 1,000 ns (a burst of 10): 95 % leaves 50 ns, half a request.
        let p = Params::request(100, 1_000);
        assert_eq!(Reserve(950_000).share_of(p.tau), 50);
        assert_eq!(Reserve(950_000).tolerance(&p), 100);
        assert_eq!(Reserve(999_999).tolerance(&p), 100);
        assert_eq!(Reserve(900_000).tolerance(&p), 100);
        assert_eq!(Reserve(800_000).tolerance(&p), 200);
        // 2 Gbit/s is 4 ns a byte; a burst of 10 B is 40 ns.
        let bytes = "2Gbit/s;burst=10B".parse::<Quota>().unwrap().params(); // a test: a panic is its failure
        assert_eq!(Reserve(950_000).tolerance(&bytes), 4);
        assert_eq!(Reserve(900_000).tolerance(&bytes), 4);
        assert_eq!(Reserve(500_000).tolerance(&bytes), 20);
        // A unit heavier than τ (not built by any quota) is still capped at τ.
        assert_eq!(
            Reserve(500_000).tolerance(&Params::request(2_000, 1_000)),
            1_000
        );
    }

    #[test]
    fn lists_are_validated() {
        assert!(matches!(
            Priorities::new([(0, f64::NAN)]),
            Err(PriorityError::Share { class: 0, .. })
        ));
        assert!(matches!(
            Priorities::new([(1, -0.1)]),
            Err(PriorityError::Share { class: 1, .. })
        ));
        assert_eq!(
            Priorities::new([(1, 0.1), (1, 0.2)]),
            Err(PriorityError::Duplicate { class: 1 })
        );
        assert_eq!(
            Priorities::new([(0, 0.3), (1, 0.2)]),
            Err(PriorityError::Inverted { class: 1, above: 0 })
        );
        let p = Priorities::new([(0, 0.1), (4, 0.5)]).unwrap(); // a test: a panic is its failure
        assert_eq!(p.reserve_of(0), Reserve(100_000));
        assert_eq!(p.reserve_of(2), Reserve(500_000));
        assert_eq!(p.reserve_of(255), Reserve(500_000));
    }
}
