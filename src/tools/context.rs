//! What a tool call can see, split by who owns it:
//!
//! * [`ProcessCtx`] — the process: the tool registry, the outbox (channel clients), the access
//!   gate, the secret redactor, the `bash` command limits, the usage ledger, and the settings
//!   tools and turns read, each converted once from `Settings` (which no tool sees whole). One
//!   per process, shared by every session and every workspace's runtime.
//! * [`SessionCtx`] — one session: its id, workspace, tape, expanded tool/skill details and the
//!   model it was switched to.
//! * [`TurnCtx`] — one turn: who asked ([`Authority`]), the [`Policy`] it runs under (by role,
//!   and whether the turn is a scheduled run), whether it already answered its own chat, the
//!   ledger its sends are recorded on, and who watches it run (a live answer, a
//!   [`ToolObserver`] of its tool calls).
//!
//! A [`ToolContext`] is the three together; the registry checks the turn's policy before any
//! tool runs, so the turn's authority is explicit in every call.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::access::{Access, Authority, Policy, Role, TurnOrigin};
use crate::chat::SessionId;
use crate::config::{Model, ModelConfig, Settings};
use crate::delivery::{Outbox, SendLedger};
use crate::redact::Redactor;
use crate::skills::SkillRoots;
use crate::tape::SharedTape;
use crate::tools::expansion::Expanded;
use crate::tools::model::SessionModels;

use super::Registry;
use super::shell::CommandLimits;
use super::web::WebConfig;

/// What the process owns.
pub struct ProcessCtx {
    pub registry: Arc<Registry>,
    /// The MCP servers of `mcp.json` (started on first use).
    pub mcp: Arc<super::mcp::Mcp>,
    /// How the process reaches chats outside a turn's own delivery (`message.send`, jobs).
    pub outbox: Arc<Outbox>,
    pub access: Arc<Access>,
    pub redactor: Arc<Redactor>,
    /// How many `bash` commands may run at once, and their longest timeout (shared by every
    /// session and workspace of the process).
    pub commands: Arc<CommandLimits>,
    /// `bash background=true` commands, by session.
    pub background: Arc<super::shell::Background>,
    /// What the process's model calls used, and the daily budgets (one ledger per process,
    /// shared by every workspace's runtime).
    pub usage: Arc<crate::usage::Ledger>,
    /// What the model clients are built from: the default model, the fallbacks, keys, base
    /// URLs, the answer size and the timeout.
    pub(crate) models: Arc<ModelConfig>,
    /// `BUB_HOME`: tapes, memory, jobs, the models file.
    pub(crate) home: PathBuf,
    /// The user's home directory (`HOME`): the global skill roots, the sandbox's view of it.
    pub(crate) user_home: Option<PathBuf>,
    /// `BUB_DATABASE_URL`: the database shared state lives in (`None`: files in `home`).
    pub(crate) database: Option<Arc<crate::db::Database>>,
    /// `BUB_TAPE_NAME`: the prefix of tape file names.
    pub(crate) tape_name: String,
    /// The models sessions were switched to (`BUB_HOME/models.json`, read once).
    pub(crate) session_models: SessionModels,
    /// `--skills`: the skills turns see (empty: all).
    pub(crate) allowed_skills: Vec<String>,
    /// `BUB_MEMORY_ENABLED`: remembered entries are kept, shown and used.
    pub(crate) memory_enabled: bool,
    /// `BUB_FS_TIMEOUT_SECONDS`: the file work of one `fs.*` call.
    pub(crate) fs_timeout: Duration,
    /// `web.search`'s backend, `web.fetch`'s guard.
    pub(crate) web: WebConfig,
    /// The policies of owner and guest turns (and of a guest's scheduled run), built once from
    /// the settings.
    owner: Arc<Policy>,
    guest: Arc<Policy>,
    guest_scheduled: Arc<Policy>,
}

impl ProcessCtx {
    /// The process's memory: `BUB_HOME`'s files, or the replicas' database.
    pub(crate) fn memory(&self) -> crate::memory::Memory {
        let docs = crate::document::open(&self.home, self.database.as_ref());
        crate::memory::Memory::in_documents(docs)
    }

