//! [`Settings::load`]: resolves the workspace and `BUB_HOME`, reads every source by precedence
//! and parses each variable into [`Settings`] — one function per group of the variable table —
//! then applies the command line's [`Overrides`].
//!
//! Precedence, lowest to highest: built-in defaults → `BUB_HOME/config.toml` → `--config FILE` →
//! `<workspace>/.env` → `<cwd>/.env` → environment → the command line (`--model`,
//! `--max-tokens`). A blank value means "use the default". The workspace is `-w`, else
//! `BUB_WORKSPACE_PATH` (from any source but the workspace's own `.env`), else the CWD.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::time::secs;

use super::channels::{ChannelSettings, Field};
use super::costs::{Prices, parse_tokens, parse_usd};
use super::parse::{
    absolute, at_least, between, expand_tilde, is_null, optional_text, optional_url, parse_bool,
    parse_fallback_models, parse_list, parse_log_format, parse_log_level, parse_model,
    parse_sandbox, parse_secret, parse_timeout, positive_seconds, seconds, trimmed,
};
use super::sources::{self, Layers, Origin};
use super::tokens::{check_bot_token, check_webhook_secret};
use super::vars;
use super::{
    ConfigError, DEFAULT_MODEL, MAX_ACTIVE_TIME_WINDOW_SECONDS, MAX_BASH_MAX_TIMEOUT_SECONDS,
    MAX_FS_TIMEOUT_SECONDS, MAX_HEARTBEAT_MINUTES, MAX_MAX_CONCURRENT_COMMANDS,
    MAX_MCP_TIMEOUT_SECONDS, MAX_MESSAGE_DEBOUNCE_SECONDS, MAX_MESSAGE_DELAY_SECONDS,
    MAX_MODEL_TIMEOUT_SECONDS, MAX_SESSION_IDLE_SECONDS, MaskedUrl, Secret, Settings,
};

/// Where to look for configuration, and what the command line overrides. `Default` means:
/// workspace = CWD, no `--config`, the process environment and the process CWD, no overrides.
#[derive(Debug, Default, Clone)]
pub struct LoadOptions {
    /// `-w/--workspace`; `None` = `BUB_WORKSPACE_PATH`, else the CWD.
    pub workspace: Option<PathBuf>,
    /// `--config FILE`; must exist when given.
    pub config_file: Option<PathBuf>,
    /// The environment; `None` = the process environment. Tests pass a map. `HOME` in it is
    /// used to expand `~`.
    pub env: Option<HashMap<String, String>>,
    /// The directory relative paths and `<cwd>/.env` refer to; `None` = the process CWD.
    pub cwd: Option<PathBuf>,
    /// The command line's values, above every source.
    pub overrides: Overrides,
}

/// What the command line sets, applied by the loader over every source (an error names the
/// flag). Nothing changes the loaded [`Settings`] afterwards.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--model PROVIDER:MODEL`, validated like `BUB_MODEL`.
    pub model: Option<String>,
    /// `--max-tokens N` (≥ 1).
    pub max_tokens: Option<u32>,
    /// `bub run --skills`: only these skills are seen (empty = all).
    pub skills: Vec<String>,
    /// The log level when `BUB_LOG_LEVEL` is not set (`bub run`: `warn`; `None`: `info`).
    pub log_level: Option<String>,
}

impl Overrides {
    /// Sets what the command line gave over the loaded `s`.
    fn apply(&self, s: &mut Settings) -> Result<(), ConfigError> {
        if let Some(model) = &self.model {
            s.model = parse_model("--model", model, s.api_base.as_deref())?;
            "--model".clone_into(&mut s.model_from);
        }
        if let Some(max_tokens) = self.max_tokens {
            s.max_tokens = at_least(1)("--max-tokens", &max_tokens.to_string())?;
        }
        s.allowed_skills.clone_from(&self.skills);
        if s.log_level.is_none() {
            s.log_level.clone_from(&self.log_level);
        }
        Ok(())
    }
}

