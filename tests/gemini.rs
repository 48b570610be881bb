//! The native Gemini client (`gemini:<model>`) against the fake `generateContent` API: the real
//! reqwest client for the wire format (parts, thought signatures, streaming, usage, errors),
//! and the real binary doing a tool call.

use crate::support;

use std::time::Duration;

use bub::llm::{ChatMessage, ChatRequest, ChatResponse, LlmClient, LlmConfig, LlmError};
use bub::tape::{FileTape, Kind};
use serde_json::{Value, json};
use support::bub_env::{Env, stderr, stdout, texts};
use support::fake_gemini::{self, FakeGemini, KEY, error_body};
use support::fake_telegram::private_text;
use support::wait::{WAIT, bounded};

fn config(fake: &FakeGemini) -> LlmConfig {
    let mut cfg = LlmConfig::new("gemini", "gemini-test", fake.base_url());
    cfg.api_key = Some(KEY.into());
    cfg.retry_base_delay = Duration::from_millis(10);
    cfg.timeout = Some(Duration::from_secs(5));
    cfg
}

fn client(fake: &FakeGemini) -> LlmClient {
    LlmClient::new(config(fake)).unwrap()
}

fn request(messages: Vec<ChatMessage>) -> ChatRequest {
    let tool = json!({"type": "function", "function": {"name": "fs_read", "description": "Read a file",
        "parameters": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "additionalProperties": false, "required": ["path"],
            "properties": {"path": {"type": "string", "description": "the file"},
                "limit": {"type": ["integer", "null"], "format": "uint32", "default": null}}}}});
    ChatRequest {
        messages,
        tools: vec![tool].into(),
        max_tokens: 300,
    }
}

async fn stream(client: &LlmClient, req: &ChatRequest) -> (ChatResponse, Vec<String>) {
    let mut pieces = Vec::new();
    let resp = bounded(client.chat_stream(req, |t| pieces.push(t.to_owned()))).await;
    (resp.unwrap(), pieces)
}

#[tokio::test]
async fn a_tool_round_trip_sends_the_exact_parts_and_the_thought_signature_back() {
    let fake = fake_gemini::start().await;
    fake.push_message(
        Some("Reading."),
        &[("fs_read", json!({"path": "a.txt"}), Some("c2lnLTE="))],
    );
    fake.push_text("It says hi.");
    let c = client(&fake);
    let mut messages = vec![
        ChatMessage::system("You are Bub."),
        ChatMessage::user("what is in a.txt?"),
    ];
    let first = bounded(c.chat(&request(messages.clone()))).await.unwrap();
    assert_eq!(first.content.as_deref(), Some("Reading."));
    assert_eq!(first.finish_reason.as_deref(), Some("tool_calls"));
    let call = first.tool_calls[0].clone();
    assert_eq!(call.name, "fs_read");
    assert_eq!(call.arguments, r#"{"path":"a.txt"}"#);
    assert_eq!(call.thought_signature.as_deref(), Some("c2lnLTE="));
    assert!(call.id.starts_with("call_"), "{}", call.id);

    // The call as the tape records it, read back: the signature comes with it.
    let recorded =
        json!({"role": "assistant", "content": "Reading.", "tool_calls": [call.to_record()]});
    let dir = tempfile::tempdir().unwrap();
    let mut tape = FileTape::open_path(dir.path().join("t.jsonl"), "t".into()).unwrap();
    tape.append(Kind::Message, recorded, json!({})).unwrap();
    messages.extend(tape.context_messages().unwrap());
    messages.push(ChatMessage::tool_result(&call.id, "fs_read", "hi"));
    let second = bounded(c.chat(&request(messages))).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("It says hi."));

    let recorded = fake.wait_for_requests(2, WAIT).await;
    let r = &recorded[1];
    assert_eq!(r.path, "/v1beta/models/gemini-test:generateContent");
    assert_eq!(r.query, None, "no key in the URL");
    assert_eq!(r.header("x-goog-api-key"), Some(KEY));
    assert_eq!(r.authorization, None);
    let body = &r.body;
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "You are Bub."}]})
    );
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "what is in a.txt?"}]},
            {"role": "model", "parts": [{"text": "Reading."},
                {"functionCall": {"name": "fs_read", "args": {"path": "a.txt"}}, "thoughtSignature": "c2lnLTE="}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "fs_read", "response": {"output": "hi"}}}]},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"functionDeclarations": [{"name": "fs_read", "description": "Read a file",
            "parameters": {"type": "object", "required": ["path"], "properties": {
                "path": {"type": "string", "description": "the file"},
                "limit": {"nullable": true, "type": "integer"}}}}]}])
    );
    assert_eq!(body["generationConfig"], json!({"maxOutputTokens": 300}));
    for r in &fake.recorded() {
        let url = format!("{}?{}", r.path, r.query.clone().unwrap_or_default());
        assert!(!url.contains(KEY) && !r.body.to_string().contains(KEY));
    }
}