    /// The scheduled jobs: `BUB_HOME/jobs.json`, or the database's.
    pub(crate) fn jobs(&self) -> Arc<dyn crate::scheduler::JobStore> {
        crate::scheduler::store::open(&self.home, self.database.as_ref())
    }

    /// The process parts for `settings` and `registry`: access gate, outbox, redactor, limits,
    /// policies and each tool's settings, converted once. Nothing here keeps `settings`' own
    /// workspace: a session carries its workspace ([`SessionCtx::open`]), so runtimes of
    /// several workspaces share one `ProcessCtx`.
    pub(crate) fn new(settings: Arc<Settings>, registry: Registry) -> Self {
        let access = Arc::new(Access::new(&settings));
        let redactor = Arc::new(Redactor::from_settings(&settings));
        let mcp = Arc::new(super::mcp::Mcp::new(&settings, redactor.clone()));
        // The URL was checked when the settings loaded; never fall back to files, which other
        // replicas would not see.
        let database =
            (settings.database()).expect("BUB_DATABASE_URL was checked when the settings loaded");
        Self {
            owner: Arc::new(Policy::for_role(Role::Owner, &settings)),
            guest: Arc::new(Policy::for_role(Role::Guest, &settings)),
            guest_scheduled: Arc::new(Policy::for_turn(
                Role::Guest,
                TurnOrigin::Scheduled,
                &settings,
            )),
            commands: Arc::new(CommandLimits::from_settings(&settings)),
            background: Arc::new(super::shell::Background::new(
                settings.guest_background_commands as usize,
                redactor.clone(),
            )),
            redactor,
            usage: Arc::new(crate::usage::Ledger::new(
                crate::usage::open(&settings.home, &settings.prices, database.as_ref()),
                settings.prices.clone(),
                settings.budgets.clone(),
            )),
            models: Arc::new(ModelConfig::from_settings(&settings)),
            home: settings.home.clone(),
            user_home: settings.user_home.clone(),
            database,
            tape_name: settings.tape_name.clone(),
            session_models: SessionModels::new(&settings.home),
            allowed_skills: settings.allowed_skills.clone(),
            memory_enabled: settings.memory_enabled,
            fs_timeout: settings.fs_timeout,
            web: WebConfig::from_settings(&settings),
            registry: Arc::new(registry.with_mcp(mcp.clone())),
            mcp,
            outbox: Arc::new(Outbox::new(access.clone(), settings)),
            access,
        }
    }

    /// The policy of a turn run with `role`, started by `origin`.
    pub(crate) fn policy(&self, role: Role, origin: TurnOrigin) -> Arc<Policy> {
        match (role, origin) {
            (Role::Owner, _) => self.owner.clone(),
            (Role::Guest, TurnOrigin::Asked) => self.guest.clone(),
            (Role::Guest, TurnOrigin::Scheduled) => self.guest_scheduled.clone(),
        }
    }
}

/// What a session owns. The tape is an async store ([`SharedTape`]: a file's work on the
/// blocking pool); the expansion list is behind a std mutex never held across an `.await`.
pub struct SessionCtx {
    pub id: SessionId,
    pub workspace: PathBuf,
    pub tape: SharedTape,
    /// Tools and skills whose details the system prompt shows (bounded; `tape.reset` clears it).
    pub expanded: Mutex<Expanded>,
    /// The model this session was switched to (`,model`; read from `BUB_HOME/models.json`
    /// when the session opens); `None`: `BUB_MODEL`.
    model: Mutex<Option<Model>>,
}

impl SessionCtx {
    /// Opens the session's tape in `workspace` under the process's `BUB_HOME`. May read files
    /// (the first time): call it on the blocking pool, or try [`SessionCtx::open_known`] first.
    pub(crate) fn open(
        process: &ProcessCtx,
        workspace: &Path,
        id: &SessionId,
    ) -> anyhow::Result<Self> {
        let model = process.session_models.of(&process.models, id.as_str());
        Self::with_model(process, workspace, id, model)
    }

