//! The tape file: naming, locking, appending, bootstrap/handoff anchors and reset.
//!
//! Every operation opens the file, takes an advisory lock (exclusive for writes, shared for
//! reads) with `File::lock`, checks that the path still names the locked file (a concurrent
//! `reset` may have replaced it), re-syncs the in-memory index with the bytes appended since the last
//! operation, and releases the lock when done — or, inside a [`FileTape::batch`], uses the file
//! the batch holds locked (one open and lock for all the operations of a turn's step). The index holds counters and the newest anchors
//! only (O(anchors kept), never a record per entry), so an open tape's memory does not grow
//! with its length: `entries` parses the file, and `anchors` beyond those kept scans it
//! backwards. Appends are O(1): one `write_all` of the new
//! line(s) at the end of the file, no copy of the tape. Several handles — in one process or in
//! several — can append to one tape without interleaving lines or duplicating ids.
//!
//! Ids never wrap around: the next id is the largest so far + 1 (checked), at most [`MAX_ID`]
//! (`i64::MAX`, so every id is a valid signed 64-bit integer for other readers). A foreign line
//! with the largest id makes every further append an error ("tape id space exhausted"), with
//! nothing written; `,tape.reset` starts the tape afresh.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use md5::{Digest, Md5};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use super::backend::{Record, Window};
use super::entry::{Kind, TapeEntry, now_date, parse_entry};
use super::event::Event;
use super::index::{BackLines, FileId, Index, Slot, line_header, line_kind, lines, read_at};

/// Name of the anchor that starts every tape (bootstrap and reset).
pub const SESSION_START: &str = "session/start";

/// The largest entry id a tape gives out.
pub const MAX_ID: u64 = i64::MAX as u64;

/// A handle on one tape file. Cheap to open; the index is built on the first operation.
#[derive(Debug)]
pub struct FileTape {
    path: PathBuf,
    name: String,
    /// The session the tape belongs to, recorded in its `session/start` anchor (`None`: a tape
    /// opened by path or by name, which records none).
    session: Option<String>,
    pub(crate) index: Index,
    /// The file, locked exclusively, while a [`FileTape::batch`] runs.
    held: Option<File>,
    /// The index was synced with the held file during this batch: nobody else can write it
    /// meanwhile, so the index stays in step and the batch's later operations skip the sync.
    in_step: bool,
}

/// How a file is locked for one operation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock {
    Shared,
    Exclusive,
}

/// Lower-case hex MD5 of `text`.
pub fn md5_hex(text: &str) -> String {
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `<BUB_TAPE_NAME>:<md5hex(session_id)[..16]>`.
pub fn tape_name_for(tape_name: &str, session_id: &str) -> String {
    format!("{tape_name}:{}", &md5_hex(session_id)[..16])
}

/// `<home>/tapes/<md5hex(workspace)>__<percent-encoded tape name>.jsonl`. The workspace is
/// canonicalized when it exists, so `./ws` and `/abs/ws` name the same tape.
pub fn tape_path(home: &Path, workspace: &Path, name: &str) -> PathBuf {
    let ws_hash = workspace_key(workspace);
    let encoded = utf8_percent_encode(name, NON_ALPHANUMERIC);
    home.join("tapes")
        .join(format!("{ws_hash}__{encoded}.jsonl"))
}

/// What names `workspace` in its tapes' keys: the MD5 of its canonical path (as given when it
/// does not exist). The process keeps the keys of the last [`KNOWN_WORKSPACES`] workspaces, so
/// the path is resolved (file work) once, not per session.
pub(crate) fn workspace_key(workspace: &Path) -> String {
    if let Some(key) = known_key(workspace) {
        return key;
    }
    let canonical = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let key = md5_hex(&canonical.to_string_lossy());
    let mut known = known_keys();
    if known.len() >= KNOWN_WORKSPACES {
        known.remove(0);
    }
    known.push((workspace.to_path_buf(), key.clone()));
    key
}

/// Whether [`workspace_key`] of `workspace` needs no file work.
pub(crate) fn workspace_key_known(workspace: &Path) -> bool {
    known_key(workspace).is_some()
}

/// How many workspaces' keys the process keeps.
const KNOWN_WORKSPACES: usize = 8;

fn known_key(workspace: &Path) -> Option<String> {
    let known = known_keys();
    known
        .iter()
        .find(|(w, _)| w == workspace)
        .map(|(_, k)| k.clone())
}

fn known_keys() -> std::sync::MutexGuard<'static, Vec<(PathBuf, String)>> {
    static KNOWN: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());
    KNOWN.lock().unwrap_or_else(|e| e.into_inner())
}

