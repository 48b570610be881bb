//! The usage ledger: what every model call of this `BUB_HOME` used, one small line per call in
//! `BUB_HOME/usage.jsonl` (day, session, what the call was for, model, tokens), and the daily
//! budgets checked against it before a call.
//!
//! The ledger is read once (at first use) into today's totals (all sessions, and per session —
//! a session's month is read from the file when asked), kept in memory; afterwards only the bytes appended since are
//! read (by this process or another: an append is one `write` of a whole line under
//! `usage.lock`). The file stays bounded: past [`COMPACT_BYTES`], the lines of earlier days
//! are summed into one line per day, session, purpose and model, and days older than
//! [`KEPT_DAYS`] are dropped. Every method does file I/O: call them on the blocking pool.
//!
//! With replicas (`BUB_DATABASE_URL`) the ledger is the database's (`pg`): a row per call,
//! summed when a budget is checked, so the budgets hold across replicas.
//!
//! Days are the process's local days: budgets reset at local midnight. The clock is
//! injectable ([`Clock`]) for tests.

mod pg;
mod report;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::{Datelike, NaiveDate, NaiveDateTime};
use serde::{Deserialize, Serialize};

use crate::config::{Budgets, Prices};
use crate::llm::Usage;

pub use report::{Summary, Totals, session_text, thousands};

/// The ledger's file in `BUB_HOME`.
pub const FILE: &str = "usage.jsonl";
/// Past this size the ledger's earlier days are summed up (at the next load).
pub(crate) const COMPACT_BYTES: u64 = 1 << 20;
/// Days kept in the ledger.
pub(crate) const KEPT_DAYS: i64 = 400;

/// The local date and time now.
pub type Clock = Arc<dyn Fn() -> NaiveDateTime + Send + Sync>;

/// The system's local clock.
pub fn local_clock() -> Clock {
    Arc::new(|| chrono::Local::now().naive_local())
}

/// What a model call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    /// A step of a turn.
    Step,
    /// The summary of a compaction.
    Compaction,
    /// A learning call after a turn.
    Learning,
}

/// One line of the ledger: one call, or (after compaction) the calls of one day, session,
/// purpose and model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub date: NaiveDate,
    pub session: String,
    #[serde(rename = "for")]
    pub purpose: Purpose,
    /// `provider:model`.
    pub model: String,
    pub input: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
    pub output: u64,
    /// Calls whose usage is Bub's estimate (the provider reported none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated: u64,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub calls: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
fn is_one(n: &u64) -> bool {
    *n == 1
}
fn one() -> u64 {
    1
}

impl Entry {
    /// The line of one call.
    pub fn call(date: NaiveDate, session: &str, purpose: Purpose, model: &str, u: &Usage) -> Self {
        Self {
            date,
            session: session.to_owned(),
            purpose,
            model: model.to_owned(),
            input: u.input,
            cache_read: u.cache_read,
            cache_write: u.cache_write,
            output: u.output,
            estimated: u64::from(u.estimated),
            calls: 1,
        }
    }

    /// The tokens as a [`Usage`] (for prices).
    pub fn usage(&self) -> Usage {
        Usage {
            input: self.input,
            cache_read: self.cache_read,
            cache_write: self.cache_write,
            output: self.output,
            estimated: self.estimated > 0,
        }
    }

    fn absorb(&mut self, other: &Entry) {
        self.input += other.input;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.output += other.output;
        self.estimated += other.estimated;
        self.calls += other.calls;
    }
}

/// A budget a call would pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    /// The variable that sets it (`BUB_BUDGET_CHAT_DAILY_TOKENS`).
    pub budget: &'static str,
    /// Its limit and what the day used, in its unit (`50,000 tokens`, `$2.00`).
    pub limit: String,
    pub spent: String,
    /// Until local midnight.
    pub resets_in: Duration,
}

impl Exceeded {
    /// The short message the chat gets.
    pub fn message(&self) -> String {
        let whose = if self.budget == "BUB_BUDGET_CHAT_DAILY_TOKENS" {
            "This chat's daily"
        } else {
            "Bub's daily"
        };
        format!(
            "{whose} budget is used up ({} of {}). It resets at midnight, in {}; an owner can \
             raise {} in Bub's configuration.",
            self.spent,
            self.limit,
            crate::time::human_duration(self.resets_in),
            self.budget
        )
    }
}

/// A call about to be made, for the budget check.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub session: &'a str,
    pub model: &'a str,
    /// The chat budget applies (a guest's turn, or any with `BUB_BUDGET_OWNERS`).
    pub chat_limited: bool,
    /// The input tokens the call will send, estimated.
    pub input: u64,
}

