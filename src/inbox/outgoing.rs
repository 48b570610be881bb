//! What a turn sent besides its answer, recorded with the messages it answers, so that a
//! restart that runs their turn again neither loses nor repeats it:
//!
//! * **A `message.send` of the turn**: recorded under a key (its destination, its content and
//!   how many identical sends came before it in the turn — `delivery::ledger` makes it) before
//!   the platform is asked ([`Inbox::sending`]), after each part accepted but the last
//!   ([`Inbox::send_part`]) and once accepted whole ([`Inbox::send_done`]). The resumed turn's
//!   identical send asks [`Inbox::send_progress`]: accepted whole — not sent again; recorded,
//!   not accepted — sent from its first part not accepted.
//! * **The live message of a streamed answer**: its id, recorded as soon as it is posted
//!   ([`Inbox::live`]), so that the resumed turn edits it ([`Inbox::live_message`]) and a
//!   give-up notice replaces it, instead of a second message beside a stale partial one.
//!
//! Invariants: these records belong to pending messages — a record about messages that are no
//! longer pending is ignored, and they go with the messages' `done` (so the map is bounded by
//! the pending messages); at most [`MAX_SENDS`] sends are remembered per message (a turn that
//! sends more leaves the rest unrecorded: a restart may repeat those). The content of a send is
//! never journaled, only its key.

use super::journal::Record;
use super::{Inbox, State};

/// The most sends remembered per pending message.
pub(crate) const MAX_SENDS: usize = 64;

/// How far an earlier attempt of a turn got with one send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendProgress {
    /// Parts the platform accepted (`delivery::send_from` resumes after them).
    pub parts: usize,
    /// The platform accepted all of it.
    pub done: bool,
}

/// What a pending message's turn sent besides its answer.
#[derive(Debug, Clone, Default)]
pub(super) struct Outgoing {
    /// The id of the live message showing its answer as it was written.
    pub live: Option<String>,
    pub sends: Vec<RecordedSend>,
}

/// One recorded send.
#[derive(Debug, Clone)]
pub(super) struct RecordedSend {
    pub key: String,
    /// `channel:chat` (for the reader of the journal).
    pub to: String,
    pub progress: SendProgress,
}

impl Inbox {
    /// How far an earlier attempt of these messages' turn got with the send `key` (`None`: it
    /// did not try it).
    pub(crate) fn send_progress(&self, seqs: &[u64], key: &str) -> Option<SendProgress> {
        let inner = self.lock();
        seqs.iter()
            .filter_map(|seq| inner.state.outgoing.get(seq))
            .flat_map(|o| &o.sends)
            .find(|s| s.key == key)
            .map(|s| s.progress)
    }

    /// The turn of these messages is about to send `key` to `to` (`channel:chat`).
    pub(crate) async fn sending(&self, seqs: &[u64], key: &str, to: &str) {
        self.record(Record::Send {
            seqs: super::journaled(seqs),
            key: key.to_owned(),
            to: to.to_owned(),
            parts: 0,
            done: false,
        })
        .await;
    }

    /// The platform accepted the first `parts` parts of the send `key`.
    pub(crate) async fn send_part(&self, seqs: &[u64], key: &str, parts: usize) {
        self.record(Record::SendPart {
            seqs: super::journaled(seqs),
            key: key.to_owned(),
            parts,
        })
        .await;
    }

    /// The platform accepted all of the send `key`.
    pub(crate) async fn send_done(&self, seqs: &[u64], key: &str) {
        self.record(Record::SendDone {
            seqs: super::journaled(seqs),
            key: key.to_owned(),
        })
        .await;
    }

    /// The live message `id` shows the answer of these messages' turn.
    pub(crate) async fn live(&self, seqs: &[u64], id: &str) {
        self.record(Record::Live {
            seqs: super::journaled(seqs),
            id: id.to_owned(),
        })
        .await;
    }

    /// The live message an earlier attempt of these messages' turn posted, if any.
    pub(crate) fn live_message(&self, seqs: &[u64]) -> Option<String> {
        let inner = self.lock();
        seqs.iter()
            .filter_map(|seq| inner.state.outgoing.get(seq))
            .find_map(|o| o.live.clone())
    }
}

impl State {
    /// A received message or a job's due run still between its first record and `done`.
    fn is_open(&self, seq: u64) -> bool {
        self.pending.contains_key(&seq) || self.jobs.contains_key(&seq)
    }

    /// Applies a record of [`Outgoing`] (`send`, `send_part`, `send_done`, `live`).
    pub(super) fn apply_outgoing(&mut self, record: Record) {
        let seqs = record.seqs().to_vec();
        for seq in seqs {
            if !self.is_open(seq) {
                continue;
            }
            let out = self.outgoing.entry(seq).or_default();
            match &record {
                Record::Live { id, .. } => out.live = Some(id.clone()),
                Record::Send {
                    key,
                    to,
                    parts,
                    done,
                    ..
                } => {
                    let progress = SendProgress {
                        parts: *parts,
                        done: *done,
                    };
                    if let Some(send) = out.sends.iter_mut().find(|s| s.key == *key) {
                        send.progress = progress;
                    } else if out.sends.len() < MAX_SENDS {
                        out.sends.push(RecordedSend {
                            key: key.clone(),
                            to: to.clone(),
                            progress,
                        });
                    }
                }
                Record::SendPart { key, parts, .. } => {
                    if let Some(send) = out.sends.iter_mut().find(|s| s.key == *key) {
                        send.progress.parts = send.progress.parts.max(*parts);
                    }
                }
                Record::SendDone { key, .. } => {
                    if let Some(send) = out.sends.iter_mut().find(|s| s.key == *key) {
                        send.progress.done = true;
                    }
                }
                _ => {}
            }
        }
    }

    /// The records that describe [`Outgoing`] in a compacted journal, each message's own.
    pub(super) fn outgoing_records(&self) -> Vec<Record> {
        let mut seqs: Vec<&u64> = self
            .outgoing
            .keys()
            .filter(|seq| self.is_open(**seq))
            .collect();
        seqs.sort_unstable();
        let mut records = Vec::new();
        for seq in seqs {
            let out = &self.outgoing[seq];
            if let Some(id) = &out.live {
                records.push(Record::Live {
                    seqs: vec![*seq],
                    id: id.clone(),
                });
            }
            records.extend(out.sends.iter().map(|s| Record::Send {
                seqs: vec![*seq],
                key: s.key.clone(),
                to: s.to.clone(),
                parts: s.progress.parts,
                done: s.progress.done,
            }));
        }
        records
    }
}

#[cfg(test)]
#[path = "outgoing_tests.rs"]
mod tests;
