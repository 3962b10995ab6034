//! [`Path`]: where a value is in a document, such as `policies[paid-checkout].match.tier`,
//! written out only when an error needs it (the validator walks every value of a document
//! that may have 25,000 policies, and most values have no error).

use core::fmt;

/// Where a value is: a field of a table, an item of a list, or a policy by its name.
#[derive(Clone, Copy, Debug)]
pub(super) enum Path<'p> {
    /// The document itself (written as nothing).
    Root,
    /// `parent.field`, or `field` at the top.
    Field(&'p Path<'p>, &'p str),
    /// `parent[3]`.
    Item(&'p Path<'p>, usize),
    /// `parent[name]`.
    Named(&'p Path<'p>, &'p str),
}

impl<'p> Path<'p> {
    pub(super) fn field(&'p self, name: &'p str) -> Path<'p> {
        Path::Field(self, name)
    }

    pub(super) fn item(&'p self, i: usize) -> Path<'p> {
        Path::Item(self, i)
    }

    pub(super) fn named(&'p self, name: &'p str) -> Path<'p> {
        Path::Named(self, name)
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Field(Path::Root, name) => f.write_str(name),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Item(parent, i) => write!(f, "{parent}[{i}]"),
            Path::Named(parent, name) => write!(f, "{parent}[{name}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_written_as_the_documentation_shows_them() {
        let root = Path::Root;
        let policies = root.field("policies");
        let named = policies.named("paid-checkout");
        assert_eq!(
            named.field("match").field("tier").to_string(),
            "policies[paid-checkout].match.tier"
        );
        let third = policies.item(3);
        assert_eq!(third.field("name").to_string(), "policies[3].name");
        assert_eq!(root.field("revision").to_string(), "revision");
        assert_eq!(root.to_string(), "");
    }
}
