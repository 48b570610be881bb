//! The channel manager: runs the enabled adapters, routes every [`Inbound`] to the actor of its
//! session (creating it on first use), journals the scheduled runs handed to its [`JobQueue`]
//! and routes them the same way, and shuts everything down on a signal. Everything is routed by
//! lease, on one box as among replicas: what the adapters stored, the database's notices and a
//! sweep every [`SWEEP_EVERY`] only say which chat has work, and the manager routes what
//! [`Inbox::pull`] hands it (one box holds every lease: what was received and not handed on
//! yet); an actor that ends gives its lease back (unless a new one took over), and a lost lease
//! connection stops the manager — the chats resume on other replicas. `bub idle` runs one
//! with send-only adapters (nothing listens; answers still go out).
//!
//! Invariants: one actor per live session (the [`ActorMap`]); an evicted actor is replaced by a
//! fresh one on the next message, so memory is bounded by the number of *active* chats; a
//! scheduled run is in the inbox before its actor sees it; the work a restart left
//! ([`Resume`]) reaches its actors before any new message; every queue is bounded: the
//! adapters' queue ([`INBOUND_QUEUE`]), the scheduler's ([`JOB_QUEUE`]) and each actor's
//! mailbox — when an actor's mailbox is full the manager waits for it, its queue fills, and the
//! adapters wait in their sink (nothing is dropped: what is queued is journaled, and what is not
//! yet journaled is not confirmed to the platform); a chat whose queues are full holds the others
//! back until its turn takes its batch. Shutdown stops the adapters first (no new messages),
//! leaves what is still queued to the next start (it is journaled), lets running turns finish
//! for at most [`SHUTDOWN_GRACE`], then drops them (their shell commands are killed; the inbox
//! resumes them on the next start). Memory goes back to the system when serving starts and
//! after sessions are evicted ([`crate::heap`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use dashmap::mapref::entry::Entry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::jobs::{JOB_QUEUE, JobQueue, ScheduledRun, Unserved};
use super::mailbox::{self, Lanes, Mailbox, Posted};
use super::runner::TurnRunner;
use super::session::{ActorMap, BATCH_MESSAGES, Mail, SessionActor, SessionConfig};
use crate::channels::{Channel, Inbound, InboundSink, Ready, SessionId};
use crate::inbox::{Inbox, Resume};
use crate::status::Board;

/// The actors' task tracker, stop and abort tokens, and where an actor that ended says so
/// (its lease is given back).
type Tokens<'a> = (
    &'a TaskTracker,
    &'a CancellationToken,
    &'a CancellationToken,
    &'a mpsc::Sender<SessionId>,
);

/// A scheduled run's number and who waits for its outcome.
type Waiting = Option<(u64, tokio::sync::oneshot::Sender<Result<(), String>>)>;

/// Messages journaled by the adapters and waiting for the manager; beyond that, adapters wait.
pub(crate) const INBOUND_QUEUE: usize = 256;

/// How long running turns may take to finish after a shutdown signal.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(8);

/// How often the manager checks whether sessions were evicted and, if so, trims the heap and
/// releases code pages; and sets the queue gauges of `/metrics`.
const TRIM_CHECK_EVERY: Duration = Duration::from_secs(5);
/// How often the manager looks for work no notice announced, and (among replicas) for the
/// chats of replicas that died (what bounds a takeover's wait).
const SWEEP_EVERY: Duration = Duration::from_secs(3);
/// When the first check runs: the channels have connected (getMe, the gateway) by then, so the
/// code that ran only to start is released, not the code of the connection still starting.
const STARTUP_SETTLES: Duration = Duration::from_secs(1);

