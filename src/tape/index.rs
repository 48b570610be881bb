//! The in-memory index of a tape file: one small [`Slot`] per entry (id, byte range, kind),
//! never the parsed entries themselves.
//!
//! The index is re-synced before every operation by reading only the bytes appended since the
//! last sync (other handles and processes append too). Invariants:
//! * `synced` is always the end of a complete (`\n`-terminated) line; a trailing partial line
//!   (a torn write, or a write in progress by a non-locking writer) is not indexed yet.
//! * A file that is now shorter than `synced`, or is another file (inode) than the one indexed,
//!   resets the index, which is then rebuilt from the start.
//! * A line whose id is not greater than the previous slot's id means the previous line is
//!   suspect (a torn line later completed by the `\n` of a repairing append carries the same id
//!   as the entry written after it): both are then validated by a full parse and invalid ones
//!   dropped, so ids in the index stay unique.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};

use super::entry::{Kind, fast_header, full_header};

/// Where one entry lives in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub id: u64,
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// Length of the line without its line terminator.
    pub len: u64,
    pub kind: Kind,
}

/// Identity of an open file (device + inode on Unix), to notice replaced files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId(u64, u64);

impl FileId {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            Self(meta.dev(), meta.ino())
        }
        #[cfg(not(unix))]
        {
            let _ = meta;
            Self(0, 0)
        }
    }
}

/// Index of one tape file.
#[derive(Debug, Default)]
pub(crate) struct Index {
    pub slots: Vec<Slot>,
    /// Positions (into `slots`) of the anchors, oldest first.
    pub anchors: Vec<usize>,
    pub max_id: u64,
    /// Bytes of the file consumed so far (always just after a `\n`).
    pub synced: u64,
    /// Length of the partial line after `synced` seen by the last sync (0 if none).
    pub tail: u64,
    file: Option<FileId>,
}

/// Size of the read buffer for syncing and of the chunks read for backward scans.
pub(crate) const CHUNK: usize = 1 << 20;

impl Index {
    /// Forgets everything (the file was deleted, truncated or replaced).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Reads the bytes appended to `file` since the last sync and indexes complete lines.
    /// `file` must be locked (shared or exclusive) by the caller. With `repair_tail` (the
    /// caller holds the exclusive lock and is about to append a `\n` after a partial last
    /// line), that partial line is validated fully and indexed if it is a valid entry.
    pub fn sync(&mut self, file: &File, repair_tail: bool) -> std::io::Result<()> {
        let meta = file.metadata()?;
        let id = FileId::of(&meta);
        let len = meta.len();
        if self.file != Some(id) || len < self.synced {
            self.reset();
            self.file = Some(id);
        }
        self.tail = 0;
        if len == self.synced {
            return Ok(());
        }
        let mut reader = BufReader::with_capacity(CHUNK, file);
        reader.seek(SeekFrom::Start(self.synced))?;
        let mut line = Vec::with_capacity(512);
        let mut prev = Vec::with_capacity(512);
        // Whether `prev` holds the line of the last slot (same batch); otherwise it is re-read.
        let mut prev_valid = false;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 {
                break;
            }
            let offset = self.synced;
            if line.last() != Some(&b'\n') {
                // A partial last line: leave it for a later sync.
                self.tail = n as u64;
                if repair_tail {
                    self.index_line(file, &line, offset, true, &prev, prev_valid)?;
                }
                break;
            }
            let indexed = self.index_line(file, &line, offset, false, &prev, prev_valid)?;
            self.synced += n as u64;
            if indexed {
                std::mem::swap(&mut line, &mut prev);
                prev_valid = true;
            }
        }
        Ok(())
    }

    /// Indexes one line at `offset`; returns whether it was added.
    fn index_line(
        &mut self,
        file: &File,
        raw: &[u8],
        offset: u64,
        force_full: bool,
        prev: &[u8],
        prev_valid: bool,
    ) -> std::io::Result<bool> {
        let line = trim_end(raw);
        if line.is_empty() {
            return Ok(false);
        }
        let fast = if force_full {
            None
        } else {
            fast_header(line).map(|(id, k, _)| (id, k))
        };
        let (id, kind) = match fast.or_else(|| full_header(line)) {
            Some(h) => h,
            None => return Ok(false),
        };
        if let Some(last) = self.slots.last().copied()
            && id <= last.id
        {
            let prev_line = if prev_valid {
                trim_end(prev).to_vec()
            } else {
                read_at(file, last.offset, last.len)?
            };
            if full_header(&prev_line).is_none() {
                self.pop();
            }
            if fast.is_some() && full_header(line).is_none() {
                return Ok(false);
            }
        }
        let len = line.len() as u64;
        self.push(Slot {
            id,
            offset,
            len,
            kind,
        });
        Ok(true)
    }

    /// Adds a slot (also used by appends, which know the slot without reading it back).
    pub fn push(&mut self, slot: Slot) {
        if slot.kind == Kind::Anchor {
            self.anchors.push(self.slots.len());
        }
        self.max_id = self.max_id.max(slot.id);
        self.slots.push(slot);
    }

    fn pop(&mut self) {
        if self.slots.pop().is_some() {
            if self.anchors.last() == Some(&self.slots.len()) {
                self.anchors.pop();
            }
            self.max_id = self.slots.iter().map(|s| s.id).max().unwrap_or(0);
        }
    }

    /// Position of the last anchor in `slots`.
    pub fn last_anchor(&self) -> Option<usize> {
        self.anchors.last().copied()
    }
}

/// The line without trailing `\n`, `\r` and spaces.
fn trim_end(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !matches!(b, b'\n' | b'\r' | b' ' | b'\t'))
        .map_or(0, |p| p + 1);
    &line[..end]
}

/// Reads `len` bytes at `offset` without moving the file cursor.
pub(crate) fn read_at(file: &File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0; usize::try_from(len).map_err(std::io::Error::other)?];
    read_exact_at(file, &mut buf, offset)?;
    Ok(buf)
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(not(any(unix, windows)))]
fn read_exact_at(_: &File, _: &mut [u8], _: u64) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "positional reads are not supported on this platform",
    ))
}

/// Reads lines of a file backwards (newest first) in chunks, for scans that usually stop
/// early (search, last token usage).
pub(crate) struct BackReader<'a> {
    file: &'a File,
    buf: Vec<u8>,
    start: u64,
}

impl<'a> BackReader<'a> {
    pub fn new(file: &'a File) -> Self {
        Self {
            file,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The bytes of `slot`'s line; slots must be requested in decreasing offset order for the
    /// chunking to pay off (any order is correct).
    pub fn line(&mut self, slot: &Slot) -> std::io::Result<&[u8]> {
        let end = slot.offset + slot.len;
        let buf_end = self.start + self.buf.len() as u64;
        if slot.offset < self.start || end > buf_end {
            let begin = end.saturating_sub((CHUNK as u64).max(slot.len));
            self.buf = read_at(self.file, begin, end - begin)?;
            self.start = begin;
        }
        let from = (slot.offset - self.start) as usize;
        Ok(&self.buf[from..from + slot.len as usize])
    }
}
