//! The ledger in `BUB_HOME/usage.jsonl` ([`FileUsage`]): one small line per call, appended
//! under `usage.lock`, read once (at first use) into today's totals kept in memory; afterwards
//! only the bytes appended since are read (by this process or another: an append is one `write`
//! of a whole line under the lock). Past [`COMPACT_BYTES`] the lines of earlier days are summed
//! into one line per day, session, purpose and model, and days older than [`KEPT_DAYS`] are
//! dropped. The file work runs on the blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use chrono::NaiveDate;

use super::{Entry, Totals, UsageStore};
use crate::config::Prices;

/// The ledger's file in `BUB_HOME`.
pub const FILE: &str = "usage.jsonl";
/// Past this size the ledger's earlier days are summed up (at the next load).
pub(crate) const COMPACT_BYTES: u64 = 1 << 20;
/// Days kept in the ledger.
pub(crate) const KEPT_DAYS: i64 = 400;

/// The ledger file of one `BUB_HOME`, shared by the process's runtimes.
#[derive(Clone)]
pub(crate) struct FileUsage(Arc<Ledger>);

struct Ledger {
    path: PathBuf,
    lock: PathBuf,
    prices: Prices,
    state: Mutex<Option<State>>,
}

/// What has been read of the file.
#[derive(Default)]
struct State {
    day: Option<NaiveDate>,
    /// The file read: (device, inode) and the bytes read of it.
    file: Option<(u64, u64)>,
    read: u64,
    /// A line started but not yet ended (another process's append in flight).
    partial: Vec<u8>,
    today: Totals,
    /// The sessions that made calls today (a new day starts the state over).
    today_by_session: HashMap<String, Totals>,
}

impl FileUsage {
    /// The ledger of `home`, priced with `prices`.
    pub(crate) fn new(home: &Path, prices: Prices) -> Self {
        Self(Arc::new(Ledger {
            path: home.join(FILE),
            lock: home.join("usage.lock"),
            prices,
            state: Mutex::new(None),
        }))
    }

    /// Runs `f` on the ledger on the blocking pool.
    async fn blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Ledger) -> anyhow::Result<R> + Send + 'static,
    ) -> anyhow::Result<R> {
        let ledger = self.0.clone();
        crate::storage::blocking(move || f(&ledger)).await
    }
}

#[async_trait::async_trait]
impl UsageStore for FileUsage {
    async fn record(&self, today: NaiveDate, entry: Entry) -> anyhow::Result<()> {
        self.blocking(move |l| l.record(today, &entry)).await
    }

    fn is_blocking(&self) -> bool {
        true
    }

    fn record_blocking(&self, today: NaiveDate, entry: &Entry) -> anyhow::Result<()> {
        self.0.record(today, entry)
    }

    async fn today(&self, today: NaiveDate, session: &str) -> anyhow::Result<(Totals, Totals)> {
        let session = session.to_owned();
        self.blocking(move |l| {
            l.with_state_mut_as(true, today, |s| {
                let chat = s.today_by_session.get(&session).copied();
                Ok((s.today, chat.unwrap_or_default()))
            })
        })
        .await
    }

    async fn entries(
        &self,
        since: NaiveDate,
        until: NaiveDate,
        session: Option<&str>,
    ) -> anyhow::Result<Vec<Entry>> {
        let session = session.map(str::to_owned);
        self.blocking(move |l| {
            let mut entries = read(&l.path)?;
            entries.retain(|e| {
                e.date >= since
                    && e.date <= until
                    && session.as_ref().is_none_or(|s| *s == e.session)
            });
            Ok(entries)
        })
        .await
    }
}

