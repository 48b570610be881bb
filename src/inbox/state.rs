//! The inbox's state as the journal's records build it: what each record changes
//! ([`State::apply`]) and, after a restart, what is left to do ([`plan`]: answers to deliver,
//! turns to run again once, messages given up with a notice).

use super::*;

impl State {
    /// Notes a message's platform position — the cursor, or (a platform without a replay
    /// cursor: Discord's catch-up) the chat's newest id — without taking it as pending work.
    pub(super) fn position(&mut self, msg: &Inbound, cursor: Option<u64>) {
        match cursor {
            Some(at) => {
                let cursor = self.cursors.entry(msg.channel.clone()).or_default();
                *cursor = (*cursor).max(at);
            }
            None => {
                if let Ok(id) = msg.message_id.parse::<u64>() {
                    self.saw(&msg.channel, &msg.chat_id, id);
                }
            }
        }
    }

    /// Applies one record (while reading the journal, and after each append).
    pub(super) fn apply(&mut self, record: Record) {
        match record {
            Record::Recv { seq, cursor, msg } => {
                self.next_seq = self.next_seq.max(seq);
                self.position(&msg, cursor);
                self.remember(&msg);
                self.pending.insert(
                    seq,
                    Pending {
                        msg,
                        attempts: 0,
                        answer: None,
                    },
                );
            }
            Record::Job { seq, run } => {
                self.next_seq = self.next_seq.max(seq);
                if let Some(child) = run.reports {
                    // The subagent's answer is handed on: its run is done.
                    self.jobs.remove(&child);
                    self.outgoing.remove(&child);
                }
                let pending = job::PendingJob {
                    run,
                    attempts: 0,
                    answer: None,
                };
                self.jobs.insert(seq, pending);
            }
            Record::Start { seqs } => {
                for seq in seqs {
                    if let Some((attempts, _)) = self.progress(seq) {
                        *attempts += 1;
                    }
                }
            }
            Record::Answer(delivery) => {
                for seq in &delivery.seqs {
                    if let Some((_, answer)) = self.progress(*seq) {
                        *answer = Some(delivery.clone());
                    }
                }
            }
            Record::Sent { seqs, parts } => {
                for seq in seqs {
                    if let Some((_, Some(answer))) = self.progress(seq) {
                        answer.parts_sent = answer.parts_sent.max(parts);
                    }
                }
            }
            Record::Done { seqs, .. } => {
                for seq in seqs {
                    self.pending.remove(&seq);
                    self.jobs.remove(&seq);
                    self.outgoing.remove(&seq);
                }
            }
            Record::Version { v } if v > journal::VERSION => {
                tracing::warn!(version = v, "inbox.journal.newer: written by a newer Bub");
            }
            Record::Version { .. } => {}
            record @ (Record::Live { .. }
            | Record::Send { .. }
            | Record::SendPart { .. }
            | Record::SendDone { .. }) => self.apply_outgoing(record),
            Record::Seen { channel, chat, id } => self.saw(&channel, &chat, id),
            Record::Cursor { channel, at } => {
                let cursor = self.cursors.entry(channel).or_default();
                *cursor = (*cursor).max(at);
            }
            Record::Next { seq } => self.next_seq = self.next_seq.max(seq),
        }
    }

    /// The attempts and the recorded answer of pending work `seq`: a message or a scheduled run.
    pub(super) fn progress(&mut self, seq: u64) -> Option<(&mut u32, &mut Option<Delivery>)> {
        if let Some(p) = self.pending.get_mut(&seq) {
            return Some((&mut p.attempts, &mut p.answer));
        }
        let run = self.jobs.get_mut(&seq)?;
        Some((&mut run.attempts, &mut run.answer))
    }

    pub(super) fn saw(&mut self, channel: &str, chat: &str, id: u64) {
        self.tick += 1;
        let entry = self
            .seen
            .entry((channel.to_owned(), chat.to_owned()))
            .or_default();
        entry.0 = entry.0.max(id);
        entry.1 = self.tick;
        if self.seen.len() > SEEN_CHATS {
            // Keep the most recently active half (amortised: once per SEEN_CHATS / 2 chats).
            let mut ticks: Vec<u64> = self.seen.values().map(|(_, t)| *t).collect();
            let cut = ticks.len() - SEEN_CHATS / 2;
            let (_, nth, _) = ticks.select_nth_unstable(cut);
            let keep_from = *nth;
            self.seen.retain(|_, (_, t)| *t >= keep_from);
        }
    }

