//! [`ConfigErrors`]: every problem found in a document, one per line.

use core::fmt;

use crate::engine::error::ConfigError;

/// Every problem found in a limits document, in document order; never empty.
///
/// `Display` writes one error per line. Index it, iterate it, or take the `Vec`.
///
/// ```
/// use tollgate::Limits;
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
/// # Ok::<(), tollgate::ConfigErrors>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    errors: Vec<ConfigError>,
}

impl ConfigErrors {
    /// `None` when there is nothing to report.
    pub(crate) fn from_vec(errors: Vec<ConfigError>) -> Option<Self> {
        (!errors.is_empty()).then_some(Self { errors })
    }

    /// One error.
    pub(crate) fn one(error: ConfigError) -> Self {
        Self {
            errors: vec![error],
        }
    }

    /// The errors, in document order.
    ///
    /// ```
    /// use tollgate::{ConfigErrorKind, Limits};
    ///
    /// let errs = Limits::from_json(r#"{"schema": 1, "revision": 1}"#).unwrap_err();
    /// assert_eq!(errs.as_slice()[0].kind(), ConfigErrorKind::MissingField);
    /// # Ok::<(), tollgate::ConfigErrors>(())
    /// ```
    pub fn as_slice(&self) -> &[ConfigError] {
        &self.errors
    }

    /// An iterator over the errors.
    ///
    /// ```
    /// use tollgate::Limits;
    ///
    /// let errs = Limits::from_json("{}").unwrap_err();
    /// assert!(errs.iter().any(|e| e.path() == "schema"));
    /// # Ok::<(), tollgate::ConfigErrors>(())
    /// ```
    pub fn iter(&self) -> core::slice::Iter<'_, ConfigError> {
        self.errors.iter()
    }

    /// How many errors there are (at least one).
    ///
    /// ```
    /// use tollgate::Limits;
    ///
    /// assert_eq!(Limits::from_json("{}").unwrap_err().len(), 3);
    /// # Ok::<(), tollgate::ConfigErrors>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // never empty
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// The errors, by value.
    ///
    /// ```
    /// use tollgate::Limits;
    ///
    /// let errs: Vec<_> = Limits::from_json("{}").unwrap_err().into_vec();
    /// assert_eq!(errs.len(), 3);
    /// # Ok::<(), tollgate::ConfigErrors>(())
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
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
