//! What a fired job does in this process: one turn in the job's session (in-process, queued
//! behind any turn already running there), delivery of the answer to the session's chat
//! through its channel, and a `schedule.run` record on the session's tape.
//!
//! A job runs with the rights of its creator, re-checked when it fires: a creator who lost
//! access stops their jobs, a demoted one runs them as a guest, and a chat the allow-list no
//! longer admits gets nothing (the turn does not run). The turn is a scheduled run
//! ([`AgentRuntime::handle_scheduled`]): a guest's job cannot schedule more jobs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::access::{Authority, session_chat};
use crate::agent::AgentRuntime;
use crate::delivery::{Outbound, TurnError, render_output};
use crate::scheduler::JobRunner;
use crate::scheduler::job::{Job, local_time};

/// Runs jobs with the agent and delivers answers through its outbox (the running adapters in
/// `bub message`, send-only ones in `bub idle`).
pub struct AgentJobs {
    agent: Arc<AgentRuntime>,
    /// Runtimes for jobs created in another workspace than this process's (each workspace has
    /// its own tapes).
    others: Mutex<HashMap<PathBuf, Arc<AgentRuntime>>>,
}

impl AgentJobs {
    pub fn new(agent: Arc<AgentRuntime>) -> Self {
        Self {
            agent,
            others: Mutex::new(HashMap::new()),
        }
    }

    /// The runtime of the job's workspace: this process's for its own workspace.
    fn agent_for(&self, workspace: &std::path::Path) -> Arc<AgentRuntime> {
        if workspace == self.agent.settings().workspace || workspace.as_os_str().is_empty() {
            return self.agent.clone();
        }
        let mut others = self.others.lock().expect("runtimes lock");
        others
            .entry(workspace.to_path_buf())
            .or_insert_with(|| Arc::new(self.agent.for_workspace(workspace)))
            .clone()
    }

    /// After a run: the session's tape handle is let go (a chat's actor, if it has one, reopens
    /// it on its next message), and so is another workspace's runtime once nothing uses it — a
    /// process that only runs jobs keeps nothing per job between runs.
    fn release(&self, agent: &Arc<AgentRuntime>, session: &str) {
        agent.release_session(session);
        let mut others = self.others.lock().expect("runtimes lock");
        // Under the map's lock no new user can appear; a runtime held only by the map (and by
        // this call, for its own) is in no job's hands.
        others.retain(|_, other| {
            let idle_count = if Arc::ptr_eq(other, agent) { 2 } else { 1 };
            Arc::strong_count(other) > idle_count || other.open_sessions() > 0
        });
    }

    /// How many runtimes of other workspaces are kept (for tests).
    #[cfg(test)]
    pub(crate) fn other_runtimes(&self) -> usize {
        self.others.lock().expect("runtimes lock").len()
    }

    /// The rights the job runs with now, or why it may not run: its creator must still be
    /// admitted and its chat must still be served.
    async fn authority(&self, job: &Job) -> Result<Authority, String> {
        let who = self.agent.access().reconfirm(&job.recorded_authority())?;
        if let Some((channel, chat_id)) = session_chat(&job.session)
            && let Ok(adapter) = self.agent.outbox().adapter(self.agent.settings(), channel)
        {
            adapter
                .check_recipient(chat_id)
                .await
                .map_err(|e| format!("{e:#}"))?;
        }
        Ok(who)
    }
}

#[async_trait]
impl JobRunner for AgentJobs {
    async fn run(&self, job: Job, due: DateTime<Utc>) -> Result<(), String> {
        let agent = self.agent_for(&job.workspace);
        let who = match self.authority(&job).await {
            Ok(who) => who,
            Err(reason) => {
                tracing::warn!(job = %job.id, session = %job.session, reason = %reason, "schedule.refused");
                let record = json!({"job": job.id, "due": due, "refused": reason});
                agent
                    .append_event(&job.session, "schedule.run", record)
                    .await;
                self.release(&agent, &job.session);
                return Err(format!("refused: {reason}"));
            }
        };
        let result = agent
            .handle_scheduled(&job.session, &scheduled_prompt(&job, due), &who)
            .await;
        if let Some(TurnError::Budget(why)) = &result.error {
            // Skipped this once (the next run is planned as usual); the chat did not ask now,
            // so it is not told.
            tracing::warn!(job = %job.id, session = %job.session, "schedule.skipped.budget");
            let record = json!({"job": job.id, "due": due, "skipped": why});
            agent
                .append_event(&job.session, "schedule.run", record)
                .await;
            self.release(&agent, &job.session);
            return Err(format!("skipped: {why}"));
        }
        let text = render_output(&result, agent.settings().proactive_response);
        let chat = session_chat(&job.session);
        let delivery = match chat {
            _ if text.is_empty() => Ok("nothing to send".to_owned()),
            None => Ok("no channel for this session; the answer is on the tape".to_owned()),
            Some((channel, chat_id)) => {
                let out = Outbound {
                    chat_id: chat_id.to_owned(),
                    text,
                    reply_to: None,
                    file: None,
                    edit: None,
                };
                let outbox = self.agent.outbox();
                match outbox.send(self.agent.settings(), channel, &out).await {
                    Ok(()) => Ok(format!("sent to {}", job.session)),
                    Err(e) => Err(format!("{e:#}")),
                }
            }
        };
        let record = json!({
            "job": job.id,
            "due": due,
            "error": result.error,
            "delivered": delivery.is_ok(),
            "delivery": match &delivery { Ok(s) | Err(s) => s },
        });
        agent
            .append_event(&job.session, "schedule.run", record)
            .await;
        self.release(&agent, &job.session);
        match (result.error, delivery) {
            (Some(e), _) => Err(e.to_string()),
            (None, Err(e)) => Err(format!("delivery failed: {e}")),
            (None, Ok(_)) => Ok(()),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::scheduler::job::Trigger;

    fn job(session: &str, workspace: &std::path::Path) -> Job {
        let now = Utc::now();
        Job {
            id: "0badf00d".into(),
            session: session.into(),
            message: ",tape.info".into(),
            workspace: workspace.to_path_buf(),
            trigger: Trigger::Once { at: now },
            created: now,
            next_run: None,
            last_run: None,
            last_status: None,
            creator: Some(Authority::terminal()),
        }
    }

    #[tokio::test]
    async fn a_job_keeps_no_session_or_runtime_after_its_run() {
        let dir = tempfile::tempdir().unwrap();
        let (ws, other) = (dir.path().join("ws"), dir.path().join("other"));
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let settings = Settings::with_defaults(dir.path().join("home"), ws.clone());
        let agent = Arc::new(AgentRuntime::new(settings, Vec::new()));
        let jobs = AgentJobs::new(agent.clone());

        for (session, workspace) in [("cli", &ws), ("cli:2", &other), ("cli", &other)] {
            jobs.run(job(session, workspace), Utc::now()).await.unwrap();
            assert_eq!(agent.open_sessions(), 0, "{session} in {workspace:?}");
            assert_eq!(jobs.other_runtimes(), 0, "{session} in {workspace:?}");
        }
        // The runs are on the tapes of their workspaces all the same.
        let tapes: Vec<_> = std::fs::read_dir(dir.path().join("home/tapes"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect();
        assert_eq!(tapes.len(), 3, "one tape per (workspace, session)");
        assert!(tapes.iter().all(|t| t.contains("schedule.run")));
    }
}
