//! The inbox journal: what a restart resumes, duplicates, compaction, a torn line.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use super::*;
use crate::access::Role;
use crate::chat::Sender;

fn msg(chat: &str, id: &str, text: &str) -> Inbound {
    let sender = Sender::new("7", None, Role::Owner);
    Inbound {
        mentioned: true,
        ..Inbound::new("telegram", chat, id, sender, text)
    }
}

fn open(path: &Path) -> (Inbox, Vec<Resume>) {
    Inbox::open(path, |m| Some(m.sender.role)).unwrap()
}

async fn receive(inbox: &Inbox, m: &Inbound) -> u64 {
    match inbox.receive(&mut m.clone(), None).await.unwrap() {
        Received::New(seq) => seq,
        Received::Duplicate => panic!("duplicate"),
    }
}

/// The writer's side of the journal file (held, the writer waits).
fn disk(inbox: &Inbox) -> std::sync::MutexGuard<'_, writer::Disk> {
    inbox.store.writer().unwrap().disk.lock().unwrap()
}

/// Keeps the writer from writing (a thread holds its file) until dropped.
struct Hold(
    Option<std::sync::mpsc::Sender<()>>,
    Option<std::thread::JoinHandle<()>>,
);

fn hold(inbox: &Inbox) -> Hold {
    let disk = inbox.store.writer().unwrap().disk.clone();
    let (held, wait) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _file = disk.lock().unwrap();
        held.send(()).unwrap();
        let _ = released.recv();
    });
    wait.recv().unwrap();
    Hold(Some(release), Some(thread))
}

impl Drop for Hold {
    fn drop(&mut self) {
        drop(self.0.take());
        self.1.take().unwrap().join().unwrap();
    }
}

