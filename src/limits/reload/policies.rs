//! One document's limiters: a [`KeyedRateLimiter`] per policy, the request → policy → verdict
//! step shared by [`LimitsHandle`](super::LimitsHandle) and [`Rollout`](crate::limits::Rollout), and
//! how the limiters of one document become the next one's.
//!
//! # A limiter is built on its policy's first check
//!
//! A limiter costs about 15 KiB before its first key (its counters, striped by thread for
//! checks without a locked instruction: 9 KiB; the first segment of its key table: 4 KiB;
//! the directory of its segments and the limiter itself: 2 KiB), so a document of 20,000
//! policies cost 315 MiB as soon as it was loaded. Each policy's limiter is built when a
//! check first needs it instead: a document costs what its policies do (a few hundred bytes
//! each) plus a limiter per policy that traffic reaches. The limiters' own check path is
//! untouched; finding one is a load and a test more per check.

use std::sync::{Arc, OnceLock};

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
    fn build(&self, policy: &Policy) -> Arc<KeyedRateLimiter<String>> {
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

    /// Tells the detector now, not at the first check, that keyed limiters will feed it
    /// (those of the enforcing policies of `limits`): it measures breadth from the start.
    fn will_attach(&self, limits: &Limits) {
        if let Some(d) = &self.detector {
            if limits.policies().iter().any(|p| !p.shadow()) {
                d.attach_keyed();
            }
        }
    }
}

/// One policy's limiter (built on its first check), with what a check needs to know about
/// the policy.
#[derive(Debug)]
pub(crate) struct PolicyLimiter {
    pub(super) name: Arc<str>,
    pub(super) shadow: bool,
    limiter: OnceLock<Arc<KeyedRateLimiter<String>>>,
}

/// A document and its limiters, in the order of its policies (the document's index finds
/// them by name or by request).
#[derive(Clone, Debug)]
pub(crate) struct Policies {
    pub(crate) limits: Arc<Limits>,
    /// Shared by clones (a rollout's and the handle it hands over to), so a limiter built
    /// through one is the other's too.
    limiters: Arc<[PolicyLimiter]>,
    /// Each limiter's counts when its policy's shadow flag took effect (zero for a fresh
    /// limiter): metrics attribute the counts since then to this flag. `None` until the
    /// swap that flips the flag on a kept limiter takes them ([`Policies::settle`]).
    #[cfg(feature = "metrics")]
    counted_from: Vec<Option<[u64; COUNTERS]>>,
    /// How the limiters not built yet will be.
    settings: Settings,
}

/// A policy's name, shadow flag, limiter (`None` until the policy's first check), the
/// limiter's counts when the flag took effect, and its bound on keys, as metrics read them.
#[cfg(feature = "metrics")]
pub(crate) struct Entry {
    pub(crate) name: Arc<str>,
    pub(crate) shadow: bool,
    pub(crate) limiter: Option<Arc<KeyedRateLimiter<String>>>,
    pub(crate) counted_from: [u64; COUNTERS],
    pub(crate) max_keys: usize,
}

/// What a reload hands from the old document's limiters to the new one's, under the write
/// guard of the swap, once no check can see the old document.
#[derive(Debug, Default)]
#[must_use = "the new document's limiters are not complete until the handover is applied"]
pub(crate) struct Handover {
    /// Limiters kept whose quota changes.
    requota: Vec<(Arc<KeyedRateLimiter<String>>, Quota)>,
    /// Policies kept whose limiter was not built when the new document was prepared.
    unbuilt: Option<Unbuilt>,
}

/// Policies kept whose limiter was not built when the new document was prepared: if a check
/// of the old document built one since, the new document takes it over, so no key checked
/// meanwhile loses its state.
#[derive(Debug)]
struct Unbuilt {
    old: Arc<[PolicyLimiter]>,
    new: Arc<[PolicyLimiter]>,
    /// Each policy's position in the old document and in the new, and its new quota.
    kept: Vec<(usize, usize, Quota)>,
}

impl Handover {
    /// Sets the changed quotas and takes over the limiters built since.
    pub(crate) fn apply(self) {
        for (limiter, quota) in self.requota {
            limiter.set_quota(quota);
        }
        let Some(Unbuilt { old, new, kept }) = self.unbuilt else {
            return;
        };
        for (j, i, quota) in kept {
            let (Some(old), Some(new)) = (old.get(j), new.get(i)) else {
                continue;
            };
            if let Some(limiter) = old.limiter.get() {
                if limiter.quota() != quota {
                    limiter.set_quota(quota);
                }
                // The new document is not served yet: nothing else can have built its limiter.
                let _ = new.limiter.set(Arc::clone(limiter));
            }
        }
    }
}

impl Policies {
    /// Limiters for every policy of `limits`, each built on its first check.
    pub(crate) fn new(limits: Arc<Limits>, settings: &Settings) -> Self {
        let limiters = limits.policies().iter().map(unbuilt).collect();
        settings.will_attach(&limits);
        Self {
            #[cfg(feature = "metrics")]
            counted_from: vec![Some([0; COUNTERS]); limits.policies().len()],
            limits,
            limiters,
            settings: settings.clone(),
        }
    }

