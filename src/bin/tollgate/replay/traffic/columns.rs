//! The log's columns: the names tollgate knows, and `--column FIELD=NAME` for a log that
//! names them its own way (`--column key=api_key --column route=uri`).

/// A column the replay reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Timestamp,
    Key,
    Tier,
    Category,
    Route,
    Status,
    Bytes,
    Attempt,
}

/// Every field with the names it is known by; the first is its own name.
const NAMES: [(Field, &[&str]); 8] = [
    (Field::Timestamp, &["timestamp", "time", "ts"]),
    (Field::Key, &["key", "customer"]),
    (Field::Tier, &["tier"]),
    (Field::Category, &["category"]),
    (Field::Route, &["route", "path"]),
    (Field::Status, &["status"]),
    (Field::Bytes, &["bytes", "size"]),
    (Field::Attempt, &["attempt"]),
];

/// `FIELD=NAME`: the log's column NAME holds FIELD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Column {
    field: Field,
    name: String,
}

/// Parses `--column FIELD=NAME`.
pub(crate) fn parse_column(text: &str) -> Result<Column, String> {
    let shown: String = text.chars().take(60).collect();
    let fields = "timestamp, key, tier, category, route, status, bytes, attempt";
    let (field, name) = text.split_once('=').ok_or_else(|| {
        format!("invalid column {shown:?}: write FIELD=NAME, such as key=api_key")
    })?;
    let field = NAMES
        .iter()
        .find(|(_, names)| names[0] == field.trim().to_ascii_lowercase())
        .map(|(f, _)| *f)
        .ok_or_else(|| format!("invalid column {shown:?}: the field is one of {fields}"))?;
    let name = name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(format!(
            "invalid column {shown:?}: name the log's column after ="
        ));
    }
    Ok(Column {
        field,
        name: name.to_ascii_lowercase(),
    })
}

/// The names the log's columns are read by.
#[derive(Clone, Debug, Default)]
pub(crate) struct Columns(Vec<Column>);

impl Columns {
    pub(crate) fn new(mapped: &[Column]) -> Columns {
        Columns(mapped.to_vec())
    }

    /// The field a column named `name` holds: a mapped name first; a known name unless its
    /// field is mapped to another column.
    pub(crate) fn field(&self, name: &str) -> Option<Field> {
        let name = name.trim().to_ascii_lowercase();
        if let Some(c) = self.0.iter().find(|c| c.name == name) {
            return Some(c.field);
        }
        let (field, _) = NAMES
            .iter()
            .find(|(_, names)| names.contains(&name.as_str()))?;
        (!self.0.iter().any(|c| c.field == *field)).then_some(*field)
    }

    /// The name a field is read from, for messages.
    pub(crate) fn name(&self, field: Field) -> String {
        match self.0.iter().find(|c| c.field == field) {
            Some(c) => c.name.clone(),
            None => NAMES
                .iter()
                .find(|(f, _)| *f == field)
                .map_or_else(String::new, |(_, n)| n[0].to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_column_replaces_the_known_name() {
        let c = Columns::new(&[parse_column("key=API_Key").unwrap_or_else(|e| panic!("{e}"))]);
        assert_eq!(c.field("api_key"), Some(Field::Key));
        assert_eq!(c.field("key"), None, "key is now read from api_key");
        assert_eq!(c.field("Time"), Some(Field::Timestamp));
        assert_eq!(c.name(Field::Key), "api_key");
        for bad in ["key", "colour=x", "key=", "=x"] {
            assert!(parse_column(bad).is_err(), "{bad}");
        }
    }
}
