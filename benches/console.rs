//! Benchmark of the web console (`cargo bench --bench console`), the release binary:
//! * what it adds to `bub message`'s idle memory: the daemon against the fake Telegram with
//!   `BUB_CONSOLE` off, then on (VmRSS and its heap part, RssAnon, 2 s after the first poll);
//! * how fast `bub console` serves a tape of 10,000 entries (turns of a user message, a tool
//!   call and its result, events and an answer; an anchor every 1,000): the newest page of the
//!   timeline, with the work lane, an older page, a search, and a live poll with nothing new —
//!   p50 / p95 / max of the whole request from a client on loopback, and the console's memory
//!   before and after.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use support::bench::{bub_command, daemon_command, serving, status_mb};
use support::fake_openai;
use support::fake_telegram;
use support::postgres::free_port;

const ENTRIES: u64 = 10_000;
const SAMPLES: usize = 20;

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(bench());
}

async fn bench() {
    for console in [false, true] {
        let (rss, anon) = daemon_idle(console).await;
        let on = if console { "on" } else { "off" };
        println!("console.daemon.rss.idle (BUB_CONSOLE {on}): {rss:.1} MB (RssAnon {anon:.1} MB)");
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let workspace = dir.path();
    write_tape(&workspace.join("home"), workspace, "telegram:1");
    let port = free_port();
    let mut child = bub_command(dir.path(), &model)
        .env("BUB_CONSOLE_LISTEN", port.to_string())
        .env("BUB_LOG_LEVEL", "warn")
        .arg("console")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start bub console");
    let pid = child.id().expect("pid");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.get(format!("{base}/login")).send().await.is_err() {
        assert!(Instant::now() < deadline, "bub console did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let token = std::fs::read_to_string(workspace.join("home/console.token")).expect("token");
    // Logged in through the form, as from the console's own page: the session's cookie.
    let login = client
        .post(format!("{base}/login"))
        .header("origin", &base)
        .form(&[("token", token.trim())])
        .send()
        .await
        .expect("login");
    assert_eq!(login.status().as_u16(), 303, "logged in");
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .expect("a cookie")
        .split(';')
        .next()
        .expect("a cookie")
        .to_owned();
    println!(
        "console.rss.idle: {:.1} MB (RssAnon {:.1} MB)",
        status_mb(pid, "VmRSS"),
        status_mb(pid, "RssAnon")
    );
    let session = "/session?id=telegram%3A1";
    let live = format!("/session/live?id=telegram%3A1&after={ENTRIES}&len={ENTRIES}");
    for (label, path, status) in [
        ("timeline, newest page", session.to_owned(), 200),
        (
            "timeline with the work lane",
            format!("{session}&work=1"),
            200,
        ),
        ("an older page", format!("{session}&before=5000"), 200),
        ("search", format!("{session}&q=deploy%20the%20release"), 200),
        ("live poll, nothing new", live, 204),
    ] {
        let mut took = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let started = Instant::now();
            let response = client
                .get(format!("{base}{path}"))
                .header("cookie", &cookie)
                .send()
                .await
                .expect("request");
            assert_eq!(response.status().as_u16(), status, "{path}");
            response.bytes().await.expect("body");
            took.push(started.elapsed());
        }
        took.sort();
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
        println!(
            "console.{label} ({ENTRIES} entries): p50 {} p95 {} max {}",
            ms(took[SAMPLES / 2]),
            ms(took[SAMPLES * 95 / 100]),
            ms(took[SAMPLES - 1])
        );
    }
    println!(
        "console.rss.after: {:.1} MB (RssAnon {:.1} MB)",
        status_mb(pid, "VmRSS"),
        status_mb(pid, "RssAnon")
    );
    let _ = child.kill().await;
}

/// `bub message` against the fake Telegram, its idle VmRSS and RssAnon (MB).
async fn daemon_idle(console: bool) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = fake_openai::start().await;
    let telegram = fake_telegram::start().await;
    let mut cmd = daemon_command(dir.path(), &model, &telegram, 600);
    cmd.env("BUB_CONSOLE", console.to_string())
        .env("BUB_CONSOLE_LISTEN", free_port().to_string());
    let (mut child, pid) = serving(cmd, &telegram).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let figures = (status_mb(pid, "VmRSS"), status_mb(pid, "RssAnon"));
    let _ = child.kill().await;
    figures
}

/// A tape of [`ENTRIES`] entries for `session` in `workspace`, as the agent writes them.
fn write_tape(home: &Path, workspace: &Path, session: &str) {
    let name = bub::tape::tape_name_for("bub", session);
    let path = bub::tape::tape_path(home, workspace, &name);
    std::fs::create_dir_all(path.parent().expect("tapes")).expect("tapes dir");
    let date = "2026-11-27T10:00:00.000Z";
    let said =
        "Could you look at the build logs and tell me why the nightly job failed? ".repeat(3);
    let output = "test result: ok. 412 passed; 0 failed\n".repeat(40);
    let mut lines = Vec::with_capacity(ENTRIES as usize);
    for id in 1..=ENTRIES {
        let (kind, payload) = match id % 10 {
            _ if id % 1000 == 1 => (
                "anchor",
                json!({"name": format!("phase/{}", id / 1000), "state": {"owner": "human", "session": session, "summary": "Deployed the release; the nightly job is green."}}),
            ),
            2 => (
                "message",
                json!({"role": "user", "content": format!("channel: $telegram\n@ann: {said}")}),
            ),
            3 | 7 => (
                "event",
                json!({"name": "loop.step.start", "data": {"step": 1}}),
            ),
            4 => (
                "tool_call",
                json!({"calls": [{"id": format!("c{id}"), "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"cargo test 2>&1 | tail -40\"}"}}]}),
            ),
            5 => (
                "tool_result",
                json!({"results": [output], "status": ["ok"]}),
            ),
            8 => (
                "message",
                json!({"role": "assistant", "content": "The nightly job failed on a flaky network test; I re-ran it and it passed. Shall I deploy the release?"}),
            ),
            _ => ("event", json!({"name": "run", "data": {"status": "ok"}})),
        };
        lines.push(
            json!({"id": id, "kind": kind, "payload": payload, "meta": {}, "date": date})
                .to_string(),
        );
    }
    std::fs::write(path, lines.join("\n") + "\n").expect("write tape");
}
