//! Compaction (`cargo bench --bench compaction`): the release `bub run` against the fake model
//! (answering at once) with a 32,000-token window. For conversations of 100 to 100,000 messages
//! since the last anchor it reports the size of the request the turn sends (flat: compaction
//! keeps it under the budget however long the conversation), how long the compaction took
//! (the `context.compacted` event: summary call, transcript, carried messages) and the whole
//! turn; then the same turn again (the context now starts at the compaction anchor).

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use support::bench::bub_command;
use support::fake_openai::{self, FakeOpenAi};

/// `BUB_CONTEXT_TOKENS` of the benchmark (compaction at the default 75 %).
const WINDOW: u64 = 32_000;

/// `bub run TEXT` with the benchmark's window, to its end.
fn bub(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    model: &FakeOpenAi,
    text: &str,
) -> std::process::Output {
    let _entered = rt.enter();
    let mut cmd = bub_command(dir, model);
    cmd.env("BUB_CONTEXT_TOKENS", WINDOW.to_string())
        .env("BUB_LOG_LEVEL", "warn")
        .args(["run", text]);
    rt.block_on(cmd.output()).expect("bub run")
}

fn tape(dir: &Path) -> std::path::PathBuf {
    std::fs::read_dir(dir.join("home/tapes"))
        .expect("tapes")
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .expect("a tape")
}

/// Appends `n` messages of about 60 tokens, alternating user and assistant.
fn grow(path: &Path, n: u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let last_id = last["id"].as_u64().unwrap();
    let mut out = String::new();
    for i in 1..=n {
        let role = if i % 2 == 1 { "user" } else { "assistant" };
        let line = json!({"id": last_id + i, "kind": "message",
            "payload": {"role": role, "content": format!("message {i}: {}", "words ".repeat(40))},
            "meta": {}, "date": "2026-11-25T00:00:00+00:00"});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(out.as_bytes()).unwrap();
}

/// The `ms` of the newest `context.compacted` event, if any.
fn compaction_ms(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().rev().find_map(|l| {
        let e: Value = serde_json::from_str(l).ok()?;
        (e["payload"]["name"] == "context.compacted")
            .then(|| e["payload"]["data"]["ms"].as_u64())?
    })
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(fake_openai::start());
    model.set_responder(|request| {
        let first = request["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        if first.starts_with("You compact a conversation") {
            "## Goals\nKeep going.".to_owned()
        } else {
            "ok".to_owned()
        }
    });
    let tokens = |r: &Value| r["messages"].to_string().len() / 4;
    for n in [100u64, 1_000, 10_000, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        assert!(bub(&runtime, dir.path(), &model, "first").status.success());
        let path = tape(dir.path());
        grow(&path, n);
        let before = model.request_count();
        let started = Instant::now();
        let out = bub(&runtime, dir.path(), &model, "and now?");
        let turn = started.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sent = model.requests_since(before);
        let request = sent.last().unwrap();
        let compacted = compaction_ms(&path);
        let again = Instant::now();
        let after = model.request_count();
        assert!(
            bub(&runtime, dir.path(), &model, "and then?")
                .status
                .success()
        );
        let next = model.requests_since(after);
        println!(
            "compaction.turn (conversation of {n} messages): request {} tokens (budget {}), \
             compaction {}, turn {:.0} ms; next turn request {} tokens, {:.0} ms",
            tokens(request),
            WINDOW * 75 / 100,
            compacted.map_or("none".to_owned(), |ms| format!("{ms} ms")),
            turn.as_secs_f64() * 1e3,
            tokens(next.last().unwrap()),
            again.elapsed().as_secs_f64() * 1e3,
        );
    }
}
