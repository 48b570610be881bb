//! The journal's writer: one thread owns the file. Records reach it through a bounded queue (a
//! sender waits while it is full); it takes whatever is queued, writes it with one `write`,
//! applies what reached the file to the inbox's state, acknowledges each record, and rewrites
//! the journal when it has grown enough. A thread of its own, not a task that hops to the
//! blocking pool: a record costs the sender one wake-up of the writer and one of itself — or,
//! for a record nobody waits for (`Writer::send` without `wait`), only the writer's; a failure
//! to write such a record is logged here. A barrier (a `None` record: `Store::flush`) is
//! answered once everything queued before it was written.
//!
//! The writer is the file inbox's [`Store`]: a received message or a scheduled run is numbered
//! as its record takes its place in the queue, and handed on once written.
//!
//! Invariants: the state holds exactly the records that reached the file, in file order, so the
//! snapshot the writer takes is the journal it replaces (records still queued are appended after
//! the rewrite); a record is acknowledged only once its bytes are in the file — all but its
//! newline, which the next write (or the reader, at the end of the file) supplies; a failed
//! write fails every record it did not finish, and the next write starts on a new line, so a
//! fragment never glues to the record after it; the journal is rewritten only past
//! [`COMPACT_AT`] and twice its size after the last rewrite, so rewrites cost O(pending)
//! amortised.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow};
use tokio::sync::{mpsc, oneshot};

use super::journal::{self, Record};
use super::{Inbox, Make, Shared, Store};

/// The journal is rewritten without finished records when it grows past this size.
pub(super) const COMPACT_AT: u64 = 4 << 20;
/// Records waiting for the writer; beyond that, senders wait. One write takes them all.
pub(super) const QUEUE: usize = 1024;

/// A record on its way to the file (`None`: a barrier), with who waits for it (if anyone).
struct Job {
    record: Option<Record>,
    /// A received message's key, in flight until the write ends (see `Shared::inflight`).
    key: Option<u64>,
    ack: Option<oneshot::Sender<io::Result<()>>>,
}

