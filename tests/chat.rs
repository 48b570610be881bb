//! `bub chat` as an IM, under a pseudo-terminal ([`support::pty`]: the real binary against the
//! fake model): the prompt stays usable while a turn runs, lines typed meanwhile are queued and
//! reach the model as the next turn's batch, in order; the chat commands (`/stop`, `,status`,
//! …) are the chat's, never the shell's or the model's; Ctrl-C stops the running turn and the
//! queue still runs. The model is held ([`support::fake_openai::FakeOpenAi::push_hold`]) while
//! lines are typed, so nothing depends on timing.

use crate::support;

use serde_json::Value;
use support::bub_env::Env;
use support::pty::{Chat, on_pty, rendered};
use support::wait::WAIT;

/// The text of a request's last message (the turn's prompt).
fn prompt(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn lines_typed_while_a_turn_runs_are_queued_and_sent_together() {
    let env = Env::cli().await;
    let hold = env.model.push_hold();
    env.model.push_text("Answer to A.");
    env.model.push_text("Answer to B, C, D and E.");
    let chat = Chat::start(&env);
    let mut chat = on_pty(move || {
        let mut chat = chat;
        chat.type_line("msg A");
        chat
    })
    .await;
    env.model.wait_for_requests(1, WAIT).await;
    let screen = on_pty(move || {
        // The model is busy with A: the prompt takes four more lines.
        for (n, line) in ["msg B", "msg C", "msg D", "msg E"].iter().enumerate() {
            chat.expect("ws > ");
            chat.type_line(line);
            chat.expect(&format!("queued: {}", n + 1));
        }
        hold.release();
        chat.expect("Answer to A.");
        chat.expect("Answer to B, C, D and E.");
        chat.expect("ws > ");
        chat.quit()
    })
    .await;
    let shown = rendered(&screen);
    std::fs::write("/tmp/chat-transcript.txt", shown.join("\n")).ok();

    // Two turns: A alone, then B to E as one batch, in the order typed.
    let requests = env.model.requests();
    assert_eq!(requests.len(), 2, "{shown:#?}");
    let first = prompt(&requests[0]);
    assert!(
        first.contains("msg A") && !first.contains("msg B"),
        "{first}"
    );
    let batch = prompt(&requests[1]);
    assert!(batch.contains("channel: $cli\n"), "{batch}");
    let at = |line: &str| {
        batch
            .find(line)
            .unwrap_or_else(|| panic!("{line} lost: {batch}"))
    };
    assert!(at("msg B") < at("msg C") && at("msg C") < at("msg D") && at("msg D") < at("msg E"));
    assert!(!batch.contains("msg A"), "{batch}");

    // The screen: each typed line intact on its own prompt line, the queue shown, the answers
    // printed above a fresh prompt — nothing glued to anything.
    let position = |wanted: &str| {
        shown
            .iter()
            .position(|l| l == wanted)
            .unwrap_or_else(|| panic!("no line {wanted:?} on the screen:\n{}", shown.join("\n")))
    };
    let mut last = position("ws > msg A");
    for (n, line) in ["msg B", "msg C", "msg D", "msg E"].iter().enumerate() {
        let typed = position(&format!("ws > {line}"));
        let queued = position(&format!("queued: {}", n + 1));
        assert!(last < typed && typed < queued, "{}", shown.join("\n"));
        last = queued;
    }
    let answer_a = position("Answer to A.");
    let answer_b = position("Answer to B, C, D and E.");
    assert!(
        last < answer_a && answer_a < answer_b,
        "{}",
        shown.join("\n")
    );
    assert!(
        !shown.iter().any(|l| l.contains("Processing")),
        "{shown:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_commands_never_reach_the_shell_or_the_model() {
    let env = Env::cli().await;
    let hold = env.model.push_hold();
    env.model.push_text("Never shown.");
    env.model.push_text("Answer to the queue.");
    let chat = Chat::start(&env);
    let mut chat = on_pty(move || {
        let mut chat = chat;
        // Idle: each answers at once.
        chat.type_line("/status");
        chat.expect("running: nothing");
        chat.expect("queued: 0 message(s), 0 command(s)");
        chat.type_line(",status");
        chat.expect("running: nothing");
        chat.type_line(",stop");
        chat.expect("Nothing is running.");
        chat.type_line("/stop");
        chat.expect("Nothing is running.");
        chat.type_line("/new");
        chat.expect("Started a fresh context.");
        chat.type_line(",new");
        chat.expect("Started a fresh context.");
        chat.type_line("/usage");
        chat.expect("Command");
        chat.type_line(",help");
        chat.expect(",stop");
        chat.expect(",debug");
        chat.expect("Ctrl-C");

        // While a turn runs: /status and /stop act at once; the queued line still runs.
        chat.type_line("work hard");
        chat
    })
    .await;
    env.model.wait_for_requests(1, WAIT).await;
    let screen = on_pty(move || {
        chat.type_line("and then this");
        chat.expect("queued: 1");
        chat.type_line("/status");
        chat.expect("running: an answer to 1 message(s) for");
        chat.expect("queued: 1 message(s), 0 command(s)");
        chat.type_line(",stop");
        chat.expect("Stopped.");
        chat.expect("Answer to the queue.");
        chat.type_line("/stop");
        chat.expect("Nothing is running.");
        chat.quit()
    })
    .await;
    hold.release();
    let shown = rendered(&screen).join("\n");
    assert!(!shown.contains("command not found"), "{shown}");
    // The model saw the two lines of words, nothing else.
    let prompts: Vec<String> = env.model.requests().iter().map(prompt).collect();
    assert_eq!(prompts.len(), 2, "{prompts:#?}");
    for prompt in &prompts {
        for word in ["status", "stop", "new", "usage", "help"] {
            assert!(!prompt.contains(word), "{word} reached the model: {prompt}");
        }
    }
    assert!(prompts[0].contains("work hard") && prompts[1].contains("and then this"));
    // No shell ran: the only commands on the tape are the tools `,usage` and `,help`.
    let entries = env.tape_entries();
    let commands: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "event" && e["payload"]["name"] == "command")
        .collect();
    assert!(
        commands
            .iter()
            .all(|c| c["payload"]["data"]["kind"] == "internal"),
        "{commands:#?}"
    );
    let cancelled = entries
        .iter()
        .filter(|e| e["payload"]["name"] == "turn.cancelled")
        .count();
    assert_eq!(cancelled, 1, "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_the_running_turn_and_the_queue_still_runs() {
    let env = Env::cli().await;
    let hold = env.model.push_hold();
    env.model.push_text("Never shown.");
    env.model.push_text("Done with the rest.");
    let chat = Chat::start(&env);
    let mut chat = on_pty(move || {
        let mut chat = chat;
        chat.type_line("a long task");
        chat
    })
    .await;
    env.model.wait_for_requests(1, WAIT).await;
    let screen = on_pty(move || {
        chat.type_line("the rest");
        chat.expect("queued: 1");
        chat.key("\x03");
        chat.expect("Stopped.");
        chat.expect("Done with the rest.");
        // Idle, Ctrl-C keeps today's behaviour.
        chat.expect("ws > ");
        chat.key("\x03");
        chat.expect("Interrupted. Use ',quit' to exit.");
        chat.quit()
    })
    .await;
    hold.release();
    let shown = rendered(&screen).join("\n");
    assert!(!shown.contains("Never shown."), "{shown}");
    let prompts: Vec<String> = env.model.requests().iter().map(prompt).collect();
    assert_eq!(prompts.len(), 2, "{prompts:#?}");
    assert!(prompts[1].contains("the rest"), "{prompts:#?}");
    let tape = env.tape_text();
    assert!(tape.contains(r#""by":"Ctrl-C""#), "{tape}");
}

/// What another process answers in the terminal's session (here `bub run`, as a daemon's
/// scheduled run in the `cli` session would) prints above the idle prompt, once; the chat's
/// own answers are not shown twice.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_written_by_another_process_prints_above_the_prompt() {
    let env = Env::cli().await;
    env.model.push_text("Answer of my own.");
    let chat = Chat::start(&env);
    let chat = on_pty(move || {
        let mut chat = chat;
        chat.type_line("hello");
        chat.expect("Answer of my own.");
        chat.expect("ws > ");
        chat
    })
    .await;
    env.model.push_text("The nightly check found nothing.");
    let out = env.run(&["run", "run the nightly check"]).await;
    assert!(out.status.success());
    let screen = on_pty(move || {
        let mut chat = chat;
        chat.expect("(meanwhile, from another bub)");
        chat.expect("The nightly check found nothing.");
        chat.expect("ws > ");
        chat.quit()
    })
    .await;
    let shown = rendered(&screen).join("\n");
    assert_eq!(
        shown.matches("Answer of my own.").count(),
        1,
        "its own answer once: {shown}"
    );
    assert_eq!(
        shown.matches("The nightly check found nothing.").count(),
        1,
        "{shown}"
    );
    assert_eq!(env.model.requests().len(), 2);
}