    /// [`SessionCtx::open`] when it reads no file — the process has read `models.json` and
    /// knows the workspace's tape key — so an async task may call it; `None` otherwise.
    pub(crate) fn open_known(
        process: &ProcessCtx,
        workspace: &Path,
        id: &SessionId,
    ) -> Option<anyhow::Result<Self>> {
        if !crate::tape::workspace_key_known(workspace) {
            return None;
        }
        let model = process
            .session_models
            .of_known(&process.models, id.as_str())?;
        Some(Self::with_model(process, workspace, id, model))
    }

    fn with_model(
        process: &ProcessCtx,
        workspace: &Path,
        id: &SessionId,
        model: Option<Model>,
    ) -> anyhow::Result<Self> {
        let home = &process.home;
        let tape = crate::tape::backend::open(
            home,
            process.database.as_ref(),
            workspace,
            &process.tape_name,
            id.as_str(),
        )?;
        Ok(Self {
            id: id.clone(),
            workspace: workspace.to_path_buf(),
            tape: SharedTape::new(tape),
            expanded: Mutex::default(),
            model: Mutex::new(model),
        })
    }

    /// The model this session was switched to (`None`: `BUB_MODEL`).
    pub(crate) fn model(&self) -> Option<Model> {
        self.model.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_model(&self, model: Option<Model>) {
        *self.model.lock().unwrap_or_else(|e| e.into_inner()) = model;
    }
}

/// What one turn owns.
pub struct TurnCtx {
    pub authority: Authority,
    pub policy: Arc<Policy>,
    /// What started the turn (an owner's scheduled run has the owner's policy, which does not
    /// tell).
    pub(crate) origin: TurnOrigin,
    /// The turn answered its own chat with `message.send`: the framework does not post the
    /// final answer again.
    pub answered: AtomicBool,
    /// Where the answer is shown as it is written (`BUB_STREAM=edits` in a chat that can edit
    /// messages); `None`: only the final answer is delivered.
    pub live: Option<crate::chat::LiveSender>,
    /// Where `message.send` records its sends (a daemon's chat turn); `None`: not recorded.
    pub sends: Option<SendLedger>,
    /// Who is told when a tool call the model made starts and ends (`bub chat`, `bub run -v`).
    pub observer: Option<ToolObserver>,
    /// A subagent's turn: the session of the turn that started it (its budget, its chat's).
    pub parent: Option<SessionId>,
    /// Who runs the subagents this turn starts (`None`: none here — a subagent's own turn,
    /// or `BUB_MAX_SUBAGENTS=0`).
    pub(crate) subagents: Option<Arc<dyn super::subagent::Delegate>>,
}

/// Where a chat turn's output goes while it runs, besides its final answer: the live message
/// that shows the answer as it is written, and the ledger its sends are recorded on.
#[derive(Default)]
pub struct TurnOutput {
    pub live: Option<crate::chat::LiveSender>,
    pub sends: Option<SendLedger>,
}

/// A tool call the model made, as a [`ToolObserver`] sees it. Its text is redacted (no secret
/// of Bub's) but not escaped: whoever prints it makes it safe for a terminal.
pub enum ToolEvent<'a> {
    /// The call is about to run: the tool (`fs.read`, or the name the model used when no tool
    /// has it) and its arguments as the model sent them (JSON text).
    Started { tool: &'a str, arguments: &'a str },
    /// The call ended after `elapsed`: its output, or the error the model is told.
    Finished {
        tool: &'a str,
        elapsed: Duration,
        result: Result<&'a str, &'a str>,
    },
}

