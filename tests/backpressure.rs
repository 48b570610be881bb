//! Backpressure through the real `bub message` binary: more messages than the daemon's queues
//! hold, under a model that does not answer yet (the fake model's `hold`). The queues fill, the
//! Telegram adapter stops taking updates — it confirms (the `getUpdates` offset) only what the
//! inbox journal holds — and once the model answers, every message reaches a turn exactly once,
//! in order — also across a stop while held. A 1,300-message backlog of 4 KB messages costs
//! the journal writes in proportion to what it received (its rewrites are amortised).

use crate::support;

use std::time::Duration;

use serde_json::Value;
use support::bub_env::{Daemon, Env, WAIT};
use support::fake_openai::tokens;
use support::fake_telegram::private_text;
use support::wait::{wait_for, wait_until};

/// The bound of a step that moves a thousand messages through a debug build on a busy machine.
const LONG_WAIT: Duration = Duration::from_secs(90);

/// The largest update id the journal holds: `recv` records' cursors, and the `cursor` records a
/// rewrite leaves.
fn journaled_cursor(env: &Env) -> i64 {
    let mut cursor = 0;
    for line in env.inbox_text().lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let at = match record["op"].as_str() {
            Some("recv") => record["cursor"].as_i64(),
            Some("cursor") => record["at"].as_i64(),
            _ => None,
        };
        cursor = cursor.max(at.unwrap_or(0));
    }
    cursor
}

