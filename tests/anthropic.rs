//! The native Anthropic client (`anthropic:<model>`) against the fake Messages API: the real
//! reqwest client for the wire format (blocks, cache breakpoints, streaming, usage, errors),
//! and the real binary doing a tool call.

use crate::support;

use std::time::Duration;

use bub::llm::{ChatMessage, ChatRequest, ChatResponse, LlmClient, LlmConfig, LlmError};
use serde_json::{Value, json};
use support::bub_env::{Env, stderr, stdout, texts};
use support::fake_anthropic::{self, FakeAnthropic, KEY, error_body};
use support::fake_telegram::private_text;
use support::wait::{WAIT, bounded};

fn config(fake: &FakeAnthropic) -> LlmConfig {
    let mut cfg = LlmConfig::new("anthropic", "claude-test", fake.base_url());
    cfg.api_key = Some(KEY.into());
    cfg.retry_base_delay = Duration::from_millis(10);
    cfg.timeout = Some(Duration::from_secs(5));
    cfg
}

fn client(fake: &FakeAnthropic) -> LlmClient {
    LlmClient::new(config(fake)).unwrap()
}

fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": format!("{name} tool"),
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})
}

fn request(messages: Vec<ChatMessage>) -> ChatRequest {
    ChatRequest {
        messages,
        tools: vec![tool("fs_list"), tool("fs_read")].into(),
        max_tokens: 300,
    }
}

async fn stream(client: &LlmClient, req: &ChatRequest) -> (ChatResponse, Vec<String>) {
    let mut pieces = Vec::new();
    let resp = bounded(client.chat_stream(req, |t| pieces.push(t.to_owned()))).await;
    (resp.unwrap(), pieces)
}

fn breakpoints(body: &Value) -> usize {
    body.to_string().matches("\"cache_control\"").count()
}

#[tokio::test]
async fn a_tool_round_trip_sends_the_exact_blocks() {
    let fake = fake_anthropic::start().await;
    let ids = fake.push_message(Some("Reading."), &[("fs_read", json!({"path": "a.txt"}))]);
    fake.push_text("It says hi.");
    let c = client(&fake);
    let mut messages = vec![
        ChatMessage::system("You are Bub."),
        ChatMessage::user("what is in a.txt?"),
    ];
    let first = bounded(c.chat(&request(messages.clone()))).await.unwrap();
    assert_eq!(first.content.as_deref(), Some("Reading."));
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    let call = &first.tool_calls[0];
    assert_eq!(
        (call.id.as_str(), call.name.as_str()),
        (ids[0].as_str(), "fs_read")
    );
    assert_eq!(call.arguments, r#"{"path":"a.txt"}"#);

    messages.push(ChatMessage::assistant("Reading.", first.tool_calls.clone()));
    messages.push(ChatMessage::tool_result(&call.id, "fs_read", "hi"));
    messages.push(ChatMessage::system("[note: it is 10:00]"));
    let second = bounded(c.chat(&request(messages))).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("It says hi."));

    let recorded = fake.wait_for_requests(2, WAIT).await;
    let r = &recorded[1];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.authorization, None);
    let body = &r.body;
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 300);
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are Bub.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        body["tools"][1],
        json!({"name": "fs_read", "description": "fs_read tool",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "cache_control": {"type": "ephemeral"}})
    );
    assert_eq!(body["tools"][0].get("cache_control"), None);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "what is in a.txt?",
                "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": ids[0], "name": "fs_read", "input": {"path": "a.txt"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": ids[0], "content": "hi",
                    "cache_control": {"type": "ephemeral"}},
                // A trailing note is after the breakpoint: the next request will not repeat it.
                {"type": "text", "text": "[note: it is 10:00]"}]},
        ])
    );
    assert_eq!(body.get("stream"), None);
    assert!(!body.to_string().contains(KEY));
}

