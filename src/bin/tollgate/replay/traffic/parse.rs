//! Reading an access log line by line: CSV with a header, or JSON lines.
//!
//! Every field is attacker-controlled (keys, routes, timestamps): a line that cannot be read
//! is a [`BadLine`] with its number and why, never a panic and never silently dropped.

use std::io::BufRead;

use super::columns::{Columns, Field};
use super::record::{from_csv, from_json, Record, Splitter};

/// A line that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub(crate) struct BadLine {
    pub(crate) line: u64,
    pub(crate) message: String,
}

/// The longest line read; a longer one is a bad line (and is skipped without being kept).
pub(crate) const MAX_LINE: usize = 64 << 10;
/// The longest key kept; a longer one is a bad line.
pub(crate) const MAX_KEY: usize = 1024;

/// The log's shape, told by its first line.
#[derive(Debug)]
enum Shape {
    /// The columns of the header, `None` for ignored ones.
    Csv(Vec<Option<Field>>),
    Json,
}

/// Reads records from a log, counting lines.
#[derive(Debug)]
pub(crate) struct Reader<R> {
    input: R,
    shape: Shape,
    line: u64,
    buf: Vec<u8>,
    /// A JSON-lines log's first line, still to be read as a record.
    pending_first: bool,
    /// A read failed: the input ends there (a failing stream may fail forever).
    failed: bool,
    columns: Columns,
    split: Splitter,
}

/// Why a log cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// The input could not be read (exit status 2).
    #[error("cannot read: {0}")]
    Io(std::io::Error),
    /// Its first line is no header we can use (exit status 1).
    #[error("{0}")]
    Header(String),
}

/// What the reader yields per line.
pub(crate) enum Next {
    Record(Record),
    Bad(BadLine),
    End,
}

impl<R: BufRead> Reader<R> {
    /// Reads the first line: a CSV header naming `timestamp` and `key`, or a JSON object.
    pub(crate) fn new(mut input: R, columns: Columns) -> Result<Reader<R>, OpenError> {
        let mut buf = Vec::new();
        let mut line = 0;
        // Skip blank lines before the header.
        loop {
            buf.clear();
            let n = read_line(&mut input, &mut buf).map_err(OpenError::Io)?;
            line += 1;
            if n == 0 {
                return Err(OpenError::Header(
                    "the file is empty: write a header line naming the columns".into(),
                ));
            }
            if buf.len() > MAX_LINE {
                return Err(OpenError::Header(format!(
                    "line {line}: longer than {MAX_LINE} bytes: not a header naming the columns"
                )));
            }
            if !String::from_utf8_lossy(&buf).trim().is_empty() {
                break;
            }
        }
        let first = String::from_utf8_lossy(&buf).trim().to_owned();
        let mut split = Splitter::default();
        let shape = if first.starts_with('{') {
            Shape::Json
        } else {
            let cols: Vec<Option<Field>> = split
                .split(&first)
                .map_err(|e| OpenError::Header(format!("line {line}: header: {e}")))?
                .iter()
                .map(|c| columns.field(c))
                .collect();
            for need in [Field::Timestamp, Field::Key] {
                let name = columns.name(need);
                if !cols.contains(&Some(need)) {
                    return Err(OpenError::Header(format!(
                        "line {line}: the header {:?} names no {name} column; name the \
                         columns, e.g. \"timestamp,key,tier,category,route,status,bytes,attempt\", \
                         or map yours with --column {}=NAME",
                        cut(&first),
                        columns.name(need)
                    )));
                }
            }
            Shape::Csv(cols)
        };
        let pending_first = matches!(shape, Shape::Json);
        Ok(Reader {
            input,
            shape,
            line,
            buf,
            pending_first,
            failed: false,
            columns,
            split,
        })
    }

    /// `true` once a read failed (a truncated gzip stream, an I/O error): the rest of the
    /// input was not read, so the file is unreadable as a whole.
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    /// The number of the last line read.
    pub(crate) fn line(&self) -> u64 {
        self.line
    }

