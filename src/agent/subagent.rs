//! Subagents: the turn behind the `subagent` tool ([`crate::tools::subagent`]).
//!
//! A subagent runs the same bounded model loop as any turn (`BUB_MAX_STEPS`), in a session of
//! its own — `subagent-<random>`, a tape of its own, linked from the parent's tape by
//! `subagent.start` and `subagent.done` events — with the parent's sender, role and bounds and
//! at most the parent's tools ([`crate::access::Policy::for_subagent`]; never `subagent`: depth
//! 1). Its model calls count against the parent session's budget.
//!
//! * **Blocking** (the default): it runs inside the parent's tool call, so `/stop` of the
//!   parent's turn stops it too, and its answer is the tool result.
//! * **Background** (only where a daemon runs one: `bub message`, `bub idle`): the tool call
//!   hands a [`JobRun`] to the daemon's queue ([`Launch`]) and returns the subagent's id. The
//!   daemon journals the run and runs it in the subagent's session actor like a scheduled run,
//!   with its creator's rights checked again ([`AgentRuntime::run_subagent`]); its answer (or
//!   its failure) becomes a run of the parent session ([`JobRun::reports`]) — a turn through
//!   the parent's actor whose answer goes to the chat on the delivery ledger — and journaling
//!   that run closes the subagent's. A restart resumes an interrupted subagent once, like a
//!   job. `/stop` in the parent's chat stops its background subagents (owners any, a guest
//!   those they started); a stopped one reports nothing.
//!
//! Invariants: at most `BUB_MAX_SUBAGENTS` run in the process and [`PER_SESSION`] per parent
//! session, blocking and background together; one over either bound is refused at once, never
//! queued (one resumed after a restart runs even when none is free).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::AgentRuntime;
use super::TurnRequest;
use super::config::TurnConfig;
use super::models::Models;
use crate::access::{Authority, Role, TurnOrigin};
use crate::chat::SessionId;
use crate::config::Model;
use crate::inbox::{JobRun, Outcome, Subtask};
use crate::tape::Event;
use crate::tools::subagent::{Delegate, Task};
use crate::tools::{ProcessCtx, SessionCtx, ToolContext, ToolError};

/// Subagents one session may run at once.
pub(crate) const PER_SESSION: usize = 2;

/// What the subagent's task is introduced with (it does not see the parent's conversation).
const INTRO: &str = "[You are a subagent: another agent gave you this task. Do it with your \
tools and answer with the result it needs; your answer goes back to it, not to a person.]";

/// What a background subagent resumed after a restart is told.
const RESUMED: &str = "[Bub restarted while you worked on this task; what you did before is \
above. Finish it now.]";

/// Where background subagents and their reports go: the daemon's queue of runs, which
/// journals each and hands it to its session's actor.
#[async_trait::async_trait]
pub trait Launch: Send + Sync {
    /// Hands `run` over if there is room now (a tool call does not wait for the daemon).
    fn try_launch(&self, run: JobRun) -> Result<(), String>;
    /// Hands `run` over, waiting for room.
    async fn launch(&self, run: JobRun) -> Result<(), String>;
}

/// The process's subagents.
pub(crate) struct Subagents {
    config: Arc<TurnConfig>,
    models: Arc<Models>,
    running: Arc<Semaphore>,
    per_session: Places,
    /// Background subagents started or resumed and not finished, by id.
    children: Mutex<HashMap<String, Child>>,
    /// The daemon's queue; unset: no background subagents in this process.
    launcher: OnceLock<Arc<dyn Launch>>,
}

/// Subagents running per parent session.
type Places = Arc<Mutex<HashMap<SessionId, usize>>>;

/// A background subagent: whose it is, and how to stop it.
struct Child {
    parent: SessionId,
    creator: Authority,
    stop: CancellationToken,
    since: std::time::Instant,
    _slot: Option<Slot>,
}

/// A running subagent's share of the bounds, given back when dropped.
struct Slot {
    _running: OwnedSemaphorePermit,
    _place: Place,
}

impl Subagents {
    pub(crate) fn new(config: Arc<TurnConfig>, models: Arc<Models>, max: usize) -> Self {
        Self {
            config,
            models,
            running: Arc::new(Semaphore::new(max)),
            per_session: Arc::default(),
            children: Mutex::default(),
            launcher: OnceLock::new(),
        }
    }

