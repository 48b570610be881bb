//! Small documents: what Bub keeps as a small file under `BUB_HOME` — `access.json`, memory's
//! Markdown files — read whole and replaced whole, by one box in files, by replicas in the
//! database (`db::document`, the same relative names). The stores that keep them (`access`,
//! `memory`) speak only to [`Documents`], so the rules they enforce (caps, locks, who may
//! change what) are the same on both.
//!
//! Invariants: a change is a read-modify-write that no other writer interleaves with — files
//! under an exclusive lock (`lock`, relative to `BUB_HOME`), the database by the document's
//! version — and a written file is replaced atomically with mode 0600. The files' I/O runs on
//! the blocking pool; the database's on the caller's runtime.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::Database;
use crate::storage::Stamp;

#[cfg(feature = "postgres")]
mod rows;
#[cfg(feature = "postgres")]
pub(crate) use rows::import;

/// Where the documents of one `BUB_HOME` live: files under it, or rows of the replicas'
/// database ([`open`]).
#[async_trait::async_trait]
pub(crate) trait Documents: Send + Sync + std::fmt::Debug {
    /// The document `name` (`None`: there is none).
    async fn read(&self, name: &str) -> anyhow::Result<Option<String>>;

    /// What to compare to tell whether `name` changed since it was read (cheap: a `stat`, or
    /// the row's version).
    async fn revision(&self, name: &str) -> Revision;

    /// Changes `name` under `lock` (a file relative to `BUB_HOME`, for files): `change` gets
    /// its body and returns the new one (`None`: remove it) — it may be called again when
    /// another replica wrote meanwhile. Nothing is written when the body is the same.
    async fn update(&self, name: &str, lock: &str, change: &mut Change<'_>) -> anyhow::Result<()>;

    /// The names of the documents in folder `dir` (`memory/chats`), sorted.
    async fn list(&self, dir: &str) -> Vec<String>;

    /// Where `name` lives, for people: its path, or the database's document.
    fn describe(&self, name: &str) -> String;

    /// The file of `name`, when the documents are files.
    fn path(&self, _name: &str) -> Option<PathBuf> {
        None
    }
}

/// A change of a document's body (`None`: there is none, or remove it).
pub(crate) type Change<'a> = dyn for<'t> FnMut(Option<&'t str>) -> Option<String> + Send + 'a;

/// What a cache compares to tell whether a document changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Revision {
    File(Option<Stamp>),
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Row(i64),
}

/// The documents of `home`: files under it, or the rows of `database` when it is set.
pub(crate) fn open(home: &Path, database: Option<&Arc<Database>>) -> Arc<dyn Documents> {
    match database {
        #[cfg(feature = "postgres")]
        Some(db) => Arc::new(rows::Rows(db.clone())),
        #[cfg(not(feature = "postgres"))]
        Some(db) => match **db {},
        None => Arc::new(Files(home.to_path_buf())),
    }
}

impl dyn Documents {
    /// [`Documents::update`] with a change that also returns a result: the result of the
    /// change that was written.
    pub(crate) async fn change<R: Send>(
        &self,
        name: &str,
        lock: &str,
        mut change: impl FnMut(Option<&str>) -> (Option<String>, R) + Send,
    ) -> anyhow::Result<R> {
        let mut result = None;
        self.update(name, lock, &mut |text| {
            let (body, r) = change(text);
            result = Some(r);
            body
        })
        .await?;
        result.ok_or_else(|| anyhow::anyhow!("{}: not changed", self.describe(name)))
    }
}

/// Files under this directory (`BUB_HOME`), changed under a lock, replaced atomically.
#[derive(Debug)]
struct Files(PathBuf);

/// `name` under `home` (`None`: there is none).
fn read_file(home: &Path, name: &str) -> anyhow::Result<Option<String>> {
    let path = home.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {}", path.display()))),
    }
}