/// Runs channels and their session actors.
pub struct ChannelManager {
    channels: HashMap<&'static str, Arc<dyn Channel>>,
    /// Adapters only sent through (`bub idle`), never run.
    send_only: Vec<&'static str>,
    /// Scheduled runs handed to the [`JobQueue`], until [`ChannelManager::run`] takes them.
    jobs: std::sync::Mutex<Option<mpsc::Receiver<ScheduledRun>>>,
    runner: Arc<dyn TurnRunner>,
    cfg: SessionConfig,
    actors: ActorMap,
    inbox: Arc<Inbox>,
    board: Arc<Board>,
    resume: std::sync::Mutex<Vec<Resume>>,
    /// Told when a listening adapter is ready (the daemon's start line).
    announce: Option<mpsc::Sender<Ready>>,
}

impl ChannelManager {
    pub fn new(runner: Arc<dyn TurnRunner>, cfg: SessionConfig, inbox: Arc<Inbox>) -> Self {
        Self {
            channels: HashMap::new(),
            send_only: Vec::new(),
            jobs: std::sync::Mutex::default(),
            runner,
            cfg,
            actors: ActorMap::default(),
            inbox,
            board: Arc::new(Board::new("", &[])),
            resume: std::sync::Mutex::default(),
            announce: None,
        }
    }

    /// Tells `to` when each listening adapter is ready ([`Ready`]).
    pub fn announce_to(&mut self, to: mpsc::Sender<Ready>) {
        self.announce = Some(to);
    }

    /// Work left by the previous run ([`Inbox::open`]), handed to the actors when serving starts.
    pub fn resume(&mut self, work: Vec<Resume>) {
        *self.resume.get_mut().expect("resume lock") = work;
    }

    /// Adds an adapter; names must be unique.
    pub fn add(&mut self, channel: Arc<dyn Channel>) -> anyhow::Result<()> {
        let name = channel.name();
        if self.channels.insert(name, channel).is_some() {
            bail!("channel '{name}' already registered");
        }
        Ok(())
    }

    /// Adds an adapter that is only sent through (answers, scheduled runs), never run.
    pub fn add_send_only(&mut self, channel: Arc<dyn Channel>) -> anyhow::Result<()> {
        let name = channel.name();
        self.add(channel)?;
        self.send_only.push(name);
        Ok(())
    }

    /// The way in for scheduled runs (the scheduler's runner): each is journaled, then handed
    /// to its session's actor while [`ChannelManager::run`] serves.
    pub fn jobs(&mut self) -> JobQueue {
        let (tx, rx) = mpsc::channel(JOB_QUEUE);
        *self.jobs.get_mut().expect("jobs lock") = Some(rx);
        JobQueue::new(tx)
    }

