//! What a turn sent besides its answer, across a restart: `message.send` progress, the live
//! message, the give-up notice that replaces it, and the journal versions.

use std::path::Path;

use super::*;
use crate::access::Role;
use crate::chat::Inbound;
use crate::inbox::{Inbox, Outcome, Received, Resume};

fn msg(id: &str, text: &str) -> Inbound {
    let sender = crate::chat::Sender::new("7", None, Role::Owner);
    Inbound {
        mentioned: true,
        ..Inbound::new("telegram", "42", id, sender, text)
    }
}

fn open(path: &Path) -> (Inbox, Vec<Resume>) {
    Inbox::open(path, |m| Some(m.sender.role)).unwrap()
}

async fn receive(inbox: &Inbox, id: &str) -> u64 {
    match inbox.receive(&mut msg(id, "hello"), None).await.unwrap() {
        Received::New(seq) => seq,
        Received::Duplicate => panic!("duplicate"),
    }
}

fn progress(parts: usize, done: bool) -> Option<SendProgress> {
    Some(SendProgress { parts, done })
}

#[tokio::test]
async fn sends_and_the_live_message_survive_a_restart_until_their_messages_are_done() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let (a, b) = (receive(&inbox, "1").await, receive(&inbox, "2").await);
    let other = receive(&inbox, "3").await;
    inbox.started(&[a, b]).await;
    inbox.live(&[a, b], "1001").await;
    inbox.sending(&[a, b], "k1", "telegram:7").await;
    inbox.send_done(&[a, b], "k1").await;
    inbox.sending(&[a, b], "k2", "telegram:8").await;
    inbox.send_part(&[a, b], "k2", 2).await;
    assert_eq!(inbox.send_progress(&[a], "k1"), progress(0, true));
    assert_eq!(inbox.send_progress(&[other], "k1"), None, "another turn's");
    drop(inbox);

    let (inbox, resume) = open(&path);
    assert_eq!(resume.len(), 3, "{resume:?}");
    // The resumed turn may batch the messages with others: any of them finds the records.
    assert_eq!(inbox.send_progress(&[b, 9], "k1"), progress(0, true));
    assert_eq!(inbox.send_progress(&[a], "k2"), progress(2, false));
    assert_eq!(inbox.send_progress(&[a], "k3"), None);
    assert_eq!(inbox.live_message(&[9, b]).as_deref(), Some("1001"));
    assert_eq!(inbox.live_message(&[other]), None);
    // The compacted journal holds them, one record per message, after its version.
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(
        journal.starts_with("{\"op\":\"version\",\"v\":3}\n"),
        "{journal}"
    );
    assert!(
        journal.contains(r#"{"op":"send","seqs":[1],"key":"k2","to":"telegram:8","parts":2}"#),
        "{journal}"
    );
    assert!(
        journal.contains(r#"{"op":"send","seqs":[2],"key":"k1","to":"telegram:7","done":true}"#),
        "{journal}"
    );
    assert!(journal.contains(r#"{"op":"live","seqs":[1],"id":"1001"}"#));

    inbox.done(&[a, b], Outcome::Sent).await;
    inbox.flush().await; // `done` is not waited for
    assert_eq!(inbox.send_progress(&[a, b], "k1"), None);
    assert_eq!(inbox.live_message(&[a, b]), None);
    // A record about messages no longer pending (a live post that ended after `,stop`) is
    // not kept.
    inbox.live(&[a], "1002").await;
    assert_eq!(inbox.live_message(&[a]), None);
    drop(inbox);
    let (inbox, _) = open(&path);
    assert_eq!(inbox.send_progress(&[a, b], "k1"), None);
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(!journal.contains("\"op\":\"send\""), "{journal}");
    assert!(!journal.contains("\"op\":\"live\""), "{journal}");
}

#[tokio::test]
async fn at_most_max_sends_are_remembered_per_message() {
    let inbox = Inbox::memory();
    let seq = receive(&inbox, "1").await;
    for i in 0..MAX_SENDS + 5 {
        inbox.sending(&[seq], &format!("k{i}"), "telegram:7").await;
    }
    let last = format!("k{}", MAX_SENDS - 1);
    assert_eq!(inbox.send_progress(&[seq], &last), progress(0, false));
    let over = format!("k{MAX_SENDS}");
    assert_eq!(inbox.send_progress(&[seq], &over), None);
    // A message that never went through the inbox (seq 0) has nothing recorded.
    inbox.sending(&[0], "k", "telegram:7").await;
    assert_eq!(inbox.send_progress(&[0], "k"), None);
}

#[tokio::test]
async fn the_give_up_notice_replaces_the_live_message_an_interrupted_turn_left() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let seq = receive(&inbox, "1").await;
    inbox.started(&[seq]).await;
    inbox.live(&[seq], "1001").await;
    drop(inbox);
    // Interrupted once: runs again, with its live message still known.
    let (inbox, resume) = open(&path);
    assert!(matches!(&resume[..], [Resume::Message(m)] if m.interrupted));
    assert_eq!(inbox.live_message(&[seq]).as_deref(), Some("1001"));
    inbox.started(&[seq]).await;
    drop(inbox);
    // Interrupted twice: the notice edits the live message instead of leaving it stale.
    let (inbox, resume) = open(&path);
    let [Resume::Deliver(notice)] = &resume[..] else {
        panic!("{resume:?}")
    };
    assert!(notice.out.text.contains("gave up"), "{notice:?}");
    assert_eq!(notice.out.edit.as_deref(), Some("1001"));
    drop(inbox);
    // Recorded as the notice's own edit: the next start delivers it the same way.
    let (_, resume) = open(&path);
    assert!(matches!(&resume[..], [Resume::Deliver(n)] if n.out.edit.as_deref() == Some("1001")));
}

/// A journal of version 1 (no `version` line, the records of that version, messages with
/// their text) reads as it did, and is rewritten as the current version.
#[tokio::test]
async fn a_version_1_journal_is_read_and_rewritten_as_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let m = |id: &str, text: &str| {
        serde_json::json!({"channel": "telegram", "chat_id": "42", "message_id": id,
            "sender_id": "7", "sender_name": null, "role": "owner", "prompt": text,
            "mentioned": true, "reply": false})
        .to_string()
    };
    let v1 = [
        r#"{"op":"next","seq":4}"#.to_owned(),
        r#"{"op":"cursor","channel":"telegram","at":900}"#.to_owned(),
        r#"{"op":"seen","channel":"discord","chat":"5","id":77}"#.to_owned(),
        format!(r#"{{"op":"recv","seq":5,"cursor":901,"msg":{}}}"#, m("10", "answered")),
        format!(r#"{{"op":"recv","seq":6,"msg":{}}}"#, m("11", "interrupted")),
        format!(r#"{{"op":"recv","seq":7,"msg":{}}}"#, m("12", "finished")),
        r#"{"op":"start","seqs":[5]}"#.to_owned(),
        r#"{"op":"answer","channel":"telegram","seqs":[5],"out":{"chat_id":"42","text":"hi","reply_to":null}}"#.to_owned(),
        r#"{"op":"sent","seqs":[5],"parts":1}"#.to_owned(),
        r#"{"op":"start","seqs":[6]}"#.to_owned(),
        r#"{"op":"done","seqs":[7],"outcome":"silent"}"#.to_owned(),
    ]
    .join("\n");
    std::fs::write(&path, v1).unwrap();
    let (inbox, resume) = open(&path);
    let [Resume::Deliver(answer), Resume::Message(again)] = &resume[..] else {
        panic!("{resume:?}")
    };
    assert_eq!((answer.seqs.as_slice(), answer.parts_sent), (&[5][..], 1));
    assert_eq!((again.seq, again.interrupted), (6, true));
    assert_eq!(
        **again,
        Inbound {
            seq: 6,
            interrupted: true,
            ..msg("11", "interrupted")
        }
    );
    assert_eq!(inbox.cursor("telegram"), Some(901));
    assert_eq!(inbox.last_seen("discord", 5), [("5".to_owned(), 77)]);
    assert_eq!(receive(&inbox, "13").await, 8, "the numbering goes on");
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(
        journal.starts_with("{\"op\":\"version\",\"v\":3}\n"),
        "{journal}"
    );
}

#[tokio::test]
async fn a_journal_of_a_newer_version_is_read_for_what_this_one_understands() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let m = serde_json::to_string(&msg("10", "question")).unwrap();
    let newer = format!(
        "{{\"op\":\"version\",\"v\":99}}\n{{\"op\":\"recv\",\"seq\":1,\"msg\":{m}}}\n\
         {{\"op\":\"teleport\",\"seqs\":[1]}}\n"
    );
    std::fs::write(&path, newer).unwrap();
    let (_, resume) = open(&path);
    assert!(matches!(&resume[..], [Resume::Message(m)] if m.seq == 1));
}
