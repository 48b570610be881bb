//! Scheduled runs in the journal: a job's due run is journaled (a `job` record) before its turn
//! starts, and from there follows the messages' path — started, answered, sent part by part,
//! done — under a sequence number of the same series. A restart delivers a recorded answer
//! without running the job again, and runs an interrupted run again **once** (at most
//! `MAX_ATTEMPTS` starts, a comma command not again: it is not idempotent); a run given up
//! tells its chat, when its session has one.
//!
//! A background subagent's turn is such a run too ([`JobRun::subagent`], in a session of its
//! own). Its answer becomes a run of the parent session ([`JobRun::reports`]) whose `job`
//! record also closes the subagent's run: one write hands the answer on, so a restart neither
//! loses it nor reports it twice.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::journal::Record;
use super::{Delivery, MAX_ATTEMPTS, Outcome, Resume};
use crate::access::Authority;
use crate::chat::{Outbound, SessionId};

/// One due run of a scheduled job: everything its turn needs, so a restart can run it from the
/// journal alone (a one-shot job is gone from `jobs.json` by then).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRun {
    /// The run's sequence number in the inbox (0: not journaled).
    #[serde(skip)]
    pub seq: u64,
    /// The job's id.
    pub job: String,
    /// The session the job belongs to (`telegram:42`, `cli`).
    pub session: SessionId,
    /// The workspace the job was created in (its tapes); empty: the process's own.
    #[serde(default)]
    pub workspace: PathBuf,
    /// The due time this run is for.
    pub due: DateTime<Utc>,
    /// The turn's input: the job's message, introduced as a scheduled run.
    pub prompt: String,
    /// The rights the job was created with; checked again when its turn starts.
    pub creator: Authority,
    /// A previous attempt was interrupted by a restart (set when resumed).
    #[serde(skip)]
    pub interrupted: bool,
    /// The chat the answer goes to when it is not the session's own (the heartbeat's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_to: Option<SessionId>,
    /// The run is a background subagent's turn (`prompt`: its task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<Subtask>,
    /// The run hands the answer of the subagent run with this sequence number to its parent
    /// session; journaling it closes that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reports: Option<u64>,
}

/// What a background subagent was given besides its task: the session it answers to, and
/// its tools, skills and model (the parent's, or fewer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subtask {
    pub parent: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl JobRun {
    /// The job's message is a comma command (run as is, and not again after an interruption).
    pub fn is_command(&self) -> bool {
        self.subagent.is_none() && self.prompt.trim_start().starts_with(',')
    }

    /// The chat the run answers: `deliver_to`, else its session's (`None`: no chat).
    pub fn chat(&self) -> Option<(&str, &str)> {
        self.deliver_to.as_ref().unwrap_or(&self.session).chat()
    }

    /// `text` as the run's answer to its chat ([`JobRun::chat`]); `None` without one.
    pub fn delivery(&self, text: String) -> Option<Delivery> {
        Some(self.delivery_in(self.chat()?, text))
    }

    /// `text` as the run's message to `chat` (`channel`, `chat_id`).
    fn delivery_in(&self, (channel, chat_id): (&str, &str), text: String) -> Delivery {
        Delivery {
            channel: channel.to_owned(),
            seqs: vec![self.seq],
            out: Outbound {
                chat_id: chat_id.to_owned(),
                text,
                reply_to: None,
                file: None,
                edit: None,
            },
            parts_sent: 0,
        }
    }
}

/// A journaled run between its `job` and `done` records.
#[derive(Debug, Clone)]
pub(super) struct PendingJob {
    pub run: JobRun,
    pub attempts: u32,
    pub answer: Option<Delivery>,
}

/// What a restart does with the runs of `jobs` that `resumed` selects: a recorded answer is
/// delivered, an interrupted run runs again once (marked `interrupted`), one interrupted too
/// often (or an interrupted command) is given up — with a notice to its chat (an `answer`
/// record in `settled`), or without a chat a `done` one.
pub(super) fn resume(
    jobs: &mut BTreeMap<u64, PendingJob>,
    resumed: &dyn Fn(u64) -> bool,
    resume: &mut Vec<Resume>,
    settled: &mut Vec<Record>,
) {
    let mut dropped = Vec::new();
    for (seq, p) in jobs.iter_mut().filter(|(seq, _)| resumed(**seq)) {
        if let Some(answer) = &p.answer {
            resume.push(Resume::Deliver(answer.clone()));
            continue;
        }
        p.run.seq = *seq;
        let interrupted = p.attempts > 0;
        if interrupted && (p.attempts >= MAX_ATTEMPTS || p.run.is_command()) {
            tracing::warn!(job = %p.run.job, session = %p.run.session, seq, "inbox.resume.job.gave_up");
            match give_up_notice(&p.run) {
                Some(notice) => {
                    settled.push(Record::Answer(notice.clone()));
                    resume.push(Resume::Deliver(notice));
                }
                None => dropped.push(*seq),
            }
            continue;
        }
        p.run.interrupted = interrupted;
        resume.push(Resume::Job(p.run.clone()));
    }
    if !dropped.is_empty() {
        settled.push(Record::Done {
            seqs: dropped,
            outcome: Outcome::GaveUp,
        });
    }
}

/// The notice for a run that will not run again after a restart (a subagent's: to its
/// parent's chat); `None` for a session without a chat.
fn give_up_notice(run: &JobRun) -> Option<Delivery> {
    if let Some(task) = &run.subagent {
        let text = format!(
            "A background subagent ({}) was interrupted twice by a restart and was given up.",
            run.job
        );
        return Some(run.delivery_in(task.parent.chat()?, text));
    }
    run.chat()?;
    let text = if run.is_command() {
        let command: String = run.prompt.trim().chars().take(80).collect();
        format!(
            "Scheduled job {}: `{command}` was interrupted by a restart and was not run again.",
            run.job
        )
    } else {
        format!(
            "Scheduled job {} was interrupted twice by a restart and was given up for this time.",
            run.job
        )
    };
    run.delivery(text)
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