    /// The enabled channel names, sorted.
    pub fn channel_names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.channels.keys().copied().collect();
        names.sort_unstable();
        names
    }

    /// Shows the sessions on `board` (for `bub status`; by default on a board nobody reads).
    pub fn show_on(&mut self, board: Arc<Board>) {
        self.board = board;
    }

    /// The live session actors (shared; for tests and benchmarks).
    pub fn actors(&self) -> ActorMap {
        self.actors.clone()
    }

    /// Serves until `shutdown` is cancelled or a channel fails; then stops within
    /// [`SHUTDOWN_GRACE`] plus the adapters' own stop time. Returns the first channel error.
    pub async fn run(&self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut jobs = self.jobs.lock().expect("jobs lock").take();
        if self.channels.is_empty() && jobs.is_none() {
            bail!("no channel is enabled (set BUB_TELEGRAM_ENABLED or BUB_DISCORD_ENABLED)");
        }
        tracing::info!(channels = ?self.channel_names(), "channel.manager.start");
        let stop_channels = shutdown.child_token();
        let (tx, mut rx) = mpsc::channel::<Inbound>(INBOUND_QUEUE);
        let mut adapters = tokio::task::JoinSet::new();
        let listening = self
            .channels
            .values()
            .filter(|c| !self.send_only.contains(&c.name()));
        for channel in listening {
            let channel = channel.clone();
            let (tx, stop) = (tx.clone(), stop_channels.clone());
            let mut sink = InboundSink::new(self.inbox.clone(), tx);
            if let Some(to) = &self.announce {
                sink = sink.announcing(channel.name(), to.clone());
            }
            adapters.spawn(async move {
                let name = channel.name();
                (name, channel.run(sink, stop).await)
            });
        }
        drop(tx);
        // Without a listening adapter (`bub idle`) the manager serves scheduled runs until
        // shutdown; with them, it also stops when they all stopped.
        let listening = !adapters.is_empty();

        let actors_stop = CancellationToken::new();
        let actors_abort = CancellationToken::new();
        let tracker = TaskTracker::new();
        let (ended_tx, mut ended) = mpsc::channel::<SessionId>(INBOUND_QUEUE);
        let tokens = (&tracker, &actors_stop, &actors_abort, &ended_tx);
        let mut notices = self.inbox.notices();
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let resume = std::mem::take(&mut *self.resume.lock().expect("resume lock"));
        let mut resuming = mails(resume).into_iter();
        let mut failure = None;
        let mut receiving = true;
        let first = tokio::time::Instant::now() + STARTUP_SETTLES;
        let mut trim = tokio::time::interval_at(first, TRIM_CHECK_EVERY);
        let mut peak_sessions = 0;
        // The first two checks (the channels have connected by then) release startup's code.
        let mut startup_checks: u8 = 2;
        loop {
            // The previous run's work first (an actor's full mailbox makes this wait).
            if let Some((channel, mail)) = resuming.next() {
                tokio::select! {
                    () = self.route(&channel, mail, tokens) => continue,
                    () = shutdown.cancelled() => break,
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = trim.tick() => {
                    let live = self.actors.len();
                    crate::metrics::queues(self.inbox.pending(), live, rx.len());
                    crate::metrics::leases(self.inbox.leases());
                    // After start (startup code has run) and after evictions (the burst's code).
                    if live < peak_sessions || startup_checks > 0 {
                        crate::heap::trim_heap();
                        crate::heap::release_code_pages();
                        startup_checks = startup_checks.saturating_sub(1);
                    }
                    peak_sessions = live;
                }
                inbound = rx.recv(), if receiving => match inbound {
                    Some(inbound) => {
                        let session = inbound.session_id();
                        tokio::select! {
                            // Stored: its lease decides which replica runs it.
                            () = self.pull(&session, tokens, None) => {}
                            // Journaled: it resumes on the next start.
                            () = shutdown.cancelled() => break,
                        }
                    }
                    None => receiving = false,
                },
                notice = next(&mut notices) => {
                    let Some(session) = notice.map(SessionId::from) else {
                        // Closed with the connection holding this replica's leases.
                        failure = Some(anyhow::anyhow!(
                            "lost the database connection holding this replica's chat leases"
                        ));
                        break;
                    };
                    tokio::select! {
                        () = self.pull(&session, tokens, None) => {}
                        () = shutdown.cancelled() => break,
                    }
                }
                _ = sweep.tick() => tokio::select! {
                    () = self.sweep(tokens) => {}
                    () = shutdown.cancelled() => break,
                },
                Some(session) = ended.recv() => tokio::select! {
                    () = self.release(&session, tokens) => {}
                    () = shutdown.cancelled() => break,
                },
                Some(run) = next(&mut jobs) => tokio::select! {
                    () = self.schedule(run, tokens) => {}
                    () = shutdown.cancelled() => break,
                },
                done = adapters.join_next(), if listening => {
                    let Some(done) = done else { break };
                    let (name, result) = done.context("channel task panicked")?;
                    if let Err(e) = result {
                        tracing::error!(channel = name, error = %e, "channel.error");
                        failure = Some(e.context(format!("channel {name}")));
                        break;
                    }
                    tracing::info!(channel = name, "channel.stop");
                }
            }
        }

        stop_channels.cancel();
        // No new turn starts from here: what is still queued is journaled and resumes on the
        // next start. Closing the queue releases an adapter waiting to hand a message on.
        rx.close();
        let mut left = std::iter::from_fn(|| rx.try_recv().ok()).count() + resuming.len();
        // Runs the scheduler already claimed are journaled, to run on the next start; a run
        // fired from now on is refused to the scheduler.
        if let Some(jobs) = &mut jobs {
            jobs.close();
            while let Ok(mut scheduled) = jobs.try_recv() {
                self.journal(&mut scheduled).await;
                left += 1;
            }
        }
        if left > 0 {
            tracing::info!(
                messages = left,
                "channel.manager.stop: queued work left for the next start"
            );
        }
        actors_stop.cancel();
        tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "channel.manager.stop: turns still running were dropped (they resume on the next start)"
            );
            actors_abort.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(1), tracker.wait()).await;
        }
        if tokio::time::timeout(Duration::from_secs(2), async {
            while adapters.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            adapters.abort_all();
        }
        // Records queued without waiting (a turn's start and end) reach the file.
        self.inbox.flush().await;
        tracing::info!("channel.manager.stop");
        failure.map_or(Ok(()), Err)
    }

    /// Journals a scheduled run and hands it to its session's actor. A run the journal cannot
    /// take still runs (a restart cannot resume it).
    async fn schedule(&self, mut scheduled: ScheduledRun, tokens: Tokens<'_>) {
        self.journal(&mut scheduled).await;
        if scheduled.run.seq == 0 {
            return self.route("", Mail::Job(scheduled), tokens).await;
        }
        let session = scheduled.run.session.clone();
        let waiting = scheduled.done.map(|done| (scheduled.run.seq, done));
        self.pull(&session, tokens, waiting).await;
    }

    /// Hands this replica's work for `session` to its actor ([`Inbox::pull`]). `waiting`: a
    /// scheduled run's number and who waits for its outcome — told the run went to another
    /// replica when it is not among the work.
    async fn pull(&self, session: &SessionId, tokens: Tokens<'_>, mut waiting: Waiting) {
        match self.inbox.pull(session).await {
            Ok(work) => self.hand_on(work, tokens, &mut waiting).await,
            Err(e) => {
                tracing::error!(session = %session, error = %format!("{e:#}"), "inbox.pull.error");
            }
        }
        if let Some((_, done)) = waiting {
            // Stored: the replica holding the session runs it.
            let _ = done.send(Ok(()));
        }
    }

    /// The work the inbox has for this replica that no notice announced.
    async fn sweep(&self, tokens: Tokens<'_>) {
        match self.inbox.sweep().await {
            Ok(work) => self.hand_on(work, tokens, &mut None).await,
            Err(e) => tracing::error!(error = %format!("{e:#}"), "inbox.sweep.error"),
        }
    }

    /// Routes pulled `work` to its actors; the scheduled run `waiting` names takes its waiter.
    async fn hand_on(&self, work: Vec<Resume>, tokens: Tokens<'_>, waiting: &mut Waiting) {
        for (channel, mut mail) in mails(work) {
            if let Mail::Job(scheduled) = &mut mail
                && waiting
                    .as_ref()
                    .is_some_and(|(seq, _)| *seq == scheduled.run.seq)
            {
                scheduled.done = waiting.take().map(|(_, done)| done);
            }
            self.route(&channel, mail, tokens).await;
        }
    }

    /// `session`'s actor ended: gives its lease back, unless a new actor runs it already;
    /// takes the work stored meanwhile.
    async fn release(&self, session: &SessionId, tokens: Tokens<'_>) {
        if self.actors.contains_key(session) {
            return;
        }
        match self.inbox.release(session).await {
            Ok(true) => self.pull(session, tokens, None).await,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(session = %session, error = %format!("{e:#}"), "inbox.release.error");
            }
        }
    }

    /// Writes a scheduled run's `job` record (numbering it); a failure is logged.
    async fn journal(&self, scheduled: &mut ScheduledRun) {
        if let Err(e) = self.inbox.scheduled(&mut scheduled.run).await {
            tracing::error!(job = %scheduled.run.job, error = %format!("{e:#}"), "inbox.job.error");
        }
    }

    /// Hands `mail` to its session's actor on `channel` (a job's: its session's), starting one
    /// if needed; waits while the actor's mailbox is full.
    async fn route(&self, channel: &str, mut mail: Mail, tokens: Tokens<'_>) {
        let (session_id, adapter) = match &mail {
            Mail::Message(m) => (m.session_id(), self.adapter(channel).ok()),
            Mail::Resumed(batch) => match batch.first() {
                Some(m) => (m.session_id(), self.adapter(channel).ok()),
                None => return,
            },
            Mail::Deliver(d) => (d.session_id(), self.adapter(channel).ok()),
            Mail::Job(job) => (job.run.session.clone(), Some(self.job_adapter(&job.run))),
        };
        let Some(adapter) = adapter else {
            tracing::warn!(channel, "inbound from an unknown channel");
            return;
        };
        let adapter = &adapter;
        loop {
            // A post that needs no wait happens under the entry's lock, and so does a
            // replacement: an idle actor cannot evict itself in between, so no message is left
            // in a dead mailbox.
            let busy = match self.actors.entry(session_id.clone()) {
                Entry::Occupied(mut live) => match live.get().try_send(mail) {
                    Posted::Done => return,
                    Posted::Full(back) => {
                        mail = back;
                        live.get().clone()
                    }
                    Posted::Closed(back) => {
                        let lanes = post_new(|mailbox| live.insert(mailbox), back);
                        return self.start(session_id, adapter, lanes, tokens);
                    }
                },
                Entry::Vacant(free) => {
                    let lanes = post_new(|mailbox| free.insert(mailbox), mail);
                    return self.start(session_id, adapter, lanes, tokens);
                }
            };
            // Full: wait outside the lock. An actor with a full mailbox is not idle, so it
            // does not evict itself; if it ended anyway, the mail comes back: route it again.
            match busy.send(mail).await {
                Ok(()) => return,
                Err(mpsc::error::SendError(back)) => mail = back,
            }
        }
    }

    /// Starts the actor of `session_id`, reading `lanes`.
    fn start(
        &self,
        session_id: SessionId,
        adapter: &Arc<dyn Channel>,
        lanes: Lanes,
        tokens: Tokens<'_>,
    ) {
        let actor = SessionActor::new(
            session_id.clone(),
            adapter.clone(),
            self.runner.clone(),
            self.inbox.clone(),
            self.board.clone(),
            self.cfg.clone(),
            self.actors.clone(),
        );
        let (tracker, stop, abort, ended) = tokens;
        let run = actor.run(lanes, stop.clone(), abort.clone());
        let ended = ended.clone();
        tracker.spawn(async move {
            run.await;
            // Never waits (at shutdown nobody reads): a lease not given back stays with this
            // replica, whose next pull of the chat starts an actor again.
            let _ = ended.try_send(session_id);
        });
    }
}

