//! The durable inbox: every admitted inbound message is written to a journal
//! (`BUB_HOME/inbox.jsonl`) **before** the platform is told it was received, and follows it
//! through received → in a turn → answered → delivered.
//!
//! * [`Inbox::receive`] journals a message (a `recv` record) and gives it a sequence number; a
//!   message already received (same channel, chat and message id) is reported as a duplicate.
//! * [`Inbox::started`], [`Inbox::answered`], [`Inbox::sent`], [`Inbox::done`] record a turn's
//!   progress; `sent` after each part of a long answer the platform accepted.
//! * [`Inbox::scheduled`] journals a scheduled job's due run (a `job` record) before its turn;
//!   from there it follows the same records ([`job`]).
//! * [`Inbox::sending`], [`Inbox::live`] and their kin record what a turn sent besides its
//!   answer — its `message.send`s, its live message — with the messages (or the job run) it
//!   answers, so that a turn run again after a restart repeats none of it (`outgoing`).
//! * [`Inbox::open`] reads the journal after a restart and returns what is left to do
//!   ([`Resume`]): answers recorded but not delivered are delivered (never re-run) from their
//!   first part not recorded as sent, messages
//!   whose turn was interrupted run again **once** with a note, messages never started run as
//!   usual. A message interrupted twice, or an interrupted comma command (commands are not
//!   idempotent), is given up with a notice to its chat. Chat controls (`,stop`, `,status`)
//!   are not resumed; senders no longer admitted are dropped.
//!
//! Where records go is chosen once, at start: the journal file ([`Inbox::open`], `writer`),
//! memory ([`Inbox::memory`]) or, with replicas, the database's rows ([`Inbox::shared`],
//! `leased`) — one `Store` each. Work reaches the daemon by lease ([`Inbox::pull`],
//! [`Inbox::sweep`], [`Inbox::release`]): a replica holds the leases of the chats it serves;
//! one box holds every lease, so a pull there hands on what was received and not handed on yet.
//!
//! Writing: one thread owns the file ([`writer`]); records reach it through a bounded queue, are
//! written in batches (whatever is queued, one `write`) and each is acknowledged once its bytes
//! are in the file. Every method that records something is `async` and returns after that
//! acknowledgement — except a turn's `start` and `done`, which return once queued (nothing
//! waits for them; they are written just as soon, in order, and [`Inbox::flush`] waits for
//! them at shutdown); nothing here does file I/O on an async thread except [`Inbox::open`],
//! which callers run on the blocking pool.
//!
//! Invariants: a `recv` record is written before [`Inbox::receive`] returns; records are not
//! fsynced (they survive a crash of the process, not of the machine — see docs/delivery.md);
//! after a failed write (which may have left part of a line) the next record starts on a new
//! line; the in-memory state (pending messages, cursors, seen chats, recent keys) holds exactly
//! the records that reached the file; the journal is compacted (pending work and cursors only,
//! atomically replaced) at open and whenever it grows past 4 MiB and twice its size after the
//! last compaction (so rewrites cost O(pending) amortised, see [`writer`]); every map is
//! bounded except the pending messages themselves, and those are bounded by the daemon's
//! queues (a message is received only when the one before it was handed on).

mod job;
mod journal;
#[cfg(feature = "postgres")]
mod leased;
mod legacy;
mod outgoing;
mod state;

use state::{journaled, key_of, plan};
#[cfg(feature = "postgres")]
mod pg;
mod writer;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::chat::{Inbound, Outbound, SessionId};
pub use job::{JobRun, Subtask};
use journal::Record;
pub use outgoing::SendProgress;
#[cfg(test)]
use writer::COMPACT_AT;
use writer::{Disk, Writer};

/// Chats whose last message id is remembered (for Discord's catch-up after a restart; a
/// platform with a cursor, like Telegram, needs none).
const SEEN_CHATS: usize = 10_000;
/// Message keys remembered to recognise a platform delivering the same message twice.
const RECENT_KEYS: usize = 4_096;
/// How many times a message's turn may start before it is given up.
const MAX_ATTEMPTS: u32 = 2;

