//! The model client: function calling, plain or streamed (SSE), with retries on temporary
//! failures, against three APIs ([`Api`]): OpenAI-compatible `chat/completions` (every provider
//! but two), Anthropic's Messages API (`anthropic:`) and Gemini's `generateContent` (`gemini:`).
//!
//! The module is split by concern: this file holds the request/response values and the error
//! type; [`message`] the typed conversation ([`ChatMessage`]) every API translates at its edge
//! ([`openai`], [`anthropic`], [`gemini`]: request bodies, replies, streamed events); [`client`]
//! does HTTP, timeouts and retries; [`response`] decodes a complete OpenAI reply and the error
//! bodies of all three; [`sse`] turns a byte stream into SSE events and accumulates OpenAI
//! deltas into a [`ChatResponse`]. Decoding is pure (no I/O) so it is unit-tested without a
//! server. [`chain`] sends a call on to the next model of a session's
//! chain when one fails (`BUB_FALLBACK_MODELS`).
//!
//! Invariants: the API key only ever leaves the process in its API's header (`Authorization`,
//! `x-api-key`, `x-goog-api-key`; never in a URL) — it is never part of an error message, a log
//! line or a `Debug` rendering; the per-call timeout covers the HTTP exchange only (tools run
//! outside it); an Anthropic request carries at most 4 `cache_control` breakpoints.

pub(crate) mod anthropic;
pub mod chain;
pub(crate) mod client;
pub(crate) mod gemini;
pub mod message;
pub(crate) mod openai;
pub(crate) mod response;
pub(crate) mod sse;
pub(crate) mod usage;

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use serde_json::Value;

