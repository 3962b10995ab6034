//! [`RateLimiter::refund`], [`charge`](RateLimiter::charge) and
//! [`reset`](RateLimiter::reset): settling a cost after the fact.

use crate::engine::charge::{self, Charged};
use crate::engine::refund;
use crate::limiter::direct::RateLimiter;

impl RateLimiter {
    /// Gives back `n` units that a check admitted earlier (a request that turned out not to
    /// need them, or one that another limit denied): the cell's TAT moves back by the weight of
    /// `n` units, but never before now — a refund returns the cell at most to full, never
    /// beyond, so it can never grant more than the burst. A refund right after the allow it
    /// undoes, at the same instant, restores the cell exactly.
    ///
    /// On a limiter built with [`max_debt`](crate::limiter::RateLimiterBuilder::max_debt), a
    /// refund also pays off debt a [`charge`](Self::charge) left, up to full.
    ///
    /// `n` is counted in units of the quota in force when it is refunded (after a
    /// [`set_quota`](Self::set_quota), units of the new quota). Lock-free (one
    /// compare-and-swap), and safe against checks and quota changes racing it. Refunding
    /// more than was admitted only fills the cell: do not refund what you did not take.
    ///
    /// The refunded check stays counted as allowed in [`stats`](Self::stats) (counters only
    /// grow; the check was admitted when it was made). A retry's debit of a
    /// [`RetryBudget`](crate::shaping::RetryBudget) is not given back. During a pass-through a
    /// shadow-allowed check wrote the cell and may be refunded like an allow; a shadow-denied
    /// one did not, and must not be.
    ///
    /// ```
    /// use tollgate::{ManualClock, RateLimiter};
    ///
    /// let lim = RateLimiter::builder("10/s".parse()?).clock(ManualClock::new()).build();
    /// assert!(lim.check_n(4)?.is_permitted());
    /// lim.refund(4); // the request was rejected elsewhere: it consumed nothing here
    /// assert_eq!(lim.check_n(0)?.allowed().map(|a| a.remaining()), Some(10));
    /// lim.refund(100); // a full cell stays full: never more than the burst
    /// assert!(lim.check_n(10)?.is_permitted());
    /// assert!(!lim.check().is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, n: u64) {
        if n == 0 {
            return;
        }
        loop {
            let (p, token) = self.resolve();
            let w = p.refund_weight(n);
            let now = self.now();
            let c = &self.cell.0;
            let valid = || token.still_valid(&self.params, &c.gate);
            // A direct cell never changes hands: nothing to undo after a swap.
            if refund::refund_word(&c.tat, 0, now, w, valid, |_| {}).is_some() {
                return;
            }
        }
    }

    /// Charges `n` more units, whatever room the cell has: for a cost known only after the
    /// request ran (tokens a response reported, a login that failed). The TAT moves forward by
    /// the weight of `n` units; past a drained cell the limiter is **in debt**, and every check
    /// is denied, with an exact retry-after that covers the debt, until time pays it off.
    ///
    /// The debt is capped by [`max_debt`](crate::limiter::RateLimiterBuilder::max_debt)
    /// (default zero: a charge then drains the cell at most). What does not fit under the cap
    /// is reported in [`Charged::unpaid`], never silently dropped. A charge never hands
    /// anything out and never panics, whatever `n`. Lock-free (one compare-and-swap), safe
    /// against checks, refunds and quota changes racing it; a quota change rescales a cell's
    /// fill level and forgives debt beyond a drained cell. Charges are not counted as checks in
    /// [`stats`](Self::stats).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, RateLimiter, Verdict};
    ///
    /// let lim = RateLimiter::builder("10/s".parse()?)
    ///     .clock(ManualClock::new())
    ///     .max_debt(Duration::from_secs(60))
    ///     .build();
    /// assert!(lim.check().is_permitted());
    /// let c = lim.charge(29); // the response said it cost 30 units in all
    /// assert!(c.is_paid());
    /// assert_eq!(c.debt(), Duration::from_secs(2)); // 30 units = 3 s of a 1 s burst
    /// match lim.check() {
    ///     Verdict::Deny(d) => assert_eq!(d.retry_after(), Duration::from_millis(2_100)),
    ///     other => panic!("in debt, got {other:?}"),
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn charge(&self, n: u64) -> Charged {
        if n == 0 {
            return Charged::new(0, 0);
        }
        loop {
            let (p, token) = self.resolve();
            let w = p.weight_uncapped(n);
            let now = self.now();
            let c = &self.cell.0;
            let valid = || token.still_valid(&self.params, &c.gate);
            if let Some((tat, applied)) = charge::charge_word(&c.tat, 0, now, w, p.bound(), valid) {
                return p.charged(n, w, applied, tat, now);
            }
        }
    }

    /// Resets the cell to full, as if it had never been checked: a whole burst is available
    /// again, and any debt is forgiven. For an operator clearing a customer after an
    /// incident. Lock-free, safe against checks racing it (a check that lands just before the
    /// reset is forgotten with the rest; one just after it is charged as usual).
    ///
    /// ```
    /// use tollgate::{ManualClock, RateLimiter};
    ///
    /// let lim = RateLimiter::builder("2/min".parse()?).clock(ManualClock::new()).build();
    /// assert!(lim.check_n(2)?.is_permitted());
    /// assert!(!lim.check().is_permitted());
    /// lim.reset();
    /// assert!(lim.check_n(2)?.is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self) {
        loop {
            let (_, token) = self.resolve();
            let now = self.now();
            let c = &self.cell.0;
            let valid = || token.still_valid(&self.params, &c.gate);
            // A refund of everything: the TAT goes back to now, never further.
            if refund::refund_word(&c.tat, 0, now, u64::MAX, valid, |_| {}).is_some() {
                return;
            }
        }
    }
}
