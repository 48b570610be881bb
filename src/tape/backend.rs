//! What the agent needs of a tape, as a trait ([`TapeStore`]), and the one place a session's
//! tape is opened ([`open`]; [`open_name`] opens one by its name, for the console): the JSONL
//! file ([`FileTape`]) by default, a PostgreSQL tape ([`PgTape`]) when `BUB_DATABASE_URL` names
//! a database — without a change to the agent, the tools or the daemon.
//!
//! Every method is blocking I/O: async code reaches a tape through
//! [`SharedTape`](super::SharedTape), on the blocking pool.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::context::{ContextCursor, TapeInfo};
use super::entry::{Kind, TapeEntry};
use super::event::Event;
use super::pg::PgTape;
use super::search::Searched;
use super::store::{FileTape, tape_name_for, tape_path};
use crate::db::Database;
use crate::llm::ChatMessage;

/// One session's tape: an append-only log of entries with anchors.
///
/// Promises every implementation keeps: ids are unique and increasing, also with several
/// writers; an append is whole or absent; entries are never changed or removed, except by
/// [`reset`](Self::reset), which replaces the tape with a fresh one at once.
pub trait TapeStore: Send + 'static {
    /// The tape name (`bub:0123456789abcdef`).
    fn name(&self) -> &str;

    /// Appends one entry and returns it (with its id and date).
    fn append(&mut self, kind: Kind, payload: Value, meta: Value) -> anyhow::Result<TapeEntry>;

    /// Appends an `event` entry `{name, data}`.
    fn event(&mut self, name: Event, data: Value) -> anyhow::Result<TapeEntry> {
        let payload = json!({"name": name.as_str(), "data": data});
        self.append(Kind::Event, payload, json!({}))
    }

    /// Makes sure the tape has an anchor (a new or emptied tape gets `session/start`).
    fn ensure_bootstrap(&mut self) -> anyhow::Result<()>;

    /// Writes an anchor with an optional summary and next steps, and its `handoff` event: the
    /// context after it starts from this anchor.
    fn handoff(
        &mut self,
        name: &str,
        summary: Option<&str>,
        next_steps: Option<&str>,
    ) -> anyhow::Result<()>;

    /// Starts the tape afresh; with `archive`, the old one is kept and where is returned.
    fn reset(&mut self, archive: bool) -> anyhow::Result<Option<String>>;

    /// Number of entries.
    fn len(&mut self) -> anyhow::Result<usize>;

    /// Whether the tape has no entries.
    fn is_empty(&mut self) -> anyhow::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// All entries, oldest first.
    fn entries(&mut self) -> anyhow::Result<Vec<TapeEntry>>;

    /// The last `limit` anchors, oldest first.
    fn anchors(&mut self, limit: usize) -> anyhow::Result<Vec<TapeEntry>>;

    /// A page of the tape ([`Window`]), oldest first: it costs what it holds, not the tape.
    fn window(&mut self, window: &Window<'_>) -> anyhow::Result<Vec<TapeEntry>>;

    /// Messages (and with [`Searched::Everything`] tool results) matching `query` (substring or
    /// fuzzy), newest first.
    fn search(
        &mut self,
        query: &str,
        limit: usize,
        what: Searched,
    ) -> anyhow::Result<Vec<TapeEntry>>;

    /// The tape summary (`tape.info`).
    fn info(&mut self) -> anyhow::Result<TapeInfo>;

    /// The whole result of tool call `call_id` and its entry's meta (`tape.output`).
    fn output(&mut self, call_id: &str) -> anyhow::Result<Option<(String, Value)>>;

    /// The model's context through `cursor` (read only where it left off, see
    /// [`ContextCursor`]).
    fn context(&mut self, cursor: &mut ContextCursor) -> anyhow::Result<Vec<ChatMessage>>;

    /// Runs `f` with the tape held for all its operations (a file tape opens and locks its
    /// file once, creating it when `f` `writes`); an error means the tape could not be held
    /// and `f` did not run.
    fn batch(&mut self, writes: bool, f: &mut dyn FnMut(&mut dyn TapeStore)) -> anyhow::Result<()>;
}