    /// Makes background subagents possible: their runs go to `launcher`.
    pub(crate) fn launch_with(&self, launcher: Arc<dyn Launch>) {
        let _ = self.launcher.set(launcher);
    }

    /// A place for a subagent of `parent`, or why there is none.
    fn slot(&self, parent: &SessionId) -> Result<Slot, ToolError> {
        let Ok(running) = self.running.clone().try_acquire_owned() else {
            return Err(ToolError::Refused(
                "every subagent place is taken (BUB_MAX_SUBAGENTS): do the task yourself or \
                 try later"
                    .into(),
            ));
        };
        let Some(place) = Place::take(&self.per_session, parent) else {
            return Err(ToolError::Refused(format!(
                "{PER_SESSION} subagents run for this session already"
            )));
        };
        Ok(Slot {
            _running: running,
            _place: place,
        })
    }

    fn children(&self) -> std::sync::MutexGuard<'_, HashMap<String, Child>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stop token of background subagent `id`, registering it (with a place if one is
    /// free) when it runs again after a restart.
    fn adopt(&self, id: &str, parent: &SessionId, creator: &Authority) -> CancellationToken {
        if let Some(child) = self.children().get(id) {
            return child.stop.clone();
        }
        let child = Child {
            parent: parent.clone(),
            creator: creator.clone(),
            stop: CancellationToken::new(),
            since: std::time::Instant::now(),
            _slot: self.slot(parent).ok(),
        };
        let stop = child.stop.clone();
        self.children().insert(id.to_owned(), child);
        stop
    }

    /// Stops the background subagents of `parent` that `who` may stop (an owner all, a guest
    /// those their own turns started); how many.
    fn stop(&self, parent: &SessionId, who: &Authority) -> usize {
        let children = self.children();
        let mine = children.values().filter(|c| {
            &c.parent == parent
                && !c.stop.is_cancelled()
                && (who.role == Role::Owner
                    || who.senders.iter().any(|s| c.creator.senders.contains(s)))
        });
        mine.map(|c| c.stop.cancel()).count()
    }

    /// `,status` lines: the background subagents of `parent`.
    fn describe(&self, parent: &SessionId) -> Vec<String> {
        let children = self.children();
        let mut lines: Vec<String> = children
            .iter()
            .filter(|(_, c)| &c.parent == parent)
            .map(|(id, c)| {
                let age = crate::time::human_duration(c.since.elapsed());
                format!("  {id}: running for {age}")
            })
            .collect();
        if !lines.is_empty() {
            lines.sort();
            lines.insert(0, format!("background subagents ({}):", lines.len()));
        }
        lines
    }

    /// Starts a background subagent of `parent`'s turn (already given its `slot`).
    async fn start(
        &self,
        parent: &ToolContext,
        task: Task,
        model: Option<Model>,
        slot: Slot,
    ) -> Result<String, ToolError> {
        let Some(launcher) = self.launcher.get() else {
            return Err(ToolError::Refused(
                "background subagents run only in the daemon (`bub message`, `bub idle`): \
                 run it without `background`"
                    .into(),
            ));
        };
        let id = new_id();
        let run = JobRun {
            seq: 0,
            job: id.clone(),
            session: id.as_str().into(),
            workspace: parent.workspace().to_path_buf(),
            due: Utc::now(),
            prompt: task.task.trim().to_owned(),
            creator: parent.turn.authority.clone(),
            interrupted: false,
            deliver_to: None,
            subagent: Some(Subtask {
                parent: parent.session.id.clone(),
                tools: task.tools.clone(),
                skills: task.skills.unwrap_or_default(),
                model: model.map(|m| m.to_string()),
            }),
            reports: None,
        };
        let child = Child {
            parent: parent.session.id.clone(),
            creator: parent.turn.authority.clone(),
            stop: CancellationToken::new(),
            since: std::time::Instant::now(),
            _slot: Some(slot),
        };
        self.children().insert(id.clone(), child);
        let started = json!({"id": id, "task": task.task, "tools": task.tools, "background": true});
        parent.tape().event(Event::SubagentStart, started).await;
        if let Err(e) = launcher.try_launch(run) {
            self.children().remove(&id);
            let done = json!({"id": id, "error": e});
            parent.tape().event(Event::SubagentDone, done).await;
            return Err(ToolError::new(format!("the subagent could not start: {e}")));
        }
        tracing::info!(parent = parent.session_id(), subagent = %id, "subagent.start");
        Ok(format!(
            "{id} started in the background. Its answer comes to this chat as a new message \
             when it is done: do not wait for it."
        ))
    }