impl FileTape {
    /// The tape of `session_id` in `workspace`, stored under `<home>/tapes/` (the folder and
    /// the file are created by the first append).
    pub fn open(
        home: &Path,
        workspace: &Path,
        tape_name: &str,
        session_id: &str,
    ) -> anyhow::Result<FileTape> {
        let name = tape_name_for(tape_name, session_id);
        let mut tape = Self::open_path(tape_path(home, workspace, &name), name)?;
        tape.session = Some(session_id.to_owned());
        Ok(tape)
    }

    /// A tape stored at `path` (its folder is created by the first append). It knows no
    /// session: its `session/start` anchors record none. Reads no file.
    pub fn open_path(path: PathBuf, name: String) -> anyhow::Result<FileTape> {
        Ok(FileTape {
            path,
            name,
            session: None,
            index: Index::default(),
            held: None,
            in_step: false,
        })
    }

    /// The JSONL file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tape name (`bub:0123456789abcdef`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Opens and locks the file, retrying when the path was replaced while waiting for the
    /// lock. `None` when the file does not exist and `lock` is shared (nothing to read).
    pub(crate) fn open_locked(&self, lock: Lock) -> anyhow::Result<Option<File>> {
        for _ in 0..64 {
            let mut opts = crate::storage::private_file();
            opts.read(true);
            if lock == Lock::Exclusive {
                opts.append(true).create(true);
            }
            let file = match opts.open(&self.path) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::NotFound && lock == Lock::Shared => {
                    return Ok(None);
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    if let Some(dir) = self.path.parent() {
                        crate::storage::create_private_dir(dir)
                            .with_context(|| format!("creating {}", dir.display()))?;
                    }
                    continue;
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("opening {}", self.path.display()));
                }
            };
            match lock {
                Lock::Shared => file.lock_shared(),
                Lock::Exclusive => file.lock(),
            }
            .with_context(|| format!("locking {}", self.path.display()))?;
            let held = FileId::of(&file.metadata()?);
            match std::fs::metadata(&self.path) {
                Ok(m) if FileId::of(&m) == held => return Ok(Some(file)),
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::NotFound && lock == Lock::Shared => {
                    return Ok(None);
                }
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("checking {}", self.path.display()));
                }
            }
        }
        anyhow::bail!("tape file {} keeps being replaced", self.path.display())
    }

    /// Runs `f` with the file locked shared and the index synced; with no file, the index is
    /// emptied and `f` gets `None`.
    pub(crate) fn read<R>(
        &mut self,
        f: impl FnOnce(&Index, Option<&File>) -> anyhow::Result<R>,
    ) -> anyhow::Result<R> {
        let opened;
        let file = match &self.held {
            Some(file) => file,
            None => match self.open_locked(Lock::Shared)? {
                Some(file) => {
                    opened = file;
                    &opened
                }
                None => {
                    self.index.reset();
                    return f(&self.index, None);
                }
            },
        };
        let held = self.held.is_some();
        Self::sync(&mut self.index, &mut self.in_step, held, file, false)?;
        let out = f(&self.index, Some(file));
        if self.held.is_none() {
            let _ = file.unlock();
        }
        out
    }

    /// Runs `f` with the file locked exclusively for all its operations (one open and lock
    /// instead of one per operation); other handles wait until it returns. The file is created
    /// for it only when `f` writes (`writes`); else a tape without a file stays without one
    /// and `f`'s operations lock on their own.
    pub fn batch<R>(&mut self, writes: bool, f: impl FnOnce(&mut Self) -> R) -> anyhow::Result<R> {
        if self.held.is_some() || (!writes && !self.path.exists()) {
            return Ok(f(self));
        }
        self.held = self.open_locked(Lock::Exclusive)?;
        self.in_step = false;
        let out = f(self);
        if let Some(file) = self.held.take() {
            let _ = file.unlock();
        }
        Ok(out)
    }

    /// Syncs `index` with `file` (see [`Index::sync`]), unless `file` is the held one and the
    /// index is in step with it (no torn tail to repair).
    fn sync(
        index: &mut Index,
        in_step: &mut bool,
        held: bool,
        file: &File,
        repair_tail: bool,
    ) -> std::io::Result<()> {
        if held && *in_step && index.tail == 0 {
            return Ok(());
        }
        *in_step = false;
        index.sync(file, repair_tail)?;
        *in_step = held;
        Ok(())
    }

    /// Runs `f` with the file locked exclusively and the index synced; entries `f` appends to
    /// the [`Writer`] are written with one `write_all` when it returns `Ok` (none when it fails).
    pub(crate) fn write<R>(
        &mut self,
        f: impl FnOnce(&mut Writer<'_>) -> anyhow::Result<R>,
    ) -> anyhow::Result<R> {
        let opened;
        let file = match &self.held {
            Some(file) => file,
            None => {
                opened = self
                    .open_locked(Lock::Exclusive)?
                    .expect("exclusive open creates the file");
                &opened
            }
        };
        let held = self.held.is_some();
        Self::sync(&mut self.index, &mut self.in_step, held, file, true)?;
        let mut writer = Writer {
            index: &self.index,
            pending: Vec::new(),
        };
        // The path as context: `{:#}` shows it with the reason, the root cause is the reason
        // alone (what a chat is told).
        let out = f(&mut writer).with_context(|| format!("appending to {}", self.path.display()));
        let pending = if out.is_ok() {
            writer.pending
        } else {
            Vec::new()
        };
        // A torn tail is terminated even when nothing is appended, so the index (which may
        // have taken it in as a valid entry) and the file agree.
        if (!pending.is_empty() || self.index.tail > 0)
            && let Err(e) = Self::flush(&mut self.index, file, pending)
        {
            // The file may now hold part of the write: rebuild the index from the file.
            self.index.reset();
            self.in_step = false;
            return Err(
                anyhow::Error::new(e).context(format!("appending to {}", self.path.display()))
            );
        }
        if self.held.is_none() {
            let _ = file.unlock();
        }
        out
    }

    /// Writes the `pending` lines at the end of `file` (a torn tail ended first) and adds them
    /// to `index`.
    fn flush(
        index: &mut Index,
        file: &File,
        pending: Vec<(u64, bool, Vec<u8>)>,
    ) -> std::io::Result<()> {
        let torn = index.tail > 0;
        let mut buf = Vec::with_capacity(pending.iter().map(|p| p.2.len()).sum::<usize>() + 1);
        if torn {
            buf.push(b'\n');
        }
        for (_, _, line) in &pending {
            buf.extend_from_slice(line);
        }
        (&*file).write_all(&buf)?;
        let mut offset = index.synced + index.tail + u64::from(torn);
        for (id, anchor, line) in pending {
            let len = line.len() as u64;
            index.push(Slot {
                id,
                offset,
                len: len - 1,
                anchor,
            });
            offset += len;
        }
        index.synced = offset;
        index.tail = 0;
        Ok(())
    }

    /// Appends one entry and returns it (with its id and date).
    pub fn append(&mut self, kind: Kind, payload: Value, meta: Value) -> anyhow::Result<TapeEntry> {
        self.write(|w| w.append(kind, payload, meta))
    }

    /// Appends `records` in order with one write (none when one fails) and returns them.
    pub(crate) fn append_all(&mut self, records: Vec<Record>) -> anyhow::Result<Vec<TapeEntry>> {
        self.write(|w| {
            let append = |r: Record| w.append(r.kind, r.payload, r.meta);
            records.into_iter().map(append).collect()
        })
    }

    /// Appends an `event` entry `{name, data}`.
    pub fn event(&mut self, name: Event, data: Value) -> anyhow::Result<TapeEntry> {
        let payload = json!({"name": name.as_str(), "data": data});
        self.append(Kind::Event, payload, json!({}))
    }

    /// Makes sure the tape has an anchor: when it has none at all (new tape, or the file was
    /// deleted or truncated externally), writes anchor `session/start` with state
    /// `{"owner":"human","session":"<session id>"}` (no `session` when the tape knows none) and
    /// its `handoff` event. Called at the start of every turn.
    pub fn ensure_bootstrap(&mut self) -> anyhow::Result<()> {
        let state = start_state(self.session.as_deref(), None);
        self.write(|w| {
            if w.index.anchor_count == 0 {
                w.handoff(SESSION_START, state)?;
            }
            Ok(())
        })
    }

    /// Writes anchor `{name, state:{summary?, next_steps?}}` (no `state` when both are empty)
    /// and a `handoff` event. The context after it starts from this anchor, with its summary.
    pub fn handoff(
        &mut self,
        name: &str,
        summary: Option<&str>,
        next_steps: Option<&str>,
    ) -> anyhow::Result<()> {
        let state = handoff_state(summary, next_steps);
        self.write(|w| w.handoff_with(name, state))
    }

    /// Starts the tape afresh. With `archive`, the current file is kept as
    /// `<file>.<YYYYMMDDTHHMMSSZ>.bak` (returned), else it is deleted. The fresh tape holds the
    /// `session/start` anchor (state as [`ensure_bootstrap`](Self::ensure_bootstrap) writes it,
    /// plus `"archived": "<path>"`) and its
    /// `handoff` event. The new file replaces the old one atomically while the old one is
    /// locked, so concurrent appenders move over to the new file.
    pub fn reset(&mut self, archive: bool) -> anyhow::Result<Option<PathBuf>> {
        // The file is replaced: a batch's lock on it ends here.
        if let Some(file) = self.held.take() {
            let _ = file.unlock();
        }
        let old = self
            .open_locked(Lock::Exclusive)?
            .expect("exclusive open creates the file");
        let archived = if archive && old.metadata()?.len() > 0 {
            Some(self.archive_current()?)
        } else {
            None
        };
        let state = start_state(
            self.session.as_deref(),
            archived.as_ref().map(|p| p.to_string_lossy().into_owned()),
        );
        let empty = Index::default();
        let mut writer = Writer {
            index: &empty,
            pending: Vec::new(),
        };
        writer.handoff(SESSION_START, state)?;
        let buf: Vec<u8> = writer.pending.into_iter().flat_map(|p| p.2).collect();
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        crate::storage::private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .and_then(|mut file| std::io::Write::write_all(&mut file, &buf))
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("replacing {}", self.path.display()))?;
        let _ = old.unlock();
        self.index.reset();
        Ok(archived)
    }

    /// Links the current file under a fresh archive name (the caller then replaces the path).
    fn archive_current(&self) -> anyhow::Result<PathBuf> {
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
        for n in 0..1000 {
            let suffix = if n == 0 {
                String::new()
            } else {
                format!("-{n}")
            };
            let mut name = self.path.as_os_str().to_owned();
            name.push(format!(".{stamp}{suffix}.bak"));
            let bak = PathBuf::from(name);
            match std::fs::hard_link(&self.path, &bak) {
                Ok(()) => return Ok(bak),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(_) if !bak.exists() => {
                    // No hard links on this file system: copy instead (the path is replaced next).
                    std::fs::copy(&self.path, &bak)
                        .with_context(|| format!("archiving to {}", bak.display()))?;
                    return Ok(bak);
                }
                Err(e) => return Err(e).with_context(|| format!("archiving to {}", bak.display())),
            }
        }
        anyhow::bail!("no free archive name for {}", self.path.display())
    }

    /// Number of entries.
    pub fn len(&mut self) -> anyhow::Result<usize> {
        self.read(|index, _| Ok(index.entries))
    }

    /// Whether the tape has no entries.
    pub fn is_empty(&mut self) -> anyhow::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// All entries, oldest first: every line of the file that parses (the others skipped).
    pub fn entries(&mut self) -> anyhow::Result<Vec<TapeEntry>> {
        self.read(|index, file| {
            let Some(file) = file else {
                return Ok(Vec::new());
            };
            let bytes = read_at(file, 0, index.synced)?;
            Ok(lines(&bytes).filter_map(parse_entry).collect())
        })
    }

    /// The last `limit` anchors, oldest first. They come from the anchors the index keeps;
    /// only a `limit` beyond those (more than [`ANCHORS_KEPT`](super::index::ANCHORS_KEPT)
    /// minus a drop or two) scans the file backwards.
    pub fn anchors(&mut self, limit: usize) -> anyhow::Result<Vec<TapeEntry>> {
        self.read(|index, file| {
            let Some(file) = file else {
                return Ok(Vec::new());
            };
            let kept = index.kept_anchors();
            let mut out = Vec::new();
            if limit <= kept.len() || kept.len() == index.anchor_count {
                for anchor in kept.iter().skip(kept.len().saturating_sub(limit)) {
                    out.extend(parse_entry(&read_at(file, anchor.offset, anchor.len)?));
                }
                return Ok(out);
            }
            let mut back = BackLines::new(file, index.synced);
            let mut seen = 0;
            while seen < limit
                && let Some(line) = back.next_line()?
            {
                if line_kind(line) == Some(Kind::Anchor) {
                    seen += 1;
                    out.extend(parse_entry(line));
                }
            }
            out.reverse();
            Ok(out)
        })
    }
}

