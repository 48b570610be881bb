//! Learned procedures through the `bub` binary and the fake model: with `BUB_LEARN_SKILLS`,
//! a turn with enough tool calls is followed by one learning call; a proposal becomes a
//! workspace skill that `bub skills list` shows as learned, and the same procedure learned again
//! updates it. (Guests' turns, the caps and refused names: the unit tests of
//! `agent/learn.rs`.)

use serde_json::{Value, json};

use crate::support::bub_env::{Env, stderr, stdout};

/// The system prompt and the user message of a request the fake model received.
fn texts(request: &Value) -> (String, String) {
    let text = |i: usize| {
        request["messages"][i]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    (text(0), text(1))
}

/// Queues a turn of two tool calls (write a file, read it back) and its answer.
fn push_two_step_turn(env: &Env) {
    env.model
        .push_tool_calls(&[("fs_write", json!({"path": "notes.md", "content": "- milk"}))]);
    env.model
        .push_tool_calls(&[("fs_read", json!({"path": "notes.md"}))]);
    env.model.push_text("Saved and checked.");
}

/// The `skill.learn` events on the tape.
fn learn_events(env: &Env) -> Vec<Value> {
    env.tape_entries()
        .into_iter()
        .filter(|e| e["payload"]["name"] == "skill.learn")
        .map(|e| e["payload"]["data"].clone())
        .collect()
}

#[tokio::test]
async fn a_learned_skill_is_listed_expanded_and_updated_not_duplicated() {
    let mut env = Env::cli().await;
    // Off by default: no learning call.
    push_two_step_turn(&env);
    let out = env.run(&["run", "save my notes"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(env.model.request_count(), 3);
    assert!(!env.workspace.join(".agents").exists());

    env.set("BUB_LEARN_SKILLS", "true");
    env.set("BUB_LEARN_MIN_STEPS", "2");
    push_two_step_turn(&env);
    let proposal = json!({
        "name": "save-notes",
        "description": "Save notes to notes.md and read them back",
        "steps": "1. fs.write notes.md\n2. fs.read notes.md to check",
    });
    env.model.push_text(format!("```json\n{proposal}\n```"));
    let before = env.model.request_count();
    let out = env.run(&["run", "save my notes"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Saved and checked.");
    let requests = env.model.requests_since(before);
    assert_eq!(requests.len(), 4, "three steps and one learning call");
    let (system, user) = texts(&requests[3]);
    assert!(system.starts_with("You review a task"), "{system}");
    assert!(user.contains("Task:\nsave my notes"), "{user}");
    assert!(user.contains("1. fs.write {"), "{user}");
    assert!(
        user.contains("2. fs.read {\"path\":\"notes.md\"} -> ok: - milk"),
        "{user}"
    );
    assert!(user.contains("Answer:\nSaved and checked."), "{user}");
    assert!(
        user.contains("Learned skills in this workspace:\n(none)"),
        "{user}"
    );
    assert!(
        requests[3]
            .get("tools")
            .is_none_or(|t| t.as_array().is_some_and(Vec::is_empty))
    );

    let file = env.workspace.join(".agents/skills/save-notes/SKILL.md");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("learned: true"), "{text}");
    assert!(text.contains("source-session: cli"), "{text}");
    assert!(text.contains("revision: 1"), "{text}");
    assert!(
        text.trim_end().ends_with("2. fs.read notes.md to check"),
        "{text}"
    );
    let out = env.run(&["skills", "list"]).await;
    let listed = stdout(&out);
    assert!(
        listed
            .contains("save-notes: Save notes to notes.md and read them back (project, learned, "),
        "{listed}"
    );
    let events = learn_events(&env);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["outcome"], "saved");
    assert_eq!(events[0]["name"], "save-notes");
    // The learning call is metered like the steps: its line in the usage ledger.
    let ledger = std::fs::read_to_string(env.home.join("usage.jsonl")).unwrap();
    let learning: Vec<Value> = ledger
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["for"] == "learning")
        .collect();
    assert_eq!(learning.len(), 1, "{ledger}");
    let served = &env.model.usages()[before + 3];
    assert_eq!(learning[0]["input"], served["prompt_tokens"]);

    // The next turn's prompt shows it like any other skill; the model learns it again under
    // another spelling of the name: the same skill, revision 2.
    push_two_step_turn(&env);
    let proposal = json!({
        "name": "Save Notes",
        "description": "Save notes to notes.md and read them back",
        "steps": "1. fs.write notes.md\n2. fs.read notes.md\n3. say what it holds",
    });
    env.model.push_text(proposal.to_string());
    let before = env.model.request_count();
    assert!(
        env.run(&["run", "save my notes again"])
            .await
            .status
            .success()
    );
    let requests = env.model.requests_since(before);
    assert!(texts(&requests[0]).0.contains("save-notes"));
    let (_, user) = texts(&requests[3]);
    assert!(
        user.contains("- save-notes: Save notes to notes.md and read them back"),
        "{user}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("revision: 2") && text.contains("3. say what it holds"),
        "{text}"
    );
    let skills = std::fs::read_dir(env.workspace.join(".agents/skills")).unwrap();
    assert_eq!(skills.count(), 1);
    let listed = stdout(&env.run(&["skills", "list"]).await);
    assert_eq!(listed.matches("save-notes:").count(), 1, "{listed}");

    // Not a procedure: nothing written. One tool call: no learning call at all.
    push_two_step_turn(&env);
    env.model.push_text("NONE");
    assert!(env.run(&["run", "and once more"]).await.status.success());
    assert_eq!(learn_events(&env).last().unwrap()["outcome"], "nothing");
    env.model
        .push_tool_calls(&[("fs_read", json!({"path": "notes.md"}))]);
    env.model.push_text("It says milk.");
    let before = env.model.request_count();
    assert!(
        env.run(&["run", "what do they say?"])
            .await
            .status
            .success()
    );
    assert_eq!(env.model.request_count() - before, 2);
    assert_eq!(learn_events(&env).len(), 3);
}
