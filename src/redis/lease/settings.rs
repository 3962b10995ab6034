//! The lease settings of [`SharedRateLimiterBuilder`].

use core::time::Duration;

use super::Leases;
use crate::redis::builder::SharedRateLimiterBuilder;
use crate::redis::error::BackendError;
use crate::redis::limit::MAX_TAU_US;

/// The lease settings.
impl SharedRateLimiterBuilder {
    /// Leases for hot customers (off by default): a customer that made at least
    /// `max(2 · max_cells, rate · lease_time)` checks on this instance within one
    /// [`lease_time`](Self::lease_time) (or the one before) gets up to `max_cells` of its next
    /// cells reserved in one call — its TAT in Redis advanced by their weight, so they are
    /// charged up front — and this instance spends them with no round trip, each no earlier
    /// than the instant a plain check would allow it and no later than its TAT. An unspent
    /// cell lapses then; there is no refund call (later cells, other instances', are charged
    /// behind it: lowering the TAT would let them conform early). A cold customer keeps one
    /// call per check with exact verdicts.
    ///
    /// * **Grant.** The cells that conform within `lease_time` of the call, at most
    ///   `max_cells`: a customer at or above its rate gets `min(max_cells, rate · lease_time)`
    ///   cells per call. None conforms that soon: a plain denial, exact retry-after.
    /// * **Bounds.** In every window of length Δ the customer's admissions over all instances
    ///   stay ≤ burst + rate·Δ + 1, as without leases. The cost is under-admission against an
    ///   exact GCRA on the same checks: over any stretch of length D from a fresh start (and
    ///   every prefix of it), at most N · `max_cells` · (⌊D / `lease_time`⌋ + 1) on N
    ///   instances — with one quota throughout, a client clock (on the server's `TIME`, up to
    ///   the round trip and the clocks' drift), and a [`deadline`](Self::deadline) shorter
    ///   than `lease_time` (one lease call at a time). Hotness asks for the
    ///   customer's rate on this instance because a lease's cells fall due at that rate; an
    ///   instance with fewer checks would let most of them lapse.
    /// * **Runs.** Cells cost admissions when they lapse, and also when one instance holds
    ///   cells that conform now while another's checks meet a full bucket: the exact GCRA
    ///   admits those checks and, later, the holder's too. So an instance leases a customer
    ///   in runs: a lease is asked only when this instance holds none of the customer's cells
    ///   (never more than `max_cells` held), and the next lease of a run is granted only if
    ///   the customer's TAT has stayed at or ahead of the clock since the previous one (the
    ///   script checks it; otherwise the call is a plain check). A lapse, such a gap or a lease
    ///   call that got no reply ends the run, and a new run begins at most once per
    ///   `lease_time`: each run costs at most `max_cells`. A customer whose bucket drains
    ///   between bursts therefore gets leases in one burst per `lease_time` on each instance,
    ///   and plain calls in the others.
    /// * **Answers.** A check waiting for a reserved cell is denied with `retry_after` exact on
    ///   that cell's schedule, although another instance may hold earlier cells; `remaining`
    ///   counts every leased cell as spent.
    /// * **Scope.** One-unit checks of a limiter with one limit: a [`limit`](Self::limit)
    ///   added turns leases off (the cells of two limits do not fall due together), a cost
    ///   other than 1 and [`peek_key`](crate::redis::SharedRateLimiter::peek_key) make a plain call, and
    ///   [`set_quota`](crate::redis::SharedRateLimiter::set_quota) ends every lease of this instance. A
    ///   lease call is a normal call for the deadline, the breaker, the failure policy and
    ///   the cluster routing.
    /// * **Fleet.** Every instance sharing a prefix must use the same `lease_time`: the script
    ///   lets a TAT run `lease_time` past `now + τ` only for a caller that says so, and one
    ///   with a shorter horizon cuts the reservation back (letting its cells be admitted
    ///   twice).
    /// * **Quota changes.** [`set_quota`](crate::redis::SharedRateLimiter::set_quota) ends every lease
    ///   of this instance when it returns: no check that starts after it is answered from a
    ///   cell leased under the old quota. A lease call in flight across the change keeps no
    ///   cell (its own check is answered as a plain call sent before the change would be).
    ///   Other instances learn nothing from Redis: until their own `set_quota` runs, they
    ///   spend the cells they hold (each lapses at most `lease_time + τ` after its grant) and
    ///   take new leases under the old quota. The grant does not carry the quota: an instance
    ///   could see that the customer's TAT was last written under another τ, but not which
    ///   of the two quotas is current. A quota change has to reach every instance.
    ///
    /// `max_cells` of 0 or above 2^20 fails at [`build`](Self::build).
    ///
    /// ```
    /// # use tollgate::redis::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("1000/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .lease(20)
    ///     .build()?;
    /// assert_eq!(lim.stats().leases_taken, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease(mut self, max_cells: u32) -> Self {
        self.lease = Some(max_cells);
        self
    }

    /// The lease horizon (default 1 s): a lease reserves only cells that conform within it,
    /// and hotness is counted per `lease_time`. One second lets a customer of 20 requests per
    /// second or more fill a lease of 20, keeps cells from being reserved more than a second
    /// ahead of their use, and makes hotness a count over a second (the customer's rate seen
    /// on this instance). Every instance sharing a prefix must use the same value (see
    /// [`lease`](Self::lease)). Zero, or above 2^50 µs, fails at [`build`](Self::build).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tollgate::redis::SharedRateLimiter;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let lim = SharedRateLimiter::builder("1000/s".parse()?, "redis://127.0.0.1:6379/")
    ///     .lease(50)
    ///     .lease_time(Duration::from_millis(200))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease_time(mut self, lease_time: Duration) -> Self {
        self.lease_time = lease_time;
        self
    }

    /// The lease table, if leases are on and can apply (one limit).
    pub(crate) fn leases(&self) -> Result<Option<Leases>, BackendError> {
        let Some(max_cells) = self.lease else {
            return Ok(None);
        };
        if !(1..=MAX_LEASE_CELLS).contains(&max_cells) {
            return Err(BackendError::InvalidSetting(
                "a lease must hold 1 to 2^20 cells",
            ));
        }
        let horizon = u64::try_from(self.lease_time.as_micros()).unwrap_or(u64::MAX);
        if !(1..=MAX_TAU_US).contains(&horizon) {
            return Err(BackendError::InvalidSetting(
                "the lease time must be 1 µs to 2^50 µs",
            ));
        }
        Ok((self.limits.len() == 1).then(|| Leases::new(max_cells, horizon)))
    }
}

/// The most cells one lease may hold (the script's bound).
const MAX_LEASE_CELLS: u32 = 1 << 20;