#[tokio::test]
async fn each_request_reads_the_previous_one_from_the_cache_within_four_breakpoints() {
    let fake = fake_anthropic::start().await;
    let c = client(&fake);
    let mut messages = vec![ChatMessage::system("sys"), ChatMessage::user("go")];
    let mut previous_end: Option<Value> = None;
    for step in 0..6 {
        let ids = fake.push_tool_calls(&[
            ("fs_list", json!({"path": format!("d{step}")})),
            ("fs_read", json!({"path": format!("f{step}")})),
        ]);
        let r = bounded(c.chat(&request(messages.clone()))).await.unwrap();
        let body = fake.requests().pop().unwrap();
        // Tools, system, the last message — and from the second request on, the previous
        // request's end.
        let expected = if step == 0 { 3 } else { 4 };
        assert_eq!(breakpoints(&body), expected, "step {step}: {body}");
        let sent = body["messages"].as_array().unwrap();
        let last = sent.last().unwrap()["content"]
            .as_array()
            .unwrap()
            .last()
            .unwrap();
        assert!(
            last.get("cache_control").is_some(),
            "the last message is a breakpoint"
        );
        if let Some(end) = &previous_end {
            // The block the previous request ended with is still marked: its cache entry is read.
            let marked: Vec<&Value> = sent
                .iter()
                .filter_map(|m| m["content"].as_array()?.last())
                .filter(|b| b.get("cache_control").is_some())
                .collect();
            assert_eq!(marked.len(), 2);
            assert_eq!(marked[0], end, "step {step}");
        }
        previous_end = Some(last.clone());
        messages.push(ChatMessage::assistant("", r.tool_calls.clone()));
        for (id, call) in ids.iter().zip(&r.tool_calls) {
            messages.push(ChatMessage::tool_result(id, &call.name, "ok"));
        }
    }
    assert_eq!(fake.request_count(), 6, "the fake refused none");
}

#[tokio::test]
async fn an_image_is_a_base64_block() {
    let fake = fake_anthropic::start().await;
    fake.push_text("A cat.");
    let image = ChatMessage::user_with_images(
        "what is this?",
        vec![("image/jpeg".into(), "/9j/AA==".into())],
    );
    bounded(client(&fake).chat(&request(vec![image])))
        .await
        .unwrap();
    let body = &fake.requests()[0];
    assert_eq!(
        body["messages"][0]["content"],
        json!([{"type": "text", "text": "what is this?"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/AA=="},
                "cache_control": {"type": "ephemeral"}}])
    );
}

#[tokio::test]
async fn streamed_text_and_a_streamed_tool_call_with_cache_usage() {
    let fake = fake_anthropic::start().await;
    fake.set_usage(
        json!({"input_tokens": 12, "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4000, "output_tokens": 42}),
    );
    fake.push_text("Hello from the streaming fake, ünïcödé included.");
    fake.push_message(
        Some("Let me look."),
        &[("fs_read", json!({"path": "notes/a b.txt"}))],
    );
    let c = client(&fake);
    let req = request(vec![ChatMessage::user("hi")]);

    let (r, pieces) = stream(&c, &req).await;
    assert!(pieces.len() >= 3, "{pieces:?}");
    assert_eq!(
        pieces.concat(),
        "Hello from the streaming fake, ünïcödé included."
    );
    assert_eq!(r.content.as_deref(), Some(pieces.concat().as_str()));
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    let u = r.usage.unwrap();
    assert_eq!(
        (u.input, u.cache_read, u.cache_write, u.output),
        (4312, 4000, 300, 42)
    );
    assert_eq!(u.uncached(), 312);

    let (r, pieces) = stream(&c, &req).await;
    assert_eq!(pieces.concat(), "Let me look.");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].name, "fs_read");
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"notes/a b.txt"}"#);
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(fake.requests()[0]["stream"], true);
    assert_eq!(
        fake.recorded()[0].header("accept"),
        Some("text/event-stream")
    );
}

