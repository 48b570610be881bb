//! A fake Gemini API (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`) for tests: answers from a FIFO script, records every
//! request, and checks what the real service checks.
//!
//! ```ignore
//! let fake = fake_gemini::start().await;                // key: fake_gemini::KEY
//! fake.push_tool_call("fs_read", json!({"path": "a.txt"}), Some("sig-1"));
//! fake.push_text("done");
//! let reqs = fake.wait_for_requests(2, WAIT).await;
//! ```
//!
//! Like the service: a request without `x-goog-api-key: KEY` is answered 401 (`UNAUTHENTICATED`);
//! a `key=` in the URL is refused 400 (the client must never put it there); a model turn whose
//! `functionCall` the fake gave a `thoughtSignature` must carry it back, and a turn answering
//! function calls must have one `functionResponse` per call, named like it — else 400
//! `INVALID_ARGUMENT`, without consuming the script. A streamed reply is one SSE `data:` chunk
//! per text piece, the function calls in one chunk, and a last chunk with `finishReason` and
//! `usageMetadata` (no `[DONE]`: the stream ends). [`FakeGemini::set_usage`] sets the usage.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde_json::{Value, json};

use super::wire::{
    RecordedRequest, Recorder, Reply, Script, ScriptedCall, Serving, StreamStyle, json_response,
    split_chars, sse_response,
};

/// The key the fake accepts.
pub const KEY: &str = "AIza-test-gemini-5555";
/// The text served when the script is empty.
pub const DEFAULT_REPLY: &str = "(fake gemini: no scripted reply)";

#[derive(Default)]
struct Shared {
    script: Script,
    recorder: Recorder,
    /// The signatures given, by the call's arguments.
    signatures: Mutex<HashMap<String, String>>,
    usage: Mutex<Option<Value>>,
}

/// A running fake; it stops when dropped.
pub struct FakeGemini {
    serving: Serving,
    shared: Arc<Shared>,
}

pub async fn start() -> FakeGemini {
    let shared = Arc::new(Shared::default());
    let app = Router::new().fallback(generate).with_state(shared.clone());
    FakeGemini {
        serving: Serving::start(app, "fake gemini").await,
        shared,
    }
}

/// The `usageMetadata` of every reply unless [`FakeGemini::set_usage`] says otherwise.
pub fn usage() -> Value {
    json!({"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15})
}

impl FakeGemini {
    /// `http://127.0.0.1:PORT` (the client adds `/v1beta/models/...`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.serving.addr)
    }

    pub fn push_text(&self, text: &str) {
        self.shared.script.push(Reply::Message {
            text: Some(text.to_owned()),
            calls: Vec::new(),
        });
    }

    /// Queues function calls `(name, args, thoughtSignature)`, after `text` if any.
    pub fn push_message(&self, text: Option<&str>, calls: &[(&str, Value, Option<&str>)]) {
        let calls = calls
            .iter()
            .map(|(name, args, signature)| ScriptedCall {
                id: String::new(),
                name: (*name).to_owned(),
                args: args.clone(),
                signature: signature.map(str::to_owned),
            })
            .collect();
        self.shared.script.push(Reply::Message {
            text: text.map(str::to_owned),
            calls,
        });
    }

    pub fn push_tool_call(&self, name: &str, args: Value, signature: Option<&str>) {
        self.push_message(None, &[(name, args, signature)]);
    }

    /// Queues a verbatim answer.
    pub fn push_raw(&self, status: u16, body: String, headers: Vec<(String, String)>) {
        self.shared.script.push(Reply::Raw {
            status,
            body,
            headers,
        });
    }

    pub fn set_usage(&self, usage: Value) {
        *self.shared.usage.lock().unwrap() = Some(usage);
    }

    pub fn recorded(&self) -> Vec<RecordedRequest> {
        self.shared.recorder.all()
    }

    /// The JSON bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.recorder.bodies_since(0)
    }

    pub fn request_count(&self) -> usize {
        self.shared.recorder.count()
    }

    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        self.shared
            .recorder
            .wait_for(n, timeout, "fake gemini")
            .await
    }
}

/// A Gemini error body.
pub fn error_body(code: u16, status: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "status": status}})
}

