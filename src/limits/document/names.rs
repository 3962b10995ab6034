//! Declared names and near misses: [`NameIndex`] answers "is this name declared?" and "which
//! declared name was meant?" in time logarithmic in the number of names, so that validating a
//! document with thousands of unknown names stays linear (4,000 undeclared tiers once
//! took 5.4 s when each was compared with every declared one).

use std::cell::OnceCell;

/// Above this many names, [`NameIndex::suggest`] compares a word with its neighbours only.
const EXHAUSTIVE: usize = 64;
/// The neighbours taken on each side of a word, in each of the two orders.
const NEIGHBOURS: usize = 8;

/// A list of names in document order, sorted for lookups (and, once a suggestion is asked
/// for, sorted backwards too).
#[derive(Clone, Debug, Default)]
pub(super) struct NameIndex<S> {
    names: Vec<S>,
    /// Indexes into `names`, sorted by name.
    forward: Vec<usize>,
    /// Each name reversed, with its index, sorted; made on the first suggestion.
    backward: OnceCell<Vec<(String, usize)>>,
}

impl<S: AsRef<str>> NameIndex<S> {
    pub(super) fn new(names: Vec<S>) -> Self {
        let mut forward: Vec<usize> = (0..names.len()).collect();
        forward.sort_unstable_by(|&a, &b| names[a].as_ref().cmp(names[b].as_ref()).then(a.cmp(&b)));
        NameIndex {
            names,
            forward,
            backward: OnceCell::new(),
        }
    }

    /// The names, in document order.
    pub(super) fn into_names(self) -> Vec<S> {
        self.names
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.forward
            .binary_search_by(|&i| self.names[i].as_ref().cmp(name))
            .is_ok()
    }

    /// The declared name closest to `word`, if it is close enough to be a likely typo (see
    /// [`did_you_mean`]). With many names, only the neighbours of `word` in two orders are
    /// compared: sorted by name, and sorted by name reversed. A typo keeps the start or the
    /// end of the name, or both, so the name meant is among those neighbours unless many
    /// names share that start or end.
    pub(super) fn suggest(&self, word: &str) -> Option<&str> {
        if self.names.len() <= EXHAUSTIVE {
            let all: Vec<&str> = self.names.iter().map(AsRef::as_ref).collect();
            return did_you_mean(word, &all);
        }
        let at = self
            .forward
            .partition_point(|&i| self.names[i].as_ref() < word);
        let mut near: Vec<usize> = neighbours(&self.forward, at).copied().collect();
        let backward = self.backward.get_or_init(|| {
            let mut backward: Vec<(String, usize)> = self
                .names
                .iter()
                .enumerate()
                .map(|(i, name)| (name.as_ref().chars().rev().collect(), i))
                .collect();
            backward.sort_unstable();
            backward
        });
        let reversed: String = word.chars().rev().collect();
        let at = backward.partition_point(|(name, _)| *name < reversed);
        near.extend(neighbours(backward, at).map(|(_, i)| *i));
        // in document order, so that of two equally close names the first declared wins
        near.sort_unstable();
        near.dedup();
        let candidates: Vec<&str> = near.iter().map(|&i| self.names[i].as_ref()).collect();
        did_you_mean(word, &candidates)
    }
}

/// The [`NEIGHBOURS`] entries on each side of position `at`.
fn neighbours<T>(sorted: &[T], at: usize) -> impl Iterator<Item = &T> {
    let start = at.saturating_sub(NEIGHBOURS);
    let end = at.saturating_add(NEIGHBOURS).min(sorted.len());
    sorted[start..end].iter()
}

/// The closest of `candidates` to `word`, if it is close enough to be a likely typo.
pub(super) fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = match word.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        _ => 3,
    };
    candidates
        .iter()
        .map(|c| (distance(word, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Optimal string alignment distance: edits, with a swap of two neighbours as one edit.
/// Inputs longer than 64 characters are never close: the cost stays bounded.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(65).collect();
    let b: Vec<char> = b.chars().take(65).collect();
    if a.len().abs_diff(b.len()) > 3 {
        return usize::MAX;
    }
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * width + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let mut best = (d[(i - 1) * width + j] + 1)
                    .min(d[i * width + j - 1] + 1)
                    .min(d[(i - 1) * width + j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(d[(i - 2) * width + j - 2] + 1);
                }
                best
            };
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::document::fields::MATCH_FIELDS;

    #[test]
    fn distances() {
        assert_eq!(distance("categroy", "category"), 1);
        assert_eq!(distance("tier", "tiers"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(did_you_mean("categroy", MATCH_FIELDS), Some("category"));
        assert_eq!(did_you_mean("rout", MATCH_FIELDS), Some("route"));
        assert_eq!(did_you_mean("zzzzzz", MATCH_FIELDS), None);
    }

    #[test]
    fn many_names_find_typos_at_either_end() {
        let index = NameIndex::new((0..4000).map(|i| format!("tier{i:05}")).collect());
        assert!(index.contains("tier03999"));
        assert!(!index.contains("tier04000"));
        // the start changed: found by the reversed order
        assert_eq!(index.suggest("teir01234"), Some("tier01234"));
        // the end changed: found by the sorted order
        assert_eq!(index.suggest("tier01234x"), Some("tier01234"));
        assert_eq!(index.suggest("gold"), None);
    }

    #[test]
    fn few_names_are_all_compared() {
        let names = vec!["paid-checkout", "free"];
        let index = NameIndex::new(names);
        assert_eq!(index.suggest("paid-chekout"), Some("paid-checkout"));
        assert_eq!(index.into_names(), ["paid-checkout", "free"]);
    }
}
