//! Proactive compaction through the `bub` binary and the fake model: a conversation far longer
//! than the window is summarised into a `compaction` anchor before the call, so every request
//! stays under the budget; when the summary call fails, a summary built without the model
//! takes its place and the turn still answers.

use std::io::Write;

use serde_json::{Value, json};

use crate::support::bub_env::{Env, stderr};

/// `BUB_CONTEXT_TOKENS` of these tests; compaction at the default 75 %.
const WINDOW: u64 = 8_000;

/// Whether `request` is the summarising call (its system prompt asks for a compaction).
fn is_summary(request: &Value) -> bool {
    request["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You compact a conversation"))
}

/// A request's size in the tests' own rough measure: its messages' JSON text, four bytes a
/// token (the fake model counts nothing).
fn request_tokens(request: &Value) -> u64 {
    request["messages"].to_string().len() as u64 / 4
}

/// Appends `n` messages (alternating user and assistant, about 60 tokens each) to the tape
/// the first turn created, with the ids that follow its last one.
fn grow_tape(env: &Env, n: u64) {
    let path = env.tape_paths().remove(0);
    let last_id = env.tape_entries().last().unwrap()["id"].as_u64().unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    let mut text = String::new();
    for i in 1..=n {
        let role = if i % 2 == 1 { "user" } else { "assistant" };
        let line = json!({
            "id": last_id + i, "kind": "message",
            "payload": {"role": role, "content": format!("message {i}: {}", "words ".repeat(40))},
            "meta": {}, "date": "2026-11-25T00:00:00+00:00",
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    file.write_all(text.as_bytes()).unwrap();
}

async fn env_with_window() -> Env {
    let mut env = Env::cli().await;
    env.set("BUB_CONTEXT_TOKENS", &WINDOW.to_string());
    env
}

#[tokio::test]
async fn a_ten_thousand_message_conversation_is_compacted_and_requests_stay_under_the_budget() {
    let env = env_with_window().await;
    env.model.set_responder(|request| {
        if is_summary(request) {
            "## Goals\nSUMMARY-OF-THE-CONVERSATION".to_owned()
        } else {
            "ok".to_owned()
        }
    });
    let out = env.run(&["run", "first"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    grow_tape(&env, 10_000);

    for turn in 0..20 {
        let out = env
            .run(&["run", &format!("question {turn}: {}", "more ".repeat(300))])
            .await;
        assert!(out.status.success(), "stderr: {}", stderr(&out));
    }
    let requests = env.model.requests();
    let (summaries, answers): (Vec<&Value>, Vec<&Value>) =
        requests.iter().partition(|r| is_summary(r));
    // The grown tape at once, then again as the questions pile up — but not every turn.
    assert!(
        (2..answers.len() / 2).contains(&summaries.len()),
        "{} compactions in {} turns",
        summaries.len(),
        answers.len()
    );
    let budget = WINDOW * 75 / 100;
    for request in &answers {
        assert!(
            request_tokens(request) <= budget,
            "a request of {} tokens against a budget of {budget}",
            request_tokens(request)
        );
    }
    // The summary call itself saw only the newest part of the 10,000 messages.
    assert!(summaries.iter().all(|r| request_tokens(r) <= WINDOW));

    // Each compaction is an anchor carrying the model's summary, followed by the messages
    // carried over, the last of them the question being answered.
    let entries = env.tape_entries();
    let anchors: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "anchor" && e["payload"]["name"] == "compaction")
        .collect();
    assert_eq!(anchors.len(), summaries.len());
    for anchor in &anchors {
        assert_eq!(
            anchor["payload"]["state"]["summary"],
            "## Goals\nSUMMARY-OF-THE-CONVERSATION"
        );
    }
    let first = entries
        .iter()
        .position(|e| e["payload"]["name"] == "compaction")
        .unwrap();
    // After the anchor: its `handoff` event, then the carried messages.
    assert_eq!(entries[first + 1]["payload"]["name"], "handoff");
    let carried: Vec<&Value> = entries[first + 2..]
        .iter()
        .take_while(|e| e["meta"]["carried_over"] == true)
        .collect();
    assert!(!carried.is_empty());
    assert!(
        crate::support::prompt_cache::said(
            carried.last().unwrap()["payload"]["content"]
                .as_str()
                .unwrap()
        )
        .starts_with("question 0:")
    );
    // The request after the compaction starts from the summary.
    let after = answers.iter().find(|r| {
        r["messages"]
            .to_string()
            .contains("SUMMARY-OF-THE-CONVERSATION")
    });
    assert!(after.is_some(), "the summary reached the next request");
}

#[tokio::test]
async fn the_summary_call_is_metered_and_not_made_over_the_daily_budget() {
    let mut env = env_with_window().await;
    env.model
        .set_responder(|request| match is_summary(request) {
            true => "## Goals\nSUMMARY".to_owned(),
            false => "ok".to_owned(),
        });
    let out = env.run(&["run", "first"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    grow_tape(&env, 2_000);
    let out = env.run(&["run", "second"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let ledger = std::fs::read_to_string(env.home.join("usage.jsonl")).unwrap();
    let lines: Vec<Value> = ledger
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let purposes: Vec<&str> = lines.iter().map(|l| l["for"].as_str().unwrap()).collect();
    assert_eq!(purposes, ["step", "compaction", "step"]);
    let summary = env.model.usages()[1].clone();
    assert_eq!(lines[1]["input"], summary["prompt_tokens"]);
    let runs: Vec<Value> = env
        .tape_entries()
        .into_iter()
        .filter(|e| e["payload"]["name"] == "run" && e["payload"]["data"]["for"] == "compaction")
        .collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0]["payload"]["data"]["usage"]["input"],
        summary["prompt_tokens"]
    );

    // With a daily budget that the summary call (a transcript of thousands of tokens) would
    // pass but a step after a compaction would not, the summary is built without the model and
    // the step answers.
    let tokens = |l: &Value| l["input"].as_u64().unwrap() + l["output"].as_u64().unwrap();
    let used: u64 = lines.iter().map(tokens).sum();
    let (summary_call, step_after) = (tokens(&lines[1]), tokens(&lines[2]));
    assert!(step_after + 500 < summary_call, "{lines:?}");
    let left = (summary_call + step_after) / 2;
    env.set("BUB_BUDGET_DAILY_TOKENS", &(used + left).to_string());
    grow_tape(&env, 2_000);
    let before = env.model.request_count();
    let out = env.run(&["run", "third"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let requests = env.model.requests_since(before);
    assert!(
        !requests.iter().any(is_summary),
        "no summary call over the budget"
    );
    assert_eq!(requests.len(), 1, "the answer's call");
    let text = env.tape_text();
    assert!(text.contains("\"budget.exceeded\"") && text.contains("\"for\":\"compaction\""));
    assert!(text.contains("summary written without the model"));
}

#[tokio::test]
async fn when_the_summary_call_fails_a_summary_without_the_model_is_used() {
    let env = env_with_window().await;
    let out = env.run(&["run", "first"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    grow_tape(&env, 2_000);
    // The summarising call gets a client error (not retried); the turn's own call an answer.
    env.model.push_raw(
        400,
        r#"{"error":{"message":"bad request"}}"#.into(),
        Vec::new(),
    );
    env.model.push_text("answered anyway");
    let out = env.run(&["run", "the last question"]).await;
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("answered anyway"));
    let entries = env.tape_entries();
    let anchor = entries
        .iter()
        .rfind(|e| e["payload"]["name"] == "compaction")
        .expect("a compaction anchor");
    let summary = anchor["payload"]["state"]["summary"].as_str().unwrap();
    assert!(summary.contains("written without the model"), "{summary}");
    assert!(
        summary.contains("Last request: [") && summary.contains("]\nthe last question"),
        "{summary}"
    );
    let event = entries
        .iter()
        .rfind(|e| e["payload"]["name"] == "context.compacted")
        .unwrap();
    assert_eq!(event["payload"]["data"]["summary_by"], "fallback");
    let last = env.model.requests().pop().unwrap();
    assert!(request_tokens(&last) <= WINDOW * 75 / 100);
}