async fn generate(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = shared.recorder.record(&uri, &headers, &body);
    let refuse = |code: u16, status: &str, message: &str| {
        json_response(
            code,
            error_body(code, status, message).to_string(),
            Vec::new(),
        )
    };
    let query = uri.query().unwrap_or_default();
    let Some((model, method)) = uri
        .path()
        .strip_prefix("/v1beta/models/")
        .and_then(|rest| rest.split_once(':'))
    else {
        return refuse(404, "NOT_FOUND", "no such route");
    };
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" if query.split('&').any(|q| q == "alt=sse") => true,
        _ => return refuse(404, "NOT_FOUND", "no such method"),
    };
    if query.split('&').any(|q| q.starts_with("key=")) {
        return refuse(
            400,
            "INVALID_ARGUMENT",
            "the key belongs in the x-goog-api-key header",
        );
    }
    if headers.get("x-goog-api-key").and_then(|v| v.to_str().ok()) != Some(KEY) {
        return refuse(
            401,
            "UNAUTHENTICATED",
            "API key not valid. Please pass a valid API key.",
        );
    }
    if let Err(message) = check(&request, &shared.signatures.lock().unwrap()) {
        return refuse(400, "INVALID_ARGUMENT", &message);
    }
    let usage = shared.usage.lock().unwrap().clone().unwrap_or_else(usage);
    let (text, calls) = match shared.script.next(DEFAULT_REPLY) {
        Reply::Raw {
            status,
            body,
            headers,
        } => return json_response(status, body, headers),
        Reply::Message { text, calls } => (text, calls),
    };
    let mut signatures = shared.signatures.lock().unwrap();
    for call in &calls {
        if let Some(signature) = &call.signature {
            signatures.insert(call.args.to_string(), signature.clone());
        }
    }
    let call_parts: Vec<Value> = calls.iter().map(call_part).collect();
    let candidate = |parts: Vec<Value>, finish: bool| {
        let mut c = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if finish {
            c["finishReason"] = json!("STOP");
        }
        c
    };
    if !stream {
        let mut parts: Vec<Value> = text.iter().map(|t| json!({"text": t})).collect();
        parts.extend(call_parts);
        let body = json!({"candidates": [candidate(parts, true)], "usageMetadata": usage,
            "modelVersion": model});
        return json_response(200, body.to_string(), Vec::new());
    }
    let mut chunks: Vec<Value> = split_chars(text.as_deref().unwrap_or_default(), 3)
        .into_iter()
        .map(|piece| json!({"candidates": [candidate(vec![json!({"text": piece})], false)]}))
        .collect();
    if !call_parts.is_empty() {
        chunks.push(json!({"candidates": [candidate(call_parts, false)]}));
    }
    chunks.push(
        json!({"candidates": [candidate(vec![json!({"text": ""})], true)],
        "usageMetadata": usage, "modelVersion": model}),
    );
    let style = StreamStyle {
        crlf: true,
        ..StreamStyle::default()
    };
    sse_response(
        chunks.into_iter().map(|c| (None, c.to_string())).collect(),
        style,
    )
}

fn call_part(call: &ScriptedCall) -> Value {
    let mut part = json!({"functionCall": {"name": call.name, "args": call.args}});
    if let Some(signature) = &call.signature {
        part["thoughtSignature"] = json!(signature);
    }
    part
}

/// What the real API refuses with 400.
fn check(request: &Value, signatures: &HashMap<String, String>) -> Result<(), String> {
    let contents = request["contents"]
        .as_array()
        .ok_or("contents is required")?;
    let mut pending: Vec<&str> = Vec::new();
    for (i, content) in contents.iter().enumerate() {
        let parts = content["parts"].as_array().ok_or("parts is required")?;
        let responses: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.pointer("/functionResponse/name").and_then(Value::as_str))
            .collect();
        if !pending.is_empty() || !responses.is_empty() {
            let (mut want, mut got) = (pending.clone(), responses.clone());
            want.sort_unstable();
            got.sort_unstable();
            if want != got {
                return Err(format!(
                    "contents[{i}]: Please ensure that the number of function response parts is \
                     equal to the number of function call parts of the function call turn."
                ));
            }
        }
        pending.clear();
        if content["role"] == "model" {
            for part in parts {
                let Some(call) = part.get("functionCall") else {
                    continue;
                };
                pending.push(call["name"].as_str().unwrap_or_default());
                let given = signatures.get(&call["args"].to_string());
                if given.is_some_and(|s| part["thoughtSignature"].as_str() != Some(s)) {
                    return Err(format!(
                        "contents[{i}]: Function call is missing a thought_signature in \
                         functionCall parts."
                    ));
                }
            }
        }
    }
    Ok(())
}