impl FileTape {
    /// A page of the tape ([`Window`]), oldest first: the file is read backwards from its end
    /// and only the lines of the page are parsed (the others by their header), so the newest
    /// page of a long tape costs what it shows.
    pub(crate) fn window(&mut self, w: &Window) -> anyhow::Result<Vec<TapeEntry>> {
        self.read(|index, file| {
            let Some(file) = file else {
                return Ok(Vec::new());
            };
            let mut back = BackLines::new(file, index.synced);
            let mut out = Vec::new();
            while out.len() < w.limit
                && let Some(line) = back.next_line()?
            {
                let Some((id, kind)) = line_header(line) else {
                    continue;
                };
                // Ids increase along the file: nothing older is in the window.
                if id < w.from {
                    break;
                }
                if w.before.is_none_or(|b| id < b) && w.kinds.contains(&kind) {
                    out.extend(parse_entry(line));
                }
            }
            out.reverse();
            Ok(out)
        })
    }
}

/// Collects the entries of one write operation (they share one lock and one `write_all`).
pub(crate) struct Writer<'a> {
    pub index: &'a Index,
    /// Id, whether an anchor, the line.
    pending: Vec<(u64, bool, Vec<u8>)>,
}

impl Writer<'_> {
    /// Queues an entry with the next id; an error when the ids are exhausted ([`MAX_ID`]).
    pub(crate) fn append(
        &mut self,
        kind: Kind,
        payload: Value,
        meta: Value,
    ) -> anyhow::Result<TapeEntry> {
        let last = self.pending.last().map_or(self.index.max_id, |p| p.0);
        let id = last
            .checked_add(1)
            .filter(|id| *id <= MAX_ID)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "tape id space exhausted: the largest entry id is {last} (ids go up to \
                 {MAX_ID}); start the tape afresh with ,tape.reset"
                )
            })?;
        let meta = if meta.is_object() { meta } else { json!({}) };
        let anchor = kind == Kind::Anchor;
        let entry = TapeEntry {
            id,
            kind,
            payload,
            meta,
            date: now_date(),
        };
        let mut line = Vec::with_capacity(256);
        entry.write_line(&mut line);
        self.pending.push((id, anchor, line));
        Ok(entry)
    }

    /// Anchor `{name, state}` plus its `handoff` event.
    fn handoff(&mut self, name: &str, state: Value) -> anyhow::Result<()> {
        self.handoff_with(name, Some(state))
    }

    fn handoff_with(&mut self, name: &str, state: Option<Value>) -> anyhow::Result<()> {
        for (kind, payload) in handoff_entries(name, state) {
            self.append(kind, payload, json!({}))?;
        }
        Ok(())
    }
}

