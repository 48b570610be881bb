//! What the integration tests share: the fake servers (every fake binds 127.0.0.1:0, records
//! requests and never reaches the internet: OpenAI-compatible, Anthropic, Gemini, Telegram,
//! Discord), the `bub` process environment (`bub_env`), a
//! channel adapter running against a fake (`adapter`), the in-process tool environment
//! (`tool_env`), a round-robin proxy in front of replicas (`proxy`), `bub chat` on a
//! pseudo-terminal (`pty`), the bounded waits (`wait`), the fakes' multipart parser and streamed
//! downloads (`wire`), a decompression-bomb PNG (`images`) and a headless Chromium driven
//! through ChromeDriver (`browser`). Each test module uses what it needs.
#![allow(dead_code)]

pub mod adapter;
pub mod bench;
pub mod browser;
pub mod bub_env;
pub mod fake_anthropic;
pub mod fake_discord;
pub mod fake_gemini;
pub mod fake_mcp;
pub mod fake_openai;
pub mod fake_platform;
pub mod fake_telegram;
pub mod images;
pub mod postgres;
pub mod prompt_cache;
pub mod proxy;
pub mod pty;
pub mod tool_env;
pub mod wait;
pub mod wire;

/// A long answer of about `kb` KB: numbered Markdown paragraphs (`Paragraph 00000: the quick
/// brown fox. …`), several Telegram messages past 4 KB.
pub fn long_answer(kb: usize) -> String {
    let paragraphs = kb * 1024 / 256;
    (0..paragraphs)
        .map(|i| {
            format!(
                "Paragraph {i:05}: {}",
                "the quick brown fox. ".repeat(11).trim()
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// An address on 127.0.0.1 where nothing listens (a port that was free a moment ago).
pub fn closed_addr() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// An answer of `text` to `chat_id` for a channel adapter, replying to `reply_to`.
pub fn outbound(chat_id: &str, text: &str, reply_to: Option<&str>) -> bub::channels::Outbound {
    bub::channels::Outbound {
        chat_id: chat_id.to_owned(),
        text: text.to_owned(),
        reply_to: reply_to.map(str::to_owned),
        file: None,
        edit: None,
    }
}

/// Sends `out` through `channel` the way every send goes (`bub::delivery::send`: the parts
/// decided once, each sent by the adapter); a long text's file is written under the temp dir.
pub async fn send(
    channel: &dyn bub::channels::Channel,
    out: &bub::channels::Outbound,
) -> anyhow::Result<()> {
    bub::delivery::send(channel, &std::env::temp_dir(), out).await
}

/// The value of header `name` (case-insensitive) among recorded `(name, value)` pairs.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}
