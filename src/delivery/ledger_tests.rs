//! A turn's sends on the ledger: what its run after a restart sends again, and what not.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::access::{Access, Role};
use crate::channels::{Channel, InboundSink, MessageId, Part};
use crate::chat::{Inbound, Sender};
use crate::config::Settings;
use crate::inbox::Received;

/// A channel that records what it sends (messages of at most 10 characters), refusing every
/// send once it accepted `accepting` of them.
pub(crate) struct Recorder {
    pub sent: std::sync::Mutex<Vec<Outbound>>,
    pub accepting: AtomicUsize,
}

impl Recorder {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            sent: Default::default(),
            accepting: AtomicUsize::new(usize::MAX),
        })
    }

    pub(crate) fn texts(&self) -> Vec<String> {
        let sent = self.sent.lock().unwrap();
        sent.iter().map(|o| o.text.clone()).collect()
    }
}

#[async_trait]
impl Channel for Recorder {
    fn name(&self) -> &'static str {
        "telegram"
    }
    async fn run(&self, _: InboundSink, _: CancellationToken) -> anyhow::Result<()> {
        Ok(())
    }
    async fn send_part(&self, part: &Part) -> anyhow::Result<Option<MessageId>> {
        let left = self.accepting.load(Ordering::SeqCst);
        if left == 0 {
            anyhow::bail!("telegram: 502 Bad Gateway");
        }
        self.accepting
            .store(left.saturating_sub(1), Ordering::SeqCst);
        self.sent.lock().unwrap().push(sent(part));
        Ok(None)
    }
    fn message_limit(&self) -> usize {
        10
    }
    async fn check_recipient(&self, chat_id: &str) -> anyhow::Result<()> {
        match chat_id {
            "666" => anyhow::bail!("refused: telegram chat 666 is not in BUB_TELEGRAM_ALLOW_CHATS"),
            _ => Ok(()),
        }
    }
}

/// What a fake channel records of a part it sent, as the message it was.
pub(crate) fn sent(part: &Part) -> Outbound {
    Outbound {
        chat_id: part.chat.0.clone(),
        text: part.text.clone(),
        reply_to: part.reply_to.as_ref().map(|id| id.0.clone()),
        file: part.file.clone(),
        edit: None,
    }
}

/// An outbox whose `telegram` is `channel`, on settings with a temp home.
pub(crate) fn outbox(channel: &Arc<Recorder>, home: &std::path::Path) -> Outbox {
    let settings = Settings::with_defaults(home.to_path_buf(), home.to_path_buf());
    let outbox = Outbox::new(Arc::new(Access::new(&settings)), Arc::new(settings));
    outbox.install(&[channel.clone() as Arc<dyn Channel>]);
    outbox
}

pub(crate) fn to(chat: &str, text: &str) -> Outbound {
    Outbound {
        chat_id: chat.into(),
        text: text.into(),
        reply_to: None,
        file: None,
        edit: None,
    }
}

/// A journaled message of chat 42 (its sequence number).
async fn received(inbox: &Inbox, id: &str) -> u64 {
    let sender = Sender::new("42", None, Role::Owner);
    let mut m = Inbound {
        mentioned: true,
        ..Inbound::new("telegram", "42", id, sender, "hi")
    };
    match inbox.receive(&mut m, None).await.unwrap() {
        Received::New(seq) => seq,
        Received::Duplicate => panic!("duplicate"),
    }
}

#[tokio::test]
async fn a_turn_run_again_skips_what_was_accepted_and_sends_what_was_not() {
    let home = tempfile::tempdir().unwrap();
    let channel = Recorder::new();
    let outbox = outbox(&channel, home.path());
    let inbox = Arc::new(Inbox::memory());
    let seq = received(&inbox, "1").await;
    // The first attempt: "ping" twice to chat 7 (both sent: the same text twice is two sends),
    // then a report to chat 8 — and the restart comes before it is sent.
    let first = SendLedger::new(inbox.clone(), &[seq]).unwrap();
    for _ in 0..2 {
        let sent = first.send(&outbox, "telegram", &to("7", "ping")).await;
        assert_eq!(sent.unwrap(), Sent::Now);
    }
    channel.accepting.store(0, Ordering::SeqCst);
    let failed = first.send(&outbox, "telegram", &to("8", "report")).await;
    assert!(failed.is_err());
    assert_eq!(channel.texts(), ["ping", "ping"]);

    // The run after the restart (its messages, maybe with a newer one) makes the same sends
    // and one more "ping": the two accepted are not sent again, the rest are.
    channel.accepting.store(usize::MAX, Ordering::SeqCst);
    let again = SendLedger::new(inbox.clone(), &[seq, 99]).unwrap();
    let mut outcomes = Vec::new();
    for (chat, text) in [("7", "ping"), ("7", "ping"), ("8", "report"), ("7", "ping")] {
        outcomes.push(
            again
                .send(&outbox, "telegram", &to(chat, text))
                .await
                .unwrap(),
        );
    }
    assert_eq!(outcomes, [Sent::Before, Sent::Before, Sent::Now, Sent::Now]);
    assert_eq!(channel.texts(), ["ping", "ping", "report", "ping"]);
    // Another turn (other messages) sends its own "ping".
    let other = SendLedger::new(inbox.clone(), &[received(&inbox, "2").await]).unwrap();
    let sent = other.send(&outbox, "telegram", &to("7", "ping")).await;
    assert_eq!(sent.unwrap(), Sent::Now);
    // A turn of messages that were never journaled has no ledger.
    assert!(SendLedger::new(inbox, &[0]).is_none());
}

