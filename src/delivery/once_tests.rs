//! `bub send --id`: at most once per key, resumed after a failure, a key reused refused, old
//! keys forgotten. (Multi-threaded runtimes, as `bub send`'s: records go through
//! `block_in_place`.)

use std::sync::atomic::Ordering;

use super::*;
use crate::delivery::ledger::tests::{Recorder, outbox, to};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_sent_once_and_a_failed_send_resumes_where_it_stopped() {
    let home = tempfile::tempdir().unwrap();
    let channel = Recorder::new();
    let outbox = outbox(&channel, home.path());
    let hello = to("42", "hello");
    let sent = send_once(&outbox, "telegram", &hello, "greeting").await;
    assert_eq!(sent.unwrap(), Once::Sent);
    let again = send_once(&outbox, "telegram", &hello, "greeting").await;
    assert!(matches!(again.unwrap(), Once::Before(Some(_))));
    assert_eq!(channel.texts(), ["hello"], "not sent again");

    // A long one: the platform takes one part, then fails; the next run sends the rest.
    let long = to("42", "aaaa aaaa\n\nbbbb bbbb\n\ncccc cccc");
    channel.accepting.store(1, Ordering::SeqCst);
    let failed = send_once(&outbox, "telegram", &long, "report").await;
    assert!(format!("{:#}", failed.unwrap_err()).contains("502"));
    channel.accepting.store(usize::MAX, Ordering::SeqCst);
    let sent = send_once(&outbox, "telegram", &long, "report").await;
    assert_eq!(sent.unwrap(), Once::Sent);
    assert_eq!(
        channel.texts(),
        ["hello", "aaaa aaaa", "bbbb bbbb", "cccc cccc"],
        "every part once"
    );
    // The record: what was asked, each part accepted but the last, the end.
    let record = std::fs::read_to_string(record_path(&home.path().join(DIR), "report")).unwrap();
    let lines: Vec<&str> = record.lines().collect();
    assert_eq!(lines.len(), 4, "{record}");
    assert!(lines[0].starts_with(r#"{"id":"report","to":"telegram:42","digest":""#));
    assert_eq!(lines[1..3], [r#"{"parts":1}"#, r#"{"parts":2}"#]);
    assert!(lines[3].starts_with(r#"{"done":true,"#), "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_used_for_another_message_sends_nothing() {
    let home = tempfile::tempdir().unwrap();
    let channel = Recorder::new();
    let outbox = outbox(&channel, home.path());
    let sent = send_once(&outbox, "telegram", &to("42", "one"), "k").await;
    assert_eq!(sent.unwrap(), Once::Sent);
    for other in [to("42", "two"), to("43", "one")] {
        let err = send_once(&outbox, "telegram", &other, "k")
            .await
            .unwrap_err();
        let reused = err.downcast_ref::<KeyReused>().expect("KeyReused");
        assert_eq!(reused.to, "telegram:42");
    }
    // A refused chat: refused before anything is recorded.
    let refused = send_once(&outbox, "telegram", &to("666", "x"), "r").await;
    assert!(refused.is_err());
    assert!(!record_path(&home.path().join(DIR), "r").exists());
    assert_eq!(channel.texts(), ["one"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_older_than_30_days_are_forgotten_and_records_are_private() {
    let home = tempfile::tempdir().unwrap();
    let channel = Recorder::new();
    let outbox = outbox(&channel, home.path());
    let dir = home.path().join(DIR);
    let old = record_path(&dir, "last-month");
    let sent = send_once(&outbox, "telegram", &to("42", "a"), "last-month").await;
    assert_eq!(sent.unwrap(), Once::Sent);
    let long_ago = SystemTime::now() - KEPT - Duration::from_secs(60);
    File::open(&old).unwrap().set_modified(long_ago).unwrap();
    let sent = send_once(&outbox, "telegram", &to("42", "b"), "today").await;
    assert_eq!(sent.unwrap(), Once::Sent);
    assert!(!old.exists(), "forgotten");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&record_path(&dir, "today")), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_record_line_is_ignored_and_the_next_starts_on_a_line_of_its_own() {
    let home = tempfile::tempdir().unwrap();
    let channel = Recorder::new();
    let outbox = outbox(&channel, home.path());
    let path = record_path(&home.path().join(DIR), "k");
    let long = to("42", "aaaa aaaa\n\nbbbb bbbb");
    channel.accepting.store(1, Ordering::SeqCst);
    assert!(send_once(&outbox, "telegram", &long, "k").await.is_err());
    // A process that died writing its next line left part of it.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(br#"{"par"#).unwrap();
    channel.accepting.store(usize::MAX, Ordering::SeqCst);
    let sent = send_once(&outbox, "telegram", &long, "k").await;
    assert_eq!(sent.unwrap(), Once::Sent);
    assert_eq!(channel.texts(), ["aaaa aaaa", "bbbb bbbb"]);
    let again = send_once(&outbox, "telegram", &long, "k").await;
    assert!(matches!(again.unwrap(), Once::Before(_)));
}
