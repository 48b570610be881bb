//! The inbox journal: what a restart resumes, duplicates, compaction, a torn line.

use super::*;
use crate::access::Role;

fn msg(chat: &str, id: &str, prompt: &str) -> Inbound {
    Inbound {
        channel: "telegram".into(),
        chat_id: chat.into(),
        message_id: id.into(),
        sender_id: "7".into(),
        sender_name: None,
        role: Role::Owner,
        prompt: prompt.into(),
        mentioned: true,
        reply: false,
        seq: 0,
        interrupted: false,
    }
}

fn open(path: &Path) -> (Inbox, Vec<Resume>) {
    Inbox::open(path, |m| Some(m.role)).unwrap()
}

fn receive(inbox: &Inbox, m: &Inbound) -> u64 {
    match inbox.receive(&mut m.clone(), None).unwrap() {
        Received::New(seq) => seq,
        Received::Duplicate => panic!("duplicate"),
    }
}

fn delivery(seqs: Vec<u64>, text: &str) -> Delivery {
    Delivery {
        channel: "telegram".into(),
        seqs,
        out: Outbound {
            chat_id: "42".into(),
            text: text.into(),
            reply_to: None,
            file: None,
            edit: None,
        },
        parts_sent: 0,
    }
}

#[test]
fn a_restart_resumes_what_was_not_finished() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, resume) = open(&path);
    assert!(resume.is_empty());
    let done = receive(&inbox, &msg("42", "1", "answered"));
    let answered = receive(&inbox, &msg("42", "2", "answer recorded"));
    let started = receive(&inbox, &msg("42", "3", "in a turn"));
    let waiting = receive(&inbox, &msg("42", "4", "queued"));
    inbox.started(&[done]);
    inbox.answered(&delivery(vec![done], "one"));
    inbox.done(&[done], Outcome::Sent);
    inbox.started(&[answered]);
    inbox.answered(&delivery(vec![answered], "two"));
    inbox.started(&[started]);
    drop(inbox);

    let (inbox, resume) = open(&path);
    assert_eq!(inbox.pending(), 3);
    assert_eq!(resume.len(), 3, "{resume:?}");
    assert_eq!(resume[0], Resume::Deliver(delivery(vec![answered], "two")));
    let Resume::Message(m) = &resume[1] else {
        panic!("{resume:?}")
    };
    assert_eq!(
        (m.message_id.as_str(), m.interrupted, m.seq),
        ("3", true, started)
    );
    let Resume::Message(m) = &resume[2] else {
        panic!("{resume:?}")
    };
    assert_eq!(
        (m.message_id.as_str(), m.interrupted, m.seq),
        ("4", false, waiting)
    );
    // New messages continue the numbering.
    assert_eq!(receive(&inbox, &msg("42", "5", "new")), waiting + 1);
}

#[test]
fn an_interrupted_message_runs_again_only_once_and_commands_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let twice = receive(&inbox, &msg("42", "1", "crashes me"));
    let command = receive(&inbox, &msg("42", "2", ",bash cmd='rm x'"));
    inbox.started(&[twice]);
    inbox.started(&[command]);
    drop(inbox);
    let (inbox, resume) = open(&path);
    assert!(matches!(&resume[0], Resume::Message(m) if m.seq == twice && m.interrupted));
    let Resume::Deliver(notice) = &resume[1] else {
        panic!("{resume:?}")
    };
    assert_eq!(notice.seqs, vec![command]);
    assert!(notice.out.text.contains("was not run again"), "{notice:?}");
    inbox.started(&[twice]);
    drop(inbox);
    let (_, resume) = open(&path);
    // The notice for the command is still undelivered; the message gave up, in one notice.
    let notices: Vec<_> = resume
        .iter()
        .map(|r| match r {
            Resume::Deliver(d) => d.seqs.clone(),
            other => panic!("ran a third time: {other:?}"),
        })
        .collect();
    assert_eq!(notices, vec![vec![command], vec![twice]]);
}

#[test]
fn duplicates_are_recognised_and_cursors_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let mut m = msg("42", "10", "hi");
    assert!(matches!(
        inbox.receive(&mut m, Some(500)),
        Ok(Received::New(_))
    ));
    assert_eq!(
        inbox.receive(&mut m.clone(), Some(500)).unwrap(),
        Received::Duplicate
    );
    let mut other = msg("43", "3", "yo");
    inbox.receive(&mut other, Some(501)).unwrap();
    // Without a cursor (Discord), each chat's last message id is kept for the catch-up.
    for (chat, id) in [("7", "100"), ("8", "5"), ("7", "90")] {
        let mut m = msg(chat, id, "d");
        m.channel = "discord".into();
        inbox.receive(&mut m, None).unwrap();
    }
    drop(inbox);
    let (inbox, _) = open(&path);
    assert_eq!(inbox.cursor("telegram"), Some(501));
    assert!(inbox.last_seen("telegram", 10).is_empty());
    assert_eq!(
        inbox.last_seen("discord", 10),
        vec![("7".to_owned(), 100), ("8".to_owned(), 5)]
    );
    assert_eq!(inbox.last_seen("discord", 1).len(), 1);
}

#[test]
fn refused_senders_are_not_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    receive(&inbox, &msg("42", "1", "from a revoked user"));
    drop(inbox);
    let (inbox, resume) = open(&path);
    assert_eq!(resume.len(), 1);
    receive(&inbox, &msg("42", "2", ",stop"));
    drop(inbox);
    let (_, resume) = open(&path);
    assert_eq!(resume.len(), 1, "a control is not resumed");
    let (inbox, resume) = Inbox::open(&path, |_| None).unwrap();
    assert!(resume.is_empty());
    assert_eq!(inbox.pending(), 0);
}

