//! Text that came from a chat reaches the terminal escaped: a guest's job message and memory
//! entry, a learned skill and a stranger's username, carry escape sequences (OSC 52 writes the
//! clipboard, `ESC [2J` clears the screen, OSC 0 sets the title) to disk; `bub jobs list`, `bub
//! memory list`, `bub skills list`, `bub status`, `bub pair list` and `bub access explain` print
//! them as visible escapes.
//! The real binary against the fake Telegram and the fake model.

use crate::support;

use serde_json::json;
use support::bub_env::{Env, WAIT, stdout};
use support::fake_telegram::private_text;

/// OSC 52 (set the clipboard to "Hello"), then clear the screen.
const EVIL: &str = "\x1b]52;c;SGVsbG8=\x07\x1b[2J";
/// How it is shown.
const SHOWN: &str = "\\x1b]52;c;SGVsbG8=\\x07\\x1b[2J";

/// Runs `bub ARGS`, asserts success, and that stdout holds no control character but newlines
/// and `shown`; returns stdout.
async fn printed(env: &Env, args: &[&str], shown: &str) -> String {
    let out = env.run(args).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{args:?}: {out:?}");
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{args:?} printed a control character: {text:?}"
    );
    assert!(text.contains(shown), "{args:?}: {text}");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_text_reaches_the_terminal_escaped() {
    let mut env = Env::new().await;
    env.set("BUB_TELEGRAM_ALLOW_FROM", "50");
    env.set("BUB_TELEGRAM_OWNERS", "42");
    // Guest 50 has the model schedule a job and remember a line, both hostile.
    env.model.push_tool_calls(&[
        (
            "schedule_add",
            json!({"message": EVIL, "cron": "0 0 1 1 *"}),
        ),
        ("memory_remember", json!({"text": format!("likes {EVIL}")})),
    ]);
    env.model.push_text("Done.");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(50, 50, "remind me every new year"));
    env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    // A stranger with a hostile username asks for a code.
    let title = "x\x1b]0;pwned\x07";
    env.telegram.push_message(
        private_text(66, 66, "hi")
            .from(json!({"id": 66, "is_bot": false, "first_name": "M", "username": title})),
    );
    env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    printed(&env, &["status"], SHOWN).await;
    assert!(daemon.stop().await.success());

    // The hostile bytes are on disk as they came.
    let jobs = std::fs::read_to_string(env.home.join("jobs.json")).unwrap();
    assert!(jobs.contains("\\u001b]52;c;SGVsbG8="), "{jobs}");
    let memory = std::fs::read_to_string(env.home.join("memory/chats/telegram%3A50.md")).unwrap();
    assert!(memory.contains(EVIL), "{memory:?}");

    // A learned skill whose description came from a chat.
    let skill = env.workspace.join(".agents/skills/evil");
    std::fs::create_dir_all(&skill).unwrap();
    let frontmatter =
        "name: evil\ndescription: \"x \\e]52;c;SGVsbG8=\\a\\e[2J\"\nmetadata:\n  learned: true";
    std::fs::write(
        skill.join("SKILL.md"),
        format!("---\n{frontmatter}\n---\nSteps.\n"),
    )
    .unwrap();
    printed(
        &env,
        &["skills", "list"],
        &format!("evil: x {SHOWN} (project, learned"),
    )
    .await;
    printed(&env, &["jobs", "list"], SHOWN).await;
    let entry = format!("  - [guest telegram:50 @user50] likes {SHOWN}");
    let listed = printed(&env, &["memory", "list"], &entry).await;
    assert!(listed.contains("chat telegram:50 ("), "{listed}");
    let shown_title = "@x\\x1b]0;pwned\\x07";
    printed(&env, &["pair", "list"], shown_title).await;
    printed(&env, &["access", "explain", "telegram:66"], shown_title).await;
}
