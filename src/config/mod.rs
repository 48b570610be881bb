//! Configuration: built-in defaults → TOML file → `.env` files → process environment.
//!
//! Every setting is read from its `BUB_*` variable (`BUB_MODEL`, `BUB_MAX_STEPS`, ...). A bad
//! value is a [`ConfigError`] naming the variable; the CLI turns it into exit code 2 before
//! anything starts serving. Every duration has a documented maximum (the `MAX_*_SECONDS`
//! constants), so no deadline computed from a setting can overflow.
//!
//! [`vars`] is the one table of variables (names, defaults, meanings, lists, secrets) the loader
//! accepts and `bub help env` prints. [`Settings::load`] (in `load.rs`) gathers the sources
//! ([`sources`]) by precedence, then parses each value ([`parse`]). Secrets (API keys, tokens, URL credentials) have types whose `Debug`
//! hides them ([`secret`]), so a logged `Settings` never leaks them.

mod channels;
mod console;
mod costs;
mod load;
pub(crate) mod mcp;
mod media;
mod model;
mod parse;
pub(crate) mod providers;
mod secret;
mod sources;
#[cfg(test)]
mod tests;
mod tokens;
mod vars;

use std::path::PathBuf;
use std::time::Duration;

pub use channels::{ChannelSettings, ChannelTable};
pub(crate) use channels::{Field, is_platform, var_name};
pub use console::{ConsoleSettings, PublicUrl};
pub use costs::{Budgets, Price, Prices};
pub use load::{LoadOptions, Overrides};
pub use media::{MediaSettings, Vision};
pub use model::{Model, ModelConfig};
pub(crate) use vars::platforms;
pub use vars::{help as variables_help, secret_vars};

pub(crate) use load::{home_from_env, process_value, user_path};
pub(crate) use parse::{parse_model, parse_url};
pub(crate) use providers::provider_base_url;
pub(crate) use secret::{MaskedUrl, Secret};
pub(crate) use tokens::{check_api_key, check_bot_token};

/// `BUB_MODEL` default.
pub(crate) const DEFAULT_MODEL: &str = "openrouter:qwen/qwen3-coder-next";
/// `BUB_OLLAMA_API_BASE` default.
pub(crate) const DEFAULT_OLLAMA_API_BASE: &str = "https://ollama.com/api";
/// `BUB_TELEGRAM_API_BASE` default.
pub(crate) const DEFAULT_TELEGRAM_API_BASE: &str = "https://api.telegram.org";
/// `BUB_DISCORD_API_BASE` default.
pub(crate) const DEFAULT_DISCORD_API_BASE: &str = "https://discord.com";

/// A configuration problem, reported as one line naming the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration error: {var}: {message}")]
pub struct ConfigError {
    pub var: String,
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(var: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            var: var.into(),
            message: message.into(),
        }
    }
}

/// `BUB_DATABASE_URL` (or a command that needs the database) in a build without PostgreSQL.
pub(crate) fn no_postgres() -> ConfigError {
    ConfigError::new(
        "BUB_DATABASE_URL",
        "this build of Bub has no PostgreSQL support (built without the `postgres` feature; \
         install with `--features postgres`)",
    )
}

/// Which `bash` commands run in the Landlock sandbox (`BUB_SANDBOX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Commands of guest turns (the default).
    #[default]
    Guests,
    /// Every command, owners' included.
    All,
    /// None (guests still get no shell unless `BUB_GUEST_TOOLS` grants it).
    Off,
}

