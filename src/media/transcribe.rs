//! Speech to text: one OpenAI-compatible `POST <base>/audio/transcriptions` call (multipart
//! `file` and `model`; the answer is `{"text": …}` — OpenAI, Groq and local Whisper servers
//! share the shape), on a client of the shared builder ([`crate::net::client`]: the
//! environment's proxy rules, a local server reached directly, the model timeout per attempt)
//! and retried by the one policy ([`crate::net::retry::TRANSCRIPTION`]: connection errors,
//! timeouts, 429 and 5xx answers). Errors never carry the key.

use std::path::Path;
use std::time::Duration;

use crate::llm::LlmError;
use crate::llm::response::error_message;
use crate::net::client::ClientSpec;
use crate::net::retry::{Failure, TRANSCRIPTION, retry};

/// Where and with what to transcribe.
#[derive(Debug, Clone)]
pub(crate) struct Transcriber {
    /// `BUB_TRANSCRIBE_MODEL` (`whisper-1`, `whisper-large-v3`, …).
    pub model: String,
    /// The base URL, ending before `/audio/transcriptions`.
    pub base_url: String,
    pub api_key: Option<String>,
    pub timeout: Option<Duration>,
}

impl Transcriber {
    /// The text spoken in the audio file at `path` (named `name` for the server, which guesses
    /// the format from its extension).
    pub(crate) async fn transcribe(&self, path: &Path, name: &str) -> Result<String, LlmError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|e| LlmError::Config(format!("cannot read the audio file: {e}")))?;
        let client = ClientSpec {
            base: &self.base_url,
            base_var: "BUB_TRANSCRIBE_API_BASE",
            proxy: None,
            connect_timeout: Duration::from_secs(30),
            timeout: self.timeout,
            retry: TRANSCRIPTION,
        }
        .build()
        .map_err(|e| LlmError::Config(format!("transcription: {}", e.why)))?;
        let base = client.base.as_str().trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}/audio/transcriptions"))
            .map_err(|e| LlmError::Config(format!("transcription URL: {e}")))?;
        let (url, bytes) = (&url, &bytes);
        let attempt = |_| async {
            let part = reqwest::multipart::Part::bytes(bytes.clone()).file_name(name.to_owned());
            let form = reqwest::multipart::Form::new()
                .text("model", self.model.clone())
                .part("file", part);
            let mut request = client.http.post(url.clone()).multipart(form);
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            let response = request.send().await.map_err(|e| {
                let seconds = self.timeout.map_or(0.0, |t| t.as_secs_f64());
                Failure::Transient(if e.is_timeout() {
                    LlmError::Timeout { seconds }
                } else if let Some(text) = crate::net::unreachable(&e, url, &client.route) {
                    LlmError::Connect(text)
                } else {
                    let e = e.without_url();
                    LlmError::Connect(format!("cannot reach the transcription service: {e}"))
                })
            })?;
            let status = response.status();
            let body = response.text().await.map_err(|e| {
                let e = e.without_url();
                Failure::Transient(LlmError::Connect(format!("the transcription service: {e}")))
            })?;
            if !status.is_success() {
                let error = LlmError::Http {
                    status: status.as_u16(),
                    message: error_message(&body),
                };
                return Err(match status.as_u16() {
                    429 | 500.. => Failure::Transient(error),
                    _ => Failure::Final(error),
                });
            }
            let json = serde_json::from_str::<serde_json::Value>(&body).unwrap_or_default();
            let text = json["text"].as_str().map(|t| t.trim().to_owned());
            let invalid = "the transcription is not JSON with a `text`";
            text.ok_or_else(|| Failure::Final(LlmError::InvalidResponse(invalid.into())))
        };
        let on_retry = |error: &LlmError, attempt, wait: Duration| {
            crate::metrics::retry("transcription");
            tracing::warn!(error = %error, attempt, retry_in_ms = wait.as_millis() as u64,
                "media.transcribe.failed: retrying");
        };
        retry(&client.retry, attempt, on_retry).await
    }
}