/// Why a message needs no more work (recorded in `done` records, for the reader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The answer was accepted by the platform.
    Sent,
    /// The turn ended with nothing to send.
    Silent,
    /// Not addressed to the bot (outside the follow-up window).
    Skipped,
    /// `/stop` cancelled its turn.
    Cancelled,
    /// The answer could not be delivered after the adapter's retries.
    Failed,
    /// Interrupted too often (or an interrupted command); its chat was told.
    GaveUp,
    /// A scheduled run its creator may no longer make (no longer admitted, or the chat is no
    /// longer served): its turn did not run.
    Refused,
}

/// What a restart has to finish, in the order it was received.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// A message to handle (again). `interrupted` is set on it when a turn had started.
    Message(Box<Inbound>),
    /// An answer recorded but not yet accepted by the platform.
    Deliver(Delivery),
    /// A scheduled job's due run to run (again). `interrupted` is set on it when a turn had
    /// started.
    Job(JobRun),
    /// A message received and not handed on yet (by this replica or, for a chat it did not
    /// hold yet, another one): it is handled as just received.
    Received(Box<Inbound>),
}

/// An answer to deliver to a chat, with the messages it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub channel: String,
    pub seqs: Vec<u64>,
    pub out: Outbound,
    /// How many of its parts (`delivery::send`) the platform accepted: a restart sends the
    /// rest. Absent from older journals (0: the whole answer).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub parts_sent: usize,
}

/// Whether [`Inbox::receive`] took the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Journaled with this sequence number.
    New(u64),
    /// Received before (the platform delivered it again): drop it.
    Duplicate,
}

/// A message between `recv` and `done`.
#[derive(Debug, Clone)]
struct Pending {
    msg: Inbound,
    attempts: u32,
    answer: Option<Delivery>,
}

/// The in-memory state the journal describes.
#[derive(Default)]
struct State {
    next_seq: u64,
    pending: BTreeMap<u64, Pending>,
    /// Scheduled runs between their `job` and `done` records (numbered like messages).
    jobs: BTreeMap<u64, job::PendingJob>,
    /// (channel, chat) → (largest message id seen, recency tick).
    seen: HashMap<(String, String), (u64, u64)>,
    tick: u64,
    /// channel → platform cursor (Telegram's update id).
    cursors: HashMap<String, u64>,
    /// Hashes of the recent message keys: two flat allocations, so a long-lived map does not
    /// pin thousands of small heap blocks (which would keep a burst's heap from shrinking).
    recent: HashSet<u64>,
    recent_order: VecDeque<u64>,
    /// What pending messages' turns sent besides their answers (`outgoing`).
    outgoing: HashMap<u64, outgoing::Outgoing>,
}

/// The inbox of one daemon (one per `BUB_HOME`, see the daemon lock), or of one replica.
pub struct Inbox {
    shared: Arc<Mutex<Shared>>,
    /// Where the records go, chosen once.
    store: Box<dyn Store>,
}

/// Where an inbox stores its records: each is applied to the state once stored. The lease
/// methods default to one box's, which holds every lease: a pull or a sweep hands on every item
/// received and not handed on yet (each goes to its own session), a lease is never given back.
#[async_trait::async_trait]
trait Store: Send + Sync {
    /// Stores the `recv` or `job` record `make` builds with the number it is given (a message
    /// `key`: `None` when that message was received before).
    async fn numbered(
        &self,
        inbox: &Inbox,
        key: Option<u64>,
        make: Make<'_>,
    ) -> anyhow::Result<Option<u64>>;

    /// Stores a progress record and applies it; returns once stored, or once `queued`.
    async fn record(&self, inbox: &Inbox, record: Record, queued: bool) -> anyhow::Result<()>;

    /// Returns once every record queued before it is stored.
    async fn flush(&self) -> anyhow::Result<()> {
        Ok(())
    }

    async fn pull(&self, inbox: &Inbox, _session: &SessionId) -> anyhow::Result<Vec<Resume>> {
        Ok(inbox.hand_on_fresh())
    }

    async fn sweep(&self, inbox: &Inbox) -> anyhow::Result<Vec<Resume>> {
        Ok(inbox.hand_on_fresh())
    }

