//! [`PolicyIndex`]: a document's policies by name and by matcher, so that finding a policy
//! and resolving a request cost the same with 25,000 policies as with 25 (matching
//! by name and resolving by linear scans once made diffs and reloads quadratic).

use std::collections::HashMap;

use super::model::Policy;

/// Positions in the document's list of policies, by name and by matcher.
#[derive(Clone, Default)]
pub(super) struct PolicyIndex {
    by_name: HashMap<String, usize>,
    /// Matchers that name a tier and a category, by tier then category.
    tier_category: HashMap<String, HashMap<String, Routes>>,
    /// Matchers that name a tier and no category.
    tier: HashMap<String, Routes>,
    /// Matchers that name a category and no tier.
    category: HashMap<String, Routes>,
    /// Matchers that name neither.
    neither: Routes,
    /// The policies that apply in addition (`also = true`), kept apart: they never resolve
    /// as the most specific policy.
    also: AlsoIndex,
}

/// The `also` policies by matcher: several may share one.
#[derive(Clone, Default)]
struct AlsoIndex {
    tier_category: HashMap<String, HashMap<String, AlsoRoutes>>,
    tier: HashMap<String, AlsoRoutes>,
    category: HashMap<String, AlsoRoutes>,
    neither: AlsoRoutes,
}

/// The `also` policies of one tier and category (each named or any), by their route.
#[derive(Clone, Default)]
struct AlsoRoutes {
    exact: HashMap<String, Vec<usize>>,
    prefixes: HashMap<String, Vec<usize>>,
    /// The lengths of those prefixes.
    prefix_lengths: Vec<usize>,
    any: Vec<usize>,
}

impl AlsoRoutes {
    fn insert(&mut self, route: Option<&str>, i: usize) {
        match route {
            None => self.any.push(i),
            Some(pattern) => match pattern.strip_suffix('*') {
                None => self.exact.entry(pattern.to_owned()).or_default().push(i),
                Some(prefix) => {
                    self.prefixes.entry(prefix.to_owned()).or_default().push(i);
                    if let Err(at) = self.prefix_lengths.binary_search(&prefix.len()) {
                        self.prefix_lengths.insert(at, prefix.len());
                    }
                }
            },
        }
    }

    /// Every policy here that matches `route`.
    fn collect(&self, route: &str, out: &mut Vec<usize>) {
        if let Some(v) = self.exact.get(route) {
            out.extend_from_slice(v);
        }
        for &len in &self.prefix_lengths {
            if len > route.len() {
                break;
            }
            if let Some(v) = route
                .get(..len)
                .and_then(|prefix| self.prefixes.get(prefix))
            {
                out.extend_from_slice(v);
            }
        }
        out.extend_from_slice(&self.any);
    }
}

/// The policies of one tier and category (each named or any), by their route.
#[derive(Clone, Default)]
struct Routes {
    exact: HashMap<String, usize>,
    /// By the prefix before the `*`.
    prefixes: HashMap<String, usize>,
    /// The lengths of those prefixes, longest first.
    prefix_lengths: Vec<usize>,
    /// The policy without a route.
    any: Option<usize>,
}

impl Routes {
    fn insert(&mut self, route: Option<&str>, i: usize) {
        match route {
            None => self.any = Some(i),
            Some(pattern) => match pattern.strip_suffix('*') {
                None => {
                    self.exact.insert(pattern.to_owned(), i);
                }
                Some(prefix) => {
                    self.prefixes.insert(prefix.to_owned(), i);
                    if let Err(at) = self
                        .prefix_lengths
                        .binary_search_by(|len| prefix.len().cmp(len))
                    {
                        self.prefix_lengths.insert(at, prefix.len());
                    }
                }
            },
        }
    }

    /// The most specific policy here that matches `route`: an exact route, else the longest
    /// prefix, else the one without a route.
    fn resolve(&self, route: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(route) {
            return Some(i);
        }
        let longest = self
            .prefix_lengths
            .iter()
            .filter(|&&len| len <= route.len() && route.is_char_boundary(len))
            .find_map(|&len| self.prefixes.get(&route[..len]).copied());
        longest.or(self.any)
    }
}

impl PolicyIndex {
    pub(super) fn new(policies: &[Policy]) -> Self {
        let mut index = PolicyIndex::default();
        for (i, policy) in policies.iter().enumerate() {
            index.by_name.insert(policy.name.clone(), i);
            let m = &policy.matcher;
            if policy.also {
                let also = &mut index.also;
                let routes = match (&m.tier, &m.category) {
                    (Some(t), Some(c)) => also
                        .tier_category
                        .entry(t.clone())
                        .or_default()
                        .entry(c.clone())
                        .or_default(),
                    (Some(t), None) => also.tier.entry(t.clone()).or_default(),
                    (None, Some(c)) => also.category.entry(c.clone()).or_default(),
                    (None, None) => &mut also.neither,
                };
                routes.insert(m.route.as_deref(), i);
                continue;
            }
            let routes = match (&m.tier, &m.category) {
                (Some(t), Some(c)) => index
                    .tier_category
                    .entry(t.clone())
                    .or_default()
                    .entry(c.clone())
                    .or_default(),
                (Some(t), None) => index.tier.entry(t.clone()).or_default(),
                (None, Some(c)) => index.category.entry(c.clone()).or_default(),
                (None, None) => &mut index.neither,
            };
            routes.insert(m.route.as_deref(), i);
        }
        index
    }

    /// The position of the policy named `name`.
    pub(super) fn position(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The position of the policy a request resolves to (see
    /// [`Limits::resolve`](super::Limits::resolve)): the most specific of the at most four
    /// candidates, one for each combination of the tier and the category named or not.
    pub(super) fn resolve(
        &self,
        policies: &[Policy],
        tier: &str,
        category: &str,
        route: &str,
    ) -> Option<usize> {
        let candidates = [
            self.tier_category
                .get(tier)
                .and_then(|by_category| by_category.get(category)),
            self.tier.get(tier),
            self.category.get(category),
            Some(&self.neither),
        ];
        candidates
            .into_iter()
            .flatten()
            .filter_map(|routes| routes.resolve(route))
            .max_by_key(|&i| policies[i].matcher.specificity())
    }

    /// The positions of the `also` policies that match a request (see
    /// [`Limits::resolve_all`](super::Limits::resolve_all)): most specific first, ties in
    /// document order. The cost grows with the matches, not with the policies.
    pub(super) fn resolve_also(
        &self,
        policies: &[Policy],
        tier: &str,
        category: &str,
        route: &str,
    ) -> Vec<usize> {
        let a = &self.also;
        let candidates = [
            a.tier_category
                .get(tier)
                .and_then(|by_category| by_category.get(category)),
            a.tier.get(tier),
            a.category.get(category),
            Some(&a.neither),
        ];
        let mut out = Vec::new();
        for routes in candidates.into_iter().flatten() {
            routes.collect(route, &mut out);
        }
        out.sort_unstable_by_key(|&i| (core::cmp::Reverse(policies[i].matcher.specificity()), i));
        out
    }
}
