//! The session actor: one tokio task per chat (`"<channel>:<chat_id>"`) that decides when a turn
//! runs, delivers its answer, and answers the chat controls.
//!
//! Rules:
//! * A comma command (`,help`) runs as its own turn without debounce or batching — also from a
//!   sender who did not address the bot; the adapter already applied the allow-lists.
//! * A message that addresses the bot opens (or extends) the follow-up window
//!   (`BUB_ACTIVE_TIME_WINDOW_SECONDS`) and schedules the batch `BUB_MESSAGE_DEBOUNCE_SECONDS`
//!   from now (a later mention postpones it again) — but never later than `BUB_MAX_WAIT_SECONDS`
//!   after the batch's first message, so a chat that keeps talking is still answered.
//! * A message inside the window that does not address the bot joins the batch; if no batch is
//!   scheduled it is scheduled `BUB_MESSAGE_DELAY_SECONDS` from now.
//! * Anything else is skipped (logged with its reason) and closes the window.
//! * A batch carries at most [`BATCH_MESSAGES`] messages and [`BATCH_BYTES`] into the model
//!   request, the newest; the older ones are recorded on the tape (a `messages.left_out` event
//!   that `tape.search` finds) and the prompt says how many were left out.
//! * Bounded: the actor queues at most [`QUEUED_MESSAGES`] messages, commands and deliveries
//!   ([`QUEUED_BYTES`] of batch text). A full queue runs its batch at once (no debounce) and
//!   the actor stops reading its mailbox until a turn takes the batch: later messages wait in
//!   the [`Mailbox`], then in the manager's queue, then at the platform — journaled before
//!   they are confirmed, never dropped — and form the next batches, in order. Controls
//!   (`,stop`, `,status`) have a lane of their own and are read at once even then.
//! * Controls: `,stop` cancels the running turn at once (owners any turn, a guest only a turn
//!   that answers them; queued messages stay queued) and the session's background subagents
//!   (the same rule), `,status` answers at once, `,new` queues like a command and starts a
//!   fresh context.
//!
//! * A scheduled job's due run ([`Mail::Job`]) queues like a command and runs as its own turn
//!   ([`super::jobs::turn`]): the actor is the only place a daemon turn starts.
//!
//! Durability: every message and every due run went through the [`Inbox`] before it reached
//! the actor; the actor records each turn's start, its answer before sending, and the end
//! (sent, silent, skipped, cancelled, failed, refused). On shutdown no new turn starts; the
//! running one gets the manager's grace period; whatever is left stays in the journal and
//! resumes on the next start ([`Mail::Resumed`], [`Mail::Deliver`], [`Mail::Job`]).
//!
//! A turn runs with the rights of the least trusted sender of its batch (an owner's message
//! batched with a guest's runs as guest); a command runs with its own sender's rights.
//!
//! Invariants: **at most one turn per session at a time** — messages that arrive during a turn
//! are batched into the next one, commands queue behind it; turns and their deliveries happen
//! in arrival order. An actor with nothing to do for `BUB_SESSION_IDLE_SECONDS` removes itself
//! from the manager's map (under the map's lock, only when its queue is empty, so no message is
//! lost) and ends.

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::courier::{Courier, typing};
use super::jobs::{self, ScheduledRun};
use super::live;
use super::mailbox::{Lanes, Mailbox};
use super::runner::{Stopped, TurnRunner, new_reply, queue_lines, stop_reply};
use crate::access::{Authority, Role};
use crate::agent::inbound;
use crate::agent::{ChatBatch, TurnInput, TurnRequest};
use crate::channels::{Channel, Control, Inbound, Outbound, SessionId};
use crate::config::Settings;
use crate::delivery::SendLedger;
use crate::inbox::{Delivery, Inbox, Outcome};
use crate::metrics::{self, TurnKind};
use crate::status::{Board, SessionState};
use crate::tape::Event;
use crate::time;
use crate::tools::TurnOutput;