impl ChannelManager {
    /// The adapter of `channel`: this manager's, else a send-only one from the runner (a
    /// platform with a token that this process does not serve).
    fn adapter(&self, channel: &str) -> anyhow::Result<Arc<dyn Channel>> {
        match self.channels.get(channel) {
            Some(adapter) => Ok(adapter.clone()),
            None => self.runner.adapter(channel),
        }
    }

    /// The adapter a job's answer goes through; for a session without a chat, or a platform
    /// this process cannot reach, one that sends nothing — the job's turn runs all the same.
    fn job_adapter(&self, run: &crate::inbox::JobRun) -> Arc<dyn Channel> {
        let Some((channel, _)) = run.chat() else {
            let why = format!("session {} has no chat", run.session);
            return Arc::new(Unserved { name: "none", why });
        };
        self.adapter(channel).unwrap_or_else(|e| {
            let name = crate::config::platforms()
                .find(|c| *c == channel)
                .unwrap_or("none");
            let why = format!("{e:#}");
            Arc::new(Unserved { name, why })
        })
    }
}

/// The next item of `queue` (a run handed to the job queue, a session the database announced
/// work for); never, without the queue (no job queue; notices on one box).
async fn next<T>(queue: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match queue {
        Some(queue) => queue.recv().await,
        None => std::future::pending().await,
    }
}

