//! Memory through the `bub` binary and the fake model: a `remember:` message and the
//! `memory.remember` tool keep entries in `BUB_HOME/memory/`, and they reach the system prompt
//! of later turns — after `tape.reset` and in a new process; `bub memory list|edit` in the
//! terminal. (A guest's turn and the global memory: the unit tests of `tools/memory.rs`.)

use serde_json::{Value, json};

use crate::support::bub_env::{Env, stderr};

/// The system prompt of a request the fake model received.
fn system(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_remembered_preference_reaches_the_prompt_after_a_reset_and_a_restart() {
    let mut env = Env::cli().await;
    env.model.push_text("Noted.");
    let out = env.run(&["run", "remember: I prefer metric units"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let file = env.home.join("memory/chats/cli.md");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "- I prefer metric units\n"
    );
    // The turn still ran, and its own prompt already shows the entry.
    assert!(system(&env.model.requests()[0]).contains("- I prefer metric units"));

    // The model keeps a global fact with its tool.
    env.model.push_tool_calls(&[(
        "memory_remember",
        json!({"text": "The owner is Ana.", "scope": "global"}),
    )]);
    env.model.push_text("Done.");
    let out = env.run(&["run", "my name is Ana"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let global = std::fs::read_to_string(env.home.join("memory/global.md")).unwrap();
    assert_eq!(global, "- The owner is Ana.\n");

    let out = env.run(&["run", ",tape.reset"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    env.model.push_text("Hello Ana, in kilometres.");
    let before = env.model.request_count();
    let out = env.run(&["run", "how far is it?"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let prompt = system(&env.model.requests_since(before)[0]);
    assert!(prompt.contains("<memory>"), "{prompt}");
    assert!(prompt.contains("- The owner is Ana."), "{prompt}");
    assert!(prompt.contains("- I prefer metric units"), "{prompt}");

    // A person edits the file by hand; the next turn sees the edit.
    std::fs::write(&file, "# mine\n- I prefer imperial units\n").unwrap();
    env.model.push_text("In miles.");
    let before = env.model.request_count();
    assert!(env.run(&["run", "and now?"]).await.status.success());
    let prompt = system(&env.model.requests_since(before)[0]);
    assert!(prompt.contains("- I prefer imperial units") && !prompt.contains("metric"));

    // Turned off: nothing shown, nothing kept.
    env.set("BUB_MEMORY_ENABLED", "false");
    env.model.push_text("Fine.");
    let before = env.model.request_count();
    assert!(
        env.run(&["run", "remember: a secret"])
            .await
            .status
            .success()
    );
    assert!(!system(&env.model.requests_since(before)[0]).contains("<memory>"));
    assert!(!std::fs::read_to_string(&file).unwrap().contains("secret"));
}

#[tokio::test]
async fn memory_tools_list_search_and_forget_and_the_terminal_lists_and_edits() {
    let env = Env::cli().await;
    for (text, scope) in [
        ("likes tea", "chat"),
        ("likes green tea", "chat"),
        ("owner is Ana", "global"),
    ] {
        let arg = format!("text={text:?} scope={scope}");
        let out = env.run(&["run", &format!(",memory.remember {arg}")]).await;
        assert!(out.status.success(), "stderr: {}", stderr(&out));
    }
    let out = env.run(&["run", ",memory.search query=tea"]).await;
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(listed.contains("chat: likes tea") && listed.contains("chat: likes green tea"));
    assert!(!listed.contains("Ana"));
    let out = env.run(&["run", ",memory.forget text=GREEN"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("forgot 1"));
    let out = env.run(&["run", ",memory.list"]).await;
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(listed.contains("global: owner is Ana") && listed.contains("chat: likes tea"));
    assert!(!listed.contains("green"));

    // A working checkpoint: noted with the next turn's prompt (never in the system prompt, which
    // must stay byte-stable), so every step of the turn shows it.
    let checkpoint = r#",memory.checkpoint text="goal: ship v2; next: tests""#;
    let out = env.run(&["run", checkpoint]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("checkpoint saved"));
    env.model.push_tool_calls(&[("tape_info", json!({}))]);
    env.model.push_text("On it.");
    let before = env.model.request_count();
    assert!(env.run(&["run", "go on"]).await.status.success());
    for request in env.model.requests_since(before) {
        assert!(!system(&request).contains("goal: ship v2"));
        let messages = request["messages"].to_string();
        assert!(
            messages.contains("<checkpoint>") && messages.contains("goal: ship v2; next: tests"),
            "{messages}"
        );
    }

    // In the terminal: `bub memory edit` opens the file in $EDITOR, `bub memory list` shows all.
    let mut edit = env.command(&["memory", "edit", "--session", "cli"]);
    edit.env("EDITOR", "printf '%s\\n' '- from the editor' >>");
    let out = crate::support::wait::bounded(edit.output()).await.unwrap();
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let out = env.run(&["memory", "list"]).await;
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(listed.contains("global ("), "{listed}");
    assert!(listed.contains("  - owner is Ana"), "{listed}");
    assert!(listed.contains("chat cli ("), "{listed}");
    assert!(
        listed.contains("  - likes tea\n  - from the editor"),
        "{listed}"
    );
}

#[tokio::test]
async fn a_failed_then_fixed_tool_call_leaves_a_lesson() {
    let env = Env::cli().await;
    std::fs::write(env.workspace.join("notes.txt"), "hello").unwrap();
    env.model
        .push_tool_calls(&[("fs_read", json!({"path": "note.txt"}))]);
    env.model
        .push_tool_calls(&[("fs_read", json!({"path": "notes.txt"}))]);
    env.model.push_text("It says hello.");
    let out = env.run(&["run", "what do my notes say?"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let memory = std::fs::read_to_string(env.home.join("memory/chats/cli.md")).unwrap();
    assert!(
        memory.starts_with("- lesson: `fs.read` failed ("),
        "{memory}"
    );
    assert!(
        memory.contains("note.txt"),
        "the error is in the lesson: {memory}"
    );
    assert!(
        memory.contains(r#"what worked: {"path":"notes.txt"}"#),
        "{memory}"
    );
    let lessons = env
        .tape_entries()
        .iter()
        .filter(|e| e["payload"]["name"] == "memory.lesson")
        .count();
    assert_eq!(lessons, 1);

    // The agent's own lesson, through the tool.
    let out = env
        .run(&[
            "run",
            ",memory.lesson text=\"run cargo fmt before committing\"",
        ])
        .await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("remembered: lesson: run cargo fmt"));
}
