//! Several logs (one per frontend) read as one, merged by time: each step yields the
//! earliest of the logs' next records, so a replay sees one stream in time order.
//!
//! Memory: one pending record per log. Bad lines are passed on as they are read.

use std::path::PathBuf;

use super::columns::Columns;
use super::input::{self, Lines};
use super::parse::{BadLine, Next};
use super::record::Record;
use crate::replay::ReplayError;

/// One log and its next record, read ahead.
struct Log {
    lines: Lines,
    bar: indicatif::ProgressBar,
    next: Option<(u64, Record)>,
    done: bool,
}

/// What the merged stream yields.
pub(super) enum Item {
    /// A record of log `file`, read from `line`.
    Record {
        file: usize,
        line: u64,
        rec: Record,
    },
    /// A bad line of log `file`.
    Bad {
        file: usize,
        bad: BadLine,
    },
    End,
}

/// Logs read as one stream in time order.
pub(super) struct Merge {
    logs: Vec<Log>,
    names: Vec<String>,
    _bars: indicatif::MultiProgress,
}

impl Merge {
    /// Opens every log (`-`: stdin, at most once) and reads its header.
    pub(super) fn open(files: &[PathBuf], columns: &Columns) -> Result<Merge, ReplayError> {
        if files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
            return Err(ReplayError::Io(
                "--traffic - is given more than once: stdin can be read once".to_owned(),
            ));
        }
        let bars = indicatif::MultiProgress::new();
        let mut logs = Vec::with_capacity(files.len());
        for file in files {
            let (lines, bar) = input::open(file, columns, &bars)?;
            logs.push(Log {
                lines,
                bar,
                next: None,
                done: false,
            });
        }
        Ok(Merge {
            logs,
            names: files.iter().map(|f| input::name(f)).collect(),
            _bars: bars,
        })
    }

    /// The logs' names, as given.
    pub(super) fn names(&self) -> &[String] {
        &self.names
    }

    /// The lines read so far, over every log.
    pub(super) fn lines(&self) -> u64 {
        self.logs.iter().map(|l| l.lines.line()).sum()
    }

    /// The logs whose reading failed part way (named as given).
    pub(super) fn unreadable(&self) -> Vec<&str> {
        self.logs
            .iter()
            .zip(&self.names)
            .filter(|(l, _)| l.lines.failed())
            .map(|(_, n)| n.as_str())
            .collect()
    }

    /// The earliest next record of the logs (the first log's on a tie), or a bad line.
    pub(super) fn next_item(&mut self) -> Item {
        for (file, log) in self.logs.iter_mut().enumerate() {
            while log.next.is_none() && !log.done {
                match log.lines.next_record() {
                    Next::Record(rec) => log.next = Some((log.lines.line(), rec)),
                    Next::Bad(bad) => return Item::Bad { file, bad },
                    Next::End => {
                        log.done = true;
                        log.bar.finish_and_clear();
                    }
                }
            }
        }
        let earliest = self
            .logs
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.next.as_ref().map(|(_, r)| (r.t_ms, i)))
            .min();
        match earliest.and_then(|(_, file)| Some((file, self.logs[file].next.take()?))) {
            Some((file, (line, rec))) => Item::Record { file, line, rec },
            None => Item::End,
        }
    }
}
