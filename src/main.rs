//! The `bub` command line: parses arguments, loads settings (exit code 2 on a configuration
//! error, before anything runs) and dispatches to the terminal chat, a one-shot turn, the
//! channel daemon, the scheduler (`idle`), the job list, or access management (`pair`,
//! `access`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use bub::access::{Authority, User};
use bub::agent::AgentRuntime;
use bub::channels::Inbound;
use bub::cli::admin::{
    self, AccessAction, JobsAction, MemoryAction, PairAction, SkillsAction, UsageError, print_out,
};
use bub::config::{LoadOptions, Overrides, Settings};
use bub::daemon::{ChannelManager, DAEMON_LOCK, Heartbeat, JobQueue, SessionConfig, http};
use bub::inbox::{Inbox, Resume};
use bub::logging::{self, LogTarget};
use bub::scheduler::Scheduler;
use bub::status::Board;
use bub::storage::PidLock;
use bub::terminal::safe_line;

/// Exit code for configuration and usage errors.
const EXIT_CONFIG: u8 = 2;
/// How often a standby `bub idle` tries to take the daemon lock.
const DAEMON_RETRY: std::time::Duration = std::time::Duration::from_secs(5);
/// Exit code when a run is interrupted by Ctrl-C (128 + SIGINT).
const EXIT_INTERRUPTED: u8 = 130;
/// How long the exit waits for blocking work still running (a file call stuck on a hung mount
/// is abandoned, not waited for).
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Bub: a tape-first AI agent for terminals and chat platforms.
///
/// Without a subcommand, `bub` starts the interactive chat.
#[derive(Parser, Debug)]
#[command(
    name = "bub",
    version,
    about,
    long_about = None,
    disable_help_subcommand = true,
    after_help = "Settings (BUB_MODEL, BUB_API_KEY, ...), every one with its default: bub help env"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Flags every command accepts (before or after the subcommand).
