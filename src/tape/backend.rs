//! What the agent needs of a tape, as a trait ([`TapeStore`]), and the one place a session's
//! tape is opened ([`open`]; [`open_name`] opens one by its name, for the console): the JSONL
//! file ([`FileTape`]) by default, a PostgreSQL tape ([`PgTape`]) when `BUB_DATABASE_URL` names
//! a database — without a change to the agent, the tools or the daemon.
//!
//! The trait is async; the file's work runs on the blocking pool ([`FileStore`]: one hop an
//! operation), the database's on the caller's runtime. Deferred work ([`Deferred`]) and a model
//! step's records ([`TapeStore::step`]) ride along on an operation, so a turn costs few hops.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::context::{ContextCursor, TapeInfo};
use super::entry::{Kind, TapeEntry};
use super::event::Event;
#[cfg(feature = "postgres")]
use super::pg::PgTape;
use super::search::Searched;
use super::shared::logged;
#[cfg(feature = "postgres")]
use super::store::tape_name_for;
use super::store::{FileTape, handoff_entries, handoff_state, tape_path};
use crate::db::Database;
use crate::llm::ChatMessage;

/// One session's tape: an append-only log of entries with anchors.
///
/// Promises every implementation keeps: ids are unique and increasing, also with several
/// writers; an append is whole or absent (several records appended at once too); entries are
/// never changed or removed, except by [`reset`](Self::reset), which replaces the tape with a
/// fresh one at once. What was [deferred](Self::defer) is done first by the next operation, in
/// order, in its hop to the blocking pool (a file) or before it (the database).
#[async_trait::async_trait]
pub trait TapeStore: Send + Sync + 'static {
    /// The tape name (`bub:0123456789abcdef`).
    #[cfg_attr(not(test), allow(dead_code))]
    fn name(&self) -> &str;

    /// Leaves `work` for the start of the next operation; its failure is logged then.
    fn defer(&self, work: Deferred);

    /// Appends `records` in order, as one write, and returns them (with their ids and dates).
    async fn append(&self, records: Vec<Record>) -> anyhow::Result<Vec<TapeEntry>>;

    /// Makes sure the tape has an anchor (a new or emptied tape gets `session/start`).
    async fn ensure_bootstrap(&self) -> anyhow::Result<()>;

    /// Writes an anchor with an optional summary and next steps, and its `handoff` event: the
    /// context after it starts from this anchor.
    async fn handoff(
        &self,
        name: &str,
        summary: Option<&str>,
        next_steps: Option<&str>,
    ) -> anyhow::Result<()> {
        self.append(handoff_records(name, summary, next_steps))
            .await
            .map(drop)
    }

    /// Starts the tape afresh; with `archive`, the old one is kept and where is returned.
    async fn reset(&self, archive: bool) -> anyhow::Result<Option<String>>;

    /// Number of entries.
    async fn len(&self) -> anyhow::Result<usize>;

    /// All entries, oldest first.
    #[cfg_attr(not(test), allow(dead_code))]
    async fn entries(&self) -> anyhow::Result<Vec<TapeEntry>>;

    /// The last `limit` anchors, oldest first.
    async fn anchors(&self, limit: usize) -> anyhow::Result<Vec<TapeEntry>>;

    /// A page of the tape ([`Window`]), oldest first: it costs what it holds, not the tape.
    async fn window(&self, window: Window) -> anyhow::Result<Vec<TapeEntry>>;

    /// Messages (and with [`Searched::Everything`] tool results) matching `query` (substring or
    /// fuzzy), newest first.
    async fn search(
        &self,
        query: &str,
        limit: usize,
        what: Searched,
    ) -> anyhow::Result<Vec<TapeEntry>>;

    /// The tape summary (`tape.info`).
    async fn info(&self) -> anyhow::Result<TapeInfo>;

    /// The whole result of tool call `call_id` and its entry's meta (`tape.output`).
    async fn output(&self, call_id: &str) -> anyhow::Result<Option<(String, Value)>>;

    /// The model's context through `cursor` (read only where it left off, see
    /// [`ContextCursor`]).
    async fn context(&self, cursor: &mut ContextCursor) -> anyhow::Result<Vec<ChatMessage>>;

    /// A model step's records and the context to send, as one operation: reads the context
    /// through `cursor` (empty when it cannot be read), gives it to `build` — which runs off
    /// the async threads and may do blocking file work of its own (a file tape runs it in this
    /// operation's hop) — appends the records it returns, and reads the context again (only
    /// what was appended). The outer error: the records were not written.
    async fn step(
        &self,
        build: Build,
        cursor: &mut ContextCursor,
    ) -> anyhow::Result<anyhow::Result<Vec<ChatMessage>>>;
}

