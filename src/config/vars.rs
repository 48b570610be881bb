//! The one table of configuration variables: each variable's name, group, default as a user
//! sees it, one-line meaning, and whether it is a list or a secret.
//!
//! The loader accepts exactly these names ([`super::sources`]), TOML arrays only for the lists,
//! and the secrets are what a child process never inherits ([`secret_vars`]); `bub help env`
//! prints the table ([`help`]) and `docs/configuration.md` holds its Markdown form (a test keeps
//! the two equal). A default in parentheses describes a value (`(none)`); any other default is
//! the literal value, which a test loads and compares with the built-in default.

use rapidfuzz::distance::osa;

use super::channels::Field;
use super::{DEFAULT_DISCORD_API_BASE, DEFAULT_TELEGRAM_API_BASE};

/// The groups `bub help env` shows, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Group {
    Model,
    Agent,
    Channels,
    Tools,
    Cost,
    Logging,
    Scale,
}

/// The groups in the order `bub help env` shows them, with their titles.
const GROUPS: [(Group, &str); 7] = [
    (Group::Model, "Model"),
    (Group::Agent, "Agent and data"),
    (Group::Channels, "Channels (Telegram, Discord)"),
    (Group::Tools, "Tools and security"),
    (Group::Cost, "Cost"),
    (Group::Logging, "Logging and monitoring"),
    (Group::Scale, "Scaling out"),
];

/// One configuration variable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Var {
    pub name: &'static str,
    pub group: Group,
    /// As shown to a user: a literal value, or a description in parentheses.
    pub default: &'static str,
    pub meaning: &'static str,
    /// A list: a JSON array or comma-separated (in TOML also an array).
    pub list: bool,
    /// A key, a token, or a URL that may hold credentials: never logged, never passed to a
    /// child process.
    pub secret: bool,
    /// A chat platform's variable: the platform and what it sets in its
    /// [`super::ChannelSettings`].
    pub channel: Option<(&'static str, Field)>,
}

const fn var(
    name: &'static str,
    group: Group,
    default: &'static str,
    meaning: &'static str,
) -> Var {
    Var {
        name,
        group,
        default,
        meaning,
        list: false,
        secret: false,
        channel: None,
    }
}

impl Var {
    const fn list(mut self) -> Self {
        self.list = true;
        self
    }

    const fn secret(mut self) -> Self {
        self.secret = true;
        self
    }

    /// A variable of chat platform `platform` that sets `field` of its settings.
    const fn of(mut self, platform: &'static str, field: Field) -> Self {
        self.channel = Some((platform, field));
        self
    }
}

use Field::{
    AllowChannels, AllowChats, AllowFrom, ApiBase, CommandPrefix, DropPendingUpdates, Enabled,
    Owners, Proxy, Token, WebhookSecret, WebhookUrl,
};
use Group::{Agent, Channels, Cost, Logging, Model, Scale, Tools};