/// The actors' mail for `work`, each with the channel of its chat (none for a run: its
/// session's), in order. A session's resumed messages travel together (up to
/// [`BATCH_MESSAGES`] a mail, where its first one was), so its actor runs them as one batch
/// rather than starting a turn on the first before the rest arrive.
fn mails(work: Vec<Resume>) -> Vec<(String, Mail)> {
    let mut mails: Vec<(String, Mail)> = Vec::with_capacity(work.len());
    // Per session: the index of its resumed mail that still has room.
    let mut open: HashMap<SessionId, usize> = HashMap::new();
    for work in work {
        let (channel, mail) = match work {
            Resume::Message(m) => {
                let session = m.session_id();
                if let Some(&at) = open.get(&session)
                    && let Mail::Resumed(batch) = &mut mails[at].1
                    && batch.len() < BATCH_MESSAGES
                {
                    batch.push(*m);
                    continue;
                }
                open.insert(session, mails.len());
                (m.channel.clone(), Mail::Resumed(vec![*m]))
            }
            Resume::Received(m) => (m.channel.clone(), Mail::Message(*m)),
            Resume::Deliver(d) => (d.channel.clone(), Mail::Deliver(d)),
            Resume::Job(run) => (String::new(), Mail::Job(ScheduledRun { run, done: None })),
        };
        mails.push((channel, mail));
    }
    mails
}