impl Settings {
    /// Loads settings from every source (see the module docs), then the command line's
    /// [`Overrides`]. Reads files only; never modifies the process environment.
    pub fn load(opts: &LoadOptions) -> Result<Settings, ConfigError> {
        let env = match &opts.env {
            Some(env) => env.clone(),
            None => process_env(),
        };
        let user_home = user_home(&env);
        let user_home = user_home.as_deref();
        let cwd = resolve_cwd(opts.cwd.as_deref())?;

        let config = match &opts.config_file {
            Some(file) => sources::from_toml(
                &resolve_config_file(file, &cwd, user_home)?,
                Some("--config"),
            )?,
            None => Layers::default(),
        };
        // The sources above the workspace's .env.
        let mut nearer = read_dotenv(&cwd.join(".env"))?;
        nearer.overlay(sources::from_env(&env));
        let workspace = match &opts.workspace {
            Some(path) => resolve_workspace("--workspace", path, &cwd, user_home)?,
            None => workspace_path(&config, &nearer, &cwd, user_home)?,
        };

        // Everything above BUB_HOME/config.toml; it also decides where BUB_HOME is.
        let mut upper = config;
        upper.overlay(read_dotenv(&workspace.join(".env"))?);
        upper.overlay(nearer);
        let home = resolve_home(&upper, &cwd, user_home)?;
        let mut layers = read_home_config(&home)?;
        layers.overlay(upper);
        let mut settings = build(&layers, home, workspace)?;
        settings.mcp_servers = super::mcp::Servers::load(&settings.home).map_err(|e| {
            let path = settings.home.join(super::mcp::FILE);
            ConfigError::new(path.display().to_string(), format!("{e:#}"))
        })?;
        opts.overrides.apply(&mut settings)?;
        settings.user_home = user_home.map(Path::to_path_buf);
        settings.warnings = layers.unknown_warnings();
        Ok(settings)
    }
}

/// `BUB_HOME` from the process environment alone (default `~/.bub`), for `bub init`, which
/// writes the configuration file before there is one.
pub(crate) fn home_from_env() -> Result<PathBuf, ConfigError> {
    let env = process_env();
    let cwd = resolve_cwd(None)?;
    resolve_home(&sources::from_env(&env), &cwd, user_home(&env).as_deref())
}

/// The value of `var` in the process environment as the loader reads it (the name in any
/// case; blank or `null` is unset): what `bub init` checks against, since it wins over the file
/// it writes.
pub(crate) fn process_value(var: &str) -> Option<String> {
    let layers = sources::from_env(&process_env());
    layers.parse(var, optional_text).ok().flatten().flatten()
}

/// A directory a user typed (`bub init`'s workspace): `~` expanded, absolute against the CWD.
pub(crate) fn user_path(var: &str, raw: &str) -> Result<PathBuf, ConfigError> {
    let env = process_env();
    let path = expand_tilde(var, raw.trim(), user_home(&env).as_deref())?;
    Ok(absolute(path, &resolve_cwd(None)?))
}

/// The user's home directory: `HOME` of `env`, else the system's idea of it.
fn user_home(env: &HashMap<String, String>) -> Option<PathBuf> {
    env.get("HOME")
        .filter(|home| !home.trim().is_empty())
        .map(PathBuf::from)
        .or_else(std::env::home_dir)
}

/// Parses every variable over the defaults, one group of the table ([`vars`]) at a time, then
/// checks cross-field rules.
fn build(l: &Layers, home: PathBuf, workspace: PathBuf) -> Result<Settings, ConfigError> {
    let mut s = Settings::with_defaults(home, workspace);
    model(l, &mut s)?;
    agent(l, &mut s)?;
    sessions(l, &mut s)?;
    tools(l, &mut s)?;
    logging(l, &mut s)?;
    scale(l, &mut s)?;
    super::media::load(l, &mut s.media)?;
    for platform in vars::platforms() {
        load_channel(l, platform, s.channel_mut(platform))?;
        let webhook = s.channel_mut(platform).webhook_url.is_some();
        if webhook && s.http_listen.is_none() {
            let var = format!("BUB_{}_WEBHOOK_URL", platform.to_ascii_uppercase());
            return Err(ConfigError::new(
                "BUB_HTTP_LISTEN",
                format!("required with {var}: the updates are posted to this listener"),
            ));
        }
    }
    cost(l, &mut s)?;
    Ok(s)
}

