//! [`RateLimiter::check_with`]: a check with a cost, an attempt number and a priority class.

use super::RateLimiter;
use crate::engine::cell::{self, Attempt};
use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::engine::verdict::{DenyReason, Verdict};
use crate::limiter::guard::Guard;
use crate::shaping::priority;

impl RateLimiter {
    /// Checks with per-request arguments: cost, attempt, priority class.
    ///
    /// With [`Priorities`](crate::shaping::Priorities) attached, the check sees its class's tolerance; with a
    /// [`RetryBudget`](crate::shaping::RetryBudget) attached, a retry (attempt ≥ 1) must fit the budget as well as the
    /// quota; originals and retries are counted apart ([`stats`](Self::stats)). Without
    /// classes or a budget, the class is ignored and this is [`check_n`](Self::check_n).
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds the burst, or the capacity of its class.
    ///
    /// ```
    /// use tollgate::{Check, ManualClock, RateLimiter};
    /// use tollgate::shaping::Priorities;
    ///
    /// let lim = RateLimiter::builder("100/s".parse()?)
    ///     .clock(ManualClock::new())
    ///     .priorities(Priorities::new([(1, 0.5)])?)
    ///     .build();
    /// assert!(lim.check_with(Check::cost(50).class(1))?.is_permitted());
    /// assert!(!lim.check_with(Check::cost(1).class(1))?.is_permitted());
    /// assert!(lim.check_with(Check::cost(50))?.is_permitted()); // class 0: the reserve
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_with(&self, check: Check) -> Result<Verdict, InsufficientCapacity> {
        match &self.guard {
            None => {
                let v = self.check_n(check.units())?;
                if check.attempt_number() > 0 && check.units() > 0 {
                    self.counters.retry(v.is_permitted());
                }
                Ok(v)
            }
            Some(g) => self.check_attached(g, check),
        }
    }

    /// [`check_with`](Self::check_with) with something attached: the class's tolerance, the
    /// retry budget (peek, step, debit), the counts.
    #[inline(never)]
    fn check_attached(&self, g: &Guard, check: Check) -> Result<Verdict, InsufficientCapacity> {
        let retry = check.attempt_number() > 0;
        let now = g.now(&self.clock);
        if g.pass_reason(now).is_some() {
            return self.check_attached_general(g, check);
        }
        // In steady state: the class's tolerance, the budget's peek once the cost is known to
        // fit, the step, the counts — as below, without the full parameter set.
        let observe = |v: Verdict| {
            g.observe(&self.counters, &v, None, retry, || now);
            Ok(v)
        };
        let over_budget = || match retry {
            true => Some(observe(g.over_budget(now)?)),
            false => None,
        };
        let reserve = g.reserve(check.priority_class());
        let general = || self.check_attached_general(g, check);
        self.step_bare(
            now,
            (check.units(), reserve),
            |_| {},
            over_budget,
            observe,
            general,
        )
    }

    /// [`check_attached`](Self::check_attached) past the steady-state step.
    #[inline(never)]
    fn check_attached_general(
        &self,
        g: &Guard,
        check: Check,
    ) -> Result<Verdict, InsufficientCapacity> {
        let retry = check.attempt_number() > 0;
        loop {
            let (p, token) = self.resolve();
            let tol = g.reserve(check.priority_class()).tolerance(&p);
            let w = priority::weight_within(&p, check.units(), tol)?;
            let now = g.now(&self.clock);
            if w == 0 {
                let Some(tat) = self.tat_under(token) else {
                    continue;
                };
                let within = p.within(tol);
                return Ok(cell::evaluate(tat, now, &within, 0, DenyReason::Quota));
            }
            let a = Attempt { now, p: &p, w };
            let v = match (
                retry.then(|| g.over_budget(now)).flatten(),
                g.pass_reason(now),
            ) {
                (Some(denied), _) => Some(denied),
                (None, None) => self.try_raw(a, tol, token),
                (None, Some(reason)) => self.try_passing(g, a, tol, reason, token),
            };
            if let Some(v) = v {
                g.observe(&self.counters, &v, None, retry, || now);
                return Ok(v);
            }
        }
    }
}
