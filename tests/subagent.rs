//! Subagents through the `bub` binary and the fake model: a task handed to a subagent runs in
//! a fresh context of its own with only the tools it was given, its answer is the tool result;
//! a subagent cannot start another; a guest's subagent is a guest; `/stop` stops it with its
//! parent's turn. A background one answers later as a turn of the parent session, once, also
//! after `kill -9`; the bounds count it; `/stop` from the chat stops it. A job a subagent
//! schedules is its parent chat's, within that chat's caps.

use serde_json::json;

use crate::support::bub_env::{Env, stderr, stdout, texts};
use crate::support::fake_openai::{offered_functions as functions, tool_results};
use crate::support::fake_telegram::private_text;
use crate::support::wait::{WAIT, wait_until};

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

/// What only a subagent's requests contain (its task's introduction).
const CHILD: &str = "You are a subagent";

/// The requests so far, the parents' and the subagents' apart (their order between the two is
/// a race).
fn parent_and_children(env: &Env) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    env.model
        .requests()
        .into_iter()
        .partition(|r| !r["messages"].to_string().contains(CHILD))
}

/// Starts the daemon again and stops it once it has nothing left to resume (it has gone on to
/// poll Telegram for new messages).
async fn restart_and_poll(env: &Env) {
    let polls = env.telegram.calls_of("getUpdates").len();
    let daemon = env.start();
    env.telegram
        .wait_until(WAIT, "a long poll", |f| {
            (f.calls_of("getUpdates").len() > polls + 1).then_some(())
        })
        .await;
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_subagent_answers_later_once_even_after_kill_9() {
    let env = Env::new().await;
    let child = env.model.lane(CHILD);
    let task = json!({"task": "Count to three.", "background": true});
    env.model.push_tool_calls(&[("subagent", task)]);
    env.model.push_text("Started; I will tell you.");
    let _held = child.push_hold();
    child.push_text("never sent: killed first");
    let daemon = env.start();
    env.telegram
        .push_message(private_text(42, 42, "count in the background"));
    // The tool returned at once and the turn ended while the subagent works.
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Started; I will tell you."]);
    env.model.wait_for_requests(3, WAIT).await;
    let (parent, children) = parent_and_children(&env);
    let started = tool_results(&parent[1]);
    assert!(
        started[0].contains("started in the background"),
        "{started:?}"
    );
    assert!(
        children[0]["messages"]
            .to_string()
            .contains("Count to three.")
    );
    assert!(
        !functions(&children[0]).contains(&"subagent".to_owned()),
        "depth 1"
    );
    // Killed once the chat's message is done in the journal (before that, its sent answer
    // could be sent again: a platform cannot tell a retry from a new message).
    wait_until(WAIT, "the message done in the journal", || {
        env.inbox_text().contains(r#""op":"done""#)
    })
    .await;
    daemon.kill().await;

    // After the restart the subagent runs again, once, and its answer comes to the chat as a
    // turn of the parent session.
    child.push_text("one, two, three");
    env.model.push_text("It counted: one, two, three.");
    let daemon = env.start();
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent)[1], "It counted: one, two, three.");
    let (parent, children) = parent_and_children(&env);
    assert_eq!(children.len(), 2, "the subagent again");
    let again = children[1]["messages"].to_string();
    assert!(again.contains("Bub restarted while you worked"), "{again}");
    assert_eq!(parent.len(), 3, "then the report");
    let report = parent[2]["messages"].to_string();
    assert!(
        report.contains("Background subagent")
            && report.contains("(for owner")
            && report.contains("one, two, three"),
        "{report}"
    );
    assert!(
        report.contains("count in the background"),
        "in the parent's conversation"
    );
    assert!(daemon.stop().await.success());

    // A third start has nothing left to do.
    restart_and_poll(&env).await;
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 2, "once");
    assert_eq!(env.model.request_count(), 5);
    let tape = env.tape_text();
    assert!(tape.contains("\"subagent.done\""), "{tape}");
}