/// The most messages one batch carries into a model request (the newest).
pub(crate) const BATCH_MESSAGES: usize = 50;
/// The most prompt bytes one batch carries into a model request.
pub(crate) const BATCH_BYTES: usize = 64 * 1024;
/// The most messages, commands and deliveries an actor keeps queued; past it, mail waits in
/// the mailbox.
pub(crate) const QUEUED_MESSAGES: usize = 10 * BATCH_MESSAGES;
/// The most prompt bytes of an actor's queued batch; past it, mail waits in the mailbox.
pub(crate) const QUEUED_BYTES: usize = 16 * BATCH_BYTES;

/// Timing and delivery settings of session actors.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub debounce: Duration,
    pub delay: Duration,
    pub window: Duration,
    /// `BUB_MAX_WAIT_SECONDS`: a batch runs at most this long after its first message.
    pub max_wait: Duration,
    pub idle_ttl: Duration,
    pub typing_interval: Duration,
    /// `BUB_STREAM=edits`: answers are shown as they are written, in one message edited at
    /// most once per [`LIVE_INTERVAL`] (where the channel can edit messages).
    pub live: bool,
    /// `BUB_HOME`: an answer too long for its chat is written under it as a file to send.
    pub home: PathBuf,
}

impl SessionConfig {
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            debounce: s.message_debounce,
            delay: s.message_delay,
            window: s.active_time_window,
            max_wait: s.max_wait,
            idle_ttl: s.session_idle,
            typing_interval: Duration::from_secs(4),
            live: s.stream_edits,
            home: s.home.clone(),
        }
    }
}

/// What the manager hands a session actor.
#[derive(Debug)]
pub(crate) enum Mail {
    /// A message just received.
    Message(Inbound),
    /// Messages of this chat received before a restart (or taken over from another replica),
    /// not yet answered, in order: they run as one batch, without waiting for a mention or a
    /// debounce (commands each on their own).
    Resumed(Vec<Inbound>),
    /// An answer recorded before a restart, not yet delivered.
    Deliver(Delivery),
    /// A scheduled job's due run, journaled (just fired, or resumed after a restart).
    Job(ScheduledRun),
}

/// The live actors by session id. A mailbox is only posted to without waiting under its
/// entry's lock, and an actor only removes itself under it (`remove_if` its lanes are empty),
/// which makes eviction race-free; a post that has to wait (a full lane) waits outside the
/// lock, and gets its mail back if the actor ended meanwhile.
pub(crate) type ActorMap = Arc<dashmap::DashMap<SessionId, Mailbox>>;

type TurnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The turn in progress, for `,stop` and `,status`.
struct Running {
    started: Instant,
    kind: TurnKind,
    who: Authority,
    seqs: Vec<u64>,
    what: Arc<str>,
}

/// One chat's actor (see the module docs).
pub(crate) struct SessionActor {
    session_id: SessionId,
    channel: Arc<dyn Channel>,
    runner: Arc<dyn TurnRunner>,
    inbox: Arc<Inbox>,
    /// What `bub status` shows of this session.
    board: Arc<Board>,
    cfg: SessionConfig,
    actors: ActorMap,
    batch: Vec<Inbound>,
    /// The prompt bytes of `batch`.
    batch_bytes: usize,
    commands: VecDeque<Inbound>,
    deliveries: VecDeque<Delivery>,
    jobs: VecDeque<ScheduledRun>,
    due: Option<Instant>,
    /// When the batch's first message arrived (for `max_wait`).
    batch_since: Option<Instant>,
    last_mention: Option<Instant>,
    running: Option<Running>,
    /// The row last shown on the board.
    published: Option<SessionState>,
    /// Work beside the turn (a `,status` answer, a notice, recording a live message's id):
    /// waited for before the actor ends, unless it is aborted.
    side: TaskTracker,
}

