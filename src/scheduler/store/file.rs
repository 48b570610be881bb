//! [`FileJobStore`]: `BUB_HOME/jobs.json`, the jobs of every process sharing one `BUB_HOME`.
//!
//! Invariants:
//! * the file is plain, pretty-printed JSON (`{"version": 1, "jobs": [...]}`), readable and
//!   editable by a person;
//! * every change is a read-modify-write under an exclusive advisory lock on `jobs.lock`, so
//!   processes never lose each other's changes;
//! * writes are atomic (temp file, fsync, rename, fsync of the folder): a crash leaves the old
//!   or the new file, never half of one;
//! * each job is read and checked on its own ([`Job::from_json`]; duplicate ids: the first is
//!   kept): one that cannot run is appended to `jobs.rejected.json` with its reason (logged
//!   with its id, never its message) and `jobs.json` is rewritten without it, so one bad job
//!   never costs the others; both files change under the same lock, the rejected file first,
//!   so a crash between the two writes repeats the rejection rather than losing the job (the
//!   repeat replaces the earlier entry for the same job). If the rejected file cannot be
//!   written, the job stays in `jobs.json` as it was and is only skipped;
//! * a file that is not JSON or has no `jobs` array is moved aside whole to
//!   `jobs.json.corrupt-<time>` (logged) and never overwritten; the same holds for a
//!   `jobs.rejected.json` that does not parse.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{Change, JobStore, Rejected, Version};
use crate::scheduler::job::Job;
use crate::storage::{self, Stamp};

const VERSION: u32 = 1;

/// `jobs.json` as read when every job deserializes (the usual case: one pass). Other fields
/// (`version`) are ignored.
#[derive(Deserialize)]
struct JobsIn {
    jobs: Vec<Job>,
}

/// `jobs.json` as read when some job does not: each job is kept as its raw text and read on
/// its own.
#[derive(Deserialize)]
struct RawJobsFile<'a> {
    #[serde(borrow)]
    jobs: Vec<&'a RawValue>,
}

