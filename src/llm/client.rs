//! The HTTP side of the model client: the endpoint and key header of each [`Api`], per-call
//! timeout, retries with jittered exponential backoff, and reading plain or streamed (SSE)
//! replies (each API's body and events are its own module's).
//!
//! Retries follow [`crate::net::retry`] with `max_retries` attempts in total for temporary
//! failures (429, 5xx — Anthropic's 529 "overloaded" included —, connection errors, timeouts);
//! other 4xx fail at once. The wait before retry `n` (0-based) is `retry_base_delay × 2^n ×
//! U(0.5, 1.5)` capped at 60 s, or the provider's `Retry-After` seconds when given — unless
//! those are more than 60 s: then the call fails at once with [`LlmError::RateLimited`] ("rate
//! limited: the server asks to wait N s", the rule of [`crate::time`]). A stream that has
//! already delivered text is never retried (the caller has shown that text).
//!
//! [`http_client`] builds the HTTP client of every call to a model provider: connect timeout,
//! bounded keep-alive pool, and no proxy for a server on this machine or the local network.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Response, Url};

use super::response::{error_message, parse_completion, parse_retry_after};
use super::sse::{Accumulate, SseDecoder, StreamAccumulator};
use super::{Api, ChatRequest, ChatResponse, LlmConfig, LlmError, anthropic, gemini, openai};
use crate::net::Route;
use crate::net::retry::{Failure, RetryPolicy, retry};
use crate::time::server_wait;

/// Longest backoff between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Connection establishment limit (the per-call timeout, when shorter, wins).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where streamed text goes (`None` for a plain call).
type TextSink<'a, 'f> = Option<&'a mut (dyn FnMut(&str) + Send + 'f)>;

/// A client for one provider + model. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct LlmClient {
    cfg: LlmConfig,
    api: Api,
    /// Where a plain call goes.
    endpoint: Url,
    /// Where a streamed call goes (Gemini's differs).
    stream_endpoint: Url,
    /// The key's header (`Authorization: Bearer <key>`, `x-api-key`, `x-goog-api-key`), the
    /// value marked sensitive.
    auth: Option<(HeaderName, HeaderValue)>,
    http: reqwest::Client,
    /// How `http` reaches the provider (for connection errors).
    route: Route,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// One failed attempt: the error plus the provider's `Retry-After`, if any.
struct AttemptError {
    error: LlmError,
    retry_after: Option<Duration>,
}

impl From<LlmError> for AttemptError {
    fn from(error: LlmError) -> Self {
        Self {
            error,
            retry_after: None,
        }
    }
}

impl From<reqwest::Error> for AttemptError {
    fn from(e: reqwest::Error) -> Self {
        let error = if e.is_builder() {
            LlmError::Config(describe(&e))
        } else {
            LlmError::Connect(format!("cannot reach the model provider: {}", describe(&e)))
        };
        error.into()
    }
}

