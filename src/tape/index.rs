//! The in-memory index of a tape file: counters and positions only, never one record per
//! entry and never parsed entries. It holds the number of entries and of anchors, the largest
//! id, how far the file has been read (`synced`, `tail`), the file's identity, the last
//! [`UNDO_DEPTH`] lines indexed (for the torn-line repair below) and the byte ranges of the
//! newest [`ANCHORS_KEPT`] anchors. Its size is therefore bounded by a constant (the tests
//! check it with `Index::footprint`), however long the tape grows.
//!
//! What needs the entries themselves reads them from the file: the context parses the lines
//! from the last anchor's offset to `synced`, `entries` the lines from the start, and search,
//! the last token usage and anchors older than those kept scan the file backwards with
//! [`BackLines`], taking each line's kind from its header.
//!
//! The index is re-synced before every operation by reading only the bytes appended since the
//! last sync (other handles and processes append too). Invariants:
//! * `synced` is always the end of a complete (`\n`-terminated) line; a trailing partial line
//!   (a torn write, or a write in progress by a non-locking writer) is not indexed yet.
//! * A file that is now shorter than `synced`, or is another file (inode) than the one indexed,
//!   resets the index, which is then rebuilt from the start.
//! * A line whose id is not greater than the previous indexed line's id means the previous line
//!   is suspect (a torn line later completed by the `\n` of a repairing append carries the same
//!   id as the entry written after it): both are then validated by a full parse and invalid
//!   ones dropped, so ids stay unique. Dropping a line undoes what it added to the counters
//!   (entries, anchors, largest id); the index remembers the last [`UNDO_DEPTH`] lines for
//!   that, enough for two suspect lines in a row — after that, the line before is not
//!   re-checked.
//! * The newest `min(anchors, ANCHORS_KEPT - UNDO_DEPTH)` anchors are always kept (a drop
//!   removes at most the newest kept anchor and cannot bring back the oldest one evicted), so
//!   the last anchor is always known and `tape.anchors` (50) never needs the file.

use std::collections::VecDeque;
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
    /// The line is an anchor.
    pub anchor: bool,
}

/// An anchor the index keeps: its line, and its position among the entries (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AnchorSlot {
    pub offset: u64,
    pub len: u64,
    pub pos: usize,
}

/// How many of the newest anchors the index keeps (`tape.anchors` shows at most 50).
pub(crate) const ANCHORS_KEPT: usize = 64;

/// How many of the last indexed lines can be dropped again (see the module documentation).
pub(crate) const UNDO_DEPTH: usize = 2;

/// An indexed line and the largest id before it, to drop it again.
#[derive(Debug, Clone, Copy)]
struct Undo {
    slot: Slot,
    max_before: u64,
}

/// Identity of an open file (device + inode on Unix), to notice replaced files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId(u64, u64);

impl FileId {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
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

/// Index of one tape file (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Entries indexed.
    pub entries: usize,
    /// Anchors indexed (all of them, not only those kept).
    pub anchor_count: usize,
    /// The newest anchors, oldest first, at most [`ANCHORS_KEPT`].
    anchors: VecDeque<AnchorSlot>,
    pub max_id: u64,
    /// Bytes of the file consumed so far (always just after a `\n`).
    pub synced: u64,
    /// Length of the partial line after `synced` seen by the last sync (0 if none).
    pub tail: u64,
    file: Option<FileId>,
    /// The last indexed lines, newest first.
    recent: [Option<Undo>; UNDO_DEPTH],
}

/// Size of the chunks read for backward scans, and the largest read buffer for syncing.
pub(crate) const CHUNK: usize = 1 << 20;

/// The smallest read buffer for syncing (a sync usually reads one or two appended lines).
const MIN_SYNC_BUFFER: usize = 8 << 10;

