//! Writing a document out in any of the three formats: [`Limits::to_format`].

use super::{emit, model, parse, Format, Limits};

impl Limits {
    /// Writes the document as TOML (see [`to_format`](Limits::to_format)).
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[{"name":"a","match":{"route":"/"},"quota":"10/s","burst":20}]}"#)?;
    /// let text = limits.to_toml();
    /// assert!(text.contains(r#"quota = "10/s;burst=20""#));
    /// assert_eq!(tollgate::limits::Limits::from_toml(&text)?, limits);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn to_toml(&self) -> String {
        self.to_format(Format::Toml)
    }

    /// Writes the document as YAML (see [`to_format`](Limits::to_format)).
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_json(r#"{"schema":1,"revision":1,"policies":[]}"#)?;
    /// assert_eq!(tollgate::limits::Limits::from_yaml(&limits.to_yaml())?, limits);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn to_yaml(&self) -> String {
        self.to_format(Format::Yaml)
    }

    /// Writes the document as pretty JSON (see [`to_format`](Limits::to_format)).
    ///
    /// ```
    /// # let limits = tollgate::limits::Limits::from_toml("schema = 1\nrevision = 1\npolicies = []\n")?;
    /// assert_eq!(tollgate::limits::Limits::from_json(&limits.to_json())?, limits);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn to_json(&self) -> String {
        self.to_format(Format::Json)
    }

    /// Writes the document in `format`: `schema = 1`, the revision, the declared lists, the
    /// policies (each burst folded into its canonical quota string, `shadow` only when true,
    /// `classes` with class 0 listed, `retry_budget` with all three fields) and the
    /// acknowledgements. Loading the text gives back an equal `Limits`.
    ///
    /// # Panics
    ///
    /// Never: a validated document holds only strings, booleans, integers and finite
    /// floats that every format can write (the revision is at most `i64::MAX` for this
    /// reason).
    ///
    /// ```
    /// use tollgate::limits::{Format, Limits};
    ///
    /// # let limits = Limits::from_toml("schema = 1\nrevision = 1\npolicies = []\n")?;
    /// assert_eq!(Limits::parse(&limits.to_format(Format::Yaml), Format::Yaml)?, limits);
    /// # Ok::<(), tollgate::limits::ConfigErrors>(())
    /// ```
    pub fn to_format(&self, format: Format) -> String {
        let doc = model::Document {
            schema: 1,
            revision: self.revision,
            categories: &self.categories,
            tiers: &self.tiers,
            policies: &self.policies,
            acknowledge: &self.acknowledgements,
        };
        let text = match format {
            Format::Toml => toml::to_string(&doc).map_err(|e| e.to_string()),
            Format::Yaml => serde_json::to_string(&doc)
                .map_err(|e| e.to_string())
                .and_then(|json| {
                    let tree = parse::json_tree(&json).map_err(|e| e.to_string())?;
                    Ok(emit::yaml(&tree))
                }),
            Format::Json => serde_json::to_string_pretty(&doc).map_err(|e| e.to_string()),
        };
        text.unwrap_or_else(|e| panic!("a validated document always serializes as {format}: {e}"))
    }
}
