//! The session actor: one tokio task per chat (`"<channel>:<chat_id>"`) that decides when a turn
//! runs and delivers its answer.
//!
//! Rules (the reference's §8.3, fixed):
//! * A comma command (`,help`) runs as its own turn without debounce or batching — also from a
//!   sender who did not address the bot (§14.22); the adapter already applied the allow-lists.
//! * A message that addresses the bot opens (or extends) the follow-up window
//!   (`BUB_ACTIVE_TIME_WINDOW_SECONDS`) and schedules the batch `BUB_MESSAGE_DEBOUNCE_SECONDS`
//!   from now (a later mention postpones it again).
//! * A message inside the window that does not address the bot joins the batch; if no batch is
//!   scheduled it is scheduled `BUB_MESSAGE_DELAY_SECONDS` from now.
//! * Anything else is skipped (logged with its reason) and closes the window.
//!
//! A turn runs with the rights of the least trusted sender of its batch (an owner's message
//! batched with a guest's runs as guest); a command runs with its own sender's rights.
//!
//! Invariants: **at most one turn per session at a time** — messages that arrive during a turn
//! are batched into the next one, commands queue behind it; turns and their deliveries happen
//! in arrival order. An actor with nothing to do for `BUB_SESSION_IDLE_SECONDS` removes itself
//! from the manager's map (under the map's lock, only when its queue is empty, so no message is
//! lost) and ends. On shutdown, a pending batch runs at once and the actor ends when idle.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Channel, Inbound, Outbound};
use crate::access::Authority;
use crate::agent::{AgentRuntime, TurnResult};
use crate::config::Settings;
use crate::time;

/// Runs turns for sessions (the agent; a fake in tests).
#[async_trait]
pub trait TurnRunner: Send + Sync + 'static {
    /// Runs one turn in `session_id` for `who`.
    async fn run_turn(&self, session_id: &str, prompt: &str, who: &Authority) -> TurnResult;

    /// The session's actor ended: its resources may be released.
    fn release(&self, _session_id: &str) {}
}

#[async_trait]
impl TurnRunner for AgentRuntime {
    async fn run_turn(&self, session_id: &str, prompt: &str, who: &Authority) -> TurnResult {
        self.handle_input(session_id, prompt, who).await
    }

    fn release(&self, session_id: &str) {
        self.release_session(session_id);
    }
}

/// Timing and delivery settings of session actors.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub debounce: Duration,
    pub delay: Duration,
    pub window: Duration,
    pub idle_ttl: Duration,
    pub typing_interval: Duration,
    /// `BUB_PROACTIVE_RESPONSE`: the agent sends its own answers; the framework only delivers
    /// command output and errors.
    pub proactive_response: bool,
}

impl SessionConfig {
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            debounce: time::secs(s.message_debounce_seconds),
            delay: time::secs(s.message_delay_seconds),
            window: time::secs(s.active_time_window_seconds),
            idle_ttl: time::secs(s.session_idle_seconds),
            typing_interval: Duration::from_secs(4),
            proactive_response: s.proactive_response,
        }
    }
}

/// The live actors by session id. A sender is only used under this lock, and an actor only
/// removes itself under it, which makes eviction race-free.
pub type ActorMap = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Inbound>>>>;

