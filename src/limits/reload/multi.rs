//! Several limits per request, all or nothing: [`MultiDecision`] and the check behind
//! [`LimitsHandle::check_all`](super::LimitsHandle::check_all).

use std::sync::Arc;

use crate::engine::check::Check;
use crate::engine::error::InsufficientCapacity;
use crate::engine::quota::Quota;
use crate::engine::verdict::{Allowed, Shadow, Verdict};
use crate::limiter::keyed::KeyedRateLimiter;

use super::policies::{shadowed, Policies};
use super::Decision;

/// What [`LimitsHandle::check_all`](crate::limits::LimitsHandle::check_all) decided: the overall
/// verdict, the policy that decided it, and each policy's own verdict.
///
/// The overall verdict, and the deciding policy with it, is (first rule that applies):
///
/// 1. a **denial**: the first enforcing policy that denied (the others were refunded, or
///    never checked);
/// 2. a **pass-through whose shadow is a denial**: the first policy that let the request
///    through only by standing aside (a shadow policy, or a limiter whose fault detector
///    tripped) — never silent;
/// 3. an **allow**: the allowing policy with the least [`remaining`](Allowed::remaining)
///    (the first of equals), the one a client is closest to;
/// 4. otherwise the first pass-through (every policy stood aside and would have allowed).
///
/// No applicable policy: an allow with `remaining() == u64::MAX`, no policy, no verdicts.
///
/// ```
/// use tollgate::Check;
/// use tollgate::limits::{Limits, LimitsHandle};
///
/// let handle = LimitsHandle::new(Limits::from_toml(r#"
/// schema = 1
/// revision = 1
/// [[policies]]
/// name = "route"
/// match = { route = "/v1/search" }
/// quota = "10/s"
/// [[policies]]
/// name = "customer"
/// match = { route = "/*" }
/// quota = "100/s"
/// also = true
/// "#)?);
/// let d = handle.check_all("free", "api", "/v1/search", "alice", Check::cost(1))?;
/// assert!(d.is_permitted());
/// assert_eq!(d.policy(), Some("route")); // 9 left there, 99 in "customer"
/// assert_eq!(d.verdicts().len(), 2);
/// assert_eq!(d.verdicts()[1].policy(), "customer");
/// assert_eq!(d.verdicts()[1].verdict().allowed().map(|a| a.remaining()), Some(99));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a decision that is not looked at enforces nothing"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiDecision {
    verdict: Verdict,
    revision: u64,
    /// The deciding entry of `verdicts`.
    deciding: Option<usize>,
    verdicts: Vec<PolicyVerdict>,
}

/// One policy's verdict within a [`MultiDecision`].
///
/// ```
/// # use tollgate::Check;
/// # use tollgate::limits::{Limits, LimitsHandle};
/// # let handle = LimitsHandle::new(Limits::from_path("examples/limits/valid.toml")?);
/// let d = handle.check_all("paid", "checkout", "/v1/checkout/cart", "customer-42", Check::cost(1))?;
/// let v = &d.verdicts()[0];
/// assert_eq!((v.policy(), v.quota()), ("paid-checkout", "100/s;burst=250".parse()?));
/// assert!(v.verdict().is_permitted());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyVerdict {
    policy: Arc<str>,
    quota: Quota,
    verdict: Verdict,
}

impl PolicyVerdict {
    /// The policy's name.
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert_eq!(d.verdicts()[0].policy(), "route");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The policy's quota in the document that judged the check (for a `RateLimit-Policy`
    /// header).
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert_eq!(d.verdicts()[1].quota(), "1/min;burst=1".parse()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The policy's own verdict, as [`LimitsHandle::check`](crate::limits::LimitsHandle::check)
    /// would have returned it (a shadow policy's is a pass-through). After a denial by
    /// another policy, an allow here was refunded: the request consumed nothing.
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert!(d.verdicts()[1].verdict().is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }
}

impl MultiDecision {
    /// The overall verdict (see the type's documentation for how it is chosen). When no
    /// policy applies it is an [`Allow`](Verdict::Allow) with `remaining() == u64::MAX`.
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert_eq!(d.verdict().allowed().map(|a| a.remaining()), Some(0)); // customer decides
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// `true` if the request may proceed ([`Verdict::is_permitted`]).
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert!(d.is_permitted());
    /// assert!(!handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?.is_permitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_permitted(&self) -> bool {
        self.verdict.is_permitted()
    }

