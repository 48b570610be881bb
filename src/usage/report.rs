//! Usage summed up and shown: [`Totals`] (tokens, cache-hit rate, cost when priced), the
//! `,usage` text of a session, and [`Summary`], what `bub usage` prints (per session and day).

use std::collections::BTreeMap;

use chrono::NaiveDate;
use serde::Serialize;

use super::Entry;
use crate::config::Prices;

/// The calls of some span summed up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    pub calls: u64,
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
    /// Calls whose tokens are Bub's estimate.
    pub estimated: u64,
    /// The cost of the priced calls, in USD.
    pub usd: f64,
    /// Calls of models without a price (not in `usd`).
    pub unpriced: u64,
    /// What the daily USD budget counts: `usd`, plus the unpriced calls at the table's
    /// highest prices.
    #[serde(skip)]
    pub budget_usd: f64,
}

impl Totals {
    /// Adds `entry`, priced with `prices`.
    pub fn add(&mut self, entry: &Entry, prices: &Prices) {
        self.calls += entry.calls;
        self.input += entry.input;
        self.cache_read += entry.cache_read;
        self.cache_write += entry.cache_write;
        self.output += entry.output;
        self.estimated += entry.estimated;
        let usage = entry.usage();
        match prices.of(&entry.model) {
            Some(price) => self.usd += price.cost(&usage),
            None => self.unpriced += entry.calls,
        }
        if let Some(price) = prices.for_budget(&entry.model) {
            self.budget_usd += price.cost(&usage);
        }
    }

    /// Input and output tokens.
    pub fn tokens(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// The share of the input read from the provider's cache (`None` without input).
    pub fn cache_hit_rate(&self) -> Option<f64> {
        (self.input > 0).then(|| self.cache_read as f64 / self.input as f64)
    }

    /// `12,345 tokens (input 12,000, 80% from cache; output 345) in 4 calls, $0.0123`.
    pub fn describe(&self) -> String {
        if self.calls == 0 {
            return "no model calls".to_owned();
        }
        let hit = self
            .cache_hit_rate()
            .map(|r| format!(", {:.0}% from cache", r * 100.0))
            .unwrap_or_default();
        let mut text = format!(
            "{} tokens (input {}{hit}; output {}) in {} call{}",
            thousands(self.tokens()),
            thousands(self.input),
            thousands(self.output),
            self.calls,
            if self.calls == 1 { "" } else { "s" }
        );
        text.push_str(&self.cost());
        if self.estimated > 0 {
            text.push_str(&format!(" ({} estimated by Bub)", self.estimated));
        }
        text
    }

    /// `, $0.0123` (`, $0.0123 + 2 unpriced calls`), or nothing when no call was priced.
    fn cost(&self) -> String {
        let priced = self.calls - self.unpriced.min(self.calls);
        match (priced, self.unpriced) {
            (0, _) => String::new(),
            (_, 0) => format!(", {}", usd(self.usd)),
            (_, n) => format!(", {} + {n} unpriced", usd(self.usd)),
        }
    }
}

/// `$0.0123` (four decimals under a dollar, else two).
pub(crate) fn usd(x: f64) -> String {
    if x < 1.0 {
        format!("${x:.4}")
    } else {
        format!("${x:.2}")
    }
}

/// `12345` as `12,345`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The `,usage` text of a session.
pub fn session_text(session: &str, today: &Totals, month: &Totals) -> String {
    format!(
        "Usage of {session}\ntoday: {}\nthis month: {}",
        today.describe(),
        month.describe()
    )
}

/// What `bub usage` shows: the ledger since a day, per day and session, and in all.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub since: Option<NaiveDate>,
    pub rows: Vec<Row>,
    pub total: Totals,
}

/// One day of one session.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub date: NaiveDate,
    pub session: String,
    #[serde(flatten)]
    pub totals: Totals,
    pub cache_hit_rate: Option<f64>,
}

impl Summary {
    /// `entries` from `since` on (all when `None`), priced with `prices`.
    pub fn of(entries: &[Entry], since: Option<NaiveDate>, prices: &Prices) -> Self {
        let mut by_day: BTreeMap<(NaiveDate, &str), Totals> = BTreeMap::new();
        let mut total = Totals::default();
        for entry in entries.iter().filter(|e| since.is_none_or(|d| e.date >= d)) {
            by_day
                .entry((entry.date, &entry.session))
                .or_default()
                .add(entry, prices);
            total.add(entry, prices);
        }
        let rows = by_day
            .into_iter()
            .map(|((date, session), totals)| Row {
                date,
                session: session.to_owned(),
                cache_hit_rate: totals.cache_hit_rate(),
                totals,
            })
            .collect();
        Self { since, rows, total }
    }

    /// The table for a terminal (session names escaped: they come from chats).
    pub fn render(&self) -> String {
        if self.rows.is_empty() {
            return match self.since {
                Some(day) => format!("no model calls recorded since {day}"),
                None => "no model calls recorded yet: every call a turn makes is counted here \
                         (tokens, cache hits, cost when the model is priced)"
                    .to_owned(),
            };
        }
        let mut lines = Vec::new();
        for row in &self.rows {
            lines.push(format!(
                "{}  {}  {}",
                row.date,
                crate::terminal::safe_line(&row.session),
                row.totals.describe()
            ));
        }
        lines.push(format!("total: {}", self.total.describe()));
        lines.join("\n")
    }
}