    /// One box keeps the lease: what is stored meanwhile is announced like the rest.
    async fn release(&self, _inbox: &Inbox, _session: &SessionId) -> anyhow::Result<bool> {
        Ok(false)
    }

    /// One box's positions are its own.
    async fn refresh_positions(&self, _inbox: &Inbox) -> anyhow::Result<()> {
        Ok(())
    }

    fn notices(&self) -> Option<mpsc::Receiver<String>> {
        None
    }

    /// The leases held in the database (none on one box).
    fn leases(&self) -> usize {
        0
    }

    /// The journal's writer (tests reach in to make a write fail).
    #[cfg(test)]
    fn writer(&self) -> Option<&Writer> {
        None
    }
}

/// Builds a `recv` or `job` record with its number (and numbers the message or run).
type Make<'a> = Box<dyn FnOnce(u64) -> Record + Send + 'a>;

/// What the inbox and its writer share. The lock is held for map work only, never for I/O.
#[derive(Default)]
struct Shared {
    /// What the written records describe (the writer applies each after writing it).
    state: State,
    /// The last sequence number given out: ahead of `state.next_seq` while a `recv` record is
    /// on its way to the file.
    issued: u64,
    /// Keys of received messages on their way to the file: another copy meanwhile is a
    /// duplicate. (Adapters hand messages over one at a time, so a copy comes from another
    /// source — Discord's catch-up — and only after the first one's outcome in practice.)
    inflight: HashSet<u64>,
    /// Items stored on one box and not handed on yet (by a pull or a sweep).
    fresh: BTreeSet<u64>,
}

impl Shared {
    fn issue(&mut self) -> u64 {
        self.issued += 1;
        self.issued
    }
}

impl Inbox {
    fn new(state: State, store: impl Store + 'static) -> Self {
        let (issued, store) = (state.next_seq, Box::new(store));
        let shared = Arc::new(Mutex::new(Shared {
            issued,
            state,
            ..Shared::default()
        }));
        Self { shared, store }
    }

    /// An inbox that keeps nothing on disk (tests, embedding): the same rules, no durability.
    pub fn memory() -> Self {
        Self::new(State::default(), Memory)
    }

    /// Opens (or creates) the journal at `path`, compacts it and returns the work left by the
    /// previous run. `admitted` re-checks each resumed message's sender (access may have changed
    /// while Bub was down): `None` drops the message, `Some(role)` sets its role. A journal
    /// written before the current version is upgraded first (`legacy`): the rewrite leaves it in
    /// the current form.
    ///
    /// Reads and rewrites the file: call it on the blocking pool (or before serving). Starts
    /// the journal's writer thread.
    pub fn open(
        path: &Path,
        admitted: impl Fn(&Inbound) -> Option<crate::access::Role>,
    ) -> anyhow::Result<(Self, Vec<Resume>)> {
        let mut state = State::default();
        if path.exists() {
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            for record in journal::parse(&legacy::upgrade(text)) {
                state.apply(record);
            }
        }
        let (resume, settled) = plan(&mut state, &|_| true, &admitted);
        for record in settled {
            state.apply(record);
        }
        let (pending, jobs) = (&state.pending, &state.jobs);
        state
            .outgoing
            .retain(|seq, _| pending.contains_key(seq) || jobs.contains_key(seq));
        let disk = Disk::create(path, &state)?;
        if !resume.is_empty() {
            tracing::info!(count = resume.len(), "inbox.resume");
        }
        let mut inbox = Self::new(state, Memory);
        inbox.store = Box::new(Writer::start(disk, inbox.shared.clone())?);
        Ok((inbox, resume))
    }

    /// Journals an admitted message before its receipt is confirmed to the platform: returns
    /// once its `recv` record is in the file (waiting while the writer's queue is full).
    /// `cursor` is the platform's position (Telegram's update id), remembered for the next
    /// start. An error means the message is **not** on disk: do not confirm it.
    pub async fn receive(
        &self,
        msg: &mut Inbound,
        cursor: Option<u64>,
    ) -> anyhow::Result<Received> {
        let key = Some(key_of(msg));
        let make = |seq| {
            msg.seq = seq;
            let msg = msg.clone();
            Record::Recv { seq, cursor, msg }
        };
        let numbered = self.store.numbered(self, key, Box::new(make)).await?;
        msg.seq = numbered.unwrap_or(msg.seq);
        Ok(numbered.map_or(Received::Duplicate, Received::New))
    }

