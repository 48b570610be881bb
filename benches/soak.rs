//! Soak benchmark of the channel daemon (`cargo bench --bench soak`): the release `bub message`
//! binary against the fake Telegram and model under steady load — 4 messages a second spread
//! over 300 private chats, sessions evicted after 60 s idle — for `SOAK_MINUTES` (default 60).
//!
//! Reports the daemon's RSS (and its anonymous part: heap and stacks) every minute, and the
//! growth per hour after `SOAK_WARMUP_MINUTES` (default 10): the least-squares slope of samples
//! taken every 10 s. Target: ≤ 1 MiB/h. `SOAK_FRESH_CHATS=1` sends every message to a new chat
//! (no conversation grows), to tell what grows per message from what grows with the contexts.
//! `SOAK_RATE` (messages a second) and `SOAK_IDLE_SECONDS` speed the same pattern up: at 40/s
//! with sessions evicted after 6 s, ten minutes carry the conversations of a 100-minute soak.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::bench::{daemon_command, rss_mb, serving, status_mb};
use support::fake_openai;
use support::fake_telegram::{self, private_text};

const CHATS: i64 = 300;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

fn number(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(bench());
}

/// Least-squares slope of `(x, y)` points.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den }
}

async fn bench() {
    let total = Duration::from_secs(60 * number("SOAK_MINUTES", 60));
    let warmup = Duration::from_secs(60 * number("SOAK_WARMUP_MINUTES", 10));
    let fresh = std::env::var("SOAK_FRESH_CHATS").is_ok_and(|v| v == "1");
    let rate = number("SOAK_RATE", 4).max(1);
    let idle = number("SOAK_IDLE_SECONDS", 60);
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let telegram = fake_telegram::start().await;
    let cmd = daemon_command(dir.path(), &model, &telegram, idle);
    let (mut child, pid) = serving(cmd, &telegram).await;
    println!(
        "soak: {} min, {rate} messages/s over {CHATS} chats, sessions evicted after {idle} s idle; growth measured after {} min",
        total.as_secs() / 60,
        warmup.as_secs() / 60
    );

    let start = Instant::now();
    let mut send = tokio::time::interval(Duration::from_secs(1) / rate as u32);
    let mut sample = tokio::time::interval(SAMPLE_EVERY);
    let (mut sent, mut next_chat) = (0i64, 0i64);
    let (mut rss, mut anon) = (Vec::new(), Vec::new());
    while start.elapsed() < total {
        tokio::select! {
            _ = send.tick() => {
                // A fixed stride through the chats: every chat gets a message every 300/rate s
                // (75 s by default), longer than the idle TTL, so sessions keep being evicted
                // and recreated.
                next_chat = (next_chat + 7) % CHATS;
                // `SOAK_FRESH_CHATS=1`: every message in a chat of its own, so no conversation
                // grows (what stays is what the daemon keeps per message, not per context).
                let chat = if fresh { 1_000_000 + sent } else { 1 + next_chat };
                telegram.push_message(private_text(chat, chat, &format!("soak {sent}")));
                sent += 1;
            }
            _ = sample.tick() => {
                let at = start.elapsed();
                let (r, a) = (rss_mb(pid), status_mb(pid, "RssAnon"));
                if at.as_secs() % 60 < SAMPLE_EVERY.as_secs() {
                    println!(
                        "soak.t={:>3} min rss {r:.1} MB anon {a:.1} MB answered {}",
                        at.as_secs() / 60,
                        telegram.sent_count()
                    );
                }
                if at >= warmup {
                    let hours = at.as_secs_f64() / 3600.0;
                    rss.push((hours, r));
                    anon.push((hours, a));
                }
            }
        }
    }
    let answered = telegram.sent_count();
    println!(
        "soak.growth after warm-up: rss {:+.2} MB/h, anon {:+.2} MB/h ({} samples); rss {:.1} → {:.1} MB; {sent} messages sent, {answered} answered",
        slope(&rss),
        slope(&anon),
        rss.len(),
        rss.first().map_or(0.0, |p| p.1),
        rss.last().map_or(0.0, |p| p.1),
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = tokio::time::timeout(Duration::from_secs(12), child.wait()).await;
}
