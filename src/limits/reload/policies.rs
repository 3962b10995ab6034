//! One document's limiters: a [`KeyedRateLimiter`] per policy, the request → policy → verdict
//! step shared by [`LimitsHandle`](super::LimitsHandle) and [`Rollout`](crate::Rollout), and
//! how the limiters of one document become the next one's.

use std::collections::HashMap;
use std::sync::Arc;

use crate::engine::check::Check;
use crate::engine::clock::Clock;
use crate::engine::error::InsufficientCapacity;
use crate::engine::quota::Quota;
use crate::engine::verdict::{Allowed, PassReason, PassThrough, Shadow, Verdict};
use crate::limiter::keyed::KeyedRateLimiter;
use crate::limits::document::{Limits, Policy};
use crate::safety::fault::FaultDetector;

use super::Decision;

/// How limiters are built: shared by every policy of a handle or a rollout.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) clock: Clock,
    pub(crate) max_keys: Option<usize>,
    pub(crate) detector: Option<FaultDetector>,
}

impl Settings {
    /// A fresh limiter for `policy`, with the policy's priority classes and retry budget.
    /// Shadow policies get no detector: their denials are never served, so they must not
    /// count towards the deny breadth of the enforced ones.
    fn limiter(&self, policy: &Policy) -> Arc<KeyedRateLimiter<String>> {
        let mut b = KeyedRateLimiter::builder(policy.quota()).clock(self.clock.clone());
        if let Some(n) = self.max_keys {
            b = b.max_keys(n);
        }
        if let Some(classes) = policy.classes() {
            b = b.priorities(classes.clone());
        }
        if let Some(budget) = policy.retry_budget() {
            b = b.retry_budget(budget);
        }
        if let Some(d) = self.detector.as_ref().filter(|_| !policy.shadow()) {
            b = b.detector(d.clone());
        }
        Arc::new(b.build())
    }
}

/// One policy's limiter, with what a check needs to know about the policy.
#[derive(Clone, Debug)]
pub(crate) struct PolicyLimiter {
    name: Arc<str>,
    shadow: bool,
    pub(crate) limiter: Arc<KeyedRateLimiter<String>>,
}

/// A document and its limiters, by policy name.
#[derive(Clone, Debug)]
pub(crate) struct Policies {
    pub(crate) limits: Arc<Limits>,
    by_name: HashMap<String, PolicyLimiter>,
}

/// A quota change to apply to a reused limiter once no check can see the old document.
pub(crate) type Requota = (Arc<KeyedRateLimiter<String>>, Quota);

impl Policies {
    /// Fresh limiters for every policy of `limits`.
    pub(crate) fn new(limits: Arc<Limits>, settings: &Settings) -> Self {
        let by_name = limits
            .policies()
            .iter()
            .map(|p| (p.name().to_owned(), fresh(p, settings)))
            .collect();
        Self { limits, by_name }
    }

    /// The limiters for `next`: unchanged policies keep their limiter (the same `Arc`);
    /// changed ones keep it too, and the returned list says which quotas to set; removed
    /// ones are dropped; added ones start fresh. A limiter's detector, priority classes and
    /// retry budget are fixed when it is built, so a policy starts fresh (every key's state
    /// reset) when its classes or retry budget change, or its shadow flag flips while a
    /// detector is attached.
    pub(crate) fn successor(&self, next: Arc<Limits>, settings: &Settings) -> (Self, Vec<Requota>) {
        let mut requota = Vec::new();
        let mut by_name = HashMap::with_capacity(next.policies().len());
        for policy in next.policies() {
            let kept = self.by_name.get(policy.name()).filter(|old| {
                (old.shadow == policy.shadow() || settings.detector.is_none())
                    && old.limiter.priorities() == policy.classes()
                    && old.limiter.retry_budget() == policy.retry_budget()
            });
            let entry = match kept {
                Some(old) => {
                    if old.limiter.quota() != policy.quota() {
                        requota.push((Arc::clone(&old.limiter), policy.quota()));
                    }
                    PolicyLimiter {
                        name: Arc::clone(&old.name),
                        shadow: policy.shadow(),
                        limiter: Arc::clone(&old.limiter),
                    }
                }
                None => fresh(policy, settings),
            };
            by_name.insert(policy.name().to_owned(), entry);
        }
        (
            Self {
                limits: next,
                by_name,
            },
            requota,
        )
    }

    /// The limiter of the policy named `name`.
    /// The policy a request resolves to, with its limiter.
    pub(crate) fn resolve_limiter(
        &self,
        tier: &str,
        category: &str,
        route: &str,
    ) -> Option<(&str, &Arc<KeyedRateLimiter<String>>)> {
        let policy = self.limits.resolve(tier, category, route)?;
        let entry = self.by_name.get(policy.name())?;
        Some((policy.name(), &entry.limiter))
    }

    pub(crate) fn limiter(&self, name: &str) -> Option<&Arc<KeyedRateLimiter<String>>> {
        self.by_name.get(name).map(|p| &p.limiter)
    }

    /// Resolves the request's policy and checks `key` against it.
    ///
    /// No matching policy means this document does not limit the request: an
    /// [`Allow`](Verdict::Allow) with [`remaining`](Allowed::remaining) `u64::MAX`, no
    /// policy, nothing counted. A shadow policy's verdict becomes a
    /// [`PassThrough`] with [`PassReason::Shadow`] and the verdict it would have been.
    pub(crate) fn check(
        &self,
        tier: &str,
        category: &str,
        route: &str,
        key: &str,
        check: Check,
    ) -> Result<Decision, InsufficientCapacity> {
        let revision = self.limits.revision();
        let Some(policy) = self.limits.resolve(tier, category, route) else {
            let unlimited = Verdict::Allow(Allowed::new(u64::MAX, 0, 0));
            return Ok(Decision::new(unlimited, revision, None));
        };
        // Every policy of the document has a limiter (built together, swapped together), so
        // the `else` cannot run; were it to, the request is treated as unmatched rather than
        // panicking inside a check.
        let Some(entry) = self.by_name.get(policy.name()) else {
            let unlimited = Verdict::Allow(Allowed::new(u64::MAX, 0, 0));
            return Ok(Decision::new(unlimited, revision, None));
        };
        let verdict = entry.limiter.check_key_with(key, check)?;
        let verdict = if entry.shadow {
            shadowed(verdict)
        } else {
            verdict
        };
        Ok(Decision::new(
            verdict,
            revision,
            Some(Arc::clone(&entry.name)),
        ))
    }
}

fn fresh(policy: &Policy, settings: &Settings) -> PolicyLimiter {
    PolicyLimiter {
        name: Arc::from(policy.name()),
        shadow: policy.shadow(),
        limiter: settings.limiter(policy),
    }
}

/// A shadow policy never denies: an allow or a denial (whatever its reason) passes through
/// carrying it as the shadow; a pass-through already is one and stays as it is.
fn shadowed(v: Verdict) -> Verdict {
    let shadow = match v {
        Verdict::Allow(_) => Shadow::Allow,
        Verdict::Deny(_) => Shadow::Deny,
        other => return other,
    };
    Verdict::PassThrough(PassThrough::new(PassReason::Shadow, shadow))
}