/// An entry to append: the tape gives it its id and date.
#[derive(Debug, Clone)]
pub struct Record {
    pub kind: Kind,
    pub payload: Value,
    pub meta: Value,
}

impl Record {
    pub(crate) fn new(kind: Kind, payload: Value, meta: Value) -> Self {
        Self {
            kind,
            payload,
            meta,
        }
    }

    /// An `event` entry `{name, data}`.
    pub(crate) fn event(name: Event, data: Value) -> Self {
        let payload = json!({"name": name.as_str(), "data": data});
        Self::new(Kind::Event, payload, json!({}))
    }
}

/// The records of a handoff: its anchor and `handoff` event.
pub(crate) fn handoff_records(
    name: &str,
    summary: Option<&str>,
    next_steps: Option<&str>,
) -> Vec<Record> {
    let entries = handoff_entries(name, handoff_state(summary, next_steps));
    let record = |(kind, payload)| Record::new(kind, payload, json!({}));
    entries.into_iter().map(record).collect()
}

/// What a caller leaves for a tape's next operation ([`TapeStore::defer`]), so that it costs
/// no operation of its own.
pub enum Deferred {
    /// [`TapeStore::ensure_bootstrap`].
    Bootstrap,
    /// Records to append, as one write.
    Records(Vec<Record>),
    /// Blocking work of another store (the usage ledger's line), done off the async threads:
    /// by a file tape in its operation's hop, by the database's on the blocking pool.
    Chore(Box<dyn FnOnce() + Send>),
}

/// The records of a model step, built from the context shown so far ([`TapeStore::step`]).
pub(crate) type Build = Box<dyn FnOnce(Vec<ChatMessage>) -> Vec<Record> + Send>;

/// The work left for a tape's next operation, in order.
#[derive(Default)]
pub(crate) struct Pending(Mutex<Vec<Deferred>>);

impl Pending {
    pub(crate) fn push(&self, work: Deferred) {
        self.lock().push(work);
    }

    /// What was left, for the operation starting.
    pub(crate) fn take(&self) -> Vec<Deferred> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Deferred>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What [`TapeStore::window`] reads: the newest `limit` entries of `kinds` with ids from
/// `from` up to (not including) `before` — a page of a timeline.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// The oldest id (an anchor's, to start from it; 0: the whole tape).
    pub from: u64,
    /// Only ids below this (an older page); `None`: up to the newest.
    pub before: Option<u64>,
    pub kinds: &'static [Kind],
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
) -> anyhow::Result<Arc<dyn TapeStore>> {
    if let Some(db) = database {
        #[cfg(not(feature = "postgres"))]
        match **db {}
        #[cfg(feature = "postgres")]
        {
            let name = tape_name_for(tape_name, session_id);
            let session = Some(session_id.to_owned());
            return Ok(Arc::new(PgTape::open(db.clone(), workspace, name, session)));
        }
    }
    let tape = FileTape::open(home, workspace, tape_name, session_id)?;
    Ok(Arc::new(FileStore::new(tape)))
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
) -> anyhow::Result<Arc<dyn TapeStore>> {
    if let Some(db) = database {
        #[cfg(not(feature = "postgres"))]
        match **db {}
        #[cfg(feature = "postgres")]
        return Ok(Arc::new(PgTape::open(
            db.clone(),
            workspace,
            name.to_owned(),
            None,
        )));
    }
    let tape = FileTape::open_path(tape_path(home, workspace, name), name.to_owned())?;
    Ok(Arc::new(FileStore::new(tape)))
}

/// A [`FileTape`] for async code: each operation is one hop to the blocking pool, where the
/// file work runs under the tape's mutex (never held on an async thread), the deferred work
/// first, in one batch of the file (one open and lock).
pub(crate) struct FileStore {
    tape: Arc<Mutex<FileTape>>,
    name: String,
    pending: Arc<Pending>,
}