    pub(super) fn remember(&mut self, msg: &Inbound) {
        let key = key_of(msg);
        if self.recent.insert(key) {
            self.recent_order.push_back(key);
        }
        while self.recent_order.len() > RECENT_KEYS {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent.remove(&old);
            }
        }
    }
}

/// A message's identity (channel, chat, platform message id) as a hash; a collision would
/// only make one message in ~2^64 look like a duplicate of a recent one.
pub(super) fn key_of(msg: &Inbound) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    SEED.get_or_init(Default::default)
        .hash_one((&msg.channel, &msg.chat_id, &msg.message_id))
}

/// Sequence numbers of journaled messages (0 = a message that never went through the inbox).
pub(super) fn journaled(seqs: &[u64]) -> Vec<u64> {
    seqs.iter().copied().filter(|s| *s > 0).collect()
}

/// The notice for a message that will not be handled again after a restart.
fn give_up_notice(seq: u64, msg: &Inbound) -> Delivery {
    let text = if msg.is_command() {
        let command: String = msg.text().trim().chars().take(80).collect();
        format!(
            "`{command}` was interrupted by a restart and was not run again. Send it again if it should run."
        )
    } else {
        "I was interrupted twice while answering your message and gave up. Please send it again."
            .to_owned()
    };
    Delivery {
        channel: msg.channel.clone(),
        seqs: vec![seq],
        out: Outbound {
            chat_id: msg.chat_id.clone(),
            text,
            reply_to: msg.reply.then(|| msg.message_id.clone()),
            file: None,
            edit: None,
        },
        parts_sent: 0,
    }
}

/// What to do with the pending work `resumed` selects after a restart (all of it) or when
/// a replica takes a chat's lease over (what another replica had taken): the work to hand on
/// — recorded answers to deliver, interrupted turns to run once more, the rest as usual — and
/// the records that settle what will not run: `done` for chat controls and senders no longer
/// admitted, an `answer` (a notice to the chat) for work interrupted too often. The caller
/// applies (and stores) those records before handing the work on. `admitted` re-checks each
/// message's sender; `None` drops it.
pub(super) fn plan(
    state: &mut State,
    resumed: &dyn Fn(u64) -> bool,
    admitted: &dyn Fn(&Inbound) -> Option<crate::access::Role>,
) -> (Vec<Resume>, Vec<Record>) {
    let mut resume = Vec::new();
    let mut gave_up = Vec::new();
    let mut refused = Vec::new();
    // Given-up messages of one chat share one notice.
    let mut notices: Vec<Delivery> = Vec::new();
    for (seq, p) in state.pending.iter_mut().filter(|(seq, _)| resumed(**seq)) {
        if let Some(answer) = &p.answer {
            if answer.seqs.first() == Some(seq) {
                resume.push(Resume::Deliver(answer.clone()));
            }
            continue;
        }
        if p.msg.control().is_some() {
            // `,stop` / `,status` answer the moment they were sent, not a later one.
            gave_up.push(*seq);
            continue;
        }
        let Some(role) = admitted(&p.msg) else {
            tracing::info!(session = %p.msg.session_id(), seq, "inbox.resume.refused");
            refused.push(*seq);
            continue;
        };
        p.msg.sender.role = role;
        p.msg.seq = *seq;
        let interrupted = p.attempts > 0;
        if interrupted && (p.attempts >= MAX_ATTEMPTS || p.msg.is_command()) {
            let mut notice = give_up_notice(*seq, &p.msg);
            // It replaces the live message the interrupted turn left, if any.
            let live = state.outgoing.get(seq).and_then(|o| o.live.clone());
            match notices
                .iter_mut()
                .find(|n| n.channel == notice.channel && n.out.chat_id == notice.out.chat_id)
            {
                Some(n) => {
                    n.seqs.push(*seq);
                    n.out.edit = n.out.edit.take().or(live);
                }
                None => {
                    notice.out.edit = live;
                    notices.push(notice);
                }
            }
            continue;
        }
        p.msg.interrupted = interrupted;
        resume.push(Resume::Message(Box::new(p.msg.clone())));
    }
    let mut settled = Vec::new();
    for (seqs, outcome) in [(gave_up, Outcome::GaveUp), (refused, Outcome::Refused)] {
        if !seqs.is_empty() {
            settled.push(Record::Done { seqs, outcome });
        }
    }
    for notice in notices {
        settled.push(Record::Answer(notice.clone()));
        resume.push(Resume::Deliver(notice));
    }
    job::resume(&mut state.jobs, resumed, &mut resume, &mut settled);
    (resume, settled)
}
