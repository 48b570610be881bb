//! `BUB_HOME/jobs.json`: the jobs of every process sharing one `BUB_HOME`.
//!
//! Invariants:
//! * the file is plain, pretty-printed JSON (`{"version": 1, "jobs": [...]}`), readable and
//!   editable by a person;
//! * every change is a read-modify-write under an exclusive advisory lock on `jobs.lock`, so
//!   processes never lose each other's changes;
//! * writes are atomic (temp file, fsync, rename, fsync of the folder): a crash leaves the old
//!   or the new file, never half of one;
//! * a file that does not parse is moved aside to `jobs.json.corrupt-<time>` (logged) and never
//!   overwritten.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::job::Job;

const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct JobsFile {
    version: u32,
    jobs: Vec<Job>,
}

/// What identifies one version of the file, to notice changes by other processes cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

/// Handle on `jobs.json` (cheap to create; holds no open file).
#[derive(Debug, Clone)]
pub struct JobStore {
    path: PathBuf,
    lock_path: PathBuf,
}

impl JobStore {
    /// The store of `home` (`BUB_HOME`).
    pub fn new(home: &Path) -> Self {
        Self {
            path: home.join("jobs.json"),
            lock_path: home.join("jobs.lock"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All jobs, sorted by next run (jobs that will not run again last).
    pub fn load(&self) -> anyhow::Result<Vec<Job>> {
        let mut jobs = self.load_stamped()?.0;
        jobs.sort_by_key(|j| (j.next_run.is_none(), j.next_run, j.created));
        Ok(jobs)
    }

    /// The jobs in file order, with the version of the file they were read from.
    pub fn load_stamped(&self) -> anyhow::Result<(Vec<Job>, Option<Stamp>)> {
        let _lock = self.lock()?;
        let jobs = self.read()?;
        Ok((jobs, self.stamp()))
    }

    /// Applies `change` to the jobs under the exclusive lock and writes the result back (only
    /// when `change` altered something).
    pub fn update<R>(&self, change: impl FnOnce(&mut Vec<Job>) -> R) -> anyhow::Result<R> {
        Ok(self.update_stamped(change)?.0)
    }

    /// [`JobStore::update`], also returning the version of the file it left.
    pub fn update_stamped<R>(
        &self,
        change: impl FnOnce(&mut Vec<Job>) -> R,
    ) -> anyhow::Result<(R, Option<Stamp>)> {
        let _lock = self.lock()?;
        let mut jobs = self.read()?;
        let before = jobs.clone();
        let result = change(&mut jobs);
        if jobs != before {
            self.write(&jobs)?;
        }
        Ok((result, self.stamp()))
    }

    /// The file's current version (`None` when it does not exist).
    pub fn stamp(&self) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(&self.path).ok()?;
        Some(Stamp {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode: meta.ino(),
        })
    }

    fn lock(&self) -> anyhow::Result<File> {
        if let Some(dir) = self.lock_path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock_path)
            .with_context(|| format!("opening {}", self.lock_path.display()))?;
        file.lock()
            .with_context(|| format!("locking {}", self.lock_path.display()))?;
        Ok(file)
    }

    /// Reads the jobs (lock held). A missing file is an empty list; an unparsable one is moved
    /// aside and read as empty.
    fn read(&self) -> anyhow::Result<Vec<Job>> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.path.display())),
        };
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        match serde_json::from_str::<JobsFile>(&text) {
            Ok(file) => Ok(file.jobs),
            Err(e) => {
                let aside = self.move_aside(Utc::now())?;
                tracing::error!(
                    file = %self.path.display(),
                    moved_to = %aside.display(),
                    error = %e,
                    "scheduler.store.corrupt: the jobs file does not parse; it was moved aside and the scheduler starts with no jobs"
                );
                Ok(Vec::new())
            }
        }
    }

    fn move_aside(&self, now: DateTime<Utc>) -> anyhow::Result<PathBuf> {
        let stamp = now.format("%Y%m%dT%H%M%S%.3fZ");
        let aside = self
            .path
            .with_file_name(format!("jobs.json.corrupt-{stamp}"));
        fs::rename(&self.path, &aside)
            .with_context(|| format!("moving {} aside", self.path.display()))?;
        Ok(aside)
    }

    /// Atomically replaces the file (lock held). The temp file is removed if anything fails.
    fn write(&self, jobs: &[Job]) -> anyhow::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let body = serde_json::to_vec_pretty(&JobsFile {
            version: VERSION,
            jobs: jobs.to_vec(),
        })?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .with_context(|| format!("creating a temp file in {}", dir.display()))?;
        tmp.write_all(&body)?;
        tmp.write_all(b"\n")?;
        tmp.as_file().sync_all()?;
        tmp.persist(&self.path)
            .with_context(|| format!("replacing {}", self.path.display()))?;
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}