    /// The revision of the document that judged the check.
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert_eq!(d.revision(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The name of the deciding policy, or `None` if no policy applied.
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert_eq!(d.policy(), Some("customer")); // 0 left there, 9 in "route"
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(&self) -> Option<&str> {
        self.deciding().map(PolicyVerdict::policy)
    }

    /// The deciding policy's entry in [`verdicts`](Self::verdicts), or `None` if no policy
    /// applied.
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// assert_eq!(d.deciding().map(|v| v.policy()), Some("customer"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deciding(&self) -> Option<&PolicyVerdict> {
        self.verdicts.get(self.deciding?)
    }

    /// The overall verdict as a [`Decision`] (the deciding policy's name, the revision): for
    /// code written against [`LimitsHandle::check`](crate::limits::LimitsHandle::check).
    ///
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_path("examples/limits/valid.toml")?);
    /// let d = handle.check_all("paid", "checkout", "/v1/checkout/cart", "customer-42", Check::cost(1))?;
    /// let one = d.decision();
    /// assert_eq!((one.policy(), one.revision(), one.verdict()), (d.policy(), d.revision(), d.verdict()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decision(&self) -> Decision {
        let policy = self.deciding().map(|v| Arc::clone(&v.policy));
        Decision::new(self.verdict, self.revision, policy)
    }

    /// Each policy's verdict, in the order they were checked (that of
    /// [`Limits::resolve_all`](crate::limits::Limits::resolve_all)): every applicable policy when the
    /// request is permitted; up to and including the denying one when it is not (the policies
    /// after it were not checked).
    /// ```
    /// # use tollgate::Check;
    /// # use tollgate::limits::{Limits, LimitsHandle};
    /// # let handle = LimitsHandle::new(Limits::from_toml("schema = 1\nrevision = 3\n[[policies]]\nname = \"route\"\nmatch = { route = \"/v1/*\" }\nquota = \"10/s\"\n[[policies]]\nname = \"customer\"\nmatch = { route = \"/*\" }\nquota = \"1/min;burst=1\"\nalso = true\n")?);
    /// # let d = handle.check_all("free", "api", "/v1/x", "alice", Check::cost(1))?;
    /// let names: Vec<&str> = d.verdicts().iter().map(|v| v.policy()).collect();
    /// assert_eq!(names, ["route", "customer"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verdicts(&self) -> &[PolicyVerdict] {
        &self.verdicts
    }
}

/// Whether a limiter's verdict wrote the key's cell: an allow, or a pass-through whose shadow
/// step allowed (a shadow denial was charged to the ceiling cell, not to the key's cell).
fn wrote_cell(raw: Verdict) -> bool {
    match raw {
        Verdict::Allow(_) => true,
        Verdict::PassThrough(p) => p.shadow() == Shadow::Allow,
        _ => false,
    }
}

/// The deciding entry of `verdicts` (see [`MultiDecision`]).
fn deciding(verdicts: &[PolicyVerdict]) -> Option<usize> {
    let first = |f: &dyn Fn(Verdict) -> bool| verdicts.iter().position(|v| f(v.verdict));
    first(&|v| matches!(v, Verdict::Deny(_)))
        .or_else(|| first(&|v| matches!(v, Verdict::PassThrough(p) if p.shadow() == Shadow::Deny)))
        .or_else(|| {
            let remaining = |i: usize| verdicts[i].verdict.allowed().map(|a| a.remaining());
            (0..verdicts.len())
                .filter(|&i| remaining(i).is_some())
                .min_by_key(|&i| (remaining(i), i))
        })
        .or_else(|| (!verdicts.is_empty()).then_some(0))
}

impl Policies {
    /// Checks `key` against every policy that applies, all or nothing (see
    /// [`LimitsHandle::check_all`](super::LimitsHandle::check_all)).
    pub(crate) fn check_all(
        &self,
        tier: &str,
        category: &str,
        route: &str,
        key: &str,
        check: Check,
    ) -> Result<MultiDecision, InsufficientCapacity> {
        let revision = self.limits.revision();
        let positions = self.limits.resolve_all_positions(tier, category, route);
        let mut verdicts = Vec::with_capacity(positions.len());
        // The limiters that wrote the key's cell so far: refunded if a later one denies.
        let mut charged: Vec<&KeyedRateLimiter<String>> = Vec::with_capacity(positions.len());
        let cost = check.units();
        for i in positions {
            let (Some((entry, limiter)), Some(policy)) =
                (self.at(i), self.limits.policies().get(i))
            else {
                continue;
            };
            let raw = match limiter.check_key_with(key, check) {
                Ok(raw) => raw,
                Err(e) => {
                    charged.iter().for_each(|l| l.refund_key(key, cost));
                    return Err(e);
                }
            };
            let verdict = if entry.shadow { shadowed(raw) } else { raw };
            verdicts.push(PolicyVerdict {
                policy: Arc::clone(&entry.name),
                quota: policy.quota(),
                verdict,
            });
            if let Verdict::Deny(_) = verdict {
                charged.iter().for_each(|l| l.refund_key(key, cost));
                break;
            }
            if wrote_cell(raw) {
                charged.push(limiter);
            }
        }
        let deciding = deciding(&verdicts);
        let verdict = match deciding {
            Some(i) => verdicts[i].verdict,
            None => Verdict::Allow(Allowed::new(u64::MAX, 0, 0)),
        };
        Ok(MultiDecision {
            verdict,
            revision,
            deciding,
            verdicts,
        })
    }
}
