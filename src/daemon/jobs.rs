//! Scheduled jobs in the daemon: a fired job becomes mail for its session's actor, and runs
//! there as a turn like any other — the actor is the only place a daemon turn starts.
//!
//! * [`JobQueue`] is the scheduler's [`JobRunner`]: it makes a [`JobRun`] of the claimed run
//!   (the job's message introduced as a scheduled run, its creator's recorded rights) and hands
//!   it to the process's [`super::ChannelManager`], which journals it in the inbox **before**
//!   its turn and routes it to the session's actor, where it waits behind a running turn like
//!   a queued command. The scheduler learns how the run went when the actor is done with it.
//! * [`turn`] is the job's turn in the actor. The creator's rights are checked again when it
//!   starts ([`run`]): a creator who lost access stops their jobs, a demoted one runs them as
//!   a guest, a chat the allow-list no longer admits gets nothing (the turn does not run). A
//!   run refused by a budget is skipped that once and the chat is not told. The answer is
//!   recorded in the inbox and delivered through the same ledger as a chat's answer, part by
//!   part; a session without a chat (`cli`) keeps it on its tape. A `schedule.run` event on
//!   the session's tape says how it went ([`ran`]).
//! * A run interrupted by a crash or a restart resumes from the journal (the manager hands it
//!   to the actor again): once with a note, like a message; a recorded answer is delivered,
//!   not run again.
//!
//! A background subagent's run ([`JobRun::subagent`]) comes this way too, from the agent
//! ([`Launch`]), and so does the run that reports its answer to the parent session.
//!
//! Jobs of another workspace run in that workspace's runtime (its tapes); after a run the
//! session's tape handle is let go and that runtime is dropped once no job uses it: nothing per
//! job is kept between runs.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::courier::Courier;
use super::heartbeat;
use super::runner::TurnRunner;
use crate::access::Authority;
use crate::agent::{AgentRuntime, Launch, TurnInput, TurnRequest};
use crate::channels::{Channel, InboundSink, MessageId, Part};
use crate::delivery::{SendLedger, TurnError, TurnResult};
use crate::inbox::{Inbox, JobRun, Outcome};
use crate::scheduler::JobRunner;
use crate::scheduler::job::{Job, local_time};
use crate::tape::Event;
use crate::tools::TurnOutput;

/// How many fired runs may wait for the manager to take them (the scheduler waits beyond).
pub(crate) const JOB_QUEUE: usize = 64;

/// The note a run resumed after an interruption starts with.
const INTERRUPTED: &str =
    "[Bub restarted while running this job; the previous attempt was interrupted. Do it now.]";

/// A due run on its way to its session's actor, and who waits for its outcome (the
/// scheduler; nobody for a run resumed after a restart).
#[derive(Debug)]
pub(crate) struct ScheduledRun {
    pub(crate) run: JobRun,
    pub(crate) done: Option<oneshot::Sender<Result<(), String>>>,
}

/// The scheduler's way into the session actors: fired jobs are sent to the manager that made
/// it ([`super::ChannelManager::jobs`]).
#[derive(Clone)]
pub struct JobQueue {
    tx: mpsc::Sender<ScheduledRun>,
}

impl JobQueue {
    pub(crate) fn new(tx: mpsc::Sender<ScheduledRun>) -> Self {
        Self { tx }
    }

    /// Hands `run` to the session actors and waits for its outcome.
    pub(crate) async fn submit(&self, run: JobRun) -> Result<(), String> {
        let (done, outcome) = oneshot::channel();
        let scheduled = ScheduledRun {
            run,
            done: Some(done),
        };
        if self.tx.send(scheduled).await.is_err() {
            return Err("not run: the daemon is stopping".to_owned());
        }
        outcome.await.unwrap_or_else(|_| {
            Err("interrupted (stopped, or a restart resumes it from the inbox)".to_owned())
        })
    }
}

/// Background subagents and their reports take the scheduled runs' way.
#[async_trait]
impl Launch for JobQueue {
    fn try_launch(&self, run: JobRun) -> Result<(), String> {
        let scheduled = ScheduledRun { run, done: None };
        self.tx.try_send(scheduled).map_err(|e| {
            match e {
                mpsc::error::TrySendError::Full(_) => "the daemon is busy: try again shortly",
                mpsc::error::TrySendError::Closed(_) => "the daemon is stopping",
            }
            .to_owned()
        })
    }

