//! One agent turn: route the input (comma command or natural language), run the model loop, and
//! record everything on the session's tape.
//!
//! Every turn is run for an explicit [`Authority`] (who asked, with which role); its tool
//! context carries that role's policy, which the registry enforces on every tool call.
//!
//! One turn at a time per session is not enforced here: it is the caller's rule, kept in one
//! place. In the daemon (`bub message`, `bub idle`) every turn — a chat's batch or command, a
//! scheduled job's run — starts in the session's actor (`daemon::session`), which runs one at a
//! time; `bub chat` and `bub run` are one caller in one process. So a session holds no turn
//! lock. What it keeps between turns is its tape handle (appends are serialised by the tape
//! itself, across processes by its file lock) and the model loop's [`LoopMemory`] — hints
//! (the hash of the last system prompt recorded, the provider's token scale, images refused) that
//! a turn copies out when it starts and stores back when it ends, under a std mutex held for
//! neither await. Were two turns of one session ever to overlap, the later store would win,
//! and the worst outcome is a system prompt recorded once more.

pub(crate) mod commands;
mod compact;
mod config;
pub(crate) mod inbound;
mod input;
mod learn;
mod models;
pub mod prompt;
mod request;
pub mod router;
pub(crate) mod runner;
mod spend;
mod stagnation;
mod subagent;
pub(crate) mod turn;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dashmap::DashMap;
use serde_json::json;

use crate::access::{Access, Authority};
use crate::chat::SessionId;
use crate::config::Settings;
use crate::delivery::Outbox;
use crate::tape::TapeInfo;
use crate::tape::{Event, Kind};
use crate::tools::{self, ProcessCtx, SessionCtx, ToolContext};
use config::TurnConfig;
use models::{Models, SharedChain};
use runner::LoopMemory;

pub use crate::delivery::{Reply, TurnError, TurnResult};
pub use input::{ChatBatch, TurnInput};
pub use subagent::Launch;
pub use turn::TurnRequest;

/// Per-session state: its tape, and what the model loop remembers between turns.
pub(crate) struct Session {
    state: Arc<SessionCtx>,
    /// Copied out when a turn starts, stored back when it ends (never held across an await).
    memory: std::sync::Mutex<LoopMemory>,
}

/// The agent of one process: the process parts (tools, outbox, access, redactor, the settings
/// they read), the turn settings, the model chains and the sessions of one workspace.
pub struct AgentRuntime {
    /// The loaded whole, for the runtime's callers (the daemon builds its channels from it);
    /// turns read `process` and `config`, converted from it once.
    settings: Arc<Settings>,
    process: Arc<ProcessCtx>,
    config: Arc<TurnConfig>,
    /// The workspace of this runtime's sessions (see [`AgentRuntime::for_workspace`]).
    workspace: PathBuf,
    models: Arc<Models>,
    sessions: DashMap<SessionId, Arc<Session>>,
    /// Runtimes of other workspaces, for scheduled jobs created there; each is dropped once no
    /// job uses it.
    workspaces: std::sync::Mutex<HashMap<PathBuf, Arc<AgentRuntime>>>,
    started: std::time::Instant,
    /// Work a turn leaves behind after its answer: learning calls, one at a time.
    background: Background,
    /// The process's subagents (`None`: `BUB_MAX_SUBAGENTS=0`).
    subagents: Option<Arc<subagent::Subagents>>,
}

/// The tasks turns leave behind (shared by the runtimes of one process), the lock that runs
/// them one at a time, and the bound on how many wait.
#[derive(Clone)]
struct Background {
    tasks: tokio_util::task::TaskTracker,
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
    pending: Arc<tokio::sync::Semaphore>,
}

/// The most learning calls that run or wait at once.
const MAX_PENDING_LEARNING: usize = 4;

impl Default for Background {
    fn default() -> Self {
        Self {
            tasks: Default::default(),
            one_at_a_time: Default::default(),
            pending: Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_LEARNING)),
        }
    }
}