/// Every variable Bub reads, grouped as `bub help env` shows them.
#[rustfmt::skip]
pub(crate) const VARS: &[Var] = &[
    var("BUB_MODEL", Model, "openrouter:qwen/qwen3-coder-next", "the model, as provider:model (openrouter, openai, anthropic, gemini, ollama, deepseek, groq, together, mistral, xai; any name with BUB_API_BASE)"),
    var("BUB_FALLBACK_MODELS", Model, "(none)", "up to 8 provider:model tried in order when a call still fails after its retries").list(),
    var("BUB_API_KEY", Model, "(none)", "the key of OpenAI-compatible providers; not needed for ollama or a server on this machine or the local network").secret(),
    var("LLM_API_KEY", Model, "(none)", "another name for BUB_API_KEY (used when BUB_API_KEY is unset)").secret(),
    var("OPENROUTER_API_KEY", Model, "(none)", "another name for BUB_API_KEY (used when both above are unset)").secret(),
    var("BUB_API_BASE", Model, "(the provider's)", "an OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1 (llama.cpp, vLLM, LM Studio)"),
    var("BUB_ANTHROPIC_API_KEY", Model, "(none)", "the key of anthropic: models").secret(),
    var("ANTHROPIC_API_KEY", Model, "(none)", "another name for BUB_ANTHROPIC_API_KEY").secret(),
    var("BUB_ANTHROPIC_API_BASE", Model, "https://api.anthropic.com", "the base URL of anthropic: models"),
    var("BUB_GEMINI_API_KEY", Model, "(none)", "the key of gemini: models").secret(),
    var("GEMINI_API_KEY", Model, "(none)", "another name for BUB_GEMINI_API_KEY").secret(),
    var("BUB_GEMINI_API_BASE", Model, "https://generativelanguage.googleapis.com", "the base URL of gemini: models"),
    var("BUB_MAX_TOKENS", Model, "8192", "the most tokens of one model answer (≥ 1); an answer cut there says so"),
    var("BUB_MODEL_TIMEOUT_SECONDS", Model, "90", "the timeout of one model HTTP call; 0 or null: none (at most 86400)"),
    var("BUB_CONTEXT_TOKENS", Model, "32000", "the model's context window in tokens (≥ 256)"),
    var("BUB_VISION", Model, "auto", "images from chats go to the model: auto (models matching BUB_VISION_MODELS), on, off"),
    var("BUB_VISION_MODELS", Model, "(a built-in list)", "model-id patterns that accept images, for BUB_VISION=auto").list(),
    var("BUB_TRANSCRIBE_MODEL", Model, "(none)", "the model that transcribes voice (e.g. whisper-1); none: voice is saved, not transcribed"),
    var("BUB_TRANSCRIBE_API_BASE", Model, "(the model's)", "the base URL of the transcription endpoint"),
    var("BUB_TRANSCRIBE_API_KEY", Model, "(the model's)", "the key of the transcription endpoint").secret(),
    var("BUB_HOME", Agent, "~/.bub", "the data directory: config.toml, tapes, jobs, memory, logs (not settable in its own config.toml)"),
    var("BUB_WORKSPACE_PATH", Agent, "(the current directory)", "the workspace when -w is not given (ignored in the workspace's own .env)"),
    var("BUB_TAPE_NAME", Agent, "bub", "the prefix of tape file names"),
    var("BUB_SYSTEM_PROMPT", Agent, "(empty)", "the first block of the system prompt"),
    var("BUB_MAX_STEPS", Agent, "20", "model steps per turn (≥ 1)"),
    var("BUB_TOOL_RESULT_MAX_CHARS", Agent, "16000", "a longer tool result reaches the model as its head and tail (≥ 1000)"),
    var("BUB_COMPACT_PERCENT", Agent, "75", "the share of the context window filled before Bub compacts the conversation (10-100)"),
    var("BUB_MEMORY_ENABLED", Agent, "true", "remembered facts are kept in BUB_HOME/memory and shown to the model"),
    var("BUB_LEARN_SKILLS", Agent, "false", "after a long owner's turn, one extra model call may save the work as a skill"),
    var("BUB_LEARN_MIN_STEPS", Agent, "3", "the tool calls a turn needs for BUB_LEARN_SKILLS (≥ 1)"),
    var("BUB_SCHEDULER_ENABLED", Agent, "true", "bub message also runs scheduled jobs"),
    var("BUB_SCHEDULER_CATCH_UP", Agent, "true", "runs missed while no scheduler ran fire once at start"),
    var("BUB_HEARTBEAT_MINUTES", Agent, "0", "every so many minutes, HEARTBEAT.md with an open `- [ ]` item gets a turn (0: off)"),
    var("BUB_HEARTBEAT_CHAT", Agent, "(none)", "the chat a heartbeat's answer goes to, as channel:chat (e.g. telegram:42)"),
    var("BUB_HEARTBEAT_ROLE", Agent, "guest", "the rights of a heartbeat's turn: guest or owner"),
    var("BUB_PROACTIVE_RESPONSE", Channels, "false", "true: the agent sends messages itself instead of Bub posting each answer"),
    var("BUB_STREAM", Channels, "off", "edits: answers appear in chats as they are written (one message, edited)"),
    var("BUB_MESSAGE_DELAY_SECONDS", Channels, "10", "follow-up debounce in groups (at most 3600)"),
    var("BUB_MESSAGE_DEBOUNCE_SECONDS", Channels, "1", "debounce after a mention (at most 3600)"),
    var("BUB_ACTIVE_TIME_WINDOW_SECONDS", Channels, "60", "how long after an answer a group's messages count as follow-ups (at most 86400)"),
    var("BUB_MENTION_KEYWORD", Channels, "bub", "a whole word that addresses the bot in groups (empty: none)"),
    var("BUB_NOTIFY_PAIRING", Channels, "true", "bub message tells the owners in their private chats of a new pairing request, or of a stranger addressing the bot in a group (once an hour per person)"),
    var("BUB_MAX_WAIT_SECONDS", Channels, "10", "a chat that keeps writing is answered at most this long after its first message"),
    var("BUB_SESSION_IDLE_SECONDS", Channels, "600", "an idle chat's session is released after this (at most 2592000)"),
    var("BUB_MEDIA_MAX_BYTES", Channels, "20971520", "a larger file from a chat is described, not downloaded (0: none is)"),
    var("BUB_TELEGRAM_ENABLED", Channels, "false", "bub message serves Telegram (needs BUB_TELEGRAM_TOKEN)").of("telegram", Enabled),
    var("BUB_TELEGRAM_TOKEN", Channels, "(none)", "the bot token from @BotFather: digits, ':', the rest (checked at start)").secret().of("telegram", Token),
    var("BUB_TELEGRAM_ALLOW_FROM", Channels, "(nobody)", "user ids or usernames admitted; * admits everyone (as guests)").list().of("telegram", AllowFrom),
    var("BUB_TELEGRAM_OWNERS", Channels, "(none)", "user ids with every tool and the shell").list().of("telegram", Owners),
    var("BUB_TELEGRAM_ALLOW_CHATS", Channels, "(every chat)", "chat ids Bub reads and writes").list().of("telegram", AllowChats),
    var("BUB_TELEGRAM_PROXY", Channels, "(none)", "an http(s) proxy for Telegram").secret().of("telegram", Proxy),
    var("BUB_TELEGRAM_API_BASE", Channels, DEFAULT_TELEGRAM_API_BASE, "the Telegram Bot API root").of("telegram", ApiBase),
    var("BUB_TELEGRAM_DROP_PENDING_UPDATES", Channels, "false", "skip messages sent while Bub was not running").of("telegram", DropPendingUpdates),
    var("BUB_TELEGRAM_WEBHOOK_URL", Channels, "(none: long polling)", "the https URL Telegram posts updates to; bub message serves its path on BUB_HTTP_LISTEN").of("telegram", WebhookUrl),
    var("BUB_TELEGRAM_WEBHOOK_SECRET", Channels, "(none)", "required with the webhook URL: sent by Telegram with every update (1-256 of A-Z a-z 0-9 _ -)").secret().of("telegram", WebhookSecret),
    var("BUB_DISCORD_ENABLED", Channels, "false", "bub message serves Discord (needs BUB_DISCORD_TOKEN)").of("discord", Enabled),
    var("BUB_DISCORD_TOKEN", Channels, "(none)", "the bot token: three parts joined by dots (checked at start)").secret().of("discord", Token),
    var("BUB_DISCORD_ALLOW_FROM", Channels, "(nobody)", "user ids or usernames admitted; * admits everyone (as guests)").list().of("discord", AllowFrom),
    var("BUB_DISCORD_OWNERS", Channels, "(none)", "user ids with every tool and the shell").list().of("discord", Owners),
    var("BUB_DISCORD_ALLOW_CHANNELS", Channels, "(every channel)", "channel ids Bub reads and writes").list().of("discord", AllowChannels),
    var("BUB_DISCORD_COMMAND_PREFIX", Channels, "!", "the prefix of bot commands").of("discord", CommandPrefix),
    var("BUB_DISCORD_PROXY", Channels, "(none)", "an http(s) proxy for Discord").secret().of("discord", Proxy),
    var("BUB_DISCORD_API_BASE", Channels, DEFAULT_DISCORD_API_BASE, "the Discord root (REST and gateway)").of("discord", ApiBase),
    var("BUB_SANDBOX", Tools, "guests", "whose bash runs in the Landlock sandbox: guests, all, off"),
    var("BUB_GUEST_TOOLS", Tools, "(the built-in guest set)", "the tools a guest's turn may use").list(),
    var("BUB_WEB_ALLOW_PRIVATE", Tools, "false", "web.fetch may reach loopback, private and link-local addresses"),
    var("BUB_FS_TIMEOUT_SECONDS", Tools, "10", "an fs.* call's file work is abandoned after this (> 0, at most 3600)"),
    var("BUB_MAX_SUBAGENTS", Tools, "4", "subagents running at once in the process (0: none; at most 64; 2 per session)"),
    var("BUB_MCP_TIMEOUT_SECONDS", Tools, "60", "an MCP server's start or one call of its tools fails after this (> 0, at most 3600)"),
    var("BUB_BASH_MAX_TIMEOUT_SECONDS", Tools, "3600", "the largest timeout of one bash call (1-86400)"),
    var("BUB_MAX_CONCURRENT_COMMANDS", Tools, "8", "bash commands running at once; more wait (1-1024); a quarter are kept for owners"),
    var("BUB_GUEST_BACKGROUND_COMMANDS", Tools, "1", "background commands one guest may have running at once (0-4; 0: none)"),
    var("BUB_SEARXNG_URL", Tools, "(none)", "a SearXNG instance (JSON format on) for web.search"),
    var("BUB_OLLAMA_API_KEY", Tools, "(none)", "enables Ollama's web search for web.search").secret(),
    var("BUB_OLLAMA_API_BASE", Tools, "https://ollama.com/api", "the Ollama web search API"),
    var("BUB_BUDGET_DAILY_TOKENS", Cost, "(none)", "tokens all model calls may use a day"),
    var("BUB_BUDGET_DAILY_USD", Cost, "(none)", "US dollars a day (needs a [prices] row for the model)"),
    var("BUB_BUDGET_CHAT_DAILY_TOKENS", Cost, "(none)", "tokens one chat's guests may use a day"),
    var("BUB_BUDGET_OWNERS", Cost, "false", "the chat budget applies to owners too"),
    var("BUB_LOG_LEVEL", Logging, "(info; warn for bub run)", "trace, debug, info, warn or error"),
    var("BUB_LOG_FORMAT", Logging, "text", "text or json"),
    var("BUB_HTTP_LISTEN", Logging, "(off)", "bub message/idle serve /healthz, /readyz and /metrics on HOST:PORT (a bare PORT: 127.0.0.1)"),
    var("BUB_CONSOLE", Logging, "false", "bub message also serves the web console (bub console serves it alone)"),
    var("BUB_CONSOLE_LISTEN", Logging, "127.0.0.1:8787", "where the console listens (HOST:PORT or a PORT); the same address as BUB_HTTP_LISTEN shares that listener"),
    var("BUB_CONSOLE_ALLOW_REMOTE", Logging, "false", "let the console listen on an address that is not loopback (put TLS in front; needs BUB_CONSOLE_PUBLIC_URL)"),
    var("BUB_CONSOLE_PUBLIC_URL", Logging, "(none: only the listen address)", "scheme://host[:port] browsers reach the console at (a TLS proxy, an SSH tunnel's port): the one other Host and Origin it accepts; https, and required, with BUB_CONSOLE_ALLOW_REMOTE"),
    var("BUB_DATABASE_URL", Scale, "(none: files in BUB_HOME)", "postgres://USER:PASSWORD@HOST:PORT/DB: replicas share their state there").secret(),
];