    /// The limiters for `next`: unchanged policies keep their limiter (the same `Arc`);
    /// changed ones keep it too, and the handover sets their quotas; removed ones are
    /// dropped; added ones start fresh. A limiter's detector, priority classes and retry
    /// budget are fixed when it is built, so a policy starts fresh (every key's state reset)
    /// when its classes or retry budget change, or its shadow flag flips while a detector is
    /// attached.
    pub(crate) fn successor(&self, next: Arc<Limits>, settings: &Settings) -> (Self, Handover) {
        let mut handover = Handover::default();
        let mut unbuilt_kept = Vec::new();
        let n = next.policies().len();
        let mut limiters = Vec::with_capacity(n);
        #[cfg(feature = "metrics")]
        let mut counted_from = Vec::with_capacity(n);
        let before = self.limits.policies();
        for (i, policy) in next.policies().iter().enumerate() {
            // at the same place when the order is kept (read in order), else by the index
            let at = match before.get(i) {
                Some(old) if old.name() == policy.name() => Some(i),
                _ => self.limits.position(policy.name()),
            };
            // The limiter was built from the old policy (or from an earlier one with the
            // same classes and budget), so comparing the policies compares what it holds.
            let kept = at
                .and_then(|j| Some((j, self.limiters.get(j)?, before.get(j)?)))
                .filter(|(_, old, was)| {
                    (old.shadow == policy.shadow() || settings.detector.is_none())
                        && was.classes() == policy.classes()
                        && was.retry_budget() == policy.retry_budget()
                });
            let Some((j, old, _)) = kept else {
                limiters.push(unbuilt(policy));
                #[cfg(feature = "metrics")]
                counted_from.push(Some([0; COUNTERS]));
                continue;
            };
            let limiter = OnceLock::new();
            match old.limiter.get() {
                Some(built) => {
                    if built.quota() != policy.quota() {
                        handover.requota.push((Arc::clone(built), policy.quota()));
                    }
                    let _ = limiter.set(Arc::clone(built));
                }
                None => unbuilt_kept.push((j, i, policy.quota())),
            }
            limiters.push(PolicyLimiter {
                name: Arc::clone(&old.name),
                shadow: policy.shadow(),
                limiter,
            });
            #[cfg(feature = "metrics")]
            counted_from.push(
                self.counted_from
                    .get(j)
                    .copied()
                    .flatten()
                    .filter(|_| old.shadow == policy.shadow()),
            );
        }
        settings.will_attach(&next);
        let limiters: Arc<[PolicyLimiter]> = limiters.into();
        if !unbuilt_kept.is_empty() {
            let (old, new) = (Arc::clone(&self.limiters), Arc::clone(&limiters));
            let kept = unbuilt_kept;
            handover.unbuilt = Some(Unbuilt { old, new, kept });
        }
        let next = Self {
            limits: next,
            limiters,
            #[cfg(feature = "metrics")]
            counted_from,
            settings: settings.clone(),
        };
        (next, handover)
    }

    /// The entry and the limiter of the policy at position `i`: built now if this is the
    /// policy's first check.
    #[inline]
    pub(super) fn at(&self, i: usize) -> Option<(&PolicyLimiter, &Arc<KeyedRateLimiter<String>>)> {
        let entry = self.limiters.get(i)?;
        match entry.limiter.get() {
            Some(limiter) => Some((entry, limiter)),
            None => self.build(i, entry),
        }
    }