/// Log output format (`BUB_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The largest `BUB_MODEL_TIMEOUT_SECONDS`: one day.
pub(crate) const MAX_MODEL_TIMEOUT_SECONDS: f64 = 86_400.0;
/// The largest `BUB_MESSAGE_DELAY_SECONDS`: one hour.
pub(crate) const MAX_MESSAGE_DELAY_SECONDS: f64 = 3_600.0;
/// The largest `BUB_MESSAGE_DEBOUNCE_SECONDS`: one hour.
pub(crate) const MAX_MESSAGE_DEBOUNCE_SECONDS: f64 = 3_600.0;
/// The largest `BUB_ACTIVE_TIME_WINDOW_SECONDS`: one day.
pub(crate) const MAX_ACTIVE_TIME_WINDOW_SECONDS: f64 = 86_400.0;
/// The largest `BUB_SESSION_IDLE_SECONDS`: 30 days.
pub(crate) const MAX_SESSION_IDLE_SECONDS: f64 = 2_592_000.0;
/// `BUB_HEARTBEAT_MINUTES` at most: a week.
pub(crate) const MAX_HEARTBEAT_MINUTES: f64 = 10_080.0;
/// `BUB_FS_TIMEOUT_SECONDS` default: how long one `fs.*` call's file work may take.
pub(crate) const DEFAULT_FS_TIMEOUT_SECONDS: f64 = 10.0;
/// The largest `BUB_FS_TIMEOUT_SECONDS`: one hour.
pub(crate) const MAX_FS_TIMEOUT_SECONDS: f64 = 3_600.0;
/// The largest `BUB_MCP_TIMEOUT_SECONDS`.
pub(crate) const MAX_MCP_TIMEOUT_SECONDS: f64 = 3_600.0;
/// `BUB_BASH_MAX_TIMEOUT_SECONDS` default: one hour.
pub(crate) const DEFAULT_BASH_MAX_TIMEOUT_SECONDS: u32 = 3_600;
/// The largest `BUB_BASH_MAX_TIMEOUT_SECONDS`: one day.
pub(crate) const MAX_BASH_MAX_TIMEOUT_SECONDS: u32 = 86_400;
/// `BUB_MAX_CONCURRENT_COMMANDS` default.
pub(crate) const DEFAULT_MAX_CONCURRENT_COMMANDS: u32 = 8;
/// The largest `BUB_MAX_CONCURRENT_COMMANDS`.
pub(crate) const MAX_MAX_CONCURRENT_COMMANDS: u32 = 1_024;
/// The most models `BUB_FALLBACK_MODELS` may name.
pub(crate) const MAX_FALLBACK_MODELS: usize = 8;

