//! The inbox journal's line format: one JSON record per line, tagged by `op`.
//!
//! ```text
//! {"op":"recv","seq":7,"cursor":1042,"msg":{"channel":"telegram","chat_id":"42","sender":{...},"content":{"text":"hi"},...}}
//! {"op":"start","seqs":[7,8]}
//! {"op":"answer","channel":"telegram","seqs":[7,8],"out":{"chat_id":"42","text":"...","reply_to":null}}
//! {"op":"sent","seqs":[7,8],"parts":2}       (the platform accepted the answer's first 2 parts)
//! {"op":"done","seqs":[7,8],"outcome":"sent"}
//! {"op":"live","seqs":[7,8],"id":"1001"}     (the turn's live message, once posted)
//! {"op":"send","seqs":[7,8],"key":"9f…","to":"telegram:7"}   (a message.send, before it is sent)
//! {"op":"send_part","seqs":[7,8],"key":"9f…","parts":1}  {"op":"send_done","seqs":[7,8],"key":"9f…"}
//! {"op":"job","seq":9,"run":{"job":"1a2b","session":"telegram:42","due":"...","prompt":"...","creator":{...}}}
//! {"op":"version","v":3}  {"op":"next","seq":8}  {"op":"cursor",...}  {"op":"seen",...}
//!                                                                     (written by compaction)
//! ```
//!
//! Compaction writes an answer's progress into it (`"parts_sent":2`); an `answer` without it
//! (an older journal) is delivered whole. It writes a send's progress into its `send` record
//! (`"parts":1`, `"done":true`).
//!
//! Versions: 1 had no `version` line and no `live`/`send*`/`job` records; 2 starts every
//! compacted journal with `{"op":"version","v":2}`; 3 (this one) journals a received message
//! typed — sender, content, attachments, the quoted message, the chat (`chat::Inbound`) —
//! where 1 and 2 kept its text (`"prompt"`: a comma command, or the platform's metadata JSON);
//! an older journal is upgraded once, at open (`legacy`), and rewritten. An older Bub skips the
//! lines it does not understand, so it reads a newer journal too (without what those lines
//! say: a version-3 `recv` is one of them).
//!
//! A scheduled job's due run is a `job` record, numbered like a received message; the records
//! after it (`start`, `answer`, `sent`, `done`) are the messages' own. The other records are
//! unchanged, so a journal written before `job` records existed is read as it was (an older
//! Bub skips a `job` line as one it does not understand).
//!
//! Reading is tolerant: a torn last line (a crash mid-write) or a line this version does not
//! understand is skipped and logged, never fatal.

use serde::{Deserialize, Serialize};

use super::{Delivery, JobRun, Outcome, State};
use crate::chat::Inbound;

/// The version of the journal this Bub writes (see the module docs).
pub(super) const VERSION: u32 = 3;

/// One journal line.
// A line is decoded, used and dropped: its size is not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(super) enum Record {
    Recv {
        seq: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cursor: Option<u64>,
        /// Typed; before version 3 with its text (upgraded at open: `super::legacy`).
        msg: Inbound,
    },
    Start {
        seqs: Vec<u64>,
    },
    Answer(Delivery),
    /// A scheduled job's due run, journaled before its turn.
    Job {
        seq: u64,
        run: JobRun,
    },
    Sent {
        seqs: Vec<u64>,
        parts: usize,
    },
    Done {
        seqs: Vec<u64>,
        outcome: Outcome,
    },
    Seen {
        channel: String,
        chat: String,
        id: u64,
    },
    Cursor {
        channel: String,
        at: u64,
    },
    Next {
        seq: u64,
    },
    /// The format of the records after it (written first by compaction).
    Version {
        v: u32,
    },
    /// The live message of the messages' turn (`inbox::outgoing`).
    Live {
        seqs: Vec<u64>,
        id: String,
    },
    /// A send of the messages' turn, before the platform is asked; compaction writes its
    /// progress into it.
    Send {
        seqs: Vec<u64>,
        key: String,
        to: String,
        #[serde(default, skip_serializing_if = "super::is_zero")]
        parts: usize,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        done: bool,
    },
    /// The platform accepted the first `parts` parts of a send.
    SendPart {
        seqs: Vec<u64>,
        key: String,
        parts: usize,
    },
    /// The platform accepted all of a send.
    SendDone {
        seqs: Vec<u64>,
        key: String,
    },
}

impl Record {
    /// The messages a progress record is about (empty for the others).
    pub(super) fn seqs(&self) -> &[u64] {
        match self {
            Record::Start { seqs } | Record::Sent { seqs, .. } | Record::Done { seqs, .. } => seqs,
            Record::Live { seqs, .. }
            | Record::Send { seqs, .. }
            | Record::SendPart { seqs, .. }
            | Record::SendDone { seqs, .. } => seqs,
            Record::Answer(d) => &d.seqs,
            _ => &[],
        }
    }
}

/// The records of a journal file, skipping lines that do not parse.
pub(super) fn parse(text: &[u8]) -> impl Iterator<Item = Record> + '_ {
    text.split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, line)| !line.iter().all(u8::is_ascii_whitespace))
        .filter_map(|(n, line)| match serde_json::from_slice(line) {
            Ok(record) => Some(record),
            Err(e) => {
                tracing::warn!(line = n + 1, error = %e, "inbox.journal.skip");
                None
            }
        })
}

/// The journal that describes `state` and nothing else: counters, cursors, the chats' last
/// ids, and each pending message with its progress.
pub(super) fn snapshot(state: &State) -> String {
    let mut records = vec![
        Record::Version { v: VERSION },
        Record::Next {
            seq: state.next_seq,
        },
    ];
    records.extend(state.cursors.iter().map(|(channel, at)| Record::Cursor {
        channel: channel.clone(),
        at: *at,
    }));
    let mut seen: Vec<_> = state.seen.iter().collect();
    seen.sort_unstable_by_key(|(_, (_, tick))| *tick);
    records.extend(
        seen.into_iter()
            .map(|((channel, chat), (id, _))| Record::Seen {
                channel: channel.clone(),
                chat: chat.clone(),
                id: *id,
            }),
    );
    for (seq, p) in &state.pending {
        records.push(Record::Recv {
            seq: *seq,
            cursor: None,
            msg: p.msg.clone(),
        });
        records.extend((0..p.attempts).map(|_| Record::Start { seqs: vec![*seq] }));
    }
    for (seq, p) in &state.jobs {
        records.push(Record::Job {
            seq: *seq,
            run: p.run.clone(),
        });
        records.extend((0..p.attempts).map(|_| Record::Start { seqs: vec![*seq] }));
    }
    // Answers after all their messages, once each.
    for (seq, p) in &state.pending {
        if let Some(answer) = p.answer.as_ref().filter(|a| a.seqs.first() == Some(seq)) {
            records.push(Record::Answer(answer.clone()));
        }
    }
    records.extend(
        state
            .jobs
            .values()
            .filter_map(|p| p.answer.clone().map(Record::Answer)),
    );
    records.extend(state.outgoing_records());
    let mut body = String::new();
    for record in records {
        if let Ok(line) = serde_json::to_string(&record) {
            body.push_str(&line);
            body.push('\n');
        }
    }
    body
}
