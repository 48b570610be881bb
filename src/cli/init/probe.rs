//! `bub init`'s checks over the network, each one offered and skippable: the model answers one
//! tiny request with the key given, and Telegram knows the bot token (`getMe`). A check that
//! cannot reach its server says so and is not a failure ("not checked"); only an answer that
//! rejects the key or the token, or refuses the request, is.
//!
//! The checks go where `bub run` would send the same calls: the base URLs of the environment
//! (`BUB_API_BASE`, `BUB_ANTHROPIC_API_BASE`, `BUB_GEMINI_API_BASE`, `BUB_TELEGRAM_API_BASE`
//! and `BUB_TELEGRAM_PROXY`) win over the file's, as they do when Bub runs.

use std::time::Duration;

#[cfg(feature = "telegram")]
use crate::channels::telegram::{self, TokenCheck};
use crate::config;
#[cfg(feature = "telegram")]
use crate::config::ChannelTable;
use crate::llm::{Api, ChatMessage, ChatRequest, LlmClient, LlmConfig, LlmError};

/// How long one check waits for its answer.
const WITHIN: Duration = Duration::from_secs(30);

/// What the model check found.
#[derive(Debug)]
pub(super) enum ModelCheck {
    /// The model answered (its first words, if any).
    Answered(String),
    /// 401 or 403: the key is not accepted.
    KeyRejected(String),
    /// Another refusal (an unknown model, a bad request): the provider's words.
    Refused(String),
    /// The server could not be reached (or did not answer in time).
    Unreachable(String),
    /// The server had a temporary failure (429, 5xx).
    NotChecked(String),
}

/// The base URL of `provider`'s API in effect: the environment's variable for its API, else
/// `file_base` (the base URL the file names, or the provider's default).
pub(super) fn model_base(provider: &str, file_base: Option<&str>) -> Option<String> {
    let var = match Api::of(provider) {
        Api::OpenAi => "BUB_API_BASE",
        Api::Anthropic => "BUB_ANTHROPIC_API_BASE",
        Api::Gemini => "BUB_GEMINI_API_BASE",
    };
    config::process_value(var).or_else(|| file_base.map(str::to_owned))
}

/// One request of a few tokens to `model` (`provider:id`) at `base` with `key`.
pub(super) fn model(model: &config::Model, base: &str, key: Option<&str>) -> ModelCheck {
    let mut cfg = LlmConfig::new(&model.provider, &model.id, base);
    cfg.api_key = key.map(str::to_owned);
    cfg.timeout = Some(WITHIN);
    cfg.max_retries = 1;
    let client = match LlmClient::new(cfg) {
        Ok(client) => client,
        Err(e) => return ModelCheck::Refused(e.to_string()),
    };
    let request = ChatRequest {
        messages: vec![ChatMessage::user("Reply with the one word: OK")],
        max_tokens: 16,
        ..ChatRequest::default()
    };
    match block_on(client.chat(&request)) {
        Err(e) => ModelCheck::NotChecked(format!("{e:#}")),
        Ok(Err(e @ (LlmError::Connect(_) | LlmError::Timeout { .. }))) => {
            ModelCheck::Unreachable(e.to_string())
        }
        Ok(Ok(answer)) => ModelCheck::Answered(answer.content.unwrap_or_default()),
        Ok(Err(
            e @ LlmError::Http {
                status: 401 | 403, ..
            },
        )) => ModelCheck::KeyRejected(e.to_string()),
        Ok(Err(e)) if e.is_temporary() => ModelCheck::NotChecked(e.to_string()),
        Ok(Err(e)) => ModelCheck::Refused(e.to_string()),
    }
}

/// `getMe` with `token` at the Bot API in effect.
#[cfg(feature = "telegram")]
pub(super) fn telegram_token(token: &str) -> TokenCheck {
    let mut channels = ChannelTable::defaults();
    let tg = channels.get_mut("telegram");
    tg.token = Some(config::Secret::new(token));
    if let Some(base) = config::process_value("BUB_TELEGRAM_API_BASE") {
        tg.api_base = base.into();
    }
    tg.proxy = config::process_value("BUB_TELEGRAM_PROXY").map(Into::into);
    match block_on(telegram::check_token(tg, WITHIN)) {
        Ok(Ok(check)) => check,
        Ok(Err(e)) | Err(e) => TokenCheck::NotChecked(format!("{e:#}")),
    }
}

/// Runs `work` on a runtime of its own (`bub init` is otherwise synchronous).
fn block_on<T>(work: impl Future<Output = T>) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(runtime.block_on(work))
}