#[tokio::test]
async fn errors_overloaded_is_retried_a_stream_error_is_reported_a_bad_key_is_not_retried() {
    let fake = fake_anthropic::start().await;
    let overloaded = error_body("overloaded_error", "Overloaded");
    fake.push_raw(
        529,
        overloaded.to_string(),
        vec![("retry-after".into(), "0".into())],
    );
    fake.push_text("after the wait");
    let c = client(&fake);
    let req = request(vec![ChatMessage::user("hi")]);
    let r = bounded(c.chat(&req)).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("after the wait"));
    assert_eq!(fake.request_count(), 2);

    // An error event in the middle of a stream (the HTTP status was already 200), after text:
    // reported, not retried (the text was shown).
    let events = [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
        error_body("overloaded_error", "Overloaded"),
    ];
    let sse: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    let event_stream = vec![("content-type".to_string(), "text/event-stream".to_string())];
    fake.push_raw(200, sse, event_stream);
    let before = fake.request_count();
    let mut pieces = Vec::new();
    let err = bounded(c.chat_stream(&req, |t| pieces.push(t.to_owned())))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 529,
            message: "Overloaded".into()
        }
    );
    assert_eq!(pieces, ["Hel"]);
    assert_eq!(fake.request_count(), before + 1);

    let mut cfg = config(&fake);
    cfg.api_key = Some("sk-ant-wrong".into());
    let before = fake.request_count();
    let err = bounded(LlmClient::new(cfg).unwrap().chat(&req))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 401,
            message: "invalid x-api-key".into()
        }
    );
    assert_eq!(fake.request_count(), before + 1, "not retried");

    let too_long = error_body(
        "invalid_request_error",
        "prompt is too long: 250000 > 200000",
    );
    fake.push_raw(400, too_long.to_string(), vec![]);
    let err = bounded(c.chat(&req)).await.unwrap_err();
    assert!(err.to_string().contains("prompt is too long"), "{err}");
}

#[test]
fn a_missing_key_names_the_anthropic_variables() {
    let cfg = LlmConfig::new("anthropic", "claude", "https://api.anthropic.com");
    let err = LlmClient::new(cfg).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no API key for provider anthropic: set BUB_ANTHROPIC_API_KEY (or ANTHROPIC_API_KEY)"
    );
}

