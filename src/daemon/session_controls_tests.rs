//! Chat controls in the session actor (paused clock): `,stop` cancels the running turn and
//! keeps the queue, a guest stops only their own turn, `,status` answers beside a running
//! turn and `,new` queues like a command.

use super::*;

#[tokio::test(start_paused = true)]
async fn stop_cancels_the_running_turn_and_keeps_the_queue() {
    let mut h = harness(config(), FakeRunner::new(true));
    h.send(",sleep 987", false).await;
    at(&h, 1.0).await;
    h.send("queued", true).await;
    h.send(",stop", false).await;
    at(&h, 1.5).await;
    assert_eq!(sent_texts(&h), ["Stopped."]);
    assert_eq!(events(&h), ["turn.cancelled"]);
    // The queued message runs next (the gate lets it through).
    h.runner.gate.as_ref().unwrap().add_permits(1);
    at(&h, 5.0).await;
    assert_eq!(h.runner.prompts(), [",sleep 987", "channel: $fake\nqueued"]);
    assert_eq!(sent_texts(&h), ["Stopped.", "answer"]);
    assert_eq!(h.inbox.pending(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_guest_stops_only_their_own_turn() {
    let mut h = harness(config(), FakeRunner::new(true));
    h.send_as("owner asks", true, "1", Role::Owner).await;
    at(&h, 2.0).await;
    h.send_as(",stop", false, "2", Role::Guest).await;
    at(&h, 2.5).await;
    assert_eq!(
        sent_texts(&h),
        ["Only an owner or the person it answers can stop this turn."]
    );
    assert!(events(&h).is_empty());
    h.runner.gate.as_ref().unwrap().add_permits(1);
    at(&h, 3.0).await;
    h.send_as("guest asks", true, "2", Role::Guest).await;
    at(&h, 5.0).await;
    h.send_as(",stop", false, "2", Role::Guest).await;
    at(&h, 5.5).await;
    assert_eq!(events(&h), ["turn.cancelled"]);
    assert_eq!(sent_texts(&h).last().unwrap(), "Stopped.");
}

#[tokio::test(start_paused = true)]
async fn status_answers_beside_a_running_turn_and_new_queues_like_a_command() {
    let mut h = harness(config(), FakeRunner::new(true));
    h.send("long question", true).await;
    at(&h, 2.0).await;
    h.send("next", true).await;
    h.send(",new", false).await;
    h.send(",status", false).await;
    at(&h, 3.0).await;
    let status = sent_texts(&h).pop().expect("status sent during the turn");
    assert!(
        status.starts_with("model: fake\nrunning: an answer to 1 message(s) for 1 s"),
        "{status}"
    );
    assert!(
        status.contains("queued: 1 message(s), 1 command(s)"),
        "{status}"
    );
    assert_eq!(h.runner.prompts().len(), 1, "status is not a turn");
    h.runner.gate.as_ref().unwrap().add_permits(2);
    at(&h, 10.0).await;
    assert_eq!(events(&h), ["new"]);
    assert!(
        sent_texts(&h)
            .iter()
            .any(|t| t.starts_with("Started a fresh context"))
    );
    let _ =
        h.tx.send(Mail::Message(inbound(
            99,
            ",stop",
            false,
            "42",
            Role::Owner,
        )))
        .await;
    at(&h, 11.0).await;
    assert_eq!(sent_texts(&h).last().unwrap(), "Nothing is running.");
}
