//! The traffic that moves from one policy to another between two documents (incident 001:
//! a misnamed key moved paying customers' checkout requests under a free-tier limit).
//!
//! Requests are infinitely many, but they fall into finitely many classes: every declared
//! tier plus "any other tier", every declared category plus "any other", and for routes
//! every exact route, one route under each prefix pattern (the prefix followed by a byte no
//! route pattern contains, so it meets that prefix and the shorter ones only) plus "any
//! other route". Only the classes that a changed matcher (one not in both documents under
//! the same name) matches can move; each is resolved in both documents.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::change::QuotaChange;
use super::model::{route_matches, Matcher};
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

/// One value of a request class and how it is named in a description.
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

    fn routes(old: &Limits, new: &Limits) -> Axis {
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

    /// The probes a matcher's field accepts.
    fn accepted(&self, accept: impl Fn(&str) -> bool) -> Vec<usize> {
        (0..self.probes.len())
            .filter(|&i| accept(&self.probes[i]))
            .collect()
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

pub(super) fn moves(old: &Limits, new: &Limits) -> Vec<TrafficMove> {
    let tiers = Axis::names(&old.tiers, &new.tiers);
    let cats = Axis::names(&old.categories, &new.categories);
    let routes = Axis::routes(old, new);
    let keyed = |l: &Limits| -> BTreeSet<(String, Matcher)> {
        let pairs = l
            .policies
            .iter()
            .map(|p| (p.name.clone(), p.matcher.clone()));
        pairs.collect()
    };
    let (before, after) = (keyed(old), keyed(new));
    let mut probes: BTreeSet<Probe> = BTreeSet::new();
    for (_, m) in before.symmetric_difference(&after) {
        let ts = tiers.accepted(|t| m.tier.as_ref().is_none_or(|x| x == t));
        let cs = cats.accepted(|c| m.category.as_ref().is_none_or(|x| x == c));
        let rs = routes.accepted(|r| m.route.as_ref().is_none_or(|x| route_matches(x, r)));
        for &t in &ts {
            for &c in &cs {
                probes.extend(rs.iter().map(|&r| (t, c, r)));
            }
        }
    }
    let mut groups: BTreeMap<(Option<&str>, Option<&str>), BTreeSet<Probe>> = BTreeMap::new();
    for probe @ (t, c, r) in probes {
        let (t, c, r) = (&tiers.probes[t], &cats.probes[c], &routes.probes[r]);
        let from = old.resolve(t, c, r);
        let to = new.resolve(t, c, r);
        let key = (from.map(|p| p.name()), to.map(|p| p.name()));
        if key.0 != key.1 {
            groups.entry(key).or_default().insert(probe);
        }
    }
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
fn describe(set: &BTreeSet<Probe>, tiers: &Axis, cats: &Axis, routes: &Axis) -> Vec<String> {
    let sizes = (tiers.probes.len(), cats.probes.len(), routes.probes.len());
    let mut cubes: Vec<(usize, Cube)> = set
        .iter()
        .flat_map(|&p| generalisations(p).into_iter().enumerate())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    cubes.sort_by_key(|&(rank, cube)| (generality(rank), cube));
    let mut covered: BTreeSet<Probe> = BTreeSet::new();
    let mut out = Vec::new();
    for (_, cube) in cubes {
        let points = points(cube, sizes);
        if points.iter().all(|p| set.contains(p)) && points.iter().any(|p| !covered.contains(p)) {
            out.push(show(cube, tiers, cats, routes));
            covered.extend(points);
        }
        if covered.len() == set.len() {
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

fn points((t, c, r): Cube, (nt, nc, nr): (usize, usize, usize)) -> Vec<Probe> {
    let axis = |fixed: Option<usize>, n: usize| fixed.map_or_else(|| (0..n).collect(), |v| vec![v]);
    let (ts, cs, rs) = (axis(t, nt), axis(c, nc), axis(r, nr));
    let mut out = Vec::with_capacity(ts.len() * cs.len() * rs.len());
    for &t in &ts {
        for &c in &cs {
            out.extend(rs.iter().map(|&r| (t, c, r)));
        }
    }
    out
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