/// The model: `BUB_MODEL`, the fallbacks, each provider's key and base URL, the answer size,
/// the timeout and the context window.
fn model(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    l.set("BUB_API_BASE", &mut s.api_base, optional_url)?;
    let api_base = s.api_base.as_deref();
    let parse = |var: &str, v: &str| parse_model(var, v, api_base);
    s.model = match l.parse("BUB_MODEL", parse)? {
        Some(model) => model,
        None => parse("BUB_MODEL", DEFAULT_MODEL)?,
    };
    s.model_from = match l.get("BUB_MODEL").map(|raw| &raw.origin) {
        None => "the default".to_owned(),
        Some(Origin::Env) => "BUB_MODEL".to_owned(),
        Some(Origin::File(path)) => {
            let file = path.file_name().unwrap_or(path.as_os_str());
            format!("BUB_MODEL in {}", file.to_string_lossy())
        }
    };
    l.set("BUB_FALLBACK_MODELS", &mut s.fallback_models, |_, v| {
        parse_fallback_models(v, api_base)
    })?;
    s.api_key = first_secret(l, &["BUB_API_KEY", "LLM_API_KEY", "OPENROUTER_API_KEY"])?;
    s.anthropic_api_key = first_secret(l, &["BUB_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"])?;
    set_url(l, "BUB_ANTHROPIC_API_BASE", &mut s.anthropic_api_base)?;
    s.gemini_api_key = first_secret(l, &["BUB_GEMINI_API_KEY", "GEMINI_API_KEY"])?;
    set_url(l, "BUB_GEMINI_API_BASE", &mut s.gemini_api_base)?;
    l.set("BUB_MAX_TOKENS", &mut s.max_tokens, at_least(1))?;
    l.set(
        "BUB_MODEL_TIMEOUT_SECONDS",
        &mut s.model_timeout,
        |var, v| Ok(parse_timeout(var, v, MAX_MODEL_TIMEOUT_SECONDS)?.map(secs)),
    )?;
    l.set("BUB_CONTEXT_TOKENS", &mut s.context_tokens, at_least(256))
}

/// The agent and its data: the system prompt, tapes, a turn's bounds, memory, learning and the
/// scheduler.
fn agent(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    l.set("BUB_SYSTEM_PROMPT", &mut s.system_prompt, |_, v| {
        Ok(v.to_owned())
    })?;
    l.set("BUB_TAPE_NAME", &mut s.tape_name, trimmed)?;
    l.set("BUB_MAX_STEPS", &mut s.max_steps, at_least(1))?;
    l.set(
        "BUB_TOOL_RESULT_MAX_CHARS",
        &mut s.tool_result_max_chars,
        at_least(1_000),
    )?;
    l.set(
        "BUB_COMPACT_PERCENT",
        &mut s.compact_percent,
        between(10, 100),
    )?;
    l.set("BUB_MEMORY_ENABLED", &mut s.memory_enabled, parse_bool)?;
    l.set("BUB_LEARN_SKILLS", &mut s.learn_skills, parse_bool)?;
    l.set("BUB_LEARN_MIN_STEPS", &mut s.learn_min_steps, at_least(1))?;
    l.set(
        "BUB_SCHEDULER_ENABLED",
        &mut s.scheduler_enabled,
        parse_bool,
    )?;
    l.set(
        "BUB_SCHEDULER_CATCH_UP",
        &mut s.scheduler_catch_up,
        parse_bool,
    )?;
    heartbeat(l, s)
}

/// The heartbeat: how often, the chat its answers go to (required with it), its rights.
fn heartbeat(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    l.set("BUB_HEARTBEAT_MINUTES", &mut s.heartbeat_every, |var, v| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|m| (0.0..=MAX_HEARTBEAT_MINUTES).contains(m))
            .map(|m| secs(m * 60.0))
            .ok_or_else(|| {
                let expected = format!("0 to {MAX_HEARTBEAT_MINUTES}, e.g. 30 or 0.5");
                ConfigError::new(var, format!("invalid number of minutes {v:?} ({expected})"))
            })
    })?;
    l.set("BUB_HEARTBEAT_CHAT", &mut s.heartbeat_chat, |var, v| {
        let chat = v.trim();
        match chat.split_once(':') {
            Some((channel, id)) if vars::platforms().any(|p| p == channel) && !id.is_empty() => {
                Ok(Some(chat.to_owned()))
            }
            _ => Err(ConfigError::new(
                var,
                format!("invalid chat {chat:?} (expected channel:chat, e.g. telegram:42)"),
            )),
        }
    })?;
    l.set(
        "BUB_HEARTBEAT_ROLE",
        &mut s.heartbeat_owner,
        |var, v| match v.trim() {
            "guest" => Ok(false),
            "owner" => Ok(true),
            other => Err(ConfigError::new(
                var,
                format!("invalid role {other:?} (expected guest or owner)"),
            )),
        },
    )?;
    if !s.heartbeat_every.is_zero() && s.heartbeat_chat.is_none() {
        return Err(ConfigError::new(
            "BUB_HEARTBEAT_CHAT",
            "required when BUB_HEARTBEAT_MINUTES is set (the chat its answers go to)",
        ));
    }
    Ok(())
}

