//! The real model client against the fake OpenAI-compatible server: replies, request shape,
//! retries, errors, timeouts and streaming.

use crate::support;

use std::time::{Duration, Instant};

use bub::llm::{ChatMessage, ChatRequest, ChatResponse, LlmClient, LlmConfig, LlmError};
use serde_json::{Value, json};
use support::fake_openai::{self, FakeOpenAi, StreamStyle};
use support::wait::bounded;

const KEY: &str = "sk-test-secret-4242";

fn config(fake: &FakeOpenAi) -> LlmConfig {
    let mut cfg = LlmConfig::new("openai", "fake-model", fake.base_url());
    cfg.api_key = Some(KEY.into());
    cfg.retry_base_delay = Duration::from_millis(10);
    cfg.timeout = Some(Duration::from_secs(5));
    cfg
}

fn client(fake: &FakeOpenAi) -> LlmClient {
    LlmClient::new(config(fake)).unwrap()
}

/// The tool calls of `resp` as `(id, name, raw arguments)`.
fn calls(resp: &ChatResponse) -> Vec<(&str, &str, &str)> {
    resp.tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect()
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("what time is it?"),
        ],
        tools: vec![json!({"type": "function", "function": {
            "name": "get_time", "description": "Current time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}})]
        .into(),
        max_tokens: 256,
    }
}

#[tokio::test]
async fn plain_text_reply() {
    let fake = fake_openai::start().await;
    fake.push_text("It is noon.");
    let resp = bounded(client(&fake).chat(&request())).await.unwrap();
    assert_eq!(resp.content.as_deref(), Some("It is noon."));
    assert!(resp.tool_calls.is_empty());
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    assert_served_usage(&fake, &resp);
}

#[tokio::test]
async fn empty_script_answers_the_default_text() {
    let fake = fake_openai::start().await;
    let resp = bounded(client(&fake).chat(&request())).await.unwrap();
    assert_eq!(resp.content.as_deref(), Some(fake_openai::DEFAULT_REPLY));
}

#[tokio::test]
async fn tool_calls_keep_the_raw_arguments() {
    let fake = fake_openai::start().await;
    let ids = fake.push_tool_calls(&[
        ("get_time", json!({"tz": "UTC"})),
        ("fs_read", json!({"path": "a b.txt"})),
    ]);
    assert_eq!(ids, ["call_1", "call_2"]);
    let resp = bounded(client(&fake).chat(&request())).await.unwrap();
    assert_eq!(resp.content, None);
    assert_eq!(resp.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        calls(&resp),
        [
            ("call_1", "get_time", r#"{"tz":"UTC"}"#),
            ("call_2", "fs_read", r#"{"path":"a b.txt"}"#)
        ]
    );
}

#[tokio::test]
async fn text_and_tool_calls_are_both_returned() {
    let fake = fake_openai::start().await;
    fake.push_text_and_tool_calls("Checking.", &[("get_time", json!({}))]);
    let resp = bounded(client(&fake).chat(&request())).await.unwrap();
    assert_eq!(resp.content.as_deref(), Some("Checking."));
    assert_eq!(resp.tool_calls.len(), 1);
}

#[tokio::test]
async fn null_content_and_missing_usage_are_tolerated() {
    let fake = fake_openai::start().await;
    let body =
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null}}]});
    fake.push_raw(200, body.to_string(), vec![]);
    let resp = bounded(client(&fake).chat(&request())).await.unwrap();
    assert_eq!(resp.content, None);
    assert_eq!(resp.usage, None);
    assert_eq!(resp.finish_reason, None);
}

