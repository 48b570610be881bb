//! The floor Bub is measured against (`cargo bench --bench floor`): the least a Telegram bot
//! with a model behind it can do — teloxide's long-polling dispatcher, one OpenAI-compatible
//! `chat/completions` call per message, the answer sent back. No journal, no tape, no access
//! rules, no batching: what Bub costs above this is the price of its promises.
//!
//! The call is as large as an agent's: `FLOOR_REQUEST` names a request Bub sent (captured by the
//! bench), and each call sends its system prompt and tool list, the message's text as the one
//! user message, serialised per call as Bub does.
//!
//! Built only for the benchmark; configured like Bub: `BUB_TELEGRAM_TOKEN`,
//! `BUB_TELEGRAM_API_BASE`, `BUB_API_BASE`, `BUB_MODEL`, and `FLOOR_REQUEST`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use teloxide::prelude::*;

#[derive(Clone)]
struct Model {
    http: reqwest::Client,
    url: String,
    name: String,
    /// Bub's request: its system messages and tools are sent with every call.
    template: Arc<Value>,
}

impl Model {
    /// The request for `text`: the template's system messages, then `text`; one answer, not
    /// streamed.
    fn body(&self, text: &str) -> Value {
        let mut body = Value::clone(&self.template);
        let mut messages: Vec<Value> = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["role"] == "system")
            .cloned()
            .collect();
        messages.push(json!({"role": "user", "content": text}));
        body["messages"] = Value::Array(messages);
        body["model"] = json!(self.name);
        if let Some(body) = body.as_object_mut() {
            body.remove("stream");
            body.remove("stream_options");
        }
        body
    }

    /// The model's answer to `text`, or the error as text (the bot answers either way).
    async fn answer(&self, text: &str) -> String {
        let body = self.body(text);
        let reply = async {
            let response = self.http.post(&self.url).json(&body).send().await?;
            response.error_for_status()?.json::<Value>().await
        };
        match reply.await {
            Ok(v) => v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            Err(e) => format!("error: {e}"),
        }
    }
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

#[tokio::main]
async fn main() {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client");
    let api = reqwest::Url::parse(&var("BUB_TELEGRAM_API_BASE")).expect("BUB_TELEGRAM_API_BASE");
    let bot = Bot::with_client(var("BUB_TELEGRAM_TOKEN"), http.clone()).set_api_url(api);
    let model = Model {
        http,
        url: format!(
            "{}/chat/completions",
            var("BUB_API_BASE").trim_end_matches('/')
        ),
        name: var("BUB_MODEL")
            .split_once(':')
            .map_or_else(|| var("BUB_MODEL"), |(_, id)| id.to_owned()),
        template: Arc::new(
            serde_json::from_slice(&std::fs::read(var("FLOOR_REQUEST")).expect("FLOOR_REQUEST"))
                .expect("FLOOR_REQUEST is JSON"),
        ),
    };
    let handler =
        Update::filter_message().endpoint(|bot: Bot, model: Model, msg: Message| async move {
            if let Some(text) = msg.text() {
                let answer = model.answer(text).await;
                bot.send_message(msg.chat.id, answer).await?;
            }
            respond(())
        });
    Dispatcher::builder(bot, handler)
        .dependencies(dptree::deps![model])
        .build()
        .dispatch()
        .await;
}