/// How chats are answered (the session actors): who sends answers, streaming, the debounce
/// and follow-up timings, the mention keyword, idle eviction.
fn sessions(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    l.set(
        "BUB_PROACTIVE_RESPONSE",
        &mut s.proactive_response,
        parse_bool,
    )?;
    l.set("BUB_STREAM", &mut s.stream_edits, |var, v| {
        match v.trim().to_ascii_lowercase().as_str() {
            "edits" => Ok(true),
            "off" => Ok(false),
            _ => Err(ConfigError::new(
                var,
                format!("invalid stream mode {v:?} (expected off or edits)"),
            )),
        }
    })?;
    let delay = seconds(MAX_MESSAGE_DELAY_SECONDS);
    l.set("BUB_MESSAGE_DELAY_SECONDS", &mut s.message_delay, delay)?;
    let debounce = seconds(MAX_MESSAGE_DEBOUNCE_SECONDS);
    l.set(
        "BUB_MESSAGE_DEBOUNCE_SECONDS",
        &mut s.message_debounce,
        &debounce,
    )?;
    let window = seconds(MAX_ACTIVE_TIME_WINDOW_SECONDS);
    l.set(
        "BUB_ACTIVE_TIME_WINDOW_SECONDS",
        &mut s.active_time_window,
        window,
    )?;
    l.set("BUB_MENTION_KEYWORD", &mut s.mention_keyword, |_, v| {
        Ok(v.trim().to_lowercase())
    })?;
    l.set("BUB_NOTIFY_PAIRING", &mut s.notify_pairing, parse_bool)?;
    l.set("BUB_MAX_WAIT_SECONDS", &mut s.max_wait, &debounce)?;
    let idle = seconds(MAX_SESSION_IDLE_SECONDS);
    l.set("BUB_SESSION_IDLE_SECONDS", &mut s.session_idle, idle)
}

/// Tools and security: web search and fetch, the sandbox, file and shell limits, the guests'
/// tools.
fn tools(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    l.set("BUB_OLLAMA_API_KEY", &mut s.ollama_api_key, parse_secret)?;
    set_url(l, "BUB_OLLAMA_API_BASE", &mut s.ollama_api_base)?;
    l.set("BUB_SEARXNG_URL", &mut s.searxng_url, optional_url)?;
    l.set(
        "BUB_WEB_ALLOW_PRIVATE",
        &mut s.web_allow_private,
        parse_bool,
    )?;
    l.set("BUB_SANDBOX", &mut s.sandbox, parse_sandbox)?;
    let fs = positive_seconds(MAX_FS_TIMEOUT_SECONDS);
    l.set("BUB_FS_TIMEOUT_SECONDS", &mut s.fs_timeout, fs)?;
    let mcp = positive_seconds(MAX_MCP_TIMEOUT_SECONDS);
    l.set("BUB_MCP_TIMEOUT_SECONDS", &mut s.mcp_timeout, mcp)?;
    l.set(
        "BUB_BASH_MAX_TIMEOUT_SECONDS",
        &mut s.bash_max_timeout,
        |var, v| {
            let n = between(1, MAX_BASH_MAX_TIMEOUT_SECONDS)(var, v)?;
            Ok(Duration::from_secs(n.into()))
        },
    )?;
    let commands = between(1, MAX_MAX_CONCURRENT_COMMANDS);
    l.set(
        "BUB_MAX_CONCURRENT_COMMANDS",
        &mut s.max_concurrent_commands,
        commands,
    )?;
    l.set("BUB_MAX_SUBAGENTS", &mut s.max_subagents, between(0, 64))?;
    l.set(
        "BUB_GUEST_BACKGROUND_COMMANDS",
        &mut s.guest_background_commands,
        between(0, 4),
    )?;
    l.set(
        "BUB_GUEST_TOOLS",
        &mut s.guest_tools,
        |var, v| match is_null(v) {
            true => Ok(None),
            false => parse_list(var, v).map(Some),
        },
    )
}