pub use chain::ModelChain;
pub use client::LlmClient;
pub use message::{ChatMessage, Part, Role};
pub use usage::Usage;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST {base}/chat/completions`: every provider but the two below.
    OpenAi,
    /// `anthropic`: `POST {base}/v1/messages`.
    Anthropic,
    /// `gemini`: `POST {base}/v1beta/models/{model}:generateContent`.
    Gemini,
}

impl Api {
    /// The API of provider `provider` (case-insensitive).
    pub fn of(provider: &str) -> Self {
        if provider.eq_ignore_ascii_case("anthropic") {
            Api::Anthropic
        } else if provider.eq_ignore_ascii_case("gemini") {
            Api::Gemini
        } else {
            Api::OpenAi
        }
    }

    /// The variables that hold this API's key, for error messages.
    pub(crate) fn key_vars(self) -> &'static str {
        match self {
            Api::OpenAi => "BUB_API_KEY (or LLM_API_KEY / OPENROUTER_API_KEY)",
            Api::Anthropic => "BUB_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY)",
            Api::Gemini => "BUB_GEMINI_API_KEY (or GEMINI_API_KEY)",
        }
    }
}

/// Whether a call to `provider` at `base_url` needs an API key: not for `ollama`, nor for a
/// server on this machine or the local network (loopback, private, link-local or unique-local
/// addresses: llama.cpp, vLLM, LM Studio). The client and the start-up check both ask this.
pub(crate) fn needs_key(provider: &str, base_url: &str) -> bool {
    if provider.eq_ignore_ascii_case("ollama") {
        return false;
    }
    let Ok(url) = reqwest::Url::parse(base_url.trim()) else {
        return true;
    };
    let host = url.host_str().unwrap_or_default();
    let local_ip = match host.trim_start_matches('[').trim_end_matches(']').parse() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_private() || ip.is_link_local(),
        Ok(std::net::IpAddr::V6(ip)) => ip.is_unique_local() || ip.is_unicast_link_local(),
        Err(_) => false,
    };
    !(local_ip || crate::is_loopback(&url))
}

/// A fast estimate of the tokens of `text`, without a tokenizer: ASCII text at about four
/// bytes a token, any other character (CJK, say) a token each.
pub fn estimate_tokens(text: &str) -> u64 {
    let (ascii, other) = text.chars().fold((0u64, 0u64), |(a, o), c| {
        if c.is_ascii() { (a + 1, o) } else { (a, o + 1) }
    });
    ascii.div_ceil(4) + other
}

/// One model call: the conversation so far and the tools the model may call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The conversation, system prompt first.
    pub messages: Vec<ChatMessage>,
    /// OpenAI `tools[]` entries (`{"type":"function","function":{...}}`); omitted when empty.
    /// Shared: a session's tool list is built once and reused by every call.
    pub tools: ToolSpecs,
    /// `max_tokens` of the reply.
    pub max_tokens: u32,
}

/// A request's tool list: the OpenAI `tools[]` entries, and their JSON text written once when
/// the list is built (an OpenAI-compatible body sends it as it is: most of a request's bytes
/// would otherwise be serialised again on every call). Cloning shares both.
#[derive(Debug, Clone)]
pub struct ToolSpecs(Arc<(Vec<Value>, Box<serde_json::value::RawValue>)>);

impl ToolSpecs {
    /// The entries as JSON text, written when the list was built.
    pub(crate) fn json(&self) -> &serde_json::value::RawValue {
        &self.0.1
    }
}

impl FromIterator<Value> for ToolSpecs {
    fn from_iter<I: IntoIterator<Item = Value>>(entries: I) -> Self {
        let entries: Vec<Value> = entries.into_iter().collect();
        let json = serde_json::value::to_raw_value(&entries).expect("JSON values serialise");
        Self(Arc::new((entries, json)))
    }
}

impl From<Vec<Value>> for ToolSpecs {
    fn from(entries: Vec<Value>) -> Self {
        entries.into_iter().collect()
    }
}

impl Default for ToolSpecs {
    fn default() -> Self {
        Vec::new().into()
    }
}

impl std::ops::Deref for ToolSpecs {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        &self.0.0
    }
}

impl PartialEq for ToolSpecs {
    fn eq(&self, other: &Self) -> bool {
        self.0.0 == other.0.0
    }
}

/// A function call requested by the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's call id (`call_...`), echoed back in the `tool` message.
    pub id: String,
    /// The function name as offered to the model (`fs_read`).
    pub name: String,
    /// The raw JSON text of the arguments, exactly as the model sent it (may be invalid JSON).
    pub arguments: String,
    /// Gemini's `thoughtSignature` of the call, sent back with it on the next request.
    pub thought_signature: Option<String>,
}

/// What the model answered. Text and tool calls may both be present.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    /// The assistant text; `None` when the model sent none (or an empty string).
    pub content: Option<String>,
    /// Requested function calls, in the order the model listed them.
    pub tool_calls: Vec<ToolCall>,
    /// The tokens of the call, when the provider reported them.
    pub usage: Option<Usage>,
    /// `stop`, `tool_calls`, `length`, ... when the provider sent one.
    pub finish_reason: Option<String>,
}

/// A failed model call. Messages are short, human-readable and never contain the API key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The provider needs a key and none is configured.
    #[error("no API key for provider {provider}: set {}", Api::of(provider).key_vars())]
    MissingApiKey { provider: String },
    /// The client configuration is unusable (for example an invalid base URL).
    #[error("invalid model client configuration: {0}")]
    Config(String),
    /// No complete answer within the per-call timeout (after all attempts).
    #[error("model_timeout: no response within {seconds}s")]
    Timeout { seconds: f64 },
    /// The provider answered with an error status (or an error object).
    #[error("provider returned HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// A temporary error whose `Retry-After` asks for a longer wait than Bub waits
    /// ([`crate::time::MAX_SERVER_WAIT`]): not retried.
    #[error("{wait} (provider returned HTTP {status}: {message})")]
    RateLimited {
        status: u16,
        message: String,
        wait: crate::time::WaitTooLong,
    },
    /// The provider could not be reached (DNS, refused connection, reset, ...): the text says
    /// where and how (`cannot reach api.openai.com:443 (no proxy): connection refused`).
    #[error("{0}")]
    Connect(String),
    /// The provider answered 2xx but the body is not a usable chat completion.
    #[error("invalid response from the model provider: {0}")]
    InvalidResponse(String),
}

impl LlmError {
    /// A stable short name for tape error records and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::MissingApiKey { .. } | LlmError::Config(_) => "config",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Http { .. } => "provider",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Connect(_) => "connect",
            LlmError::InvalidResponse(_) => "invalid_response",
        }
    }

    /// Whether another attempt may succeed: 429, 5xx, connection failures and timeouts.
    pub fn is_temporary(&self) -> bool {
        match self {
            LlmError::Http { status, .. } => *status == 429 || *status >= 500,
            LlmError::Connect(_) | LlmError::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether the provider rejected the request because the conversation is too long for the
    /// model's context window (the caller may hand off and retry with a shorter context).
    pub(crate) fn is_context_overflow(&self) -> bool {
        let LlmError::Http { status, message } = self else {
            return false;
        };
        let m = message.to_lowercase();
        (400..500).contains(status)
            && [
                "context length",
                "context_length",
                "context window",
                "maximum context",
                "too many tokens",
                "prompt is too long",
                "exceeds the maximum number of tokens",
            ]
            .iter()
            .any(|needle| m.contains(needle))
    }
}

/// Everything the client needs to reach one model.
#[derive(Clone)]
pub struct LlmConfig {
    /// Provider name from `BUB_MODEL` (`openrouter`, `ollama`, ...).
    pub provider: String,
    /// Model name sent in the request (`qwen/qwen3-coder-next`).
    pub model: String,
    /// The API's base URL (a trailing `/` is ignored): OpenAI-compatible ones end in the
    /// version (`http://127.0.0.1:8080/v1`); Anthropic's and Gemini's do not
    /// (`https://api.anthropic.com`).
    pub base_url: String,
    /// The API key; required unless the provider is `ollama` or the base URL is local.
    pub api_key: Option<String>,
    /// Per-HTTP-call timeout; `None` waits forever.
    pub timeout: Option<Duration>,
    /// Attempts in total for temporary failures (at least one attempt is always made).
    pub max_retries: u32,
    /// First backoff delay; later ones double, with ±50 % jitter.
    pub retry_base_delay: Duration,
}

