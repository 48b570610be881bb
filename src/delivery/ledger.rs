//! The ledger of one turn's sends (`message.send`): each send is recorded in the inbox with the
//! messages the turn answers — before the platform is asked, after each part it accepted, and
//! once it accepted all of it — so that the turn, run again after a restart, neither repeats a
//! send the platform accepted nor loses one it did not (`inbox::outgoing`).
//!
//! A send is known by its key: a digest of its destination (channel, chat), its content (text,
//! file path, the message it replies to) and how many identical sends the turn made before it.
//! So a turn that sends the same text twice sends it twice, and its run after a restart skips as
//! many of them as the platform had accepted. The content itself is not journaled.
//!
//! Only a turn whose messages are journaled has a ledger (the daemon's chat turns); `bub run`
//! and `bub chat` send as they always did.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use md5::{Digest, Md5};

use super::{Outbound, Outbox};
use crate::inbox::Inbox;

/// The sends of one turn, recorded with the messages it answers.
pub struct SendLedger {
    inbox: Arc<Inbox>,
    seqs: Vec<u64>,
    /// How many sends of each content (its digest) the turn made so far.
    made: Mutex<HashMap<[u8; 16], u32>>,
}

/// What became of a send made through a [`SendLedger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The platform accepted it now.
    Now,
    /// An earlier attempt of the turn, before a restart, had sent it: not sent again.
    Before,
}

impl SendLedger {
    /// The ledger of a turn answering the journaled messages `seqs` (`None` when none is
    /// journaled: nothing to record the sends with).
    pub fn new(inbox: Arc<Inbox>, seqs: &[u64]) -> Option<Self> {
        let seqs: Vec<u64> = seqs.iter().copied().filter(|s| *s > 0).collect();
        (!seqs.is_empty()).then(|| Self {
            inbox,
            seqs,
            made: Mutex::default(),
        })
    }

    /// Sends `out` through channel `name` (checked against its allow-list like every outbox
    /// send) unless an earlier attempt of the turn sent it; one it began sends from its first
    /// part the platform did not accept.
    pub(crate) async fn send(
        &self,
        outbox: &Outbox,
        name: &str,
        out: &Outbound,
    ) -> anyhow::Result<Sent> {
        let adapter = outbox.checked(name, &out.chat_id).await?;
        let key = self.key(name, out);
        let (inbox, seqs) = (&self.inbox, self.seqs.as_slice());
        let from = match inbox.send_progress(seqs, &key) {
            Some(p) if p.done => {
                tracing::info!(channel = name, chat_id = %out.chat_id, %key,
                    "ledger.send.skipped: accepted before a restart");
                return Ok(Sent::Before);
            }
            Some(p) => p.parts,
            None => {
                inbox
                    .sending(seqs, &key, &format!("{name}:{}", out.chat_id))
                    .await;
                0
            }
        };
        let key_ref = &key;
        let mut accepted = |parts| Box::pin(inbox.send_part(seqs, key_ref, parts)) as _;
        super::send_from(adapter.as_ref(), outbox.home(), out, from, &mut accepted).await?;
        inbox.send_done(seqs, &key).await;
        Ok(Sent::Now)
    }

    /// The key of `out` to `channel`: its content's digest and how many times the turn sent
    /// that content before (counted here).
    fn key(&self, channel: &str, out: &Outbound) -> String {
        let content = digest(channel, out);
        let n = {
            let mut made = self.made.lock().expect("ledger lock");
            let n = made.entry(content).or_default();
            *n += 1;
            *n
        };
        let mut hasher = Md5::new();
        hasher.update(content);
        hasher.update(n.to_le_bytes());
        hex(&hasher.finalize())
    }
}

/// The digest of a send's destination and content (also `bub send --id`'s, [`super::once`]);
/// each field length-prefixed, so no two different sends hash the same bytes.
pub(super) fn digest(channel: &str, out: &Outbound) -> [u8; 16] {
    let file = out.file.as_ref().map(|f| f.to_string_lossy().into_owned());
    let mut hasher = Md5::new();
    for field in [
        Some(channel),
        Some(out.chat_id.as_str()),
        out.reply_to.as_deref(),
        file.as_deref(),
        Some(out.text.as_str()),
    ] {
        match field {
            Some(text) => {
                hasher.update([1]);
                hasher.update((text.len() as u64).to_le_bytes());
                hasher.update(text.as_bytes());
            }
            None => hasher.update([0]),
        }
    }
    hasher.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
pub(crate) mod tests;