/// Replaces (or with `None` removes) `name` under `home`.
fn write_file(home: &Path, name: &str, body: Option<&str>) -> anyhow::Result<()> {
    let path = home.join(name);
    match body {
        Some(body) => {
            crate::storage::write_atomic(&path, body.trim_end_matches('\n').as_bytes(), Some(0o600))
        }
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        },
    }
}

#[async_trait::async_trait]
impl Documents for Files {
    async fn read(&self, name: &str) -> anyhow::Result<Option<String>> {
        let (home, name) = (self.0.clone(), name.to_owned());
        crate::storage::blocking(move || read_file(&home, &name)).await
    }

    /// A `stat`, cheap enough for an async thread.
    async fn revision(&self, name: &str) -> Revision {
        Revision::File(Stamp::of(&self.0.join(name)))
    }

    async fn update(&self, name: &str, lock: &str, change: &mut Change<'_>) -> anyhow::Result<()> {
        let (home, name, lock) = (self.0.clone(), name.to_owned(), self.0.join(lock));
        let read = crate::storage::blocking({
            let (home, name) = (home.clone(), name.clone());
            move || -> anyhow::Result<(File, Option<String>)> {
                let lock = crate::storage::lock(&lock)?;
                Ok((lock, read_file(&home, &name)?))
            }
        });
        // The lock is held until the new body is written (or found the same).
        let (lock, current) = read.await?;
        let body = change(current.as_deref());
        if body != current {
            crate::storage::blocking(move || {
                let _lock = lock;
                write_file(&home, &name, body.as_deref())
            })
            .await?;
        }
        Ok(())
    }

    async fn list(&self, dir: &str) -> Vec<String> {
        let (path, dir) = (self.0.join(dir), dir.to_owned());
        let names = crate::storage::blocking(move || {
            let mut names: Vec<String> = std::fs::read_dir(path)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .map(|file| format!("{dir}/{file}"))
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            Ok(names)
        });
        names.await.unwrap_or_default()
    }

    fn describe(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    fn path(&self, name: &str) -> Option<PathBuf> {
        Some(self.0.join(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight writers add one line each to one document, 25 times: no change is lost, and
    /// every write moves the revision.
    #[cfg(feature = "postgres")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_changes_in_the_database_are_never_lost() {
        let db = Database::shared(&crate::db::cluster::database()).unwrap();
        db.migrate().await.unwrap();
        let docs = open(Path::new("/nonexistent"), Some(&db));
        let before = docs.revision("memory/global.md").await;
        let writers: Vec<_> = (0..8)
            .map(|writer| {
                let docs = docs.clone();
                tokio::spawn(async move {
                    for n in 0..25 {
                        docs.change("memory/global.md", "unused.lock", |text| {
                            let line = format!("- {writer}-{n}");
                            (Some(format!("{}{line}\n", text.unwrap_or_default())), ())
                        })
                        .await
                        .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        let text = docs.read("memory/global.md").await.unwrap().unwrap();
        assert_eq!(text.lines().count(), 200);
        assert_ne!(docs.revision("memory/global.md").await, before);
        assert_eq!(docs.list("memory").await, ["memory/global.md"]);
        docs.change("memory/global.md", "unused.lock", |_| (None, ()))
            .await
            .unwrap();
        assert_eq!(docs.read("memory/global.md").await.unwrap(), None);
        assert_eq!(docs.revision("memory/global.md").await, Revision::Row(0));
    }

    #[tokio::test]
    async fn files_are_changed_under_their_lock_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let docs = open(dir.path(), None);
        assert_eq!(docs.read("access.json").await.unwrap(), None);
        let said = docs
            .change("access.json", "access.lock", |text| {
                (Some("{}".to_owned()), text.is_none())
            })
            .await
            .unwrap();
        assert!(said);
        let mode = std::fs::metadata(dir.path().join("access.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            docs.read("access.json").await.unwrap().as_deref(),
            Some("{}\n")
        );
    }
}
