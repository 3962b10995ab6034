//! [`Format`]: TOML, YAML or JSON.

use core::fmt;
use std::path::Path;

/// A document format.
///
/// ```
/// use tollgate::limits::Format;
///
/// assert_eq!(Format::from_path("limits.yml"), Some(Format::Yaml));
/// assert_eq!(Format::from_path("limits.ini"), None);
/// assert_eq!(Format::Toml.to_string(), "TOML");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// TOML (`.toml`).
    Toml,
    /// YAML (`.yaml`, `.yml`).
    Yaml,
    /// JSON (`.json`).
    Json,
}

impl Format {
    /// The format a file name's extension says: `.toml`, `.yaml` or `.yml`, `.json`.
    ///
    /// ```
    /// assert_eq!(tollgate::limits::Format::from_path("/etc/limits.json"), Some(tollgate::limits::Format::Json));
    /// ```
    pub fn from_path(path: impl AsRef<Path>) -> Option<Format> {
        match path.as_ref().extension()?.to_str()? {
            "toml" => Some(Format::Toml),
            "yaml" | "yml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Toml => "TOML",
            Format::Yaml => "YAML",
            Format::Json => "JSON",
        })
    }
}