    /// [`at`](Self::at) for a policy whose limiter is not built yet (as far as it saw).
    #[cold]
    #[inline(never)]
    fn build<'a>(
        &'a self,
        i: usize,
        entry: &'a PolicyLimiter,
    ) -> Option<(&'a PolicyLimiter, &'a Arc<KeyedRateLimiter<String>>)> {
        let policy = self.limits.policies().get(i)?;
        let limiter = entry.limiter.get_or_init(|| self.settings.build(policy));
        Some((entry, limiter))
    }

    /// Every policy's name, shadow flag, limiter if built, counts when the flag took effect
    /// and bound on keys, in the document's order. Builds nothing: a policy not checked yet
    /// has no limiter to read, and counts nothing.
    #[cfg(feature = "metrics")]
    pub(crate) fn entries(&self) -> Vec<Entry> {
        let max_keys = self
            .settings
            .max_keys
            .map_or(crate::limiter::keyed::DEFAULT_MAX_KEYS, |n| {
                n.clamp(1, crate::limiter::keyed::MAX_KEYS_LIMIT)
            });
        self.limiters
            .iter()
            .zip(&self.counted_from)
            .map(|(p, from)| {
                let limiter = p.limiter.get().cloned();
                Entry {
                    name: Arc::clone(&p.name),
                    shadow: p.shadow,
                    max_keys: limiter.as_ref().map_or(max_keys, |l| l.max_keys()),
                    limiter,
                    counted_from: from.unwrap_or([0; COUNTERS]),
                }
            })
            .collect()
    }

    /// Takes the counts of kept limiters whose shadow flag this document flips: called
    /// under the write guard of the swap, when no check can run, so every count before it
    /// was served under the old flag and every count after under the new one.
    pub(crate) fn settle(&mut self) {
        #[cfg(feature = "metrics")]
        for (p, from) in self.limiters.iter().zip(&mut self.counted_from) {
            if from.is_none() {
                // A limiter not built yet has counted nothing.
                let sum = p.limiter.get().map(|l| l.counters().sum());
                *from = Some(sum.unwrap_or([0; COUNTERS]));
            }
        }
    }

    /// The limiter of the policy named `name`, built now if need be.
    pub(crate) fn limiter(&self, name: &str) -> Option<&Arc<KeyedRateLimiter<String>>> {
        let i = self.limits.position(name)?;
        self.at(i).map(|(_, limiter)| limiter)
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
        // Every policy of the document has a limiter (built on its first check), so `at`
        // always finds one; were it not to, the request is treated as unmatched rather than
        // panicking inside a check.
        let Some((entry, limiter)) = at.and_then(|i| self.at(i)) else {
            let unlimited = Verdict::Allow(Allowed::new(u64::MAX, 0, 0));
            return Ok(Decision::new(unlimited, revision, None));
        };
        let verdict = match from {
            None => limiter.check_key_with(key, check)?,
            Some(from) => limiter.check_key_carried(from, key, check)?,
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

    /// The limiter of the policy at position `i`, built now if need be.
    #[inline]
    pub(crate) fn limiter_at(&self, i: usize) -> Option<&Arc<KeyedRateLimiter<String>>> {
        self.at(i).map(|(_, limiter)| limiter)
    }

    /// The limiter of the policy at position `i` if a check has built it: a policy never
    /// checked tracks no key, so there is nothing to carry from it and nothing is built.
    #[inline]
    pub(crate) fn built(&self, i: usize) -> Option<&Arc<KeyedRateLimiter<String>>> {
        self.limiters.get(i)?.limiter.get()
    }
}

/// A fresh limiter for `policy`, built on its first check.
fn unbuilt(policy: &Policy) -> PolicyLimiter {
    PolicyLimiter {
        name: Arc::from(policy.name()),
        shadow: policy.shadow(),
        limiter: OnceLock::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::ManualClock;

    fn doc(quota: &str, revision: u64) -> Arc<Limits> {
        let text = format!(
            "schema = 1\nrevision = {revision}\n[[policies]]\nname = \"api\"\n\
             match = {{ route = \"/api/*\" }}\nquota = \"{quota}\"\n[[policies]]\n\
             name = \"other\"\nmatch = {{ route = \"/other\" }}\nquota = \"1/s\"\n"
        );
        Arc::new(Limits::from_toml(&text).expect("a valid document")) // a test
    }

    fn permitted(p: &Policies, key: &str) -> bool {
        let d = p.check("t", "c", "/api/x", key, Check::cost(1));
        d.expect("within the burst").verdict().is_permitted() // a test
    }

    fn settings() -> Settings {
        Settings {
            clock: ManualClock::new().into(),
            max_keys: None,
            detector: None,
        }
    }

    #[test]
    fn a_limiter_is_built_on_its_policy_s_first_check_only() {
        let p = Policies::new(doc("1/s", 1), &settings());
        assert!(p.limiters.iter().all(|e| e.limiter.get().is_none()));
        assert!(permitted(&p, "alice"));
        assert!(!permitted(&p, "alice"));
        let built: Vec<bool> = p
            .limiters
            .iter()
            .map(|e| e.limiter.get().is_some())
            .collect();
        assert_eq!(built, [true, false]);
    }

    #[test]
    fn a_limiter_built_between_the_successor_and_the_swap_is_taken_over() {
        let settings = settings();
        let old = Policies::new(doc("1/s", 1), &settings);
        let (new, handover) = old.successor(doc("2/s", 2), &settings);
        // A check of the old document, after the new one was prepared: it builds the limiter
        // and alice spends her burst of 1.
        assert!(permitted(&old, "alice"));
        handover.apply();
        let (Some(a), Some(b)) = (old.limiter("api"), new.limiter("api")) else {
            panic!("both documents have the policy") // a test: a panic is its failure
        };
        assert!(Arc::ptr_eq(a, b), "the new document took the limiter over");
        assert_eq!(b.quota(), "2/s".parse().expect("a quota")); // a test
                                                                // Her cell was full under 1/s and stays full under 2/s: no fresh burst.
        assert!(!permitted(&new, "alice"));
        assert!(permitted(&new, "bob"));
    }

    #[test]
    fn a_policy_not_checked_before_a_reload_starts_under_the_new_quota() {
        let settings = settings();
        let old = Policies::new(doc("1/s", 1), &settings);
        let (new, handover) = old.successor(doc("3/s", 2), &settings);
        handover.apply();
        assert!(old.limiters.iter().all(|e| e.limiter.get().is_none()));
        let admitted = (0..5).filter(|_| permitted(&new, "alice")).count();
        assert_eq!(admitted, 3);
    }
}