/// What watches a turn's tool calls. Called on the turn's task between calls: it only prints.
pub type ToolObserver = Arc<dyn Fn(&ToolEvent<'_>) + Send + Sync>;

impl TurnCtx {
    /// A turn of `authority`, started by `origin`, under `policy`.
    fn new(authority: Authority, origin: TurnOrigin, policy: Arc<Policy>) -> Self {
        Self {
            policy,
            origin,
            authority,
            answered: AtomicBool::new(false),
            live: None,
            sends: None,
            observer: None,
            parent: None,
            subagents: None,
        }
    }
}

/// Everything a tool call can see.
#[derive(Clone)]
pub struct ToolContext {
    pub process: Arc<ProcessCtx>,
    pub session: Arc<SessionCtx>,
    pub turn: Arc<TurnCtx>,
}

impl ToolContext {
    /// A context for `authority`'s turn in `session`.
    pub(crate) fn new(
        process: Arc<ProcessCtx>,
        session: Arc<SessionCtx>,
        authority: Authority,
    ) -> Self {
        let output = TurnOutput::default();
        Self::with_live(
            process,
            session,
            authority,
            TurnOrigin::Asked,
            output,
            None,
            None,
        )
    }

    /// [`ToolContext::new`] for a turn started by `origin` whose answer is shown as it is
    /// written and sends are recorded (`output`), whose tool calls `observer` is told about, and
    /// whose subagents `subagents` runs.
    pub(crate) fn with_live(
        process: Arc<ProcessCtx>,
        session: Arc<SessionCtx>,
        authority: Authority,
        origin: TurnOrigin,
        output: TurnOutput,
        observer: Option<ToolObserver>,
        subagents: Option<Arc<dyn super::subagent::Delegate>>,
    ) -> Self {
        let policy = process.policy(authority.role, origin);
        let turn = TurnCtx {
            live: output.live,
            sends: output.sends,
            observer,
            subagents,
            ..TurnCtx::new(authority, origin, policy)
        };
        let turn = Arc::new(turn);
        Self {
            process,
            session,
            turn,
        }
    }

    /// The context of a subagent in its own `session`, for `authority` (its parent turn's
    /// sender) under `policy` (never more than the parent's), billed to the `parent` session.
    pub(crate) fn for_subagent(
        process: Arc<ProcessCtx>,
        session: Arc<SessionCtx>,
        authority: Authority,
        policy: Policy,
        parent: SessionId,
    ) -> Self {
        let turn = TurnCtx {
            parent: Some(parent),
            ..TurnCtx::new(authority, TurnOrigin::Scheduled, Arc::new(policy))
        };
        Self {
            process,
            session,
            turn: Arc::new(turn),
        }
    }

    /// The session of the chat this turn works for: the parent's for a subagent, else this
    /// one. Its budget and usage, its jobs and background commands are that chat's.
    pub(crate) fn chat_session(&self) -> &SessionId {
        self.turn.parent.as_ref().unwrap_or(&self.session.id)
    }

    /// The session whose budget and usage a model call counts against ([`Self::chat_session`]).
    pub(crate) fn billed_session(&self) -> &str {
        self.chat_session().as_str()
    }

    /// A self-contained context (its own process parts and session) — for tests and embedding.
    pub fn standalone(
        settings: Settings,
        registry: Registry,
        session_id: &str,
        authority: Authority,
    ) -> anyhow::Result<Self> {
        let workspace = settings.workspace.clone();
        let process = Arc::new(ProcessCtx::new(Arc::new(settings), registry));
        let session = Arc::new(SessionCtx::open(&process, &workspace, &session_id.into())?);
        Ok(Self::new(process, session, authority))
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.process.registry
    }

    /// The session's id as written (`telegram:42`, `cli`).
    pub(crate) fn session_id(&self) -> &str {
        self.session.id.as_str()
    }

    pub(crate) fn session(&self) -> &SessionId {
        &self.session.id
    }

    pub fn workspace(&self) -> &Path {
        &self.session.workspace
    }

    /// Where this session's skills are found: its workspace, the user's home, `--skills`.
    pub(crate) fn skill_roots(&self) -> SkillRoots {
        SkillRoots {
            workspace: self.session.workspace.clone(),
            user_home: self.process.user_home.clone(),
            allowed: self.process.allowed_skills.clone(),
        }
    }

    /// The session's tape.
    pub fn tape(&self) -> &SharedTape {
        &self.session.tape
    }

    pub(crate) fn expanded(&self) -> MutexGuard<'_, Expanded> {
        self.session.expanded.lock().expect("expanded lock")
    }

    /// The (channel, chat id) of this session when it is a chat (`telegram:42`).
    pub(crate) fn session_chat(&self) -> Option<(&str, &str)> {
        self.session.id.chat()
    }
}