/// `jobs.json` as written.
#[derive(Serialize)]
struct JobsFile<'a> {
    version: u32,
    jobs: Vec<Entry<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Entry<'a> {
    Job(&'a Job),
    /// A job that cannot run but could not be set aside: written back as it was.
    Kept(&'a RawValue),
}

/// `jobs.rejected.json`.
#[derive(Default, Serialize, Deserialize)]
struct RejectedFile {
    #[serde(default)]
    version: u32,
    rejected: Vec<Rejected>,
}

/// The jobs read from the file (lock held).
#[derive(Default)]
struct Read {
    jobs: Vec<Job>,
    /// Jobs that cannot run and could not be set aside; a rewrite keeps them as they were.
    kept: Vec<Box<RawValue>>,
}

/// The store in `BUB_HOME`: `jobs.json`, `jobs.rejected.json` and the lock file `jobs.lock`
/// (cheap to create; holds no open file).
#[derive(Debug, Clone)]
pub(crate) struct FileJobStore {
    path: PathBuf,
    lock_path: PathBuf,
    rejected_path: PathBuf,
}

#[async_trait::async_trait]
impl JobStore for FileJobStore {
    async fn load(&self) -> anyhow::Result<(Vec<Job>, Version)> {
        self.blocking(|store| store.load_now()).await
    }

    async fn update(&self, change: Change) -> anyhow::Result<Version> {
        self.blocking(move |store| store.update_now(change)).await
    }

    /// A `stat` of `jobs.json` (cheap enough for an async thread); never fails (a file that
    /// cannot be seen is "no file").
    async fn version(&self) -> anyhow::Result<Version> {
        Ok(self.current())
    }

    async fn rejected(&self) -> anyhow::Result<Vec<Rejected>> {
        self.blocking(|store| store.rejected_now()).await
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn rejected_location(&self) -> String {
        self.rejected_path.display().to_string()
    }
}

impl FileJobStore {
    /// Runs `f` on the store on the blocking pool.
    async fn blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&FileJobStore) -> anyhow::Result<R> + Send + 'static,
    ) -> anyhow::Result<R> {
        let store = self.clone();
        crate::storage::blocking(move || f(&store)).await
    }

    /// Reads `jobs.json` under the lock (a missing file is no jobs).
    pub(super) fn load_now(&self) -> anyhow::Result<(Vec<Job>, Version)> {
        let _lock = self.lock()?;
        let jobs = self.read()?.jobs;
        Ok((jobs, self.current()))
    }

    /// Read, change and atomic replace of `jobs.json`, all under the exclusive lock on
    /// `jobs.lock`.
    fn update_now(&self, change: Change) -> anyhow::Result<Version> {
        let _lock = self.lock()?;
        let Read { mut jobs, kept } = self.read()?;
        let before = jobs.clone();
        change(&mut jobs);
        if jobs != before {
            self.write(&jobs, &kept)?;
        }
        Ok(self.current())
    }

    /// Reads `jobs.rejected.json` under the lock (none when it does not exist). A file that does
    /// not parse is an error here (it is moved aside only when a job is next set aside).
    fn rejected_now(&self) -> anyhow::Result<Vec<Rejected>> {
        let _lock = self.lock()?;
        match read_rejected(&self.rejected_path)? {
            None => Ok(Vec::new()),
            Some(parsed) => Ok(parsed
                .with_context(|| format!("{} does not parse", self.rejected_path.display()))?
                .rejected),
        }
    }

    /// The store of `home` (`BUB_HOME`).
    pub(crate) fn new(home: &Path) -> Self {
        Self {
            path: home.join("jobs.json"),
            lock_path: home.join("jobs.lock"),
            rejected_path: home.join("jobs.rejected.json"),
        }
    }

    /// The version of `jobs.json` as it is now.
    fn current(&self) -> Version {
        Version::file(Stamp::of(&self.path))
    }

    fn lock(&self) -> anyhow::Result<File> {
        storage::lock(&self.lock_path)
    }

    /// Reads the jobs (lock held). A missing file is an empty list; one that is not JSON or has
    /// no `jobs` array is moved aside and read as empty; jobs that cannot run are set aside
    /// ([`FileJobStore::reject`]).
    fn read(&self) -> anyhow::Result<Read> {
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Read::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.path.display())),
        };
        if text.trim().is_empty() {
            return Ok(Read::default());
        }
        // The usual case in one pass over the text: every job deserializes and can run.
        if let Ok(file) = serde_json::from_str::<JobsIn>(&text)
            && file.jobs.iter().all(|job| job.check().is_ok())
            && duplicate_ids(&file.jobs).is_empty()
        {
            return Ok(Read {
                jobs: file.jobs,
                kept: Vec::new(),
            });
        }
        // Otherwise job by job, to set aside only the ones that cannot run.
        let raw = match serde_json::from_str::<RawJobsFile>(&text) {
            Ok(file) => file.jobs,
            Err(e) => {
                let aside = move_aside(&self.path, Utc::now())?;
                tracing::error!(
                    file = %self.path.display(),
                    moved_to = %aside.display(),
                    error = %e,
                    "scheduler.store.corrupt: the jobs file does not parse; it was moved aside and the scheduler starts with no jobs"
                );
                return Ok(Read::default());
            }
        };
        // Each job on its own; `at`: its position in the file.
        let (mut jobs, mut positions, mut bad) = (
            Vec::with_capacity(raw.len()),
            Vec::with_capacity(raw.len()),
            Vec::new(),
        );
        for (at, raw) in raw.iter().enumerate() {
            match Job::from_json(raw.get()) {
                Ok(job) => {
                    jobs.push(job);
                    positions.push(at);
                }
                Err(reason) => bad.push((at, *raw, reason)),
            }
        }
        let duplicates = duplicate_ids(&jobs);
        for i in duplicates.into_iter().rev() {
            let job = jobs.remove(i);
            let at = positions.remove(i);
            let reason = format!("duplicate id {:?} (the first job with it is kept)", job.id);
            bad.push((at, raw[at], reason));
        }
        bad.sort_by_key(|(at, ..)| *at);
        let bad: Vec<_> = bad
            .into_iter()
            .map(|(_, raw, reason)| (raw, reason))
            .collect();
        if bad.is_empty() {
            return Ok(Read {
                jobs,
                kept: Vec::new(),
            });
        }
        let kept = self.reject(&jobs, bad)?;
        Ok(Read { jobs, kept })
    }

    /// Sets aside the jobs that cannot run (lock held): appends them to `jobs.rejected.json`,
    /// then rewrites `jobs.json` with only the `valid` ones. Returns the jobs to keep in
    /// `jobs.json` as they were: all of them when the rejected file cannot be written.
    fn reject(
        &self,
        valid: &[Job],
        bad: Vec<(&RawValue, String)>,
    ) -> anyhow::Result<Vec<Box<RawValue>>> {
        let now = Utc::now();
        let entries = bad
            .iter()
            .map(|(raw, reason)| {
                Ok(Rejected {
                    job: serde_json::from_str(raw.get())?,
                    reason: reason.clone(),
                    rejected_at: now,
                })
            })
            .collect::<serde_json::Result<Vec<_>>>()?;
        match self.append_rejected(entries.clone(), now) {
            Ok(()) => {
                for entry in &entries {
                    tracing::error!(
                        job = entry.id().unwrap_or("-"),
                        reason = %entry.reason,
                        file = %self.path.display(),
                        set_aside_in = %self.rejected_path.display(),
                        "scheduler.store.rejected: a job cannot run; it was set aside and the other jobs keep running"
                    );
                }
                self.write(valid, &[])?;
                Ok(Vec::new())
            }
            Err(e) => {
                for entry in &entries {
                    tracing::error!(
                        job = entry.id().unwrap_or("-"),
                        reason = %entry.reason,
                        file = %self.path.display(),
                        error = %format!("{e:#}"),
                        "scheduler.store.rejected: a job cannot run and could not be set aside; it stays in the jobs file and is skipped"
                    );
                }
                Ok(bad.into_iter().map(|(raw, _)| raw.to_owned()).collect())
            }
        }
    }

    /// Appends `entries` to `jobs.rejected.json` (lock held; atomic replace). An entry for the
    /// same job as an earlier one replaces it, so a rejection repeated after a crash between
    /// the two writes is not listed twice. A file that does not parse is moved aside first.
    fn append_rejected(&self, entries: Vec<Rejected>, now: DateTime<Utc>) -> anyhow::Result<()> {
        let path = &self.rejected_path;
        let mut file = match read_rejected(path)? {
            None => RejectedFile::default(),
            Some(Ok(file)) => file,
            Some(Err(e)) => {
                let aside = move_aside(path, now)?;
                tracing::error!(
                    file = %path.display(),
                    moved_to = %aside.display(),
                    error = %e,
                    "scheduler.store.corrupt: the rejected jobs file does not parse; it was moved aside"
                );
                RejectedFile::default()
            }
        };
        file.version = VERSION;
        for entry in entries {
            file.rejected.retain(|old| old.job != entry.job);
            file.rejected.push(entry);
        }
        write_atomic(path, &file)
    }

    /// Atomically replaces `jobs.json` (lock held).
    fn write(&self, jobs: &[Job], kept: &[Box<RawValue>]) -> anyhow::Result<()> {
        let jobs = jobs
            .iter()
            .map(Entry::Job)
            .chain(kept.iter().map(|raw| Entry::Kept(raw)))
            .collect();
        write_atomic(
            &self.path,
            &JobsFile {
                version: VERSION,
                jobs,
            },
        )
    }
}