#[tokio::test]
async fn a_call_sent_back_without_its_signature_is_refused_like_the_service_does() {
    let fake = fake_gemini::start().await;
    fake.push_tool_call("fs_read", json!({"path": "b"}), Some("c2ln"));
    let c = client(&fake);
    let first = bounded(c.chat(&request(vec![ChatMessage::user("read b")])))
        .await
        .unwrap();
    let mut call = first.tool_calls[0].clone();
    call.thought_signature = None;
    let messages = vec![
        ChatMessage::user("read b"),
        ChatMessage::assistant("", vec![call.clone()]),
        ChatMessage::tool_result(&call.id, "fs_read", "B"),
    ];
    let err = bounded(c.chat(&request(messages))).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::Http { status: 400, message } if message.contains("thought_signature")),
        "{err}"
    );
}

#[tokio::test]
async fn an_image_is_inline_data() {
    let fake = fake_gemini::start().await;
    fake.push_text("A cat.");
    let image = ChatMessage::user_with_images(
        "what is this?",
        vec![("image/jpeg".into(), "/9j/AA==".into())],
    );
    bounded(client(&fake).chat(&request(vec![image])))
        .await
        .unwrap();
    assert_eq!(
        fake.requests()[0]["contents"][0]["parts"],
        json!([{"text": "what is this?"}, {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/AA=="}}])
    );
}

#[tokio::test]
async fn streamed_text_and_a_streamed_tool_call_with_cache_usage() {
    let fake = fake_gemini::start().await;
    fake.set_usage(
        json!({"promptTokenCount": 5000, "cachedContentTokenCount": 4096,
        "candidatesTokenCount": 30, "thoughtsTokenCount": 12, "totalTokenCount": 5042}),
    );
    fake.push_text("Hello from the streaming fake, ünïcödé included.");
    fake.push_message(
        Some("Let me look."),
        &[("fs_read", json!({"path": "x"}), Some("c2ln"))],
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
        (5000, 4096, 0, 42)
    );

    let (r, pieces) = stream(&c, &req).await;
    assert_eq!(pieces.concat(), "Let me look.");
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"x"}"#);
    assert_eq!(r.tool_calls[0].thought_signature.as_deref(), Some("c2ln"));
    assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
    let recorded = fake.recorded();
    assert_eq!(
        recorded[0].path,
        "/v1beta/models/gemini-test:streamGenerateContent"
    );
    assert_eq!(recorded[0].query.as_deref(), Some("alt=sse"));
}

#[tokio::test]
async fn errors_are_read_from_the_error_object_and_a_bad_key_is_not_retried() {
    let fake = fake_gemini::start().await;
    let busy = error_body(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted");
    fake.push_raw(
        429,
        busy.to_string(),
        vec![("retry-after".into(), "0".into())],
    );
    fake.push_text("after the wait");
    let c = client(&fake);
    let req = request(vec![ChatMessage::user("hi")]);
    assert_eq!(
        bounded(c.chat(&req)).await.unwrap().content.as_deref(),
        Some("after the wait")
    );
    assert_eq!(fake.request_count(), 2);

    let mut cfg = config(&fake);
    cfg.api_key = Some("AIza-wrong".into());
    let err = bounded(LlmClient::new(cfg).unwrap().chat(&req))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LlmError::Http {
            status: 401,
            message: "API key not valid. Please pass a valid API key.".into()
        }
    );
    assert_eq!(fake.request_count(), 3, "not retried");

    let long = error_body(
        400,
        "INVALID_ARGUMENT",
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
    );
    fake.push_raw(400, long.to_string(), vec![]);
    let err = bounded(c.chat(&req)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("exceeds the maximum number of tokens"),
        "{err}"
    );

    let cfg = LlmConfig::new("gemini", "g", "https://generativelanguage.googleapis.com");
    assert_eq!(
        LlmClient::new(cfg).unwrap_err().to_string(),
        "no API key for provider gemini: set BUB_GEMINI_API_KEY (or GEMINI_API_KEY)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bub_run_with_a_gemini_model_reads_a_file_and_answers() {
    let fake = fake_gemini::start().await;
    let mut env = Env::cli().await;
    env.set("BUB_MODEL", "gemini:gemini-test");
    env.set("GEMINI_API_KEY", KEY);
    env.set("BUB_GEMINI_API_BASE", &fake.base_url());
    std::fs::write(env.workspace.join("a.txt"), "the secret word is plum\n").unwrap();
    fake.push_tool_call("fs_read", json!({"path": "a.txt"}), Some("c2lnLXJ1bg=="));
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
    let contents = requests[1]["contents"].as_array().unwrap();
    let parts: Vec<&Value> = contents
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap())
        .collect();
    let call = parts
        .iter()
        .find(|p| p.get("functionCall").is_some())
        .unwrap();
    assert_eq!(
        call["thoughtSignature"], "c2lnLXJ1bg==",
        "the signature came back from the tape"
    );
    let response = parts
        .iter()
        .find(|p| p.get("functionResponse").is_some())
        .unwrap();
    assert_eq!(response["functionResponse"]["name"], "fs_read");
    assert!(response.to_string().contains("plum"), "{response}");
    assert!(
        env.tape_text()
            .contains("\"thought_signature\":\"c2lnLXJ1bg==\"")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_photo_reaches_a_gemini_model_as_inline_data() {
    let fake = fake_gemini::start().await;
    let mut env = Env::new().await;
    env.set("BUB_MODEL", "gemini:gemini-test");
    env.set("BUB_GEMINI_API_KEY", KEY);
    env.set("BUB_GEMINI_API_BASE", &fake.base_url());
    env.set("BUB_VISION", "on");
    env.telegram.add_file("ph1", crate::media::png(20, 10));
    fake.push_text("A green rectangle.");
    let daemon = env.start();
    let photo = private_text(42, 42, "").photo_file("ph1", 300, Some("what is this?"));
    env.telegram.push_message_update(photo);
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert!(daemon.stop().await.success());
    assert_eq!(texts(&sent), ["A green rectangle."]);
    let request = &fake.requests()[0];
    let turn = request["contents"].as_array().unwrap().last().unwrap();
    let parts = turn["parts"].as_array().unwrap();
    assert!(parts[0]["text"].as_str().unwrap().contains("what is this?"));
    assert_eq!(parts[1]["inlineData"]["mimeType"], "image/jpeg");
    assert!(!parts[1]["inlineData"]["data"].as_str().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_bub_stream_edits_the_answer_is_streamed_from_gemini_into_the_chat() {
    let fake = fake_gemini::start().await;
    let mut env = Env::new().await;
    env.set("BUB_MODEL", "gemini:gemini-test");
    env.set("BUB_GEMINI_API_KEY", KEY);
    env.set("BUB_GEMINI_API_BASE", &fake.base_url());
    env.set("BUB_STREAM", "edits");
    const FINAL: &str = "Streamed from streamGenerateContent, piece by piece.";
    fake.push_text(FINAL);
    let daemon = env.start();
    env.telegram
        .push_message_update(private_text(42, 42, "stream it"));
    env.wait_for_chat_text(FINAL).await;
    assert!(daemon.stop().await.success());
    let recorded = fake.recorded();
    assert_eq!(
        recorded[0].path,
        "/v1beta/models/gemini-test:streamGenerateContent"
    );
    assert_eq!(recorded[0].query.as_deref(), Some("alt=sse"));
}
