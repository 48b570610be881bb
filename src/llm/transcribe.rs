//! Speech to text: one OpenAI-compatible `POST <base>/audio/transcriptions` call (multipart
//! `file` and `model`; the answer is `{"text": …}` — OpenAI, Groq and local Whisper servers
//! share the shape). One attempt, bounded by the model timeout, over the model client's HTTP
//! settings ([`super::client::http_client`]: connect timeout, bounded keep-alive, no proxy for a
//! local server); errors never carry the key.

use std::path::Path;
use std::time::Duration;

use super::LlmError;
use super::response::error_message;

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
        let part = reqwest::multipart::Part::bytes(bytes).file_name(name.to_owned());
        let form = reqwest::multipart::Form::new()
            .text("model", self.model.clone())
            .part("file", part);
        let url = format!(
            "{}/audio/transcriptions",
            self.base_url.trim_end_matches('/')
        );
        let url = reqwest::Url::parse(&url)
            .map_err(|e| LlmError::Config(format!("transcription URL {url:?}: {e}")))?;
        let (http, route) = super::client::http_client(&url)?;
        let mut request = http.post(url.clone()).multipart(form);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        if let Some(timeout) = self.timeout {
            request = request.timeout(timeout);
        }
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                return LlmError::Timeout {
                    seconds: self.timeout.map_or(0.0, |t| t.as_secs_f64()),
                };
            }
            match crate::net::unreachable(&e, &url, &route) {
                Some(text) => LlmError::Connect(text),
                None => LlmError::Connect(format!(
                    "cannot reach the transcription service: {}",
                    e.without_url()
                )),
            }
        })?;
        let status = response.status();
        let body = response.text().await.map_err(|e| {
            LlmError::Connect(format!("the transcription service: {}", e.without_url()))
        })?;
        if !status.is_success() {
            return Err(LlmError::Http {
                status: status.as_u16(),
                message: error_message(&body),
            });
        }
        let json: serde_json::Value = serde_json::from_str(&body)
            .map_err(|_| LlmError::InvalidResponse("the transcription is not JSON".into()))?;
        json["text"]
            .as_str()
            .map(|t| t.trim().to_owned())
            .ok_or_else(|| LlmError::InvalidResponse("the transcription has no `text`".into()))
    }
}
