//! Opening an access log: a file or `-` for stdin, gzip-compressed or not (told by its first
//! two bytes, not its name), with a progress bar on its bytes when both outputs are terminals.

use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::Path;

use super::columns::Columns;
use super::parse::{OpenError, Reader};
use crate::replay::ReplayError;

/// The gzip magic number (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The read buffer of a log, and of its decompressed stream.
const BUFFER: usize = 1 << 16;

/// Counts the bytes read, for the progress bar.
struct Counting<R> {
    inner: R,
    bar: indicatif::ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

/// A log's lines, whatever it was read from.
pub(crate) type Lines = Reader<Box<dyn BufRead>>;

/// The name a report gives a log: its path, or `-` for stdin.
pub(crate) fn name(file: &Path) -> String {
    file.display().to_string()
}

/// Opens the log `file` (`-`: stdin) and reads its header. A file that cannot be read (a
/// directory, a missing file) is [`ReplayError::Io`]; a first line that names no usable
/// columns is [`ReplayError::Input`].
pub(crate) fn open(
    file: &Path,
    columns: &Columns,
    multi: &indicatif::MultiProgress,
) -> Result<(Lines, indicatif::ProgressBar), ReplayError> {
    let (raw, size): (Box<dyn Read>, u64) = if file == Path::new("-") {
        (Box::new(std::io::stdin()), 0)
    } else {
        let meta = std::fs::metadata(file).map_err(|e| ReplayError::io("read", file, e))?;
        if meta.is_dir() {
            return Err(ReplayError::Io(format!(
                "cannot read {:?}: it is a directory; give a log file, or - for stdin",
                name(file)
            )));
        }
        let f = std::fs::File::open(file).map_err(|e| ReplayError::io("read", file, e))?;
        (Box::new(f), meta.len())
    };
    let bar = if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
        let bar = multi.add(indicatif::ProgressBar::new(size));
        let template = "{bar:40} {bytes}/{total_bytes} {eta}";
        if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let counting = Counting {
        inner: raw,
        bar: bar.clone(),
    };
    let mut input = BufReader::with_capacity(BUFFER, counting);
    let head = input
        .fill_buf()
        .map_err(|e| ReplayError::io("read", file, e))?;
    let input: Box<dyn BufRead> = if head.starts_with(&GZIP_MAGIC) {
        let gz = flate2::bufread::MultiGzDecoder::new(input);
        Box::new(BufReader::with_capacity(BUFFER, gz))
    } else {
        Box::new(input)
    };
    let reader = Reader::new(input, columns.clone()).map_err(|e| match e {
        OpenError::Io(e) => ReplayError::io("read", file, e),
        OpenError::Header(m) => ReplayError::Input(format!("{}: {m}", name(file))),
    })?;
    Ok((reader, bar))
}
