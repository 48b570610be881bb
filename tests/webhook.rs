//! Telegram webhooks (`BUB_TELEGRAM_WEBHOOK_URL`), through the real `bub message`: the fake
//! Telegram posts updates to Bub's listener as Telegram does (one at a time, again until
//! `200`). Checked: the set-up sent to Telegram, no polling, the secret (a wrong or missing one
//! stores nothing), the size limit, `200` only once the update is in the journal, a retried
//! update stored and answered once, and the configuration errors.

use std::time::Duration;

use crate::support::bub_env::{Env, stderr, texts};
use crate::support::fake_telegram::private_text;
use crate::support::postgres::free_port;
use crate::support::wait::{WAIT, wait_until};

const SECRET: &str = "s3cret-Token_1";
const URL: &str = "https://bot.example/tg/hook-7f3a";

/// A `bub message` environment with the webhook set up on `port`.
async fn webhook_env(port: u16) -> Env {
    let mut env = Env::new().await;
    env.set("BUB_HTTP_LISTEN", &port.to_string());
    env.set("BUB_TELEGRAM_WEBHOOK_URL", URL);
    env.set("BUB_TELEGRAM_WEBHOOK_SECRET", SECRET);
    env.telegram
        .deliver_webhooks_to(&format!("http://127.0.0.1:{port}"));
    env
}

/// POSTs `body` to `path` on `port` with `secret` (if any); the status.
async fn post(port: u16, path: &str, secret: Option<&str>, body: Vec<u8>) -> u16 {
    let mut request = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/json")
        .timeout(Duration::from_secs(10))
        .body(body);
    if let Some(secret) = secret {
        request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
    }
    request.send().await.unwrap().status().as_u16()
}

fn update(update_id: i64, message_id: i64, text: &str) -> Vec<u8> {
    let mut message: serde_json::Value = private_text(42, 42, text).into();
    message["message_id"] = message_id.into();
    serde_json::to_vec(&serde_json::json!({"update_id": update_id, "message": message})).unwrap()
}

/// Waits until the fake Telegram's post of update `id` got `200`.
async fn answered_200(env: &Env, id: i64) {
    wait_until(WAIT, "the post answered 200", || {
        let posts = env.telegram.webhook_posts();
        posts.iter().any(|p| p.update_id == id && p.status == 200)
    })
    .await;
}

/// `bub message` stops with exit 2 naming `var`; what it said.
async fn refused(env: &Env, var: &str) -> String {
    let out = env.run(&["message"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(var), "{}", stderr(&out));
    stderr(&out)
}

fn journal(env: &Env) -> String {
    std::fs::read_to_string(env.home.join("inbox.jsonl")).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn updates_posted_by_telegram_are_stored_before_200_and_answered_once() {
    let port = free_port();
    let env = webhook_env(port).await;
    let daemon = env.start();

    // The set-up Telegram is given; no polling.
    let set = env.telegram.wait_for_calls("setWebhook", 1, WAIT).await;
    assert_eq!(set[0].body["url"], URL);
    assert_eq!(set[0].body["secret_token"], SECRET);
    assert_eq!(set[0].body["max_connections"], 1);
    assert_eq!(
        set[0].body["allowed_updates"],
        serde_json::json!(["message"])
    );
    daemon.wait_for_log("telegram.webhook").await;

    // Strangers: no secret, a wrong one, another path, too large a body. Nothing is stored.
    let path = "/tg/hook-7f3a";
    assert_eq!(
        post(port, path, None, update(900, 900, "forged")).await,
        401
    );
    assert_eq!(
        post(
            port,
            path,
            Some("s3cret-Token_2"),
            update(901, 901, "forged")
        )
        .await,
        401
    );
    assert_eq!(
        post(port, "/tg/other", Some(SECRET), update(902, 902, "forged")).await,
        404
    );
    let big = vec![b' '; 1024 * 1024 + 1];
    assert_eq!(post(port, path, Some(SECRET), big).await, 413);
    assert_eq!(
        post(port, path, Some(SECRET), b"{not json".to_vec()).await,
        400
    );
    assert!(
        !journal(&env).contains("forged"),
        "nothing of a refused post is stored"
    );

    // Telegram posts a message: 200 comes after the journal has it, then the answer.
    env.model.push_text("Hello by webhook.");
    let id = env
        .telegram
        .push_message_update(private_text(42, 42, "hello by post"));
    answered_200(&env, id).await;
    assert!(
        journal(&env).contains("hello by post"),
        "journaled before the 200"
    );
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Hello by webhook."]);

    // Its 200 was lost: Telegram posts it again. Stored once, answered once.
    assert_eq!(
        post(port, path, Some(SECRET), update(id, 77, "hello by post")).await,
        200
    );
    env.model.push_text("Second answer.");
    env.telegram
        .push_message(private_text(42, 42, "and another"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent), ["Hello by webhook.", "Second answer."]);
    assert_eq!(
        env.model.requests().len(),
        2,
        "the retried update made no turn"
    );
    assert_eq!(journal(&env).matches("hello by post").count(), 1);
    assert!(env.telegram.calls_of("getUpdates").is_empty(), "no polling");
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success());
    assert!(!log.contains(SECRET), "the secret is never logged");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_needs_its_secret_and_the_listener() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_WEBHOOK_URL", URL);
    refused(&env, "BUB_TELEGRAM_WEBHOOK_SECRET").await;
    env.set("BUB_TELEGRAM_WEBHOOK_SECRET", "has spaces, not allowed");
    let said = refused(&env, "BUB_TELEGRAM_WEBHOOK_SECRET").await;
    assert!(!said.contains("has spaces"), "the secret is not quoted");
    env.set("BUB_TELEGRAM_WEBHOOK_SECRET", SECRET);
    refused(&env, "BUB_HTTP_LISTEN").await;
    env.set("BUB_HTTP_LISTEN", &free_port().to_string());
    env.set("BUB_TELEGRAM_WEBHOOK_URL", "http://bot.example/hook");
    refused(&env, "BUB_TELEGRAM_WEBHOOK_URL").await;
    assert!(env.telegram.calls_of("setWebhook").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_posted_update_answered_200_survives_kill_9_and_is_answered_once() {
    let port = free_port();
    let mut env = webhook_env(port).await;
    env.set("BUB_MESSAGE_DEBOUNCE_SECONDS", "5");
    let daemon = env.start();
    let id = env
        .telegram
        .push_message_update(private_text(42, 42, "remember the eggs"));
    answered_200(&env, id).await;
    // Killed while debouncing: Telegram was told 200 and will not post it again.
    daemon.kill().await;
    assert_eq!(env.model.request_count(), 0);

    env.model.push_text("noted: eggs");
    let daemon = env.start();
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["noted: eggs"]);
    assert!(env.model_prompts()[0].contains("remember the eggs"));
    assert!(daemon.stop().await.success());
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "answered once"
    );
    let posts = env.telegram.webhook_posts();
    assert_eq!(
        posts.iter().filter(|p| p.update_id == id).count(),
        1,
        "{posts:?}"
    );
}