    /// Runs the subagent's turn in `ctx` (its own session, on the model it was given): what
    /// the parent's `subagent.done` event records, and the answer or why there is none.
    async fn work(&self, ctx: &ToolContext, prompt: &str) -> (Value, Result<String, String>) {
        let builtin = super::turn::Builtin {
            config: &self.config,
            models: &self.models,
            runtime: None,
        };
        let request = TurnRequest::subagent(ctx.clone(), prompt.to_owned());
        let result = super::turn::process(&[&builtin], request).await;
        let error = result.error.as_ref().map(ToString::to_string);
        let done = json!({"id": ctx.session_id(), "steps": result.steps, "error": error});
        let answer = match (error, result.assistant_output.trim()) {
            (Some(error), _) => Err(format!("the subagent failed: {error}")),
            (None, "") => Err("the subagent gave no answer".to_owned()),
            (None, answer) => Ok(answer.to_owned()),
        };
        (done, answer)
    }
}

#[async_trait::async_trait]
impl Delegate for Subagents {
    async fn delegate(&self, parent: &ToolContext, task: Task) -> Result<String, ToolError> {
        let slot = self.slot(&parent.session.id)?;
        let model = chosen_model(parent, &task)?;
        if task.background == Some(true) {
            return self.start(parent, task, model, slot).await;
        }
        let policy = parent.turn.policy.for_subagent(task.tools.as_deref());
        let id = new_id();
        let workspace = parent.workspace().to_path_buf();
        let session = open(&parent.process, &workspace, &id).await?;
        session.set_model(model.clone());
        let ctx = ToolContext::for_subagent(
            parent.process.clone(),
            Arc::new(session),
            parent.turn.authority.clone(),
            policy,
            parent.session.id.clone(),
        );
        for skill in task.skills.iter().flatten() {
            ctx.expanded().skill(skill);
        }
        let started = json!({"id": id, "task": task.task, "tools": task.tools});
        parent.tape().event(Event::SubagentStart, started).await;
        tracing::info!(parent = parent.session_id(), subagent = %id, "subagent.start");
        let prompt = format!("{INTRO}\n\n{}", task.task.trim());
        let (done, answer) = self.work(&ctx, &prompt).await;
        parent.tape().event(Event::SubagentDone, done).await;
        drop(slot);
        answer.map_err(ToolError::new)
    }
}

impl AgentRuntime {
    /// Lets this process's turns start background subagents, whose runs go to `launcher`
    /// (the daemon's queue).
    pub fn launch_with(&self, launcher: Arc<dyn Launch>) {
        if let Some(subagents) = &self.subagents {
            subagents.launch_with(launcher);
        }
    }

    /// `,status` lines about the background subagents of `parent`.
    pub(crate) fn describe_subagents(&self, parent: &SessionId) -> Vec<String> {
        self.subagents
            .as_ref()
            .map_or_else(Vec::new, |s| s.describe(parent))
    }

    /// `/stop` in `parent`'s chat by `who`: stops the background subagents they may stop;
    /// how many.
    pub(crate) fn stop_subagents(&self, parent: &SessionId, who: &Authority) -> usize {
        self.subagents.as_ref().map_or(0, |s| s.stop(parent, who))
    }

    /// Ends the background commands of `session`'s chat that `who` started (`own`, `/stop`)
    /// or may end (`/new`); how many.
    pub(crate) fn stop_commands(&self, session: &SessionId, who: &Authority, own: bool) -> usize {
        self.process.background.stop_in(session, who, own)
    }