#[tokio::test(flavor = "multi_thread")]
async fn background_subagents_are_bounded_per_session_and_stopped_from_the_chat() {
    let env = Env::new().await;
    let child = env.model.lane(CHILD);
    let task = json!({"task": "Wait for the build.", "background": true});
    env.model.push_tool_calls(&[
        ("subagent", task.clone()),
        ("subagent", task.clone()),
        ("subagent", task),
    ]);
    env.model.push_text("Two are working on it.");
    let holds = [(); 2].map(|()| {
        let hold = child.push_hold();
        child.push_text("never sent: stopped first");
        hold
    });
    let daemon = env.start();
    env.telegram.push_message(private_text(42, 42, "watch it"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["Two are working on it."]);
    env.model.wait_for_requests(4, WAIT).await;
    let results = tool_results(&parent_and_children(&env).0[1]);
    let started = results
        .iter()
        .filter(|r| r.contains("started in the background"))
        .count();
    let refused = results
        .iter()
        .filter(|r| r.contains("2 subagents run for this session"))
        .count();
    assert_eq!((started, refused), (2, 1), "{results:?}");

    env.telegram.push_message(private_text(42, 42, "/stop"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(
        texts(&sent)[1],
        "Stopped 2 background subagents.",
        "{:?}",
        texts(&sent)
    );
    for hold in &holds {
        hold.release();
    }
    assert!(daemon.stop().await.success());
    // Stopped ones report nothing, now or after a restart.
    restart_and_poll(&env).await;
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 2);
    assert_eq!(env.model.request_count(), 4);
    let tape = env.tape_text();
    assert_eq!(tape.matches("\"stopped\":true").count(), 2, "{tape}");
}

#[tokio::test]
async fn background_subagents_need_the_daemon() {
    let env = Env::cli().await;
    let task = json!({"task": "Later.", "background": true});
    env.model.push_tool_calls(&[("subagent", task)]);
    env.model.push_text("I will do it myself.");
    let out = env.run(&["run", "go"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let refused = tool_results(&env.model.requests()[1]);
    assert!(refused[0].contains("only in the daemon"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn background_subagents_count_toward_the_process_bound() {
    let mut env = Env::new().await;
    env.set("BUB_MAX_SUBAGENTS", "1");
    let child = env.model.lane(CHILD);
    let background = json!({"task": "Watch the logs.", "background": true});
    let blocking = json!({"task": "Read the logs."});
    env.model
        .push_tool_calls(&[("subagent", background), ("subagent", blocking)]);
    env.model.push_text("One is watching.");
    let hold = child.push_hold();
    child.push_text("never sent: stopped first");
    let daemon = env.start();
    env.telegram.push_message(private_text(42, 42, "watch"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(texts(&sent), ["One is watching."]);
    let results = tool_results(&parent_and_children(&env).0[1]);
    assert_eq!(results.len(), 2);
    let started = results
        .iter()
        .any(|r| r.contains("started in the background"));
    let refused = results.iter().any(|r| r.contains("BUB_MAX_SUBAGENTS"));
    assert!(started && refused, "{results:?}");
    env.telegram.push_message(private_text(42, 42, "/stop"));
    let sent = env.telegram.wait_for_calls("sendMessage", 2, WAIT).await;
    assert_eq!(texts(&sent)[1], "Stopped 1 background subagent.");
    hold.release();
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guests_subagent_schedules_in_the_parents_chat_within_its_caps() {
    let mut env = Env::new().await;
    env.set("BUB_GUEST_TOOLS", "schedule.add,schedule.list,subagent");
    let daemon = env.start();
    // The guest (user 5) already has four of its five jobs in the chat.
    for i in 0..4 {
        let add = format!(r#",schedule.add message="ping {i}" after_seconds=3600"#);
        env.telegram.push_message(private_text(5, 5, &add));
        env.telegram
            .wait_for_calls("sendMessage", i + 1, WAIT)
            .await;
    }
    // Its turn hands two more to a subagent.
    let task = json!({"task": "Schedule two reminders.", "tools": ["schedule.add"]});
    env.model.push_tool_calls(&[("subagent", task)]);
    let later = |text: &str| json!({"message": text, "after_seconds": 3600});
    env.model.push_tool_calls(&[
        ("schedule_add", later("five")),
        ("schedule_add", later("six")),
    ]);
    env.model.push_text("one scheduled, one refused");
    env.model.push_text("Done.");
    env.telegram
        .push_message(private_text(5, 5, "remind me twice"));
    let sent = env.telegram.wait_for_calls("sendMessage", 5, WAIT).await;
    assert_eq!(texts(&sent)[4], "Done.");
    assert!(daemon.stop().await.success());

    let results = tool_results(&env.model.requests()[2]);
    let added = results
        .iter()
        .filter(|r| r.starts_with("scheduled:"))
        .count();
    assert_eq!(added, 1, "{results:?}");
    assert!(
        results
            .iter()
            .any(|r| r.contains("already has 5 scheduled jobs")),
        "the chat's cap counts the subagent's job: {results:?}"
    );
    let jobs = env.jobs()["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 5);
    for job in &jobs {
        assert_eq!(job["session"], "telegram:5", "filed under the chat: {job}");
    }
}
