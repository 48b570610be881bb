//! Fault injection against the real `bub message` binary (nothing lost, nothing stuck): the
//! model server refusing connections, Telegram answering 5xx and timing out on `getUpdates` and
//! on `sendMessage`, and tape (then inbox) appends failing with `EFBIG` under
//! `RLIMIT_FSIZE`. Each test checks what crossed the wire (the fakes' records) and what is on
//! disk (tapes, the inbox journal). The fake model echoes the message tokens of its last user
//! prompt (`answering: q1-1`), so every answer says which messages it answers.
//!
//! Timing: teloxide sleeps 10 s after any 5xx answer and gives up on a call after 17 s, so the
//! two Telegram outage tests take about 30 s each (they run in parallel).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::bub_env::{Daemon, Env, WAIT, limit_file_size};
use support::fake_telegram::{Call, private_text};
use support::wait::wait_until;

/// Bound for waits that sit out a Telegram outage (10 s 5xx pause + 17 s timeout + backoff).
const OUTAGE_WAIT: Duration = Duration::from_secs(75);

/// Queues a text message from user `chat` in its private chat; returns the update id.
fn push(env: &Env, chat: i64, text: &str) -> i64 {
    env.telegram
        .push_message_update(private_text(chat, chat, text))
}

/// The prompts of the messages the inbox journal holds without a `done` record.
fn unfinished(env: &Env) -> Vec<String> {
    let mut pending = BTreeMap::new();
    for line in env.inbox_text().lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match record["op"].as_str() {
            Some("recv") => {
                let prompt = record["msg"]["prompt"].as_str().unwrap_or_default();
                pending.insert(record["seq"].as_u64().unwrap(), prompt.to_owned());
            }
            Some("done") => {
                for seq in record["seqs"].as_array().unwrap() {
                    pending.remove(&seq.as_u64().unwrap());
                }
            }
            _ => {}
        }
    }
    pending.into_values().collect()
}

fn text(call: &Call) -> &str {
    call.body["text"].as_str().unwrap_or_default()
}

/// The texts delivered (answered with success) to `chat`, oldest first.
fn delivered_to(env: &Env, chat: i64) -> Vec<String> {
    env.telegram
        .delivered()
        .iter()
        .filter(|c| c.body["chat_id"] == chat)
        .map(|c| text(c).to_owned())
        .collect()
}

/// How often each token was answered in delivered messages.
fn answer_counts(env: &Env, prefix: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in env.telegram.delivered() {
        for token in support::fake_openai::tokens(text(&call), prefix) {
            *counts.entry(token).or_default() += 1;
        }
    }
    counts
}

/// Every token in `tokens` — and no other — was answered exactly once.
fn assert_answered_once(env: &Env, prefix: &str, tokens: &[&str]) {
    let counts = answer_counts(env, prefix);
    assert_eq!(
        counts.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        tokens.iter().copied().collect()
    );
    assert!(
        counts.values().all(|n| *n == 1),
        "answered once: {counts:?}"
    );
}

/// Waits until every token in `tokens` was answered at least once; panics after `timeout`.
async fn wait_answered(env: &Env, prefix: &str, tokens: &[&str], timeout: Duration) {
    env.telegram
        .wait_until(timeout, &format!("answers to {tokens:?}"), |_| {
            let counts = answer_counts(env, prefix);
            tokens.iter().all(|t| counts.contains_key(*t)).then_some(())
        })
        .await;
}

