//! Memory (`cargo bench --bench memory`): the prompt cost of the `<memory>` block. With the
//! global and the chat memory filled past their caps (entries of 120 to 300 characters, ASCII
//! and Chinese) and a full working checkpoint, it reports what the files hold, the block's size
//! in bytes and estimated tokens (and its share of the default compaction budget), how long
//! building it takes (it is read at every model step), and — through the release `bub run` and
//! the fake model — how much larger the system prompt the model receives is than with no memory.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Instant;

use bub::memory::{Author, MAX_BYTES, MAX_CHECKPOINT_BYTES, Memory, Scope};
use support::bench::bub_command;
use support::fake_openai;

/// The system prompt of `bub run TEXT` in `dir`, as the model received it.
fn system_prompt(rt: &tokio::runtime::Runtime, dir: &Path, text: &str) -> String {
    let model = rt.block_on(fake_openai::start());
    model.push_text("ok");
    let _entered = rt.enter();
    let mut cmd = bub_command(dir, &model);
    cmd.env("BUB_LOG_LEVEL", "warn").args(["run", text]);
    let out = rt.block_on(cmd.output()).expect("bub run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let request = model.requests().pop().expect("a request");
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Fills `scope` with `n` distinct entries of `chars` characters (`wide`: Chinese text).
async fn fill(memory: &Memory, scope: &Scope, n: usize, chars: usize, wide: bool) {
    for i in 0..n {
        let word = if wide { "记住偏好" } else { "prefers " };
        let text: String = format!("{i} {}", word.repeat(chars))
            .chars()
            .take(chars)
            .collect();
        memory
            .remember(scope, &text, &Author::Owner)
            .await
            .expect("remember");
    }
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let budget = 32_000 * 75 / 100;
    for (label, chars, wide) in [
        ("ascii 120", 120, false),
        ("ascii 300", 300, false),
        ("chinese 120", 120, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let empty = system_prompt(&runtime, dir.path(), "hello");
        let memory = Memory::new(&dir.path().join("home"));
        let chat = Scope::Chat("cli".to_owned());
        runtime.block_on(fill(&memory, &Scope::Global, 80, chars, wide));
        runtime.block_on(fill(&memory, &chat, 80, chars, wide));
        let checkpoint = "next step ".repeat(MAX_CHECKPOINT_BYTES);
        runtime
            .block_on(memory.set_checkpoint("cli", &checkpoint, &Author::Owner))
            .expect("checkpoint");
        let bytes = |scope: &Scope| {
            std::fs::metadata(memory.path(scope).expect("files")).map_or(0, |m| m.len())
        };
        assert!(
            bytes(&Scope::Global) as usize <= MAX_BYTES + 1
                && bytes(&chat) as usize <= MAX_BYTES + 1
        );
        let block = runtime.block_on(memory.prompt_block("cli", true));
        let runs = 2_000;
        let started = Instant::now();
        runtime.block_on(async {
            for _ in 0..runs {
                std::hint::black_box(memory.prompt_block("cli", true).await);
            }
        });
        let per_build = started.elapsed().as_secs_f64() * 1e6 / runs as f64;
        let full = system_prompt(&runtime, dir.path(), "hello");
        let tokens = bub::llm::estimate_tokens(&block);
        println!(
            "memory.block ({label}-character entries, past the caps): global {} entries {} B, \
             chat {} entries {} B; block {} B ≈ {tokens} tokens ({:.1} % of the {budget}-token \
             budget); built in {per_build:.1} µs; system prompt {} → {} tokens",
            runtime.block_on(memory.list(&Scope::Global)).len(),
            bytes(&Scope::Global),
            runtime.block_on(memory.list(&chat)).len(),
            bytes(&chat),
            block.len(),
            tokens as f64 * 100.0 / budget as f64,
            bub::llm::estimate_tokens(&empty),
            bub::llm::estimate_tokens(&full),
        );
    }
}
