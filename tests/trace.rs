//! The model's tool calls as a person at the terminal sees them: `bub chat` under a
//! pseudo-terminal ([`support::pty`]: the real binary, its screen as a user's terminal gets it)
//! and `bub run -v`, against the fake OpenAI server scripted to call `bash` and then answer.

use crate::support;

use serde_json::json;
use support::bub_env::{Env, stderr, stdout};
use support::pty::{Chat, on_pty};

/// Bub's model key in [`Env::cli`]: a tool's arguments and output carry it in these tests.
const SECRET: &str = "sk-test-secret";

#[tokio::test(flavor = "multi_thread")]
async fn chat_shows_each_tool_call_as_it_starts_and_ends() {
    let env = Env::cli().await;
    env.model
        .push_tool_calls(&[("bash", json!({"cmd": "echo hi\necho there >/dev/null"}))]);
    env.model.push_text("The shell said hi.");
    env.model
        .push_tool_calls(&[("bash", json!({"cmd": "echo broken >&2; exit 3"}))]);
    env.model.push_text("That failed.");
    env.model
        .push_tool_calls(&[("fs_read", json!({"path": "missing.txt"}))]);
    env.model.push_text("No such file.");
    let chat = Chat::start(&env);
    let screen = on_pty(move || {
        let mut chat = chat;
        chat.type_line("say hi");
        let started = chat.expect("→ bash: echo hi …");
        assert!(!started.contains("Assistant"), "{started}");
        let ended = chat.expect_regex(r"✓ bash \d+ ms, 1 line");
        assert!(!ended.contains("The shell said hi."), "{ended}");
        chat.expect("The shell said hi.");

        chat.type_line("break it");
        chat.expect("→ bash: echo broken >&2; exit 3");
        // Red, with the first line of the error (the output of the command).
        chat.expect_regex(r"\x1b\[1;31m✗ bash \d+ ms: exit=3: broken\x1b\[0m");
        chat.expect("That failed.");

        chat.type_line("read it");
        chat.expect("→ fs.read path=missing.txt");
        chat.expect_regex(r"✗ fs.read \d+ ms: ");
        chat.expect("No such file.");
        chat.quit()
    })
    .await;
    // The one-liners are all there is: no full output without `,debug`.
    assert!(!screen.contains("    hi"), "{screen}");
    assert_eq!(env.model.request_count(), 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn debug_shows_full_arguments_and_results_and_never_a_secret() {
    let env = Env::cli().await;
    std::fs::write(env.workspace.join("key.txt"), format!("key: {SECRET}\n")).unwrap();
    env.model
        .push_tool_calls(&[("bash", json!({"cmd": "seq 101 103"}))]);
    env.model.push_text("Counted.");
    env.model.push_tool_calls(&[
        ("bash", json!({"cmd": format!("echo {SECRET}")})),
        ("bash", json!({"cmd": "cat key.txt >&2; exit 1"})),
        ("fs_read", json!({"path": "key.txt"})),
    ]);
    env.model.push_text("Done with the key.");
    let chat = Chat::start(&env);
    let screen = on_pty(move || {
        let mut chat = chat;
        chat.type_line(",debug");
        chat.expect("Debug view on");
        chat.expect("ws > ");
        chat.type_line("count");
        chat.expect("→ bash: seq 101 103");
        chat.expect(r#""cmd": "seq 101 103""#);
        chat.expect_regex(r"✓ bash \d+ ms, 3 lines");
        // The whole output, which the one-liner only counts.
        chat.expect("    101");
        chat.expect("    102");
        chat.expect("    103");
        chat.expect("Counted.");

        chat.type_line("show the key");
        chat.expect("→ bash: echo [redacted]");
        chat.expect(r#""cmd": "echo [redacted]""#);
        chat.expect("    [redacted]");
        chat.expect_regex(r"✗ bash \d+ ms: exit=1: key: \[redacted\]");
        chat.expect("→ fs.read path=key.txt");
        chat.expect("key: [redacted]");
        chat.expect("Done with the key.");

        chat.type_line(",debug");
        chat.expect("Debug view off");
        chat.quit()
    })
    .await;
    assert!(!screen.contains(SECRET), "{screen}");
    // `,debug` is the chat's own: neither the model nor the tape saw it.
    let prompts = env.model_prompts();
    assert!(prompts.iter().all(|p| !p.contains("debug")), "{prompts:?}");
    assert!(!env.tape_text().contains(",debug"));
    assert_eq!(env.model.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_verbose_prints_the_lines_on_stderr_and_only_the_answer_on_stdout() {
    let env = Env::cli().await;
    env.model.push_tool_calls(&[
        ("bash", json!({"cmd": "echo hi"})),
        ("bash", json!({"cmd": format!("echo {SECRET}; exit 2")})),
    ]);
    env.model.push_text("All done.");
    let out = env.run(&["run", "-v", "go"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "All done.\n");
    let lines: Vec<String> = stderr(&out).lines().map(str::to_owned).collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {lines:#?}"))
    };
    let started = at("→ bash: echo hi");
    let ended = at("✓ bash ");
    assert!(started < ended, "{lines:#?}");
    assert!(lines[ended].ends_with(" ms, 1 line"), "{lines:#?}");
    assert!(at("→ bash: echo [redacted]; exit 2") > ended);
    assert!(
        lines[at("✗ bash ")].ends_with(": exit=2: [redacted]"),
        "{lines:#?}"
    );
    // Not a terminal: no colour.
    assert!(!stderr(&out).contains('\x1b'), "{lines:#?}");
    assert!(!stderr(&out).contains(SECRET), "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_without_verbose_keeps_stderr_free_of_info_lines() {
    let mut env = Env::cli().await;
    // As a user runs it: no BUB_LOG_LEVEL.
    env.vars.retain(|(key, _)| key != "BUB_LOG_LEVEL");
    env.model
        .push_tool_calls(&[("bash", json!({"cmd": "echo hi"}))]);
    env.model.push_text("All done.");
    let out = env.run(&["run", "go"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "All done.\n");
    assert_eq!(stderr(&out), "");

    // Asked for explicitly, INFO lines are still there.
    env.set("BUB_LOG_LEVEL", "info");
    env.model
        .push_tool_calls(&[("bash", json!({"cmd": "echo hi"}))]);
    env.model.push_text("Again.");
    let out = env.run(&["run", "go"]).await;
    assert_eq!(stdout(&out), "Again.\n");
    assert!(stderr(&out).contains("tool.call.start"), "{}", stderr(&out));
}