#[tokio::test]
async fn request_body_and_headers() {
    let fake = fake_openai::start().await;
    fake.push_text("ok");
    let mut req = request();
    bounded(client(&fake).chat(&req)).await.unwrap();
    req.tools = Vec::new().into();
    bounded(client(&fake).chat(&req)).await.unwrap();

    let recorded = fake.wait_for_requests(2, Duration::from_secs(5)).await;
    let first = &recorded[0];
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.body["model"], "fake-model");
    assert_eq!(
        first.body["messages"],
        json!([{"role": "system", "content": "be brief"},
               {"role": "user", "content": "what time is it?"}])
    );
    assert_eq!(first.body["tools"], json!(*request().tools));
    assert_eq!(first.body["max_tokens"], 256);
    assert_eq!(first.body["stream"], false);
    assert_eq!(
        first.authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(first.header("http-referer"), Some("https://bub.build/"));
    assert_eq!(first.header("x-title"), Some("Bub"));
    assert!(
        first
            .header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    // The key travels only in the Authorization header.
    assert!(!first.body.to_string().contains(KEY));
    for (name, value) in &first.headers {
        assert!(
            name == "authorization" || !value.contains(KEY),
            "key leaked in {name}"
        );
    }
    assert!(
        recorded[1].body.get("tools").is_none(),
        "empty tools are omitted"
    );
}

#[tokio::test]
async fn local_server_needs_no_key() {
    let fake = fake_openai::start().await;
    let mut cfg = config(&fake);
    cfg.provider = "openrouter".into();
    cfg.api_key = None;
    let resp = bounded(LlmClient::new(cfg).unwrap().chat(&request()))
        .await
        .unwrap();
    assert!(resp.content.is_some());
    assert_eq!(fake.recorded()[0].authorization, None);
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried() {
    let fake = fake_openai::start().await;
    let err = json!({"error": {"message": "rate limited", "type": "rate_limit"}}).to_string();
    fake.push_raw(429, err, vec![("Retry-After".into(), "0.05".into())]);
    fake.push_text("after the wait");
    let started = Instant::now();
    let resp = bounded(client(&fake).chat(&request())).await.unwrap();
    assert_eq!(resp.content.as_deref(), Some("after the wait"));
    assert_eq!(fake.request_count(), 2);
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "Retry-After honoured"
    );
}

#[tokio::test]
async fn a_retry_after_beyond_the_maximum_fails_at_once() {
    let fake = fake_openai::start().await;
    let err = json!({"error": {"message": "slow down", "type": "rate_limit"}}).to_string();
    fake.push_raw(429, err, vec![("Retry-After".into(), "99999999999".into())]);
    fake.push_text("never served");
    let started = Instant::now();
    let err = bounded(client(&fake).chat(&request())).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "not waited for");
    assert_eq!(fake.request_count(), 1, "not retried");
    assert_eq!(err.kind(), "rate_limited");
    assert!(!err.is_temporary());
    let text = err.to_string();
    assert!(
        text.starts_with("rate limited: the server asks to wait 99999999999 s")
            && text.contains("HTTP 429: slow down"),
        "{text}"
    );
    assert!(!text.contains(KEY));
}

#[tokio::test]
async fn server_error_is_retried() {
    let fake = fake_openai::start().await;
    fake.push_raw(500, "internal oops".to_string(), vec![]);
    fake.push_text("recovered");
    let resp = bounded(client(&fake).chat(&request())).await.unwrap();
    assert_eq!(resp.content.as_deref(), Some("recovered"));
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn persistent_server_errors_exhaust_the_attempts() {
    let fake = fake_openai::start().await;
    for _ in 0..3 {
        fake.push_raw(503, "<html>bad gateway</html>".to_string(), vec![]);
    }
    let err = bounded(client(&fake).chat(&request())).await.unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 503,
            message: "<html>bad gateway</html>".into()
        }
    );
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn client_error_fails_at_once_with_the_provider_message() {
    let fake = fake_openai::start().await;
    let body =
        json!({"error": {"message": "Invalid model fake-model", "type": "invalid_request_error"}});
    fake.push_raw(400, body.to_string(), vec![]);
    fake.push_text("never served");
    let err = bounded(client(&fake).chat(&request())).await.unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 400,
            message: "Invalid model fake-model".into()
        }
    );
    assert_eq!(err.kind(), "provider");
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn an_echoed_key_is_redacted() {
    let fake = fake_openai::start().await;
    let body = json!({"error": {"message": format!("Incorrect API key provided: {KEY}")}});
    fake.push_raw(401, body.to_string(), vec![]);
    let err = bounded(client(&fake).chat(&request())).await.unwrap_err();
    assert!(!err.to_string().contains(KEY), "{err}");
    assert!(!format!("{err:?}").contains(KEY));
}