    /// A background subagent's run (`run.subagent`) in its session's actor, for its creator
    /// (`who`: the rights they have now, or why they may not run it). Its answer is handed to
    /// the daemon as a run of the parent session, whose journal record closes this one: `Ok`.
    /// `Err` is how this run ended without an answer (stopped, refused).
    pub(crate) async fn run_subagent(
        &self,
        run: &JobRun,
        who: Result<Authority, String>,
    ) -> Result<(), Outcome> {
        let (Some(subagents), Some(task)) = (&self.subagents, &run.subagent) else {
            return Err(Outcome::Refused);
        };
        let stop = subagents.adopt(&run.job, &task.parent, &run.creator);
        let ended = match who {
            Err(why) => Err((json!({"id": run.job, "refused": why}), Outcome::Refused)),
            Ok(who) => tokio::select! {
                () = stop.cancelled() => {
                    Err((json!({"id": run.job, "stopped": true}), Outcome::Cancelled))
                }
                done = self.subagent_turn(subagents, run, task, who) => Ok(done),
            },
        };
        subagents.children().remove(&run.job);
        let (done, answer) = match ended {
            Ok((done, answer)) => (done, Ok(answer)),
            Err((done, outcome)) => (done, Err(outcome)),
        };
        self.parent_event(run, done).await;
        let answer = answer?;
        let Some(launcher) = subagents.launcher.get() else {
            return Err(Outcome::Failed);
        };
        // A daemon that stops meanwhile runs the subagent again after its restart.
        if let Err(e) = launcher.launch(report(run, task, answer)).await {
            tracing::warn!(subagent = %run.job, error = %e, "subagent.report.deferred");
        }
        Ok(())
    }

    /// The subagent's turn: its own session, the parent's rights narrowed to its tools.
    async fn subagent_turn(
        &self,
        subagents: &Subagents,
        run: &JobRun,
        task: &Subtask,
        who: Authority,
    ) -> (Value, Result<String, String>) {
        let policy = self
            .process
            .policy(who.role, TurnOrigin::Scheduled)
            .for_subagent(task.tools.as_deref());
        let workspace = match run.workspace.as_os_str().is_empty() {
            true => &self.workspace,
            false => &run.workspace,
        };
        let session = match open(&self.process, workspace, &run.job).await {
            Ok(session) => session,
            Err(e) => {
                return (
                    json!({"id": run.job, "error": e.to_string()}),
                    Err(e.to_string()),
                );
            }
        };
        // A guest cannot have chosen one; a model no longer known falls back to BUB_MODEL.
        let model = task
            .model
            .as_deref()
            .and_then(|m| self.process.models.parse_model("model", m).ok());
        session.set_model(model.clone());
        let ctx = ToolContext::for_subagent(
            self.process.clone(),
            Arc::new(session),
            who,
            policy,
            task.parent.clone(),
        );
        for skill in &task.skills {
            ctx.expanded().skill(skill);
        }
        let mut prompt = format!("{INTRO}\n\n{}", run.prompt);
        if run.interrupted {
            prompt = format!("{RESUMED}\n{prompt}");
        }
        subagents.work(&ctx, &prompt).await
    }

    /// Records `subagent.done` on the parent's tape.
    async fn parent_event(&self, run: &JobRun, done: Value) {
        let Some(task) = &run.subagent else { return };
        tracing::info!(parent = %task.parent, subagent = %run.job, "subagent.done");
        match self.workspace_runtime(&run.workspace) {
            Some(other) => {
                other
                    .append_event(&task.parent, Event::SubagentDone, done)
                    .await
            }
            None => {
                self.append_event(&task.parent, Event::SubagentDone, done)
                    .await
            }
        }
        self.release_job(&run.workspace, &task.parent);
    }
}

/// The run that brings a background subagent's answer (or failure) to its parent session.
fn report(run: &JobRun, task: &Subtask, answer: Result<String, String>) -> JobRun {
    let asked: String = run.prompt.chars().take(200).collect();
    // Who it worked for: a guest's subagent's answer is a guest's words to the owner's turns.
    let (id, who) = (&run.job, run.creator.describe());
    let prompt = match answer {
        Ok(answer) => format!(
            "[Background subagent {id} (for {who}) finished the task it was given: \"{asked}\". \
             Its answer follows; the chat has not seen it. Tell the chat what it needs to \
             know.]\n{answer}"
        ),
        Err(e) => format!(
            "[Background subagent {id} (for {who}) did not finish the task it was given: \
             \"{asked}\" — {e}. Tell the chat.]"
        ),
    };
    JobRun {
        seq: 0,
        job: run.job.clone(),
        session: task.parent.clone(),
        workspace: run.workspace.clone(),
        due: Utc::now(),
        prompt,
        creator: run.creator.clone(),
        interrupted: false,
        deliver_to: None,
        subagent: None,
        reports: (run.seq != 0).then_some(run.seq),
    }
}