    async fn launch(&self, run: JobRun) -> Result<(), String> {
        let scheduled = ScheduledRun { run, done: None };
        self.tx
            .send(scheduled)
            .await
            .map_err(|_| "the daemon is stopping".to_owned())
    }
}

#[async_trait]
impl JobRunner for JobQueue {
    async fn run(&self, job: Job, due: DateTime<Utc>) -> Result<(), String> {
        self.submit(JobRun {
            seq: 0,
            job: job.id.clone(),
            session: job.session.as_str().into(),
            workspace: job.workspace.clone(),
            due,
            prompt: scheduled_prompt(&job, due),
            creator: job.recorded_authority(),
            interrupted: false,
            deliver_to: None,
            subagent: None,
            reports: None,
        })
        .await
    }
}

/// A job's turn in its session's actor (after `started` was recorded): the turn with the
/// creator's rights checked again, the answer through the inbox's ledger, the `schedule.run`
/// record, and the outcome for the scheduler.
pub(super) async fn turn(
    scheduled: ScheduledRun,
    runner: Arc<dyn TurnRunner>,
    courier: Courier,
    inbox: Arc<Inbox>,
) {
    let ScheduledRun { run, done } = scheduled;
    let seqs = [run.seq];
    if run.subagent.is_some() {
        // Its answer goes on as a run of the parent session, whose record closes this one.
        if let Err(outcome) = runner.run_subagent(&run).await {
            inbox.done(&seqs, outcome).await;
        }
        if let Some(done) = done {
            let _ = done.send(Ok(()));
        }
        return;
    }
    // The turn's `message.send`s are on the ledger with the run, like a chat turn's.
    let output = TurnOutput {
        live: None,
        sends: SendLedger::new(inbox.clone(), &seqs),
    };
    let (record, status) = match runner.run_job(&run, output).await {
        Err(reason) => {
            tracing::warn!(job = %run.job, session = %run.session, reason = %reason, "schedule.refused");
            inbox.done(&seqs, Outcome::Refused).await;
            let record = json!({"job": run.job, "due": run.due, "refused": reason});
            (record, Err(format!("refused: {reason}")))
        }
        Ok(TurnResult {
            error: Some(TurnError::Budget(why)),
            ..
        }) => {
            // Skipped this once (the next run is planned as usual); the chat did not ask now,
            // so it is not told.
            tracing::warn!(job = %run.job, session = %run.session, "schedule.skipped.budget");
            inbox.done(&seqs, Outcome::Skipped).await;
            let record = json!({"job": run.job, "due": run.due, "skipped": why});
            (record, Err(format!("skipped: {why}")))
        }
        Ok(result) => {
            if let Some(error) = &result.error {
                courier.board.error(&run.session, &error.to_string());
            }
            let delivery = deliver(&run, &result, &courier, &inbox).await;
            let record = json!({
                "job": run.job,
                "due": run.due,
                "error": result.error,
                "delivered": delivery.is_ok(),
                "delivery": match &delivery { Ok(s) | Err(s) => s },
            });
            let status = match (result.error, delivery) {
                (Some(e), _) => Err(e.to_string()),
                (None, Err(e)) => Err(format!("delivery failed: {e}")),
                (None, Ok(_)) => Ok(()),
            };
            (record, status)
        }
    };
    runner.job_ran(&run, record).await;
    if let Some(done) = done {
        let _ = done.send(status);
    }
}

/// Delivers a job's answer to its session's chat through the inbox's ledger (recorded before
/// it is sent, each accepted part, then `done`); what happened, for the `schedule.run` record.
async fn deliver(
    run: &JobRun,
    result: &TurnResult,
    courier: &Courier,
    inbox: &Inbox,
) -> Result<String, String> {
    let text = result.reply_text();
    let empty = text.is_empty();
    let quiet = heartbeat::is_quiet(run, &text);
    let delivery = match run.delivery(text) {
        _ if empty || quiet => {
            inbox.done(&[run.seq], Outcome::Silent).await;
            return Ok("nothing to send".to_owned());
        }
        None => {
            inbox.done(&[run.seq], Outcome::Silent).await;
            return Ok("no channel for this session; the answer is on the tape".to_owned());
        }
        Some(delivery) => delivery,
    };
    inbox.answered(&delivery).await;
    courier.send_recorded(inbox, &delivery).await?;
    Ok(format!("sent to {}", run.session))
}