#[derive(Args, Debug, Clone)]
struct Common {
    /// Workspace directory (default: the current directory; `~` is expanded).
    #[arg(short = 'w', long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Model as `provider:model` (overrides BUB_MODEL).
    #[arg(long, global = true, value_name = "PROVIDER:MODEL")]
    model: Option<String>,
    /// Maximum tokens per model answer (overrides BUB_MAX_TOKENS).
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: Option<u32>,
    /// Session key: each session has its own tape and history.
    #[arg(
        long,
        global = true,
        env = "BUB_SESSION_ID",
        default_value = "cli",
        value_name = "ID"
    )]
    session_id: String,
    /// Extra TOML configuration file (above BUB_HOME/config.toml, below .env and environment).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Interactive terminal chat (the default).
    Chat,
    /// Run one turn and print the answer; exits 1 when the turn failed.
    Run {
        /// The input, treated exactly like one chat line (`,command` works).
        message: String,
        /// Allow only these tools (repeatable, comma-separated; `fs.read` or `fs_read`).
        #[arg(long, value_name = "NAMES")]
        tools: Vec<String>,
        /// Allow only these skills (repeatable, comma-separated).
        #[arg(long, value_name = "NAMES")]
        skills: Vec<String>,
        /// Show each tool call the model makes on stderr as it starts and ends.
        #[arg(short, long)]
        verbose: bool,
    },
    /// The channel daemon: serve Telegram and/or Discord (and scheduled jobs) until
    /// SIGINT/SIGTERM.
    Message,
    /// The scheduler alone, for autonomous containers: fires scheduled jobs and sends their
    /// answers to the chats (no polling), until SIGINT/SIGTERM.
    Idle,
    /// What the running `bub message` is doing: sessions, running turns, queues, scheduled jobs,
    /// the last errors. Exits 1 when no daemon runs for BUB_HOME.
    Status {
        /// Print the daemon's answer as JSON (without the jobs).
        #[arg(long)]
        json: bool,
        /// End the daemon's background command ID (and every process it started), whoever
        /// started it.
        #[arg(long, value_name = "ID")]
        kill: Option<u64>,
    },
    #[cfg(feature = "console")]
    /// The web console on BUB_CONSOLE_LISTEN (default 127.0.0.1:8787): sessions and their
    /// tapes, jobs, pairing, status and cost, memory. Log in with BUB_HOME/console.token.
    Console,
    /// Tokens and cost of the model calls of BUB_HOME (its usage ledger): per day and
    /// session, and in all, with the cache-hit rate and the cost of priced models.
    Usage {
        /// Only the days since: `7d` (seven days ago) or a date, `2026-11-01`.
        #[arg(long, value_name = "DAYS|DATE")]
        since: Option<String>,
        /// Print the rows and totals as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Scheduled jobs of every session in BUB_HOME.
    Jobs {
        #[command(subcommand)]
        action: JobsAction,
    },
    /// Send one message to a chat (Markdown rendered, split, retried); exits 1 when it failed.
    ///
    /// With `--id KEY` it is sent at most once per key: run again with the same key, a message
    /// sent before is not sent again (exit 0), one a failed or killed run began is sent from its
    /// first part not accepted. Keys are remembered 30 days in BUB_HOME/sends/.
    Send {
        /// `telegram` or `discord` (its token must be set; it need not be enabled).
        channel: String,
        /// The chat (Telegram chat id, Discord channel id).
        chat_id: String,
        /// The text (with `--file`, its caption); `-` reads it from stdin.
        #[arg(allow_hyphen_values = true, required_unless_present = "file")]
        text: Option<String>,
        /// Reply to this message id.
        #[arg(long, value_name = "ID")]
        reply_to: Option<String>,
        /// Send this file: an image as a photo, .ogg/.opus as a voice note, .mp3/.m4a as
        /// audio, anything else as a document (Telegram: at most 50 MB; Discord: 10 MB).
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
        /// Send it at most once for this key (e.g. `backup-2026-05-01`): safe to run again.
        #[arg(long, value_name = "KEY")]
        id: Option<String>,
    },
    /// The skills this workspace sees.
    Skills {
        #[command(subcommand)]
        action: SkillsAction,
    },
    /// What Bub remembers across sessions (`BUB_HOME/memory/`).
    Memory {
        #[command(subcommand)]
        action: MemoryAction,
    },
    /// Pairing: admit a user who asked for access from a private chat.
    Pair {
        #[command(subcommand)]
        action: PairAction,
    },
    /// MCP servers (BUB_HOME/mcp.json): their tools are the agent's, as `mcp.SERVER.TOOL`.
    Mcp {
        #[command(subcommand)]
        action: bub::cli::mcp::McpAction,
    },
    /// The PostgreSQL database of BUB_DATABASE_URL: migrate its schema, show its status.
    Db {
        #[command(subcommand)]
        action: bub::cli::db::DbAction,
    },
    /// Who may use a chat, and with which tools.
    Access {
        #[command(subcommand)]
        action: AccessAction,
    },
    /// Write BUB_HOME/config.toml (default ~/.bub/config.toml) from a few questions: the
    /// model, its key, a Telegram bot token, the workspace; the key and the token are checked.
    Init,
    /// The help of a command (`bub help run`, `bub help jobs list`), or of every variable
    /// (`bub help env`).
    Help {
        /// A command (and subcommand), or `env`.
        topic: Vec<String>,
        /// With `env`: the variables as the Markdown tables of docs/configuration.md.
        #[arg(long)]
        markdown: bool,
    },
}

