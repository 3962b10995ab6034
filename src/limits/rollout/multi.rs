//! [`Rollout::check_all`]: several limits per request during a rollout.

use super::{Rollout, Side};
use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::limits::reload::MultiDecision;

impl Rollout {
    /// Checks a request against every policy that applies to it, all or nothing, as
    /// [`LimitsHandle::check_all`](crate::limits::LimitsHandle::check_all) does: `key` in the cohort
    /// is judged by the new document's policies, the rest by the old one's. A key that joined
    /// the cohort keeps its place in time in every policy both documents name. The request
    /// is tallied for the rollout's figures once, as denied if the overall verdict is.
    ///
    /// ```
    /// use tollgate::Check;
    /// use tollgate::limits::{Limits, Rollout};
    ///
    /// let doc = |revision: u64| Limits::from_toml(&format!(r#"
    /// schema = 1
    /// revision = {revision}
    /// [[policies]]
    /// name = "route"
    /// match = {{ route = "/v1/*" }}
    /// quota = "10/s"
    /// [[policies]]
    /// name = "customer"
    /// match = {{ route = "/*" }}
    /// quota = "100/s"
    /// also = true
    /// "#));
    /// let rollout = Rollout::new(doc(1)?, doc(2)?, tollgate::ManualClock::new())?;
    /// let d = rollout.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert_eq!(d.verdicts().len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] if the cost exceeds a policy's burst (nothing is consumed).
    pub fn check_all(
        &self,
        tier: &str,
        category: &str,
        route: &str,
        key: &str,
        check: Check,
    ) -> Result<MultiDecision, InsufficientCapacity> {
        let Side {
            hash,
            bp,
            in_cohort,
            doc,
        } = self.side(key);
        if in_cohort {
            for i in doc.limits.resolve_all_positions(tier, category, route) {
                if let (Some(from), Some(limiter)) = (self.carried_from(i), doc.limiter_at(i)) {
                    limiter.carry_from(from, key);
                }
            }
        }
        let decision = doc.check_all(tier, category, route, key, check)?;
        self.tally(
            hash,
            bp,
            in_cohort,
            decision.policy().is_some(),
            decision.is_permitted(),
        );
        Ok(decision)
    }
}