/// The state of a `session/start` anchor: `{"owner":"human"}`, plus the session it belongs to
/// (`"session"`, when known) and where a reset archived the old tape (`"archived"`). Not part of
/// the model's context (of an anchor, only a `summary` and `next_steps` are; `tape.anchors`
/// lists the state); the console's session list reads the session from it
/// ([`super::listing`]).
pub(crate) fn start_state(session: Option<&str>, archived: Option<String>) -> Value {
    let mut state = json!({"owner": "human"});
    if let Some(session) = session {
        state["session"] = Value::String(session.to_owned());
    }
    if let Some(archived) = archived {
        state["archived"] = Value::String(archived);
    }
    state
}

/// The state of a handoff anchor: its summary and next steps, those not blank (`None`: both
/// are).
pub(crate) fn handoff_state(summary: Option<&str>, next_steps: Option<&str>) -> Option<Value> {
    let mut state = serde_json::Map::new();
    for (key, value) in [("summary", summary), ("next_steps", next_steps)] {
        if let Some(v) = value.filter(|v| !v.trim().is_empty()) {
            state.insert(key.to_string(), Value::String(v.to_string()));
        }
    }
    (!state.is_empty()).then_some(Value::Object(state))
}

/// What a handoff writes, in order: anchor `{name, state?}` and its `handoff` event.
pub(crate) fn handoff_entries(name: &str, state: Option<Value>) -> [(Kind, Value); 2] {
    let mut anchor = json!({"name": name});
    if let Some(s) = &state {
        anchor["state"] = s.clone();
    }
    let data = json!({"name": name, "state": state.unwrap_or_else(|| json!({}))});
    let event = json!({"name": Event::Handoff.as_str(), "data": data});
    [(Kind::Anchor, anchor), (Kind::Event, event)]
}
