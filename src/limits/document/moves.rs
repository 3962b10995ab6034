//! The traffic that moves from one policy to another between two documents (incident 001:
//! a misnamed key moved paying customers' checkout requests under a free-tier limit).
//!
//! Requests are infinitely many, but they fall into finitely many classes: every declared
//! tier plus "any other tier", every declared category plus "any other", and for routes
//! every exact route, one route under each prefix pattern (the prefix followed by a byte no
//! route pattern contains, so it meets that prefix and the shorter ones only) plus "any
//! other route". Only the classes that a changed matcher (one not in both documents under
//! the same name) matches can move; each is resolved in both documents.
//!
//! The cost is linear in the number of classes that can move (times a logarithm): a
//! matcher's classes are found by binary search in the sorted probes (the routes under a
//! prefix are a contiguous run of them), each class is resolved through the documents'
//! indexes, and describing a set of classes looks at each class a bounded number of times.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use super::change::QuotaChange;
use super::model::Matcher;
use super::Limits;

/// Requests that another policy handles after the change: from `from` to `to` (`None`: no
/// policy, so not limited), described as a list of request classes such as
/// `tier=paid category=checkout`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TrafficMove {
    /// The request classes that move, most general first.
    pub requests: Vec<String>,
    /// The policy that handled them before.
    pub from: Option<String>,
    /// The policy that handles them after.
    pub to: Option<String>,
    /// The quota they had and now have, when both sides are policies with different quotas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaChange>,
}

/// Marks the route probe of a prefix pattern; never part of a valid route.
const UNDER: char = '\u{0}';

/// The values of one field of a request class: sorted, then `""` for any other.
struct Axis {
    probes: Vec<String>,
}

impl Axis {
    /// Declared names, then `""` for any other (no name is empty).
    fn names<'a>(a: &'a [String], b: &'a [String]) -> Axis {
        let set: BTreeSet<&String> = a.iter().chain(b).collect();
        let mut probes: Vec<String> = set.into_iter().cloned().collect();
        probes.push(String::new());
        Axis { probes }
    }

    fn all_routes(old: &Limits, new: &Limits) -> Axis {
        let set: BTreeSet<String> = old
            .policies
            .iter()
            .chain(&new.policies)
            .filter_map(|p| p.matcher.route.as_deref())
            .map(|r| match r.strip_suffix('*') {
                Some(prefix) => format!("{prefix}{UNDER}"),
                None => r.to_owned(),
            })
            .collect();
        let mut probes: Vec<String> = set.into_iter().collect();
        probes.push(String::new());
        Axis { probes }
    }

    /// The sorted probes, without the last one (any other value).
    fn sorted(&self) -> &[String] {
        &self.probes[..self.probes.len() - 1]
    }

    /// The probes a tier or category field accepts: the one it names, or all.
    fn named(&self, field: Option<&str>) -> Vec<usize> {
        match field {
            None => (0..self.probes.len()).collect(),
            Some(name) => {
                let found = self.sorted().binary_search_by(|p| p.as_str().cmp(name));
                found.into_iter().collect()
            }
        }
    }

    /// The probes a route pattern accepts: the route itself, every probe under a prefix
    /// (a contiguous run of the sorted probes), or all.
    fn routes(&self, pattern: Option<&str>) -> Vec<usize> {
        let Some(pattern) = pattern else {
            return (0..self.probes.len()).collect();
        };
        let sorted = self.sorted();
        match pattern.strip_suffix('*') {
            None => {
                let found = sorted.binary_search_by(|p| p.as_str().cmp(pattern));
                found.into_iter().collect()
            }
            Some(prefix) => {
                let start = sorted.partition_point(|p| p.as_str() < prefix);
                let len = sorted[start..]
                    .iter()
                    .take_while(|p| p.starts_with(prefix))
                    .count();
                (start..start + len).collect()
            }
        }
    }
}

fn show_name(field: &str, probe: &str) -> String {
    if probe.is_empty() {
        format!("{field}=(other)")
    } else {
        format!("{field}={probe}")
    }
}

fn show_route(probe: &str) -> String {
    match probe.strip_suffix(UNDER) {
        _ if probe.is_empty() => "route=(other)".to_owned(),
        Some(prefix) => format!("route={prefix}*"),
        None => format!("route={probe}"),
    }
}

type Probe = (usize, usize, usize);

