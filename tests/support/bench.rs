//! Helpers of the daemon benchmarks: the release `bub message` started against the fakes, the
//! two traffic patterns they measure (one message at a time; a burst), and memory figures of a
//! running process from `/proc/PID/status`.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::fake_openai::FakeOpenAi;
use super::fake_telegram::{self, FakeTelegram, private_text};

/// `bub message` against `model` and `telegram` with its home in `dir`: everyone admitted (as a
/// guest: turns run under the guest policy, the costlier path), debounce 0, sessions evicted
/// after `idle_seconds`, warnings only on stderr, `MALLOC_*` passed through. Add variables
/// (e.g. Discord's) before spawning.
pub fn daemon_command(
    dir: &Path,
    model: &FakeOpenAi,
    telegram: &FakeTelegram,
    idle_seconds: u64,
) -> tokio::process::Command {
    let mut cmd = bub_command(dir, model);
    cmd.env("BUB_TELEGRAM_ENABLED", "true")
        .env("BUB_TELEGRAM_TOKEN", fake_telegram::TOKEN)
        .env("BUB_TELEGRAM_API_BASE", telegram.api_base())
        .env("BUB_TELEGRAM_ALLOW_FROM", "*")
        .env("BUB_MESSAGE_DEBOUNCE_SECONDS", "0")
        .env("BUB_MESSAGE_DELAY_SECONDS", "0")
        .env("BUB_SESSION_IDLE_SECONDS", idle_seconds.to_string())
        .env("BUB_LOG_LEVEL", "warn")
        .envs(std::env::vars().filter(|(k, _)| k.starts_with("MALLOC_")))
        .arg("message")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    cmd
}

/// The release `bub` with a cleared environment (`PATH` kept), its home and working directory
/// in `dir`, talking to `model`. `BUB_BENCH_BINARY` names another `bub` to measure (an older
/// release, for figures taken in one run).
pub fn bub_command(dir: &Path, model: &FakeOpenAi) -> tokio::process::Command {
    let binary = std::env::var_os("BUB_BENCH_BINARY");
    let binary = binary
        .as_deref()
        .unwrap_or(env!("CARGO_BIN_EXE_bub").as_ref());
    let mut cmd = tokio::process::Command::new(binary);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("NO_PROXY", "127.0.0.1")
        .env("BUB_HOME", dir.join("home"))
        .env("BUB_MODEL", "openai:bench")
        .env("BUB_API_KEY", "sk-bench")
        .env("BUB_API_BASE", model.base_url())
        .current_dir(dir);
    cmd
}

/// Starts `cmd` (a [`daemon_command`]) and waits until it polls `telegram`: the child and its
/// pid.
pub async fn serving(
    mut cmd: tokio::process::Command,
    telegram: &FakeTelegram,
) -> (tokio::process::Child, u32) {
    let child = cmd.spawn().expect("start bub message");
    let pid = child.id().expect("pid");
    telegram
        .wait_for_calls("getUpdates", 1, Duration::from_secs(30))
        .await;
    (child, pid)
}

/// A `/proc/PID/status` memory field in MB (`VmRSS`, `RssAnon`, `RssFile`); 0 when unreadable.
pub fn status_mb(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// The resident set (`VmRSS`) in MB.
pub fn rss_mb(pid: u32) -> f64 {
    status_mb(pid, "VmRSS")
}

/// Per-message latency, sorted: `samples` new private chats, one message in flight at a time,
/// each from the update pushed to the fake (its long poll is waiting) to its `sendMessage`.
pub async fn latencies(telegram: &FakeTelegram, samples: i64) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for i in 0..samples {
        let before = telegram.calls_of("sendMessage").len();
        let pushed = Instant::now();
        telegram.push_message(private_text(100_000 + i, 100_000 + i, "ping"));
        let sent = telegram
            .wait_for_calls("sendMessage", before + 1, Duration::from_secs(30))
            .await;
        latencies.push(sent[before].at.duration_since(pushed));
    }
    latencies.sort();
    latencies
}

/// `chats` chats each send `messages` messages at once: the model calls made and the time
/// until every message was in a model prompt and every call was answered in its chat.
pub async fn burst(
    telegram: &FakeTelegram,
    model: &FakeOpenAi,
    chats: i64,
    messages: i64,
) -> (usize, Duration) {
    let requests_before = model.request_count();
    let sent_before = telegram.sent_count();
    let start = Instant::now();
    for m in 0..messages {
        for chat in 1..=chats {
            telegram.push_message(private_text(chat, chat, &format!("burst c{chat} m{m}")));
        }
    }
    let expected = (chats * messages) as usize;
    let (mut seen, mut scanned) = (0, requests_before);
    loop {
        // Only the last user message of a request is new in it (earlier turns are history).
        for request in model.requests_since(scanned) {
            scanned += 1;
            let messages = request["messages"].as_array().expect("messages");
            let last = &messages.last().expect("a message")["content"];
            seen += last.as_str().unwrap_or_default().matches("burst c").count();
        }
        let turns = scanned - requests_before;
        let answered = telegram.sent_count() - sent_before;
        if seen >= expected && answered >= turns {
            return (turns, start.elapsed());
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "burst not answered: {seen}/{expected} messages seen, {answered}/{turns} turns answered"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