/// What [`TapeStore::window`] reads: the newest `limit` entries of `kinds` with ids from
/// `from` up to (not including) `before` — a page of a timeline.
#[derive(Debug, Clone, Copy)]
pub struct Window<'a> {
    /// The oldest id (an anchor's, to start from it; 0: the whole tape).
    pub from: u64,
    /// Only ids below this (an older page); `None`: up to the newest.
    pub before: Option<u64>,
    pub kinds: &'a [Kind],
    pub limit: usize,
}

/// The tape of `session_id` in `workspace`, named after `tape_name` (`BUB_TAPE_NAME`): in
/// `database` when there is one (`BUB_DATABASE_URL`), else a file under `home`
/// (`BUB_HOME/tapes/`).
pub(crate) fn open(
    home: &Path,
    database: Option<&Arc<Database>>,
    workspace: &Path,
    tape_name: &str,
    session_id: &str,
) -> anyhow::Result<Box<dyn TapeStore>> {
    if let Some(db) = database {
        let name = tape_name_for(tape_name, session_id);
        let session = Some(session_id.to_owned());
        return Ok(Box::new(PgTape::open(db.clone(), workspace, name, session)));
    }
    let tape = FileTape::open(home, workspace, tape_name, session_id)?;
    Ok(Box::new(tape))
}

/// The tape named `name` (`bub:0123456789abcdef`, as [`list`](super::list) gives it) in
/// `workspace`, in the store [`open`] picks: for a tape whose session is unknown. It records no
/// session: a `session/start` anchor it writes has none.
#[cfg_attr(not(feature = "console"), allow(dead_code))]
pub(crate) fn open_name(
    home: &Path,
    database: Option<&Arc<Database>>,
    workspace: &Path,
    name: &str,
) -> anyhow::Result<Box<dyn TapeStore>> {
    if let Some(db) = database {
        return Ok(Box::new(PgTape::open(
            db.clone(),
            workspace,
            name.to_owned(),
            None,
        )));
    }
    let tape = FileTape::open_path(tape_path(home, workspace, name), name.to_owned())?;
    Ok(Box::new(tape))
}

impl TapeStore for FileTape {
    fn name(&self) -> &str {
        FileTape::name(self)
    }

    fn append(&mut self, kind: Kind, payload: Value, meta: Value) -> anyhow::Result<TapeEntry> {
        FileTape::append(self, kind, payload, meta)
    }

    fn ensure_bootstrap(&mut self) -> anyhow::Result<()> {
        FileTape::ensure_bootstrap(self)
    }

    fn handoff(
        &mut self,
        name: &str,
        summary: Option<&str>,
        next_steps: Option<&str>,
    ) -> anyhow::Result<()> {
        FileTape::handoff(self, name, summary, next_steps)
    }

    fn reset(&mut self, archive: bool) -> anyhow::Result<Option<String>> {
        let archived = FileTape::reset(self, archive)?;
        Ok(archived.map(|path| path.display().to_string()))
    }

    fn len(&mut self) -> anyhow::Result<usize> {
        FileTape::len(self)
    }

    fn entries(&mut self) -> anyhow::Result<Vec<TapeEntry>> {
        FileTape::entries(self)
    }

    fn anchors(&mut self, limit: usize) -> anyhow::Result<Vec<TapeEntry>> {
        FileTape::anchors(self, limit)
    }

    fn window(&mut self, window: &Window<'_>) -> anyhow::Result<Vec<TapeEntry>> {
        FileTape::window(self, window)
    }

    fn search(
        &mut self,
        query: &str,
        limit: usize,
        what: Searched,
    ) -> anyhow::Result<Vec<TapeEntry>> {
        FileTape::search(self, query, limit, what)
    }

    fn output(&mut self, call_id: &str) -> anyhow::Result<Option<(String, Value)>> {
        FileTape::output(self, call_id)
    }

    fn info(&mut self) -> anyhow::Result<TapeInfo> {
        FileTape::info(self)
    }

    fn context(&mut self, cursor: &mut ContextCursor) -> anyhow::Result<Vec<ChatMessage>> {
        FileTape::context(self, cursor)
    }

    fn batch(&mut self, writes: bool, f: &mut dyn FnMut(&mut dyn TapeStore)) -> anyhow::Result<()> {
        FileTape::batch(self, writes, |tape| f(tape))
    }
}