/// The ledger of one `BUB_HOME`, shared by the process's runtimes (with replicas, the
/// database's, shared by all of them).
pub struct Ledger {
    /// With replicas: the database's rows instead of the file (`pg`).
    db: Option<Arc<crate::db::Database>>,
    path: PathBuf,
    lock: PathBuf,
    prices: Prices,
    budgets: Budgets,
    clock: Clock,
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

impl Ledger {
    /// The ledger of `home`, priced with `prices`, checking `budgets`, on the local clock.
    pub fn new(home: &Path, prices: Prices, budgets: Budgets) -> Self {
        Self::with_clock(home, prices, budgets, local_clock())
    }

    /// [`Self::new`] on another clock.
    pub fn with_clock(home: &Path, prices: Prices, budgets: Budgets, clock: Clock) -> Self {
        Self {
            db: None,
            path: home.join(FILE),
            lock: home.join("usage.lock"),
            prices,
            budgets,
            clock,
            state: Mutex::new(None),
        }
    }

    /// The ledger in `db` (the replicas' database), when there is one, instead of the file.
    pub fn on_database(mut self, db: Option<Arc<crate::db::Database>>) -> Self {
        self.db = db;
        self
    }

    /// Today by the ledger's clock.
    pub fn today(&self) -> NaiveDate {
        (self.clock)().date()
    }

    /// Whether any daily budget is set (else [`Self::check`] always passes, reading nothing).
    pub fn has_budgets(&self) -> bool {
        self.budgets.any()
    }

    /// `BUB_BUDGET_OWNERS`: the chat budget applies to owners too.
    pub(crate) fn limits_owners(&self) -> bool {
        self.budgets.owners
    }