/// `BUB_*` names that are not settings but are read by Bub's command line, its container
/// (docker-compose.yml, entrypoint.sh) or its tests: they never get an "unknown variable"
/// warning.
pub(crate) const NOT_SETTINGS: &[&str] = &[
    // clap's env for --session-id.
    "BUB_SESSION_ID",
    // entrypoint.sh.
    "BUB_BIN",
    "BUB_WORKSPACE_DIR",
    "BUB_IDLE_STOP_TIMEOUT",
    // docker-compose.yml mount sources.
    "BUB_DATA_PATH",
    "BUB_AGENTS_HOME",
];

/// The chat platforms of the table (those with tagged rows), in the table's order.
pub(crate) fn platforms() -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    VARS.iter().filter_map(move |var| {
        let (platform, _) = var.channel?;
        (!seen.contains(&platform)).then(|| {
            seen.push(platform);
            platform
        })
    })
}

/// The rows of chat platform `platform`, with the field each sets.
pub(crate) fn rows_of(platform: &str) -> impl Iterator<Item = (&'static Var, Field)> + '_ {
    VARS.iter().filter_map(move |var| match var.channel {
        Some((p, field)) if p == platform => Some((var, field)),
        _ => None,
    })
}

/// The variable named `name` (case-insensitive).
pub(crate) fn find(name: &str) -> Option<&'static Var> {
    VARS.iter().find(|var| var.name.eq_ignore_ascii_case(name))
}