#[test]
fn a_torn_last_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    receive(&inbox, &msg("42", "1", "kept"));
    drop(inbox);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"{\"op\":\"recv\",\"seq\":2,\"msg\":{\"chan")
        .unwrap();
    let (inbox, resume) = open(&path);
    assert_eq!(resume.len(), 1);
    assert_eq!(inbox.pending(), 1);
    // The journal was rewritten whole: appending works.
    receive(&inbox, &msg("42", "2", "next"));
    drop(inbox);
    assert_eq!(open(&path).1.len(), 2);
}

#[test]
fn a_failed_append_does_not_glue_the_next_record_to_its_fragment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    // A write cut short (EFBIG past RLIMIT_FSIZE, ENOSPC): part of a line, then an error.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"{\"op\":\"recv\",\"seq\":1,\"msg\":{\"chan")
        .unwrap();
    let writable = inbox
        .inner
        .lock()
        .unwrap()
        .file
        .replace(File::open(&path).unwrap());
    assert!(
        inbox
            .receive(&mut msg("42", "1", "first try"), None)
            .is_err()
    );
    inbox.inner.lock().unwrap().file = writable;
    // The platform delivers it again (it was not confirmed): journaled on a line of its own.
    let seq = receive(&inbox, &msg("42", "1", "second try"));
    inbox.started(&[seq]);
    drop(inbox);
    let (_, resume) = open(&path);
    let [Resume::Message(m)] = resume.as_slice() else {
        panic!("the message survives the restart: {resume:?}")
    };
    assert_eq!(
        (m.prompt.as_str(), m.seq, m.interrupted),
        ("second try", seq, true)
    );
}

#[test]
fn the_journal_is_compacted_to_pending_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let text = "x".repeat(4096);
    let mut last = 0;
    for i in 0..2_000 {
        let seq = receive(&inbox, &msg("42", &i.to_string(), &text));
        inbox.done(&[seq], Outcome::Silent);
        last = seq;
    }
    let keep = receive(&inbox, &msg("42", "9999", "still waiting"));
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size < COMPACT_AT, "compacted: {size} bytes");
    drop(inbox);
    let (inbox, resume) = open(&path);
    assert_eq!(resume.len(), 1);
    assert!(matches!(&resume[0], Resume::Message(m) if m.seq == keep));
    assert_eq!(receive(&inbox, &msg("42", "10000", "n")), last + 2);
}

/// A backlog (a slow model: 1,300 messages of 4 KB received, none answered yet) costs rewrites
/// proportional to what was received, not a rewrite of the whole backlog with every record.
#[test]
fn a_backlog_costs_writes_proportional_to_what_was_received() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let text = "x".repeat(4096);
    let seqs: Vec<u64> = (0..1_300)
        .map(|i| receive(&inbox, &msg("42", &i.to_string(), &text)))
        .collect();
    inbox.started(&seqs);
    let journal = std::fs::metadata(&path).unwrap().len();
    assert!(
        journal > COMPACT_AT,
        "the backlog passed COMPACT_AT: {journal}"
    );
    let written = inbox.written();
    assert!(
        written < 3 * journal,
        "{written} bytes written for a {journal}-byte backlog"
    );
    drop(inbox);
    let (_, resume) = open(&path);
    assert_eq!(resume.len(), 1_300, "nothing lost");
}

#[test]
fn a_restart_resumes_an_answer_from_its_first_part_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let a = receive(&inbox, &msg("42", "1", "first"));
    let b = receive(&inbox, &msg("42", "2", "second"));
    inbox.started(&[a, b]);
    inbox.answered(&delivery(vec![a, b], "a long answer"));
    inbox.sent(&[a, b], 1);
    inbox.sent(&[a, b], 3);
    drop(inbox);
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(
        journal.ends_with("{\"op\":\"sent\",\"seqs\":[1,2],\"parts\":3}\n"),
        "one small record per part: {journal}"
    );

    let rest = Delivery {
        parts_sent: 3,
        ..delivery(vec![a, b], "a long answer")
    };
    let (inbox, resume) = open(&path);
    assert_eq!(resume, [Resume::Deliver(rest.clone())]);
    // The compacted journal keeps the progress.
    let journal = std::fs::read_to_string(&path).unwrap();
    assert!(!journal.contains("\"op\":\"sent\""), "{journal}");
    assert!(journal.contains("\"parts_sent\":3"), "{journal}");
    drop(inbox);
    assert_eq!(open(&path).1, [Resume::Deliver(rest)]);
}

#[test]
fn an_older_journal_without_part_records_resends_the_whole_answer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let m = serde_json::to_string(&msg("42", "1", "question")).unwrap();
    let older = format!(
        "{{\"op\":\"recv\",\"seq\":1,\"msg\":{m}}}\n{{\"op\":\"start\",\"seqs\":[1]}}\n\
         {{\"op\":\"answer\",\"channel\":\"telegram\",\"seqs\":[1],\
         \"out\":{{\"chat_id\":\"42\",\"text\":\"the whole answer\",\"reply_to\":null}}}}\n"
    );
    std::fs::write(&path, older).unwrap();
    let (_, resume) = open(&path);
    assert_eq!(
        resume,
        [Resume::Deliver(delivery(vec![1], "the whole answer"))]
    );
}

#[test]
fn a_memory_inbox_keeps_the_rules_without_a_file() {
    let inbox = Inbox::memory();
    let mut m = msg("42", "1", "hi");
    assert_eq!(inbox.receive(&mut m, None).unwrap(), Received::New(1));
    assert_eq!(m.seq, 1);
    assert_eq!(inbox.receive(&mut m, None).unwrap(), Received::Duplicate);
    inbox.done(&[1], Outcome::Sent);
    assert_eq!(inbox.pending(), 0);
}