impl AgentRuntime {
    /// Creates the runtime. A model client that cannot be built (no API key, say) is not an
    /// error here: comma commands still work and each model turn reports the reason.
    pub fn new(settings: Settings, allowed_tools: Vec<String>) -> Self {
        let registry = tools::builtin_registry(&allowed_tools);
        let settings = Arc::new(settings);
        let process = Arc::new(ProcessCtx::new(settings.clone(), registry));
        let config = Arc::new(TurnConfig::from_settings(&settings, &process.models));
        let models = Arc::new(Models::new(process.models.clone()));
        let subagents = (settings.max_subagents > 0).then(|| {
            let max = settings.max_subagents as usize;
            Arc::new(subagent::Subagents::new(
                config.clone(),
                models.clone(),
                max,
            ))
        });
        Self {
            subagents,
            config,
            models,
            workspace: settings.workspace.clone(),
            settings,
            process,
            sessions: DashMap::new(),
            workspaces: std::sync::Mutex::default(),
            started: std::time::Instant::now(),
            background: Background::default(),
        }
    }

    /// A runtime for another workspace (a scheduled job created there): its own sessions and
    /// tapes, everything else this process's — tools, outbox, access, model chains, background
    /// work, and the settings they were converted from. The workspace is the one value that
    /// differs, and it is the runtime's own (each session it opens carries it): no part of the
    /// process reads a workspace from `Settings` after start-up, so no second, changed
    /// `Settings` is made.
    pub(crate) fn for_workspace(&self, workspace: &Path) -> Self {
        Self {
            settings: self.settings.clone(),
            process: self.process.clone(),
            config: self.config.clone(),
            workspace: workspace.to_path_buf(),
            models: self.models.clone(),
            sessions: DashMap::new(),
            workspaces: std::sync::Mutex::default(),
            started: self.started,
            background: self.background.clone(),
            subagents: self.subagents.clone(),
        }
    }

    /// The runtime for a scheduled job created in `workspace`, kept until
    /// [`AgentRuntime::release_job`]; `None` for this runtime's own workspace (or none named).
    pub(crate) fn workspace_runtime(&self, workspace: &Path) -> Option<Arc<AgentRuntime>> {
        if workspace == self.workspace || workspace.as_os_str().is_empty() {
            return None;
        }
        let mut others = self.workspaces.lock().expect("workspaces lock");
        let other = others
            .entry(workspace.to_path_buf())
            .or_insert_with(|| Arc::new(self.for_workspace(workspace)));
        Some(other.clone())
    }

    /// After a scheduled run: its session's tape handle is let go (a chat's actor reopens it on
    /// its next turn), and so is another workspace's runtime once no job uses it — nothing per
    /// job is kept between runs.
    pub(crate) fn release_job(&self, workspace: &Path, session_id: &SessionId) {
        let Some(other) = self.workspace_runtime(workspace) else {
            return self.release_session(session_id);
        };
        other.release_session(session_id);
        let mut others = self.workspaces.lock().expect("workspaces lock");
        // Under the map's lock no new user can appear; a runtime held only by the map (and by
        // this call, for its own) is in no job's hands.
        others.retain(|_, runtime| {
            let idle_count = if Arc::ptr_eq(runtime, &other) { 2 } else { 1 };
            Arc::strong_count(runtime) > idle_count || runtime.open_sessions() > 0
        });
    }

    /// How many runtimes of other workspaces are kept (for tests).
    #[cfg(test)]
    pub(crate) fn other_runtimes(&self) -> usize {
        self.workspaces.lock().expect("workspaces lock").len()
    }

    /// Waits until the work turns left behind (learning calls) is done; `bub run` and the
    /// daemon call it before they exit.
    pub async fn settle(&self) {
        let tasks = &self.background.tasks;
        tasks.close();
        tasks.wait().await;
        tasks.reopen();
    }

    /// Stops what the process started besides turns: background commands and MCP servers (a
    /// stdio server's process group with it); the commands call it before they exit.
    pub async fn stop_children(&self) {
        self.process.background.stop_all();
        self.process.mcp.shutdown().await;
    }

    /// The process's background commands, for the operator (`bub status`, the console).
    pub fn background_commands(&self) -> Arc<dyn crate::status::Commands> {
        self.process.background.clone()
    }