/// The names of the secret variables: removed from every child's environment, their values
/// redacted from tool output.
pub fn secret_vars() -> impl Iterator<Item = &'static str> {
    VARS.iter().filter(|var| var.secret).map(|var| var.name)
}

/// A `BUB_*` name (any case) that is neither a variable nor one of [`NOT_SETTINGS`]: most
/// likely a misspelling.
pub(crate) fn is_stray(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.starts_with("BUB_") && find(&upper).is_none() && !NOT_SETTINGS.contains(&&*upper)
}

/// The variable nearest to `name` (any case), when one is close: one edit away, plus one for
/// every eight letters (a swap of two letters is one edit). The one way Bub suggests a name —
/// for the environment, `.env` files and `config.toml` alike.
pub(crate) fn nearest(name: &str) -> Option<&'static Var> {
    let upper = name.to_ascii_uppercase();
    VARS.iter()
        .map(|var| {
            (
                osa::distance(upper.chars(), var.name.chars()),
                var.name,
                var,
            )
        })
        .min_by_key(|(distance, name, _)| (*distance, *name))
        .filter(|(distance, _, _)| *distance <= 1 + upper.len() / 8)
        .map(|(_, _, var)| var)
}

/// The warning for a stray name ([`is_stray`]), with the [`nearest`] variable.
pub(crate) fn stray_warning(name: &str) -> String {
    match nearest(name) {
        Some(known) => format!(
            "{name} is not a Bub variable (did you mean {}?)",
            known.name
        ),
        None => format!("{name} is not a Bub variable (see `bub help env`)"),
    }
}