/// Receives `messages` from one task each, all at once; their results in order.
async fn receive_all(inbox: &Arc<Inbox>, messages: Vec<Inbound>) -> Vec<anyhow::Result<Received>> {
    let tasks: Vec<_> = messages
        .into_iter()
        .map(|mut m| {
            let inbox = inbox.clone();
            tokio::spawn(async move { inbox.receive(&mut m, None).await })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    results
}

/// Waits (bounded) until `n` received messages are on their way to the file.
async fn in_flight(inbox: &Inbox, n: usize) {
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while inbox.lock().inflight.len() < n {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("messages in flight");
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

#[tokio::test]
async fn a_restart_resumes_what_was_not_finished() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, resume) = open(&path);
    assert!(resume.is_empty());
    let done = receive(&inbox, &msg("42", "1", "answered")).await;
    let answered = receive(&inbox, &msg("42", "2", "answer recorded")).await;
    let started = receive(&inbox, &msg("42", "3", "in a turn")).await;
    let waiting = receive(&inbox, &msg("42", "4", "queued")).await;
    inbox.started(&[done]).await;
    inbox.answered(&delivery(vec![done], "one")).await;
    inbox.done(&[done], Outcome::Sent).await;
    inbox.started(&[answered]).await;
    inbox.answered(&delivery(vec![answered], "two")).await;
    inbox.started(&[started]).await;
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
    assert_eq!(receive(&inbox, &msg("42", "5", "new")).await, waiting + 1);
}

#[tokio::test]
async fn an_interrupted_message_runs_again_only_once_and_commands_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let twice = receive(&inbox, &msg("42", "1", "crashes me")).await;
    let command = receive(&inbox, &msg("42", "2", ",bash cmd='rm x'")).await;
    inbox.started(&[twice]).await;
    inbox.started(&[command]).await;
    drop(inbox);
    let (inbox, resume) = open(&path);
    assert!(matches!(&resume[0], Resume::Message(m) if m.seq == twice && m.interrupted));
    let Resume::Deliver(notice) = &resume[1] else {
        panic!("{resume:?}")
    };
    assert_eq!(notice.seqs, vec![command]);
    assert!(notice.out.text.contains("was not run again"), "{notice:?}");
    inbox.started(&[twice]).await;
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

#[tokio::test]
async fn duplicates_are_recognised_and_cursors_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let mut m = msg("42", "10", "hi");
    assert!(matches!(
        inbox.receive(&mut m, Some(500)).await,
        Ok(Received::New(_))
    ));
    assert_eq!(
        inbox.receive(&mut m.clone(), Some(500)).await.unwrap(),
        Received::Duplicate
    );
    let mut other = msg("43", "3", "yo");
    inbox.receive(&mut other, Some(501)).await.unwrap();
    // Without a cursor (Discord), each chat's last message id is kept for the catch-up.
    for (chat, id) in [("7", "100"), ("8", "5"), ("7", "90")] {
        let mut m = msg(chat, id, "d");
        m.channel = "discord".into();
        inbox.receive(&mut m, None).await.unwrap();
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

#[tokio::test]
async fn refused_senders_are_not_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    receive(&inbox, &msg("42", "1", "from a revoked user")).await;
    drop(inbox);
    let (inbox, resume) = open(&path);
    assert_eq!(resume.len(), 1);
    receive(&inbox, &msg("42", "2", ",stop")).await;
    drop(inbox);
    let (_, resume) = open(&path);
    assert_eq!(resume.len(), 1, "a control is not resumed");
    let (inbox, resume) = Inbox::open(&path, |_| None).unwrap();
    assert!(resume.is_empty());
    assert_eq!(inbox.pending(), 0);
}

#[tokio::test]
async fn a_torn_last_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    receive(&inbox, &msg("42", "1", "kept")).await;
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
    receive(&inbox, &msg("42", "2", "next")).await;
    drop(inbox);
    assert_eq!(open(&path).1.len(), 2);
}

#[tokio::test]
async fn a_failed_append_does_not_glue_the_next_record_to_its_fragment() {
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
    let writable = std::mem::replace(&mut disk(&inbox).file, File::open(&path).unwrap());
    assert!(
        inbox
            .receive(&mut msg("42", "1", "first try"), None)
            .await
            .is_err()
    );
    disk(&inbox).file = writable;
    // The platform delivers it again (it was not confirmed): journaled on a line of its own.
    let seq = receive(&inbox, &msg("42", "1", "second try")).await;
    inbox.started(&[seq]).await;
    drop(inbox);
    let (_, resume) = open(&path);
    let [Resume::Message(m)] = resume.as_slice() else {
        panic!("the message survives the restart: {resume:?}")
    };
    assert_eq!(
        (m.text().as_ref(), m.seq, m.interrupted),
        ("second try", seq, true)
    );
}

#[tokio::test]
async fn the_journal_is_compacted_to_pending_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let text = "x".repeat(4096);
    let mut last = 0;
    for i in 0..2_000 {
        let seq = receive(&inbox, &msg("42", &i.to_string(), &text)).await;
        inbox.done(&[seq], Outcome::Silent).await;
        last = seq;
    }
    let keep = receive(&inbox, &msg("42", "9999", "still waiting")).await;
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size < COMPACT_AT, "compacted: {size} bytes");
    drop(inbox);
    let (inbox, resume) = open(&path);
    assert_eq!(resume.len(), 1);
    assert!(matches!(&resume[0], Resume::Message(m) if m.seq == keep));
    assert_eq!(receive(&inbox, &msg("42", "10000", "n")).await, last + 2);
}

/// A backlog (a slow model: 1,300 messages of 4 KB received, none answered yet) costs rewrites
/// proportional to what was received, not a rewrite of the whole backlog with every record.
#[tokio::test]
async fn a_backlog_costs_writes_proportional_to_what_was_received() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let text = "x".repeat(4096);
    let mut seqs = Vec::new();
    for i in 0..1_300 {
        seqs.push(receive(&inbox, &msg("42", &i.to_string(), &text)).await);
    }
    inbox.started(&seqs).await;
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

#[tokio::test]
async fn a_restart_resumes_an_answer_from_its_first_part_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let a = receive(&inbox, &msg("42", "1", "first")).await;
    let b = receive(&inbox, &msg("42", "2", "second")).await;
    inbox.started(&[a, b]).await;
    inbox.answered(&delivery(vec![a, b], "a long answer")).await;
    inbox.sent(&[a, b], 1).await;
    inbox.sent(&[a, b], 3).await;
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

