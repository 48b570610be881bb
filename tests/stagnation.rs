//! The stagnation guard through the `bub` binary: a fake model that asks for the same tool
//! call forever is shown a short note instead of the repeated output, and the turn ends after
//! three stagnant calls with a message naming the repeated tool — in the terminal and in a
//! Telegram chat.

use serde_json::json;

use crate::support::bub_env::{Env, stderr};
use crate::support::fake_openai::tool_results;
use crate::support::fake_telegram::private_text;
use crate::support::wait::WAIT;

/// The model asks for the same `fs.read` this many times (more than the guard lets run).
const LOOPS: usize = 20;

fn loop_forever(env: &Env) {
    std::fs::write(env.workspace.join("notes.txt"), "the same text\n").unwrap();
    for _ in 0..LOOPS {
        env.model
            .push_tool_calls(&[("fs_read", json!({"path": "notes.txt"}))]);
    }
}

#[tokio::test]
async fn a_model_repeating_a_call_is_told_so_and_the_turn_ends_after_three() {
    let env = Env::cli().await;
    loop_forever(&env);
    let out = env.run(&["run", "read my notes"]).await;
    assert!(!out.status.success(), "a stopped turn is a failed run");
    let printed = String::from_utf8_lossy(&out.stdout).to_string() + &stderr(&out);
    assert!(
        printed.contains("kept repeating `fs.read` with the same arguments"),
        "{printed}"
    );
    // The first call and three stagnant ones: four model calls, not twenty.
    let requests = env.model.requests();
    assert_eq!(requests.len(), 4, "{} requests", requests.len());
    let shown = tool_results(&requests[3]);
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert!(
        shown[0].contains("the same text"),
        "the first result in full"
    );
    assert!(
        shown[1].starts_with("[status: stagnant, repeat: 1]")
            && !shown[1].contains("the same text"),
        "a repeat is a note, not the output again: {}",
        shown[1]
    );
    assert!(shown[2].starts_with("[status: stagnant, repeat: 2]"));
    // The tape keeps each call's status and the stop.
    let tape = env.tape_text();
    assert!(tape.contains(r#""status":["stagnant"]"#), "{tape}");
    assert!(tape.contains("loop.stagnant"), "{tape}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chat_is_told_what_was_repeated() {
    let env = Env::new().await;
    loop_forever(&env);
    let daemon = env.start();
    env.telegram
        .push_message(private_text(42, 42, "read my notes"));
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let text = sent[0].body["text"].as_str().unwrap_or_default();
    assert!(text.contains("kept repeating"), "{text}");
    assert!(text.contains("fs.read"), "{text}");
    assert_eq!(env.model.request_count(), 4);
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.calls_of("sendMessage").len(), 1, "one message");
}