fn assert_running(daemon: &mut Daemon) {
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon exited"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusing_model_server_gets_each_chat_one_clear_error_and_the_daemon_serves_on() {
    let env = Env::new().await;
    env.model.echo_tokens("q");
    let mut daemon = env.start();
    // A normal exchange first: the model client now holds a keep-alive connection.
    push(&env, 1, "q1-1");
    wait_answered(&env, "q", &["q1-1"], WAIT).await;

    env.model.go_down().await;
    let outage = Instant::now();
    for (chat, token) in [(1, "q1-2"), (7, "q7-1"), (9, "q9-1")] {
        push(&env, chat, token);
    }
    env.telegram
        .wait_until(WAIT, "an answer in each chat", |f| {
            (f.delivered().len() >= 4).then_some(())
        })
        .await;
    // The client's retries (3 attempts, jittered 0.5 s base backoff) end well within this.
    assert!(outage.elapsed() < Duration::from_secs(10), "{outage:?}");
    assert_eq!(env.model.request_count(), 1, "no connection was accepted");
    for chat in [1, 7, 9] {
        let mut texts = delivered_to(&env, chat);
        if chat == 1 {
            assert_eq!(texts.remove(0), "answering: q1-1");
        }
        assert_eq!(texts.len(), 1, "chat {chat}: {texts:?}");
        assert!(
            texts[0].starts_with("Error: cannot reach 127.0.0.1:")
                && texts[0].contains(" (no proxy): connection refused"),
            "chat {chat}: {texts:?}"
        );
        assert!(!texts[0].contains("sk-test-secret"), "{texts:?}");
    }
    // Nothing lost: the messages are on the tapes, with the failed run.
    let tapes = env.tape_text();
    for token in ["q1-2", "q7-1", "q9-1"] {
        assert!(tapes.contains(token), "{token} is not on a tape");
    }
    assert!(tapes.contains(r#""kind":"error","payload":{"kind":"connect""#));
    assert_running(&mut daemon);

    env.model.come_up().await;
    push(&env, 7, "q7-2");
    push(&env, 9, "q9-2");
    wait_answered(&env, "q", &["q7-2", "q9-2"], WAIT).await;
    assert_eq!(delivered_to(&env, 7)[1], "answering: q7-2");
    assert_eq!(delivered_to(&env, 9)[1], "answering: q9-2");
    assert!(daemon.stop().await.success());
    assert_eq!(env.telegram.delivered().len(), 6);
    assert!(unfinished(&env).is_empty(), "{:?}", unfinished(&env));
}

#[tokio::test(flavor = "multi_thread")]
async fn get_updates_failing_with_5xx_then_timing_out_delays_messages_but_answers_each_once() {
    let env = Env::new().await;
    env.model.echo_tokens("u");
    // From now: 502 for 3 s, and until 15 s every other call is never answered. The first poll
    // gets the 502 (teloxide then pauses 10 s), the next one hangs until the client's 17 s
    // timeout, the one after that succeeds.
    env.telegram
        .fail_for("getUpdates", 502, Duration::from_secs(3));
    env.telegram
        .stall_for("getUpdates", Duration::from_secs(15));
    push(&env, 1, "u1-1");
    push(&env, 7, "u7-1");
    let daemon = env.start();
    env.telegram
        .wait_until(WAIT, "a failed getUpdates", |f| {
            f.calls_of("getUpdates")
                .iter()
                .any(|c| c.failed)
                .then_some(())
        })
        .await;
    push(&env, 7, "u7-2");
    push(&env, 9, "u9-1");
    let tokens = ["u1-1", "u7-1", "u7-2", "u9-1"];
    wait_answered(&env, "u", &tokens, OUTAGE_WAIT).await;
    let polls = env.telegram.calls_of("getUpdates");
    let failed: Vec<&Call> = polls.iter().filter(|c| c.failed).collect();
    assert!(failed.len() >= 2, "a 5xx and a stalled poll: {failed:?}");
    let (first_ok, last_failed) = (
        polls.iter().find(|c| !c.failed).unwrap().at,
        failed.last().unwrap().at,
    );
    assert!(
        first_ok.duration_since(last_failed) >= Duration::from_secs(15),
        "the stalled poll was given up by the client, not answered"
    );
    assert!(daemon.stop().await.success());
    assert_answered_once(&env, "u", &tokens);
    assert!(
        env.telegram
            .delivered()
            .iter()
            .all(|c| text(c).starts_with("answering: ")),
        "no error answers"
    );
    assert!(unfinished(&env).is_empty(), "{:?}", unfinished(&env));
}

#[tokio::test(flavor = "multi_thread")]
async fn send_message_failing_with_5xx_then_timing_out_delivers_each_answer_once() {
    let env = Env::new().await;
    env.model.echo_tokens("s");
    let daemon = env.start();
    env.telegram.wait_for_calls("getUpdates", 1, WAIT).await;
    // From now: 502 for 3 s, then (until 15 s) sends are never answered. The first attempt of
    // each answer gets the 502, the retry ~11 s later hangs until the client gives up (17 s),
    // the next one is delivered.
    env.telegram
        .fail_for("sendMessage", 502, Duration::from_secs(3));
    env.telegram
        .stall_for("sendMessage", Duration::from_secs(15));
    push(&env, 1, "s1-1");
    push(&env, 7, "s7-1");
    env.telegram
        .wait_until(WAIT, "two failed sends", |f| {
            let failed = f
                .calls_of("sendMessage")
                .iter()
                .filter(|c| c.failed)
                .count();
            (failed >= 2).then_some(())
        })
        .await;
    // Queued behind chat 1's turn, which is still delivering.
    push(&env, 1, "s1-2");
    let tokens = ["s1-1", "s1-2", "s7-1"];
    wait_answered(&env, "s", &tokens, OUTAGE_WAIT).await;
    let sends = env.telegram.calls_of("sendMessage");
    let stalled = sends
        .iter()
        .filter(|c| c.failed && c.at.duration_since(sends[0].at) > Duration::from_secs(5))
        .count();
    assert!(stalled >= 2, "each chat's retry hit the stall: {sends:?}");
    assert!(daemon.stop().await.success());
    assert_answered_once(&env, "s", &tokens);
    assert_eq!(
        delivered_to(&env, 1),
        ["answering: s1-1", "answering: s1-2"]
    );
    assert!(unfinished(&env).is_empty(), "{:?}", unfinished(&env));
}

/// Sets `pid`'s soft `RLIMIT_FSIZE` (the hard limit stays unlimited, so it can be raised again).
fn set_file_size_limit(pid: u32, bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit on our own child with a valid rlimit and no old-value pointer.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_tape_and_inbox_appends_are_reported_and_the_daemon_serves_on() {
    // The first tape append of a session writes the system prompt (several KiB): past this
    // limit it fails with EFBIG, while the inbox journal's first lines (about 1 KiB) fit.
    const LIMIT: u64 = 2500;
    let env = Env::new().await;
    env.model.echo_tokens("t");
    let mut cmd = env.command(&["message"]);
    limit_file_size(&mut cmd, LIMIT);
    let mut daemon = Daemon::spawn(cmd);
    let pid = daemon.child.id().unwrap();
    env.telegram.wait_for_calls("getUpdates", 1, WAIT).await;

    // 1. The tape cannot take the prompt: a clear error in the chat, the model is not called.
    push(&env, 42, "t42-1");
    let sent = env.telegram.wait_for_calls("sendMessage", 1, WAIT).await;
    let error = text(&sent[0]);
    assert!(
        error.starts_with("Error: could not record your message on the tape: File too large")
            && !error.contains(&*env.home.to_string_lossy()),
        "{error}"
    );
    assert_eq!(env.model.request_count(), 0, "the model was not called");
    wait_until(WAIT, "the turn to be finished in the inbox", || {
        unfinished(&env).is_empty() && env.inbox_text().contains(r#""outcome":"sent""#)
    })
    .await;
    assert_running(&mut daemon);
    let inbox = env.inbox_text();
    assert!(
        inbox
            .lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok()),
        "the inbox journal fit under the limit:\n{inbox}"
    );

    // 2. Now the inbox itself: a journal line that only partly fits (EFBIG after a partial
    // write). The update is not confirmed and is fetched again; once the limit is lifted it
    // is journaled on a line of its own and answered.
    let journal = std::fs::metadata(env.home.join("inbox.jsonl"))
        .unwrap()
        .len();
    set_file_size_limit(pid, journal + 64);
    let update = push(&env, 7, "t7-1");
    wait_until(WAIT, "a partial journal write", || {
        std::fs::metadata(env.home.join("inbox.jsonl"))
            .unwrap()
            .len()
            == journal + 64
    })
    .await;
    env.telegram
        .wait_until(WAIT, "the update fetched again", |f| {
            let fetched = f
                .calls_of("getUpdates")
                .iter()
                .filter(|c| c.body["offset"] == update)
                .count();
            (fetched >= 2).then_some(())
        })
        .await;
    assert!(env.telegram.delivered().len() == 1, "not answered yet");
    // Lifted: the message is journaled and its turn starts; the daemon dies in the model call.
    env.model.push_delay(Duration::from_secs(60));
    set_file_size_limit(pid, libc::RLIM_INFINITY);
    env.model.wait_for_requests(1, WAIT).await;
    daemon.kill().await;

    // 3. The restart resumes it from the journal (the platform forgot it: it was confirmed),
    // and the session whose tape append failed works again.
    let daemon = env.start();
    wait_answered(&env, "t", &["t7-1"], WAIT).await;
    assert!(
        env.model_prompts()[1].contains("previous attempt was interrupted"),
        "{:?}",
        env.model_prompts()
    );
    push(&env, 42, "t42-2");
    wait_answered(&env, "t", &["t42-2"], WAIT).await;
    assert!(daemon.stop().await.success());

    assert_eq!(
        delivered_to(&env, 7),
        ["answering: t7-1"],
        "answered once, normally"
    );
    assert_eq!(delivered_to(&env, 42)[1], "answering: t42-2");
    assert_eq!(env.model.request_count(), 3);
    assert!(unfinished(&env).is_empty(), "{:?}", unfinished(&env));
    assert!(env.tape_text().contains("t42-2"));
}
