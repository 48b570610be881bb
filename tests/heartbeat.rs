//! The heartbeat with the real binary: a `HEARTBEAT.md` without an open item makes no model
//! call; an open `- [ ]` item gets one turn per beat in the `heartbeat` session, whose answer
//! reaches the configured chat once, and `HEARTBEAT_OK` answers stay on the tape.

use crate::support::bub_env::{Env, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn a_heartbeat_costs_nothing_without_open_items_and_tells_the_chat_what_is_due() {
    let mut env = Env::new().await;
    env.set("BUB_HEARTBEAT_MINUTES", "0.002"); // a beat every 0.12 s
    env.set("BUB_HEARTBEAT_CHAT", "telegram:42");
    env.set("BUB_LOG_LEVEL", "debug");
    let file = env.workspace.join("HEARTBEAT.md");
    std::fs::write(
        &file,
        "# Heartbeat\n- [x] paid the rent\nNotes for later.\n",
    )
    .unwrap();
    env.model.push_text("Reminder: call Ann at 3pm.");
    env.model.set_responder(|_| "HEARTBEAT_OK".to_owned());
    let daemon = env.start();

    daemon.wait_for_log("heartbeat.idle").await;
    assert_eq!(
        env.model.request_count(),
        0,
        "no model call without an open item"
    );

    std::fs::write(&file, "# Heartbeat\n- [ ] call Ann at 3pm\n").unwrap();
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0].body["chat_id"], 42);
    assert_eq!(sent[0].body["text"], "Reminder: call Ann at 3pm.");
    // Two more beats, answered HEARTBEAT_OK: nothing more reaches the chat.
    env.model.wait_for_requests(3, WAIT).await;
    let prompts = env.model_prompts();
    assert!(
        prompts[0].contains("- [ ] call Ann at 3pm"),
        "{}",
        prompts[0]
    );
    assert!(prompts[0].starts_with("[Heartbeat."), "{}", prompts[0]);
    assert!(daemon.stop().await.success());
    assert_eq!(
        env.telegram.calls_of("sendMessage").len(),
        1,
        "HEARTBEAT_OK is not sent"
    );
    // The heartbeat's own tape keeps its answers; the chat's session has none.
    let tapes = env.tape_paths();
    assert_eq!(tapes.len(), 1, "{tapes:?}");
    let tape = std::fs::read_to_string(&tapes[0]).unwrap();
    assert!(tape.contains("HEARTBEAT_OK"), "{tape}");
}

#[tokio::test]
async fn a_heartbeat_without_a_chat_is_a_configuration_error() {
    let mut env = Env::cli().await;
    env.set("BUB_HEARTBEAT_MINUTES", "30");
    let out = env.run(&["run", "hi"]).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("BUB_HEARTBEAT_CHAT"), "{err}");
}
