//! What a conversation costs in input tokens (`cargo bench --bench tokens`): the release
//! `bub message` against the fake Telegram and an echoing fake OpenAI-compatible model, one
//! private chat with its owner, 30 plain messages, each sent once the previous one was answered
//! and more than a second after it (so the clock moves between requests, as in a real chat).
//!
//! Reports, from the request bodies the fake received (tokens ≈ bytes / 4, tools then messages
//! as providers cache them): the first request (tool specs + system prompt), the growth per
//! turn, the mean per request, the share of each request a prompt cache can serve (the bytes
//! repeating the previous request's start), the input no cache can serve over the chat, and
//! what the wrapper of a plain private message costs beyond its text. Exits 1 when a target of
//! issue 20 is missed.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use serde_json::Value;
use support::bench::daemon_command;
use support::fake_openai::{self, last_user_text};
use support::fake_telegram::{self, private_text};
use support::prompt_cache::{BYTES_PER_TOKEN, figures};

const MESSAGES: usize = 30;
const APART: Duration = Duration::from_millis(1_100);
const OWNER: i64 = 4242;

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    std::process::exit(rt.block_on(bench()));
}

/// A plain message of a chat: short, like people write.
fn message(i: usize) -> String {
    const LINES: [&str; 5] = [
        "what's a good name for a cat?",
        "can you remind me what we talked about earlier",
        "ok thanks, and how long do they usually sleep",
        "tell me something short about the weather in spring",
        "sounds good",
    ];
    format!("{} (#{i})", LINES[i % LINES.len()])
}

async fn bench() -> i32 {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    model.set_responder(|request| format!("You said: {}", last_line(request)));
    let telegram = fake_telegram::start().await;
    let mut child = daemon_command(dir.path(), &model, &telegram, 600)
        .env("BUB_TELEGRAM_OWNERS", OWNER.to_string())
        .spawn()
        .expect("start bub message");
    telegram
        .wait_for_calls("getUpdates", 1, Duration::from_secs(30))
        .await;
    for i in 0..MESSAGES {
        let before = telegram.calls_of("sendMessage").len();
        telegram.push_message(private_text(OWNER, OWNER, &message(i)));
        telegram
            .wait_for_calls("sendMessage", before + 1, Duration::from_secs(60))
            .await;
        tokio::time::sleep(APART).await;
    }
    let _ = child.kill().await;
    let requests = model.requests();
    assert_eq!(requests.len(), MESSAGES, "one model call per message");
    report(&requests)
}

/// The last line of the request's last user message (the chat message as rendered).
fn last_line(request: &Value) -> String {
    let text = last_user_text(request);
    text.lines().last().unwrap_or_default().to_owned()
}

fn report(requests: &[Value]) -> i32 {
    let f = figures(requests);
    let last = &requests[requests.len() - 1];
    let text = message(MESSAGES - 1);
    let wrapper = last_user_text(last).len().saturating_sub(text.len()) / BYTES_PER_TOKEN;
    println!(
        "tokens.first_request: {} tok ({} tool specs + {} system prompt + the message)",
        f.first, f.first_tools, f.first_system
    );
    println!("tokens.growth_per_turn: {:.0} tok", f.growth);
    println!(
        "tokens.mean_per_request: {:.0} tok ({} requests, {} tok in all)",
        f.mean, f.requests, f.total
    );
    println!(
        "tokens.cacheable: {:.1} % of each request after the first at least ({:.1} % mean)",
        f.cacheable_min * 100.0,
        f.cacheable_mean * 100.0
    );
    println!("tokens.uncached_total: {} tok", f.uncached);
    println!("tokens.wrapper: {wrapper} tok beyond the text of a plain private message");
    let targets = [
        ("first request ≤ 3,500 tokens", f.first <= 3_500),
        (
            "every later request ≥ 98 % cacheable",
            f.cacheable_min >= 0.98,
        ),
        ("uncached input ≤ 8,000 tokens", f.uncached <= 8_000),
        ("wrapper ≤ 40 tokens", wrapper <= 40),
    ];
    let mut code = 0;
    for (target, met) in targets {
        if !met {
            println!("MISSED: {target}");
            code = 1;
        }
    }
    code
}