/// The positions of jobs whose id an earlier job has (the first job of an id is kept).
fn duplicate_ids(jobs: &[Job]) -> Vec<usize> {
    let mut seen = HashSet::with_capacity(jobs.len());
    (0..jobs.len())
        .filter(|&i| !seen.insert(jobs[i].id.as_str()))
        .collect()
}

/// Reads `jobs.rejected.json`: `None` when it is missing or empty, the parse error when it
/// does not parse; an I/O error is the outer error.
fn read_rejected(path: &Path) -> anyhow::Result<Option<serde_json::Result<RejectedFile>>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    Ok(Some(serde_json::from_str(&text)))
}

/// Renames `path` to `<name>.corrupt-<time>` next to it.
fn move_aside(path: &Path, now: DateTime<Utc>) -> anyhow::Result<PathBuf> {
    let stamp = now.format("%Y%m%dT%H%M%S%.3fZ");
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let aside = path.with_file_name(format!("{name}.corrupt-{stamp}"));
    fs::rename(path, &aside).with_context(|| format!("moving {} aside", path.display()))?;
    Ok(aside)
}

/// Atomically replaces `path` with `value` as pretty JSON ([`storage::write_atomic`]).
fn write_atomic(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    storage::write_atomic(path, &serde_json::to_vec_pretty(value)?, None)
}
