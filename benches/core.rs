//! Benchmarks of the core paths (`cargo bench --bench core`, release build, no harness).
//!
//! Tape: builds a 100k-entry tape (a realistic mix of messages, tool calls/results and events
//! with ~200-byte payloads, one handoff anchor 50 entries before the end) and reports the
//! append rate, open + context build time, and search time for a realistic typo'd query and a
//! no-match worst case (a full scan). One line per figure, e.g. `tape.append: 85000 entries/s`.
//!
//! Router: time per input to route plain text (the path every chat message takes), a long
//! assistant answer without commands, and an internal comma command (parse, run, tape event).
//!
//! MCP: one `mcp.call` of the fake MCP server's `echo` over stdio (Python, as in the tests),
//! through the registry (policy, redaction): the p50 and p90 of the round trip.
//!
//! Each benchmark is a function; `main` calls them in turn (add new ones at the marked place).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bub::access::Authority;
use bub::agent::router::Router;
use bub::config::Settings;
use bub::redact::Redactor;
use bub::tape::{FileTape, Kind, Searched};
use bub::tools::{ToolContext, builtin_registry};
use serde_json::{Value, json};

const TAPE_ENTRIES: usize = 100_000;
const RUNS: usize = 7;

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tape_path = bench_tape_append(dir.path());
    bench_tape_open_context(&tape_path);
    bench_tape_search(&tape_path);
    bench_router(dir.path());
    bench_redact();
    bench_inbox(dir.path());
    bench_mcp(dir.path());
}