impl SessionActor {
    pub(crate) fn new(
        session_id: SessionId,
        channel: Arc<dyn Channel>,
        runner: Arc<dyn TurnRunner>,
        inbox: Arc<Inbox>,
        board: Arc<Board>,
        cfg: SessionConfig,
        actors: ActorMap,
    ) -> Self {
        Self {
            session_id,
            channel,
            runner,
            inbox,
            board,
            cfg,
            actors,
            batch: Vec::new(),
            batch_bytes: 0,
            commands: VecDeque::new(),
            deliveries: VecDeque::new(),
            jobs: VecDeque::new(),
            due: None,
            batch_since: None,
            last_mention: None,
            running: None,
            published: None,
            side: TaskTracker::new(),
        }
    }

    /// Runs until evicted; after `stop`, until its running turn ends (no new turn starts);
    /// after `abort`, at once (the running turn is dropped and resumes after a restart).
    pub(crate) async fn run(
        mut self,
        mut lanes: Lanes,
        stop: CancellationToken,
        abort: CancellationToken,
    ) {
        let mut turn: Option<TurnFuture> = None;
        let mut idle_since = Instant::now();
        let mut stopping = false;
        // Both lanes closed (the mailbox left the map and nobody holds it).
        let mut closed = false;
        loop {
            if turn.is_none() {
                self.running = None;
                if stopping {
                    break;
                }
                turn = self.next_turn();
            }
            self.publish();
            let idle = turn.is_none()
                && self.batch.is_empty()
                && self.commands.is_empty()
                && self.deliveries.is_empty()
                && self.jobs.is_empty();
            let due = self.due.unwrap_or_else(Instant::now);
            tokio::select! {
                () = abort.cancelled() => break,
                () = stop.cancelled(), if !stopping => stopping = true,
                () = async { turn.as_mut().expect("turn").await }, if turn.is_some() => {
                    turn = None;
                    if let Some(running) = &self.running {
                        metrics::turn(running.kind, running.started.elapsed());
                    }
                    idle_since = Instant::now();
                }
                control = lanes.controls.recv(), if !closed => match control {
                    Some(mail) => {
                        idle_since = Instant::now();
                        // What was sent before it comes first, as far as the queue has room.
                        self.take_mail(&mut lanes, &mut turn).await;
                        self.accept(mail, &mut turn).await;
                    }
                    None => (closed, stopping) = (true, true),
                },
                // Only with room in the queue: otherwise the mail waits in the mailbox.
                mail = lanes.mail.recv(), if !closed && self.has_room() => match mail {
                    Some(mail) => {
                        idle_since = Instant::now();
                        self.accept(mail, &mut turn).await;
                        self.take_mail(&mut lanes, &mut turn).await;
                    }
                    None => (closed, stopping) = (true, true),
                },
                () = tokio::time::sleep_until(due), if turn.is_none() && self.due.is_some() => {}
                () = tokio::time::sleep_until(time::deadline(idle_since, self.cfg.idle_ttl)), if idle => {
                    if self.try_evict(&lanes) {
                        break;
                    }
                    idle_since = Instant::now();
                }
            }
        }
        let queued = self.batch.len() + self.commands.len() + self.jobs.len();
        if queued > 0 || turn.is_some() {
            tracing::info!(session = %self.session_id, queued,
                running = turn.is_some(), "session.stop: left for the next start");
        }
        self.side.close();
        if !abort.is_cancelled() {
            self.side.wait().await;
        }
        self.board.remove(&self.session_id);
        self.runner.release(&self.session_id);
        tracing::debug!(session = %self.session_id, "session.actor.stop");
    }

    fn courier(&self) -> Courier {
        Courier {
            channel: self.channel.clone(),
            home: self.cfg.home.clone(),
            session_id: self.session_id.clone(),
            board: self.board.clone(),
        }
    }

    /// Shows the running turn and the queue on the status board (when they changed).
    fn publish(&mut self) {
        let row = SessionState {
            running: self
                .running
                .as_ref()
                .map(|r| (r.what.clone(), r.started.into_std())),
            queued_messages: self.batch.len(),
            queued_commands: self.commands.len() + self.deliveries.len() + self.jobs.len(),
        };
        if self.published.as_ref() != Some(&row) {
            self.board.set(&self.session_id, row.clone());
            self.published = Some(row);
        }
    }