    /// The next record, bad line, or the end.
    pub(crate) fn next_record(&mut self) -> Next {
        loop {
            if self.pending_first {
                self.pending_first = false;
            } else if self.failed {
                return Next::End;
            } else {
                self.buf.clear();
                match read_line(&mut self.input, &mut self.buf) {
                    Ok(0) => return Next::End,
                    Ok(_) => self.line += 1,
                    Err(e) => {
                        self.line += 1;
                        self.failed = true;
                        return self.bad(format!("cannot read: {e}; the rest is not read"));
                    }
                }
            }
            if self.buf.len() > MAX_LINE {
                return self.bad(format!("longer than {MAX_LINE} bytes"));
            }
            let Ok(text) = std::str::from_utf8(&self.buf) else {
                return self.bad("not UTF-8".to_owned());
            };
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let parsed = match &self.shape {
                Shape::Csv(cols) => from_csv(&mut self.split, cols, &self.columns, text),
                Shape::Json => from_json(&self.columns, text),
            };
            return match parsed {
                Ok(r) => Next::Record(r),
                Err(message) => self.bad(message),
            };
        }
    }

    fn bad(&self, message: String) -> Next {
        Next::Bad(BadLine {
            line: self.line,
            message,
        })
    }
}

/// Reads one line, keeping at most [`MAX_LINE`] + 1 bytes of it (the rest is consumed).
fn read_line<R: BufRead>(input: &mut R, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(total);
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = (MAX_LINE + 1).saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        input.consume(take);
        total += take;
        if done {
            return Ok(total);
        }
    }
}

/// A value for a message: at most 40 characters of it.
pub(crate) fn cut(v: &str) -> String {
    v.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_carry_their_numbers() {
        let log = "timestamp,key,status\n0,a,200\n\nnope,b,200\n5,,200\n6,c\n7,d,999\n8,e,200\n";
        let mut r =
            Reader::new(log.as_bytes(), Columns::default()).unwrap_or_else(|e| panic!("{e}")); // test
        let mut got = Vec::new();
        loop {
            match r.next_record() {
                Next::Record(rec) => got.push(format!("ok {}", rec.key)),
                Next::Bad(b) => got.push(format!("bad {}", b.line)),
                Next::End => break,
            }
        }
        assert_eq!(got, ["ok a", "bad 4", "bad 5", "bad 6", "bad 7", "ok e"]);
    }

    #[test]
    fn a_header_without_a_key_is_refused() {
        let err = Reader::new("timestamp,customer_id\n".as_bytes(), Columns::default()).err();
        assert!(err.is_some_and(|e| e.to_string().contains("names no key column")));
    }

    #[test]
    fn json_lines() {
        let log = "{\"timestamp\":\"2026-03-14T08:17:00Z\",\"key\":\"k\",\"attempt\":2}\n{\"key\":3}\n[1]\n";
        let mut r =
            Reader::new(log.as_bytes(), Columns::default()).unwrap_or_else(|e| panic!("{e}")); // test
        assert!(matches!(r.next_record(), Next::Record(rec) if rec.attempt == 2 && rec.key == "k"));
        assert!(
            matches!(r.next_record(), Next::Bad(b) if b.line == 2 && b.message == "no timestamp")
        );
        assert!(matches!(r.next_record(), Next::Bad(b) if b.line == 3));
        assert!(matches!(r.next_record(), Next::End));
    }

    #[test]
    fn an_overlong_line_is_bad_and_kept_short() {
        let long = "x".repeat(MAX_LINE * 3);
        let log = format!("timestamp,key\n1,{long}\n2,k\n");
        let mut r =
            Reader::new(log.as_bytes(), Columns::default()).unwrap_or_else(|e| panic!("{e}")); // test
        assert!(matches!(r.next_record(), Next::Bad(b) if b.line == 2));
        assert!(r.buf.capacity() <= 2 * (MAX_LINE + 1));
        assert!(matches!(r.next_record(), Next::Record(rec) if rec.key == "k"));
    }
}