impl Index {
    /// Forgets everything (the file was deleted, truncated or replaced).
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }

    /// Reads the bytes appended to `file` since the last sync and indexes complete lines.
    /// `file` must be locked (shared or exclusive) by the caller. With `repair_tail` (the
    /// caller holds the exclusive lock and is about to append a `\n` after a partial last
    /// line), that partial line is validated fully and indexed if it is a valid entry.
    pub(crate) fn sync(&mut self, file: &File, repair_tail: bool) -> std::io::Result<()> {
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
        let unread = usize::try_from(len - self.synced).unwrap_or(CHUNK);
        let mut reader = BufReader::with_capacity(unread.clamp(MIN_SYNC_BUFFER, CHUNK), file);
        reader.seek(SeekFrom::Start(self.synced))?;
        // The start of a line whose end is not read yet (a long line, or the last one).
        let mut carry = Vec::new();
        loop {
            let buf = reader.fill_buf()?;
            let filled = buf.len();
            if filled == 0 {
                break;
            }
            let mut used = 0;
            if !carry.is_empty() {
                let Some(nl) = find_newline(buf) else {
                    carry.extend_from_slice(buf);
                    reader.consume(filled);
                    continue;
                };
                carry.extend_from_slice(&buf[..=nl]);
                used = nl + 1;
                self.index_line(file, &carry, false, None)?;
                self.synced += carry.len() as u64;
                carry.clear();
            }
            // Complete lines are indexed where they are in the read buffer.
            let mut prev = None;
            while let Some(nl) = find_newline(&buf[used..]) {
                let line = &buf[used..used + nl + 1];
                let offset = self.synced;
                if self.index_line(file, line, false, prev)? {
                    prev = Some((offset, line));
                }
                self.synced += line.len() as u64;
                used += nl + 1;
            }
            carry.extend_from_slice(&buf[used..]);
            reader.consume(filled);
        }
        if !carry.is_empty() {
            // A partial last line: leave it for a later sync.
            self.tail = carry.len() as u64;
            if repair_tail {
                self.index_line(file, &carry, true, None)?;
            }
        }
        Ok(())
    }

    /// Indexes the line at `synced` (raw, with its terminator if any); returns whether it was
    /// added. `prev` is the offset and raw line of an earlier line at hand: when it is the
    /// last indexed line, it is not read again from the file.
    fn index_line(
        &mut self,
        file: &File,
        raw: &[u8],
        force_full: bool,
        prev: Option<(u64, &[u8])>,
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
        let read_fast = fast.is_some();
        let (id, kind) = match fast.or_else(|| full_header(line)) {
            Some(h) => h,
            None => return Ok(false),
        };
        if let Some(last) = self.last()
            && id <= last.id
        {
            let prev_ok = match prev {
                Some((at, p)) if at == last.offset => full_header(trim_end(p)).is_some(),
                _ => full_header(&read_at(file, last.offset, last.len)?).is_some(),
            };
            if !prev_ok {
                self.pop();
            }
            if read_fast && full_header(line).is_none() {
                return Ok(false);
            }
        }
        self.push(Slot {
            id,
            offset: self.synced,
            len: line.len() as u64,
            anchor: kind == Kind::Anchor,
        });
        Ok(true)
    }

    /// Counts an indexed line (also used by appends, which know the slot without reading it
    /// back).
    pub(crate) fn push(&mut self, slot: Slot) {
        if slot.anchor {
            if self.anchors.len() == ANCHORS_KEPT {
                self.anchors.pop_front();
            }
            self.anchors.push_back(AnchorSlot {
                offset: slot.offset,
                len: slot.len,
                pos: self.entries,
            });
            self.anchor_count += 1;
        }
        self.recent.rotate_right(1);
        self.recent[0] = Some(Undo {
            slot,
            max_before: self.max_id,
        });
        self.max_id = self.max_id.max(slot.id);
        self.entries += 1;
    }

    /// Drops the last indexed line again (it turned out to be torn).
    fn pop(&mut self) {
        let Some(undo) = self.recent[0].take() else {
            return;
        };
        self.recent.rotate_left(1);
        self.entries -= 1;
        if undo.slot.anchor {
            self.anchor_count -= 1;
            let dropped = self.anchors.pop_back();
            debug_assert_eq!(dropped.map(|a| a.offset), Some(undo.slot.offset));
        }
        self.max_id = undo.max_before;
    }

    /// The last indexed line, when known.
    fn last(&self) -> Option<Slot> {
        self.recent[0].map(|u| u.slot)
    }

    /// The newest anchors the index keeps, oldest first (all of them when
    /// `kept_anchors().len() == anchor_count`).
    pub(crate) fn kept_anchors(&self) -> &VecDeque<AnchorSlot> {
        &self.anchors
    }

    /// The last anchor.
    pub(crate) fn last_anchor(&self) -> Option<AnchorSlot> {
        self.anchors.back().copied()
    }

    /// The identity (device, inode) of the file last synced; `(0, 0)` before the first sync.
    pub(crate) fn file_id(&self) -> (u64, u64) {
        self.file.map_or((0, 0), |f| (f.0, f.1))
    }

    /// Entries after the last anchor, by position (all entries when there is no anchor).
    pub(crate) fn entries_since_last_anchor(&self) -> usize {
        self.last_anchor()
            .map_or(self.entries, |a| self.entries - a.pos - 1)
    }

    /// Bytes the index occupies, its heap allocations included (bounded by a constant: see
    /// the module documentation).
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        std::mem::size_of::<Self>() + self.anchors.capacity() * std::mem::size_of::<AnchorSlot>()
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