    /// Whether the queue takes more mail ([`QUEUED_MESSAGES`], [`QUEUED_BYTES`]).
    fn has_room(&self) -> bool {
        self.batch.len() + self.commands.len() + self.deliveries.len() < QUEUED_MESSAGES
            && self.batch_bytes < QUEUED_BYTES
    }

    /// Takes the mail waiting in the mailbox while the queue has room.
    async fn take_mail(&mut self, lanes: &mut Lanes, turn: &mut Option<TurnFuture>) {
        while self.has_room() {
            let Ok(mail) = lanes.mail.try_recv() else {
                break;
            };
            self.accept(mail, turn).await;
        }
    }

    /// Adds `message` to the batch; a full queue makes the batch due at once.
    fn push_batch(&mut self, message: Inbound) {
        self.batch_bytes += prompt_bytes(&message);
        self.batch.push(message);
        if !self.has_room() {
            self.due = Some(Instant::now());
        }
    }

    /// Takes one piece of mail: controls act at once, the rest is queued by the module's rules.
    async fn accept(&mut self, mail: Mail, turn: &mut Option<TurnFuture>) {
        let message = match mail {
            Mail::Deliver(delivery) => return self.deliveries.push_back(delivery),
            Mail::Job(scheduled) => {
                tracing::info!(session = %self.session_id, job = %scheduled.run.job,
                    running = self.running.is_some(), "session.job.queued");
                return self.jobs.push_back(scheduled);
            }
            Mail::Resumed(messages) => {
                for message in messages {
                    if message.is_command() {
                        self.commands.push_back(message);
                    } else {
                        self.batch_since.get_or_insert_with(Instant::now);
                        self.due = Some(Instant::now());
                        self.push_batch(message);
                    }
                }
                return;
            }
            Mail::Message(message) => message,
        };
        match message.control() {
            Some(Control::Stop) => return self.stop(&message, turn).await,
            Some(Control::Status) => return self.status(&message).await,
            Some(Control::New | Control::Usage) | None if message.is_command() => {
                return self.commands.push_back(message);
            }
            _ => {}
        }
        let now = Instant::now();
        let in_window = self
            .last_mention
            .is_some_and(|at| now.duration_since(at) <= self.cfg.window);
        if message.mentioned {
            self.last_mention = Some(now);
            self.due = Some(time::deadline(now, self.cfg.debounce));
        } else if in_window {
            self.due.get_or_insert(time::deadline(now, self.cfg.delay));
        } else {
            let reason = if self.last_mention.is_some() {
                "window closed"
            } else {
                "not addressed"
            };
            self.last_mention = None;
            tracing::info!(session = %self.session_id, message_id = %message.message_id,
                reason, "session.skip");
            self.inbox.done(&[message.seq], Outcome::Skipped).await;
            return;
        }
        let first = *self.batch_since.get_or_insert(now);
        let latest = time::deadline(first, self.cfg.max_wait);
        self.due = self.due.map(|due| due.min(latest));
        self.push_batch(message);
    }