/// The traffic that moves from `old` to `new`, given the matchers not in both documents
/// under the same name (`changed`).
pub(super) fn moves<'a>(
    old: &'a Limits,
    new: &'a Limits,
    changed: &[&Matcher],
) -> Vec<TrafficMove> {
    if changed.is_empty() {
        return Vec::new();
    }
    let tiers = Axis::names(&old.tiers, &new.tiers);
    let cats = Axis::names(&old.categories, &new.categories);
    let routes = Axis::all_routes(old, new);
    // The classes to look at, by route: each route's tiers and categories are few, so they
    // are sorted and unrepeated in small pieces, and the classes come out in `by_route`
    // order (route, then tier, then category).
    let mut classes: Vec<Vec<(usize, usize)>> = vec![Vec::new(); routes.probes.len()];
    for m in changed {
        let ts = tiers.named(m.tier.as_deref());
        let cs = cats.named(m.category.as_deref());
        for r in routes.routes(m.route.as_deref()) {
            let of_route = &mut classes[r];
            for &t in &ts {
                of_route.extend(cs.iter().map(|&c| (t, c)));
            }
        }
    }
    // grouped by the positions of the policies they move from and to
    let mut groups: HashMap<(Option<usize>, Option<usize>), Vec<Probe>> = HashMap::new();
    for (r, of_route) in classes.iter_mut().enumerate() {
        of_route.sort_unstable();
        of_route.dedup();
        let route = &routes.probes[r];
        for &(t, c) in of_route.iter() {
            let (tier, cat) = (&tiers.probes[t], &cats.probes[c]);
            let from = old.resolve_position(tier, cat, route);
            let to = new.resolve_position(tier, cat, route);
            let (a, b) = (
                from.map(|i| old.policies[i].name()),
                to.map(|j| new.policies[j].name()),
            );
            if a != b {
                groups.entry((from, to)).or_default().push((t, c, r));
            }
        }
    }
    let name = |l: &'a Limits, i: Option<usize>| i.map(|i| l.policies[i].name());
    let mut groups: Vec<_> = groups
        .into_iter()
        .map(|((from, to), set)| ((name(old, from), name(new, to)), set))
        .collect();
    groups.sort_unstable_by_key(|(key, _)| *key);
    groups
        .into_iter()
        .map(|((from, to), set)| {
            let quota = match (
                from.and_then(|n| old.policy(n)),
                to.and_then(|n| new.policy(n)),
            ) {
                (Some(a), Some(b)) if a.quota != b.quota => {
                    Some(QuotaChange::new(a.quota, b.quota))
                }
                _ => None,
            };
            TrafficMove {
                requests: describe(&set, &tiers, &cats, &routes),
                from: from.map(str::to_owned),
                to: to.map(str::to_owned),
                quota,
            }
        })
        .collect()
}

/// A set of request classes where each field is one value or any (`None`).
type Cube = (Option<usize>, Option<usize>, Option<usize>);

/// The generalisations of a class, most general first; among equals, category before tier
/// before route.
fn generalisations((t, c, r): Probe) -> [Cube; 8] {
    let (t, c, r) = (Some(t), Some(c), Some(r));
    [
        (None, None, None),
        (None, c, None),
        (t, None, None),
        (None, None, r),
        (t, c, None),
        (None, c, r),
        (t, None, r),
        (t, c, r),
    ]
}

/// Describes a set of request classes compactly: greedily, the most general sets of classes
/// (`category=checkout`, then `tier=paid category=checkout`, …) that lie wholly inside it
/// and add something not yet described.
/// `set` is without repeats and sorted by route, then tier, then category.
fn describe(set: &[Probe], tiers: &Axis, cats: &Axis, routes: &Axis) -> Vec<String> {
    let sizes = (tiers.probes.len(), cats.probes.len(), routes.probes.len());
    let mut cubes: Vec<(usize, Cube)> = set
        .iter()
        .flat_map(|&p| generalisations(p).into_iter().enumerate())
        .map(|(rank, cube)| (generality(rank), cube))
        .collect();
    cubes.sort_unstable();
    cubes.dedup();
    let at = |(t, c, r): Probe| {
        set.binary_search_by_key(&(r, t, c), |&(t, c, r)| (r, t, c))
            .ok()
    };
    let mut covered = vec![false; set.len()];
    let mut left = set.len();
    let mut out = Vec::new();
    for (_, cube) in cubes {
        // lazily, stopping at the first class outside the set: the cubes of one kind are
        // disjoint, so each class of the set is looked at a bounded number of times
        let inside = points(cube, sizes).all(|p| at(p).is_some());
        if inside && points(cube, sizes).any(|p| at(p).is_some_and(|i| !covered[i])) {
            out.push(show(cube, tiers, cats, routes));
            for i in points(cube, sizes).filter_map(at) {
                left -= usize::from(!covered[i]);
                covered[i] = true;
            }
        }
        if left == 0 {
            break;
        }
    }
    out
}

/// Ranks 0..8 of [`generalisations`] grouped by how many fields are any.
fn generality(rank: usize) -> usize {
    match rank {
        0 => 0,
        1..=3 => 1,
        4..=6 => 2,
        _ => 3,
    }
}

/// The classes of a cube, in order.
fn points((t, c, r): Cube, (nt, nc, nr): (usize, usize, usize)) -> impl Iterator<Item = Probe> {
    let axis = |fixed: Option<usize>, n: usize| fixed.map_or(0..n, |v| v..v + 1);
    let (cs, rs) = (axis(c, nc), axis(r, nr));
    axis(t, nt).flat_map(move |t| {
        let rs = rs.clone();
        cs.clone()
            .flat_map(move |c| rs.clone().map(move |r| (t, c, r)))
    })
}

fn show((t, c, r): Cube, tiers: &Axis, cats: &Axis, routes: &Axis) -> String {
    let mut parts = Vec::new();
    if let Some(t) = t {
        parts.push(show_name("tier", &tiers.probes[t]));
    }
    if let Some(c) = c {
        parts.push(show_name("category", &cats.probes[c]));
    }
    if let Some(r) = r {
        parts.push(show_route(&routes.probes[r]));
    }
    if parts.is_empty() {
        "all requests".to_owned()
    } else {
        parts.join(" ")
    }
}