/// The id and kind of an entry line, from its header (the cheap prefix read for our own lines,
/// a full parse otherwise); `None` when the line is not a valid entry.
pub(crate) fn line_header(line: &[u8]) -> Option<(u64, Kind)> {
    match fast_header(line) {
        Some((id, kind, _)) => Some((id, kind)),
        None => full_header(line),
    }
}

/// The kind of an entry line (see [`line_header`]).
pub(crate) fn line_kind(line: &[u8]) -> Option<Kind> {
    line_header(line).map(|(_, kind)| kind)
}

/// The lines of `bytes` (complete lines of the file), without terminators; blank lines left
/// out.
pub(crate) fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .split(|&b| b == b'\n')
        .map(trim_end)
        .filter(|l| !l.is_empty())
}

/// Reads the lines of a file before a given offset backwards (newest first), in chunks of
/// [`CHUNK`] bytes, without an index: for scans that usually stop early (search, last token
/// usage, anchors older than those the index keeps). Lines come without terminators and
/// trailing blanks (as the index measures them); blank lines are returned empty.
pub(crate) struct BackLines<'a> {
    file: &'a File,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    start: u64,
    /// `buf[..rest]` is not returned yet; it ends at a line end.
    rest: usize,
}

impl<'a> BackLines<'a> {
    /// Lines of `file` before `end`, which must be the end of a line (`synced`).
    pub(crate) fn new(file: &'a File, end: u64) -> Self {
        Self {
            file,
            buf: Vec::new(),
            start: end,
            rest: 0,
        }
    }

    /// The next line going backwards, `None` at the start of the file.
    pub(crate) fn next_line(&mut self) -> std::io::Result<Option<&[u8]>> {
        if self.rest == 0 && self.start == 0 {
            return Ok(None);
        }
        let (from, to) = loop {
            let to = if self.buf[..self.rest].last() == Some(&b'\n') {
                self.rest - 1
            } else {
                self.rest
            };
            if let Some(nl) = rfind_newline(&self.buf[..to]) {
                break (nl + 1, to);
            }
            if self.start == 0 {
                break (0, to);
            }
            self.extend()?;
        };
        self.rest = from;
        Ok(Some(trim_end(&self.buf[from..to])))
    }

    /// Reads the chunk before `buf[..rest]` (at least as many bytes as it holds, so a long line
    /// costs amortized linear time) and puts it in front.
    fn extend(&mut self) -> std::io::Result<()> {
        let keep = self.rest;
        let more = self.start.min(CHUNK.max(keep) as u64) as usize;
        // Bytes after `rest` are stale; the buffer only grows (no zeroing once it is large).
        if self.buf.len() < keep + more {
            self.buf.resize(keep + more, 0);
        }
        self.buf.copy_within(0..keep, more);
        self.start -= more as u64;
        read_exact_at(self.file, &mut self.buf[..more], self.start)?;
        self.rest = keep + more;
        Ok(())
    }
}

/// Whether a 32-byte block holds a `\n` (a branch-free test the compiler vectorizes).
#[inline(always)]
fn has_newline(block: &[u8; 32]) -> bool {
    block.iter().fold(0u8, |any, &b| any | u8::from(b == b'\n')) != 0
}

/// Position of the first `\n` in `bytes`, 32 bytes at a time.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    let mut start = 0;
    while let Some(block) = bytes.get(start..start + 32) {
        if has_newline(block.try_into().expect("32 bytes")) {
            break;
        }
        start += 32;
    }
    bytes[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|p| start + p)
}