fn main() -> ExitCode {
    // A command's keeper runs as `bub-keeper` and never returns from here; from now on keepers
    // are fresh images of this binary.
    bub::tools::contain::keeper_main();
    bub::tools::contain::exec_keepers();
    bub::heap::tune_allocator();
    // A write past RLIMIT_FSIZE then fails with EFBIG (a tape append reports it) instead of the
    // signal killing the daemon. Children get the default action back (`tools::shell`).
    // SAFETY: setting a signal's disposition to SIG_IGN before any other thread exists.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bub: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The one place errors become exit codes: 2 for a configuration or usage error (the message
/// names the variable or argument), 1 for anything else. Commands that end unsuccessfully
/// without an error (a failed turn, an invalid skill) return their code themselves.
fn exit_code(e: &anyhow::Error) -> u8 {
    let usage = e.downcast_ref::<bub::config::ConfigError>().is_some()
        || e.downcast_ref::<UsageError>().is_some();
    if usage { EXIT_CONFIG } else { 1 }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let command = cli.command.unwrap_or(Command::Chat);
    match &command {
        Command::Help { topic, markdown } => return help(topic, *markdown),
        Command::Init => return bub::cli::init::run(),
        _ => {}
    }
    let settings = load_settings(&cli.common, &command)?;
    for warning in &settings.warnings {
        eprintln!("bub: warning: {}", safe_line(warning));
    }
    if calls_model(&command) {
        settings.check_model_keys()?;
    }
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let session_id = cli.common.session_id;
    let code = runtime.block_on(async move {
        if let Command::Db { action } = &command {
            return bub::cli::db::run(&settings, action).await;
        }
        // The commands that keep state in the database migrate it first (a newer schema: exit 2);
        // the pool stays open for the command. The others never need it to be reachable.
        let keeps_state = match command {
            Command::Chat
            | Command::Run { .. }
            | Command::Message
            | Command::Idle
            | Command::Jobs { .. }
            | Command::Usage { .. }
            | Command::Memory { .. }
            | Command::Pair { .. }
            | Command::Access { .. } => true,
            #[cfg(feature = "console")]
            Command::Console => true,
            _ => false,
        };
        let _database = match keeps_state {
            true => settings.database()?,
            false => None,
        };
        if let Some(db) = &_database {
            bub::cli::db::migrate(db).await?;
        }
        match &command {
            Command::Jobs { action } => return admin::jobs(&settings, action).await,
            Command::Usage { since, json } => {
                return admin::usage(&settings, since.as_deref(), *json).await;
            }
            Command::Skills { action } => return Ok(admin::skills(&settings, action)),
            Command::Memory { action } => return admin::memory(&settings, action).await,
            Command::Pair { action } => return admin::pair(&settings, action).await,
            Command::Access { action } => return admin::explain(&settings, action).await,
            _ => {}
        }
        match command {
            Command::Run {
                message,
                tools,
                verbose,
                ..
            } => turn(settings, &session_id, &message, &tools, verbose).await,
            Command::Send {
                channel,
                chat_id,
                text,
                reply_to,
                file,
                id,
            } => {
                let out = bub::cli::send::outbound(chat_id, text.as_deref(), reply_to, file)?;
                bub::cli::send::send(settings, &channel, out, id.as_deref())
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Command::Message => {
                let db = settings.database()?;
                let served = bub::cli::db::serving(db, "message", message(settings));
                served.await.map(|()| ExitCode::SUCCESS)
            }
            Command::Idle => {
                let db = settings.database()?;
                let served = bub::cli::db::serving(db, "idle", idle(settings));
                served.await.map(|()| ExitCode::SUCCESS)
            }
            Command::Mcp { action } => bub::cli::mcp::run(&settings, action).await,
            Command::Status { json, kill: None } => {
                let status = bub::cli::status::run(&settings, json);
                status.await.map(|()| ExitCode::SUCCESS)
            }
            Command::Status { kill: Some(id), .. } => bub::cli::status::kill(&settings, id).await,
            #[cfg(feature = "console")]
            Command::Console => {
                logging::init(&settings, LogTarget::Stderr);
                bub::net::fd_limit::raise();
                let shutdown = CancellationToken::new();
                stop_on_signal(shutdown.clone());
                let served = bub::console::run(&settings, shutdown);
                served.await.map(|()| ExitCode::SUCCESS)
            }
            _ => chat(settings, session_id).await.map(|()| ExitCode::SUCCESS),
        }
    });
    // A tool stuck in the kernel (a FIFO, a hung mount) holds a blocking thread that cannot be
    // cancelled: wait for blocking work at most EXIT_GRACE.
    runtime.shutdown_timeout(EXIT_GRACE);
    code
}

/// The settings of `command`: every source, then the command line's flags (`--model`,
/// `--max-tokens`; for `bub run`, `--skills` and a `warn` log level unless `BUB_LOG_LEVEL`
/// says otherwise).
fn load_settings(common: &Common, command: &Command) -> Result<Settings, bub::config::ConfigError> {
    let mut overrides = Overrides {
        model: common.model.clone(),
        max_tokens: common.max_tokens,
        ..Overrides::default()
    };
    if let Command::Run { skills, .. } = command {
        overrides.skills = split_names(skills);
        overrides.log_level = Some("warn".to_owned());
    }
    let settings = Settings::load(&LoadOptions {
        workspace: common.workspace.clone(),
        config_file: common.config.clone(),
        overrides,
        ..LoadOptions::default()
    })?;
    let names = bub::tools::builtin_names();
    bub::access::policy::check_guest_tools(&settings, names.iter().map(String::as_str))?;
    Ok(settings)
}

/// Commands that call the model, checked for its key before they start: the chat, the
/// daemon, the scheduler (its jobs are turns) and `bub run` unless it runs a comma command.
fn calls_model(command: &Command) -> bool {
    match command {
        Command::Chat | Command::Message | Command::Idle => true,
        Command::Run { message, .. } => message
            .trim()
            .strip_prefix(',')
            .is_none_or(|body| body.trim().is_empty()),
        _ => false,
    }
}

/// `bub help [TOPIC]`: the variables (`env`), or the help of a command as `--help` shows it.
fn help(topic: &[String], markdown: bool) -> anyhow::Result<ExitCode> {
    if let [env] = topic
        && env == "env"
    {
        print_out(&bub::config::variables_help(markdown));
        return Ok(ExitCode::SUCCESS);
    }
    if markdown {
        return Err(UsageError("--markdown: only `bub help env --markdown` has it".into()).into());
    }
    let mut command = <Cli as clap::CommandFactory>::command();
    command.build();
    for name in topic {
        command = command.find_subcommand(name).cloned().ok_or_else(|| {
            UsageError(format!(
                "help: no command {name:?} (try `bub --help`, or `bub help env` for the variables)"
            ))
        })?;
    }
    print_out(command.render_long_help().to_string().trim_end());
    Ok(ExitCode::SUCCESS)
}

/// `--tools a,b --tools c` → `[a, b, c]`.
fn split_names(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `bub run`: one turn; exit 1 when it failed (its error on stderr), 130 when interrupted. Its
/// stdout is the answer only; stderr has errors and warnings (INFO logs when BUB_LOG_LEVEL asks
/// for them) and, with `verbose`, the tool-call lines.
async fn turn(
    settings: Settings,
    session_id: &str,
    message: &str,
    tools: &[String],
    verbose: bool,
) -> anyhow::Result<ExitCode> {
    logging::init(&settings, LogTarget::Stderr);
    let agent = AgentRuntime::new(settings, split_names(tools));
    let session_id = &bub::channels::SessionId::from(session_id);
    let you = Authority::terminal();
    let input = bub::agent::TurnInput::text(message);
    let mut request = bub::agent::TurnRequest::asked(session_id.clone(), input, you);
    if verbose {
        request = request.observed(bub::cli::trace::to_stderr());
    }
    let observed = agent.turn(request);
    let result = tokio::select! {
        result = observed => result,
        _ = tokio::signal::ctrl_c() => {
            agent.append_event(session_id, bub::tape::Event::TurnInterrupted, serde_json::json!({"by": "SIGINT"})).await;
            eprintln!("Operation interrupted.");
            return Ok(ExitCode::from(EXIT_INTERRUPTED));
        }
    };
    agent.stop_children().await;
    if let Some(error) = &result.error {
        // A failed command handed to the model: its own output still reaches the user.
        if !result.immediate_output.trim().is_empty() {
            print_out(&result.immediate_output);
        }
        eprintln!("Error: {error}");
        return Ok(ExitCode::FAILURE);
    }
    let text = [&result.assistant_output, &result.immediate_output]
        .into_iter()
        .find(|t| !t.trim().is_empty())
        .map_or("", |t| t.as_str());
    print_out(text);
    agent.settle().await;
    Ok(ExitCode::SUCCESS)
}

async fn chat(settings: Settings, session_id: String) -> anyhow::Result<()> {
    let log_file = settings.home.join("logs").join("chat.log");
    logging::init(&settings, LogTarget::File(&log_file));
    let agent = Arc::new(AgentRuntime::new(settings, Vec::new()));
    let chatted = bub::cli::run_chat(agent.clone(), session_id).await;
    agent.stop_children().await;
    agent.settle().await;
    chatted
}

/// How long a stopping daemon waits for the learning calls its turns left behind.
const LEARNING_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Lets the learning calls of finished turns end, for at most [`LEARNING_GRACE`] (they only
/// ever write a learned skill; one cut short is simply not written).
async fn settle(agent: &AgentRuntime) {
    if tokio::time::timeout(LEARNING_GRACE, agent.settle())
        .await
        .is_err()
    {
        tracing::warn!("learning.unfinished");
    }
}

/// `bub message`: the channel daemon (one per `BUB_HOME`).
async fn message(settings: Settings) -> anyhow::Result<()> {
    logging::init(&settings, LogTarget::Stderr);
    bub::net::fd_limit::raise();
    bub::daemon::warn_about_guests(&settings);
    // One process per BUB_HOME writes the inbox file; replicas share the database's.
    let _daemon = match settings.database_url {
        Some(_) => None,
        None => match PidLock::try_take(&settings.home.join(DAEMON_LOCK))? {
            PidLock::Held(file) => Some(file),
            PidLock::Taken(pid) => {
                let pid = pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
                return Err(UsageError(format!(
                    "another `bub message` or `bub idle` (pid {pid}) is serving BUB_HOME={}; stop it first or use another BUB_HOME",
                    settings.home.display()
                ))
                .into());
            }
        },
    };
    let cfg = SessionConfig::from_settings(&settings);
    let scheduler_enabled = settings.scheduler_enabled;
    #[cfg(feature = "console")]
    bub::console::prepare(&settings)?;
    let agent = Arc::new(AgentRuntime::new(settings, Vec::new()));
    let channels =
        bub::delivery::served_channels(bub::delivery::PLATFORMS, agent.settings(), agent.access())?;
    agent.outbox().install(&channels);
    let (inbox, resume) = open_inbox(&agent).await?;
    let mut manager = ChannelManager::new(agent.clone(), cfg, Arc::new(inbox));
    manager.resume(resume);
    for channel in &channels {
        manager
            .add(channel.clone())
            .map_err(|e| UsageError(format!("{e:#}")))?;
    }
    // Scheduled runs, the heartbeat's and background subagents take the same way in.
    let jobs = manager.jobs();
    agent.launch_with(Arc::new(jobs.clone()));
    let shutdown = CancellationToken::new();
    stop_on_signal(shutdown.clone());
    // The daemon's own tasks beside the manager: waited for before it exits.
    let tasks = TaskTracker::new();
    let names = manager.channel_names();
    manager.announce_to(bub::daemon::owner::start(
        &agent,
        names,
        &tasks,
        shutdown.child_token(),
    ));
    beat(&agent, jobs.clone(), &tasks, &shutdown);
    let board = Arc::new(Board::new(
        &agent.settings().model.to_string(),
        &manager.channel_names(),
    ));
    manager.show_on(board.clone());
    board.show_commands(agent.background_commands());
    match bub::status::bind(&agent.settings().home) {
        Ok(socket) => drop(tasks.spawn(bub::status::serve(
            socket,
            board.clone(),
            shutdown.child_token(),
        ))),
        // Serving chats matters more than `bub status`.
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "status.unavailable"),
    }
    #[cfg(feature = "console")]
    let console =
        bub::console::in_daemon(agent.settings(), board.clone(), &tasks, &shutdown).await?;
    #[cfg(not(feature = "console"))]
    let console = None;
    let channels = manager.channel_names();
    http::listen(agent.settings(), channels, console, &tasks, &shutdown).await?;
    let scheduler = scheduler_enabled
        .then(|| scheduler(agent.settings(), jobs))
        .transpose()?
        .map(|scheduler| tokio::spawn(scheduler.run(shutdown.child_token())));
    let served = manager.run(shutdown.clone()).await;
    shutdown.cancel();
    if let Some(scheduler) = scheduler {
        report_scheduler(scheduler.await);
    }
    stopped(&tasks).await;
    agent.stop_children().await;
    settle(&agent).await;
    served
}

/// The inbox journal of `agent`'s `BUB_HOME` (the caller holds the daemon lock) and the work
/// the previous run left, or with a database the inbox the replicas share (whose work comes by
/// lease, none at start); senders revoked meanwhile are dropped.
async fn open_inbox(agent: &AgentRuntime) -> anyhow::Result<(Inbox, Vec<Resume>)> {
    let access = agent.access().clone();
    if let Some(db) = agent.settings().database()? {
        let readmitted = move |m: &Inbound| {
            let (access, channel) = (access.clone(), m.channel.clone());
            let (id, name) = (m.sender.id.clone(), m.sender.username.clone());
            let role = async move {
                let name = name.as_deref();
                let user = User {
                    id: &id,
                    name,
                    display: None,
                };
                access.role(&channel, user).await
            };
            Box::pin(role) as futures_util::future::BoxFuture<'static, _>
        };
        return Ok((Inbox::shared(db, Arc::new(readmitted)).await?, Vec::new()));
    }
    // The senders of the work left are checked against one reading of `access.json`.
    let file = access.file().await;
    let readmitted = move |m: &Inbound| {
        let name = m.sender.username.as_deref();
        let user = User {
            id: &m.sender.id,
            name,
            display: None,
        };
        access.role_in(&file, &m.channel, user)
    };
    let inbox_path = agent.settings().home.join("inbox.jsonl");
    // Reading and rewriting the journal is file work: on the blocking pool.
    tokio::task::spawn_blocking(move || Inbox::open(&inbox_path, readmitted)).await?
}

/// `bub idle`: the scheduler, with send-only channel clients for delivering answers. Its jobs
/// run in session actors over the inbox, as in `bub message`, so it holds the daemon lock too:
/// beside a running `bub message` (or another `bub idle`) it stands by and takes over when
/// that one exits. On a database it is a replica like `bub message`'s.
async fn idle(settings: Settings) -> anyhow::Result<()> {
    logging::init(&settings, LogTarget::Stderr);
    bub::net::fd_limit::raise();
    bub::daemon::warn_about_guests(&settings);
    let shutdown = CancellationToken::new();
    stop_on_signal(shutdown.clone());
    // Replicas on a database share its inbox: no lock to wait for.
    let _daemon = match settings.database_url {
        Some(_) => None,
        None => match wait_for_daemon_lock(&settings.home, &shutdown).await? {
            Some(lock) => Some(lock),
            None => return Ok(()),
        },
    };
    let cfg = SessionConfig::from_settings(&settings);
    let agent = Arc::new(AgentRuntime::new(settings, Vec::new()));
    let channels = bub::delivery::send_only_channels(
        bub::delivery::PLATFORMS,
        agent.settings(),
        agent.access(),
    )?;
    let names: Vec<&str> = channels.iter().map(|c| c.name()).collect();
    tracing::info!(home = %agent.settings().home.display(), channels = ?names, "idle.start");
    agent.outbox().install(&channels);
    let (inbox, resume) = open_inbox(&agent).await?;
    let mut manager = ChannelManager::new(agent.clone(), cfg, Arc::new(inbox));
    manager.resume(resume);
    for channel in channels {
        manager
            .add_send_only(channel)
            .map_err(|e| UsageError(format!("{e:#}")))?;
    }
    let jobs = manager.jobs();
    agent.launch_with(Arc::new(jobs.clone()));
    let tasks = TaskTracker::new();
    beat(&agent, jobs.clone(), &tasks, &shutdown);
    // Nothing to wait for: its channels only send.
    http::listen(agent.settings(), Vec::new(), None, &tasks, &shutdown).await?;
    let scheduler = scheduler(agent.settings(), jobs)?;
    // A scheduler that fails stops the process (there is nothing else to do).
    let scheduled = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            let result = scheduler.run(shutdown.child_token()).await;
            shutdown.cancel();
            result
        }
    });
    let served = manager.run(shutdown.clone()).await;
    shutdown.cancel();
    let result = scheduled.await.context("scheduler task")?;
    stopped(&tasks).await;
    agent.stop_children().await;
    settle(&agent).await;
    tracing::info!("idle.stop");
    served?;
    result.context("scheduler")
}

