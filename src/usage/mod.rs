//! The usage ledger: what every model call of this `BUB_HOME` used (day, session, what the
//! call was for, model, tokens), and the daily budgets checked against it before a call.
//!
//! [`Ledger`] holds the budgets and the clock over a [`UsageStore`], chosen once ([`open`]):
//! `BUB_HOME/usage.jsonl` (`file`: today's totals kept in memory, only what was appended since
//! read, earlier days summed up past a size), or with replicas (`BUB_DATABASE_URL`) the
//! database's rows (`pg`: a row per call, summed when a budget is checked), so the budgets hold
//! across replicas.
//!
//! Days are the process's local days: budgets reset at local midnight. The clock is
//! injectable ([`Clock`]) for tests.

mod file;
#[cfg(feature = "postgres")]
mod pg;
mod report;

#[cfg(feature = "postgres")]
pub(crate) use pg::import;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{Datelike, NaiveDate, NaiveDateTime};
use serde::{Deserialize, Serialize};

use crate::config::{Budgets, Prices};
use crate::db::Database;
use crate::llm::Usage;

#[cfg(test)]
pub(crate) use file::{COMPACT_BYTES, KEPT_DAYS};
pub use file::{FILE, read};
pub use report::{Summary, Totals, session_text, thousands};

/// The local date and time now.
pub type Clock = Arc<dyn Fn() -> NaiveDateTime + Send + Sync>;

/// The system's local clock.
pub(crate) fn local_clock() -> Clock {
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

/// Where the ledger's lines are kept: the file of `BUB_HOME` or the replicas' database.
#[async_trait::async_trait]
pub trait UsageStore: Send + Sync {
    /// Appends one call's entry (`today` by the ledger's clock).
    async fn record(&self, today: NaiveDate, entry: Entry) -> anyhow::Result<()>;

    /// Whether the store's work is blocking file I/O, which [`Self::record_blocking`] does on
    /// the caller's thread (else it fails).
    fn is_blocking(&self) -> bool {
        false
    }

    /// [`Self::record`] for a caller already off the async threads.
    fn record_blocking(&self, _today: NaiveDate, _entry: &Entry) -> anyhow::Result<()> {
        anyhow::bail!("the usage store's work is not blocking")
    }

    /// The totals of `today`: all sessions', and `session`'s.
    async fn today(&self, today: NaiveDate, session: &str) -> anyhow::Result<(Totals, Totals)>;

    /// The entries from `since` to `until` (inclusive), of `session` or all.
    async fn entries(
        &self,
        since: NaiveDate,
        until: NaiveDate,
        session: Option<&str>,
    ) -> anyhow::Result<Vec<Entry>>;
}

/// The ledger of `home` priced with `prices`: `BUB_HOME/usage.jsonl`, or the rows of
/// `database` when there is one.
pub fn open(home: &Path, prices: &Prices, database: Option<&Arc<Database>>) -> Arc<dyn UsageStore> {
    match database {
        #[cfg(not(feature = "postgres"))]
        Some(db) => match **db {},
        #[cfg(feature = "postgres")]
        Some(db) => Arc::new(pg::PgUsage {
            db: db.clone(),
            prices: prices.clone(),
        }),
        None => Arc::new(file::FileUsage::new(home, prices.clone())),
    }
}

/// The ledger and the daily budgets of one `BUB_HOME`, shared by the process's runtimes.
pub struct Ledger {
    store: Arc<dyn UsageStore>,
    prices: Prices,
    budgets: Budgets,
    clock: Clock,
}

impl Ledger {
    /// The ledger in `store`, priced with `prices`, checking `budgets`, on the local clock.
    pub fn new(store: Arc<dyn UsageStore>, prices: Prices, budgets: Budgets) -> Self {
        Self::with_clock(store, prices, budgets, local_clock())
    }

    /// [`Self::new`] on another clock.
    pub fn with_clock(
        store: Arc<dyn UsageStore>,
        prices: Prices,
        budgets: Budgets,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            prices,
            budgets,
            clock,
        }
    }

    /// Today by the ledger's clock.
    pub fn today(&self) -> NaiveDate {
        (self.clock)().date()
    }

    /// Whether any daily budget is set (else [`Self::check`] always passes, reading nothing).
    pub(crate) fn has_budgets(&self) -> bool {
        self.budgets.any()
    }

    /// `BUB_BUDGET_OWNERS`: the chat budget applies to owners too.
    pub(crate) fn limits_owners(&self) -> bool {
        self.budgets.owners
    }

    /// Appends one call's entry.
    pub async fn record(&self, entry: Entry) -> anyhow::Result<()> {
        self.store.record(self.today(), entry).await
    }

    /// Whether [`Self::record_blocking`] works: the store's work is blocking file I/O.
    pub(crate) fn is_blocking(&self) -> bool {
        self.store.is_blocking()
    }

    /// [`Self::record`] for a caller already off the async threads (a tape's batch).
    pub(crate) fn record_blocking(&self, entry: &Entry) -> anyhow::Result<()> {
        self.store.record_blocking(self.today(), entry)
    }

    /// Today's totals, all sessions.
    pub(crate) async fn today_totals(&self) -> anyhow::Result<Totals> {
        Ok(self.store.today(self.today(), "").await?.0)
    }

    /// A session's totals today and this month.
    pub(crate) async fn session_totals(&self, session: &str) -> anyhow::Result<(Totals, Totals)> {
        let date = self.today();
        let today = self.store.today(date, session).await?.1;
        let mut month = Totals::default();
        let first = date.with_day(1).unwrap_or(date);
        for entry in self.store.entries(first, date, Some(session)).await? {
            month.add(&entry, &self.prices);
        }
        Ok((today, month))
    }

    /// `Err(Exceeded)` when the call `ask` describes would pass a daily budget.
    pub async fn check(&self, ask: Ask<'_>) -> anyhow::Result<Result<(), Exceeded>> {
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
        let (today, chat) = self.store.today(now.date(), ask.session).await?;
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
}

/// Every entry of the ledger of `settings`: `BUB_HOME`'s file, or the replicas' database
/// (summed per day, session, purpose and model).
pub async fn entries(settings: &crate::config::Settings) -> anyhow::Result<Vec<Entry>> {
    let store = open(
        &settings.home,
        &settings.prices,
        settings.database()?.as_ref(),
    );
    let (first, last) = (
        NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default(),
        NaiveDate::from_ymd_opt(9999, 12, 31).unwrap_or_default(),
    );
    store.entries(first, last, None).await
}

#[cfg(test)]
mod tests;