    /// `,stop`: cancels the running turn, the session's background subagents that
    /// `message`'s sender may stop (an owner all, others what runs for them) and the background
    /// commands the sender started, then confirms; queued work stays queued.
    async fn stop(&mut self, message: &Inbound, turn: &mut Option<TurnFuture>) {
        let who = message.authority();
        let children = self.runner.stop_background(&self.session_id, &who);
        let reply = |text: &str| Outbound {
            chat_id: message.chat_id.clone(),
            text: text.to_owned(),
            reply_to: message.reply.then(|| message.message_id.clone()),
            file: None,
            edit: None,
        };
        self.inbox.done(&[message.seq], Outcome::Sent).await;
        let Some(running) = self.running.take().filter(|_| turn.is_some()) else {
            return self.notify(reply(&stop_reply(false, children)));
        };
        let allowed =
            who.role == Role::Owner || who.senders.iter().any(|s| running.who.senders.contains(s));
        if !allowed {
            self.running = Some(running);
            let mut text = "Only an owner or the person it answers can stop this turn.".to_owned();
            if children != Stopped::default() {
                text.push(' ');
                text.push_str(&stop_reply(false, children));
            }
            return self.notify(reply(&text));
        }
        *turn = None; // Drops the model call and kills the turn's shell commands.
        let age = running.started.elapsed();
        tracing::info!(session = %self.session_id, by = %who.describe(), age_ms = age.as_millis() as u64,
            "session.turn.cancelled");
        self.inbox.done(&running.seqs, Outcome::Cancelled).await;
        let runner = self.runner.clone();
        let courier = self.courier();
        let session_id = self.session_id.clone();
        let data = json!({"by": who.describe(), "after_ms": age.as_millis() as u64,
            "what": &*running.what});
        let out = reply(&stop_reply(true, children));
        self.running = Some(Running {
            started: Instant::now(),
            who,
            seqs: Vec::new(),
            what: "stop".into(),
            kind: TurnKind::Control,
        });
        *turn = Some(Box::pin(async move {
            runner.record(&session_id, Event::TurnCancelled, data).await;
            courier.deliver(&out).await;
        }));
    }

    /// `,status`: answered at once, beside a running turn.
    async fn status(&self, message: &Inbound) {
        let runner = self.runner.clone();
        let courier = self.courier();
        let lines = queue_lines(
            self.running
                .as_ref()
                .map(|r| (&*r.what, r.started.elapsed())),
            self.batch.len(),
            self.commands.len() + self.jobs.len(),
        );
        let mut out = Outbound {
            chat_id: message.chat_id.clone(),
            text: String::new(),
            reply_to: message.reply.then(|| message.message_id.clone()),
            file: None,
            edit: None,
        };
        self.inbox.done(&[message.seq], Outcome::Sent).await;
        let who = message.authority();
        self.side.spawn(async move {
            let about = runner.status(&courier.session_id, &who).await;
            out.text = [about.trim(), &lines.join("\n")]
                .into_iter()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("\n");
            courier.deliver(&out).await;
        });
    }

    /// Sends a short notice beside the running turn.
    fn notify(&self, out: Outbound) {
        let courier = self.courier();
        self.side.spawn(async move { courier.deliver(&out).await });
    }

    /// The next turn to start: a recorded answer first, then a queued command, a scheduled
    /// run, then the batch once it is due.
    fn next_turn(&mut self) -> Option<TurnFuture> {
        if let Some(delivery) = self.deliveries.pop_front() {
            return Some(self.redeliver(delivery));
        }
        if let Some(command) = self.commands.pop_front() {
            if command.control() == Some(Control::New) {
                return Some(self.new_context(command));
            }
            let line = command.content.command().unwrap_or_default();
            let input = TurnInput::Command(line.to_owned());
            let who = command.authority();
            return Some(self.start_turn(input, &command, who, vec![command.seq], Vec::new()));
        }
        if let Some(scheduled) = self.jobs.pop_front() {
            return Some(self.start_job(scheduled));
        }
        let due = self.due?;
        if Instant::now() < due {
            return None;
        }
        self.due = None;
        self.batch_since = None;
        self.batch_bytes = 0;
        let mut batch = std::mem::take(&mut self.batch);
        let last = batch.last()?.clone();
        let who = Authority::least(&batch.iter().map(Inbound::authority).collect::<Vec<_>>());
        let seqs = batch.iter().map(|m| m.seq).collect();
        let shown = shown_count(&batch);
        let left_out: Vec<Inbound> = batch.drain(..batch.len() - shown).collect();
        let input = TurnInput::Chat(ChatBatch {
            adapter: self.channel.clone(),
            interrupted: batch.iter().chain(&left_out).any(|m| m.interrupted),
            left_out: left_out.len(),
            messages: batch,
        });
        let left_out = left_out.iter().map(inbound::line).collect();
        Some(self.start_turn(input, &last, who, seqs, left_out))
    }

