//! Small documents: what Bub keeps as a small file under `BUB_HOME` — `access.json`, memory's
//! Markdown files — read whole and replaced whole, by one box in files, by replicas in the
//! database (`db::document`, the same relative names). The stores that keep them (`access`,
//! `memory`) speak only to [`Documents`], so the rules they enforce (caps, locks, who may
//! change what) are the same on both.
//!
//! Invariants: a change is a read-modify-write that no other writer interleaves with — files
//! under an exclusive lock (`lock`, relative to `BUB_HOME`), the database by the document's
//! version — and a written file is replaced atomically with mode 0600. All of it is blocking
//! I/O: async code calls it on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::Database;
use crate::storage::Stamp;

/// Where the documents of one `BUB_HOME` live.
#[derive(Clone)]
pub(crate) enum Documents {
    /// Files under this directory (`BUB_HOME`).
    Files(PathBuf),
    /// Rows of the replicas' database.
    Database(Arc<Database>),
}

impl std::fmt::Debug for Documents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Files(home) => write!(f, "Files({})", home.display()),
            Self::Database(db) => write!(f, "Database({})", db.label()),
        }
    }
}

/// What a cache compares to tell whether a document changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Revision {
    File(Option<Stamp>),
    Row(i64),
}

impl Documents {
    /// Files under `home`, or the database of `database` when it is set.
    pub(crate) fn of(home: &Path, database: Option<&Arc<Database>>) -> Self {
        match database {
            Some(db) => Self::Database(db.clone()),
            None => Self::Files(home.to_path_buf()),
        }
    }

    /// The document `name` (`None`: there is none).
    pub(crate) fn read(&self, name: &str) -> anyhow::Result<Option<String>> {
        match self {
            Self::Files(home) => match std::fs::read_to_string(home.join(name)) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => {
                    Err(anyhow::Error::new(e).context(format!("reading {}", self.describe(name))))
                }
            },
            Self::Database(db) => Ok(db.document(name)?.map(|(body, _)| body)),
        }
    }

    /// What to compare to tell whether `name` changed since it was read.
    pub(crate) fn revision(&self, name: &str) -> Revision {
        match self {
            Self::Files(home) => Revision::File(Stamp::of(&home.join(name))),
            // Unreachable: a revision no read can have, so a cache reads (and fails closed).
            Self::Database(db) => Revision::Row(db.document_version(name).unwrap_or(-1)),
        }
    }

    /// Changes `name` under `lock` (a file relative to `BUB_HOME`, for files): `change` gets
    /// its body and returns the new one (`None`: remove it) and a result — it may be called
    /// again when another replica wrote meanwhile. Nothing is written when the body is the same.
    pub(crate) fn change<R>(
        &self,
        name: &str,
        lock: &str,
        mut change: impl FnMut(Option<&str>) -> (Option<String>, R),
    ) -> anyhow::Result<R> {
        match self {
            Self::Files(home) => {
                let _lock = crate::storage::lock(&home.join(lock))?;
                let current = self.read(name)?;
                let (body, result) = change(current.as_deref());
                if body != current {
                    let path = home.join(name);
                    match body {
                        Some(body) => crate::storage::write_atomic(
                            &path,
                            body.trim_end_matches('\n').as_bytes(),
                            Some(0o600),
                        )?,
                        None => match std::fs::remove_file(&path) {
                            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                                return Err(e.into());
                            }
                            _ => {}
                        },
                    }
                }
                Ok(result)
            }
            Self::Database(db) => db.update_document(name, change),
        }
    }

    /// The names of the documents in folder `dir` (`memory/chats`), sorted.
    pub(crate) fn list(&self, dir: &str) -> Vec<String> {
        match self {
            Self::Files(home) => {
                let mut names: Vec<String> = std::fs::read_dir(home.join(dir))
                    .map(|entries| {
                        entries
                            .flatten()
                            .filter_map(|e| e.file_name().into_string().ok())
                            .map(|file| format!("{dir}/{file}"))
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                names
            }
            Self::Database(db) => db.document_names(&format!("{dir}/")).unwrap_or_default(),
        }
    }

    /// Where `name` lives, for people: its path, or the database's document.
    pub(crate) fn describe(&self, name: &str) -> String {
        match self {
            Self::Files(home) => home.join(name).display().to_string(),
            Self::Database(db) => format!("{name} in the database {}", db.label()),
        }
    }
}

/// The documents of a one-box `BUB_HOME` (`bub db import`): `access.json` and memory's files.
const IMPORTED: [&str; 1] = ["access.json"];
/// The folders whose files are documents too.
const IMPORTED_DIRS: [&str; 3] = ["memory", "memory/chats", "memory/checkpoints"];

/// Copies `home`'s documents into `db` (`bub db import`): a document the database has is kept
/// (running it again adds nothing). Returns how many were added.
pub(crate) fn import(home: &Path, db: &Arc<Database>) -> anyhow::Result<usize> {
    let files = Documents::Files(home.to_path_buf());
    let names = IMPORTED.iter().map(|n| (*n).to_owned()).chain(
        IMPORTED_DIRS
            .iter()
            .flat_map(|dir| files.list(dir))
            .filter(|name| name.ends_with(".md") || name.ends_with(".json")),
    );
    let mut added = 0;
    for name in names {
        let Some(text) = files.read(&name)? else {
            continue;
        };
        let text = text.trim_end_matches('\n').to_owned();
        added += db.update_document(&name, |current| match current {
            Some(kept) => (Some(kept.to_owned()), 0),
            None => (Some(text.clone()), 1),
        })?;
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight writers add one line each to one document, 25 times: no change is lost, and
    /// every write moves the revision.
    #[test]
    fn concurrent_changes_in_the_database_are_never_lost() {
        let db = Database::shared(&crate::db::cluster::database()).unwrap();
        db.migrate_in_test();
        let docs = Documents::Database(db);
        let before = docs.revision("memory/global.md");
        std::thread::scope(|s| {
            for writer in 0..8 {
                let docs = &docs;
                s.spawn(move || {
                    for n in 0..25 {
                        docs.change("memory/global.md", "unused.lock", |text| {
                            let line = format!("- {writer}-{n}");
                            (Some(format!("{}{line}\n", text.unwrap_or_default())), ())
                        })
                        .unwrap();
                    }
                });
            }
        });
        let text = docs.read("memory/global.md").unwrap().unwrap();
        assert_eq!(text.lines().count(), 200);
        assert_ne!(docs.revision("memory/global.md"), before);
        assert_eq!(docs.list("memory"), ["memory/global.md"]);
        docs.change("memory/global.md", "unused.lock", |_| (None, ()))
            .unwrap();
        assert_eq!(docs.read("memory/global.md").unwrap(), None);
        assert_eq!(docs.revision("memory/global.md"), Revision::Row(0));
    }

    #[test]
    fn files_are_changed_under_their_lock_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let docs = Documents::Files(dir.path().to_owned());
        assert_eq!(docs.read("access.json").unwrap(), None);
        let said = docs
            .change("access.json", "access.lock", |text| {
                (Some("{}".to_owned()), text.is_none())
            })
            .unwrap();
        assert!(said);
        let mode = std::fs::metadata(dir.path().join("access.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(docs.read("access.json").unwrap().as_deref(), Some("{}\n"));
    }
}