#[tokio::test]
async fn malformed_json_is_an_invalid_response() {
    let fake = fake_openai::start().await;
    fake.push_raw(200, "{\"choices\": [".to_string(), vec![]);
    let err = bounded(client(&fake).chat(&request())).await.unwrap_err();
    assert!(matches!(err, LlmError::InvalidResponse(_)), "{err:?}");
    assert_eq!(err.kind(), "invalid_response");
}

#[tokio::test]
async fn slow_replies_time_out_after_the_attempts() {
    let fake = fake_openai::start().await;
    fake.set_latency(Duration::from_secs(3));
    let mut cfg = config(&fake);
    cfg.timeout = Some(Duration::from_millis(100));
    cfg.max_retries = 2;
    let err = bounded(LlmClient::new(cfg).unwrap().chat(&request()))
        .await
        .unwrap_err();
    assert_eq!(err, LlmError::Timeout { seconds: 0.1 });
    assert_eq!(err.to_string(), "model_timeout: no response within 0.1s");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn one_slow_reply_is_retried() {
    let fake = fake_openai::start().await;
    fake.push_delay(Duration::from_secs(3));
    fake.push_text("slow");
    fake.push_text("fast");
    let mut cfg = config(&fake);
    cfg.timeout = Some(Duration::from_millis(150));
    let resp = bounded(LlmClient::new(cfg).unwrap().chat(&request()))
        .await
        .unwrap();
    assert_eq!(resp.content.as_deref(), Some("fast"));
}

#[tokio::test]
async fn closed_port_is_a_connect_error() {
    let port = support::closed_addr().port();
    let mut cfg = LlmConfig::new("openai", "m", format!("http://127.0.0.1:{port}/v1"));
    cfg.retry_base_delay = Duration::from_millis(5);
    cfg.max_retries = 2;
    let err = bounded(LlmClient::new(cfg).unwrap().chat(&request()))
        .await
        .unwrap_err();
    assert!(matches!(err, LlmError::Connect(_)), "{err:?}");
    assert_eq!(err.kind(), "connect");
}

#[tokio::test]
async fn remote_provider_without_key_is_refused() {
    let cfg = LlmConfig::new(
        "openrouter",
        "qwen/qwen3-coder-next",
        "https://openrouter.ai/api/v1",
    );
    let err = LlmClient::new(cfg).unwrap_err();
    assert_eq!(
        err,
        LlmError::MissingApiKey {
            provider: "openrouter".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "no API key for provider openrouter: set BUB_API_KEY (or LLM_API_KEY / OPENROUTER_API_KEY)"
    );
    assert_eq!(err.kind(), "config");
}

/// Streams `req` and returns the response plus the text pieces seen by the callback.
async fn stream(
    client: &LlmClient,
    req: &ChatRequest,
) -> (Result<ChatResponse, LlmError>, Vec<String>) {
    let mut pieces = Vec::new();
    let resp = bounded(client.chat_stream(req, |t| pieces.push(t.to_owned()))).await;
    (resp, pieces)
}

#[tokio::test]
async fn streamed_text_arrives_in_pieces_with_usage() {
    let fake = fake_openai::start().await;
    fake.push_text("Hello from the streaming fake, ünïcödé included.");
    let (resp, pieces) = stream(&client(&fake), &request()).await;
    let resp = resp.unwrap();
    assert_eq!(
        resp.content.as_deref(),
        Some("Hello from the streaming fake, ünïcödé included.")
    );
    assert!(pieces.len() >= 3, "{pieces:?}");
    assert_eq!(pieces.concat(), resp.content.clone().unwrap());
    assert_served_usage(&fake, &resp);
    assert_eq!(resp.finish_reason.as_deref(), Some("stop"));
    let body = &fake.requests()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn streamed_tool_calls_are_reassembled() {
    let fake = fake_openai::start().await;
    fake.push_tool_calls(&[
        ("get_time", json!({"tz": "Europe/Paris"})),
        ("fs_read", json!({"path": "x"})),
    ]);
    let (resp, pieces) = stream(&client(&fake), &request()).await;
    let resp = resp.unwrap();
    assert!(pieces.is_empty());
    assert_eq!(resp.content, None);
    assert_eq!(resp.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(
        calls(&resp),
        [
            ("call_1", "get_time", r#"{"tz":"Europe/Paris"}"#),
            ("call_2", "fs_read", r#"{"path":"x"}"#)
        ]
    );
    assert_served_usage(&fake, &resp);
}

#[tokio::test]
async fn streaming_survives_crlf_keep_alives_and_byte_splits() {
    let fake = fake_openai::start().await;
    fake.set_stream_style(StreamStyle {
        crlf: true,
        keep_alive: true,
        pieces_per_event: 7,
        pause: Duration::ZERO,
    });
    fake.push_text_and_tool_calls("Looking… ✓", &[("get_time", json!({"tz": "UTC"}))]);
    let (resp, pieces) = stream(&client(&fake), &request()).await;
    let resp = resp.unwrap();
    assert_eq!(pieces.concat(), "Looking… ✓");
    assert_eq!(resp.content.as_deref(), Some("Looking… ✓"));
    assert_eq!(resp.tool_calls[0].arguments, r#"{"tz":"UTC"}"#);
}

#[tokio::test]
async fn streaming_retries_before_any_text() {
    let fake = fake_openai::start().await;
    fake.push_raw(
        429,
        "{}".to_string(),
        vec![("retry-after".into(), "0".into())],
    );
    fake.push_text("second try");
    let (resp, pieces) = stream(&client(&fake), &request()).await;
    assert_eq!(resp.unwrap().content.as_deref(), Some("second try"));
    assert_eq!(pieces.concat(), "second try");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn truncated_stream_is_invalid_and_not_retried_after_text() {
    let fake = fake_openai::start().await;
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": Value::Null}]});
    let sse = vec![("content-type".to_string(), "text/event-stream".to_string())];
    fake.push_raw(200, format!("data: {chunk}\n\n"), sse);
    fake.push_text("not reached");
    let (resp, pieces) = stream(&client(&fake), &request()).await;
    assert!(
        matches!(resp, Err(LlmError::InvalidResponse(_))),
        "{resp:?}"
    );
    assert_eq!(pieces, ["partial"]);
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_accepted() {
    let fake = fake_openai::start().await;
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "whole"}}]});
    fake.push_raw(200, body.to_string(), vec![]);
    let (resp, pieces) = stream(&client(&fake), &request()).await;
    assert_eq!(resp.unwrap().content.as_deref(), Some("whole"));
    assert_eq!(pieces, ["whole"]);
}

#[tokio::test]
async fn the_fake_counts_the_prefix_shared_with_the_previous_request_as_cached() {
    let fake = fake_openai::start().await;
    let mut first = request();
    first.messages[0] = ChatMessage::system("a long and stable system prompt. ".repeat(100));
    let resp = bounded(client(&fake).chat(&first)).await.unwrap();
    assert_eq!(resp.usage.unwrap().cache_read, 0, "nothing before it");
    let mut second = first.clone();
    second
        .messages
        .push(ChatMessage::assistant("noted", Vec::new()));
    second.messages.push(ChatMessage::user("and now?"));
    let resp = bounded(client(&fake).chat(&second)).await.unwrap();
    let usage = resp.usage.unwrap();
    // ~3,400 bytes are shared: 850 tokens, 768 in whole blocks of 128.
    assert_eq!(usage.cache_read, 768, "{usage:?}");
    assert!(
        usage.input > usage.cache_read && !usage.estimated,
        "{usage:?}"
    );
    assert_eq!(
        fake.usages()[1]["prompt_tokens_details"]["cached_tokens"],
        768
    );
}

/// The response carries the usage the fake served for the (only) request.
fn assert_served_usage(fake: &fake_openai::FakeOpenAi, resp: &bub::llm::ChatResponse) {
    let served = &fake.usages()[0];
    let usage = resp.usage.expect("usage");
    assert_eq!(usage.input, served["prompt_tokens"].as_u64().unwrap());
    assert_eq!(usage.output, served["completion_tokens"].as_u64().unwrap());
    assert!(usage.input > 40, "{usage:?}: the request's bytes / 4");
}