/// All settings of one process, loaded and validated: what `bub help env` describes, the
/// start-up checks read and each component's configuration is converted from once (the
/// components take their own part — [`ModelConfig`], `daemon::SessionConfig`, ... — not this).
/// Nothing changes it after loading: the command line's overrides are [`LoadOptions`]'. Field
/// docs name the environment variable. `Debug` shows no secret: keys and tokens are
/// [`Secret`]s, URLs [`MaskedUrl`]s.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `BUB_MODEL`: `provider:model`, default `openrouter:qwen/qwen3-coder-next`.
    pub model: Model,
    /// Where `model` was set, as `,model` names it: `BUB_MODEL`, `BUB_MODEL in config.toml`,
    /// `--model`, or `the default`.
    pub model_from: String,
    /// `BUB_FALLBACK_MODELS`: the models tried in order when a call to the session's model still
    /// fails after its retries (at most [`MAX_FALLBACK_MODELS`]; default none).
    pub fallback_models: Vec<Model>,
    /// First non-empty of `BUB_API_KEY`, `LLM_API_KEY`, `OPENROUTER_API_KEY`. Never logged.
    pub api_key: Option<Secret>,
    /// `BUB_API_BASE`: overrides the provider's default base URL (OpenAI-compatible
    /// providers only).
    pub api_base: Option<MaskedUrl>,
    /// First non-empty of `BUB_ANTHROPIC_API_KEY`, `ANTHROPIC_API_KEY`: the key of
    /// `anthropic:` models. Never logged.
    pub anthropic_api_key: Option<Secret>,
    /// `BUB_ANTHROPIC_API_BASE` (default `https://api.anthropic.com`).
    pub anthropic_api_base: MaskedUrl,
    /// First non-empty of `BUB_GEMINI_API_KEY`, `GEMINI_API_KEY`: the key of `gemini:` models.
    /// Never logged.
    pub gemini_api_key: Option<Secret>,
    /// `BUB_GEMINI_API_BASE` (default `https://generativelanguage.googleapis.com`).
    pub gemini_api_base: MaskedUrl,
    /// `BUB_MAX_TOKENS` (default 1024, ≥ 1).
    pub max_tokens: u32,
    /// `BUB_MODEL_TIMEOUT_SECONDS` (default 90, at most one day; `null`/`0` = none). Covers the
    /// HTTP call only.
    pub model_timeout: Option<Duration>,
    /// `BUB_SYSTEM_PROMPT` (default empty).
    pub system_prompt: String,
    /// `BUB_HOME` (default `~/.bub`), expanded and absolute.
    pub home: PathBuf,
    /// The resolved workspace (`-w`, else `BUB_WORKSPACE_PATH`, else the CWD): the workspace of
    /// the process's runtime (a runtime for another workspace carries its own).
    pub workspace: PathBuf,
    /// The user's home directory (`HOME`), for the global skill roots (`~/.agents/skills`).
    pub user_home: Option<PathBuf>,
    /// Skills allowed by `--skills` ([`Overrides::skills`]; empty = all).
    pub allowed_skills: Vec<String>,
    /// `BUB_TAPE_NAME` (default `bub`).
    pub tape_name: String,
    /// `BUB_MAX_STEPS` (default 20, ≥ 1).
    pub max_steps: u32,
    /// `BUB_CONTEXT_TOKENS` (default 32000, ≥ 256): the model's context window, in tokens.
    pub context_tokens: u32,
    /// `BUB_TOOL_RESULT_MAX_CHARS` (default 16000, ≥ 1000): a longer tool result reaches the
    /// model as its head and tail (the whole stays on the tape, read with `tape.output`).
    pub tool_result_max_chars: u32,
    /// `BUB_COMPACT_PERCENT` (default 75, 10..=100): the share of the window the context since
    /// the last anchor may fill before Bub compacts it.
    pub compact_percent: u32,
    /// `BUB_MEMORY_ENABLED` (default true): remembered entries are shown in the system prompt,
    /// `remember:` messages are kept, and the `memory.*` tools work.
    pub memory_enabled: bool,
    /// `BUB_LEARN_SKILLS` (default false): after an owner's turn with at least
    /// `learn_min_steps` tool calls, one extra model call may save the work as a learned skill.
    pub learn_skills: bool,
    /// `BUB_LEARN_MIN_STEPS` (default 3, ≥ 1): the tool calls a turn needs to be looked at.
    pub learn_min_steps: u32,
    /// `BUB_PROACTIVE_RESPONSE` (default false).
    pub proactive_response: bool,
    /// `BUB_STREAM`: `edits` shows answers in chats as they are written (one message, edited);
    /// `off` (the default) sends the final answer only.
    pub stream_edits: bool,
    /// `BUB_MESSAGE_DELAY_SECONDS` (default 10, at most one hour).
    pub message_delay: Duration,
    /// `BUB_MESSAGE_DEBOUNCE_SECONDS` (default 1, at most one hour).
    pub message_debounce: Duration,
    /// `BUB_ACTIVE_TIME_WINDOW_SECONDS` (default 60, at most one day).
    pub active_time_window: Duration,
    /// `BUB_MENTION_KEYWORD` (default `bub`; empty = none): in groups, this word (whole word,
    /// case-insensitive) addresses the bot like a mention.
    pub mention_keyword: String,
    /// `BUB_NOTIFY_PAIRING` (default true): `bub message` tells every owner, in their private
    /// chat, of a new pairing request and of a stranger addressing the bot in a group.
    pub notify_pairing: bool,
    /// `BUB_MAX_WAIT_SECONDS` (default 10, at most one hour): a chat that keeps sending is
    /// answered at most this long after the first message of its batch (later mentions no
    /// longer postpone it).
    pub max_wait: Duration,
    /// `BUB_SESSION_IDLE_SECONDS` (default 600, at most 30 days): a chat's session actor is evicted after this
    /// long without messages or turns.
    pub session_idle: Duration,
    /// `BUB_SCHEDULER_ENABLED` (default true): `bub message` also runs scheduled jobs (when no
    /// other process on this `BUB_HOME` does).
    pub scheduler_enabled: bool,
    /// `BUB_SCHEDULER_CATCH_UP` (default true): runs missed while no scheduler was alive fire
    /// once at startup (recurring ones coalesced); `false` skips them.
    pub scheduler_catch_up: bool,
    /// `BUB_HEARTBEAT_MINUTES` (default 0: off): how often `bub message` and `bub idle` read
    /// `HEARTBEAT.md` in the workspace.
    pub heartbeat_every: Duration,
    /// `BUB_HEARTBEAT_CHAT`: the chat (`channel:chat`) a heartbeat's answer goes to; required
    /// with the heartbeat.
    pub heartbeat_chat: Option<String>,
    /// `BUB_HEARTBEAT_ROLE` (default guest): a heartbeat's turn runs with an owner's rights.
    pub heartbeat_owner: bool,
    /// `BUB_OLLAMA_API_KEY`.
    pub ollama_api_key: Option<Secret>,
    /// `BUB_OLLAMA_API_BASE` (default `https://ollama.com/api`).
    pub ollama_api_base: MaskedUrl,
    /// `BUB_SEARXNG_URL`: a SearXNG instance (JSON format enabled) for `web.search`; preferred
    /// over Ollama's web search when both are set.
    pub searxng_url: Option<MaskedUrl>,
    /// `BUB_WEB_ALLOW_PRIVATE` (default false): `web.fetch` may reach loopback, private and
    /// link-local addresses.
    pub web_allow_private: bool,
    /// `BUB_SANDBOX` (default `guests`).
    pub sandbox: SandboxMode,
    /// `BUB_FS_TIMEOUT_SECONDS` (default 10, > 0, at most one hour): the file work of one
    /// `fs.*` call (and the path check of a confined turn) that takes longer — a hung mount —
    /// is abandoned with an error.
    pub fs_timeout: Duration,
    /// `BUB_MCP_TIMEOUT_SECONDS` (default 60): an MCP server's start or one call of its tools
    /// fails after this.
    pub mcp_timeout: Duration,
    /// The MCP servers of `BUB_HOME/mcp.json` (none without the file).
    pub(crate) mcp_servers: mcp::Servers,
    /// `BUB_BASH_MAX_TIMEOUT_SECONDS` (default 3600, 1..=86400): the largest `timeout_seconds`
    /// of a `bash` call; a larger request is lowered to it, with a note in the output.
    pub bash_max_timeout: Duration,
    /// `BUB_MAX_CONCURRENT_COMMANDS` (default 8, 1..=1024): `bash` commands running at once in
    /// the process; more wait their turn.
    pub max_concurrent_commands: u32,
    /// `BUB_MAX_SUBAGENTS` (default 4, 0: none): subagents running at once in the process.
    pub max_subagents: u32,
    /// `BUB_GUEST_BACKGROUND_COMMANDS` (default 1, 0..=4): background commands one guest may
    /// have running at once, in all chats together.
    pub guest_background_commands: u32,
    /// `BUB_GUEST_TOOLS`: the tools a guest's turn may use; `None` = the built-in guest set.
    pub guest_tools: Option<Vec<String>>,
    /// `BUB_TELEGRAM_*`, `BUB_DISCORD_*`: each chat platform's settings, by its name.
    pub channels: ChannelTable,
    /// `BUB_MEDIA_*`, `BUB_VISION*`, `BUB_TRANSCRIBE_*`.
    pub media: MediaSettings,
    /// The `[prices]` table of the configuration file.
    pub prices: Prices,
    /// `BUB_BUDGET_*`.
    pub budgets: Budgets,
    /// `BUB_LOG_LEVEL`, else [`Overrides::log_level`] (`warn` for `bub run`, whose stderr is
    /// for errors); `None`: `info`.
    pub log_level: Option<String>,
    /// `BUB_LOG_FORMAT` (`text` or `json`).
    pub log_format: LogFormat,
    /// `BUB_HTTP_LISTEN`: where `bub message` and `bub idle` serve health and metrics.
    pub http_listen: Option<std::net::SocketAddr>,
    /// `BUB_CONSOLE*`: the web console.
    pub console: ConsoleSettings,
    /// `BUB_DATABASE_URL`: the PostgreSQL database replicas share (`None`: files in
    /// `BUB_HOME`).
    pub database_url: Option<Secret>,
    /// What loading noticed but did not refuse (a `BUB_*` name that is not a variable), one
    /// line each, for the command line to print once at start.
    pub warnings: Vec<String>,
}

