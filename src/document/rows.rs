//! The documents in the replicas' database (`db::document`); `bub db import` copies a
//! one-box `BUB_HOME`'s into it.

use std::path::Path;
use std::sync::Arc;

use super::{Change, Documents, Revision, open};
use crate::db::Database;

/// Rows of the replicas' database (`db::document`), changed by version.
pub(super) struct Rows(pub(super) Arc<Database>);

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rows({})", self.0.label())
    }
}

/// How often a change is tried again when other writers keep coming first.
const ATTEMPTS: usize = 64;

#[async_trait::async_trait]
impl Documents for Rows {
    async fn read(&self, name: &str) -> anyhow::Result<Option<String>> {
        Ok(self.0.document(name).await?.map(|(body, _)| body))
    }

    /// Unreachable: a revision no read can have, so a cache reads (and fails closed).
    async fn revision(&self, name: &str) -> Revision {
        Revision::Row(self.0.document_version(name).await.unwrap_or(-1))
    }

    async fn update(&self, name: &str, _lock: &str, change: &mut Change<'_>) -> anyhow::Result<()> {
        for _ in 0..ATTEMPTS {
            let current = self.0.document(name).await?;
            let (text, version) = match &current {
                Some((body, version)) => (Some(body.as_str()), Some(*version)),
                None => (None, None),
            };
            let body = change(text);
            if body.as_deref() == text || self.0.write_document(name, version, body).await? {
                return Ok(());
            }
        }
        anyhow::bail!("document {name}: other writers kept changing it; try again")
    }

    async fn list(&self, dir: &str) -> Vec<String> {
        let names = self.0.document_names(&format!("{dir}/")).await;
        names.unwrap_or_default()
    }

    fn describe(&self, name: &str) -> String {
        format!("{name} in the database {}", self.0.label())
    }
}

/// The documents of a one-box `BUB_HOME` (`bub db import`): `access.json` and memory's files.
const IMPORTED: [&str; 1] = ["access.json"];
/// The folders whose files are documents too.
const IMPORTED_DIRS: [&str; 3] = ["memory", "memory/chats", "memory/checkpoints"];

/// Copies `home`'s documents into `db` (`bub db import`): a document the database has is kept
/// (running it again adds nothing). Returns how many were added.
pub(crate) async fn import(home: &Path, db: &Arc<Database>) -> anyhow::Result<usize> {
    let (files, rows) = (open(home, None), open(home, Some(db)));
    let mut names: Vec<String> = IMPORTED.iter().map(|n| (*n).to_owned()).collect();
    for dir in IMPORTED_DIRS {
        let listed = files.list(dir).await.into_iter();
        names.extend(listed.filter(|name| name.ends_with(".md") || name.ends_with(".json")));
    }
    let mut added = 0;
    for name in names {
        let Some(text) = files.read(&name).await? else {
            continue;
        };
        let text = text.trim_end_matches('\n').to_owned();
        added += rows
            .change(&name, "", |current| match current {
                Some(kept) => (Some(kept.to_owned()), 0),
                None => (Some(text.clone()), 1),
            })
            .await?;
    }
    Ok(added)
}