/// How many `recv` records the journal holds.
fn journaled_messages(env: &Env) -> usize {
    env.inbox_text()
        .lines()
        .filter(|l| l.starts_with(r#"{"op":"recv""#))
        .count()
}

/// Messages the journal holds without a `done` record (the journal as of now, rewrites
/// included).
fn unfinished(env: &Env) -> usize {
    let mut pending = std::collections::BTreeSet::new();
    for line in env.inbox_text().lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match record["op"].as_str() {
            Some("recv") => {
                pending.insert(record["seq"].as_u64().unwrap());
            }
            Some("done") => {
                for seq in record["seqs"].as_array().unwrap() {
                    pending.remove(&seq.as_u64().unwrap());
                }
            }
            _ => {}
        }
    }
    pending.len()
}

/// Telegram was never told of an update the journal does not hold: every `getUpdates` offset
/// so far is at most one past the journal's cursor. (The calls are read first: the cursor only
/// grows.)
fn assert_confirmed_only_journaled(env: &Env) {
    let offsets = env.telegram.calls_of("getUpdates");
    let confirmed = offsets
        .iter()
        .filter_map(|c| c.body.get("offset").and_then(Value::as_i64))
        .max()
        .unwrap_or(0);
    let journaled = journaled_cursor(env);
    assert!(
        confirmed <= journaled + 1,
        "Telegram was told up to update {} but the journal holds up to {journaled}",
        confirmed - 1
    );
}

/// The message tokens (`prefix` + digits) of every turn, in tape order: a turn's left-out
/// messages (its `messages.left_out` event), then the messages its prompt showed (not again
/// when a context compaction carried the prompt over).
fn tokens_on_the_tape(env: &Env, prefix: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for entry in env.tape_entries() {
        let payload = &entry["payload"];
        match entry["kind"].as_str() {
            Some("event") if payload["name"] == "messages.left_out" => {
                for message in payload["data"]["messages"].as_array().unwrap() {
                    seen.extend(tokens(message.as_str().unwrap(), prefix));
                }
            }
            Some("message")
                if payload["role"] == "user" && entry["meta"]["carried_over"] != true =>
            {
                seen.extend(tokens(payload["content"].as_str().unwrap_or(""), prefix));
            }
            _ => {}
        }
    }
    seen
}

/// A daemon whose model holds the first of `messages` messages to chat 42 while the others
/// arrive, once its inbound queue is full (`inbound.held`); the last update's id.
async fn held(env: &Env, messages: usize) -> (Daemon, i64) {
    env.model.echo_tokens("m");
    env.model.hold();
    let daemon = env.start();
    env.telegram.push_message_update(private_text(42, 42, "m0"));
    env.model.wait_for_requests(1, WAIT).await;
    let mut last = 0;
    for i in 1..messages {
        last = env
            .telegram
            .push_message_update(private_text(42, 42, &format!("m{i}")));
    }
    daemon.wait_for_log("inbound.held").await;
    (daemon, last)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_inbound_queue_loses_nothing_and_confirms_only_journaled_updates() {
    // More than the queues hold: a chat's 500 queued messages, its mailbox of 64, the
    // manager's 256, and the one the turn runs with.
    const MESSAGES: usize = 1_000;
    let env = Env::new().await;
    let (daemon, last) = held(&env, MESSAGES).await;
    wait_until(LONG_WAIT, "the queues to fill", || {
        journaled_messages(&env) >= 1 + 500 + 64 + 256
    })
    .await;
    assert_confirmed_only_journaled(&env);
    assert!(
        env.telegram.pending_updates() > 0,
        "updates the daemon could not take yet stay with Telegram"
    );
    assert!(
        journaled_messages(&env) < MESSAGES,
        "and out of the journal"
    );

    env.model.release();
    env.telegram.wait_for_confirmed(last, LONG_WAIT).await;
    assert_confirmed_only_journaled(&env);
    wait_until(LONG_WAIT, "every message finished in the journal", || {
        unfinished(&env) == 0 && env.inbox_text().contains(r#""op":"done""#)
    })
    .await;
    let expected: Vec<String> = (0..MESSAGES).map(|i| format!("m{i}")).collect();
    assert_eq!(
        tokens_on_the_tape(&env, "m"),
        expected,
        "every message reached a turn once, in order"
    );
    let turns = env.model.request_count();
    assert!(turns >= 3, "the backlog ran as several batches: {turns}");
    assert_eq!(env.telegram.delivered().len(), turns, "one answer per turn");
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{status:?}\n{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_of_1300_messages_writes_the_journal_in_proportion_to_what_it_received() {
    const MESSAGES: usize = 1_300;
    const SIZE: usize = 4096;
    let mut env = Env::new().await;
    env.set("BUB_LOG_FORMAT", "json");
    env.model.echo_tokens("b");
    env.model.hold();
    let daemon = env.start();
    let text = |i: usize| {
        let head = format!("b{i} ");
        head.clone() + &"x".repeat(SIZE - head.len())
    };
    env.telegram
        .push_message_update(private_text(42, 42, &text(0)));
    env.model.wait_for_requests(1, WAIT).await;
    let mut last = 0;
    for i in 1..MESSAGES {
        last = env
            .telegram
            .push_message_update(private_text(42, 42, &text(i)));
    }
    daemon.wait_for_log("inbound.held").await;
    assert_confirmed_only_journaled(&env);
    env.model.release();
    env.telegram.wait_for_confirmed(last, LONG_WAIT).await;
    wait_until(LONG_WAIT, "every message finished in the journal", || {
        unfinished(&env) == 0 && env.inbox_text().contains(r#""op":"done""#)
    })
    .await;
    let expected: Vec<String> = (0..MESSAGES).map(|i| format!("b{i}")).collect();
    assert_eq!(tokens_on_the_tape(&env, "b"), expected);
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{status:?}");

    // Bytes written: up to the last rewrite (its log line counts them), then appends only.
    let compactions: Vec<(u64, u64)> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "inbox.compact")
        .map(|l| {
            let fields = &l["fields"];
            (
                fields["bytes"].as_u64().unwrap(),
                fields["written"].as_u64().unwrap(),
            )
        })
        .collect();
    let &(after, written) = compactions
        .last()
        .expect("the journal passed 4 MiB and was rewritten");
    let size = wait_for(WAIT, "the journal", || {
        std::fs::metadata(env.home.join("inbox.jsonl")).ok()
    })
    .await
    .len();
    let written = written + (size - after);
    let received = (MESSAGES * SIZE) as u64;
    eprintln!(
        "journal: {written} bytes written for {received} received ({:.2}×), {} rewrites",
        written as f64 / received as f64,
        compactions.len()
    );
    assert!(
        written < 3 * received,
        "{written} bytes written for {received} received"
    );
}

/// Stopped while held: what was journaled resumes on the next start, what was not is fetched
/// from Telegram again, and every message reaches a turn once, in order (the interrupted first
/// one twice: it runs again once after the restart).
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_stopped_while_held_loses_nothing() {
    const MESSAGES: usize = 1_000;
    let env = Env::new().await;
    let (daemon, last) = held(&env, MESSAGES).await;
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{status:?}\n{log}");
    assert_confirmed_only_journaled(&env);
    assert!(env.telegram.pending_updates() > 0, "not all were taken");

    env.model.release();
    let daemon = env.start();
    env.telegram.wait_for_confirmed(last, LONG_WAIT).await;
    wait_until(LONG_WAIT, "every message finished in the journal", || {
        unfinished(&env) == 0 && env.inbox_text().contains(r#""op":"done""#)
    })
    .await;
    let expected: Vec<String> = std::iter::once("m0".to_owned())
        .chain((0..MESSAGES).map(|i| format!("m{i}")))
        .collect();
    assert_eq!(tokens_on_the_tape(&env, "m"), expected);
    let (status, log) = daemon.stop_with_log().await;
    assert!(status.success(), "{status:?}\n{log}");
}
