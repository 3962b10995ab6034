//! `--newly-denied FILE`: every customer NEW denies and OLD never did, as CSV
//! (`key,denied,first_denied_at`), the most denied first.

use std::io::{BufWriter, Write};
use std::path::Path;

use super::side::Side;
use super::tally::key_hash;
use super::time::rfc3339;
use crate::replay::ReplayError;

/// Writes the list; returns how many customers it holds.
pub(super) fn write(path: &Path, old: &Side, new: &Side) -> Result<u64, ReplayError> {
    let mut rows: Vec<(&String, u64, i64)> = new
        .tally
        .denials
        .iter()
        .filter(|(k, _)| !old.tally.ever_denied.contains(&key_hash(k)))
        .map(|(k, (n, first))| (k, *n, *first))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let file = std::fs::File::create(path).map_err(|e| ReplayError::io("create", path, e))?;
    let io = |e| ReplayError::io("write", path, e);
    let mut w = BufWriter::new(file);
    writeln!(w, "key,denied,first_denied_at").map_err(io)?;
    for (key, n, first) in &rows {
        writeln!(w, "{},{n},{}", csv_cell(key), rfc3339(*first)).map_err(io)?;
    }
    w.flush().map_err(io)?;
    Ok(rows.len() as u64)
}

/// A cell as RFC 4180 writes it: quoted when it holds a comma, a quote or a line break.
fn csv_cell(v: &str) -> String {
    if v.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_owned()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cells_are_quoted_when_they_must_be() {
        assert_eq!(super::csv_cell("alice"), "alice");
        assert_eq!(super::csv_cell("a,b"), "\"a,b\"");
        assert_eq!(super::csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
