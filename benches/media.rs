//! Media (`cargo bench --bench media`): the release `bub message` against the fake Telegram and
//! model receiving a 20 MB document (the default `BUB_MEDIA_MAX_BYTES`). The download is
//! streamed to disk, so the daemon's memory must stay flat: it reports the RSS at idle, the
//! peak RSS sampled every 2 ms from the message's arrival to the answer, and the time from the
//! message to the answer (download, turn, reply).
//!
//! Then live answers under load (`BUB_STREAM=edits`): 100 chats write at once and the fake
//! model streams each answer slowly (a piece every second, about 6 s); it reports the posts and edits made, their
//! rate, and the shortest gap between two of one chat (the floor is 1 s).
//!
//! Then images for a vision model (`BUB_VISION=on`): three PNG bombs (465 KB declaring 16000 ×
//! 10000 pixels) from three chats at once — described, not decoded: the time to the three
//! answers and the peak RSS — and a 12 MP photo: the time to the answer (decoded) and to the
//! next turn's (read back from the cache), and the peak RSS.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::bench::{daemon_command, rss_mb, serving, status_mb};
use support::fake_openai::{self, StreamStyle};
use support::fake_telegram::{self, private_text};

/// Chats writing at once in the live-answer run.
const LIVE_CHATS: i64 = 100;

/// The file's size: the default cap.
const FILE_BYTES: usize = 20 * 1024 * 1024;

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(bench());
    rt.block_on(live());
    rt.block_on(images());
}

/// Image bombs from three chats at once, then a 12 MP photo over two turns.
async fn images() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let telegram = fake_telegram::start().await;
    let mut cmd = daemon_command(dir.path(), &model, &telegram, 600);
    cmd.env("BUB_VISION", "on").current_dir(dir.path());
    let (mut child, pid) = serving(cmd, &telegram).await;
    let within = Duration::from_secs(60);
    let bomb = support::images::png_bomb(16000, 10000);
    telegram.add_file("bomb", bomb.clone());
    let started = Instant::now();
    for chat in 0..3 {
        model.push_text("Too large to look at.");
        let photo = private_text(7_000 + chat, 7_000 + chat, "");
        telegram.push_message(photo.photo_file("bomb", bomb.len() as u64, Some("look")));
    }
    telegram.wait_for_calls("sendMessage", 3, within).await;
    let bombs = started.elapsed();
    let bombs_peak = status_mb(pid, "VmHWM");

    // A phone photo: 4032 × 3024, noisy enough to weigh what a real one does.
    let mut rng = fastrand::Rng::with_seed(12);
    let pixels = image::RgbImage::from_fn(4032, 3024, |x, y| {
        let base = ((x / 16 + y / 16) % 256) as u8;
        image::Rgb([base, base.wrapping_add(rng.u8(..32)), rng.u8(..)])
    });
    let mut photo = Vec::new();
    let encoder = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut photo, 90);
    pixels.write_with_encoder(encoder).expect("a JPEG");
    telegram.add_file("photo", photo.clone());
    model.push_text("A photo.");
    model.push_text("Still the photo.");
    let started = Instant::now();
    let message = private_text(42, 42, "").photo_file("photo", photo.len() as u64, Some("what?"));
    telegram.push_message(message);
    telegram.wait_for_calls("sendMessage", 4, within).await;
    let decoded = started.elapsed();
    let started = Instant::now();
    telegram.push_message(private_text(42, 42, "and the colours?"));
    telegram.wait_for_calls("sendMessage", 5, within).await;
    let cached = started.elapsed();
    let requests = model.requests();
    let shown = |n: usize| fake_openai::image_urls(&requests[n]).len();
    assert_eq!(
        (shown(3), shown(4)),
        (1, 1),
        "the photo shown in both turns"
    );
    println!(
        "media.images: three {}×{} PNG bombs ({} KB each) from three chats at once: answered in \
         {:.0} ms, peak RSS {bombs_peak:.1} MB; a 12 MP photo ({:.1} MB): answered in {:.0} ms \
         (decoded), the next turn in {:.0} ms (cached), peak RSS {:.1} MB",
        16000,
        10000,
        bomb.len() / 1024,
        bombs.as_secs_f64() * 1e3,
        photo.len() as f64 / 1e6,
        decoded.as_secs_f64() * 1e3,
        cached.as_secs_f64() * 1e3,
        status_mb(pid, "VmHWM"),
    );
    let _ = child.kill().await;
}