    /// Journals a scheduled job's due run before its turn starts, numbering it (`run.seq`).
    /// An error means the run is not on disk: it may still run, but a restart cannot resume it.
    pub async fn scheduled(&self, run: &mut JobRun) -> anyhow::Result<u64> {
        let make = |seq| {
            run.seq = seq;
            let run = run.clone();
            Record::Job { seq, run }
        };
        let numbered = self.store.numbered(self, None, Box::new(make)).await?;
        run.seq = numbered.expect("a run without a key is never a duplicate");
        Ok(run.seq)
    }

    /// A turn started with these messages. Queued, not waited for: the record reaches the
    /// file as soon as if the caller waited (and before any record queued after it), the turn
    /// just does not stand still meanwhile; [`Inbox::flush`] waits for it at shutdown.
    pub async fn started(&self, seqs: &[u64]) {
        self.post(Record::Start {
            seqs: journaled(seqs),
        })
        .await;
    }

    /// The turn's answer, before it is sent (a restart delivers it instead of re-running).
    pub async fn answered(&self, delivery: &Delivery) {
        let seqs = journaled(&delivery.seqs);
        if seqs.is_empty() {
            return;
        }
        self.record(Record::Answer(Delivery {
            seqs,
            ..delivery.clone()
        }))
        .await;
    }

    /// The platform accepted the first `parts` parts of the messages' answer (one small
    /// record, written between the parts of a long answer).
    pub async fn sent(&self, seqs: &[u64], parts: usize) {
        self.record(Record::Sent {
            seqs: journaled(seqs),
            parts,
        })
        .await;
    }

    /// The messages need no more work. Queued, not waited for, like [`Inbox::started`].
    pub async fn done(&self, seqs: &[u64], outcome: Outcome) {
        self.post(Record::Done {
            seqs: journaled(seqs),
            outcome,
        })
        .await;
    }

    /// Returns once every record queued before it is in the file (the daemon's last step).
    pub async fn flush(&self) {
        if let Err(e) = self.store.flush().await {
            tracing::error!(error = %format!("{e:#}"), "inbox.flush.error");
        }
    }

    /// The work of `session` for this replica: holding its lease, the items nobody took yet;
    /// taking its lease if nobody holds it, all its pending items (`leased`); nothing when
    /// another replica holds it. One box holds every lease: the items of every session that
    /// nobody took yet.
    pub(crate) async fn pull(&self, session: &SessionId) -> anyhow::Result<Vec<Resume>> {
        self.store.pull(self, session).await
    }

    /// The work no notice announced: the items nobody took yet of the sessions this replica
    /// holds, and the sessions with pending items that no replica holds (their replica died).
    pub(crate) async fn sweep(&self) -> anyhow::Result<Vec<Resume>> {
        self.store.sweep(self).await
    }

    /// Gives `session`'s lease back (its actor ended; one box keeps it). Returns whether it
    /// still has pending items — stored meanwhile by a replica that could not take the lease:
    /// pull it again.
    pub async fn release(&self, session: &SessionId) -> anyhow::Result<bool> {
        self.store.release(self, session).await
    }

    /// Reads the platforms' positions again (what other replicas received meanwhile): for an
    /// adapter about to poll or catch up after standing by.
    pub(crate) async fn refresh_positions(&self) -> anyhow::Result<()> {
        self.store.refresh_positions(self).await
    }

    /// The sessions the database announces new work for (once; `None` on one box). It closes
    /// when this replica lost its leases (the connection holding them closed).
    pub fn notices(&self) -> Option<mpsc::Receiver<String>> {
        self.store.notices()
    }

    /// How many chat leases this replica holds in the database.
    pub fn leases(&self) -> usize {
        self.store.leases()
    }

