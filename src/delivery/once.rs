//! `bub send --id KEY`: a message sent at most once per key, by a process of its own, whether a
//! daemon runs or not. The key's record — one small file in `BUB_HOME/sends/`, named by the
//! key's digest — says what was asked, how many parts the platform accepted and whether it
//! accepted all of it. It is written before the platform is asked, after each part accepted but
//! the last, and at the end, one `write` of a line each, under the file's exclusive lock, held
//! for the whole send:
//!
//! * a key already sent: nothing is sent ([`Once::Before`]);
//! * a key begun by a run that failed or was killed: the same message is sent from its first
//!   part the platform did not accept (a long text: the rest of its messages, its file);
//! * the same key for another message (destination, text, file or reply): [`KeyReused`],
//!   nothing is sent;
//! * two runs with one key at once: the second waits for the first, then finds it sent.
//!
//! Records untouched for [`KEPT`] are removed by a later `bub send --id`: a key is remembered
//! 30 days. Like the inbox journal, records are not fsynced (they survive the process dying,
//! not the machine losing power), and the one window left is the platform accepting a part just
//! before the process dies, not knowing it: that part is sent again.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use chrono::{DateTime, Utc};
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use super::{Outbound, Outbox};

/// The folder of the records, under `BUB_HOME`.
pub(crate) const DIR: &str = "sends";
/// How long a key is remembered after its record last changed.
pub(crate) const KEPT: Duration = Duration::from_secs(30 * 24 * 3600);

/// What became of a keyed send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Once {
    /// The platform accepted it now (all of it, or the rest a failed run left).
    Sent,
    /// A run with this key had sent it, at this time: not sent again.
    Before(Option<DateTime<Utc>>),
}

/// The key was used for another message: nothing was sent.
#[derive(Debug, thiserror::Error)]
#[error("--id {key}: already used for another message (to {to}, {at}); give this one its own id")]
pub(crate) struct KeyReused {
    pub key: String,
    pub to: String,
    pub at: String,
}

/// One line of a record: the first says what was asked; the later ones how it went.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parts: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    done: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<DateTime<Utc>>,
}

/// A key's record, open and locked.
struct Record {
    file: File,
    /// What the first line says was asked (`None`: a new key).
    asked: Option<(String, String, Option<DateTime<Utc>>)>,
    parts: usize,
    done: Option<Option<DateTime<Utc>>>,
    /// The file does not end with a newline (a write cut short).
    torn: bool,
}

/// Sends `out` through channel `name` (checked against its allow-list) unless a run with `key`
/// sent it (see the module docs).
pub(crate) async fn send_once(
    outbox: &Outbox,
    name: &str,
    out: &Outbound,
    key: &str,
) -> anyhow::Result<Once> {
    let adapter = outbox.checked(name, &out.chat_id).await?;
    let to = format!("{name}:{}", out.chat_id);
    let digest = hex(&super::ledger::digest(name, out));
    let dir = outbox.home().join(DIR);
    let path = record_path(&dir, key);
    let mut record = tokio::task::spawn_blocking(move || {
        forget_old(&dir, &path);
        Record::open(&path)
    })
    .await??;
    if let Some((asked, asked_to, at)) = &record.asked
        && *asked != digest
    {
        let at = at.map_or_else(|| "earlier".to_owned(), |at| at.to_rfc3339());
        return Err(KeyReused {
            key: key.to_owned(),
            to: asked_to.clone(),
            at,
        }
        .into());
    }
    if let Some(at) = record.done {
        tracing::info!(key, to, "send.once.skipped: sent before");
        return Ok(Once::Before(at));
    }
    if record.asked.is_none() {
        record.append(&Line {
            id: Some(key.to_owned()),
            to: Some(to),
            digest: Some(digest),
            at: Some(Utc::now()),
            ..Line::default()
        })?;
    }
    let from = record.parts;
    let mut accepted = |parts| {
        let line = Line {
            parts: Some(parts),
            ..Line::default()
        };
        if let Err(e) = record.append(&line) {
            tracing::error!(error = %format!("{e:#}"), "send.once.record.error");
        }
        Box::pin(std::future::ready(())) as _
    };
    super::send_from(adapter.as_ref(), outbox.home(), out, from, &mut accepted).await?;
    record.append(&Line {
        done: Some(true),
        at: Some(Utc::now()),
        ..Line::default()
    })?;
    Ok(Once::Sent)
}

/// The record of `key` in `dir`.
fn record_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{}.jsonl", hex(&Md5::digest(key.as_bytes()))))
}

impl Record {
    /// Opens (creating it and its folder, private) and locks the record at `path` — waiting for
    /// a run that holds it — and reads it.
    fn open(path: &Path) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent() {
            crate::storage::create_private_dir(dir)
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut file = crate::storage::private_file()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        file.lock()
            .with_context(|| format!("locking {}", path.display()))?;
        let mut text = Vec::new();
        file.read_to_end(&mut text)
            .with_context(|| format!("reading {}", path.display()))?;
        let mut record = Record {
            file,
            asked: None,
            parts: 0,
            done: None,
            torn: !text.is_empty() && !text.ends_with(b"\n"),
        };
        for line in text.split(|b| *b == b'\n') {
            // A torn line (a write cut short) says nothing.
            let Ok(line) = serde_json::from_slice::<Line>(line) else {
                continue;
            };
            if let (None, Some(digest), Some(to)) = (&record.asked, line.digest, line.to) {
                record.asked = Some((digest, to, line.at));
            }
            record.parts = record.parts.max(line.parts.unwrap_or(0));
            if line.done == Some(true) {
                record.done = Some(line.at);
            }
        }
        Ok(record)
    }

    /// Appends `line` with one `write` — on a runtime's worker, with the runtime told that it
    /// blocks (`block_in_place`), so the send's other tasks move to another worker.
    fn append(&mut self, line: &Line) -> anyhow::Result<()> {
        let mut bytes = Vec::with_capacity(128);
        if self.torn {
            bytes.push(b'\n');
        }
        serde_json::to_writer(&mut bytes, line)?;
        bytes.push(b'\n');
        let file = &mut self.file;
        let mut write = || file.write_all(&bytes);
        let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
        let written = match flavor {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(write),
            _ => write(),
        };
        written.context("writing a send record")?;
        self.torn = false;
        Ok(())
    }
}

/// Removes the records of `dir` untouched for [`KEPT`] (but `keep`).
fn forget_old(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| now.duration_since(at).unwrap_or_default() > KEPT);
        if old && entry.path() != keep {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[path = "once_tests.rs"]
mod tests;