    /// Appends one call's line and counts it. When nothing else was appended since the state
    /// last read the file, the entry is counted as it is (no read back); else the state catches
    /// up with everything, this line included.
    pub fn record(&self, entry: &Entry) -> anyhow::Result<()> {
        if let Some(db) = &self.db {
            return pg::record(db, entry, None).map(drop);
        }
        let mut line = serde_json::to_vec(entry)?;
        line.push(b'\n');
        // No catch-up first: the append sees whether anything else was appended.
        self.with_state_mut_as(false, |state, today| {
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

    /// Today's totals, all sessions.
    pub fn today_totals(&self) -> anyhow::Result<Totals> {
        Ok(self.today_and("")?.0)
    }

    /// Today's totals: all sessions', and `session`'s.
    fn today_and(&self, session: &str) -> anyhow::Result<(Totals, Totals)> {
        let Some(db) = &self.db else {
            return self.with_state(|s| {
                let chat = s.today_by_session.get(session).copied();
                (s.today, chat.unwrap_or_default())
            });
        };
        let today = self.today();
        let (mut all, mut chat) = (Totals::default(), Totals::default());
        for entry in pg::entries(db, today, today, None)? {
            all.add(&entry, &self.prices);
            if entry.session == session {
                chat.add(&entry, &self.prices);
            }
        }
        Ok((all, chat))
    }

    /// A session's totals today and this month. The month is read from the file (`/usage` is
    /// rare; keeping every session of the month in memory would not be).
    pub fn session_totals(&self, session: &str) -> anyhow::Result<(Totals, Totals)> {
        let today = self.today_and(session)?.1;
        let date = self.today();
        let mut month = Totals::default();
        let entries = match &self.db {
            Some(db) => pg::entries(db, date.with_day(1).unwrap_or(date), date, Some(session))?,
            None => read(&self.path)?,
        };
        for entry in entries {
            let same_month = (entry.date.year(), entry.date.month()) == (date.year(), date.month());
            if entry.session == session && same_month && entry.date <= date {
                month.add(&entry, &self.prices);
            }
        }
        Ok((today, month))
    }

    /// `Err(Exceeded)` when the call `ask` describes would pass a daily budget.
    pub fn check(&self, ask: Ask<'_>) -> anyhow::Result<Result<(), Exceeded>> {
        let now = (self.clock)();
        let b = &self.budgets;
        if !b.any() {
            return Ok(Ok(()));
        }
        let midnight = now
            .date()
            .succ_opt()
            .unwrap_or(now.date())
            .and_time(Default::default());
        let resets_in = (midnight - now).to_std().unwrap_or_default();
        let (today, chat) = self.today_and(ask.session)?;
        let over = |budget, limit: String, spent: String| Exceeded {
            budget,
            limit,
            spent,
            resets_in,
        };
        let tokens = |n: u64| format!("{} tokens", report::thousands(n));
        if let Some(limit) = b.chat_daily_tokens.filter(|_| ask.chat_limited)
            && chat.tokens().saturating_add(ask.input) > limit
        {
            let spent = tokens(chat.tokens());
            return Ok(Err(over(
                "BUB_BUDGET_CHAT_DAILY_TOKENS",
                tokens(limit),
                spent,
            )));
        }
        if let Some(limit) = b.daily_tokens
            && today.tokens().saturating_add(ask.input) > limit
        {
            let spent = tokens(today.tokens());
            return Ok(Err(over("BUB_BUDGET_DAILY_TOKENS", tokens(limit), spent)));
        }
        if let Some(limit) = b.daily_usd {
            let price = self.prices.for_budget(ask.model);
            let next = price.map_or(0.0, |p| {
                p.cost(&Usage {
                    input: ask.input,
                    ..Usage::default()
                })
            });
            if today.budget_usd + next > limit {
                let usd = |x: f64| format!("${x:.2}");
                return Ok(Err(over(
                    "BUB_BUDGET_DAILY_USD",
                    usd(limit),
                    usd(today.budget_usd),
                )));
            }
        }
        Ok(Ok(()))
    }

    /// Runs `f` on the state brought up to date: read from scratch on the first use, on a new
    /// day and when the file was replaced; else the bytes appended since the last read.
    fn with_state<T>(&self, f: impl FnOnce(&State) -> T) -> anyhow::Result<T> {
        self.with_state_mut(|state, _| Ok(f(state)))
    }

    /// [`Self::with_state`] for a change of the state (under its lock) on `today`.
    fn with_state_mut<T>(
        &self,
        f: impl FnOnce(&mut State, NaiveDate) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        self.with_state_mut_as(true, f)
    }

    /// [`Self::with_state_mut`], reading what was appended since the state last read the file
    /// first only when `caught_up`.
    fn with_state_mut_as<T>(
        &self,
        caught_up: bool,
        f: impl FnOnce(&mut State, NaiveDate) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let today = self.today();
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
        f(state, today)
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
        let entries = read(&self.path)?;
        let oldest = today - chrono::Days::new(KEPT_DAYS as u64);
        let mut summed: BTreeMap<(NaiveDate, String, String, String), Entry> = BTreeMap::new();
        let mut kept: Vec<Entry> = Vec::new();
        for entry in entries.into_iter().filter(|e| e.date >= oldest) {
            if entry.date >= today {
                kept.push(entry);
                continue;
            }
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
        let mut body = Vec::new();
        for entry in summed.into_values().chain(kept) {
            serde_json::to_writer(&mut body, &entry)?;
            body.push(b'\n');
        }
        body.pop(); // write_atomic ends the file with a newline
        crate::storage::write_atomic(&self.path, &body, Some(0o600))?;
        tracing::info!(bytes = body.len(), "usage.ledger.compacted");
        Ok(())
    }
}

/// Every entry of the ledger of `settings`: `BUB_HOME`'s file, or the replicas' database
/// (summed per day, session, purpose and model).
pub fn entries(settings: &crate::config::Settings) -> anyhow::Result<Vec<Entry>> {
    match settings.database()? {
        Some(db) => {
            let (first, last) = (
                NaiveDate::from_ymd_opt(1970, 1, 1),
                NaiveDate::from_ymd_opt(9999, 12, 31),
            );
            pg::entries(
                &db,
                first.unwrap_or_default(),
                last.unwrap_or_default(),
                None,
            )
        }
        None => read(&settings.home.join(FILE)),
    }
}

/// Copies the ledger of `home` into `db` (`bub db import`), summed per day, session, purpose
/// and model; a sum imported before is kept (running it again adds nothing). Returns how many
/// rows were added.
pub(crate) fn import(home: &Path, db: &Arc<crate::db::Database>) -> anyhow::Result<usize> {
    let mut summed: BTreeMap<String, Entry> = BTreeMap::new();
    for entry in read(&home.join(FILE))? {
        let purpose = serde_json::to_string(&entry.purpose).unwrap_or_default();
        let key = format!("{}|{}|{purpose}|{}", entry.date, entry.session, entry.model);
        match summed.get_mut(&key) {
            Some(sum) => sum.absorb(&entry),
            None => drop(summed.insert(key, entry)),
        }
    }
    let mut added = 0;
    for (key, entry) in summed {
        added += usize::from(pg::record(db, &entry, Some(key))?);
    }
    Ok(added)
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

#[cfg(test)]
mod tests;