/// The file of `BUB_HOME` holding the web console's login token (a secret like Bub's keys).
pub(crate) const CONSOLE_TOKEN: &str = "console.token";

impl Settings {
    /// The replicas' database (`BUB_DATABASE_URL`), shared by everything in the process that
    /// uses it; `None` without one. No connection is made here.
    pub fn database(&self) -> anyhow::Result<Option<std::sync::Arc<crate::db::Database>>> {
        match &self.database_url {
            None => Ok(None),
            #[cfg(feature = "postgres")]
            Some(url) => crate::db::Database::shared(url.expose()).map(Some),
            #[cfg(not(feature = "postgres"))]
            Some(_) => Err(no_postgres().into()),
        }
    }

    /// Settings with every built-in default, for the given data root and workspace (no sources
    /// read, nothing validated). [`Settings::load`] is the normal constructor; this one is for
    /// tests and embedding.
    pub fn with_defaults(home: PathBuf, workspace: PathBuf) -> Self {
        Self {
            model: Model::default_model(),
            model_from: "the default".to_owned(),
            fallback_models: Vec::new(),
            api_key: None,
            api_base: None,
            anthropic_api_key: None,
            anthropic_api_base: providers::DEFAULT_ANTHROPIC_API_BASE.into(),
            gemini_api_key: None,
            gemini_api_base: providers::DEFAULT_GEMINI_API_BASE.into(),
            max_tokens: 8192,
            model_timeout: Some(Duration::from_secs(90)),
            system_prompt: String::new(),
            home,
            workspace,
            user_home: None,
            allowed_skills: Vec::new(),
            tape_name: "bub".to_owned(),
            max_steps: 20,
            context_tokens: 32_000,
            tool_result_max_chars: 16_000,
            compact_percent: 75,
            memory_enabled: true,
            learn_skills: false,
            learn_min_steps: 3,
            proactive_response: false,
            stream_edits: false,
            message_delay: Duration::from_secs(10),
            message_debounce: Duration::from_secs(1),
            active_time_window: Duration::from_secs(60),
            mention_keyword: "bub".to_owned(),
            notify_pairing: true,
            max_wait: Duration::from_secs(10),
            session_idle: Duration::from_secs(600),
            scheduler_enabled: true,
            scheduler_catch_up: true,
            heartbeat_every: Duration::ZERO,
            heartbeat_chat: None,
            heartbeat_owner: false,
            ollama_api_key: None,
            ollama_api_base: DEFAULT_OLLAMA_API_BASE.into(),
            searxng_url: None,
            web_allow_private: false,
            sandbox: SandboxMode::Guests,
            fs_timeout: crate::time::secs(DEFAULT_FS_TIMEOUT_SECONDS),
            mcp_timeout: Duration::from_secs(60),
            mcp_servers: mcp::Servers::default(),
            bash_max_timeout: Duration::from_secs(DEFAULT_BASH_MAX_TIMEOUT_SECONDS.into()),
            max_concurrent_commands: DEFAULT_MAX_CONCURRENT_COMMANDS,
            max_subagents: 4,
            guest_background_commands: 1,
            guest_tools: None,
            channels: ChannelTable::defaults(),
            media: MediaSettings::default(),
            prices: Prices::default(),
            budgets: Budgets::default(),
            log_level: None,
            log_format: LogFormat::Text,
            http_listen: None,
            console: ConsoleSettings::default(),
            database_url: None,
            warnings: Vec::new(),
        }
    }