#[tokio::test]
async fn an_older_journal_without_part_records_resends_the_whole_answer() {
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

#[tokio::test]
async fn a_memory_inbox_keeps_the_rules_without_a_file() {
    let inbox = Inbox::memory();
    let mut m = msg("42", "1", "hi");
    assert_eq!(inbox.receive(&mut m, None).await.unwrap(), Received::New(1));
    assert_eq!(m.seq, 1);
    assert_eq!(
        inbox.receive(&mut m, None).await.unwrap(),
        Received::Duplicate
    );
    inbox.done(&[1], Outcome::Sent).await;
    assert_eq!(inbox.pending(), 0);
}

/// Records that queue up while the writer is busy go out together, in one `write`, in the
/// order their numbers were given out, and each waiter hears only once its record is written.
#[tokio::test]
async fn queued_records_are_written_in_one_batch_and_each_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let inbox = Arc::new(open(&path).0);
    let lines = || std::fs::read_to_string(&path).unwrap().lines().count();
    let opened = lines();
    let held = hold(&inbox);
    let messages = (0..100).map(|i| msg("42", &i.to_string(), "hi")).collect();
    let results = tokio::spawn({
        let inbox = inbox.clone();
        async move { receive_all(&inbox, messages).await }
    });
    // All are queued, or taken by the writer and waiting for the file with it.
    in_flight(&inbox, 100).await;
    assert!(!results.is_finished(), "nobody heard before the write");
    assert_eq!(lines(), opened, "nothing written yet");
    drop(held);
    let results = results.await.unwrap();
    let mut seqs: Vec<u64> = results
        .into_iter()
        .map(|r| match r.unwrap() {
            Received::New(seq) => seq,
            Received::Duplicate => panic!("duplicate"),
        })
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=100).collect::<Vec<_>>());
    assert!(disk(&inbox).batches <= 2, "{} writes", disk(&inbox).batches);
    let journal = std::fs::read_to_string(&path).unwrap();
    let written: Vec<u64> = journal::parse(journal.as_bytes())
        .filter_map(|r| match r {
            Record::Recv { seq, .. } => Some(seq),
            _ => None,
        })
        .collect();
    assert_eq!(written, (1..=100).collect::<Vec<_>>(), "in numbering order");
    assert_eq!(inbox.pending(), 100);
}

/// A write that fails fails every record of its batch: each waiter gets the error, nothing
/// of it is applied (the platform will deliver the messages again, and they are not taken
/// for duplicates then), and a progress record that failed leaves its message pending.
#[tokio::test]
async fn a_failed_write_is_reported_to_every_waiter_and_applies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let inbox = Arc::new(open(&path).0);
    let kept = receive(&inbox, &msg("42", "0", "journaled before")).await;
    let before = std::fs::read(&path).unwrap();
    let writable = std::mem::replace(&mut disk(&inbox).file, File::open(&path).unwrap());
    let held = hold(&inbox);
    let messages: Vec<Inbound> = (1..=20).map(|i| msg("42", &i.to_string(), "hi")).collect();
    let results = tokio::spawn({
        let (inbox, messages) = (inbox.clone(), messages.clone());
        async move { receive_all(&inbox, messages).await }
    });
    in_flight(&inbox, 20).await;
    drop(held);
    for result in results.await.unwrap() {
        let error = format!("{:#}", result.unwrap_err());
        assert!(error.starts_with("writing the inbox journal"), "{error}");
    }
    inbox.done(&[kept], Outcome::Sent).await;
    inbox.flush().await; // `done` is not waited for
    assert_eq!(inbox.pending(), 1, "the failed `done` is not applied");
    assert!(inbox.lock().inflight.is_empty());
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "nothing reached the file"
    );

    disk(&inbox).file = writable;
    for result in receive_all(&inbox, messages).await {
        assert!(
            matches!(result.unwrap(), Received::New(_)),
            "not a duplicate"
        );
    }
    drop(inbox);
    let (_, resume) = open(&path);
    assert_eq!(
        resume.len(),
        21,
        "the message whose `done` failed resumes too"
    );
}
