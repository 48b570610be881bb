//! The fake's webhook, as Telegram does it: `setWebhook` records the URL, the secret and
//! `max_connections`; from then on `getUpdates` is refused with 409 and the queued updates are
//! posted to the webhook, one at a time, in order, with the secret in
//! `X-Telegram-Bot-Api-Secret-Token`, each posted again (after 100 ms) until it is answered
//! `2xx`. `deleteWebhook` ends it. The URL is public (`https://bot.example/hook`): the test
//! says where its path really is served ([`FakeTelegram::deliver_webhooks_to`]).

use std::time::Duration;

use axum::response::Response;
use serde_json::{Value, json};

use super::{FakeTelegram, Shared, error, ok};

/// A webhook as `setWebhook` set it.
#[derive(Debug, Clone)]
pub(super) struct Hook {
    pub url: reqwest::Url,
    pub secret: Option<String>,
}

/// One post of an update to the webhook, and the status it got (0: no answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub update_id: i64,
    pub status: u16,
}

/// How long Telegram waits before posting an update again (shortened for tests).
const RETRY: Duration = Duration::from_millis(100);

pub(super) fn set(shared: &Shared, body: &Value) -> Response {
    let Some(url) = body["url"]
        .as_str()
        .and_then(|u| reqwest::Url::parse(u).ok())
    else {
        return error(
            400,
            json!({"ok": false, "error_code": 400,
            "description": "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"}),
        );
    };
    let secret = body["secret_token"].as_str().map(str::to_owned);
    let mut state = shared.state.lock().unwrap();
    if body["drop_pending_updates"] == true {
        state.updates.clear();
    }
    state.webhook = Some(Hook { url, secret });
    drop(state);
    shared.changed.notify_waiters();
    ok(json!(true))
}

pub(super) fn delete(shared: &Shared, body: &Value) -> Response {
    let mut state = shared.state.lock().unwrap();
    if body["drop_pending_updates"] == true {
        state.updates.clear();
    }
    state.webhook = None;
    ok(json!(true))
}

/// `getUpdates` while a webhook is set.
pub(super) fn conflict() -> Response {
    error(
        409,
        json!({"ok": false, "error_code": 409,
        "description": "Conflict: can't use getUpdates method while webhook is active; \
                        use deleteWebhook to delete the webhook first"}),
    )
}

/// Posts queued updates to the webhook while one is set, until the fake closes.
pub(super) async fn deliver(shared: std::sync::Arc<Shared>) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    loop {
        let changed = shared.changed.notified();
        let next = {
            let state = shared.state.lock().unwrap();
            let target = state.deliver_to.clone();
            match (&state.webhook, target, state.updates.front()) {
                (Some(hook), Some(base), Some(update)) => {
                    let mut url = base;
                    url.set_path(hook.url.path());
                    Some((url, hook.secret.clone(), update.clone()))
                }
                _ => None,
            }
        };
        let Some((url, secret, update)) = next else {
            tokio::select! {
                () = changed => continue,
                () = tokio::time::sleep(RETRY) => continue,
                () = shared.closed.cancelled() => return,
            }
        };
        let mut request = client.post(url).json(&update);
        if let Some(secret) = &secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        let status = tokio::select! {
            sent = request.send() => sent.map_or(0, |r| r.status().as_u16()),
            () = shared.closed.cancelled() => return,
        };
        let update_id = update["update_id"].as_i64().unwrap_or_default();
        let accepted = (200..300).contains(&status);
        {
            let mut state = shared.state.lock().unwrap();
            state.posts.push(Post { update_id, status });
            let front = state.updates.front().and_then(|u| u["update_id"].as_i64());
            if accepted && front == Some(update_id) {
                state.updates.pop_front();
            }
        }
        shared.changed.notify_waiters();
        if !accepted {
            tokio::select! {
                () = tokio::time::sleep(RETRY) => {}
                () = shared.closed.cancelled() => return,
            }
        }
    }
}

impl FakeTelegram {
    /// Where the webhook's path is served (`http://127.0.0.1:PORT`): updates go there once
    /// `setWebhook` is called.
    pub fn deliver_webhooks_to(&self, base: &str) {
        self.shared.state.lock().unwrap().deliver_to = Some(reqwest::Url::parse(base).unwrap());
        self.shared.changed.notify_waiters();
    }

    /// Every post of an update to the webhook so far, with its answer.
    pub fn webhook_posts(&self) -> Vec<Post> {
        self.shared.state.lock().unwrap().posts.clone()
    }
}