/// `BUB_LOG_LEVEL`, `BUB_LOG_FORMAT`, `BUB_HTTP_LISTEN`, `BUB_CONSOLE*` ([`super::console`]).
fn logging(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    l.set("BUB_LOG_LEVEL", &mut s.log_level, |var, v| {
        parse_log_level(var, v).map(Some)
    })?;
    l.set("BUB_LOG_FORMAT", &mut s.log_format, parse_log_format)?;
    l.set("BUB_HTTP_LISTEN", &mut s.http_listen, |var, v| {
        listen_address(var, v).map(Some)
    })?;
    super::console::load(l, &mut s.console)
}

/// A listen address (`BUB_HTTP_LISTEN`, `BUB_CONSOLE_LISTEN`): `IP:PORT`, `localhost:PORT`, or
/// a bare `PORT` (on 127.0.0.1: loopback unless an address says otherwise).
pub(super) fn listen_address(var: &str, v: &str) -> Result<std::net::SocketAddr, ConfigError> {
    let text = v.trim();
    let loopback = |port: &str| port.parse::<u16>().ok().map(|p| ([127, 0, 0, 1], p).into());
    let addr = match text.strip_prefix("localhost:") {
        Some(port) => loopback(port),
        None => text.parse().ok().or_else(|| loopback(text)),
    };
    addr.ok_or_else(|| {
        let expected =
            "HOST:PORT with an IP address, e.g. 127.0.0.1:8080 or 0.0.0.0:8080, or a PORT";
        ConfigError::new(var, format!("invalid address {v:?} (expected {expected})"))
    })
}

/// `BUB_DATABASE_URL`: a `postgres://` (or `postgresql://`) URL, in a build with the `postgres`
/// feature. Never quoted in an error: it holds a password.
fn scale(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    l.set("BUB_DATABASE_URL", &mut s.database_url, |var, v| {
        let v = v.trim();
        if v.is_empty() || is_null(v) {
            return Ok(None);
        }
        if !cfg!(feature = "postgres") {
            return Err(super::no_postgres());
        }
        let scheme = v.starts_with("postgres://") || v.starts_with("postgresql://");
        #[cfg(feature = "postgres")]
        let scheme = scheme && v.parse::<tokio_postgres::Config>().is_ok();
        if !scheme {
            let expected = "postgres://USER:PASSWORD@HOST:PORT/DATABASE";
            return Err(ConfigError::new(
                var,
                format!("not a PostgreSQL URL (expected {expected})"),
            ));
        }
        Ok(Some(Secret::new(v)))
    })
}

/// The `[prices]` table and the `BUB_BUDGET_*` budgets; a budget in US dollars needs the
/// model's price.
fn cost(l: &Layers, s: &mut Settings) -> Result<(), ConfigError> {
    s.prices = Prices::parse(l.prices())?;
    let b = &mut s.budgets;
    b.daily_tokens = l.parse("BUB_BUDGET_DAILY_TOKENS", parse_tokens)?;
    b.daily_usd = l.parse("BUB_BUDGET_DAILY_USD", parse_usd)?;
    b.chat_daily_tokens = l.parse("BUB_BUDGET_CHAT_DAILY_TOKENS", parse_tokens)?;
    l.set("BUB_BUDGET_OWNERS", &mut b.owners, parse_bool)?;
    if b.daily_usd.is_some() && s.prices.of(&s.model.to_string()).is_none() {
        return Err(ConfigError::new(
            "BUB_BUDGET_DAILY_USD",
            format!(
                "needs a price for {}: add [prices.\"{}\"] with input and output (USD per \
                 million tokens) to the configuration file",
                s.model, s.model
            ),
        ));
    }
    Ok(())
}