impl Ledger {
    /// Appends one call's line and counts it. When nothing else was appended since the state
    /// last read the file, the entry is counted as it is (no read back); else the state catches
    /// up with everything, this line included.
    fn record(&self, today: NaiveDate, entry: &Entry) -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(entry)?;
        line.push(b'\n');
        // No catch-up first: the append sees whether anything else was appended.
        self.with_state_mut_as(false, today, |state| {
            let _lock = crate::storage::lock(&self.lock)?;
            let mut file = crate::storage::private_file()
                .create(true)
                .read(true)
                .append(true)
                .open(&self.path)
                .with_context(|| format!("opening {}", self.path.display()))?;
            // After a torn append (a crash, a full disk) the next line starts on a new line.
            let meta = file.metadata()?;
            let mut last = *b"\n";
            if meta.len() > 0 {
                std::os::unix::fs::FileExt::read_at(&file, &mut last, meta.len() - 1)?;
            }
            if last[0] != b'\n' {
                line.insert(0, b'\n');
            }
            file.write_all(&line)
                .with_context(|| format!("appending to {}", self.path.display()))?;
            let seen = state.file == Some((meta.dev(), meta.ino()))
                && state.read == meta.len()
                && state.partial.is_empty();
            if seen {
                state.read += line.len() as u64;
                self.add(state, entry, today);
            }
            Ok(())
        })
    }

    /// Runs `f` on the state of `today` (under its lock): read from scratch on the first use,
    /// on a new day and when the file was replaced; else, when `caught_up`, the bytes appended
    /// since the last read first.
    fn with_state_mut_as<T>(
        &self,
        caught_up: bool,
        today: NaiveDate,
        f: impl FnOnce(&mut State) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = guard.get_or_insert_with(State::default);
        if state.day != Some(today) {
            *state = State {
                day: Some(today),
                ..State::default()
            };
            self.compact_if_large(today)?;
        }
        if caught_up {
            self.catch_up(state, today)?;
        }
        f(state)
    }

    /// Reads what was appended since `state` last read (all of it for a new or replaced file).
    fn catch_up(&self, state: &mut State, today: NaiveDate) -> anyhow::Result<()> {
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("opening {}", self.path.display())),
        };
        let meta = file.metadata()?;
        let identity = (meta.dev(), meta.ino());
        if state.file != Some(identity) || meta.len() < state.read {
            *state = State {
                day: Some(today),
                file: Some(identity),
                ..State::default()
            };
        }
        if meta.len() == state.read {
            return Ok(());
        }
        file.seek(SeekFrom::Start(state.read))?;
        let mut bytes = std::mem::take(&mut state.partial);
        let start = bytes.len();
        file.take(meta.len() - state.read).read_to_end(&mut bytes)?;
        state.read += (bytes.len() - start) as u64;
        let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        state.partial = bytes.split_off(end);
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<Entry>(line) {
                Ok(entry) => self.add(state, &entry, today),
                Err(e) => tracing::warn!(error = %e, "usage.ledger.bad_line"),
            }
        }
        Ok(())
    }

    fn add(&self, state: &mut State, entry: &Entry, today: NaiveDate) {
        if entry.date == today {
            state.today.add(entry, &self.prices);
            state
                .today_by_session
                .entry(entry.session.clone())
                .or_default()
                .add(entry, &self.prices);
        }
    }

    /// Past [`COMPACT_BYTES`]: sums the days before `today` (one line per day, session, purpose
    /// and model), drops days older than [`KEPT_DAYS`], and replaces the file, under the lock.
    fn compact_if_large(&self, today: NaiveDate) -> anyhow::Result<()> {
        let large = std::fs::metadata(&self.path).is_ok_and(|m| m.len() > COMPACT_BYTES);
        if !large {
            return Ok(());
        }
        let _lock = crate::storage::lock(&self.lock)?;
        let oldest = today - chrono::Days::new(KEPT_DAYS as u64);
        let (old, kept): (Vec<Entry>, Vec<Entry>) = read(&self.path)?
            .into_iter()
            .filter(|e| e.date >= oldest)
            .partition(|e| e.date < today);
        let mut body = Vec::new();
        for entry in summed(old).into_values().chain(kept) {
            serde_json::to_writer(&mut body, &entry)?;
            body.push(b'\n');
        }
        body.pop(); // write_atomic ends the file with a newline
        crate::storage::write_atomic(&self.path, &body, Some(0o600))?;
        tracing::info!(bytes = body.len(), "usage.ledger.compacted");
        Ok(())
    }
}

/// A line's day, session, purpose (as JSON) and model.
pub(super) type Key = (NaiveDate, String, String, String);

/// `entries` summed per day, session, purpose and model.
pub(super) fn summed(entries: Vec<Entry>) -> BTreeMap<Key, Entry> {
    let mut summed: BTreeMap<Key, Entry> = BTreeMap::new();
    for entry in entries {
        let purpose = serde_json::to_string(&entry.purpose).unwrap_or_default();
        let key = (
            entry.date,
            entry.session.clone(),
            purpose,
            entry.model.clone(),
        );
        match summed.get_mut(&key) {
            Some(sum) => sum.absorb(&entry),
            None => drop(summed.insert(key, entry)),
        }
    }
    summed
}

/// Every entry of the ledger at `path` (none when it does not exist); bad lines are skipped.
pub fn read(path: &Path) -> anyhow::Result<Vec<Entry>> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(text
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect())
}
