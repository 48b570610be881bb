//! What Bub keeps in `BUB_HOME` is its owner's only: after a turn, a memory entry, a job, a
//! model switch, a pairing request and a terminal chat (its log), no file or folder under
//! `BUB_HOME` — nor `BUB_HOME` itself, which Bub created — has a group or other permission bit.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use support::bub_env::{Env, WAIT, stderr};
use support::fake_telegram::private_text;

/// Every entry under `root`, `root` included, with its permission bits.
fn modes(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(path) = todo.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
        found.push((path, meta.permissions().mode() & 0o777));
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn everything_bub_keeps_is_created_for_its_owner_only() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "42");
    env.set("BUB_TELEGRAM_OWNERS", "42");
    env.model.push_text("Noted.");
    let daemon = env.start();
    for text in [
        "remember: I like tea",
        ",schedule.add message=stretch after_seconds=3600",
        ",model openai:other-model",
    ] {
        env.telegram.push_message(private_text(42, 42, text));
    }
    // A stranger asks to pair.
    env.telegram.push_message(private_text(50, 50, "hello"));
    // Three answers, the stranger's code and the owner's notice of it.
    env.telegram.wait_for_calls("sendMessage", 5, WAIT).await;
    assert!(daemon.stop().await.success());
    // The terminal chat logs to a file.
    let out = env.run(&["chat"]).await;
    assert!(out.status.success(), "{}", stderr(&out));

    let found = modes(&env.home);
    let names: Vec<String> = found
        .iter()
        .map(|(p, _)| p.strip_prefix(&env.home).unwrap().display().to_string())
        .collect();
    for kept in [
        "tapes",
        "jobs.json",
        "memory/chats/telegram%3A42.md",
        "access.json",
        "usage.jsonl",
        "inbox.jsonl",
        "models.json",
        "logs/chat.log",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(kept)),
            "{kept} was written: {names:?}"
        );
    }
    let open: Vec<String> = found
        .iter()
        .filter(|(_, mode)| mode & 0o077 != 0)
        .map(|(path, mode)| format!("{mode:o} {}", path.display()))
        .collect();
    assert!(open.is_empty(), "group or other bits: {open:#?}");
}