/// Reads the rows of chat platform `platform` (see [`super::channels`]) into `c`; an enabled
/// platform needs its token, a webhook its secret.
fn load_channel(l: &Layers, platform: &str, c: &mut ChannelSettings) -> Result<(), ConfigError> {
    for (var, field) in vars::rows_of(platform) {
        let var = var.name;
        match field {
            Field::Enabled => l.set(var, &mut c.enabled, parse_bool)?,
            Field::Token => l.set(var, &mut c.token, |var, v| {
                let token = parse_secret(var, v)?;
                if let Some(token) = &token {
                    check_bot_token(platform, var, token.expose())?;
                }
                Ok(token)
            })?,
            Field::AllowFrom => l.set(var, &mut c.allow_from, parse_list)?,
            Field::Owners => l.set(var, &mut c.owners, parse_ids)?,
            Field::AllowChats | Field::AllowChannels => {
                l.set(var, &mut c.allow_chats, parse_list)?
            }
            Field::Proxy => l.set(var, &mut c.proxy, optional_url)?,
            Field::ApiBase => set_url(l, var, &mut c.api_base)?,
            Field::DropPendingUpdates => l.set(var, &mut c.drop_pending_updates, parse_bool)?,
            Field::CommandPrefix => l.set(var, &mut c.command_prefix, trimmed)?,
            Field::WebhookUrl => l.set(var, &mut c.webhook_url, parse_webhook_url)?,
            Field::WebhookSecret => {
                l.set(var, &mut c.webhook_secret, parse_secret)?;
                if let Some(s) = &c.webhook_secret {
                    check_webhook_secret(var, s.expose())?;
                }
            }
        }
    }
    let prefix = format!("BUB_{}", platform.to_ascii_uppercase());
    if c.webhook_url.is_some() && c.webhook_secret.is_none() {
        return Err(ConfigError::new(
            format!("{prefix}_WEBHOOK_SECRET"),
            format!("required with {prefix}_WEBHOOK_URL (the platform sends it with every update)"),
        ));
    }
    if c.enabled && c.token.is_none() {
        return Err(ConfigError::new(
            format!("{prefix}_TOKEN"),
            format!("required when {prefix}_ENABLED is true"),
        ));
    }
    Ok(())
}

/// A webhook URL: `https` (what the platforms post to), with a host.
fn parse_webhook_url(var: &str, v: &str) -> Result<Option<reqwest::Url>, ConfigError> {
    let v = v.trim();
    if v.is_empty() || is_null(v) {
        return Ok(None);
    }
    match reqwest::Url::parse(v) {
        Ok(url) if url.scheme() == "https" && url.host_str().is_some() => Ok(Some(url)),
        _ => Err(ConfigError::new(
            var,
            format!(
                "invalid URL {v:?} (expected https://HOST/PATH, the address the platform posts to)"
            ),
        )),
    }
}

/// A URL with a default: `null` keeps the default.
fn set_url(l: &Layers, var: &str, field: &mut MaskedUrl) -> Result<(), ConfigError> {
    if let Some(Some(url)) = l.parse(var, optional_url)? {
        *field = url;
    }
    Ok(())
}

/// A list of numeric user ids (owners are named by id: names can be changed by their holder).
fn parse_ids(var: &str, raw: &str) -> Result<Vec<String>, ConfigError> {
    let ids = parse_list(var, raw)?;
    if let Some(bad) = ids.iter().find(|id| id.parse::<u64>().is_err()) {
        return Err(ConfigError::new(
            var,
            format!("{bad:?} is not a numeric user id (owners are listed by id)"),
        ));
    }
    Ok(ids)
}

