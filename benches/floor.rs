//! Bub against the floor (`cargo bench --bench floor`): the release `bub message` and the bare
//! bot of `examples/floor.rs` (teloxide's dispatcher, one model call per message, no journal,
//! tape or access rules), each against its own fake Telegram and zero-latency fake model, debounce
//! 0, in alternating runs, Bub first. The floor sends the model a request of Bub's size: the
//! first request Bub sent in the first run (its system prompt and tool list) is the template of
//! every floor call (`FLOOR_REQUEST`).
//!
//! Per run: start (spawn → first `getUpdates`), idle RSS, per-message p50 (update pushed →
//! `sendMessage`, one private chat at a time), a burst of 100 chats × 3 messages (until every
//! message was in a model prompt and every turn answered) and the RSS after it. Prints each
//! figure's median per binary and Bub's ratio to the floor; exits 1 when p50, burst or RSS after
//! the burst is over [`TARGET_RATIO`] times the floor's.
//!
//! `BUB_BENCH_BINARY` measures another `bub` (an older release) in place of this build's.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::bench::{burst, daemon_command, latencies, rss_mb};
use support::fake_openai;
use support::fake_telegram;

const RUNS: usize = 3;
const LATENCY_SAMPLES: i64 = 200;
const BURST_CHATS: i64 = 100;
const BURST_MESSAGES: i64 = 3;
/// Bub's p50, burst and RSS after the burst may be at most this many times the floor's.
const TARGET_RATIO: f64 = 1.5;

/// One run's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    start_ms: f64,
    idle_mb: f64,
    p50_ms: f64,
    burst_s: f64,
    burst_mb: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Bot {
    Bub,
    Floor,
}

fn main() {
    let floor = build_floor();
    let kept = tempfile::tempdir().expect("temp dir");
    let request = kept.path().join("request.json");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (mut bub, mut bare) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        for bot in [Bot::Bub, Bot::Floor] {
            let figures = rt.block_on(measure(bot, &floor, &request));
            let name = if bot == Bot::Bub { "bub" } else { "floor" };
            println!("run {run} {name}: {figures:?}");
            if bot == Bot::Bub {
                bub.push(figures)
            } else {
                bare.push(figures)
            }
        }
    }
    /// A figure's name, how it is read, whether a target applies.
    type Row = (&'static str, fn(&Figures) -> f64, bool);
    let rows: [Row; 5] = [
        ("start (ms)", |f| f.start_ms, false),
        ("idle RSS (MB)", |f| f.idle_mb, false),
        ("p50 (ms)", |f| f.p50_ms, true),
        ("burst 100×3 (s)", |f| f.burst_s, true),
        ("RSS after burst (MB)", |f| f.burst_mb, true),
    ];
    println!("| figure | bub (median of {RUNS}) | floor | ratio | target |");
    println!("|---|---|---|---|---|");
    let mut missed = false;
    for (name, get, targeted) in rows {
        let (b, f) = (median(&bub, get), median(&bare, get));
        let ratio = b / f;
        let verdict = match (targeted, ratio <= TARGET_RATIO) {
            (false, _) => String::new(),
            (true, true) => format!("≤ {TARGET_RATIO}× ✓"),
            (true, false) => format!("≤ {TARGET_RATIO}× ✗"),
        };
        missed |= targeted && ratio > TARGET_RATIO;
        println!("| {name} | {b:.2} | {f:.2} | {ratio:.2}× | {verdict} |");
    }
    if missed {
        std::process::exit(1);
    }
}

/// Writes Bub's request `body` to `path` and says how large it is.
fn keep_request(body: &serde_json::Value, path: &Path) {
    let bytes = serde_json::to_vec(body).expect("JSON");
    let system: usize = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .map(|m| m["content"].to_string().len())
        .sum();
    let tools = body["tools"].as_array().map_or(0, Vec::len);
    println!(
        "Bub's request, the floor's template: {} bytes, a {system}-byte system prompt, {tools} tools",
        bytes.len()
    );
    std::fs::write(path, bytes).expect("write the request");
}

fn median(runs: &[Figures], get: fn(&Figures) -> f64) -> f64 {
    let mut values: Vec<f64> = runs.iter().map(get).collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Builds `examples/floor.rs` with the bench's profile and returns its path.
fn build_floor() -> PathBuf {
    // Only what cargo needs: the variables cargo sets for a bench it runs would make it see
    // the dependencies' build scripts as stale and rebuild them.
    let kept = ["PATH", "HOME", "CARGO_HOME", "CARGO_TARGET_DIR"];
    // The compiler beside this cargo, not rustup's `rustc` on the PATH: run in a dependency's
    // folder, rustup would honour that crate's `rust-toolchain.toml` and may install or update
    // a toolchain (it did, when the bench ran outside `cargo bench`).
    let rustc = std::path::Path::new(env!("CARGO")).with_file_name("rustc");
    let mut command = std::process::Command::new(env!("CARGO"));
    command.env_clear().envs(std::env::vars().filter(|(k, _)| {
        // rustup's settings, and the profile overrides the bench itself was built with.
        kept.contains(&k.as_str()) || k.starts_with("RUSTUP_") || k.starts_with("CARGO_PROFILE_")
    }));
    if rustc.exists() {
        command.env("RUSTC", rustc);
    }
    let output = command
        .args(["build", "--release", "--locked", "--example", "floor"])
        .args(["--message-format", "json-render-diagnostics"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo build --example floor");
    assert!(output.status.success(), "the floor bot did not build");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| Some(PathBuf::from(v["executable"].as_str()?)))
        .expect("the floor bot's executable")
}

/// One run of `bot`. Bub's first run writes its first model request to `request`, the floor's
/// template.
async fn measure(bot: Bot, floor: &Path, request: &Path) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let telegram = fake_telegram::start().await;
    let mut cmd = daemon_command(dir.path(), &model, &telegram, 600);
    if bot == Bot::Floor {
        // The same environment, another program.
        let std = cmd.as_std();
        let mut floor_cmd = tokio::process::Command::new(floor);
        floor_cmd.env_clear();
        for (k, v) in std.get_envs() {
            if let Some(v) = v {
                floor_cmd.env(k, v);
            }
        }
        floor_cmd
            .env("FLOOR_REQUEST", request)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        cmd = floor_cmd;
    }
    let spawned = Instant::now();
    let mut child = cmd.spawn().expect("start the bot");
    let pid = child.id().expect("pid");
    let first = telegram
        .wait_for_calls("getUpdates", 1, Duration::from_secs(30))
        .await;
    let start_ms = first[0].at.duration_since(spawned).as_secs_f64() * 1000.0;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_mb = rss_mb(pid);
    let latencies = latencies(&telegram, LATENCY_SAMPLES).await;
    let p50_ms = latencies[latencies.len() / 2].as_secs_f64() * 1000.0;
    let burst_s = burst(&telegram, &model, BURST_CHATS, BURST_MESSAGES)
        .await
        .1
        .as_secs_f64();
    let burst_mb = rss_mb(pid);
    if bot == Bot::Bub && !request.exists() {
        keep_request(&model.requests()[0], request);
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = tokio::time::timeout(Duration::from_secs(12), child.wait()).await;
    Figures {
        start_ms,
        idle_mb,
        p50_ms,
        burst_s,
        burst_mb,
    }
}
