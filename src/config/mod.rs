//! Configuration: built-in defaults → TOML file → `.env` files → process environment.
//!
//! Every setting keeps the reference's variable name (`BUB_MODEL`, `BUB_MAX_STEPS`, ...). A bad
//! value is a [`ConfigError`] naming the variable; the CLI turns it into exit code 2 before
//! anything starts serving.

use std::path::PathBuf;

/// A configuration problem, reported as one line naming the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration error: {var}: {message}")]
pub struct ConfigError {
    pub var: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(var: impl Into<String>, message: impl Into<String>) -> Self {
        Self { var: var.into(), message: message.into() }
    }
}

/// Log output format (`BUB_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// All settings of one process. Field docs name the environment variable.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `BUB_MODEL`: `provider:model`, default `openrouter:qwen/qwen3-coder-next`.
    pub model: String,
    /// First non-empty of `BUB_API_KEY`, `LLM_API_KEY`, `OPENROUTER_API_KEY`. Never logged.
    pub api_key: Option<String>,
    /// `BUB_API_BASE`: overrides the provider's default base URL.
    pub api_base: Option<String>,
    /// `BUB_MAX_TOKENS` (default 1024, ≥ 1).
    pub max_tokens: u32,
    /// `BUB_MODEL_TIMEOUT_SECONDS` (default 90; `null`/`0` = none). Covers the HTTP call only.
    pub model_timeout_seconds: Option<f64>,
    /// `BUB_SYSTEM_PROMPT` (default empty).
    pub system_prompt: String,
    /// `BUB_HOME` (default `~/.bub`), expanded and absolute.
    pub home: PathBuf,
    /// The resolved workspace (`-w`, default CWD).
    pub workspace: PathBuf,
    /// `BUB_TAPE_NAME` (default `bub`).
    pub tape_name: String,
    /// `BUB_MAX_STEPS` (default 20, ≥ 1).
    pub max_steps: u32,
    /// `BUB_PROACTIVE_RESPONSE` (default false).
    pub proactive_response: bool,
    /// `BUB_MESSAGE_DELAY_SECONDS` (default 10).
    pub message_delay_seconds: f64,
    /// `BUB_MESSAGE_DEBOUNCE_SECONDS` (default 1).
    pub message_debounce_seconds: f64,
    /// `BUB_ACTIVE_TIME_WINDOW_SECONDS` (default 60).
    pub active_time_window_seconds: f64,
    /// `BUB_OLLAMA_API_KEY`.
    pub ollama_api_key: Option<String>,
    /// `BUB_OLLAMA_API_BASE` (default `https://ollama.com/api`).
    pub ollama_api_base: String,
    pub telegram: TelegramSettings,
    pub discord: DiscordSettings,
    /// `BUB_LOG_LEVEL` (default `info`).
    pub log_level: String,
    /// `BUB_LOG_FORMAT` (`text` or `json`).
    pub log_format: LogFormat,
}

/// `BUB_TELEGRAM_*`.
#[derive(Debug, Clone, Default)]
pub struct TelegramSettings {
    pub enabled: bool,
    pub token: Option<String>,
    pub allow_from: Vec<String>,
    pub allow_chats: Vec<String>,
    pub proxy: Option<String>,
    /// `BUB_TELEGRAM_API_BASE` (default `https://api.telegram.org`).
    pub api_base: String,
}

/// `BUB_DISCORD_*`.
#[derive(Debug, Clone, Default)]
pub struct DiscordSettings {
    pub enabled: bool,
    pub token: Option<String>,
    pub allow_from: Vec<String>,
    pub allow_channels: Vec<String>,
    pub command_prefix: String,
    pub proxy: Option<String>,
    /// `BUB_DISCORD_API_BASE` (default `https://discord.com`).
    pub api_base: String,
}