/// The inbox's handle on its writer thread. Dropping it closes the queue and waits for the
/// thread to write what was queued (at the daemon's end the queue is already empty: see
/// `Inbox::flush`).
pub(super) struct Writer {
    /// `None` only while being dropped.
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The file side (the task's; tests reach in to make a write fail).
    #[cfg_attr(not(test), allow(dead_code))]
    pub disk: Arc<Mutex<Disk>>,
}

impl Writer {
    /// Starts the writer thread over `disk`; it ends when the inbox is dropped.
    pub(super) fn start(disk: Disk, shared: Arc<Mutex<Shared>>) -> anyhow::Result<Self> {
        let disk = Arc::new(Mutex::new(disk));
        let (tx, rx) = mpsc::channel(QUEUE);
        let file = disk.clone();
        let thread = std::thread::Builder::new()
            .name("bub-journal".into())
            .spawn(move || run(rx, &file, &shared))
            .context("starting the inbox journal's writer")?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            disk,
        })
    }

    fn tx(&self) -> &mpsc::Sender<Job> {
        self.tx
            .as_ref()
            .expect("the queue is open until the writer is dropped")
    }

    /// Queues `record` (`None`: a barrier) behind everything queued before it; returns once
    /// it is written (or failed) if `wait`, else once queued (the writer logs a failure).
    async fn send(&self, record: Option<Record>, wait: bool) -> anyhow::Result<()> {
        let (ack, written) = oneshot::channel();
        let ack = wait.then_some(ack);
        let job = Job {
            record,
            key: None,
            ack,
        };
        self.tx().send(job).await.map_err(|_| stopped())?;
        match wait {
            true => acked(written).await,
            false => Ok(()),
        }
    }

    /// Bytes this process wrote to the journal: appends and rewrites.
    #[cfg(test)]
    pub(super) fn written(&self) -> u64 {
        self.disk.lock().expect("journal file").written
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[async_trait::async_trait]
impl Store for Writer {
    /// Gives out the next sequence number to the record `make` builds with it and journals
    /// the record, returning once it is on disk. Numbers are given out in the order records
    /// are written (the place in the queue is taken first). With a message's `key`, `None`
    /// when that message was received before or is on its way to the file.
    async fn numbered(
        &self,
        inbox: &Inbox,
        key: Option<u64>,
        make: Make<'_>,
    ) -> anyhow::Result<Option<u64>> {
        let permit = self.tx().reserve().await.map_err(|_| stopped())?;
        let (ack, written) = oneshot::channel();
        let seq = {
            let mut shared = inbox.lock();
            if let Some(key) = key
                && (shared.state.recent.contains(&key) || !shared.inflight.insert(key))
            {
                return Ok(None);
            }
            let seq = shared.issue();
            let record = Some(make(seq));
            let ack = Some(ack);
            permit.send(Job { record, key, ack });
            seq
        };
        acked(written).await?;
        inbox.lock().fresh.insert(seq);
        Ok(Some(seq))
    }

    /// Writes `record` (the writer applies it once written).
    async fn record(&self, _: &Inbox, record: Record, queued: bool) -> anyhow::Result<()> {
        self.send(Some(record), !queued).await
    }

    async fn flush(&self) -> anyhow::Result<()> {
        self.send(None, true).await
    }

    #[cfg(test)]
    fn writer(&self) -> Option<&Writer> {
        Some(self)
    }
}

/// What the writer answered for one record.
async fn acked(written: oneshot::Receiver<io::Result<()>>) -> anyhow::Result<()> {
    match written.await {
        Ok(outcome) => outcome.context("writing the inbox journal"),
        Err(_) => Err(stopped()),
    }
}

fn stopped() -> anyhow::Error {
    anyhow!("the inbox journal's writer stopped")
}

/// The writer thread: waits for a record, takes whatever else is queued, writes the batch.
fn run(mut rx: mpsc::Receiver<Job>, disk: &Mutex<Disk>, shared: &Mutex<Shared>) {
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < QUEUE {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        disk.lock().expect("journal file").write(batch, shared);
    }
}

/// The journal file as the writer keeps it.
pub(super) struct Disk {
    path: PathBuf,
    pub file: File,
    /// The file's size as written by this process.
    bytes: u64,
    /// The size at which the journal is rewritten next ([`next_compaction`]).
    compact_at: u64,
    /// The last write failed, maybe after part of a line reached the file (`EFBIG`,
    /// `ENOSPC`): the next one starts on a new line, or it would be glued to the fragment and
    /// unreadable after a restart.
    torn: bool,
    /// Bytes this process wrote to the journal: appends and rewrites (logged at each rewrite).
    written: u64,
    /// Batches written (each one `append`).
    #[cfg(test)]
    pub batches: usize,
}

impl Disk {
    /// Replaces the journal at `path` with the snapshot of `state` and opens it for appending.
    pub(super) fn create(path: &Path, state: &super::State) -> anyhow::Result<Self> {
        let (file, bytes) = rewrite(path, &journal::snapshot(state))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            bytes,
            compact_at: next_compaction(bytes),
            torn: false,
            written: bytes,
            #[cfg(test)]
            batches: 0,
        })
    }

    /// Writes `jobs` with one `write`, applies to the state the records that reached the file,
    /// answers every job, then compacts if it is time.
    fn write(&mut self, jobs: Vec<Job>, shared: &Mutex<Shared>) {
        let mut buf = Vec::with_capacity(jobs.len() * 160);
        if self.torn {
            buf.push(b'\n');
        }
        // Where each record's line ends in `buf` (`None`: a barrier).
        let ends: Vec<Option<Result<usize, serde_json::Error>>> = jobs
            .iter()
            .map(|job| {
                let record = job.record.as_ref()?;
                let start = buf.len();
                Some(match serde_json::to_writer(&mut buf, record) {
                    Ok(()) => {
                        buf.push(b'\n');
                        Ok(buf.len())
                    }
                    Err(e) => {
                        buf.truncate(start);
                        Err(e)
                    }
                })
            })
            .collect();
        let (reached, failure) = append(&mut self.file, &buf);
        #[cfg(test)]
        {
            self.batches += 1;
        }
        self.bytes += reached as u64;
        self.written += reached as u64;
        self.torn = failure.is_some();
        let mut acks = Vec::with_capacity(jobs.len());
        {
            let mut shared = shared.lock().expect("inbox lock");
            for (job, end) in jobs.into_iter().zip(ends) {
                let outcome = match end {
                    None => Ok(()),
                    Some(Ok(end)) if end - 1 <= reached => Ok(()),
                    Some(Ok(_)) => Err(failure.as_ref().map_or_else(
                        || io::Error::from(io::ErrorKind::WriteZero),
                        |e| io::Error::new(e.kind(), e.to_string()),
                    )),
                    Some(Err(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                };
                if let Some(key) = job.key {
                    shared.inflight.remove(&key);
                }
                if let (Ok(()), Some(record)) = (&outcome, job.record) {
                    shared.state.apply(record);
                }
                acks.push((job.ack, outcome));
            }
        }
        for (ack, outcome) in acks {
            match (ack, outcome) {
                // A waiter that went away (its task was dropped) needs no answer.
                (Some(ack), outcome) => drop(ack.send(outcome)),
                (None, Err(e)) => tracing::error!(error = %e, "inbox.append.error"),
                (None, Ok(())) => {}
            }
        }
        self.maybe_compact(shared);
    }

    /// Rewrites the journal with only what is still needed once it grew past `compact_at`.
    fn maybe_compact(&mut self, shared: &Mutex<Shared>) {
        if self.bytes < self.compact_at {
            return;
        }
        let body = journal::snapshot(&shared.lock().expect("inbox lock").state);
        match rewrite(&self.path, &body) {
            Ok((file, bytes)) => {
                self.file = file;
                self.bytes = bytes;
                self.compact_at = next_compaction(bytes);
                self.torn = false;
                self.written += bytes;
                tracing::info!(bytes, written = self.written, "inbox.compact");
            }
            // Keep appending to the old file; the next write tries again.
            Err(e) => tracing::error!(error = %format!("{e:#}"), "inbox.compact.error"),
        }
    }
}

/// Appends `buf` to `file`; returns how many bytes reached it, and the error that stopped it.
fn append(file: &mut File, buf: &[u8]) -> (usize, Option<io::Error>) {
    let mut at = 0;
    while at < buf.len() {
        match file.write(&buf[at..]) {
            Ok(0) => return (at, Some(io::ErrorKind::WriteZero.into())),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (at, Some(e)),
        }
    }
    (at, None)
}

/// The size at which a journal whose last rewrite left `bytes` is rewritten again: past
/// [`COMPACT_AT`], and not before it has doubled. A backlog of pending work (a slow model) then
/// costs rewrites of about as many bytes as were appended — O(pending) amortised — instead of a
/// rewrite of the whole backlog with every record once it passed [`COMPACT_AT`].
fn next_compaction(bytes: u64) -> u64 {
    COMPACT_AT.max(bytes.saturating_mul(2))
}

/// Replaces the journal at `path` with `body` (atomically) and opens it for appending; returns
/// the file and its size.
fn rewrite(path: &Path, body: &str) -> anyhow::Result<(File, u64)> {
    crate::storage::write_atomic(path, body.trim_end().as_bytes(), Some(0o600))?;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    Ok((file, body.len() as u64))
}