    /// The items stored here and not handed on yet, as work in order.
    fn hand_on_fresh(&self) -> Vec<Resume> {
        let mut shared = self.lock();
        let Shared { state, fresh, .. } = &mut *shared;
        let work = std::mem::take(fresh).into_iter().filter_map(|seq| {
            match (state.pending.get(&seq), state.jobs.get(&seq)) {
                (Some(p), _) => Some(Resume::Received(Box::new(p.msg.clone()))),
                (None, Some(j)) => Some(Resume::Job(j.run.clone())),
                (None, None) => None,
            }
        });
        work.collect()
    }

    /// The platform cursor of `channel` (Telegram: the last update id journaled).
    pub(crate) fn cursor(&self, channel: &str) -> Option<u64> {
        self.lock().state.cursors.get(channel).copied()
    }

    /// The newest message id seen per chat of `channel`, most recently active chats first, at
    /// most `limit` (Discord's catch-up after a restart or a gateway resume).
    #[cfg_attr(not(feature = "discord"), allow(dead_code))]
    pub(crate) fn last_seen(&self, channel: &str, limit: usize) -> Vec<(String, u64)> {
        let shared = self.lock();
        let mut chats: Vec<(&String, u64, u64)> = shared
            .state
            .seen
            .iter()
            .filter(|((ch, _), _)| ch == channel)
            .map(|((_, chat), (id, tick))| (chat, *id, *tick))
            .collect();
        chats.sort_unstable_by_key(|(_, _, tick)| std::cmp::Reverse(*tick));
        chats
            .into_iter()
            .take(limit)
            .map(|(chat, id, _)| (chat.clone(), id))
            .collect()
    }

    /// Bytes this process wrote to the journal, appends and rewrites.
    #[cfg(test)]
    pub(crate) fn written(&self) -> u64 {
        self.store.writer().map_or(0, Writer::written)
    }

    /// Messages received and scheduled runs journaled, not yet finished.
    pub(crate) fn pending(&self) -> usize {
        let inner = self.lock();
        inner.state.pending.len() + inner.state.jobs.len()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().expect("inbox lock")
    }

    /// Writes a progress record; a failure is logged (the record is not applied either, so the
    /// message stays pending and resumes after a restart, which is the safe side).
    async fn record(&self, record: Record) {
        self.write_progress(record, false).await;
    }

    /// [`Inbox::record`] without waiting for the write (the writer logs a failure).
    async fn post(&self, record: Record) {
        self.write_progress(record, true).await;
    }

    /// Stores a progress record, returning once it is stored or (`queued`) queued.
    async fn write_progress(&self, record: Record, queued: bool) {
        if record.seqs().is_empty() {
            return;
        }
        if let Err(e) = self.store.record(self, record, queued).await {
            tracing::error!(error = %format!("{e:#}"), "inbox.append.error");
        }
    }
}

/// The inbox in memory: records apply at once.
struct Memory;

#[async_trait::async_trait]
impl Store for Memory {
    async fn numbered(
        &self,
        inbox: &Inbox,
        key: Option<u64>,
        make: Make<'_>,
    ) -> anyhow::Result<Option<u64>> {
        let mut shared = inbox.lock();
        if key.is_some_and(|key| shared.state.recent.contains(&key)) {
            return Ok(None);
        }
        let seq = shared.issue();
        shared.state.apply(make(seq));
        shared.fresh.insert(seq);
        Ok(Some(seq))
    }

    async fn record(&self, inbox: &Inbox, record: Record, _: bool) -> anyhow::Result<()> {
        inbox.lock().state.apply(record);
        Ok(())
    }
}

impl Delivery {
    /// The session of the chat it goes to.
    pub fn session_id(&self) -> crate::chat::SessionId {
        crate::chat::SessionId::chat_of(&self.channel, &self.out.chat_id)
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Re-checks a resumed message's sender (`None`: no longer admitted). It may read files or the
/// database.
pub type Admitted = Arc<
    dyn Fn(&Inbound) -> futures_util::future::BoxFuture<'static, Option<crate::access::Role>>
        + Send
        + Sync,
>;

#[cfg(not(feature = "postgres"))]
impl Inbox {
    /// A build without the `postgres` feature has no database to share an inbox in.
    pub async fn shared(db: Arc<crate::db::Database>, _: Admitted) -> anyhow::Result<Self> {
        match *db {}
    }
}

#[cfg(test)]
mod tests;