/// What the framework posts for a finished turn: command output, the answer (unless the agent
/// answers proactively, or already sent it with `message.send`) and the error, separated by
/// blank lines. Empty = nothing to send.
pub fn render_output(result: &TurnResult, proactive_response: bool) -> String {
    let error = result.error.as_ref().map(|e| format!("Error: {e}"));
    let mut parts = vec![result.immediate_output.as_str()];
    if !proactive_response && !result.answered {
        parts.push(&result.assistant_output);
    }
    parts.extend(error.as_deref());
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

type TurnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One chat's actor (see the module docs).
pub struct SessionActor {
    session_id: String,
    channel: Arc<dyn Channel>,
    runner: Arc<dyn TurnRunner>,
    cfg: SessionConfig,
    actors: ActorMap,
    batch: Vec<Inbound>,
    commands: VecDeque<Inbound>,
    due: Option<Instant>,
    last_mention: Option<Instant>,
}

impl SessionActor {
    pub fn new(
        session_id: String,
        channel: Arc<dyn Channel>,
        runner: Arc<dyn TurnRunner>,
        cfg: SessionConfig,
        actors: ActorMap,
    ) -> Self {
        Self {
            session_id,
            channel,
            runner,
            cfg,
            actors,
            batch: Vec::new(),
            commands: VecDeque::new(),
            due: None,
            last_mention: None,
        }
    }

    /// Runs until evicted, or until shutdown once its work is done.
    pub async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Inbound>,
        shutdown: CancellationToken,
    ) {
        let mut turn: Option<TurnFuture> = None;
        let mut idle_since = Instant::now();
        let mut stopping = false;
        loop {
            if turn.is_none() {
                turn = self.next_turn(stopping);
            }
            let idle = turn.is_none() && self.batch.is_empty() && self.commands.is_empty();
            if idle && stopping {
                break;
            }
            let due = self.due.unwrap_or_else(Instant::now);
            tokio::select! {
                _ = shutdown.cancelled(), if !stopping => stopping = true,
                () = async { turn.as_mut().expect("turn").await }, if turn.is_some() => {
                    turn = None;
                    idle_since = Instant::now();
                }
                message = rx.recv() => match message {
                    Some(message) => {
                        idle_since = Instant::now();
                        self.accept(message);
                        while let Ok(message) = rx.try_recv() {
                            self.accept(message);
                        }
                    }
                    None => stopping = true,
                },
                () = tokio::time::sleep_until(due), if turn.is_none() && self.due.is_some() => {}
                () = tokio::time::sleep_until(time::deadline(idle_since, self.cfg.idle_ttl)), if idle => {
                    if self.try_evict(&rx) {
                        break;
                    }
                    idle_since = Instant::now();
                }
            }
        }
        self.runner.release(&self.session_id);
        tracing::debug!(session = %self.session_id, "session.actor.stop");
    }

    /// Applies the rules of the module docs to one message.
    fn accept(&mut self, message: Inbound) {
        let now = Instant::now();
        if message.is_command() {
            self.commands.push_back(message);
            return;
        }
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
            tracing::info!(
                session = %self.session_id,
                message_id = %message.message_id,
                reason,
                "session.skip"
            );
            return;
        }
        self.batch.push(message);
    }

    /// The next turn to start: a queued command first, then the batch once it is due (at once
    /// when stopping).
    fn next_turn(&mut self, stopping: bool) -> Option<TurnFuture> {
        if let Some(command) = self.commands.pop_front() {
            let prompt = command.prompt.trim().to_owned();
            return Some(self.start_turn(prompt, &command, command.authority()));
        }
        let due = self.due?;
        if !stopping && Instant::now() < due {
            return None;
        }
        self.due = None;
        let batch = std::mem::take(&mut self.batch);
        let last = batch.last()?.clone();
        let lines: Vec<&str> = batch.iter().map(|m| m.prompt.as_str()).collect();
        let prompt = format!("channel: ${}\n{}", self.channel.name(), lines.join("\n"));
        let who = Authority::least(&batch.iter().map(Inbound::authority).collect::<Vec<_>>());
        Some(self.start_turn(prompt, &last, who))
    }

    /// The turn as one future: typing indicator while it runs, then delivery of the answer.
    fn start_turn(&self, prompt: String, trigger: &Inbound, who: Authority) -> TurnFuture {
        let runner = self.runner.clone();
        let channel = self.channel.clone();
        let session_id = self.session_id.clone();
        let chat_id = trigger.chat_id.clone();
        let reply_to = trigger.reply.then(|| trigger.message_id.clone());
        let proactive = self.cfg.proactive_response;
        let typing_interval = self.cfg.typing_interval;
        tracing::info!(session = %session_id, message_id = %trigger.message_id,
            role = %who.role, "session.turn.start");
        Box::pin(async move {
            let typing = tokio::spawn({
                let channel = channel.clone();
                let chat_id = chat_id.clone();
                async move {
                    let mut tick = tokio::time::interval(typing_interval);
                    loop {
                        tick.tick().await;
                        if let Err(e) = channel.typing(&chat_id).await {
                            tracing::debug!(chat_id = %chat_id, error = %e, "typing.error");
                        }
                    }
                }
            });
            let _stop_typing = AbortOnDrop(typing);
            let result = runner.run_turn(&session_id, &prompt, &who).await;
            drop(_stop_typing);
            let text = render_output(&result, proactive);
            if text.is_empty() {
                return;
            }
            let out = Outbound {
                chat_id: chat_id.clone(),
                text,
                reply_to,
            };
            if let Err(e) = channel.send(&out).await {
                tracing::error!(session = %session_id, chat_id = %chat_id, error = %e, "session.deliver.error");
            }
        })
    }

    /// Removes this actor from the map if no message is waiting for it.
    fn try_evict(&self, rx: &mpsc::UnboundedReceiver<Inbound>) -> bool {
        let mut actors = self.actors.lock().expect("actor map");
        if !rx.is_empty() {
            return false;
        }
        actors.remove(&self.session_id);
        tracing::debug!(session = %self.session_id, "session.evict");
        true
    }
}

/// Aborts a task when dropped (the typing loop stops when its turn ends or is cancelled).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
