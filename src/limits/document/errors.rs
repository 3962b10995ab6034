//! [`ConfigErrors`]: the problems found in a document, one per line, the first
//! [`Limits::MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS) listed and the rest counted.

use core::fmt;

use crate::engine::error::ConfigError;

pub(crate) const MAX_LISTED_ERRORS: usize = 1_000;

/// The problems found in a limits document, in document order; never empty. The first
/// [`Limits::MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS) are listed; the rest are only counted ([`omitted`](Self::omitted)).
///
/// `Display` writes one error per line, then `… and N more errors` when some were omitted.
/// Index it, iterate it, or take the `Vec`.
///
/// ```
/// use tollgate::limits::Limits;
///
/// let errs = Limits::from_json(r#"{"schema": 2, "polices": []}"#).unwrap_err();
/// assert_eq!(errs.len(), 4);
/// assert_eq!(
///     errs.to_string(),
///     "polices: unknown field; did you mean \"policies\"?\n\
///      schema: unsupported schema 2; this version of tollgate reads schema 1\n\
///      revision: missing field; add `revision`, the document's version (an integer)\n\
///      policies: missing field; add `policies`, a list of policies"
/// );
/// # Ok::<(), tollgate::limits::ConfigErrors>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    errors: Vec<ConfigError>,
    /// Errors found beyond the first [`Limits::MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS).
    omitted: usize,
}

impl ConfigErrors {
    /// `None` when there is nothing to report; the errors past [`Limits::MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS) are
    /// counted, not kept.
    pub(crate) fn from_vec(mut errors: Vec<ConfigError>) -> Option<Self> {
        let omitted = errors.len().saturating_sub(MAX_LISTED_ERRORS);
        errors.truncate(MAX_LISTED_ERRORS);
        (!errors.is_empty()).then_some(Self { errors, omitted })
    }

    /// One error.
    pub(crate) fn one(error: ConfigError) -> Self {
        Self {
            errors: vec![error],
            omitted: 0,
        }
    }

    /// The errors an [`ErrorList`] kept and counted; `None` when there is none.
    pub(crate) fn from_list(list: ErrorList) -> Option<Self> {
        let ErrorList { errors, omitted } = list;
        (!errors.is_empty()).then_some(Self { errors, omitted })
    }

    /// The listed errors, in document order.
    ///
    /// ```
    /// use tollgate::limits::{ConfigErrorKind, Limits};
    ///
    /// let errs = Limits::from_json(r#"{"schema": 1, "revision": 1}"#).unwrap_err();
    /// assert_eq!(errs.as_slice()[0].kind(), ConfigErrorKind::MissingField);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn as_slice(&self) -> &[ConfigError] {
        &self.errors
    }

    /// An iterator over the listed errors.
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let errs = Limits::from_json("{}").unwrap_err();
    /// assert!(errs.iter().any(|e| e.path() == "schema"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn iter(&self) -> core::slice::Iter<'_, ConfigError> {
        self.errors.iter()
    }

    /// How many errors are listed: at least one, at most [`Limits::MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS) (see
    /// [`omitted`](Self::omitted) for the rest).
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// assert_eq!(Limits::from_json("{}").unwrap_err().len(), 3);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// How many errors were found beyond the [`Limits::MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS) listed: counted, not
    /// kept. `len() + omitted()` is every error found.
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// // 1,500 policies, each with a quota missing its unit
    /// let policies: Vec<String> = (0..1_500)
    ///     .map(|i| format!(r#"{{"name": "p{i}", "match": {{"route": "/{i}"}}, "quota": "10"}}"#))
    ///     .collect();
    /// let doc = format!(r#"{{"schema": 1, "revision": 1, "policies": [{}]}}"#, policies.join(","));
    /// let errs = Limits::from_json(&doc).unwrap_err();
    /// assert_eq!((errs.len(), errs.omitted()), (Limits::MAX_LISTED_ERRORS, 500));
    /// assert!(errs.to_string().ends_with("\n… and 500 more errors"));
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn omitted(&self) -> usize {
        self.omitted
    }

    /// The listed errors, by value.
    ///
    /// ```
    /// use tollgate::limits::Limits;
    ///
    /// let errs: Vec<_> = Limits::from_json("{}").unwrap_err().into_vec();
    /// assert_eq!(errs.len(), 3);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn into_vec(self) -> Vec<ConfigError> {
        self.errors
    }
}

impl core::ops::Index<usize> for ConfigErrors {
    type Output = ConfigError;

    fn index(&self, index: usize) -> &ConfigError {
        &self.errors[index]
    }
}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = core::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.into_iter()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, err) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{err}")?;
        }
        match self.omitted {
            0 => Ok(()),
            1 => f.write_str("\n… and 1 more error"),
            n => write!(f, "\n… and {n} more errors"),
        }
    }
}

impl std::error::Error for ConfigErrors {}

/// Errors as a validator finds them: the first [`Limits::MAX_LISTED_ERRORS`](crate::limits::Limits::MAX_LISTED_ERRORS) kept, the rest only
/// counted, so that a document with an error in each of its 100,000 policies costs no more
/// memory for its report than one with a thousand.
#[derive(Debug, Default)]
pub(crate) struct ErrorList {
    errors: Vec<ConfigError>,
    omitted: usize,
}

impl ErrorList {
    /// `true` once the list keeps no more errors: a caller may skip writing the next one out.
    pub(crate) fn is_full(&self) -> bool {
        self.errors.len() >= MAX_LISTED_ERRORS
    }

    /// Keeps `error`, or counts it once the list is full.
    pub(crate) fn push(&mut self, error: ConfigError) {
        if self.is_full() {
            self.count();
        } else {
            self.errors.push(error);
        }
    }

    /// Counts an error not kept (the list is full).
    pub(crate) fn count(&mut self) {
        self.omitted = self.omitted.saturating_add(1);
    }
}