/// The message for an unknown key of a TOML file at `path`, with the [`nearest`] setting in the
/// file's spelling (`max_steps`, the variable without `BUB_`, lowercase) and its variable.
pub(crate) fn unknown_key(key: &str, path: &std::path::Path) -> String {
    let as_var = match key.to_ascii_uppercase() {
        upper if upper.starts_with("BUB_") => upper,
        upper => format!("BUB_{upper}"),
    };
    let suggestion = match nearest(&as_var) {
        Some(known) => {
            let short = known.name.strip_prefix("BUB_").unwrap_or(known.name);
            format!(
                "did you mean {} ({})?",
                short.to_ascii_lowercase(),
                known.name
            )
        }
        None => "see `bub help env`".to_owned(),
    };
    format!("unknown setting in {} ({suggestion})", path.display())
}

/// `bub help env`: every variable with its default and meaning, by group; `markdown` gives the
/// tables of `docs/configuration.md`.
pub fn help(markdown: bool) -> String {
    let mut out = String::new();
    for (group, title) in GROUPS {
        let vars = VARS.iter().filter(|var| var.group == group);
        if markdown {
            out.push_str(&format!(
                "### {title}\n\n| variable | default | meaning |\n|---|---|---|\n"
            ));
            for var in vars {
                out.push_str(&format!(
                    "| `{}` | {} | {}{} |\n",
                    var.name,
                    markdown_default(var.default),
                    var.meaning.replace('|', "\\|"),
                    notes(var)
                ));
            }
        } else {
            out.push_str(&format!("{title}:\n"));
            for var in vars {
                out.push_str(&format!(
                    "  {}  [default: {}]\n      {}{}\n",
                    var.name,
                    var.default,
                    var.meaning,
                    notes(var)
                ));
            }
        }
        out.push('\n');
    }
    out.pop();
    out
}

/// A literal default as code; a described one as it is.
fn markdown_default(default: &str) -> String {
    if default.starts_with('(') {
        default.to_owned()
    } else {
        format!("`{default}`")
    }
}

