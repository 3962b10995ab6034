//! One line of a log made a [`Record`]: its CSV cells split by `csv-core` (the `csv`
//! crate's parser, RFC 4180 quoting, no allocation per line) or its JSON object read, then
//! each field checked.

use super::columns::{Columns, Field};
use super::parse::{cut, MAX_KEY, MAX_LINE};
use super::time::timestamp;

/// One request of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Milliseconds since the Unix epoch.
    pub(crate) t_ms: i64,
    pub(crate) key: String,
    pub(crate) tier: String,
    pub(crate) category: String,
    pub(crate) route: String,
    pub(crate) status: Option<u16>,
    pub(crate) bytes: Option<u64>,
    pub(crate) attempt: u32,
}

/// The most cells a CSV line may have.
const MAX_CELLS: usize = 256;

/// Splits CSV lines into cells, reusing its buffers.
pub(crate) struct Splitter {
    csv: csv_core::Reader,
    out: Vec<u8>,
    ends: Vec<usize>,
}

impl std::fmt::Debug for Splitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Splitter").finish_non_exhaustive()
    }
}

impl Default for Splitter {
    fn default() -> Splitter {
        Splitter {
            csv: csv_core::Reader::new(),
            // Unquoting only shortens a cell: a line's cells fit in the line's length.
            out: vec![0; MAX_LINE + 1],
            ends: vec![0; MAX_CELLS],
        }
    }
}

impl Splitter {
    /// The cells of `line` (one line, without its newline).
    pub(crate) fn split<'a>(&'a mut self, line: &str) -> Result<Vec<&'a str>, String> {
        // A quote left open would run to the end of the line silently: refuse it.
        if line.bytes().filter(|&b| b == b'"').count() % 2 == 1 {
            return Err("an unclosed quote".into());
        }
        self.csv.reset();
        let (mut input, mut nout, mut nend) = (line.as_bytes(), 0, 0);
        loop {
            let (res, nin, o, e) =
                self.csv
                    .read_record(input, &mut self.out[nout..], &mut self.ends[nend..]);
            input = &input[nin..];
            nout += o;
            nend += e;
            match res {
                csv_core::ReadRecordResult::InputEmpty => continue,
                csv_core::ReadRecordResult::Record | csv_core::ReadRecordResult::End => break,
                csv_core::ReadRecordResult::OutputEndsFull => {
                    return Err(format!("more than {MAX_CELLS} cells"))
                }
                csv_core::ReadRecordResult::OutputFull => {
                    return Err(format!("longer than {MAX_LINE} bytes"))
                }
            }
        }
        // One UTF-8 check for the whole line's cells (a check per cell cost 3 % of a replay);
        // cells end where a quote or a comma was, never inside a character.
        let text = std::str::from_utf8(&self.out[..nout]).map_err(|_| "not UTF-8")?;
        let mut cells = Vec::with_capacity(nend);
        let mut start = 0;
        for &end in &self.ends[..nend] {
            cells.push(text.get(start..end).ok_or("not UTF-8")?);
            start = end;
        }
        Ok(cells)
    }
}

#[derive(Default)]
struct Fields {
    t: Option<i64>,
    key: Option<String>,
    tier: String,
    category: String,
    route: String,
    status: Option<u16>,
    bytes: Option<u64>,
    attempt: u32,
}

impl Fields {
    fn set(&mut self, f: Field, v: &str) -> Result<(), String> {
        let v = v.trim();
        match f {
            Field::Timestamp => self.t = Some(timestamp(v)?),
            Field::Key => self.key = Some(v.to_owned()),
            Field::Tier => v.clone_into(&mut self.tier),
            Field::Category => v.clone_into(&mut self.category),
            Field::Route => v.clone_into(&mut self.route),
            Field::Status if v.is_empty() => {}
            Field::Status => {
                self.status = Some(
                    v.parse::<u16>()
                        .ok()
                        .filter(|s| (100..=599).contains(s))
                        .ok_or_else(|| format!("status {:?} is not an HTTP status", cut(v)))?,
                );
            }
            Field::Bytes if v.is_empty() => {}
            Field::Bytes => {
                self.bytes = Some(
                    v.parse()
                        .map_err(|_| format!("bytes {:?} is not a whole number", cut(v)))?,
                );
            }
            Field::Attempt if v.is_empty() => {}
            Field::Attempt => {
                self.attempt = v
                    .parse()
                    .map_err(|_| format!("attempt {:?} is not a whole number", cut(v)))?;
            }
        }
        Ok(())
    }

    fn record(self, columns: &Columns) -> Result<Record, String> {
        let t_ms = self
            .t
            .ok_or_else(|| format!("no {}", columns.name(Field::Timestamp)))?;
        let key = self
            .key
            .filter(|k| !k.is_empty())
            .ok_or_else(|| format!("no {}", columns.name(Field::Key)))?;
        if key.len() > MAX_KEY {
            return Err(format!("the key is longer than {MAX_KEY} bytes"));
        }
        Ok(Record {
            t_ms,
            key,
            tier: self.tier,
            category: self.category,
            route: self.route,
            status: self.status,
            bytes: self.bytes,
            attempt: self.attempt,
        })
    }
}

/// A CSV line read by the header's columns.
pub(crate) fn from_csv(
    split: &mut Splitter,
    cols: &[Option<Field>],
    columns: &Columns,
    line: &str,
) -> Result<Record, String> {
    let cells = split.split(line)?;
    if cells.len() != cols.len() {
        return Err(format!(
            "{} fields where the header names {}",
            cells.len(),
            cols.len()
        ));
    }
    let mut f = Fields::default();
    for (col, cell) in cols.iter().zip(&cells) {
        if let Some(col) = col {
            f.set(*col, cell)?;
        }
    }
    f.record(columns)
}

/// A JSON-lines line: one object, its members read by name.
pub(crate) fn from_json(columns: &Columns, line: &str) -> Result<Record, String> {
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON: {}", cut(&e.to_string())))?;
    let obj = value.as_object().ok_or("not a JSON object")?;
    let mut f = Fields::default();
    for (name, v) in obj {
        let Some(col) = columns.field(name) else {
            continue;
        };
        match v {
            serde_json::Value::String(s) => f.set(col, s)?,
            serde_json::Value::Number(n) => f.set(col, &n.to_string())?,
            serde_json::Value::Null => {}
            _ => return Err(format!("{:?}: expected a string or a number", cut(name))),
        }
    }
    f.record(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quoting() {
        let mut s = Splitter::default();
        assert_eq!(s.split(r#"a,"b,c","d""e""#), Ok(vec!["a", "b,c", "d\"e"]));
        assert_eq!(s.split("x"), Ok(vec!["x"]));
        // An empty line has no cells (the reader skips blank lines before splitting).
        assert_eq!(s.split(""), Ok(vec![]));
        assert!(s.split(r#"a,"b"#).is_err());
        assert!(s.split(&",".repeat(MAX_CELLS + 1)).is_err());
    }
}