/// Live answers of [`LIVE_CHATS`] chats at once.
async fn live() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    model.set_stream_style(StreamStyle {
        pieces_per_event: 4,
        pause: Duration::from_millis(250),
        ..StreamStyle::default()
    });
    let telegram = fake_telegram::start().await;
    let mut cmd = daemon_command(dir.path(), &model, &telegram, 600);
    cmd.env("BUB_STREAM", "edits");
    let (mut child, _) = serving(cmd, &telegram).await;
    let answer = "A streamed answer of a few words, written slowly by the model.";
    for _ in 0..LIVE_CHATS {
        model.push_text(answer);
    }
    let started = Instant::now();
    for chat in 0..LIVE_CHATS {
        telegram.push_message(private_text(5_000 + chat, 5_000 + chat, "go"));
    }
    telegram
        .wait_until(Duration::from_secs(120), "every answer in place", |fake| {
            let done = fake
                .calls()
                .iter()
                .filter(|c| c.method == "editmessagetext" && c.body["text"] == answer)
                .count();
            (done >= LIVE_CHATS as usize).then_some(())
        })
        .await;
    let took = started.elapsed();
    let calls: Vec<_> = telegram
        .calls()
        .into_iter()
        .filter(|c| !c.failed && (c.method == "sendmessage" || c.method == "editmessagetext"))
        .collect();
    let mut by_chat: std::collections::HashMap<String, Vec<Instant>> = Default::default();
    for call in &calls {
        by_chat
            .entry(call.body["chat_id"].to_string())
            .or_default()
            .push(call.at);
    }
    let min_gap = by_chat
        .values_mut()
        .flat_map(|times| {
            times.sort();
            times
                .windows(2)
                .map(|w| w[1].duration_since(w[0]))
                .collect::<Vec<_>>()
        })
        .min()
        .unwrap_or_default();
    let edits = calls
        .iter()
        .filter(|c| c.method == "editmessagetext")
        .count();
    println!(
        "media.live ({LIVE_CHATS} chats streaming at once): {} posts + {edits} edits in {:.1} s = {:.0} calls/s; per chat {:.1} calls, shortest gap between two {:.0} ms",
        calls.len() - edits,
        took.as_secs_f64(),
        calls.len() as f64 / took.as_secs_f64(),
        calls.len() as f64 / LIVE_CHATS as f64,
        min_gap.as_secs_f64() * 1e3,
    );
    let _ = child.kill().await;
}

async fn bench() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let telegram = fake_telegram::start().await;
    let mut cmd = daemon_command(dir.path(), &model, &telegram, 600);
    cmd.current_dir(dir.path());
    let (mut child, pid) = serving(cmd, &telegram).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss_mb(pid);

    let bytes: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
    telegram.add_file("big", bytes);
    model.push_text("Got the file.");
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::task::spawn_blocking(move || {
            let mut peak = 0.0f64;
            while sampling.load(Ordering::Relaxed) {
                peak = peak.max(rss_mb(pid));
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let started = Instant::now();
    let message = private_text(42, 42, "").document_file(
        "big",
        "dataset.bin",
        "application/octet-stream",
        FILE_BYTES as u64,
        Some("here is the data"),
    );
    telegram.push_message(message);
    telegram
        .wait_for_calls("sendMessage", 1, Duration::from_secs(60))
        .await;
    let answered = started.elapsed();
    sampling.store(false, Ordering::Relaxed);
    let peak = sampler.await.expect("sampler");
    assert_eq!(telegram.calls_of("file").len(), 1, "one download");
    let saved = std::fs::read_dir(dir.path().join("chats/telegram-42"))
        .expect("the inbox folder")
        .flatten()
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum::<u64>();
    assert_eq!(saved, FILE_BYTES as u64, "the whole file was saved");
    println!(
        "media.receive (a {} MB document): RSS idle {idle:.1} MB, peak {peak:.1} MB (+{:.1} MB); \
         message → saved → answered {:.0} ms",
        FILE_BYTES / (1024 * 1024),
        peak - idle,
        answered.as_secs_f64() * 1e3,
    );
    let _ = child.kill().await;
}