    /// The provider part of `model` (before the first `:`), as written.
    #[cfg(test)]
    pub(crate) fn provider(&self) -> &str {
        &self.model.provider
    }

    /// The model id part of `model` (after the first `:`).
    #[cfg(test)]
    pub(crate) fn model_id(&self) -> &str {
        &self.model.id
    }

    /// `BUB_API_BASE` if set, else the provider's default base URL.
    #[cfg(test)]
    pub(crate) fn model_base_url(&self) -> String {
        self.base_url_for(&self.model)
    }

    /// [`ModelConfig::base_url_for`].
    #[cfg(test)]
    pub(crate) fn base_url_for(&self, model: &Model) -> String {
        ModelConfig::from_settings(self).base_url_for(model)
    }

    /// [`ModelConfig::api_key_for`].
    #[cfg(test)]
    pub(crate) fn api_key_for(&self, model: &Model) -> Option<&Secret> {
        match crate::llm::Api::of(&model.provider) {
            crate::llm::Api::OpenAi => self.api_key.as_ref(),
            crate::llm::Api::Anthropic => self.anthropic_api_key.as_ref(),
            crate::llm::Api::Gemini => self.gemini_api_key.as_ref(),
        }
    }

    /// The start-up check of commands that call the model: the model and each of
    /// `BUB_FALLBACK_MODELS` has its provider's key unless it needs none
    /// ([`crate::llm::needs_key`]). The error names the variables of every missing key.
    pub fn check_model_keys(&self) -> Result<(), ConfigError> {
        ModelConfig::from_settings(self).check_keys(&self.home.join("config.toml"))
    }