/// The model a subagent runs on: the one asked for (owners only: it chooses the bill), else
/// the parent session's.
fn chosen_model(parent: &ToolContext, task: &Task) -> Result<Option<Model>, ToolError> {
    match &task.model {
        Some(_) if parent.turn.policy.role == Role::Guest => Err(ToolError::Refused(
            "a guest's subagent runs on the chat's model (`model` is for owners)".into(),
        )),
        Some(raw) => parent
            .process
            .models
            .parse_model("model", raw)
            .map(Some)
            .map_err(|e| ToolError::invalid(e.message)),
        None => Ok(parent.session.model()),
    }
}

/// A new subagent's id (its session's name).
fn new_id() -> String {
    format!(
        "subagent-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The subagent's session `id` in `workspace` (its tape opened on the blocking pool).
async fn open(
    process: &Arc<ProcessCtx>,
    workspace: &Path,
    id: &str,
) -> Result<SessionCtx, ToolError> {
    let (process, workspace) = (process.clone(), workspace.to_path_buf());
    let id = SessionId::from(id);
    let opened = tokio::task::spawn_blocking(move || SessionCtx::open(&process, &workspace, &id))
        .await
        .map_err(|e| ToolError::new(format!("the subagent could not start: {e}")))?;
    opened.map_err(|e| ToolError::new(format!("the subagent could not start: {e:#}")))
}

/// One of a session's [`PER_SESSION`] places, given back when dropped.
struct Place {
    sessions: Places,
    session: SessionId,
}

impl Place {
    fn take(sessions: &Places, session: &SessionId) -> Option<Self> {
        let mut map = sessions.lock().unwrap_or_else(|e| e.into_inner());
        let count = map.entry(session.clone()).or_default();
        if *count >= PER_SESSION {
            return None;
        }
        *count += 1;
        Some(Self {
            sessions: sessions.clone(),
            session: session.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Principal;

    fn guest(id: &str) -> Authority {
        let sender = Principal {
            channel: "telegram".into(),
            id: id.into(),
            name: None,
        };
        Authority {
            role: Role::Guest,
            senders: vec![sender],
        }
    }

    #[tokio::test]
    async fn a_guest_stops_only_the_background_subagents_started_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let settings =
            crate::config::Settings::with_defaults(dir.path().join("home"), dir.path().into());
        let agent = AgentRuntime::new(settings, Vec::new());
        let subagents = agent.subagents.clone().unwrap();
        let group = SessionId::from("telegram:-100");
        let owners = subagents.adopt("subagent-1", &group, &Authority::terminal());
        let guests = subagents.adopt("subagent-2", &group, &guest("5"));
        let elsewhere = subagents.adopt("subagent-3", &"telegram:5".into(), &guest("5"));
        assert_eq!(agent.describe_subagents(&group).len(), 3, "a title, two");

        assert_eq!(agent.stop_subagents(&group, &guest("6")), 0, "not theirs");
        assert_eq!(agent.stop_subagents(&group, &guest("5")), 1);
        assert!(guests.is_cancelled() && !owners.is_cancelled());
        assert_eq!(agent.stop_subagents(&group, &Authority::terminal()), 1);
        assert!(
            owners.is_cancelled() && !elsewhere.is_cancelled(),
            "this chat's only"
        );
    }

    #[test]
    fn a_session_has_two_places_given_back_when_dropped() {
        let sessions = Arc::default();
        let first = Place::take(&sessions, &"telegram:1".into()).unwrap();
        let _second = Place::take(&sessions, &"telegram:1".into()).unwrap();
        assert!(
            Place::take(&sessions, &"telegram:1".into()).is_none(),
            "a third"
        );
        assert!(
            Place::take(&sessions, &"telegram:2".into()).is_some(),
            "per session"
        );
        drop(first);
        assert!(
            Place::take(&sessions, &"telegram:1".into()).is_some(),
            "given back"
        );
    }
}