    /// The turn as one future: typing indicator while it runs, then the answer — recorded in
    /// the inbox before it is sent, and marked sent once the platform accepted it.
    fn start_turn(
        &mut self,
        input: TurnInput,
        trigger: &Inbound,
        who: Authority,
        seqs: Vec<u64>,
        left_out: Vec<String>,
    ) -> TurnFuture {
        let runner = self.runner.clone();
        let courier = self.courier();
        let inbox = self.inbox.clone();
        let session_id = self.session_id.clone();
        let chat_id = trigger.chat_id.clone();
        let reply_to = trigger.reply.then(|| trigger.message_id.clone());
        let typing_interval = self.cfg.typing_interval;
        // A live message an interrupted attempt of this turn posted (before a restart): the
        // answer goes there, not into a second message.
        let earlier = inbox.live_message(&seqs);
        // Commands answer at once; a live answer is for the model's turns.
        let live = (self.cfg.live && !trigger.is_command()).then(|| {
            let (inbox, seqs, side) = (inbox.clone(), seqs.clone(), self.side.clone());
            // Recorded by a task of its own: the live message is not held up by the journal.
            let posted = move |id: &str| {
                let id = id.to_owned();
                side.spawn(async move { inbox.live(&seqs, &id).await });
            };
            let (channel, reply_to) = (courier.channel.clone(), reply_to.clone());
            live::LiveAnswer::start(channel, &chat_id, reply_to, earlier.clone(), posted)
        });
        let sends = SendLedger::new(inbox.clone(), &seqs);
        tracing::info!(session = %session_id, message_id = %trigger.message_id,
            role = %who.role, messages = seqs.len(), "session.turn.start");
        let what = if trigger.is_command() {
            "a command".into()
        } else {
            format!("an answer to {} message(s)", seqs.len()).into()
        };
        self.running = Some(Running {
            started: Instant::now(),
            who: who.clone(),
            seqs: seqs.clone(),
            what,
            kind: match trigger.is_command() {
                true => TurnKind::Command,
                false => TurnKind::Chat,
            },
        });
        Box::pin(async move {
            // Queued before the turn does anything, written ahead of its later records: a restart
            // knows it was interrupted.
            inbox.started(&seqs).await;
            let _typing = typing(courier.channel.clone(), chat_id.clone(), typing_interval);
            if !left_out.is_empty() {
                let data = json!({"count": left_out.len(), "messages": left_out});
                runner
                    .record(&session_id, Event::MessagesLeftOut, data)
                    .await;
            }
            let output = TurnOutput {
                live: live.as_ref().map(live::LiveAnswer::sender),
                sends,
            };
            let request = TurnRequest::asked(session_id.clone(), input, who.clone());
            let result = runner.turn(request.with_output(output)).await;
            drop(_typing);
            // The live message, if one was posted (now or by an interrupted attempt), becomes
            // the answer's first part.
            let shown = match live {
                Some(live) => live.finish().await,
                None => None,
            };
            let shown = shown
                .map(|s| (s.id, s.text))
                .or(earlier.map(|id| (id, String::new())));
            if let Some(error) = &result.error {
                courier.board.error(&session_id, &error.to_string());
            }
            let mut text = result.reply_text();
            if text.is_empty() {
                let Some(shown) = &shown else {
                    inbox.done(&seqs, Outcome::Silent).await;
                    return;
                };
                // Nothing to deliver (answered with message.send, say): the live message
                // keeps what was written, without its status line.
                text = match shown.1.trim() {
                    "" => "Done.".to_owned(),
                    written => written.to_owned(),
                };
            }
            let edit = shown.map(|(id, _)| id);
            let delivery = Delivery {
                channel: courier.channel.name().to_owned(),
                seqs,
                out: Outbound {
                    chat_id,
                    text,
                    reply_to,
                    file: None,
                    edit,
                },
                parts_sent: 0,
            };
            inbox.answered(&delivery).await;
            courier.deliver_recorded(&inbox, &delivery).await;
        })
    }