    /// The settings the runtime was built from.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The process's way to any chat (`message.send`, scheduled runs); the daemon installs its
    /// running adapters here.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.process.outbox
    }

    /// Who may talk to this process's channels, and with which role.
    pub fn access(&self) -> &Arc<Access> {
        &self.process.access
    }

    /// The session's state, opened on first use. Opening reads files only the first time in
    /// the process (`models.json`, the workspace's path): then it runs on the blocking pool,
    /// outside the sessions lock.
    async fn session(&self, session_id: &SessionId) -> anyhow::Result<Arc<Session>> {
        if let Some(s) = self.sessions.get(session_id) {
            return Ok(s.clone());
        }
        let (process, workspace) = (self.process.clone(), self.workspace.clone());
        let id = session_id.clone();
        let state = match SessionCtx::open_known(&process, &workspace, &id) {
            Some(opened) => opened?,
            None => {
                tokio::task::spawn_blocking(move || SessionCtx::open(&process, &workspace, &id))
                    .await
                    .map_err(|e| anyhow::anyhow!("opening the session failed: {e}"))??
            }
        };
        // Another caller may have opened it meanwhile: one state per session.
        let session = self.sessions.entry(session_id.clone()).or_insert_with(|| {
            Arc::new(Session {
                state: Arc::new(state),
                memory: std::sync::Mutex::default(),
            })
        });
        Ok(session.clone())
    }

    /// Forgets an idle session (its tape handle); the next input reopens it. A session in use
    /// elsewhere (a running turn) is kept.
    pub(crate) fn release_session(&self, session_id: &SessionId) {
        self.sessions
            .remove_if(session_id, |_, s| Arc::strong_count(s) == 1);
    }

    /// How many sessions are open (for tests and benchmarks of eviction).
    pub(crate) fn open_sessions(&self) -> usize {
        self.sessions.len()
    }

    /// The tape summary of a session (for status lines).
    pub(crate) async fn tape_info(&self, session_id: &SessionId) -> anyhow::Result<TapeInfo> {
        let session = self.session(session_id).await?;
        session.state.tape.info().await
    }

    /// What the model answered on `session_id`'s tape after entry `seen` — by any process: a
    /// scheduled run or a subagent's report the daemon ran in this session — and the newest
    /// entry's id (`bub chat` shows the answers it did not ask for). A tape that was reset
    /// (ids below `seen`) starts again from its newest entry.
    pub(crate) async fn answers_since(
        &self,
        session_id: &SessionId,
        seen: u64,
    ) -> anyhow::Result<(u64, Vec<String>)> {
        let session = self.session(session_id).await?;
        let tape = &session.state.tape;
        let window = |from, kinds, limit| crate::tape::Window {
            from,
            before: None,
            kinds,
            limit,
        };
        let newest = tape.window(window(0, &Kind::WRITTEN, 1)).await?;
        let last = newest.last().map_or(0, |e| e.id);
        if last <= seen {
            return Ok((last, Vec::new()));
        }
        let messages = tape.window(window(seen + 1, &[Kind::Message], 50)).await?;
        let answers = messages
            .iter()
            .filter(|e| e.payload["role"] == "assistant")
            .filter_map(|e| e.payload["content"].as_str())
            .filter(|text| !text.trim().is_empty())
            .map(str::to_owned)
            .collect();
        Ok((last, answers))
    }

    /// The model a session's calls go to first: its own (`,model`), else `BUB_MODEL`.
    pub(crate) async fn session_model(&self, session_id: &SessionId) -> crate::config::Model {
        let own = match self.session(session_id).await {
            Ok(session) => session.state.model(),
            Err(_) => None,
        };
        own.unwrap_or_else(|| self.process.models.model.clone())
    }

    /// The command names of the tools (for completion).
    pub(crate) fn tool_names(&self) -> Vec<String> {
        self.process
            .registry
            .tools()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    /// Records an event on a session's tape outside a turn (`turn.interrupted`, `schedule.run`).
    pub async fn append_event(&self, session_id: &SessionId, name: Event, data: serde_json::Value) {
        match self.session(session_id).await {
            Ok(session) => session.state.tape.event(name, data).await,
            Err(e) => crate::tape::shared::append_failed(&Kind::Event, &e),
        }
    }

    /// `,new`: a handoff anchor named `new`, so the next context starts empty; the tape keeps
    /// everything before it.
    pub(crate) async fn fresh_context(
        &self,
        session_id: &SessionId,
        who: &Authority,
    ) -> anyhow::Result<()> {
        let session = self.session(session_id).await?;
        let summary = format!("Fresh context requested by {}.", who.describe());
        let tape = &session.state.tape;
        tape.ensure_bootstrap().await?;
        tape.handoff("new", Some(&summary), None).await
    }

    /// `,status` for `who`: the model, the tape since its last anchor, this chat's scheduled
    /// jobs and background work (others' commands only counted), the process's uptime and
    /// version. Reads the tape without waiting for a running turn.
    pub(crate) async fn status_text(&self, session_id: &SessionId, who: &Authority) -> String {
        let models = &self.process.models;
        let mut lines = vec![format!(
            "bub {} · up {}",
            env!("CARGO_PKG_VERSION"),
            crate::time::human_duration(self.started.elapsed())
        )];
        match self.session(session_id).await {
            Ok(session) => lines.push(tools::model::describe(
                models,
                session.state.model().as_ref(),
            )),
            Err(e) => lines.push(format!("model: {} ({e:#})", models.model)),
        }
        match self.tape_info(session_id).await {
            Ok(info) => lines.push(format!(
                "context: {} entries since anchor {}{}",
                info.entries_since_last_anchor,
                info.last_anchor.as_deref().unwrap_or("-"),
                info.last_token_usage
                    .map(|t| format!(", {t} tokens in the last request"))
                    .unwrap_or_default()
            )),
            Err(e) => lines.push(format!("context: unavailable ({e:#})")),
        }
        match self.process.jobs().list().await {
            Ok(jobs) => {
                let mine: Vec<String> = jobs
                    .iter()
                    .filter(|j| j.session == session_id.as_str())
                    .map(|j| j.row(false))
                    .collect();
                if mine.is_empty() {
                    lines.push("jobs: none".to_owned());
                } else {
                    lines.push(format!("jobs ({}):", mine.len()));
                    lines.extend(mine.into_iter().map(|row| format!("  {row}")));
                }
            }
            _ => lines.push("jobs: unavailable".to_owned()),
        }
        lines.extend(self.process.background.describe(session_id, who));
        lines.extend(self.describe_subagents(session_id));
        lines.join("\n")
    }

    /// Runs one turn of `request` through the stages ([`turn`]). The caller runs one turn of a
    /// session at a time (see the module docs).
    pub async fn turn(&self, request: TurnRequest) -> TurnResult {
        let builtin = turn::Builtin {
            config: &self.config,
            models: &self.models,
            runtime: Some(self),
        };
        turn::process(&[&builtin], request).await
    }

    /// Runs the learning call of a finished turn after the turn (its answer is not held up),
    /// one at a time per process; when [`MAX_PENDING_LEARNING`] already wait, this one is
    /// skipped (learning is a chance, not a promise).
    fn learn_later(&self, ctx: &ToolContext, chain: &SharedChain, finished: learn::Finished) {
        let Ok(llm) = chain.clone() else { return };
        let Ok(pending) = self.background.pending.clone().try_acquire_owned() else {
            tracing::warn!(session = ctx.session_id(), "skill.learn.skipped");
            return;
        };
        let (ctx, lock) = (ctx.clone(), self.background.one_at_a_time.clone());
        self.background.tasks.spawn(async move {
            let _one = lock.lock().await;
            learn::learn(&llm, &ctx, finished).await;
            drop(pending);
        });
    }
}

