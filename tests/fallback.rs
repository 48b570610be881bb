//! The fallback chain and a model per session, through the `bub` binary against the fake
//! OpenAI-compatible server (one server, several models: each request names its model, and
//! `fail_model` takes one model down): a primary that answers 500 or 401 hands the request to
//! `BUB_FALLBACK_MODELS`, the tape names the model that answered and the fallback; the cooldown
//! skips the failed model on the next turn; a context-length error does not fall back; `,model`
//! switches a session across restarts, and a guest's `/model` is refused. The chain itself,
//! with the real client and an injected clock, in `chain_*` at the end.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bub::llm::chain::{COOLDOWN, Cooldowns, ModelChain, label};
use bub::llm::{ChatRequest, LlmClient, LlmConfig};
use serde_json::{Value, json};
use support::bub_env::{Env, WAIT, assert_exit, stdout, texts};
use support::fake_openai::{self, DEFAULT_REPLY, FakeOpenAi};
use support::fake_telegram::private_text;
use support::wait::bounded;

/// `bub run` with `openai:primary`, then `openai:backup`.
async fn chain_env() -> Env {
    let mut env = Env::cli().await;
    env.set("BUB_MODEL", "openai:primary");
    env.set("BUB_FALLBACK_MODELS", "openai:backup");
    env
}

