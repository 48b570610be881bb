//! The prompt providers can cache (issue 20): every model request begins with the request
//! before it — the tools, the system prompt and the messages, byte for byte — however the clock
//! moves, after a `$hint` showed a tool's details, after a working checkpoint was set, and after
//! a restart (each `bub run` is a new process). The time and the notes go into the newest user
//! message, never before the conversation.

use serde_json::{Value, json};

use crate::support::bub_env::{Env, stderr};
use crate::support::prompt_cache::{extends, figures, said};

async fn run(env: &Env, prompt: &str) {
    let out = env.run(&["run", prompt]).await;
    assert!(out.status.success(), "{prompt}: {}", stderr(&out));
}

fn last_user(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let user = messages.iter().rfind(|m| m["role"] == "user").unwrap();
    user["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn each_request_begins_with_the_one_before_across_the_clock_hints_and_restarts() {
    let mut env = Env::cli().await;
    std::fs::write(env.workspace.join("notes.txt"), "remember the milk").unwrap();
    // The time shown moves between turns by hours and minutes: three time zones (POSIX rules,
    // so no zone database is needed) stand in for a clock that moved.
    env.set("TZ", "UTC0");
    env.model.push_text("Hello.");
    run(&env, "hello there").await;

    env.set("TZ", "IST-5:30");
    env.model
        .push_tool_calls(&[("fs_read", json!({"path": "notes.txt"}))]);
    env.model.push_text("It says to remember the milk.");
    run(&env, "what does notes.txt say? use $fs.read").await;

    let out = env
        .run(&["run", r#",memory.checkpoint text="goal: buy milk""#])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    env.set("TZ", "NST3:30");
    env.model.push_text("On it.");
    run(&env, "and now?").await;

    let requests = env.model.requests();
    assert_eq!(requests.len(), 4, "two turns of one call, one of two");
    for (i, pair) in requests.windows(2).enumerate() {
        extends(&pair[0], &pair[1])
            .unwrap_or_else(|e| panic!("request {} does not extend request {}: {e}", i + 2, i + 1));
    }
    let f = figures(&requests);
    assert!(f.cacheable_min > 0.9, "{f:?}");

    let system: Vec<&Value> = requests.iter().map(|r| &r["messages"][0]).collect();
    assert!(system.iter().all(|s| *s == system[0]), "one system prompt");
    let system = system[0]["content"].as_str().unwrap();
    assert!(
        !system.contains("2026") && !system.contains("goal: buy milk"),
        "{system}"
    );

    // Each turn's prompt begins with its own time, to the minute, in its zone.
    let times: Vec<String> = [0, 1, 3]
        .iter()
        .map(|&i| last_user(&requests[i]).lines().next().unwrap().to_owned())
        .collect();
    assert!(
        times[0].ends_with(']') && times[0].contains(" +00:00, "),
        "{times:?}"
    );
    assert!(
        times[1].contains(" +05:30, ") && times[2].contains(" -03:30, "),
        "{times:?}"
    );
    assert_eq!(said(&last_user(&requests[0])), "hello there");

    // The hinted tool's details follow the prompt that asked, the checkpoint the next turn's
    // prompt: notes after the conversation, not in the system prompt.
    let second = last_user(&requests[1]);
    assert!(
        second.contains("\n\n<tool name=\"fs_read\" command=\"fs.read\">"),
        "{second}"
    );
    let fourth = last_user(&requests[3]);
    assert!(
        fourth.contains("<checkpoint>") && fourth.contains("goal: buy milk"),
        "{fourth}"
    );
    assert!(
        !fourth.contains("fs_read\" command"),
        "shown once: {fourth}"
    );

    // The tape keeps what the user wrote; the time and notes are the entry's meta.
    let entries = env.tape_entries();
    let prompt = entries
        .iter()
        .find(|e| e["payload"]["content"] == "and now?")
        .expect("the prompt as written");
    assert_eq!(prompt["meta"]["time"], times[2].as_str());
    assert!(
        prompt["meta"]["notes"][0]
            .as_str()
            .unwrap()
            .contains("<checkpoint>")
    );
}

#[tokio::test]
async fn a_long_tool_result_reaches_the_model_cut_and_tape_output_reads_the_rest() {
    let mut env = Env::cli().await;
    env.set("BUB_TOOL_RESULT_MAX_CHARS", "1000");
    let text: String = (0..5000)
        .map(|i| if i == 2500 { 'M' } else { '.' })
        .collect();
    std::fs::write(env.workspace.join("big.txt"), &text).unwrap();
    let ids = env
        .model
        .push_tool_calls(&[("fs_read", json!({"path": "big.txt"}))]);
    env.model.push_tool_calls(&[(
        "tape_output",
        json!({"call_id": ids[0], "offset": 2400, "limit": 200}),
    )]);
    env.model.push_text("Found the M.");
    run(&env, "look at big.txt").await;

    let requests = env.model.requests();
    assert_eq!(requests.len(), 3);
    let tool = |request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        let last = messages.iter().rfind(|m| m["role"] == "tool").unwrap();
        last["content"].as_str().unwrap().to_owned()
    };
    // The model gets the head and the tail and how to read the rest; the middle is not sent.
    let shown = tool(&requests[1]);
    assert!(shown.chars().count() < 1200, "{}", shown.len());
    assert!(!shown.contains('M'), "{shown}");
    let note = format!(
        "characters cut here; read them with tape.output call_id={} offset=500]",
        ids[0]
    );
    assert!(shown.contains(&note), "{shown}");
    // `tape.output` reads the middle from the tape, where the whole result is kept.
    let part = tool(&requests[2]);
    assert!(part.starts_with("[characters 2400..2600 of "), "{part}");
    assert!(
        part.contains("; more with offset=2600]") && part.contains('M'),
        "{part}"
    );
    assert!(
        env.tape_text().contains(&text),
        "the whole result on the tape"
    );
    extends(&requests[1], &requests[2]).expect("the cut result is rendered the same way again");
}