impl LlmConfig {
    /// A configuration with no key, no timeout, 3 attempts and a 500 ms base backoff.
    pub fn new(
        provider: impl Into<String>,
        model: impl Into<String>,
        base_url: impl Into<String>,
    ) -> Self {
        Self {
            provider: provider.into(),
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            timeout: None,
            max_retries: 3,
            retry_base_delay: Duration::from_millis(500),
        }
    }
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base_delay", &self.retry_base_delay)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_key() {
        let mut cfg = LlmConfig::new("openai", "gpt", "https://api.openai.com/v1");
        cfg.api_key = Some("sk-secret-123".into());
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("sk-secret-123"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn error_kinds_and_temporariness() {
        let http = |status| LlmError::Http {
            status,
            message: "x".into(),
        };
        assert_eq!(http(400).kind(), "provider");
        assert!(http(429).is_temporary());
        assert!(http(503).is_temporary());
        assert!(!http(401).is_temporary());
        assert!(LlmError::Timeout { seconds: 1.0 }.is_temporary());
        assert_eq!(LlmError::Connect("refused".into()).kind(), "connect");
        assert_eq!(
            LlmError::InvalidResponse("x".into()).kind(),
            "invalid_response"
        );
        assert_eq!(
            LlmError::MissingApiKey {
                provider: "openrouter".into()
            }
            .kind(),
            "config"
        );
        assert_eq!(
            LlmError::Timeout { seconds: 0.5 }.to_string(),
            "model_timeout: no response within 0.5s"
        );
    }

    #[test]
    fn context_overflow_is_recognised() {
        let e = LlmError::Http {
            status: 400,
            message: "This model's maximum context length is 8192 tokens".into(),
        };
        assert!(e.is_context_overflow());
        let e = LlmError::Http {
            status: 400,
            message: "bad tool schema".into(),
        };
        assert!(!e.is_context_overflow());
    }
}
