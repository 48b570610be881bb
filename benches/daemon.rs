//! Benchmark of the channel daemon (`cargo bench --bench daemon`): the release `bub message`
//! binary against the fake Telegram (and, when enabled, fake Discord) servers and a zero-latency
//! fake model, debounce 0.
//!
//! Reports:
//! * per-message overhead: update pushed to the fake (the long poll is waiting, so it is
//!   delivered at once) → `sendMessage` received by the fake, one private chat at a time;
//! * a burst of 1000 chats × 5 messages: time until every message was in a model prompt and
//!   every turn was answered;
//! * daemon RSS (VmRSS) at idle with the channels connected, after the burst, and after the idle
//!   sessions were evicted (and their keep-alive connections closed).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::bench::{daemon_command, rss_mb, status_mb};
use support::fake_discord;
use support::fake_openai;
use support::fake_telegram::{self, private_text};

const LATENCY_SAMPLES: i64 = 300;
const BURST_CHATS: i64 = 1000;
const BURST_MESSAGES: i64 = 5;
/// Session idle TTL for the run: as in production (600 s against 30 s), past the time the HTTP
/// clients close idle keep-alive connections (their reaper runs once per timeout, so an idle
/// connection lives up to twice the timeout), so eviction finds the burst's connections closed.
const IDLE_SECONDS: u64 = 2 * bub::HTTP_IDLE_TIMEOUT.as_secs() + 5;

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(bench());
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn bench() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let telegram = fake_telegram::start().await;
    let discord = fake_discord::start().await;
    let mut child = daemon_command(dir.path(), &model, &telegram, IDLE_SECONDS)
        .env("BUB_DISCORD_ENABLED", "true")
        .env("BUB_DISCORD_TOKEN", "bench-discord-token")
        .env("BUB_DISCORD_API_BASE", discord.api_base())
        .env("BUB_DISCORD_ALLOW_FROM", "*")
        .spawn()
        .expect("start bub message");
    let pid = child.id().expect("pid");
    telegram
        .wait_for_calls("getUpdates", 1, Duration::from_secs(30))
        .await;
    discord.wait_for_identify(Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = rss_mb(pid);
    println!(
        "daemon.rss.idle: {idle_rss:.1} MB = {:.1} MB heap/stacks (RssAnon) + {:.1} MB mapped code and data (RssFile)",
        status_mb(pid, "RssAnon"),
        status_mb(pid, "RssFile")
    );

    // Per-message overhead, one message in flight at a time.
    let mut latencies = Vec::new();
    for i in 0..LATENCY_SAMPLES {
        let before = telegram.calls_of("sendMessage").len();
        let pushed = Instant::now();
        telegram.push_message(private_text(100_000 + i, 100_000 + i, "ping"));
        let sent = telegram
            .wait_for_calls("sendMessage", before + 1, Duration::from_secs(30))
            .await;
        latencies.push(sent[before].at.duration_since(pushed));
    }
    latencies.sort();
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    println!(
        "daemon.overhead (update → sendMessage, {LATENCY_SAMPLES} chats): p50 {} p95 {} max {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.95)),
        ms(*latencies.last().expect("samples"))
    );

    // Burst: every chat sends 5 messages at once.
    let requests_before = model.request_count();
    let sent_before = telegram.sent_count();
    let start = Instant::now();
    for m in 0..BURST_MESSAGES {
        for chat in 1..=BURST_CHATS {
            telegram.push_message(private_text(chat, chat, &format!("burst c{chat} m{m}")));
        }
    }
    let expected = (BURST_CHATS * BURST_MESSAGES) as usize;
    let (mut seen, mut scanned) = (0, requests_before);
    let (turns, elapsed) = loop {
        // Only the last user message of a request is new in it (earlier turns are history).
        for request in model.requests_since(scanned) {
            scanned += 1;
            let last = &request["messages"]
                .as_array()
                .expect("messages")
                .last()
                .expect("a message")["content"];
            seen += last.as_str().unwrap_or_default().matches("burst c").count();
        }
        let turns = scanned - requests_before;
        let answered = telegram.sent_count() - sent_before;
        if seen >= expected && answered >= turns {
            break (turns, start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(120) {
            panic!(
                "burst not answered: {seen}/{expected} messages seen, {answered}/{turns} turns answered"
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let burst_rss = rss_mb(pid);
    println!(
        "daemon.burst ({BURST_CHATS} chats × {BURST_MESSAGES} messages): all answered in {} ({turns} turns)",
        ms(elapsed)
    );

    // Eviction, then the manager's next heap-trim check (every 5 s).
    tokio::time::sleep(Duration::from_secs(IDLE_SECONDS + 8)).await;
    let evicted_rss = rss_mb(pid);
    println!(
        "daemon.rss: idle {idle_rss:.1} MB (Telegram + Discord connected), after burst {burst_rss:.1} MB, after eviction {evicted_rss:.1} MB"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = tokio::time::timeout(Duration::from_secs(12), child.wait()).await;
}
