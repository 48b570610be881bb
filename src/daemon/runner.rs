//! What the session actors ask of the agent: [`TurnRunner`] (a turn, a scheduled job's turn, a
//! background subagent's run and `/stop` of those, tape records, a fresh context, `,status`,
//! the adapter of a channel the manager does not run) and its implementation by
//! [`AgentRuntime`]. Tests drive the actors with fakes of it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::jobs;
use crate::access::Authority;
use crate::agent::{AgentRuntime, TurnInput, TurnRequest};
use crate::channels::{Channel, SessionId};
use crate::delivery::TurnResult;
use crate::inbox::{JobRun, Outcome};
use crate::tape::Event;
use crate::tools::TurnOutput;

/// Runs turns for sessions (the agent; a fake in tests).
#[async_trait]
pub trait TurnRunner: Send + Sync + 'static {
    /// Runs one turn (every turn enters the agent's stages here).
    async fn turn(&self, request: TurnRequest) -> TurnResult;

    /// Records an event on the session's tape.
    async fn record(&self, _session_id: &SessionId, _name: Event, _data: Value) {}

    /// Runs a scheduled job's turn with its creator's rights, checked again now, its sends
    /// recorded on `output.sends`; `Err` says why it may not run (the turn did not run).
    async fn run_job(&self, run: &JobRun, output: TurnOutput) -> Result<TurnResult, String> {
        let input = TurnInput::text(run.prompt.as_str());
        let request = TurnRequest::scheduled(run.session.clone(), input, run.creator.clone());
        Ok(self.turn(request.with_output(output)).await)
    }

    /// Records how a job's run went (`schedule.run` on its session's tape) and lets go of what
    /// the run used.
    async fn job_ran(&self, run: &JobRun, data: Value) {
        self.record(&run.session, Event::ScheduleRun, data).await;
    }

    /// Runs a background subagent's run (`run.subagent`); `Err`: how it ended without handing
    /// its answer to the parent session (which closes it in the journal).
    async fn run_subagent(&self, _run: &JobRun) -> Result<(), Outcome> {
        Err(Outcome::Refused)
    }

    /// `/stop` in `session_id`'s chat by `who`: stops the background subagents of the session
    /// they may stop and the background commands they started there.
    fn stop_background(&self, _session_id: &SessionId, _who: &Authority) -> Stopped {
        Stopped::default()
    }

    /// The adapter for `channel` when the manager runs none for it (a send-only one).
    fn adapter(&self, channel: &str) -> anyhow::Result<Arc<dyn Channel>> {
        anyhow::bail!("no {channel} adapter in this process")
    }

    /// Starts a fresh context in the session (a handoff anchor) and ends the session's
    /// background commands `who` may end.
    async fn new_context(
        &self,
        _session_id: &SessionId,
        _who: &Authority,
    ) -> anyhow::Result<Stopped> {
        Ok(Stopped::default())
    }

    /// Lines about the session for `who`'s `,status` (model, tape, jobs, background work,
    /// uptime, version).
    async fn status(&self, _session_id: &SessionId, _who: &Authority) -> String {
        String::new()
    }

    /// The session's actor ended: its resources may be released.
    fn release(&self, _session_id: &SessionId) {}
}

#[async_trait]
impl TurnRunner for AgentRuntime {
    async fn turn(&self, request: TurnRequest) -> TurnResult {
        AgentRuntime::turn(self, request).await
    }

    async fn record(&self, session_id: &SessionId, name: Event, data: Value) {
        self.append_event(session_id, name, data).await;
    }

    async fn run_job(&self, run: &JobRun, output: TurnOutput) -> Result<TurnResult, String> {
        jobs::run(self, run, output).await
    }

    async fn job_ran(&self, run: &JobRun, data: Value) {
        jobs::ran(self, run, data).await;
    }

    async fn run_subagent(&self, run: &JobRun) -> Result<(), Outcome> {
        jobs::run_subagent(self, run).await
    }

    fn stop_background(&self, session_id: &SessionId, who: &Authority) -> Stopped {
        Stopped {
            subagents: self.stop_subagents(session_id, who),
            commands: self.stop_commands(session_id, who, true),
        }
    }

    fn adapter(&self, channel: &str) -> anyhow::Result<Arc<dyn Channel>> {
        self.outbox().adapter(channel)
    }

    async fn new_context(
        &self,
        session_id: &SessionId,
        who: &Authority,
    ) -> anyhow::Result<Stopped> {
        self.fresh_context(session_id, who).await?;
        Ok(Stopped {
            subagents: 0,
            commands: self.stop_commands(session_id, who, false),
        })
    }

    async fn status(&self, session_id: &SessionId, who: &Authority) -> String {
        self.status_text(session_id, who).await
    }

    fn release(&self, session_id: &SessionId) {
        self.release_session(session_id);
    }
}

/// What `/stop` (or `/new`) ended besides the turn.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub subagents: usize,
    pub commands: usize,
}

impl Stopped {
    /// `1 background subagent and 2 background commands`; empty for nothing.
    pub fn describe(self) -> String {
        let count = |n: usize, what: &str| match n {
            0 => None,
            1 => Some(format!("1 {what}")),
            n => Some(format!("{n} {what}s")),
        };
        let parts: Vec<String> = [
            count(self.subagents, "background subagent"),
            count(self.commands, "background command"),
        ]
        .into_iter()
        .flatten()
        .collect();
        parts.join(" and ")
    }
}

/// The answer to `/stop`: whether a turn was stopped, and what else ended (every chat and the
/// terminal say the same).
pub(crate) fn stop_reply(stopped_turn: bool, children: Stopped) -> String {
    let children = children.describe();
    match (stopped_turn, children.is_empty()) {
        (true, true) => "Stopped.".to_owned(),
        (true, false) => format!("Stopped, with {children}."),
        (false, true) => "Nothing is running.".to_owned(),
        (false, false) => format!("Stopped {children}."),
    }
}

/// The answer to `/new`: the fresh context, and the background commands it ended.
pub(crate) fn new_reply(ended: &anyhow::Result<Stopped>) -> String {
    match ended {
        Ok(ended) => {
            let mut text = "Started a fresh context. Earlier messages stay on the tape \
                            (tape.search finds them)."
                .to_owned();
            let ended = ended.describe();
            if !ended.is_empty() {
                text.push_str(&format!(" Ended {ended}."));
            }
            text
        }
        Err(e) => format!("Error: could not start a fresh context: {e:#}"),
    }
}

/// The lines `/status` adds about the chat's own queue: what runs (and for how long), what
/// waits.
pub(crate) fn queue_lines(
    running: Option<(&str, std::time::Duration)>,
    messages: usize,
    commands: usize,
) -> [String; 2] {
    [
        match running {
            Some((what, age)) => format!("running: {what} for {} s", age.as_secs()),
            None => "running: nothing".to_owned(),
        },
        format!("queued: {messages} message(s), {commands} command(s)"),
    ]
}