/// An MCP tool call's round trip: `mcp.call` → the registry → rmcp → the fake's stdio and
/// back, 500 times after the server started.
fn bench_mcp(dir: &Path) {
    let (home, workspace) = (dir.join("mcp-home"), dir.join("mcp-ws"));
    std::fs::create_dir_all(&home).expect("home");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/mcp_server.py");
    let servers = json!({"mcpServers": {"fake": {"command": "python3", "args": [script]}}});
    std::fs::write(home.join("mcp.json"), servers.to_string()).expect("mcp.json");
    let env = [
        ("BUB_HOME", home.display().to_string()),
        ("PATH", std::env::var("PATH").unwrap_or_default()),
    ];
    let settings = Settings::load(&bub::config::LoadOptions {
        workspace: Some(workspace),
        env: Some(env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
        ..Default::default()
    })
    .expect("settings");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let ctx = ToolContext::standalone(
        settings,
        builtin_registry(&[]),
        "mcp",
        Authority::terminal(),
    )
    .expect("context");
    let registry = ctx.registry().clone();
    let call = || {
        let args = json!({"name": "mcp.fake.echo", "arguments": {"text": "ping"}});
        rt.block_on(registry.execute("mcp.call", args, ctx.clone()))
    };
    assert_eq!(call().expect("the fake answers"), "echo: ping");
    let mut times: Vec<Duration> = (0..500)
        .map(|_| {
            let start = Instant::now();
            black_box(call().expect("echo"));
            start.elapsed()
        })
        .collect();
    times.sort();
    let us = |d: Duration| format!("{:.0} µs", d.as_secs_f64() * 1e6);
    println!(
        "mcp stdio echo round trip: p50 {}, p90 {}",
        us(times[times.len() / 2]),
        us(times[times.len() * 9 / 10])
    );
    rt.block_on(ctx.process.mcp.shutdown());
}

/// The durable inbox: the cost of journaling one received message (a ~600-byte Telegram
/// prompt) and of each progress record of its turn (start, answer, done), each awaited until
/// the journal's writer task has written it (one hop to the writer, one `write` per batch, no
/// fsync). `done` alone is the duplicate window: a crash between the platform accepting an
/// answer and that write repeats the answer after a restart. Then the same messages from 64
/// chats at once: the writer batches what is queued into one `write`.
fn bench_inbox(dir: &Path) {
    use std::sync::Arc;

    use bub::access::Role;
    use bub::channels::{Inbound, Outbound, Sender};
    use bub::inbox::{Delivery, Inbox, Outcome};
    const N: u64 = 20_000;
    const CHATS: u64 = 64;
    let prompt = Prose(11).text(600);
    let message = move |i: u64| {
        let sender = Sender::new("42", None, Role::Owner);
        let (chat, id) = ((i % 300).to_string(), i.to_string());
        Inbound {
            mentioned: true,
            ..Inbound::new("telegram", &chat, &id, sender, &prompt)
        }
    };
    let delivery = |message: &Inbound| Delivery {
        channel: "telegram".into(),
        seqs: vec![message.seq],
        out: Outbound {
            chat_id: message.chat_id.clone(),
            text: "An answer of a typical length, a sentence or two.".into(),
            reply_to: None,
            file: None,
            edit: None,
        },
        parts_sent: 0,
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let path = dir.join("inbox.jsonl");
    rt.block_on(async {
        let (inbox, _) = Inbox::open(&path, |m| Some(m.sender.role)).expect("inbox");
        let mut received = Duration::ZERO;
        let mut progress = Duration::ZERO;
        let mut done = Duration::ZERO;
        for i in 0..N {
            let mut message = message(i);
            let at = Instant::now();
            inbox.receive(&mut message, Some(i)).await.expect("receive");
            received += at.elapsed();
            let delivery = delivery(&message);
            let at = Instant::now();
            inbox.started(&delivery.seqs).await;
            inbox.answered(&delivery).await;
            progress += at.elapsed();
            let at = Instant::now();
            inbox.done(&delivery.seqs, Outcome::Sent).await;
            done += at.elapsed();
        }
        let per = |d: Duration| d.as_secs_f64() * 1e6 / N as f64;
        println!(
            "inbox: receive {:.1} µs per message, start + answer {:.1} µs, done {:.1} µs (journal {} KiB after compaction)",
            per(received),
            per(progress),
            per(done),
            std::fs::metadata(&path).map_or(0, |m| m.len() / 1024)
        );

        let inbox = Arc::new(inbox);
        let at = Instant::now();
        let chats: Vec<_> = (0..CHATS)
            .map(|chat| {
                let inbox = inbox.clone();
                let message = message.clone();
                tokio::spawn(async move {
                    for i in (0..N / CHATS).map(|k| N + k * CHATS + chat) {
                        let mut message = message(i);
                        inbox.receive(&mut message, Some(i)).await.expect("receive");
                        let delivery = delivery(&message);
                        inbox.started(&delivery.seqs).await;
                        inbox.answered(&delivery).await;
                        inbox.done(&delivery.seqs, Outcome::Sent).await;
                    }
                })
            })
            .collect();
        for chat in chats {
            chat.await.expect("chat task");
        }
        println!(
            "inbox: {CHATS} chats at once: {:.1} µs per message and its turn's records",
            at.elapsed().as_secs_f64() * 1e6 / (N / CHATS * CHATS) as f64
        );
    });
}

/// The redactor on one 32 KiB tool result (shell output), with no secret in it and with two.
fn bench_redact() {
    let secrets = [
        "123456789:AAH4-telegram-bot-token-example-xyz",
        "sk-or-v1-0123456789abcdef0123456789abcdef",
        "discord.bot.token.example.0123456789",
        "ollama-key-0123456789",
    ];
    let redactor = Redactor::new(secrets);
    let clean = Prose(7).text(32 * 1024);
    let mut leaky = clean.clone();
    leaky.insert_str(1000, secrets[0]);
    leaky.insert_str(20_000, secrets[1]);
    const N: u32 = 2_000;
    for (label, text) in [("no secret", &clean), ("two secrets", &leaky)] {
        let time = median(|| {
            for _ in 0..N {
                black_box(redactor.redact(black_box(text)));
            }
        });
        println!(
            "redact 32 KiB tool result ({label}): {:.1} µs per result",
            time.as_secs_f64() * 1e6 / f64::from(N)
        );
    }
}

/// Median wall time of `RUNS` runs of `f`.
fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Deterministic pseudo-random prose of about `len` bytes.
struct Prose(u64);

const WORDS: &[&str] = &[
    "the",
    "file",
    "config",
    "server",
    "request",
    "handler",
    "returns",
    "error",
    "value",
    "list",
    "update",
    "check",
    "build",
    "test",
    "output",
    "module",
    "function",
    "parse",
    "token",
    "cache",
    "user",
    "reply",
    "channel",
    "message",
    "session",
    "schedule",
    "reminder",
    "workspace",
    "path",
    "read",
    "write",
    "line",
    "number",
    "string",
    "result",
    "status",
    "retry",
    "timeout",
    "limit",
];

impl Prose {
    fn text(&mut self, len: usize) -> String {
        let mut out = String::with_capacity(len + 16);
        while out.len() < len {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(WORDS[(self.0 % WORDS.len() as u64) as usize]);
        }
        out
    }
}

/// The `i`-th entry of the synthetic tape: cycles of a 10-entry model turn.
fn synthetic_entry(i: usize, prose: &mut Prose) -> (Kind, Value, Value) {
    let meta = json!({"run_id": format!("{:032x}", i / 10)});
    match i % 10 {
        0 => {
            let mut text = prose.text(180);
            if i.is_multiple_of(1000) {
                text.push_str(" Please review the database migration plan.");
            }
            (
                Kind::Message,
                json!({"role": "user", "content": text}),
                meta,
            )
        }
        1 => (
            Kind::Event,
            json!({"name": "loop.step.start", "data": {"step": 1, "model": "openrouter:qwen/qwen3"}}),
            json!({}),
        ),
        2 => {
            let args = json!({"path": "src/main.rs", "note": prose.text(100)}).to_string();
            let call = json!({"id": format!("call-{i}"), "type": "function", "function": {"name": "fs_read", "arguments": args}});
            (Kind::ToolCall, json!({"calls": [call]}), meta)
        }
        3 => (
            Kind::ToolResult,
            json!({"results": [prose.text(200)]}),
            meta,
        ),
        4 => (
            Kind::Event,
            json!({"name": "run", "data": {"status": "ok", "usage": {"prompt_tokens": 900, "completion_tokens": 80, "total_tokens": 980}}}),
            meta,
        ),
        5 => (
            Kind::Message,
            json!({"role": "user", "content": "Continue the task."}),
            meta,
        ),
        6 => (
            Kind::Message,
            json!({"role": "assistant", "content": prose.text(200)}),
            meta,
        ),
        7 => (
            Kind::Event,
            json!({"name": "run", "data": {"status": "ok"}}),
            meta,
        ),
        8 => (
            Kind::Event,
            json!({"name": "loop.step.finish", "data": {"step": 2, "visible_text": true}}),
            json!({}),
        ),
        _ => (
            Kind::Event,
            json!({"name": "loop.result", "data": {"steps": 2, "followups": 1, "error": null}}),
            json!({}),
        ),
    }
}

/// Builds the 100k-entry tape through `Tape::append` and reports the append rate.
fn bench_tape_append(dir: &Path) -> PathBuf {
    let path = dir.join("bench.jsonl");
    let mut tape = FileTape::open_path(path.clone(), "bench".into()).expect("open tape");
    let mut prose = Prose(0x9E37_79B9_7F4A_7C15);
    tape.ensure_bootstrap().expect("bootstrap");
    let mut appended = 0usize;
    let mut spent = Duration::ZERO;
    for i in 2..TAPE_ENTRIES {
        if i == TAPE_ENTRIES - 50 {
            tape.handoff(
                "phase-2",
                Some("migrated the config loader"),
                Some("wire the router"),
            )
            .expect("handoff");
            continue;
        }
        let (kind, payload, meta) = synthetic_entry(i, &mut prose);
        let start = Instant::now();
        tape.append(kind, payload, meta).expect("append");
        spent += start.elapsed();
        appended += 1;
    }
    let rate = appended as f64 / spent.as_secs_f64();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "tape.append: {rate:.0} entries/s ({appended} appends, file {:.1} MB)",
        size as f64 / 1e6
    );
    path
}

/// Opens the tape cold (new handle, index built from the file) and builds the context.
fn bench_tape_open_context(path: &Path) {
    let mut messages = 0;
    let time = median(|| {
        let mut tape = FileTape::open_path(path.to_path_buf(), "bench".into()).expect("open tape");
        let context = tape.context_messages().expect("context");
        messages = context.len();
        black_box(context);
    });
    println!(
        "tape.open+context: {} (median of {RUNS}, {TAPE_ENTRIES} entries, {messages} context messages)",
        ms(time)
    );
}

/// Searches an open tape: a typo'd query that matches recent entries, and a no-match query.
fn bench_tape_search(path: &Path) {
    let mut tape = FileTape::open_path(path.to_path_buf(), "bench".into()).expect("open tape");
    tape.len().expect("index");
    for (label, query, limit) in [
        (
            "realistic 'databse migrtion' limit 5",
            "databse migrtion",
            5,
        ),
        (
            "no match 'quixotic zephyr' (full scan)",
            "quixotic zephyr",
            20,
        ),
    ] {
        let mut found = 0;
        let time = median(|| {
            let hits = tape
                .search(query, limit, Searched::Everything)
                .expect("search");
            found = hits.len();
            black_box(hits);
        });
        println!("tape.search {label}: {} ({found} matches)", ms(time));
    }
}

/// Router overhead per input, averaged over many inputs on one session.
fn bench_router(dir: &Path) {
    let workspace = dir.join("ws");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let mut settings = Settings::with_defaults(dir.join("home"), workspace);
    settings.tape_name = "bench".into();
    let ctx = ToolContext::standalone(
        settings,
        builtin_registry(&[]),
        "router",
        Authority::terminal(),
    )
    .expect("context");
    let router = Router::new(ctx);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let answer = "Here is what I found about the configuration loader.\n".repeat(40);
    const N: u32 = 5_000;
    let per_input = |f: &dyn Fn()| {
        let time = median(|| {
            for _ in 0..N {
                f();
            }
        });
        format!("{:.2} µs", time.as_secs_f64() * 1e6 / f64::from(N))
    };
    let plain = per_input(&|| {
        black_box(rt.block_on(router.route_user("please summarise the last three commits")));
    });
    let long = per_input(&|| {
        black_box(rt.block_on(router.route_assistant(&answer)));
    });
    let command = per_input(&|| {
        black_box(rt.block_on(router.route_user(",tool.describe name=fs.read")));
    });
    println!("router plain text: {plain} per input");
    println!(
        "router assistant answer ({} bytes, no commands): {long} per input",
        answer.len()
    );
    println!("router internal command (,tool.describe + tape event): {command} per input");
}
