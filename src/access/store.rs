//! `BUB_HOME/access.json`: approved pairings, pending requests and the requests that gave way to
//! newer ones in the last hour, shared by the daemon (which records requests) and `bub pair`
//! (which approves and revokes them, and shows a flood).
//!
//! Invariants: mode 0600 (it names who may use a shell on this host); every change is a
//! read-modify-write under the exclusive lock on `access.lock`; writes are atomic; a file that
//! does not parse is never overwritten — changes fail with an error naming the file, and
//! readers treat it as "no pairings" (fail closed: only the configured lists admit anyone).

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Role;
use super::pairing::{GaveWay, Pending};
use crate::storage::{self, Stamp};

const VERSION: u32 = 1;

/// One approved user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paired {
    pub channel: String,
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    pub role: Role,
    pub approved_at: DateTime<Utc>,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessFile {
    #[serde(default)]
    pub users: Vec<Paired>,
    #[serde(default)]
    pub pending: Vec<Pending>,
    /// Requests that gave way to newer ones in the last hour (bounded; see `pairing`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gave_way: Vec<GaveWay>,
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    #[serde(flatten)]
    file: AccessFile,
}

/// Handle on `access.json` (holds no open file).
#[derive(Debug, Clone)]
pub(crate) struct AccessStore {
    path: PathBuf,
    lock_path: PathBuf,
}

impl AccessStore {
    pub(crate) fn new(home: &Path) -> Self {
        Self {
            path: home.join("access.json"),
            lock_path: home.join("access.lock"),
        }
    }

    pub(crate) fn stamp(&self) -> Option<Stamp> {
        Stamp::of(&self.path)
    }

    /// The file's contents (empty when it does not exist). No lock is needed: writes are atomic.
    pub(crate) fn load(&self) -> anyhow::Result<AccessFile> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(AccessFile::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.path.display())),
        };
        if text.trim().is_empty() {
            return Ok(AccessFile::default());
        }
        let disk: OnDisk = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} does not parse; fix or remove it (pairings are ignored until then)",
                self.path.display()
            )
        })?;
        Ok(disk.file)
    }

    /// Applies `change` under the lock and writes the result (mode 0600) when it changed.
    pub(crate) fn update<R>(&self, change: impl FnOnce(&mut AccessFile) -> R) -> anyhow::Result<R> {
        let _lock = storage::lock(&self.lock_path)?;
        let mut file = self.load()?;
        let before = file.clone();
        let result = change(&mut file);
        if file != before {
            let body = serde_json::to_vec_pretty(&OnDisk {
                version: VERSION,
                file,
            })?;
            storage::write_atomic(&self.path, &body, Some(0o600))?;
        }
        Ok(result)
    }
}
