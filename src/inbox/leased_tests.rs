//! The inbox shared by replicas, on a real PostgreSQL: two inboxes on one database stand for two
//! replicas (each with its own lease connection). A chat is handed to one of them; when that
//! one dies (its inbox dropped, its connection closed), the other takes the chat over by the
//! restart rule — a recorded answer delivered, an interrupted turn run once more, a twice
//! interrupted one given up with a notice — and a copy of a stored message is a duplicate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::access::Role;
use crate::chat::{Outbound, Sender};
use crate::db::Database;
use crate::inbox::{Delivery, Outcome, Received};

fn msg(chat: &str, id: &str, text: &str) -> Inbound {
    let sender = Sender::new("7", None, Role::Owner);
    Inbound {
        mentioned: true,
        ..Inbound::new("telegram", chat, id, sender, text)
    }
}

async fn replica(db: &Arc<Database>) -> Inbox {
    Inbox::shared(
        db.clone(),
        Arc::new(|m: &Inbound| Box::pin(std::future::ready(Some(m.sender.role)))),
    )
    .await
    .unwrap()
}

async fn receive(inbox: &Inbox, m: &Inbound) -> u64 {
    match inbox.receive(&mut m.clone(), Some(1)).await.unwrap() {
        Received::New(seq) => seq,
        Received::Duplicate => panic!("duplicate"),
    }
}

/// Sweeps until `inbox` found work (a dead replica's locks are freed as soon as the server
/// sees its connection close); panics after 10 s.
async fn sweep_until_work(inbox: &Inbox) -> Vec<Resume> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let work = inbox.sweep().await.unwrap();
        if !work.is_empty() {
            return work;
        }
        assert!(Instant::now() < deadline, "no work was taken over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_replicas_chats_are_taken_over_by_the_restart_rule() {
    let db = Database::shared(&crate::db::cluster::database()).unwrap();
    db.migrate().await.unwrap();
    let (a, b) = (replica(&db).await, replica(&db).await);
    let chat1 = SessionId::chat_of("telegram", "1");
    let chat2 = SessionId::chat_of("telegram", "2");

    // A takes both chats: one turn interrupted, one answered but not sent.
    let first = msg("1", "10", "hello");
    let seq1 = receive(&a, &first).await;
    let copy = a.receive(&mut first.clone(), Some(1)).await.unwrap();
    assert_eq!(copy, Received::Duplicate, "stored once");
    assert!(matches!(
        a.pull(&chat1).await.unwrap()[..],
        [Resume::Received(_)]
    ));
    assert!(b.pull(&chat1).await.unwrap().is_empty(), "A holds the chat");
    a.started(&[seq1]).await;
    let seq2 = receive(&b, &msg("2", "20", "hi")).await;
    assert!(matches!(
        a.pull(&chat2).await.unwrap()[..],
        [Resume::Received(_)]
    ));
    a.started(&[seq2]).await;
    let answer = Delivery {
        channel: "telegram".into(),
        seqs: vec![seq2],
        out: Outbound {
            chat_id: "2".into(),
            text: "hi there".into(),
            reply_to: None,
            file: None,
            edit: None,
        },
        parts_sent: 0,
    };
    a.answered(&answer).await;
    assert_eq!(a.leases(), 2);

    // A dies: B resumes both chats.
    drop(a);
    let mut work = sweep_until_work(&b).await;
    if work.len() < 2 {
        work.extend(sweep_until_work(&b).await);
    }
    let resumed = work.iter().find_map(|w| match w {
        Resume::Message(m) => Some(m),
        _ => None,
    });
    let resumed = resumed.expect("the interrupted turn runs again");
    assert_eq!((resumed.seq, resumed.interrupted), (seq1, true));
    assert!(work.contains(&Resume::Deliver(answer)), "{work:?}");

    // B is interrupted too: the next replica gives the message up, with a notice.
    b.started(&[seq1]).await;
    drop(b);
    let c = replica(&db).await;
    let work = sweep_until_work(&c).await;
    let notice = work.iter().find_map(|w| match w {
        Resume::Deliver(d) if d.seqs == [seq1] => Some(d),
        _ => None,
    });
    let notice = notice.expect("a notice for the message given up");
    assert!(notice.out.text.contains("interrupted twice"), "{notice:?}");
    c.done(&notice.seqs, Outcome::GaveUp).await;
    c.done(&[seq2], Outcome::Sent).await;
    assert_eq!(c.pending(), 0);
    assert!(!c.release(&chat1).await.unwrap(), "nothing left for chat 1");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sender_revoked_meanwhile_is_not_answered_by_the_replica_taking_over() {
    let db = Database::shared(&crate::db::cluster::database()).unwrap();
    db.migrate().await.unwrap();
    let a = replica(&db).await;
    let chat = SessionId::chat_of("telegram", "3");
    let seq = receive(&a, &msg("3", "30", "hello")).await;
    assert!(matches!(
        a.pull(&chat).await.unwrap()[..],
        [Resume::Received(_)]
    ));
    a.started(&[seq]).await;
    drop(a);
    let revoked = Inbox::shared(
        db.clone(),
        Arc::new(|_: &Inbound| Box::pin(std::future::ready(None))),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while revoked.leases() == 0 {
        assert!(revoked.sweep().await.unwrap().is_empty(), "nothing to run");
        assert!(Instant::now() < deadline, "the chat was not taken over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(revoked.pending(), 0, "refused, not resumed");
    assert!(
        !revoked.release(&chat).await.unwrap(),
        "done in the database too"
    );
}