/// [`TurnRunner::run_job`] for the agent: the creator's rights checked again, then the turn as
/// a scheduled run ([`TurnRequest::scheduled`]: a guest's job cannot schedule more
/// jobs) in the runtime of the job's workspace.
pub(super) async fn run(
    agent: &AgentRuntime,
    run: &JobRun,
    output: TurnOutput,
) -> Result<TurnResult, String> {
    let who = authority(agent, run).await?;
    let other = agent.workspace_runtime(&run.workspace);
    let agent = other.as_deref().unwrap_or(agent);
    let prompt = if run.interrupted && !run.is_command() {
        format!("{INTERRUPTED}\n{}", run.prompt)
    } else {
        run.prompt.clone()
    };
    let request = TurnRequest::scheduled(run.session.clone(), TurnInput::text(prompt), who);
    Ok(agent.turn(request.with_output(output)).await)
}

/// [`TurnRunner::job_ran`] for the agent: the `schedule.run` event on the tape of the job's
/// workspace, then nothing of the run is kept.
pub(super) async fn ran(agent: &AgentRuntime, run: &JobRun, data: Value) {
    match agent.workspace_runtime(&run.workspace) {
        Some(other) => {
            other
                .append_event(&run.session, Event::ScheduleRun, data)
                .await
        }
        None => {
            agent
                .append_event(&run.session, Event::ScheduleRun, data)
                .await
        }
    }
    agent.release_job(&run.workspace, &run.session);
}

/// [`TurnRunner::run_subagent`] for the agent: a background subagent's run, with its
/// creator's rights checked again.
pub(super) async fn run_subagent(agent: &AgentRuntime, run: &JobRun) -> Result<(), Outcome> {
    let who = authority(agent, run).await;
    agent.run_subagent(run, who).await
}

/// The rights the run has now, or why it may not run: its creator must still be admitted and
/// its chat must still be served.
async fn authority(agent: &AgentRuntime, run: &JobRun) -> Result<Authority, String> {
    // `access.json` may be read; a failure refuses the run.
    let who = agent.access().reconfirm(&run.creator).await?;
    if let Some((channel, chat_id)) = run.chat()
        && let Ok(adapter) = agent.outbox().adapter(channel)
    {
        adapter
            .check_recipient(chat_id)
            .await
            .map_err(|e| format!("{e:#}"))?;
    }
    Ok(who)
}

/// The turn input of a fired job: the job's message, introduced as a scheduled run. A comma
/// command (`,bash …`) is run as is.
pub(crate) fn scheduled_prompt(job: &Job, due: DateTime<Utc>) -> String {
    if job.message.trim_start().starts_with(',') {
        return job.message.clone();
    }
    format!(
        "[Scheduled run of job {id} ({trigger}), due {due}. No one sent this now: it is a task \
         scheduled earlier in this session. Do it; your answer is delivered to this chat.]\n{message}",
        id = job.id,
        trigger = job.trigger,
        due = local_time(due),
        message = job.message,
    )
}

/// The channel of a session this process has no adapter for — no chat (`cli`), or a platform
/// without a token here: the job's turn runs, and a send fails saying why.
pub(super) struct Unserved {
    pub name: &'static str,
    pub why: String,
}

#[async_trait]
impl Channel for Unserved {
    fn name(&self) -> &'static str {
        self.name
    }

    async fn run(&self, _: InboundSink, _: CancellationToken) -> anyhow::Result<()> {
        Ok(())
    }

    async fn send_part(&self, _: &Part) -> anyhow::Result<Option<MessageId>> {
        anyhow::bail!("{}", self.why)
    }

    fn message_limit(&self) -> usize {
        usize::MAX
    }

    async fn check_recipient(&self, _: &str) -> anyhow::Result<()> {
        anyhow::bail!("{}", self.why)
    }
}

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
