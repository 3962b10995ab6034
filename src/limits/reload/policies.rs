//! One document's limiters: a [`KeyedRateLimiter`] per policy, the request → policy → verdict
//! step shared by [`LimitsHandle`](super::LimitsHandle) and [`Rollout`](crate::Rollout), and
//! how the limiters of one document become the next one's.

use std::sync::Arc;

use crate::engine::check::Check;
use crate::engine::clock::Clock;
use crate::engine::error::InsufficientCapacity;
use crate::engine::quota::Quota;
#[cfg(feature = "metrics")]
use crate::engine::stats::COUNTERS;
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
    pub(super) name: Arc<str>,
    pub(super) shadow: bool,
    pub(crate) limiter: Arc<KeyedRateLimiter<String>>,
    /// The limiter's counts when this shadow flag took effect (zero for a fresh limiter):
    /// metrics attribute the counts since then to this flag. `None` until the swap that
    /// flips the flag on a kept limiter takes them ([`Policies::settle`]).
    #[cfg(feature = "metrics")]
    counted_from: Option<[u64; COUNTERS]>,
}

/// A document and its limiters, in the order of its policies (the document's index finds
/// them by name or by request).
#[derive(Clone, Debug)]
pub(crate) struct Policies {
    pub(crate) limits: Arc<Limits>,
    limiters: Vec<PolicyLimiter>,
}

/// A policy's name, shadow flag, limiter, and the limiter's counts when the flag took
/// effect, as metrics read them.
#[cfg(feature = "metrics")]
pub(crate) type Entry = (
    Arc<str>,
    bool,
    Arc<KeyedRateLimiter<String>>,
    [u64; COUNTERS],
);

/// A quota change to apply to a reused limiter once no check can see the old document.
pub(crate) type Requota = (Arc<KeyedRateLimiter<String>>, Quota);

impl Policies {
    /// Fresh limiters for every policy of `limits`.
    pub(crate) fn new(limits: Arc<Limits>, settings: &Settings) -> Self {
        let limiters = limits
            .policies()
            .iter()
            .map(|p| fresh(p, settings))
            .collect();
        Self { limits, limiters }
    }

    /// The limiters for `next`: unchanged policies keep their limiter (the same `Arc`);
    /// changed ones keep it too, and the returned list says which quotas to set; removed
    /// ones are dropped; added ones start fresh. A limiter's detector, priority classes and
    /// retry budget are fixed when it is built, so a policy starts fresh (every key's state
    /// reset) when its classes or retry budget change, or its shadow flag flips while a
    /// detector is attached.
    pub(crate) fn successor(&self, next: Arc<Limits>, settings: &Settings) -> (Self, Vec<Requota>) {
        let mut requota = Vec::new();
        let mut limiters = Vec::with_capacity(next.policies().len());
        let before = self.limits.policies();
        for (i, policy) in next.policies().iter().enumerate() {
            // at the same place when the order is kept (read in order), else by the index
            let at = match before.get(i) {
                Some(old) if old.name() == policy.name() => Some(i),
                _ => self.limits.position(policy.name()),
            };
            let kept = at.map(|j| &self.limiters[j]).filter(|old| {
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
                        #[cfg(feature = "metrics")]
                        counted_from: old.counted_from.filter(|_| old.shadow == policy.shadow()),
                    }
                }
                None => fresh(policy, settings),
            };
            limiters.push(entry);
        }
        (
            Self {
                limits: next,
                limiters,
            },
            requota,
        )
    }

    /// Every policy's name, shadow flag, limiter and counts when the flag took effect, in
    /// the document's order.
    #[cfg(feature = "metrics")]
    pub(crate) fn entries(&self) -> Vec<Entry> {
        self.limiters
            .iter()
            .map(|p| {
                let from = p.counted_from.unwrap_or([0; COUNTERS]);
                (Arc::clone(&p.name), p.shadow, Arc::clone(&p.limiter), from)
            })
            .collect()
    }

    /// Takes the counts of kept limiters whose shadow flag this document flips: called
    /// under the write guard of the swap, when no check can run, so every count before it
    /// was served under the old flag and every count after under the new one.
    pub(crate) fn settle(&mut self) {
        #[cfg(feature = "metrics")]
        for p in &mut self.limiters {
            if p.counted_from.is_none() {
                p.counted_from = Some(p.limiter.counters().sum());
            }
        }
    }

    /// The limiter of the policy at position `i` of the document.
    pub(super) fn entry(&self, i: usize) -> Option<&PolicyLimiter> {
        self.limiters.get(i)
    }

    /// The limiter of the policy named `name`.
    pub(crate) fn limiter(&self, name: &str) -> Option<&Arc<KeyedRateLimiter<String>>> {
        let i = self.limits.position(name)?;
        self.limiters.get(i).map(|p| &p.limiter)
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
        let at = self.limits.resolve_position(tier, category, route);
        self.check_at(at, key, check, None)
    }

    /// [`check`](Self::check) of the policy at position `at` (`None`: no policy matched),
    /// resolved by the caller; with `from`, the key's state is first carried from that
    /// limiter if this policy's does not track the key (a staged rollout's cohort).
    #[inline(always)]
    pub(crate) fn check_at(
        &self,
        at: Option<usize>,
        key: &str,
        check: Check,
        from: Option<&KeyedRateLimiter<String>>,
    ) -> Result<Decision, InsufficientCapacity> {
        let revision = self.limits.revision();
        // Every policy of the document has a limiter (built together, swapped together), so
        // `get` always finds one; were it not to, the request is treated as unmatched rather
        // than panicking inside a check.
        let Some(entry) = at.and_then(|i| self.limiters.get(i)) else {
            let unlimited = Verdict::Allow(Allowed::new(u64::MAX, 0, 0));
            return Ok(Decision::new(unlimited, revision, None));
        };
        let verdict = match from {
            None => entry.limiter.check_key_with(key, check)?,
            Some(from) => entry.limiter.check_key_carried(from, key, check)?,
        };
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
        #[cfg(feature = "metrics")]
        counted_from: Some([0; COUNTERS]),
    }
}

/// A shadow policy never denies: an allow or a denial (whatever its reason) passes through
/// carrying it as the shadow; a pass-through already is one and stays as it is.
pub(super) fn shadowed(v: Verdict) -> Verdict {
    let shadow = match v {
        Verdict::Allow(_) => Shadow::Allow,
        Verdict::Deny(_) => Shadow::Deny,
        other => return other,
    };
    Verdict::PassThrough(PassThrough::new(PassReason::Shadow, shadow))
}
