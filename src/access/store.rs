//! `BUB_HOME/access.json`: approved pairings, pending requests and the requests that gave way to
//! newer ones in the last hour, shared by the daemon (which records requests) and `bub pair`
//! (which approves and revokes them, and shows a flood).
//!
//! With replicas (`BUB_DATABASE_URL`) it is the database's document `access.json`, the same
//! JSON, changed by version instead of under the lock (`crate::document`).
//!
//! Invariants: mode 0600 (it names who may use a shell on this host); every change is a
//! read-modify-write under the exclusive lock on `access.lock`; writes are atomic; a file that
//! does not parse is never overwritten — changes fail with an error naming the file, and
//! readers treat it as "no pairings" (fail closed: only the configured lists admit anyone).

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Role;
use super::pairing::{GaveWay, Pending};
use std::sync::Arc;

use crate::document::{Documents, Revision};

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

/// Handle on `access.json` (holds no open file): a file of `BUB_HOME`, or with replicas the
/// database's document of that name.
#[derive(Debug, Clone)]
pub(crate) struct AccessStore {
    docs: Arc<dyn Documents>,
}

/// The document's name (and the file's, under `BUB_HOME`).
const NAME: &str = "access.json";

impl AccessStore {
    pub(crate) fn new(docs: Arc<dyn Documents>) -> Self {
        Self { docs }
    }

    pub(crate) async fn stamp(&self) -> Revision {
        self.docs.revision(NAME).await
    }

    /// The file's contents (empty when it does not exist). No lock is needed: writes are atomic.
    pub(crate) async fn load(&self) -> anyhow::Result<AccessFile> {
        let text = self.docs.read(NAME).await?.unwrap_or_default();
        self.parse(&text)
    }

    fn parse(&self, text: &str) -> anyhow::Result<AccessFile> {
        if text.trim().is_empty() {
            return Ok(AccessFile::default());
        }
        let disk: OnDisk = serde_json::from_str(text).with_context(|| {
            format!(
                "{} does not parse; fix or remove it (pairings are ignored until then)",
                self.docs.describe(NAME)
            )
        })?;
        Ok(disk.file)
    }

    /// Applies `change` under the lock and writes the result (mode 0600) when it changed.
    pub(crate) async fn update<R: Send>(
        &self,
        mut change: impl FnMut(&mut AccessFile) -> R + Send,
    ) -> anyhow::Result<R> {
        self.docs
            .change(NAME, "access.lock", |text| {
                let mut file = match self.parse(text.unwrap_or_default()) {
                    Ok(file) => file,
                    // Never overwritten: the change fails, naming the file.
                    Err(e) => return (text.map(str::to_owned), Err(e)),
                };
                let before = file.clone();
                let result = change(&mut file);
                if file == before {
                    return (text.map(str::to_owned), Ok(result));
                }
                let body = serde_json::to_string_pretty(&OnDisk {
                    version: VERSION,
                    file,
                });
                match body {
                    Ok(body) => (Some(body), Ok(result)),
                    Err(e) => (text.map(str::to_owned), Err(e.into())),
                }
            })
            .await?
    }
}