/// The data of every event `name` on the tape.
fn events(env: &Env, name: &str) -> Vec<Value> {
    env.tape_entries()
        .into_iter()
        .filter(|e| e["kind"] == "event" && e["payload"]["name"] == name)
        .map(|e| e["payload"]["data"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_primary_answering_500_hands_the_request_to_the_fallback() {
    let env = chain_env().await;
    env.model.fail_model("primary", 500, "upstream exploded");
    let out = env.run(&["run", "hello"]).await;
    assert_exit(&out, 0, "");
    assert!(stdout(&out).contains(DEFAULT_REPLY), "{}", stdout(&out));
    // The primary's retries, then the same request to the fallback.
    assert_eq!(
        env.model.models(),
        ["primary", "primary", "primary", "backup"]
    );
    let requests = env.model.requests();
    assert_eq!(requests[0]["messages"], requests[3]["messages"]);
    let fallback = events(&env, "model.fallback");
    assert_eq!(fallback.len(), 1, "{fallback:?}");
    assert_eq!(fallback[0]["from"], "openai:primary");
    assert_eq!(fallback[0]["to"], "openai:backup");
    assert_eq!(fallback[0]["reason"], "provider");
    assert!(
        fallback[0]["error"]
            .as_str()
            .unwrap()
            .contains("HTTP 500: upstream exploded")
    );
    let run = events(&env, "run");
    assert_eq!(run.len(), 1);
    assert_eq!(
        (&run[0]["provider"], &run[0]["model"]),
        (&json!("openai"), &json!("backup"))
    );
    assert_eq!(run[0]["status"], "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_401_falls_back_at_once_and_a_context_length_error_does_not() {
    let env = chain_env().await;
    env.model.fail_model("primary", 401, "invalid api key");
    let out = env.run(&["run", "hello"]).await;
    assert_exit(&out, 0, "");
    assert_eq!(
        env.model.models(),
        ["primary", "backup"],
        "401 is not retried"
    );
    assert_eq!(
        events(&env, "model.fallback")[0]["error"],
        "provider returned HTTP 401: invalid api key"
    );

    let env = chain_env().await;
    let overflow = "This model's maximum context length is 8192 tokens";
    env.model.fail_model("primary", 400, overflow);
    let out = env.run(&["run", "hello"]).await;
    assert_exit(&out, 1, "maximum context length");
    let models = env.model.models();
    assert!(
        !models.is_empty() && models.iter().all(|m| m == "primary"),
        "{models:?}"
    );
    assert!(events(&env, "model.fallback").is_empty());
    let run = events(&env, "run");
    assert_eq!(
        (&run[0]["status"], &run[0]["model"]),
        (&json!("error"), &json!("primary"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cooldown_skips_a_failed_model_on_the_next_turn() {
    let env = chain_env().await;
    env.model.fail_model("primary", 503, "overloaded");
    let mut cmd = env.command(&["chat"]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"first\nsecond\n,model\n,quit\n")
        .await
        .unwrap();
    drop(stdin);
    let out = bounded(child.wait_with_output()).await.unwrap();
    assert!(out.status.success());
    // The second turn went straight to the fallback: no request reached the primary.
    assert_eq!(
        env.model.models(),
        ["primary", "primary", "primary", "backup", "backup"]
    );
    assert_eq!(events(&env, "model.fallback").len(), 1);
    let shown = stdout(&out);
    assert!(
        shown.contains("model: openai:primary (cooling down after a failure) (BUB_MODEL)"),
        "{shown}"
    );
    assert!(shown.contains("fallbacks: openai:backup"), "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn model_switches_the_session_across_restarts() {
    let env = chain_env().await;
    let out = env.run(&["run", ",model"]).await;
    assert!(
        stdout(&out).contains("model: openai:primary (BUB_MODEL)\nfallbacks: openai:backup"),
        "{}",
        stdout(&out)
    );
    // A failed command goes to the model with its error, as every failed command does.
    env.run(&["run", ",model gpt-4o"]).await;
    let prompt = env.model_prompts().pop().unwrap();
    assert!(prompt.contains("expected provider:model"), "{prompt}");
    assert!(!env.home.join("models.json").exists());

    let out = env.run(&["run", ",model openai:other"]).await;
    assert!(
        stdout(&out).contains("model: openai:other (this session)\nfallbacks: openai:backup"),
        "{}",
        stdout(&out)
    );
    let kept: Value =
        serde_json::from_slice(&std::fs::read(env.home.join("models.json")).unwrap()).unwrap();
    assert_eq!(kept["sessions"]["cli"]["model"], "openai:other");
    // A new process: the session still uses its model; another session uses BUB_MODEL.
    env.run(&["run", "hello"]).await;
    env.run(&["run", "--session-id", "elsewhere", "hello"])
        .await;
    assert_eq!(env.model.models(), ["primary", "other", "primary"]);
    let mut answered: Vec<Value> = events(&env, "run")
        .into_iter()
        .map(|r| r["model"].clone())
        .collect();
    answered.sort_by_key(Value::to_string);
    assert_eq!(answered, ["other", "primary", "primary"]);
    // Back to the default: the entry is gone, the session follows BUB_MODEL again.
    env.run(&["run", ",model openai:primary"]).await;
    let kept: Value =
        serde_json::from_slice(&std::fs::read(env.home.join("models.json")).unwrap()).unwrap();
    assert!(kept["sessions"].get("cli").is_none(), "{kept}");
}

#[tokio::test(flavor = "multi_thread")]
async fn model_in_a_chat_is_for_owners_only() {
    let env = Env::new().await;
    let daemon = env.start();
    // User 5 is a guest (the owners are 1, 7, 9 and 42).
    env.telegram
        .push_message_update(private_text(5, 5, "/model openai:expensive"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(
        texts(&sent),
        ["<code>model</code> is not allowed for guests in this chat"]
    );
    env.telegram
        .push_message_update(private_text(42, 42, "/model openai:other"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert!(
        texts(&sent)[1].contains("model: openai:other (this session)"),
        "{:?}",
        texts(&sent)
    );
    env.telegram
        .push_message_update(private_text(42, 42, "/model"));
    let sent = env.telegram.wait_for_calls("sendMessage", 3, WAIT).await;
    assert!(
        texts(&sent)[2].starts_with("model: openai:other (this session)"),
        "{:?}",
        texts(&sent)
    );
    env.telegram.push_message_update(private_text(5, 5, "hi"));
    env.telegram.push_message_update(private_text(42, 42, "hi"));
    env.telegram.wait_for_calls("sendMessage", 5, WAIT).await;
    assert!(daemon.stop().await.success());
    let kept: Value =
        serde_json::from_slice(&std::fs::read(env.home.join("models.json")).unwrap()).unwrap();
    assert_eq!(kept["sessions"].as_object().unwrap().len(), 1, "{kept}");
    assert_eq!(kept["sessions"]["telegram:42"]["model"], "openai:other");
    let mut models = env.model.models();
    models.sort();
    assert_eq!(
        models,
        ["other", "test-model"],
        "the guest's chat kept BUB_MODEL"
    );
}

/// A client of `model` on the fake, with fast retries.
fn client(fake: &FakeOpenAi, model: &str) -> Arc<LlmClient> {
    let mut cfg = LlmConfig::new("openai", model, fake.base_url());
    cfg.retry_base_delay = Duration::from_millis(5);
    cfg.max_retries = 1;
    Arc::new(LlmClient::new(cfg).unwrap())
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![bub::llm::ChatMessage::user("hi")],
        tools: Default::default(),
        max_tokens: 16,
    }
}

#[tokio::test]
async fn chain_tries_a_failed_model_again_after_the_cooldown() {
    let fake = fake_openai::start().await;
    let now = Arc::new(Mutex::new(Instant::now()));
    let clock = now.clone();
    let cooldowns = Cooldowns::with_clock(move || *clock.lock().unwrap());
    let chain =
        ModelChain::new(client(&fake, "a"), vec![client(&fake, "b")]).with_cooldowns(cooldowns);
    fake.fail_model("a", 502, "bad gateway");
    let answer = chain.chat(&request()).await;
    assert!(answer.result.is_ok());
    assert_eq!(label(answer.by), "openai:b");
    assert_eq!(answer.fallbacks.len(), 1);
    fake.heal_model("a");
    chain.chat(&request()).await.result.unwrap();
    assert_eq!(fake.models(), ["a", "b", "b"], "cooling down");
    *now.lock().unwrap() += COOLDOWN;
    let answer = chain.chat(&request()).await;
    assert_eq!(label(answer.by), "openai:a");
    assert_eq!(
        fake.models(),
        ["a", "b", "b", "a"],
        "tried again after the cooldown"
    );
}

#[tokio::test]
async fn chain_tries_every_model_when_all_cool_down_and_never_repeats_shown_text() {
    let fake = fake_openai::start().await;
    let chain = ModelChain::new(client(&fake, "a"), vec![client(&fake, "b")])
        .with_cooldowns(Cooldowns::with_clock(Instant::now));
    fake.fail_model("a", 500, "down");
    fake.fail_model("b", 500, "down");
    let answer = chain.chat(&request()).await;
    assert!(answer.result.is_err());
    assert_eq!(label(answer.by), "openai:b");
    // Both cool down now: the next call still tries them, in order.
    fake.heal_model("b");
    let answer = chain.chat(&request()).await;
    assert_eq!(label(answer.by), "openai:b");
    assert_eq!(fake.models(), ["a", "b", "a", "b"]);

    // A stream that showed text and then broke is not sent to the next model.
    let fake = fake_openai::start().await;
    let chain = ModelChain::new(client(&fake, "a"), vec![client(&fake, "b")])
        .with_cooldowns(Cooldowns::with_clock(Instant::now));
    let broken = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"half an\"}}]}\n\ndata: {\"error\":{\"message\":\"overloaded\",\"code\":500}}\n\n";
    fake.push_raw(
        200,
        broken.into(),
        vec![("content-type".into(), "text/event-stream".into())],
    );
    let mut shown = String::new();
    let answer = chain.chat_stream(&request(), |d| shown.push_str(d)).await;
    assert_eq!(shown, "half an");
    assert!(answer.result.is_err(), "{:?}", answer.result);
    assert!(answer.fallbacks.is_empty());
    assert_eq!(fake.models(), ["a"]);
}