/// The first of `vars` that is set (and not blank).
fn first_secret(l: &Layers, vars: &[&str]) -> Result<Option<Secret>, ConfigError> {
    for var in vars {
        if let Some(key) = l.parse(var, parse_secret)?.flatten() {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// The process environment; entries that are not valid UTF-8 are skipped.
fn process_env() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

fn resolve_cwd(cwd: Option<&Path>) -> Result<PathBuf, ConfigError> {
    let cwd = match cwd {
        Some(cwd) => std::path::absolute(cwd),
        None => std::env::current_dir(),
    };
    cwd.map_err(|err| {
        ConfigError::new(
            "cwd",
            format!("cannot determine the current directory: {err}"),
        )
    })
}

/// `~` expansion of a path option (paths that are not UTF-8 are taken as they are).
fn expand(var: &str, path: &Path, user_home: Option<&Path>) -> Result<PathBuf, ConfigError> {
    match path.to_str() {
        Some(text) => expand_tilde(var, text, user_home),
        None => Ok(path.to_path_buf()),
    }
}

/// The workspace without `-w`: `BUB_WORKSPACE_PATH` from any source but the workspace's own
/// `.env` (`BUB_HOME/config.toml` included, so it holds from any directory), else the CWD.
fn workspace_path(
    config: &Layers,
    nearer: &Layers,
    cwd: &Path,
    user_home: Option<&Path>,
) -> Result<PathBuf, ConfigError> {
    const VAR: &str = "BUB_WORKSPACE_PATH";
    let mut above = config.clone();
    above.overlay(nearer.clone());
    let mut layers = read_home_config(&resolve_home(&above, cwd, user_home)?)?;
    layers.overlay(above);
    let set = layers.parse(VAR, |_, v| match is_null(v) {
        true => Ok(None),
        false => resolve_workspace(VAR, Path::new(v.trim()), cwd, user_home).map(Some),
    })?;
    match set.flatten() {
        Some(workspace) => Ok(workspace),
        None => resolve_workspace("--workspace", cwd, cwd, user_home),
    }
}

/// The workspace given by `var`: `~` expanded, absolute, canonical; it must be an existing
/// directory.
fn resolve_workspace(
    var: &str,
    path: &Path,
    cwd: &Path,
    user_home: Option<&Path>,
) -> Result<PathBuf, ConfigError> {
    let path = absolute(expand(var, path, user_home)?, cwd);
    let canonical = path.canonicalize().map_err(|_| {
        ConfigError::new(var, format!("directory does not exist: {}", path.display()))
    })?;
    if !canonical.is_dir() {
        return Err(ConfigError::new(
            var,
            format!("not a directory: {}", path.display()),
        ));
    }
    Ok(canonical)
}

/// The `--config` file: `~` expanded, absolute; it must exist.
fn resolve_config_file(
    file: &Path,
    cwd: &Path,
    user_home: Option<&Path>,
) -> Result<PathBuf, ConfigError> {
    const VAR: &str = "--config";
    let path = absolute(expand(VAR, file, user_home)?, cwd);
    if !path.exists() {
        return Err(ConfigError::new(
            VAR,
            format!("file does not exist: {}", path.display()),
        ));
    }
    if !path.is_file() {
        return Err(ConfigError::new(
            VAR,
            format!("not a file: {}", path.display()),
        ));
    }
    Ok(path)
}

/// `BUB_HOME` (default `~/.bub`): `~` expanded, absolute, canonical when it exists.
fn resolve_home(
    layers: &Layers,
    cwd: &Path,
    user_home: Option<&Path>,
) -> Result<PathBuf, ConfigError> {
    const VAR: &str = "BUB_HOME";
    let raw = layers
        .parse(VAR, optional_text)?
        .flatten()
        .unwrap_or_else(|| "~/.bub".to_owned());
    let path = absolute(expand_tilde(VAR, &raw, user_home)?, cwd);
    if !path.exists() {
        return Ok(path);
    }
    if !path.is_dir() {
        return Err(ConfigError::new(
            VAR,
            format!("not a directory: {}", path.display()),
        ));
    }
    path.canonicalize()
        .map_err(|err| ConfigError::new(VAR, format!("cannot resolve {}: {err}", path.display())))
}

/// `BUB_HOME/config.toml`'s variables, or nothing if there is no such file; it cannot set
/// `BUB_HOME` (it decides where that file is).
fn read_home_config(home: &Path) -> Result<Layers, ConfigError> {
    let home_config = home.join("config.toml");
    if !home_config.is_file() {
        return Ok(Layers::default());
    }
    let mut layers = sources::from_toml(&home_config, None)?;
    if layers.take("BUB_HOME").is_some() {
        return Err(ConfigError::new(
            "BUB_HOME",
            format!(
                "cannot be set in {} (it decides where that file is)",
                home_config.display()
            ),
        ));
    }
    Ok(layers)
}

/// A `.env` file's variables, or nothing if there is no such file.
fn read_dotenv(path: &Path) -> Result<Layers, ConfigError> {
    if path.is_file() {
        sources::from_dotenv(path)
    } else {
        Ok(Layers::default())
    }
}
