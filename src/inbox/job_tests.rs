//! Scheduled runs in the journal: resumed once after an interruption, given up (with a notice
//! to the chat) after the second, a recorded answer delivered from its first part not sent,
//! and all of it kept through compaction.

use std::path::Path;

use super::*;
use crate::access::Role;
use crate::inbox::{Inbox, Outcome};

fn open(path: &Path) -> (Inbox, Vec<Resume>) {
    Inbox::open(path, |m| Some(m.sender.role)).unwrap()
}

fn run(session: &str, prompt: &str) -> JobRun {
    JobRun {
        seq: 0,
        job: "j1".into(),
        session: session.into(),
        workspace: PathBuf::from("/ws"),
        due: "2026-11-23T09:00:00Z".parse().unwrap(),
        prompt: prompt.into(),
        creator: Authority {
            role: Role::Guest,
            senders: Vec::new(),
        },
        interrupted: false,
        deliver_to: None,
        subagent: None,
        reports: None,
    }
}

async fn journal(inbox: &Inbox, session: &str, prompt: &str) -> u64 {
    let mut run = run(session, prompt);
    let seq = inbox.scheduled(&mut run).await.unwrap();
    assert_eq!(run.seq, seq);
    seq
}

#[tokio::test]
async fn an_interrupted_run_resumes_once_then_is_given_up_with_a_notice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let never_started = journal(&inbox, "telegram:42", "later").await;
    let interrupted = journal(&inbox, "telegram:42", "remind").await;
    let command = journal(&inbox, "telegram:42", ",bash echo hi").await;
    let chatless = journal(&inbox, "cli", "tidy up").await;
    inbox.started(&[interrupted, command, chatless]).await;
    drop(inbox);

    let (inbox, resume) = open(&path);
    let runs: Vec<(u64, bool)> = resume
        .iter()
        .filter_map(|r| match r {
            Resume::Job(run) => Some((run.seq, run.interrupted)),
            _ => None,
        })
        .collect();
    assert_eq!(
        runs,
        [
            (never_started, false),
            (interrupted, true),
            (chatless, true)
        ]
    );
    let Resume::Job(resumed) = &resume[1] else {
        panic!("{resume:?}")
    };
    assert_eq!(
        resumed,
        &JobRun {
            seq: interrupted,
            interrupted: true,
            ..run("telegram:42", "remind")
        }
    );
    let notices: Vec<&Delivery> = resume
        .iter()
        .filter_map(|r| match r {
            Resume::Deliver(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(notices.len(), 1, "the command is not run again");
    assert_eq!(notices[0].seqs, [command]);
    assert!(
        notices[0].out.text.contains("was not run again"),
        "{notices:?}"
    );

    // `interrupted` and `chatless` interrupted a second time: given up, the chat told (a
    // session without one is not); `never_started` was interrupted once: it runs again.
    inbox.started(&[never_started, interrupted, chatless]).await;
    drop(inbox);
    let (_, resume) = open(&path);
    let left: Vec<(u64, &str)> = resume
        .iter()
        .map(|r| match r {
            Resume::Job(run) if run.interrupted => (run.seq, "run again"),
            Resume::Deliver(d) => (d.seqs[0], "notice"),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        left,
        [
            (never_started, "run again"),
            (interrupted, "notice"),
            (command, "notice")
        ]
    );
}

#[tokio::test]
async fn a_recorded_answer_is_delivered_from_its_first_part_not_sent_and_never_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let seq = journal(&inbox, "telegram:42", "remind").await;
    let finished = journal(&inbox, "telegram:42", "remind again").await;
    inbox.started(&[seq]).await;
    let answer = Delivery {
        channel: "telegram".into(),
        seqs: vec![seq],
        out: Outbound {
            chat_id: "42".into(),
            text: "part one\n\npart two".into(),
            reply_to: None,
            file: None,
            edit: None,
        },
        parts_sent: 0,
    };
    inbox.answered(&answer).await;
    inbox.sent(&[seq], 1).await;
    inbox.started(&[finished]).await;
    inbox.done(&[finished], Outcome::Sent).await;
    drop(inbox);

    // Twice: the first open compacts the journal, the second reads the compacted one.
    for _ in 0..2 {
        let (inbox, resume) = open(&path);
        assert_eq!(
            resume,
            [Resume::Deliver(Delivery {
                parts_sent: 1,
                ..answer.clone()
            })]
        );
        assert_eq!(inbox.pending(), 1);
    }
    let (inbox, _) = open(&path);
    inbox.done(&[seq], Outcome::Sent).await;
    drop(inbox);
    assert!(open(&path).1.is_empty());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        !text.contains("\"op\":\"job\""),
        "finished runs are compacted away: {text}"
    );
}

/// A background subagent's run of `parent`.
fn subagent_run(parent: &str) -> JobRun {
    JobRun {
        job: "subagent-1".into(),
        subagent: Some(Subtask {
            parent: parent.into(),
            tools: None,
            skills: Vec::new(),
            model: None,
        }),
        ..run("subagent-1", ",looks like a command")
    }
}

#[tokio::test]
async fn the_report_of_a_subagent_closes_its_run_in_the_same_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let mut child = subagent_run("telegram:42");
    let child_seq = inbox.scheduled(&mut child).await.unwrap();
    inbox.started(&[child_seq]).await;
    let mut report = JobRun {
        reports: Some(child_seq),
        ..run("telegram:42", "[Background subagent subagent-1 finished …]")
    };
    let report_seq = inbox.scheduled(&mut report).await.unwrap();
    assert_eq!(inbox.pending(), 1, "the report alone");
    drop(inbox);

    // Killed before the report's turn: the report runs, the subagent does not run again.
    let (_, resume) = open(&path);
    let runs: Vec<u64> = resume
        .iter()
        .map(|r| match r {
            Resume::Job(run) => run.seq,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(runs, [report_seq]);
}

#[tokio::test]
async fn a_subagent_interrupted_twice_is_given_up_with_a_notice_to_its_parents_chat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inbox.jsonl");
    let (inbox, _) = open(&path);
    let mut child = subagent_run("telegram:42");
    let seq = inbox.scheduled(&mut child).await.unwrap();
    inbox.started(&[seq]).await;
    drop(inbox);
    let (inbox, resume) = open(&path);
    let [Resume::Job(again)] = &resume[..] else {
        panic!("a subagent's task is not a command: {resume:?}")
    };
    assert!(again.interrupted);
    inbox.started(&[seq]).await;
    drop(inbox);
    let (_, resume) = open(&path);
    let [Resume::Deliver(notice)] = &resume[..] else {
        panic!("{resume:?}")
    };
    assert_eq!(
        (notice.channel.as_str(), notice.out.chat_id.as_str()),
        ("telegram", "42")
    );
    assert!(notice.out.text.contains("subagent-1"), "{notice:?}");
}