/// Position of the last `\n` in `bytes`, 32 bytes at a time.
fn rfind_newline(bytes: &[u8]) -> Option<usize> {
    let mut end = bytes.len();
    while end >= 32 {
        if has_newline(bytes[end - 32..end].try_into().expect("32 bytes")) {
            break;
        }
        end -= 32;
    }
    bytes[..end].iter().rposition(|&b| b == b'\n')
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use serde_json::{Value, json};

    use super::*;
    use crate::llm::ChatMessage;
    use crate::tape::{Event, FileTape, Searched};

    /// The bound the index must stay under, whatever the tape's length.
    fn bound() -> usize {
        std::mem::size_of::<Index>() + ANCHORS_KEPT * std::mem::size_of::<AnchorSlot>()
    }

    fn text(e: &crate::tape::TapeEntry) -> &str {
        e.payload["content"].as_str().unwrap_or_default()
    }

    #[test]
    fn footprint_is_bounded_without_anchors() {
        const N: usize = 20_000;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut tape = FileTape::open_path(path.clone(), "t".into()).unwrap();
        tape.event(
            Event::Run,
            json!({"status": "ok", "usage": {"total_tokens": 77}}),
        )
        .unwrap();
        for i in 1..N {
            let word = if i == 1 { "kumquat" } else { "lorem" };
            let content = format!("needle-{i} {}", format!("{word} ipsum ").repeat(8));
            tape.append(
                Kind::Message,
                json!({"role": "user", "content": content}),
                json!({}),
            )
            .unwrap();
        }
        assert!(std::fs::metadata(&path).unwrap().len() > 2 * CHUNK as u64);
        assert_eq!(tape.index.footprint(), std::mem::size_of::<Index>());
        // A cold open builds the same index from the file.
        let mut cold = FileTape::open_path(path, "t".into()).unwrap();
        assert_eq!(cold.len().unwrap(), N);
        assert_eq!(cold.index.footprint(), std::mem::size_of::<Index>());
        assert!(cold.index.footprint() < 256, "{}", cold.index.footprint());

        let info = cold.info().unwrap();
        assert_eq!(
            (info.entries, info.anchors, info.entries_since_last_anchor),
            (N, 0, N)
        );
        assert_eq!(info.last_token_usage, Some(77), "found at the very start");
        let entries = cold.entries().unwrap();
        assert_eq!(
            entries.iter().map(|e| e.id).collect::<Vec<_>>(),
            (1..=N as u64).collect::<Vec<_>>()
        );
        let context = cold.context_messages().unwrap();
        let context: Vec<Value> = context.iter().map(ChatMessage::to_record).collect();
        assert_eq!(context.len(), N - 1);
        assert!(
            context[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("needle-1 ")
        );
        // Search: newest first, and a full backward scan across chunks.
        let newest = cold.search("needle", 3, Searched::Everything).unwrap();
        assert_eq!(
            newest.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![N as u64, N as u64 - 1, N as u64 - 2]
        );
        let oldest = cold.search("kumquat", 5, Searched::Everything).unwrap();
        assert_eq!(oldest.len(), 1);
        assert!(
            text(&oldest[0]).starts_with("needle-1 "),
            "{}",
            text(&oldest[0])
        );
        assert!(
            cold.search("quixotic zephyr", 5, Searched::Everything)
                .unwrap()
                .is_empty()
        );
        assert_eq!(cold.index.footprint(), std::mem::size_of::<Index>());
    }

    #[test]
    fn footprint_is_bounded_with_many_anchors() {
        const N: usize = 20_000;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut tape = FileTape::open_path(path.clone(), "t".into()).unwrap();
        tape.ensure_bootstrap().unwrap();
        tape.event(
            Event::Run,
            json!({"status": "ok", "usage": {"total_tokens": 5}}),
        )
        .unwrap();
        let mut handoffs = 0;
        // Entries so far; the next one gets id `total + 1`.
        let mut total = 3;
        while total < N {
            if total % 50 == 0 {
                handoffs += 1;
                tape.handoff(&format!("phase-{handoffs}"), Some("did things"), None)
                    .unwrap();
                total += 2;
            } else {
                let word = if total + 1 == 1000 {
                    "persimmon"
                } else {
                    "dolor"
                };
                let content = format!(
                    "entry-{} {}",
                    total + 1,
                    format!("{word} sit amet ").repeat(6)
                );
                tape.append(
                    Kind::Message,
                    json!({"role": "user", "content": content}),
                    json!({}),
                )
                .unwrap();
                total += 1;
            }
        }
        let anchors = handoffs + 1;
        assert!(tape.index.footprint() <= bound());
        assert!(bound() < 2048, "{}", bound());

        let mut cold = FileTape::open_path(path, "t".into()).unwrap();
        assert_eq!(cold.len().unwrap(), total);
        assert!(
            cold.index.footprint() <= bound(),
            "{}",
            cold.index.footprint()
        );
        assert_eq!(cold.index.kept_anchors().len(), ANCHORS_KEPT);

        let info = cold.info().unwrap();
        assert_eq!((info.entries, info.anchors), (total, anchors));
        assert_eq!(
            info.last_anchor.as_deref(),
            Some(format!("phase-{handoffs}").as_str())
        );
        let entries = cold.entries().unwrap();
        assert_eq!(entries.len(), total);
        let last_anchor = entries
            .iter()
            .rposition(|e| e.kind == Kind::Anchor)
            .unwrap();
        assert_eq!(info.entries_since_last_anchor, total - last_anchor - 1);
        assert_eq!(info.last_token_usage, Some(5));

        // The context: the last anchor's note, then the messages after it.
        let context = cold.context_messages().unwrap();
        let context: Vec<Value> = context.iter().map(ChatMessage::to_record).collect();
        let after: Vec<&Value> = entries[last_anchor + 1..]
            .iter()
            .filter(|e| e.kind == Kind::Message)
            .map(|e| &e.payload)
            .collect();
        assert_eq!(context.len(), after.len() + 1);
        assert_eq!(
            context[0]["content"],
            format!("[context from handoff 'phase-{handoffs}']\nsummary: did things")
        );
        assert_eq!(context[1..].iter().collect::<Vec<_>>(), after);

        // Anchors: the newest from the index, older ones from the file.
        let names = |list: Vec<crate::tape::TapeEntry>| -> Vec<String> {
            list.iter().map(|a| a.name().unwrap().to_string()).collect()
        };
        let expected: Vec<String> = std::iter::once("session/start".to_string())
            .chain((1..=handoffs).map(|i| format!("phase-{i}")))
            .collect();
        assert_eq!(names(cold.anchors(50).unwrap()), expected[anchors - 50..]);
        assert_eq!(names(cold.anchors(100).unwrap()), expected[anchors - 100..]);
        assert_eq!(names(cold.anchors(usize::MAX).unwrap()), expected);

        let found = cold.search("persimmon", 5, Searched::Everything).unwrap();
        assert_eq!(found.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1000]);
        assert!(cold.index.footprint() <= bound());
    }

    #[test]
    fn lines_longer_than_the_read_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut tape = FileTape::open_path(path.clone(), "t".into()).unwrap();
        let mut other = FileTape::open_path(path.clone(), "t".into()).unwrap();
        let huge = "x".repeat(CHUNK * 2 + 100);
        for content in ["small", huge.as_str(), "small again"] {
            tape.append(
                Kind::Message,
                json!({"role": "user", "content": content}),
                json!({}),
            )
            .unwrap();
            // Synced one line at a time (small buffers) and all at once (cold).
            assert_eq!(other.len().unwrap(), tape.len().unwrap());
        }
        let mut cold = FileTape::open_path(path.clone(), "t".into()).unwrap();
        assert_eq!(cold.len().unwrap(), 3);
        let entries = cold.entries().unwrap();
        assert_eq!(text(&entries[1]).len(), huge.len());
        assert_eq!(cold.context_messages().unwrap().len(), 3);
        // An unterminated long last line is not indexed, and is repaired by the next append.
        let mut torn = b"{\"id\":4,\"kind\":\"message\",\"payload\":{\"content\":\"".to_vec();
        torn.extend_from_slice(huge.as_bytes());
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&torn)
            .unwrap();
        assert_eq!(cold.len().unwrap(), 3);
        assert_eq!(cold.index.tail, torn.len() as u64);
        assert_eq!(other.event(Event::Run, json!(null)).unwrap().id, 4);
        assert_eq!(cold.len().unwrap(), 4);
        assert_eq!(cold.entries().unwrap().len(), 4);
        assert_eq!(cold.index.footprint(), std::mem::size_of::<Index>());
    }

    #[test]
    fn a_batch_syncs_once_and_sees_what_others_wrote_between_batches() {
        let dir = tempfile::tempdir().unwrap();
        // The folder is created by the first append.
        let path = dir.path().join("tapes").join("t.jsonl");
        let mut tape = FileTape::open_path(path.clone(), "t".into()).unwrap();
        let mut other = FileTape::open_path(path.clone(), "t".into()).unwrap();
        let user = |content: &str| json!({"role": "user", "content": content});
        let ids = |tape: &mut FileTape| -> Vec<u64> {
            tape.batch(true, |t| {
                let a = t.append(Kind::Message, user("a"), json!({})).unwrap().id;
                let b = t.event(Event::Run, json!(null)).unwrap().id;
                assert_eq!(
                    t.len().unwrap(),
                    b as usize,
                    "the batch sees its own appends"
                );
                vec![a, b]
            })
            .unwrap()
        };
        assert_eq!(ids(&mut tape), [1, 2]);
        other
            .append(Kind::Message, user("between"), json!({}))
            .unwrap();
        // The next batch syncs first: it numbers after the other handle's entry.
        assert_eq!(ids(&mut tape), [4, 5]);
        assert_eq!(other.len().unwrap(), 5);
        let mut cold = FileTape::open_path(path.clone(), "t".into()).unwrap();
        let read: Vec<u64> = cold.entries().unwrap().iter().map(|e| e.id).collect();
        assert_eq!(read, [1, 2, 3, 4, 5]);

        // Within a batch only its first operation syncs: a line slipped in without the lock
        // (no Bub handle does that) is not seen until the next batch.
        let seen_inside = tape
            .batch(true, |t| {
                t.event(Event::Run, json!(null)).unwrap();
                let line = r#"{"id":7,"kind":"event","payload":{},"meta":{},"date":"2026-01-01T00:00:00.000Z"}"#;
                let mut raw = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
                writeln!(raw, "{line}").unwrap();
                t.len().unwrap()
            })
            .unwrap();
        assert_eq!(seen_inside, 6);
        assert_eq!(tape.len().unwrap(), 7);
    }

    #[test]
    fn back_lines_match_forward_lines_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lines");
        let long = "x".repeat(CHUNK * 5 / 2);
        let mut expected: Vec<String> = Vec::new();
        let mut file = File::create(&path).unwrap();
        for i in 0..3000 {
            let line = match i {
                7 => String::new(),
                1500 => long.clone(),
                2999 => format!("{long}y"),
                _ => format!("line {i} {}.", "z".repeat(i % 700)),
            };
            writeln!(file, "{line}  \r").unwrap();
            expected.push(line);
        }
        drop(file);
        let file = File::open(&path).unwrap();
        let end = file.metadata().unwrap().len();
        let mut back = BackLines::new(&file, end);
        let mut got = Vec::new();
        while let Some(line) = back.next_line().unwrap() {
            got.push(String::from_utf8(line.to_vec()).unwrap());
        }
        got.reverse();
        assert_eq!(got.len(), expected.len());
        if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
            panic!(
                "line {i}: {:?} != {:?}",
                &got[i][..got[i].len().min(80)],
                &expected[i][..expected[i].len().min(80)]
            );
        }
        assert!(BackLines::new(&file, 0).next_line().unwrap().is_none());
    }

    #[test]
    fn newline_search_finds_the_first_and_the_last() {
        for len in [0, 1, 31, 32, 33, 64, 100] {
            let mut bytes = vec![b'a'; len];
            assert_eq!(find_newline(&bytes), None);
            assert_eq!(rfind_newline(&bytes), None);
            for at in (0..len).rev() {
                bytes[at] = b'\n';
                assert_eq!(find_newline(&bytes), Some(at));
            }
            bytes.fill(b'a');
            for at in 0..len {
                bytes[at] = b'\n';
                assert_eq!(rfind_newline(&bytes), Some(at));
            }
        }
    }
}