/// A new mailbox with `mail` in it, put in the map by `insert`; returns its lanes.
fn post_new<R>(insert: impl FnOnce(Mailbox) -> R, mail: Mail) -> Lanes {
    let (mailbox, lanes) = mailbox::mailbox();
    let posted = mailbox.try_send(mail);
    debug_assert!(matches!(posted, Posted::Done), "a new mailbox has room");
    insert(mailbox);
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Role;
    use crate::chat::{Outbound, Sender};
    use crate::inbox::Delivery;

    fn resumed(chat: &str, id: usize) -> Resume {
        let sender = Sender::new("7", None, Role::Owner);
        let m = Inbound::new("telegram", chat, &id.to_string(), sender, "asked");
        Resume::Message(Box::new(m))
    }

    /// What each mail carries: `chat:id,id` for resumed messages, `deliver:chat` else.
    fn shape(mails: &[(String, Mail)]) -> Vec<String> {
        mails
            .iter()
            .map(|(_, mail)| match mail {
                Mail::Resumed(batch) => {
                    let ids: Vec<&str> = batch.iter().map(|m| m.message_id.as_str()).collect();
                    format!("{}:{}", batch[0].chat_id, ids.join(","))
                }
                Mail::Deliver(d) => format!("deliver:{}", d.out.chat_id),
                _ => "other".to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_chats_resumed_messages_travel_together_in_batches() {
        let delivery = Delivery {
            channel: "telegram".into(),
            seqs: vec![1],
            out: Outbound {
                chat_id: "b".into(),
                text: "recorded".into(),
                reply_to: None,
                file: None,
                edit: None,
            },
            parts_sent: 0,
        };
        let mut work = vec![
            resumed("a", 1),
            Resume::Deliver(delivery),
            resumed("b", 2),
            resumed("a", 3),
        ];
        work.extend((4..4 + BATCH_MESSAGES).map(|id| resumed("b", id)));
        let shape = shape(&mails(work));
        let b: Vec<String> = (2..4 + BATCH_MESSAGES)
            .filter(|&id| id != 3)
            .map(|id| id.to_string())
            .collect();
        let (first, second) = b.split_at(BATCH_MESSAGES);
        assert_eq!(
            shape,
            [
                "a:1,3".to_owned(),
                "deliver:b".to_owned(),
                format!("b:{}", first.join(",")),
                format!("b:{}", second.join(",")),
            ]
        );
    }
}