/// Keeps what the user's messages ask to be remembered (`remember: …`, `记住：…`) in the chat's
/// memory, before the turn runs (the model is not asked; the turn still runs): each line of
/// typed text, each chat message's text.
async fn remember_prefixed(ctx: &ToolContext, input: &TurnInput) {
    let texts: Vec<&str> = match input {
        TurnInput::Text(text) | TurnInput::Command(text) => text.lines().collect(),
        TurnInput::Task(_) => Vec::new(),
        TurnInput::Chat(batch) => batch
            .messages
            .iter()
            .filter_map(|m| match &m.content {
                crate::chat::Content::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect(),
    };
    let wanted: Vec<String> = texts
        .into_iter()
        .filter_map(crate::memory::remember_prefix)
        .map(str::to_owned)
        .collect();
    if wanted.is_empty() || !ctx.process.memory_enabled {
        return;
    }
    let memory = ctx.process.memory();
    let scope = crate::memory::Scope::Chat(ctx.session_id().to_owned());
    let by = crate::memory::Author::of(&ctx.turn.authority);
    let mut entries = Vec::new();
    for w in &wanted {
        match memory.remember(&scope, w, &by).await {
            Ok(entry) => entries.push(entry),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "memory.remember.error");
                return;
            }
        }
    }
    ctx.tape()
        .event(Event::MemoryRemembered, json!({"entries": entries}))
        .await;
}
