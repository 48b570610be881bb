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

use std::time::Duration;

use support::bench::{burst, daemon_command, latencies, rss_mb, status_mb};
use support::fake_discord;
use support::fake_openai;
use support::fake_telegram;

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
        .env("BUB_DISCORD_TOKEN", "bench.discord.token")
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
    let latencies = latencies(&telegram, LATENCY_SAMPLES).await;
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    println!(
        "daemon.overhead (update → sendMessage, {LATENCY_SAMPLES} chats): p50 {} p95 {} max {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.95)),
        ms(*latencies.last().expect("samples"))
    );

    // Burst: every chat sends 5 messages at once.
    let (turns, elapsed) = burst(&telegram, &model, BURST_CHATS, BURST_MESSAGES).await;
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
