//! [`RateLimiter::refund`]: giving back a cost the cell admitted.

use crate::engine::refund;
use crate::limiter::direct::RateLimiter;

impl RateLimiter {
    /// Gives back `n` units that a check admitted earlier (a request that turned out not to
    /// need them, or one that another limit denied): the cell's TAT moves back by the weight of
    /// `n` units, but never before now — a refund returns the cell at most to full, never
    /// beyond, so it can never grant more than the burst. A refund right after the allow it
    /// undoes, at the same instant, restores the cell exactly.
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
}
