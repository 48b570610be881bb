//! Subagents through the `bub` binary and the fake model: a task handed to a subagent runs in
//! a fresh context of its own with only the tools it was given, its answer is the tool result;
//! a subagent cannot start another; a guest's subagent is a guest; `/stop` stops it with its
//! parent's turn.

use serde_json::json;

use crate::support::bub_env::{Env, stderr, stdout, texts};
use crate::support::fake_openai::{offered_functions as functions, tool_results};
use crate::support::fake_telegram::private_text;
use crate::support::wait::WAIT;

#[tokio::test]
async fn a_subagent_works_in_its_own_context_with_the_tools_it_was_given() {
    let env = Env::cli().await;
    for name in ["a.md", "b.md"] {
        std::fs::write(env.workspace.join(name), "note").unwrap();
    }
    let task =
        json!({"task": "List the Markdown files of the workspace.", "tools": ["fs.glob", "bash"]});
    env.model.push_tool_calls(&[("subagent", task)]);
    env.model
        .push_tool_calls(&[("fs_glob", json!({"pattern": "*.md"}))]);
    env.model.push_text("two notes: a.md, b.md");
    env.model.push_text("Your notes are a.md and b.md.");
    let out = env.run(&["run", "which notes do I have?"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Your notes are a.md and b.md.");

    let requests = env.model.requests();
    assert_eq!(requests.len(), 4);
    let child = &requests[1];
    assert_eq!(
        functions(child),
        ["bash", "fs_glob"],
        "only the tools it was given"
    );
    let seen = child["messages"].to_string();
    assert!(seen.contains("List the Markdown files"), "{seen}");
    assert!(
        !seen.contains("which notes do I have"),
        "the parent's conversation stays out"
    );
    let globbed = tool_results(&requests[2]);
    assert!(globbed[0].contains("a.md") && globbed[0].contains("b.md"));
    assert_eq!(tool_results(&requests[3]), ["two notes: a.md, b.md"]);
    // Its tape is its own, linked from the parent's.
    let tape = env.tape_text();
    assert!(tape.contains("\"subagent.start\"") && tape.contains("\"subagent.done\""));
    assert_eq!(env.tape_paths().len(), 2, "the parent's and the subagent's");
}

#[tokio::test]
async fn a_subagent_cannot_start_another() {
    let env = Env::cli().await;
    env.model
        .push_tool_calls(&[("subagent", json!({"task": "Do it."}))]);
    env.model
        .push_tool_calls(&[("subagent", json!({"task": "Deeper."}))]);
    env.model.push_text("done alone");
    env.model.push_text("finished");
    let out = env.run(&["run", "go"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let requests = env.model.requests();
    assert!(functions(&requests[0]).contains(&"subagent".to_owned()));
    let child = functions(&requests[1]);
    assert!(
        child.contains(&"fs_read".to_owned()),
        "the parent's tools: {child:?}"
    );
    assert!(
        !child.contains(&"subagent".to_owned()),
        "depth 1: {child:?}"
    );
    let refused = tool_results(&requests[2]);
    assert!(refused[0].contains("not allowed"), "{refused:?}");
    assert_eq!(tool_results(&requests[3]), ["done alone"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guests_subagent_is_a_guest_and_stops_with_its_parents_turn() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", "fs.read,subagent");
    // Choosing the model (the bill) is for owners.
    let priced = json!({"task": "Look around.", "model": "openai:expensive"});
    env.model.push_tool_calls(&[("subagent", priced)]);
    let task = json!({"task": "Look around.", "tools": ["bash", "fs.read", "fs.write"]});
    env.model.push_tool_calls(&[("subagent", task)]);
    let held = env.model.push_hold();
    env.model.push_text("never sent");
    let daemon = env.start();
    // User 5 is a guest.
    env.telegram
        .push_message(private_text(5, 5, "look around for me"));
    let requests = env.model.wait_for_requests(3, WAIT).await;
    let refused = tool_results(&requests[1].body);
    assert!(refused[0].contains("`model` is for owners"), "{refused:?}");
    let child = functions(&requests[2].body);
    assert_eq!(child, ["fs_read"], "what a guest may, of what it asked for");

    // `/stop` from the chat ends the parent's turn, and the subagent's with it.
    env.telegram.push_message(private_text(5, 5, "/stop"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Stopped."]);
    held.release();
    assert!(daemon.stop().await.success());
    assert_eq!(env.model.request_count(), 3, "no call after the stop");
    let tape = env.tape_text();
    assert!(tape.contains("\"turn.cancelled\""), "{tape}");
}
