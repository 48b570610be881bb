//! The heartbeat (opt-in: `BUB_HEARTBEAT_MINUTES`, `BUB_HEARTBEAT_CHAT`, `BUB_HEARTBEAT_ROLE`):
//! every so many minutes `bub message` and `bub idle` read `HEARTBEAT.md` in the workspace.
//! A file without an open item — an unchecked task line, `- [ ] …` or `* [ ] …` — costs
//! nothing: no model call is made. Otherwise one turn runs in the `heartbeat` session (a tape
//! of its own, so the chat's conversation is not filled with the file every beat) with the
//! configured rights and no sender; it goes the way of a scheduled run — journaled, through
//! the session actor, its answer on the delivery ledger to `BUB_HEARTBEAT_CHAT` — except that
//! an answer of just [`QUIET`] stays on the tape and is not sent.
//!
//! Invariants: beats never overlap (the next beat waits for the run before it, and a beat
//! missed meanwhile is skipped, not made up); what the model is shown of the file is at most
//! [`MAX_FILE_BYTES`]; with replicas one of them beats (a database lock, taken over within 5 s
//! when its holder dies: `channels::exclusive`), not every one.

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::JobQueue;
use crate::access::{Authority, Role};
use crate::chat::SessionId;
use crate::config::Settings;
use crate::inbox::JobRun;

/// The file a beat reads, in the workspace.
pub const FILE: &str = "HEARTBEAT.md";
/// The job name of a heartbeat's runs (in the journal and on the tape).
const JOB: &str = "heartbeat";
/// The session a heartbeat's turns run in.
const SESSION: &str = "heartbeat";
/// An answer that says there is nothing to tell the chat.
pub(crate) const QUIET: &str = "HEARTBEAT_OK";
/// The most of the file a turn is shown.
const MAX_FILE_BYTES: usize = 8 * 1024;

/// The heartbeat of a daemon.
pub struct Heartbeat {
    every: Duration,
    file: PathBuf,
    chat: SessionId,
    creator: Authority,
    queue: JobQueue,
    /// With replicas, the database whose lock lets one of them beat.
    database: Option<std::sync::Arc<crate::db::Database>>,
}

impl Heartbeat {
    /// The heartbeat `settings` ask for, running its turns through `queue`; `None` when off.
    pub fn from_settings(settings: &Settings, queue: JobQueue) -> Option<Self> {
        let chat = settings.heartbeat_chat.as_deref()?;
        (!settings.heartbeat_every.is_zero()).then(|| Self {
            every: settings.heartbeat_every,
            file: settings.workspace.join(FILE),
            chat: chat.into(),
            creator: Authority {
                role: match settings.heartbeat_owner {
                    true => Role::Owner,
                    false => Role::Guest,
                },
                senders: Vec::new(),
            },
            queue,
            // A bad URL stopped the process at start.
            database: settings.database().ok().flatten(),
        })
    }

    /// Beats until `shutdown` (with replicas, while this one holds the heartbeat's lock).
    pub async fn run(self, shutdown: CancellationToken) {
        let lock = crate::db::HEARTBEAT_LOCK;
        let db = self.database.as_ref();
        loop {
            let held = crate::channels::exclusive::acquire(db, "heartbeat", lock, &shutdown).await;
            let Ok(Some(held)) = held else { return };
            tokio::select! {
                () = self.beat(&shutdown) => return,
                // Another replica beats now; this one stands by again.
                () = held.lost() => tracing::warn!("heartbeat.lock.lost"),
            }
        }
    }