    /// The settings of chat platform `name` (`telegram`), added with the defaults when it has
    /// none yet (a platform without variables, configured in code).
    pub fn channel_mut(&mut self, name: &str) -> &mut ChannelSettings {
        self.channels.get_mut(name)
    }

    /// Every secret value Bub read for itself: keys, tokens, and passwords inside the URLs it
    /// was given (proxies, API bases). The redactor removes these from tool output.
    pub(crate) fn secret_values(&self) -> Vec<String> {
        let keys = [
            &self.api_key,
            &self.anthropic_api_key,
            &self.gemini_api_key,
            &self.ollama_api_key,
            &self.media.transcribe_api_key,
        ];
        let tokens = self
            .channels
            .iter()
            .flat_map(|(_, c)| [&c.token, &c.webhook_secret]);
        let mut values: Vec<String> = keys
            .into_iter()
            .chain(tokens)
            .flatten()
            .map(|s| s.expose().to_owned())
            .collect();
        let urls = [
            self.api_base.as_deref(),
            Some(&*self.anthropic_api_base),
            Some(&*self.gemini_api_base),
            self.searxng_url.as_deref(),
            Some(&*self.ollama_api_base),
            self.media.transcribe_api_base.as_deref(),
        ];
        let proxies = self.channels.iter().map(|(_, c)| c.proxy.as_deref());
        values.extend(
            urls.into_iter()
                .chain(proxies)
                .flatten()
                .filter_map(parse::url_password),
        );
        values.extend(self.mcp_servers.secret_values().map(str::to_owned));
        if let Some(url) = &self.database_url {
            #[cfg(feature = "postgres")]
            values.extend(crate::db::password(url.expose()));
            values.push(url.expose().to_owned());
        }
        // The web console's login token, once it has one.
        if let Ok(token) = std::fs::read_to_string(self.home.join(CONSOLE_TOKEN)) {
            values.push(token.trim().to_owned());
        }
        values
    }
}
