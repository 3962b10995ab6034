//! What the gateway layer (feature `tower`) needs from a handle beyond its public API: the
//! judging policy's quota read under the same revision as the check, without a second
//! lookup by name from outside.

use std::sync::Arc;

use super::{Decision, LimitsHandle};
use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::engine::quota::Quota;

impl Decision {
    /// The judging policy's name, shared.
    pub(crate) fn policy_arc(&self) -> Option<&Arc<str>> {
        self.policy.as_ref()
    }
}

impl LimitsHandle {
    /// [`check`](LimitsHandle::check), and the judging policy's quota, both under one
    /// revision.
    pub(crate) fn check_quoted(
        &self,
        tier: &str,
        category: &str,
        route: &str,
        key: &str,
        check: Check,
    ) -> Result<(Decision, Option<Quota>), InsufficientCapacity> {
        let current = self.current.read();
        let decision = current.check(tier, category, route, key, check)?;
        let quota = decision
            .policy()
            .and_then(|p| current.limiter(p))
            .map(|l| l.quota());
        drop(current);
        self.maybe_known_good();
        Ok((decision, quota))
    }
}