#[tokio::test]
async fn a_long_send_resumes_at_its_first_part_not_accepted() {
    let home = tempfile::tempdir().unwrap();
    let channel = Recorder::new();
    let outbox = outbox(&channel, home.path());
    let inbox = Arc::new(Inbox::memory());
    let seq = received(&inbox, "1").await;
    let long = to("7", "aaaa aaaa\n\nbbbb bbbb\n\ncccc cccc");
    channel.accepting.store(2, Ordering::SeqCst);
    let first = SendLedger::new(inbox.clone(), &[seq]).unwrap();
    assert!(first.send(&outbox, "telegram", &long).await.is_err());
    assert_eq!(channel.texts(), ["aaaa aaaa", "bbbb bbbb"]);

    channel.accepting.store(usize::MAX, Ordering::SeqCst);
    let again = SendLedger::new(inbox.clone(), &[seq]).unwrap();
    let sent = again.send(&outbox, "telegram", &long).await;
    assert_eq!(sent.unwrap(), Sent::Now);
    assert_eq!(channel.texts(), ["aaaa aaaa", "bbbb bbbb", "cccc cccc"]);
    let third = SendLedger::new(inbox, &[seq]).unwrap();
    let sent = third.send(&outbox, "telegram", &long).await;
    assert_eq!(sent.unwrap(), Sent::Before);
    assert_eq!(channel.texts().len(), 3);
}

#[tokio::test]
async fn a_refused_chat_is_refused_and_nothing_is_recorded() {
    let home = tempfile::tempdir().unwrap();
    let channel = Recorder::new();
    let outbox = outbox(&channel, home.path());
    let inbox = Arc::new(Inbox::memory());
    let seq = received(&inbox, "1").await;
    let ledger = SendLedger::new(inbox.clone(), &[seq]).unwrap();
    let refused = ledger.send(&outbox, "telegram", &to("666", "hi")).await;
    assert!(format!("{:#}", refused.unwrap_err()).contains("not in BUB_TELEGRAM_ALLOW_CHATS"));
    assert!(channel.texts().is_empty());
    let key = SendLedger::new(inbox.clone(), &[seq])
        .unwrap()
        .key("telegram", &to("666", "hi"));
    assert_eq!(inbox.send_progress(&[seq], &key), None);
}

#[test]
fn keys_tell_destinations_contents_and_repeats_apart() {
    let inbox = Arc::new(Inbox::memory());
    let ledger = SendLedger::new(inbox.clone(), &[1]).unwrap();
    let mut replying = to("7", "hi");
    replying.reply_to = Some("5".into());
    let mut with_file = to("7", "hi");
    with_file.file = Some("report.pdf".into());
    let keys = [
        ledger.key("telegram", &to("7", "hi")),
        ledger.key("telegram", &to("7", "hi")),
        ledger.key("discord", &to("7", "hi")),
        ledger.key("telegram", &to("8", "hi")),
        ledger.key("telegram", &replying),
        ledger.key("telegram", &with_file),
        ledger.key("telegram", &to("7", "hi!")),
        // A field's end moved into the next one: still another send.
        ledger.key("telegram", &to("7h", "i")),
    ];
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "{keys:?}");
    // The same sends in the same order: the same keys (a turn run again finds them).
    let again = SendLedger::new(inbox, &[1]).unwrap();
    assert_eq!(again.key("telegram", &to("7", "hi")), keys[0]);
    assert_eq!(again.key("telegram", &to("7", "hi")), keys[1]);
}