/// The environment of `bub run` with `anthropic:claude-test` against the fake.
async fn anthropic_env(fake: &FakeAnthropic) -> Env {
    let mut env = Env::cli().await;
    env.set("BUB_MODEL", "anthropic:claude-test");
    env.set("ANTHROPIC_API_KEY", KEY);
    env.set("BUB_ANTHROPIC_API_BASE", &fake.base_url());
    env
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_run_with_an_anthropic_model_reads_a_file_and_answers() {
    let fake = fake_anthropic::start().await;
    let env = anthropic_env(&fake).await;
    std::fs::write(env.workspace.join("a.txt"), "the secret word is plum\n").unwrap();
    let ids = fake.push_tool_calls(&[("fs_read", json!({"path": "a.txt"}))]);
    fake.push_text("The word is plum.");
    let out = env.run(&["run", "what is in a.txt?"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "The word is plum.");
    assert!(
        env.model.requests().is_empty(),
        "nothing went to the OpenAI-compatible server"
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0]["system"][0]["text"].as_str().unwrap().len() > 100);
    let sent = requests[1]["messages"].as_array().unwrap();
    let result = sent
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .find(|b| b["type"] == "tool_result")
        .expect("the tool result went back");
    assert_eq!(result["tool_use_id"], ids[0]);
    assert!(
        result["content"].as_str().unwrap().contains("plum"),
        "{result}"
    );
    // The tape keeps the call as the model made it.
    let tape = env.tape_text();
    assert!(
        tape.contains(&ids[0]) && tape.contains("The word is plum."),
        "{tape}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_anthropic_key_names_its_variable() {
    let fake = fake_anthropic::start().await;
    let mut env = Env::cli().await;
    env.set("BUB_MODEL", "anthropic:claude-test");
    env.set("BUB_ANTHROPIC_API_BASE", "https://api.anthropic.example");
    let out = env.run(&["run", "hi"]).await;
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("BUB_ANTHROPIC_API_KEY"), "{text}");
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_photo_reaches_an_anthropic_model_as_an_image_block_or_as_its_path_when_refused() {
    let fake = fake_anthropic::start().await;
    let mut env = Env::new().await;
    env.set("BUB_MODEL", "anthropic:claude-test");
    env.set("BUB_ANTHROPIC_API_KEY", KEY);
    env.set("BUB_ANTHROPIC_API_BASE", &fake.base_url());
    env.set("BUB_VISION", "on");
    env.telegram.add_file("ph1", crate::media::png(20, 10));
    fake.push_text("A green rectangle.");
    let refused = error_body(
        "invalid_request_error",
        "this model does not support images",
    );
    fake.push_raw(400, refused.to_string(), vec![]);
    fake.push_text("I cannot see it, but it is saved.");
    let daemon = env.start();
    let photo = private_text(42, 42, "").photo_file("ph1", 300, Some("what is this?"));
    env.telegram.push_message_update(photo);
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    env.telegram.add_file("ph2", crate::media::png(10, 10));
    let photo = private_text(42, 42, "").photo_file("ph2", 300, Some("and this?"));
    env.telegram.push_message_update(photo);
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert!(daemon.stop().await.success());
    assert_eq!(
        texts(&sent),
        ["A green rectangle.", "I cannot see it, but it is saved."]
    );

    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "one answered, one refused, one answered");
    let blocks = |r: &Value| -> Vec<Value> {
        let last = r["messages"].as_array().unwrap().last().unwrap().clone();
        last["content"].as_array().unwrap().clone()
    };
    let image = blocks(&requests[0])
        .into_iter()
        .find(|b| b["type"] == "image")
        .unwrap();
    assert_eq!(image["source"]["type"], "base64");
    assert_eq!(image["source"]["media_type"], "image/jpeg");
    assert!(!image["source"]["data"].as_str().unwrap().is_empty());
    assert!(blocks(&requests[1]).iter().any(|b| b["type"] == "image"));
    let retried = blocks(&requests[2]);
    assert!(retried.iter().all(|b| b["type"] != "image"), "{retried:?}");
    assert!(
        retried.iter().any(|b| b["text"]
            .as_str()
            .is_some_and(|t| t.contains("[The model cannot look at images; they are saved at:"))),
        "{retried:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_bub_stream_edits_the_answer_is_streamed_from_anthropic_into_the_chat() {
    let fake = fake_anthropic::start().await;
    let mut env = Env::new().await;
    env.set("BUB_MODEL", "anthropic:claude-test");
    env.set("BUB_ANTHROPIC_API_KEY", KEY);
    env.set("BUB_ANTHROPIC_API_BASE", &fake.base_url());
    env.set("BUB_STREAM", "edits");
    const FINAL: &str = "Streamed from the Messages API, piece by piece.";
    fake.push_text(FINAL);
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "stream it"));
    env.wait_for_chat_text(FINAL).await;
    assert!(daemon.stop().await.success());
    assert_eq!(fake.requests()[0]["stream"], true);
    assert_eq!(
        fake.recorded()[0].header("accept"),
        Some("text/event-stream")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn voice_with_an_anthropic_model_needs_its_own_transcription_server() {
    let fake = fake_anthropic::start().await;
    let mut env = Env::new().await;
    env.set("BUB_MODEL", "anthropic:claude-test");
    env.set("BUB_ANTHROPIC_API_KEY", KEY);
    env.set("BUB_ANTHROPIC_API_BASE", &fake.base_url());
    env.set("BUB_TRANSCRIBE_MODEL", "whisper-1");
    env.telegram.add_file("v1", vec![7u8; 300]);
    fake.push_text("I cannot hear it.");
    let daemon = env.start();
    let note = private_text(42, 42, "").voice_file("v1", 3, 300);
    env.telegram.push_message_update(note);
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert!(daemon.stop().await.success());
    let recorded = fake.recorded();
    assert!(
        recorded.iter().all(|r| r.path == "/v1/messages"),
        "no transcription call to Anthropic"
    );
    assert!(env.model.transcriptions().is_empty());
    let prompt = recorded[0].body.to_string();
    assert!(
        prompt.contains(
            "not transcribed: anthropic has no transcription endpoint; set BUB_TRANSCRIBE_API_BASE"
        ),
        "{prompt}"
    );
}