impl LlmClient {
    /// Validates the configuration. A key is required unless [`super::needs_key`] says the
    /// provider or server needs none (`ollama`, a server on this machine or the local network).
    pub fn new(mut cfg: LlmConfig) -> Result<Self, LlmError> {
        cfg.base_url = cfg.base_url.trim().trim_end_matches('/').to_owned();
        let base = Url::parse(&cfg.base_url)
            .map_err(|e| LlmError::Config(format!("base URL {:?}: {e}", cfg.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.host().is_none() {
            return Err(LlmError::Config(format!(
                "base URL {:?} must be an http(s) URL",
                cfg.base_url
            )));
        }
        let api = Api::of(&cfg.provider);
        let url = |path: String| {
            Url::parse(&format!("{}{path}", cfg.base_url))
                .map_err(|e| LlmError::Config(format!("base URL {:?}: {e}", cfg.base_url)))
        };
        let (endpoint, stream_endpoint) = match api {
            Api::OpenAi | Api::Anthropic => {
                let path = if api == Api::OpenAi {
                    "/chat/completions"
                } else {
                    "/v1/messages"
                };
                let endpoint = url(path.into())?;
                (endpoint.clone(), endpoint)
            }
            Api::Gemini => {
                let model = format!("/v1beta/models/{}", cfg.model);
                (
                    url(format!("{model}:generateContent"))?,
                    url(format!("{model}:streamGenerateContent?alt=sse"))?,
                )
            }
        };
        cfg.api_key = cfg
            .api_key
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty());
        let auth = match &cfg.api_key {
            Some(key) => {
                let (name, value) = match api {
                    Api::OpenAi => (AUTHORIZATION, format!("Bearer {key}")),
                    Api::Anthropic => (HeaderName::from_static("x-api-key"), key.clone()),
                    Api::Gemini => (HeaderName::from_static("x-goog-api-key"), key.clone()),
                };
                let mut value = HeaderValue::from_str(&value).map_err(|_| {
                    LlmError::Config("the API key contains characters not allowed in HTTP".into())
                })?;
                value.set_sensitive(true);
                Some((name, value))
            }
            None if !super::needs_key(&cfg.provider, &cfg.base_url) => None,
            None => {
                return Err(LlmError::MissingApiKey {
                    provider: cfg.provider.clone(),
                });
            }
        };

        let (http, route) = http_client(&base)?;
        Ok(Self {
            cfg,
            api,
            endpoint,
            stream_endpoint,
            auth,
            http,
            route,
        })
    }

    /// The provider name (`openrouter`, `ollama`, ...).
    pub(crate) fn provider(&self) -> &str {
        &self.cfg.provider
    }

    /// The model name sent in requests.
    pub(crate) fn model(&self) -> &str {
        &self.cfg.model
    }

    /// One non-streamed call (`"stream": false`), with retries.
    pub async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.run(req, None).await
    }

    /// One streamed call (`"stream": true`, usage included). `on_text` receives each text
    /// delta as it arrives; the full response (text, reassembled tool calls, usage) is returned.
    pub async fn chat_stream(
        &self,
        req: &ChatRequest,
        mut on_text: impl FnMut(&str) + Send,
    ) -> Result<ChatResponse, LlmError> {
        self.run(req, Some(&mut on_text)).await
    }

    /// The request body, in the client's API.
    fn body(&self, req: &ChatRequest, stream: bool) -> Result<Vec<u8>, serde_json::Error> {
        match self.api {
            Api::OpenAi => {
                serde_json::to_vec(&openai::RequestBody::new(&self.cfg.model, req, stream))
            }
            Api::Anthropic => {
                serde_json::to_vec(&anthropic::request_body(&self.cfg.model, req, stream))
            }
            Api::Gemini => serde_json::to_vec(&gemini::request_body(req)),
        }
    }

    /// Decodes a complete 2xx reply.
    fn parse(&self, body: &str) -> Result<ChatResponse, LlmError> {
        match self.api {
            Api::OpenAi => parse_completion(body),
            Api::Anthropic => anthropic::parse_message(body),
            Api::Gemini => gemini::parse_response(body),
        }
    }

    /// A fresh accumulator for a streamed reply.
    fn accumulator(&self) -> Box<dyn Accumulate> {
        match self.api {
            Api::OpenAi => Box::new(StreamAccumulator::new()),
            Api::Anthropic => Box::<anthropic::Accumulator>::default(),
            Api::Gemini => Box::<gemini::Accumulator>::default(),
        }
    }

    /// The attempt loop shared by [`Self::chat`] and [`Self::chat_stream`].
    async fn run(
        &self,
        req: &ChatRequest,
        sink: TextSink<'_, '_>,
    ) -> Result<ChatResponse, LlmError> {
        let stream = sink.is_some();
        let body = self
            .body(req, stream)
            .map_err(|e| LlmError::Config(format!("cannot encode the request: {e}")))?;
        let policy = RetryPolicy::attempts(
            self.cfg.max_retries.max(1),
            self.cfg.retry_base_delay,
            MAX_BACKOFF,
        );
        tracing::debug!(
            provider = %self.cfg.provider,
            model = %self.cfg.model,
            messages = req.messages.len(),
            tools = req.tools.len(),
            stream,
            "model call"
        );
        let started = Instant::now();
        let mut attempts = 0u32;
        // Each attempt borrows the sink for as long as it runs, one after the other.
        let sink = &std::sync::Mutex::new(sink);
        let body = &body;
        let attempt = |n| {
            attempts = n;
            async move {
                let mut emitted = false;
                let mut forward = |text: &str| {
                    let mut sink = sink
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some(sink) = sink.as_mut() {
                        sink(text);
                    }
                };
                let call = self.attempt(body, stream.then_some(&mut forward), &mut emitted);
                let result = match self.cfg.timeout {
                    Some(limit) => match tokio::time::timeout(limit, call).await {
                        Ok(result) => result,
                        Err(_) => Err(LlmError::Timeout {
                            seconds: limit.as_secs_f64(),
                        }
                        .into()),
                    },
                    None => call.await,
                };
                let failure = match result {
                    Ok(resp) => return Ok(resp),
                    Err(failure) => failure,
                };
                let error = self.redact(failure.error);
                Err(match failure.retry_after {
                    _ if emitted || !error.is_temporary() => Failure::Final(error),
                    Some(wait) => Failure::After(error, wait),
                    None => Failure::Transient(error),
                })
            }
        };
        let on_retry = |error: &LlmError, attempt, delay: Duration| {
            crate::metrics::retry("model");
            tracing::warn!(
                attempt,
                max_attempts = policy.attempts,
                kind = error.kind(),
                error = %error,
                delay_ms = delay.as_millis() as u64,
                "model call failed, retrying"
            );
        };
        let result = retry(&policy, attempt, on_retry).await;
        match &result {
            Ok(resp) => tracing::debug!(
                attempts,
                elapsed_ms = started.elapsed().as_millis() as u64,
                finish_reason = resp.finish_reason.as_deref().unwrap_or(""),
                tool_calls = resp.tool_calls.len(),
                "model call done"
            ),
            Err(error) => tracing::warn!(
                attempts,
                kind = error.kind(),
                error = %error,
                "model call failed"
            ),
        }
        result
    }

    /// One HTTP exchange: send, check the status, read the body (plain or SSE).
    async fn attempt(
        &self,
        body: &[u8],
        sink: TextSink<'_, '_>,
        emitted: &mut bool,
    ) -> Result<ChatResponse, AttemptError> {
        let endpoint = match sink {
            Some(_) => &self.stream_endpoint,
            None => &self.endpoint,
        };
        let mut request = self
            .http
            .post(endpoint.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        request = match self.api {
            Api::OpenAi => request
                .header("HTTP-Referer", "https://bub.build/")
                .header("X-Title", "Bub"),
            Api::Anthropic => request.header("anthropic-version", anthropic::VERSION),
            Api::Gemini => request,
        };
        if let Some((name, value)) = &self.auth {
            request = request.header(name.clone(), value.clone());
        }
        if sink.is_some() {
            request = request.header(ACCEPT, "text/event-stream");
        }
        let resp = request.send().await.map_err(|e| {
            match crate::net::unreachable(&e, endpoint, &self.route) {
                Some(text) => LlmError::Connect(text).into(),
                None => AttemptError::from(e),
            }
        })?;
        let status = resp.status();
        if !status.is_success() {
            let retry_after = resp
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after)
                .map(server_wait);
            let text = resp.text().await.unwrap_or_default();
            let error = LlmError::Http {
                status: status.as_u16(),
                message: error_message(&text),
            };
            return Err(match retry_after {
                Some(Err(wait)) if error.is_temporary() => AttemptError {
                    error: LlmError::RateLimited {
                        status: status.as_u16(),
                        message: error_message(&text),
                        wait,
                    },
                    retry_after: None,
                },
                Some(Ok(wait)) => AttemptError {
                    error,
                    retry_after: Some(wait),
                },
                _ => error.into(),
            });
        }
        let is_json = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        match sink {
            Some(sink) if !is_json => read_stream(resp, self.accumulator(), sink, emitted).await,
            Some(sink) => {
                // The server ignored `"stream": true` and answered in one piece.
                let resp = self.parse(&resp.text().await?)?;
                if let Some(text) = &resp.content {
                    *emitted = true;
                    sink(text);
                }
                Ok(resp)
            }
            None => Ok(self.parse(&resp.text().await?)?),
        }
    }

    /// Removes the API key from an error message, should a provider or library ever echo it.
    fn redact(&self, error: LlmError) -> LlmError {
        let Some(key) = self.cfg.api_key.as_deref() else {
            return error;
        };
        let clean = |s: String| {
            if s.contains(key) {
                s.replace(key, "[redacted]")
            } else {
                s
            }
        };
        match error {
            LlmError::Http { status, message } => LlmError::Http {
                status,
                message: clean(message),
            },
            LlmError::RateLimited {
                status,
                message,
                wait,
            } => LlmError::RateLimited {
                status,
                message: clean(message),
                wait,
            },
            LlmError::Connect(m) => LlmError::Connect(clean(m)),
            LlmError::InvalidResponse(m) => LlmError::InvalidResponse(clean(m)),
            LlmError::Config(m) => LlmError::Config(clean(m)),
            other => other,
        }
    }
}

/// The HTTP client for a model provider at `base`, and how it
/// reaches it: a user agent, [`CONNECT_TIMEOUT`], a bounded keep-alive pool, and the
/// environment's proxy rules — except for a server on this machine or the local network, which
/// is reached directly (a proxy from the environment must not capture calls to it).
pub(crate) fn http_client(base: &Url) -> Result<(reqwest::Client, Route), LlmError> {
    let local = crate::is_loopback(base);
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("bub/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_max_idle_per_host(crate::HTTP_IDLE_CONNECTIONS)
        .pool_idle_timeout(crate::HTTP_IDLE_TIMEOUT);
    if local {
        builder = builder.no_proxy();
    }
    let http = builder
        .build()
        .map_err(|e| LlmError::Config(describe(&e)))?;
    Ok((http, if local { Route::Direct } else { Route::System }))
}

/// Reads an SSE body to the end (or the API's last event), feeding text deltas to `sink`.
async fn read_stream(
    resp: Response,
    mut acc: Box<dyn Accumulate>,
    sink: &mut (dyn FnMut(&str) + Send + '_),
    emitted: &mut bool,
) -> Result<ChatResponse, AttemptError> {
    let mut decoder = SseDecoder::new();
    let mut bytes = resp.bytes_stream();
    'read: while let Some(chunk) = bytes.next().await {
        for event in decoder.push(&chunk?) {
            feed(acc.as_mut(), &event, sink, emitted)?;
            if acc.is_done() {
                break 'read;
            }
        }
    }
    if !acc.is_done()
        && let Some(event) = decoder.finish()
    {
        feed(acc.as_mut(), &event, sink, emitted)?;
    }
    if !acc.is_complete() {
        return Err(LlmError::InvalidResponse(
            "the stream ended before the reply was complete".into(),
        )
        .into());
    }
    Ok(acc.finish())
}

/// Applies one event to the accumulator and forwards its text.
fn feed(
    acc: &mut dyn Accumulate,
    event: &super::sse::SseEvent,
    sink: &mut (dyn FnMut(&str) + Send + '_),
    emitted: &mut bool,
) -> Result<(), LlmError> {
    let text = acc.event(event)?;
    if !text.is_empty() {
        *emitted = true;
        sink(&text);
    }
    Ok(())
}

/// A reqwest error with its causes (`error sending request …: tcp connect error: …`).
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let msg = cause.to_string();
        if !text.contains(&msg) {
            text.push_str(": ");
            text.push_str(&msg);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(provider: &str, base: &str, key: Option<&str>) -> LlmConfig {
        let mut c = LlmConfig::new(provider, "m", base);
        c.api_key = key.map(str::to_owned);
        c
    }

    #[test]
    fn key_rules() {
        let missing = LlmClient::new(cfg("openrouter", "https://openrouter.ai/api/v1", None));
        assert_eq!(
            missing.unwrap_err(),
            LlmError::MissingApiKey {
                provider: "openrouter".into()
            }
        );
        let blank = LlmClient::new(cfg("openai", "https://api.openai.com/v1", Some("  ")));
        assert!(matches!(blank, Err(LlmError::MissingApiKey { .. })));
        assert!(LlmClient::new(cfg("ollama", "https://ollama.example/v1", None)).is_ok());
        for local in [
            "http://127.0.0.1:9/v1",
            "http://localhost:9/v1/",
            "http://[::1]:9/v1",
            "http://192.168.1.20:8080/v1",
            "http://10.0.0.5:8080/v1",
            "http://[fd00::5]:8080/v1",
        ] {
            assert!(
                LlmClient::new(cfg("openrouter", local, None)).is_ok(),
                "{local}"
            );
        }
        assert!(LlmClient::new(cfg("openrouter", "https://x/v1", Some("k"))).is_ok());
        let public = LlmClient::new(cfg("openai", "http://8.8.8.8/v1", None));
        assert!(matches!(public, Err(LlmError::MissingApiKey { .. })));
    }

    #[test]
    fn bad_base_urls() {
        for bad in ["not a url", "ftp://host/v1", ""] {
            let r = LlmClient::new(cfg("openai", bad, Some("k")));
            assert!(matches!(r, Err(LlmError::Config(_))), "{bad}");
        }
        let r = LlmClient::new(cfg("openai", "https://x/v1", Some("bad\nkey")));
        assert!(matches!(r, Err(LlmError::Config(m)) if !m.contains("bad")));
    }

    #[test]
    fn body_shape() {
        let c = LlmClient::new(cfg("openai", "http://127.0.0.1:1/v1/", None)).unwrap();
        assert_eq!(
            c.endpoint.as_str(),
            "http://127.0.0.1:1/v1/chat/completions"
        );
        let mut req = ChatRequest {
            messages: vec![crate::llm::ChatMessage::user("hi")],
            tools: Vec::new().into(),
            max_tokens: 64,
        };
        let body = |req: &ChatRequest, stream| {
            serde_json::from_slice::<serde_json::Value>(&c.body(req, stream).unwrap()).unwrap()
        };
        let plain = body(&req, false);
        let keys: Vec<_> = plain.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["model", "messages", "max_tokens", "stream"]);
        req.tools = vec![serde_json::json!({"type":"function"})].into();
        let streamed = body(&req, true);
        assert_eq!(streamed["tools"][0]["type"], "function");
        assert_eq!(streamed["stream_options"]["include_usage"], true);
    }

    #[test]
    fn call_futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let c = LlmClient::new(cfg("openai", "http://127.0.0.1:1/v1", None)).unwrap();
        let req = ChatRequest::default();
        assert_send(&c.chat(&req));
        let mut seen = String::new();
        assert_send(&c.chat_stream(&req, |t| seen.push_str(t)));
    }

    #[test]
    fn redaction_and_debug() {
        let c = LlmClient::new(cfg("openai", "https://x/v1", Some("sk-abc"))).unwrap();
        let e = c.redact(LlmError::Http {
            status: 401,
            message: "bad key sk-abc".into(),
        });
        assert_eq!(
            e.to_string(),
            "provider returned HTTP 401: bad key [redacted]"
        );
        assert!(!format!("{c:?}").contains("sk-abc"));
    }
}