    /// Beats until `shutdown`.
    async fn beat(&self, shutdown: &CancellationToken) {
        let mut beats = tokio::time::interval_at(Instant::now() + self.every, self.every);
        beats.set_missed_tick_behavior(MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = beats.tick() => {}
            }
            let file = self.file.clone();
            let text = tokio::task::spawn_blocking(move || read_head(&file))
                .await
                .ok()
                .and_then(Result::ok)
                .map(|bytes| capped(&bytes));
            let Some(text) = text.filter(|t| has_open_item(t)) else {
                tracing::debug!("heartbeat.idle");
                continue;
            };
            let run = self.run_of(&text);
            tokio::select! {
                () = shutdown.cancelled() => return,
                outcome = self.queue.submit(run) => match outcome {
                    Ok(()) => tracing::info!("heartbeat.ran"),
                    Err(e) => tracing::warn!(error = %e, "heartbeat.failed"),
                },
            }
        }
    }

    fn run_of(&self, text: &str) -> JobRun {
        JobRun {
            seq: 0,
            job: JOB.to_owned(),
            session: SESSION.into(),
            workspace: PathBuf::new(),
            due: Utc::now(),
            prompt: prompt(text),
            creator: self.creator.clone(),
            interrupted: false,
            deliver_to: Some(self.chat.clone()),
            subagent: None,
            reports: None,
        }
    }
}

/// Whether a heartbeat run's answer `text` says there is nothing to tell.
pub(super) fn is_quiet(run: &JobRun, text: &str) -> bool {
    run.job == JOB && run.session.as_str() == SESSION && text.trim() == QUIET
}

/// Whether `text` has an unchecked task line (`- [ ] …`, `* [ ] …`).
fn has_open_item(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        ["- [ ]", "* [ ]"].iter().any(|open| line.starts_with(open))
    })
}

/// The start of the file: enough bytes for [`capped`] (a huge file is not read whole).
fn read_head(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    // Three more bytes complete a character that starts before the cap.
    let limit = MAX_FILE_BYTES as u64 + 3;
    std::fs::File::open(path)?
        .take(limit)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// The file's text, at most [`MAX_FILE_BYTES`] (cut at a character boundary).
fn capped(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text[..text.floor_char_boundary(MAX_FILE_BYTES)].to_owned()
}

/// The turn's input: what a beat is, the file, and how to say there is nothing to tell.
fn prompt(text: &str) -> String {
    format!(
        "[Heartbeat. No one sent this now: {FILE} in the workspace has open items. Work on what \
         is due. Your answer is sent to the chat only if it has something to tell; if nothing \
         needs attention now, answer exactly {QUIET}.]\n{text}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unchecked_task_line_is_an_open_item() {
        assert!(!has_open_item(""));
        assert!(!has_open_item(
            "# Heartbeat\nNotes about the week.\n- [x] done\n- plain"
        ));
        assert!(!has_open_item("<!-- - [ ] an example in a comment -->"));
        assert!(has_open_item("# Heartbeat\n  - [ ] water the plants"));
        assert!(has_open_item("* [ ] call Ann"));
    }

    #[test]
    fn the_file_is_capped_and_quiet_answers_are_recognised() {
        let long = "é".repeat(MAX_FILE_BYTES);
        let shown = capped(long.as_bytes());
        assert!(shown.len() <= MAX_FILE_BYTES && shown.chars().all(|c| c == 'é'));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), &long).unwrap();
        let head = read_head(&dir.path().join(FILE)).unwrap();
        assert_eq!(
            capped(&head),
            shown,
            "the file is read only as far as it is shown"
        );
        assert!(head.len() < long.len());
        let settings = Settings::with_defaults("/h".into(), "/w".into());
        let queue = JobQueue::new(tokio::sync::mpsc::channel(1).0);
        assert!(
            Heartbeat::from_settings(&settings, queue.clone()).is_none(),
            "off by default"
        );
        let settings = Settings {
            heartbeat_every: Duration::from_secs(60),
            heartbeat_chat: Some("telegram:42".into()),
            ..settings
        };
        let beat = Heartbeat::from_settings(&settings, queue).expect("on");
        let run = beat.run_of("- [ ] call Ann");
        assert_eq!(run.chat(), Some(("telegram", "42")));
        assert_eq!(run.creator.role, Role::Guest, "a guest by default");
        assert!(run.prompt.ends_with("- [ ] call Ann"));
        assert!(is_quiet(&run, " HEARTBEAT_OK\n"));
        assert!(!is_quiet(&run, "HEARTBEAT_OK, but call Ann"));
    }
}