impl FileStore {
    pub(crate) fn new(tape: FileTape) -> Self {
        Self {
            name: tape.name().to_owned(),
            tape: Arc::new(Mutex::new(tape)),
            pending: Arc::default(),
        }
    }

    /// Runs `f` on the tape on the blocking pool, after what was deferred (taken under the
    /// tape's lock: whichever operation comes first writes it, in order).
    async fn hop<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut FileTape) -> anyhow::Result<R> + Send + 'static,
    ) -> anyhow::Result<R> {
        let (tape, pending) = (self.tape.clone(), self.pending.clone());
        crate::storage::blocking(move || {
            let mut tape = tape.lock().unwrap_or_else(|e| e.into_inner());
            let deferred = pending.take();
            // Deferred work writes: the tape's file may be created for it.
            let writes = !deferred.is_empty();
            let mut work = Some(move |t: &mut FileTape| {
                for work in deferred {
                    match work {
                        Deferred::Bootstrap => drop(logged(&Kind::Anchor, t.ensure_bootstrap())),
                        Deferred::Records(records) => {
                            let kind = records.first().map_or(Kind::Event, |r| r.kind.clone());
                            drop(logged(&kind, t.append_all(records)));
                        }
                        Deferred::Chore(chore) => chore(),
                    }
                }
                f(t)
            });
            let mut out = None;
            // Held once for all the operations when the file can be (else each on its own).
            let _ = tape.batch(writes, |t| out = work.take().map(|w| w(t)));
            match work {
                Some(work) => work(&mut tape),
                None => out.expect("the work ran"),
            }
        })
        .await
    }
}

#[async_trait::async_trait]
impl TapeStore for FileStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn defer(&self, work: Deferred) {
        self.pending.push(work);
    }

    async fn append(&self, records: Vec<Record>) -> anyhow::Result<Vec<TapeEntry>> {
        self.hop(|t| t.append_all(records)).await
    }

    async fn ensure_bootstrap(&self) -> anyhow::Result<()> {
        self.hop(FileTape::ensure_bootstrap).await
    }

    async fn reset(&self, archive: bool) -> anyhow::Result<Option<String>> {
        let archived = self.hop(move |t| t.reset(archive)).await?;
        Ok(archived.map(|path| path.display().to_string()))
    }

    async fn len(&self) -> anyhow::Result<usize> {
        self.hop(FileTape::len).await
    }

    async fn entries(&self) -> anyhow::Result<Vec<TapeEntry>> {
        self.hop(FileTape::entries).await
    }

    async fn anchors(&self, limit: usize) -> anyhow::Result<Vec<TapeEntry>> {
        self.hop(move |t| t.anchors(limit)).await
    }

    async fn window(&self, window: Window) -> anyhow::Result<Vec<TapeEntry>> {
        self.hop(move |t| t.window(&window)).await
    }

    async fn search(
        &self,
        query: &str,
        limit: usize,
        what: Searched,
    ) -> anyhow::Result<Vec<TapeEntry>> {
        let query = query.to_owned();
        self.hop(move |t| t.search(&query, limit, what)).await
    }

    async fn info(&self) -> anyhow::Result<TapeInfo> {
        self.hop(FileTape::info).await
    }

    async fn output(&self, call_id: &str) -> anyhow::Result<Option<(String, Value)>> {
        let call_id = call_id.to_owned();
        self.hop(move |t| t.output(&call_id)).await
    }

    async fn context(&self, cursor: &mut ContextCursor) -> anyhow::Result<Vec<ChatMessage>> {
        let mut moved = std::mem::replace(cursor, cursor.unread());
        let (context, moved) = self
            .hop(move |t| Ok((t.context(&mut moved), moved)))
            .await?;
        *cursor = moved;
        context
    }

    async fn step(
        &self,
        build: Build,
        cursor: &mut ContextCursor,
    ) -> anyhow::Result<anyhow::Result<Vec<ChatMessage>>> {
        let mut moved = std::mem::replace(cursor, cursor.unread());
        let (context, moved) = self
            .hop(move |t| {
                let shown = t.context(&mut moved).unwrap_or_default();
                t.append_all(build(shown))?;
                Ok((t.context(&mut moved), moved))
            })
            .await?;
        *cursor = moved;
        Ok(context)
    }
}