fn notes(var: &Var) -> &'static str {
    match (var.list, var.secret) {
        (true, _) => " (a list: JSON array or comma-separated)",
        (false, true) => " (secret)",
        (false, false) => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LoadOptions, Settings};

    #[test]
    fn names_are_unique_and_every_group_has_variables() {
        for (i, var) in VARS.iter().enumerate() {
            assert!(
                VARS[i + 1..].iter().all(|other| other.name != var.name),
                "{} twice",
                var.name
            );
        }
        for (group, _) in GROUPS {
            assert!(VARS.iter().any(|var| var.group == group), "{group:?}");
        }
    }

    /// A platform's rows are together (the loader reads them in order, an enabled platform's
    /// token checked after them), named `BUB_<PLATFORM>_*`, with each field once, `ENABLED` and
    /// `TOKEN` among them.
    #[test]
    fn each_platform_has_its_rows_together() {
        for platform in platforms() {
            let at: Vec<usize> = (0..VARS.len())
                .filter(|&i| VARS[i].channel.is_some_and(|(p, _)| p == platform))
                .collect();
            assert_eq!(at.len(), at[at.len() - 1] - at[0] + 1, "{platform}'s rows");
            let prefix = format!("BUB_{}_", platform.to_ascii_uppercase());
            let fields: Vec<Field> = rows_of(platform).map(|(_, f)| f).collect();
            for (var, field) in rows_of(platform) {
                assert!(var.name.starts_with(&prefix), "{}", var.name);
                assert_eq!(
                    fields.iter().filter(|f| **f == field).count(),
                    1,
                    "{}",
                    var.name
                );
            }
            assert!(
                fields.contains(&Enabled) && fields.contains(&Token),
                "{platform}"
            );
        }
    }

    /// Every literal default, set explicitly, loads the same settings as leaving it unset.
    #[test]
    fn literal_defaults_are_the_built_in_ones() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let load = |vars: &[(&str, &str)]| {
            let mut env: std::collections::HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            env.insert("HOME".into(), root.display().to_string());
            let settings = Settings::load(&LoadOptions {
                workspace: Some(root.clone()),
                config_file: None,
                env: Some(env),
                cwd: Some(root.clone()),
                ..LoadOptions::default()
            })
            .unwrap_or_else(|e| panic!("{vars:?}: {e}"));
            // Where the model was set is not a value: `BUB_MODEL` set to the default says so.
            let settings = Settings {
                model_from: String::new(),
                ..settings
            };
            format!("{settings:?}")
        };
        let built_in = load(&[]);
        for var in VARS.iter().filter(|var| !var.default.starts_with('(')) {
            assert_eq!(load(&[(var.name, var.default)]), built_in, "{}", var.name);
        }
    }

    #[test]
    fn unknown_names_get_the_nearest_known_one() {
        assert!(is_stray("BUB_TELEGRAM_TOKNE"));
        assert_eq!(
            stray_warning("BUB_TELEGRAM_TOKNE"),
            "BUB_TELEGRAM_TOKNE is not a Bub variable (did you mean BUB_TELEGRAM_TOKEN?)"
        );
        assert_eq!(
            stray_warning("BUB_ZZZZZZZZZZZZZZZZZ"),
            "BUB_ZZZZZZZZZZZZZZZZZ is not a Bub variable (see `bub help env`)"
        );
        assert_eq!(
            stray_warning("BUB_FOO"),
            "BUB_FOO is not a Bub variable (see `bub help env`)"
        );
        let file = std::path::Path::new("/h/config.toml");
        assert_eq!(
            unknown_key("max_step", file),
            "unknown setting in /h/config.toml (did you mean max_steps (BUB_MAX_STEPS)?)"
        );
        assert_eq!(
            unknown_key("telegram_tokne", file),
            "unknown setting in /h/config.toml (did you mean telegram_token (BUB_TELEGRAM_TOKEN)?)"
        );
        assert_eq!(
            unknown_key("colour", file),
            "unknown setting in /h/config.toml (see `bub help env`)"
        );
        for known in [
            "BUB_MODEL",
            "bub_max_steps",
            "BUB_SESSION_ID",
            "HOME",
            "OPENROUTER_API_KEY",
        ] {
            assert!(!is_stray(known), "{known}");
        }
    }
}