/// Starts the heartbeat when the settings ask for one (its turns go through `jobs`).
fn beat(agent: &AgentRuntime, jobs: JobQueue, tasks: &TaskTracker, shutdown: &CancellationToken) {
    if let Some(heartbeat) = Heartbeat::from_settings(agent.settings(), jobs) {
        tasks.spawn(heartbeat.run(shutdown.child_token()));
    }
}

/// Waits, after shutdown, for the daemon's own tasks (listeners, the status socket, the
/// heartbeat, the owners' notices) to stop, for at most [`EXIT_GRACE`].
async fn stopped(tasks: &TaskTracker) {
    tasks.close();
    if tokio::time::timeout(EXIT_GRACE, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("shutdown: a listener was still stopping");
    }
}

/// Takes the daemon lock of `home`, waiting while another `bub message` or `bub idle` holds it
/// (checked every [`DAEMON_RETRY`]); `None` when `shutdown` comes first.
async fn wait_for_daemon_lock(
    home: &std::path::Path,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<std::fs::File>> {
    let path = home.join(DAEMON_LOCK);
    let mut announced = false;
    loop {
        let path = path.clone();
        match tokio::task::spawn_blocking(move || PidLock::try_take(&path)).await?? {
            PidLock::Held(file) => return Ok(Some(file)),
            PidLock::Taken(pid) if !announced => {
                let pid = pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
                tracing::info!(
                    pid,
                    "idle.standby: another bub serves this BUB_HOME; this one takes over when it exits"
                );
                announced = true;
            }
            PidLock::Taken(_) => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(None),
            () = tokio::time::sleep(DAEMON_RETRY) => {}
        }
    }
}

/// The scheduler of this process: due runs go to the session actors through `jobs`; the jobs
/// are `BUB_HOME`'s, or the database's (one owner among the replicas).
fn scheduler(settings: &Settings, jobs: JobQueue) -> anyhow::Result<Scheduler> {
    let scheduler = Scheduler::new(&settings.home, settings.scheduler_catch_up, Arc::new(jobs));
    Ok(match settings.database()? {
        Some(db) => scheduler.on_database(db),
        None => scheduler,
    })
}

fn report_scheduler(result: Result<anyhow::Result<()>, tokio::task::JoinError>) {
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %format!("{e:#}"), "scheduler.error"),
        Err(e) => tracing::error!(error = %e, "scheduler.panicked"),
    }
}

/// Cancels `shutdown` on SIGINT or SIGTERM; a second signal, or 10 s without a clean stop,
/// ends the process at once. The handlers are installed before this returns: a signal that
/// came before a spawned task's first poll would otherwise kill the process uncleanly.
fn stop_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        tracing::info!("shutdown.signal");
        shutdown.cancel();
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
            () = tokio::time::sleep(std::time::Duration::from_secs(10)) => {},
        }
        tracing::warn!("shutdown.forced");
        std::process::exit(EXIT_INTERRUPTED.into());
    });
}