    /// A scheduled job's due run as a turn ([`jobs::turn`]).
    fn start_job(&mut self, scheduled: ScheduledRun) -> TurnFuture {
        let run = &scheduled.run;
        tracing::info!(session = %self.session_id, job = %run.job, role = %run.creator.role,
            "session.job.start");
        let seq = run.seq;
        let background = run.subagent.is_some() || run.reports.is_some();
        self.running = Some(Running {
            started: Instant::now(),
            who: run.creator.clone(),
            seqs: vec![run.seq],
            what: match background {
                true => format!("background {}", run.job),
                false => format!("scheduled job {}", run.job),
            }
            .into(),
            kind: match background {
                true => TurnKind::Subagent,
                false => TurnKind::Job,
            },
        });
        let (runner, inbox) = (self.runner.clone(), self.inbox.clone());
        let courier = self.courier();
        Box::pin(async move {
            // Queued before the turn does anything, written ahead of its later records: a restart
            // knows it was interrupted.
            inbox.started(&[seq]).await;
            jobs::turn(scheduled, runner, courier, inbox).await;
        })
    }

    /// An answer recorded before a restart: sent, not re-run.
    fn redeliver(&mut self, delivery: Delivery) -> TurnFuture {
        let courier = self.courier();
        let inbox = self.inbox.clone();
        self.running = Some(Running {
            started: Instant::now(),
            who: Authority::terminal(),
            seqs: delivery.seqs.clone(),
            what: "a delivery".into(),
            kind: TurnKind::Delivery,
        });
        tracing::info!(session = %self.session_id, messages = delivery.seqs.len(), "session.redeliver");
        Box::pin(async move { courier.deliver_recorded(&inbox, &delivery).await })
    }

    /// `,new`: a handoff anchor, confirmed in the chat.
    fn new_context(&mut self, command: Inbound) -> TurnFuture {
        let runner = self.runner.clone();
        let courier = self.courier();
        let inbox = self.inbox.clone();
        let session_id = self.session_id.clone();
        let who = command.authority();
        self.running = Some(Running {
            started: Instant::now(),
            who: who.clone(),
            seqs: vec![command.seq],
            what: "a new context".into(),
            kind: TurnKind::Control,
        });
        Box::pin(async move {
            let text = new_reply(&runner.new_context(&session_id, &who).await);
            let out = Outbound {
                chat_id: command.chat_id.clone(),
                text,
                reply_to: command.reply.then(|| command.message_id.clone()),
                file: None,
                edit: None,
            };
            let sent = courier.deliver(&out).await;
            inbox.done(&[command.seq], sent).await;
        })
    }

    /// Removes this actor from the map if no message is waiting for it.
    fn try_evict(&self, lanes: &Lanes) -> bool {
        let removed = self
            .actors
            .remove_if(&self.session_id, |_, _| lanes.is_empty())
            .is_some();
        // Absent from the map: nothing new can reach this actor (a post that was waiting gets
        // its mail back when the lanes close, and starts a new actor).
        let evicted = removed || (lanes.is_empty() && !self.actors.contains_key(&self.session_id));
        if evicted {
            tracing::debug!(session = %self.session_id, "session.evict");
        }
        evicted
    }
}

/// How many of the newest messages of `batch` fit one request ([`BATCH_MESSAGES`],
/// [`BATCH_BYTES`]); at least one.
fn shown_count(batch: &[Inbound]) -> usize {
    let mut bytes = 0;
    let fitting = batch
        .iter()
        .rev()
        .take(BATCH_MESSAGES)
        .take_while(|m| {
            bytes += prompt_bytes(m) + 1;
            bytes <= BATCH_BYTES
        })
        .count();
    fitting.max(1).min(batch.len())
}

/// The bytes of `message`'s line in the model's prompt (before its files are handled).
fn prompt_bytes(message: &Inbound) -> usize {
    inbound::line(message).len()
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
