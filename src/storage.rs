//! Small state files under `BUB_HOME` (`jobs.json`, `access.json`): an exclusive advisory lock
//! for read-modify-write across processes, atomic replacement, and a cheap [`Stamp`] to notice
//! changes made by other processes; and the one way anything under `BUB_HOME` is created
//! ([`create_private_dir`], [`private_file`]): for the owner only.
//!
//! Invariants: a reader never sees half a file (temp file in the same folder, fsync, rename,
//! fsync of the folder); a file written with a mode gets it before it holds any data; what Bub
//! creates under `BUB_HOME` (`BUB_HOME` itself included) is created `0700` (folders) or `0600`
//! (files) — what already exists keeps the mode it has (an operator's choice is not undone).
//! The file stores run their work through [`blocking`]: never on an async thread.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of a file Bub creates under `BUB_HOME`: tapes, memory, jobs, pairings, the usage
/// ledger, the inbox journal and the logs are the owner's only.
pub(crate) const PRIVATE_FILE: u32 = 0o600;
/// The mode of a folder Bub creates under `BUB_HOME`, and of `BUB_HOME` when Bub creates it.
pub(crate) const PRIVATE_DIR: u32 = 0o700;

/// Runs `work` (file I/O) on the blocking pool and waits for it, logging to the caller's
/// subscriber.
pub(crate) async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<R> + Send + 'static,
) -> anyhow::Result<R> {
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    tokio::task::spawn_blocking(move || tracing::dispatcher::with_default(&dispatch, work))
        .await
        .map_err(|e| anyhow::anyhow!("file task failed: {e}"))?
}

/// Creates `dir` and its missing parents with mode [`PRIVATE_DIR`] (existing ones are left as
/// they are).
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)
}

/// Options that create a missing file with mode [`PRIVATE_FILE`] (an existing one keeps its
/// mode); the caller adds how it opens it.
pub(crate) fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(PRIVATE_FILE);
    options
}
use std::time::SystemTime;

use anyhow::Context;

/// What identifies one version of a file, to notice changes by other processes with a `stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl Stamp {
    /// The file's current version (`None` when it does not exist).
    pub(crate) fn of(path: &Path) -> Option<Stamp> {
        let meta = fs::metadata(path).ok()?;
        Some(Stamp {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode: meta.ino(),
        })
    }

    /// When the file was last modified, if the file system says.
    pub(crate) fn modified(&self) -> Option<SystemTime> {
        self.modified
    }
}

/// Takes the exclusive advisory lock on `path` (created if missing, with its folder); released
/// when the returned file is dropped.
pub(crate) fn lock(path: &Path) -> anyhow::Result<File> {
    let open = || {
        private_file()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
    };
    // The folder is made only when it is missing (one syscall less on every lock).
    let file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            open()
        }
        file => file,
    }
    .with_context(|| format!("opening {}", path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

/// An exclusive lock file that names its holder's pid (`BUB_HOME/daemon.lock`): the lock is the
/// truth (released by the kernel when the process dies, even by SIGKILL); the pid is for
/// messages.
pub enum PidLock {
    /// This process holds the lock while the file is open.
    Held(File),
    /// Another process holds it (its pid, when readable).
    Taken(Option<u32>),
}

impl PidLock {
    /// Tries to take the lock on `path` without waiting.
    pub fn try_take(path: &Path) -> anyhow::Result<PidLock> {
        if let Some(dir) = path.parent() {
            create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut file = private_file()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0)?;
                writeln!(file, "{}", std::process::id())?;
                Ok(PidLock::Held(file))
            }
            Err(fs::TryLockError::WouldBlock) => {
                let pid = fs::read_to_string(path)
                    .ok()
                    .and_then(|text| text.trim().parse().ok());
                Ok(PidLock::Taken(pid))
            }
            Err(fs::TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
    }
}

/// Atomically replaces `path` with `body` (plus a final newline); `mode` (e.g. `0o600`) is set
/// on the temp file before anything is written to it (without one the file is the temp file's
/// [`PRIVATE_FILE`]). The temp file is removed on failure; a missing folder is created private.
pub(crate) fn write_atomic(path: &Path, body: &[u8], mode: Option<u32>) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temp file in {}", dir.display()))?;
    if let Some(mode) = mode {
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(mode))?;
    }
    tmp.write_all(body)?;
    tmp.write_all(b"\n")?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .with_context(|| format!("replacing {}", path.display()))?;
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_sets_the_mode_and_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(Stamp::of(&path), None);
        write_atomic(&path, b"{}", Some(0o600)).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::read_to_string(&path).unwrap(), "{}\n");
        let first = Stamp::of(&path).unwrap();
        write_atomic(&path, b"{\"a\":1}", Some(0o600)).unwrap();
        assert_ne!(
            Stamp::of(&path),
            Some(first),
            "a replaced file has a new stamp"
        );
    }
}
