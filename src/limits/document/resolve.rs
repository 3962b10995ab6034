//! Which policies apply to a request: [`Limits::resolve`] and [`Limits::resolve_all`], through
//! the document's index.

use super::{Limits, Policy};

impl Limits {
    /// The most specific policy for a request, or `None` when no policy matches (policies
    /// marked `also = true` are never returned here: they apply in addition, see
    /// [`resolve_all`](Limits::resolve_all)).
    ///
    /// Among the matching policies the most specific wins, compared in this order:
    ///
    /// 1. more fields set in `match` (of tier, category, route);
    /// 2. the route: an exact route above a prefix (`…*`), a longer prefix above a shorter
    ///    one, any route above none;
    /// 3. a category above none;
    /// 4. a tier above none.
    ///
    /// Two different matchers that both match a request always differ in one of these, and
    /// identical matchers are rejected by the validator, so there are no ties: the answer
    /// does not depend on the order of the policies. The policies are indexed by tier,
    /// category and route, so the cost does not grow with their number (only with the
    /// number of different prefix lengths among the route patterns of one tier and
    /// category).
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let limits = Limits::from_toml(r#"
    /// schema = 1
    /// revision = 1
    /// tiers = ["paid"]
    /// categories = ["checkout"]
    /// [[policies]]
    /// name = "paid"
    /// match = { tier = "paid" }
    /// quota = "100/s"
    /// [[policies]]
    /// name = "checkout"
    /// match = { category = "checkout" }
    /// quota = "50/s"
    /// [[policies]]
    /// name = "v1"
    /// match = { route = "/v1/*" }
    /// quota = "20/s"
    /// [[policies]]
    /// name = "paid-v1-cards"
    /// match = { tier = "paid", route = "/v1/cards" }
    /// quota = "10/s"
    /// "#)?;
    /// let name = |t, c, r| limits.resolve(t, c, r).map(|p| p.name());
    /// assert_eq!(name("paid", "checkout", "/v1/cards"), Some("paid-v1-cards"));
    /// assert_eq!(name("paid", "checkout", "/v1/pay"), Some("v1")); // route beats category
    /// assert_eq!(name("paid", "checkout", "/v2/pay"), Some("checkout")); // category beats tier
    /// assert_eq!(name("free", "search", "/v2/x"), None);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn resolve(&self, tier: &str, category: &str, route: &str) -> Option<&Policy> {
        let i = self.resolve_position(tier, category, route)?;
        Some(&self.policies[i])
    }

    /// Every policy that applies to a request: the most specific one (as
    /// [`resolve`](Limits::resolve) finds it, if any), then every matching policy marked
    /// `also = true` ([`Policy::also`]), most specific first (by the same order as
    /// `resolve`), policies with the same matcher in document order. Empty when nothing
    /// matches. [`LimitsHandle::check_all`](crate::limits::LimitsHandle::check_all) checks them in
    /// this order, all or nothing.
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let limits = Limits::from_toml(r#"
    /// schema = 1
    /// revision = 1
    /// [[policies]]
    /// name = "search"
    /// match = { route = "/v1/search" }
    /// quota = "10/s"
    /// [[policies]]
    /// name = "per-customer"
    /// match = { route = "/*" }
    /// quota = "100/s"
    /// also = true
    /// [[policies]]
    /// name = "per-customer-daily"
    /// match = { route = "/*" }
    /// quota = "100000/day"
    /// also = true
    /// "#)?;
    /// let names = |r| limits.resolve_all("free", "api", r).iter().map(|p| p.name()).collect::<Vec<_>>();
    /// assert_eq!(names("/v1/search"), ["search", "per-customer", "per-customer-daily"]);
    /// assert_eq!(names("/v1/cards"), ["per-customer", "per-customer-daily"]);
    /// assert!(limits.resolve("free", "api", "/v1/cards").is_none()); // `also` never resolves alone
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn resolve_all(&self, tier: &str, category: &str, route: &str) -> Vec<&Policy> {
        self.resolve_all_positions(tier, category, route)
            .into_iter()
            .map(|i| &self.policies[i])
            .collect()
    }

    /// The positions of [`resolve_all`](Limits::resolve_all)'s policies.
    pub(crate) fn resolve_all_positions(
        &self,
        tier: &str,
        category: &str,
        route: &str,
    ) -> Vec<usize> {
        let mut all = self
            .index
            .resolve_also(&self.policies, tier, category, route);
        if let Some(first) = self.resolve_position(tier, category, route) {
            all.insert(0, first);
        }
        all
    }

    /// The position in [`policies`](Limits::policies) of the policy a request resolves to.
    pub(crate) fn resolve_position(
        &self,
        tier: &str,
        category: &str,
        route: &str,
    ) -> Option<usize> {
        self.index.resolve(&self.policies, tier, category, route)
    }

    /// The position in [`policies`](Limits::policies) of the policy named `name`.
    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        self.index.position(name)
    }
}
