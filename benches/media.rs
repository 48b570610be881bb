//! Media (`cargo bench --bench media`): the release `bub message` against the fake Telegram and
//! model receiving a 20 MB document (the default `BUB_MEDIA_MAX_BYTES`). The download is
//! streamed to disk, so the daemon's memory must stay flat: it reports the RSS at idle, the
//! peak RSS sampled every 2 ms from the message's arrival to the answer, and the time from the
//! message to the answer (download, turn, reply).

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::bench::{daemon_command, rss_mb};
use support::fake_openai;
use support::fake_telegram::{self, private_text};

/// The file's size: the default cap.
const FILE_BYTES: usize = 20 * 1024 * 1024;

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(bench());
}

async fn bench() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let telegram = fake_telegram::start().await;
    let mut child = daemon_command(dir.path(), &model, &telegram, 600)
        .current_dir(dir.path())
        .spawn()
        .expect("start bub message");
    let pid = child.id().expect("pid");
    telegram
        .wait_for_calls("getUpdates", 1, Duration::from_secs(30))
        .await;
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
    let saved = std::fs::read_dir(dir.path().join("inbox/telegram-42"))
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
