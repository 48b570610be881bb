//! Subagents: the turn behind the `subagent` tool ([`crate::tools::subagent`]).
//!
//! A subagent runs the same bounded model loop as any turn (`BUB_MAX_STEPS`), in a session of
//! its own — `subagent-<random>`, a tape of its own, linked from the parent's tape by
//! `subagent.start` and `subagent.done` events — with the parent's sender, role and bounds and
//! at most the parent's tools ([`crate::access::Policy::for_subagent`]; never `subagent`: depth
//! 1). Its model calls count against the parent session's budget. It runs inside the parent's
//! tool call, so `/stop` of the parent's turn stops it too.
//!
//! Invariants: at most `BUB_MAX_SUBAGENTS` run in the process and [`PER_SESSION`] per parent
//! session; one over either bound is refused at once, never queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::sync::Semaphore;

use super::config::TurnConfig;
use super::models::Models;
use super::router::Router;
use super::runner::{LoopMemory, ModelLoop};
use crate::chat::SessionId;
use crate::tape::Event;
use crate::tools::subagent::{Delegate, Task};
use crate::tools::{SessionCtx, ToolContext, ToolError};

/// Subagents one session may run at once.
pub(crate) const PER_SESSION: usize = 2;

/// What the subagent's task is introduced with (it does not see the parent's conversation).
const INTRO: &str = "[You are a subagent: another agent gave you this task. Do it with your \
tools and answer with the result it needs; your answer goes back to it, not to a person.]";

/// The process's subagents.
pub(crate) struct Subagents {
    config: Arc<TurnConfig>,
    models: Arc<Models>,
    running: Arc<Semaphore>,
    per_session: Arc<Mutex<HashMap<String, usize>>>,
}

impl Subagents {
    pub(crate) fn new(config: Arc<TurnConfig>, models: Arc<Models>, max: usize) -> Self {
        Self {
            config,
            models,
            running: Arc::new(Semaphore::new(max)),
            per_session: Arc::default(),
        }
    }
}

/// One of a session's [`PER_SESSION`] places, given back when dropped.
struct Place {
    sessions: Arc<Mutex<HashMap<String, usize>>>,
    session: String,
}

impl Place {
    fn take(sessions: &Arc<Mutex<HashMap<String, usize>>>, session: &str) -> Option<Self> {
        let mut map = sessions.lock().unwrap_or_else(|e| e.into_inner());
        let count = map.entry(session.to_owned()).or_default();
        if *count >= PER_SESSION {
            return None;
        }
        *count += 1;
        Some(Self {
            sessions: sessions.clone(),
            session: session.to_owned(),
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut map = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = map.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.session);
            }
        }
    }
}

#[async_trait::async_trait]
impl Delegate for Subagents {
    async fn delegate(&self, parent: &ToolContext, task: Task) -> Result<String, ToolError> {
        let Ok(_running) = self.running.clone().try_acquire_owned() else {
            return Err(ToolError::Refused(
                "every subagent place is taken (BUB_MAX_SUBAGENTS): do the task yourself or \
                 try later"
                    .into(),
            ));
        };
        let Some(_place) = Place::take(&self.per_session, parent.session_id()) else {
            return Err(ToolError::Refused(format!(
                "{PER_SESSION} subagents run for this session already"
            )));
        };
        let model = match &task.model {
            // Choosing a model chooses the bill: owners only, like `,model`.
            Some(_) if parent.turn.policy.role == crate::access::Role::Guest => {
                return Err(ToolError::Refused(
                    "a guest's subagent runs on the chat's model (`model` is for owners)".into(),
                ));
            }
            Some(raw) => Some(
                parent
                    .process
                    .models
                    .parse_model("model", raw)
                    .map_err(|e| ToolError::invalid(e.message))?,
            ),
            None => parent.session.model(),
        };
        let policy = parent.turn.policy.for_subagent(task.tools.as_deref());
        let id = format!(
            "subagent-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let session = open(parent, &id).await?;
        session.set_model(model.clone());
        let ctx = ToolContext::for_subagent(parent, Arc::new(session), policy);
        for skill in task.skills.iter().flatten() {
            ctx.expanded().skill(skill);
        }
        let started = json!({"id": id, "task": task.task, "tools": task.tools});
        parent.tape().event(Event::SubagentStart, started).await;
        tracing::info!(parent = parent.session_id(), subagent = %id, "subagent.start");

        let bootstrapped = ctx.tape().run(|t| t.ensure_bootstrap()).await;
        let chain = self
            .models
            .chain(model.as_ref().unwrap_or(&parent.process.models.model));
        let llm = match (&chain, &bootstrapped) {
            (Ok(chain), Ok(_)) => Ok(chain.as_ref()),
            (Err(e), _) => Err(e.as_str()),
            (_, Err(_)) => Err("its tape could not be written"),
        };
        let router = Router::new(ctx.clone());
        let mut memory = LoopMemory::default();
        let prompt = format!("{INTRO}\n\n{}", task.task.trim());
        let outcome = ModelLoop::new(llm, &ctx, &router, &mut memory, self.config.clone())
            .run(&prompt)
            .await;
        let error = outcome.error.as_ref().map(ToString::to_string);
        let done = json!({"id": id, "steps": outcome.steps, "error": error});
        ctx.tape().event(Event::LoopResult, done.clone()).await;
        parent.tape().event(Event::SubagentDone, done).await;
        match (error, outcome.visible_text.trim()) {
            (Some(error), _) => Err(ToolError::new(format!("the subagent failed: {error}"))),
            (None, "") => Err(ToolError::new("the subagent gave no answer")),
            (None, answer) => Ok(answer.to_owned()),
        }
    }
}

/// The subagent's session `id` in the parent's workspace (its tape opened on the blocking pool).
async fn open(parent: &ToolContext, id: &str) -> Result<SessionCtx, ToolError> {
    let (process, workspace) = (parent.process.clone(), parent.workspace().to_path_buf());
    let id = SessionId::from(id);
    let opened = tokio::task::spawn_blocking(move || SessionCtx::open(&process, &workspace, &id))
        .await
        .map_err(|e| ToolError::new(format!("the subagent could not start: {e}")))?;
    opened.map_err(|e| ToolError::new(format!("the subagent could not start: {e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_has_two_places_given_back_when_dropped() {
        let sessions = Arc::default();
        let first = Place::take(&sessions, "telegram:1").unwrap();
        let _second = Place::take(&sessions, "telegram:1").unwrap();
        assert!(Place::take(&sessions, "telegram:1").is_none(), "a third");
        assert!(
            Place::take(&sessions, "telegram:2").is_some(),
            "per session"
        );
        drop(first);
        assert!(Place::take(&sessions, "telegram:1").is_some(), "given back");
    }
}
