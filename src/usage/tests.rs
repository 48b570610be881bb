use std::sync::atomic::{AtomicI64, Ordering};

use super::*;
use crate::config::Price;

/// A clock that reads `minutes` past 2026-11-25 00:00.
fn clock(minutes: Arc<AtomicI64>) -> Clock {
    let start = NaiveDate::from_ymd_opt(2026, 11, 25)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    Arc::new(move || start + chrono::Duration::minutes(minutes.load(Ordering::SeqCst)))
}

/// The ledger of `home`'s file.
fn file_ledger(home: &Path, prices: Prices, budgets: Budgets, clock: Clock) -> Ledger {
    Ledger::with_clock(open(home, &prices, None), prices, budgets, clock)
}

fn call(date: NaiveDate, session: &str, input: u64, output: u64) -> Entry {
    let usage = Usage {
        input,
        cache_read: input / 2,
        output,
        ..Usage::default()
    };
    Entry::call(date, session, Purpose::Step, "openai:m", &usage)
}

/// Whether `ledger` lets the call `ask` describes be made.
async fn allowed(ledger: &Ledger, ask: Ask<'_>) -> bool {
    ledger.check(ask).await.unwrap().is_ok()
}

fn ask(session: &str, input: u64, chat_limited: bool) -> Ask<'_> {
    Ask {
        session,
        model: "openai:m",
        chat_limited,
        input,
    }
}

#[tokio::test]
async fn budgets_hold_for_the_day_and_reset_at_local_midnight() {
    let dir = tempfile::tempdir().unwrap();
    let minutes = Arc::new(AtomicI64::new(23 * 60 + 50)); // 23:50
    let budgets = Budgets {
        daily_tokens: Some(1_000),
        chat_daily_tokens: Some(300),
        ..Budgets::default()
    };
    let ledger = file_ledger(
        dir.path(),
        Prices::default(),
        budgets,
        clock(minutes.clone()),
    );
    let today = ledger.today();
    ledger
        .record(call(today, "telegram:1", 200, 50))
        .await
        .unwrap();
    // The chat's own budget: 250 used, a call of 100 more would pass 300 — for guests only.
    let over = ledger
        .check(ask("telegram:1", 100, true))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(over.budget, "BUB_BUDGET_CHAT_DAILY_TOKENS");
    assert_eq!(over.spent, "250 tokens");
    assert_eq!(over.resets_in, Duration::from_secs(600));
    assert!(over.message().contains("in 10m 0s"), "{}", over.message());
    assert!(allowed(&ledger, ask("telegram:1", 40, true)).await);
    assert!(allowed(&ledger, ask("telegram:1", 100, false)).await);
    // The daily budget counts every session.
    ledger
        .record(call(today, "telegram:2", 600, 100))
        .await
        .unwrap();
    assert!(allowed(&ledger, ask("telegram:3", 50, false)).await);
    let over = ledger
        .check(ask("telegram:3", 60, false))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(over.budget, "BUB_BUDGET_DAILY_TOKENS");
    assert_eq!(over.spent, "950 tokens");
    // After midnight: a new day, nothing spent; the month still counts yesterday.
    minutes.fetch_add(20, Ordering::SeqCst);
    assert!(allowed(&ledger, ask("telegram:3", 60, false)).await);
    let (day, month) = ledger.session_totals("telegram:2").await.unwrap();
    assert_eq!((day.calls, month.calls, month.tokens()), (0, 1, 700));
}

#[tokio::test]
async fn another_process_s_appends_are_counted_and_lines_are_priced() {
    let dir = tempfile::tempdir().unwrap();
    let mut prices = Prices::parse([(
        "openai:m".to_owned(),
        vec![
            ("input".to_owned(), Some(1.0)),
            ("cached_input".to_owned(), Some(0.1)),
            ("output".to_owned(), Some(2.0)),
        ],
    )])
    .unwrap();
    assert_eq!(
        prices.of("openai:m"),
        Some(&Price {
            input: 1.0,
            cached_input: 0.1,
            cache_write: 1.0,
            output: 2.0
        })
    );
    let budgets = Budgets {
        daily_usd: Some(1.0),
        ..Budgets::default()
    };
    let minutes = Arc::new(AtomicI64::new(600));
    let one = file_ledger(
        dir.path(),
        prices.clone(),
        budgets.clone(),
        clock(minutes.clone()),
    );
    let other = file_ledger(dir.path(), prices.clone(), budgets, clock(minutes));
    let today = one.today();
    assert_eq!(one.today_totals().await.unwrap().calls, 0);
    // 1M input (half cached) and 100k output: 0.5 + 0.05 + 0.2 = $0.75.
    other
        .record(call(today, "a", 1_000_000, 100_000))
        .await
        .unwrap();
    let totals = one.today_totals().await.unwrap();
    assert_eq!(totals.calls, 1);
    assert!((totals.usd - 0.75).abs() < 1e-9, "{}", totals.usd);
    assert_eq!(totals.cache_hit_rate(), Some(0.5));
    // 300k more input at $1/M would pass $1.
    let over = one
        .check(ask("b", 300_000, false))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        (over.budget, over.spent.as_str()),
        ("BUB_BUDGET_DAILY_USD", "$0.75")
    );
    // A model without a price counts at the table's highest prices for the budget.
    let unpriced = Entry::call(
        today,
        "b",
        Purpose::Learning,
        "other:x",
        &Usage {
            input: 100_000,
            ..Usage::default()
        },
    );
    other.record(unpriced).await.unwrap();
    let totals = one.today_totals().await.unwrap();
    assert_eq!((totals.unpriced, totals.calls), (1, 2));
    assert!((totals.budget_usd - 0.85).abs() < 1e-9);
    assert!(
        totals.describe().contains("+ 1 unpriced"),
        "{}",
        totals.describe()
    );
    prices = Prices::default();
    assert_eq!(prices.for_budget("openai:m"), None);
}

#[tokio::test]
async fn a_large_ledger_is_summed_per_day_and_keeps_today_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE);
    let today = NaiveDate::from_ymd_opt(2026, 11, 25).unwrap();
    let mut body = String::new();
    let mut n = 0;
    while body.len() as u64 <= COMPACT_BYTES {
        let date = today - chrono::Days::new(1 + n % 3);
        body.push_str(&serde_json::to_string(&call(date, "s", 10, 1)).unwrap());
        body.push('\n');
        n += 1;
    }
    let ancient = call(today - chrono::Days::new(KEPT_DAYS as u64 + 1), "s", 5, 5);
    body.push_str(&serde_json::to_string(&ancient).unwrap());
    body.push('\n');
    body.push_str(&serde_json::to_string(&call(today, "s", 7, 1)).unwrap());
    body.push_str("\n{\"torn");
    std::fs::write(&path, body).unwrap();
    let minutes = Arc::new(AtomicI64::new(60));
    let ledger = file_ledger(
        dir.path(),
        Prices::default(),
        Budgets::default(),
        clock(minutes),
    );
    assert_eq!(ledger.today_totals().await.unwrap().tokens(), 8);
    let entries = read(&path).unwrap();
    assert_eq!(entries.len(), 4, "three summed days and today's line");
    assert_eq!(entries.iter().map(|e| e.calls).sum::<u64>(), n + 1);
    let summary = Summary::of(
        &entries,
        Some(today - chrono::Days::new(1)),
        &Prices::default(),
    );
    assert_eq!(summary.rows.len(), 2);
    assert!(
        summary.render().contains("2026-11-25  s  8 tokens"),
        "{}",
        summary.render()
    );
}

#[tokio::test]
async fn a_line_appended_after_a_torn_one_starts_on_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE);
    let today = NaiveDate::from_ymd_opt(2026, 11, 25).unwrap();
    let good = serde_json::to_string(&call(today, "s", 10, 1)).unwrap();
    std::fs::write(&path, format!("{good}\n{{\"date\":\"2026-11-2")).unwrap();
    let minutes = Arc::new(AtomicI64::new(60));
    let ledger = file_ledger(
        dir.path(),
        Prices::default(),
        Budgets::default(),
        clock(minutes),
    );
    assert_eq!(ledger.today_totals().await.unwrap().calls, 1);
    ledger.record(call(today, "s", 1, 1)).await.unwrap();
    assert_eq!(ledger.today_totals().await.unwrap().calls, 2);
    assert_eq!(read(&path).unwrap().len(), 2);
}

/// Two replicas (two homes, one database): each one's calls count against the budgets the
/// other checks, and the totals and a session's month are the sums of both.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn replicas_on_one_database_share_the_budgets_and_the_totals() {
    let db = crate::db::Database::shared(&crate::db::cluster::database()).unwrap();
    db.migrate().await.unwrap();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let minutes = Arc::new(AtomicI64::new(12 * 60));
    let budgets = Budgets {
        daily_tokens: Some(1_000),
        ..Budgets::default()
    };
    let [a, b] = dirs.each_ref().map(|dir| {
        let store = open(dir.path(), &Prices::default(), Some(&db));
        Ledger::with_clock(
            store,
            Prices::default(),
            budgets.clone(),
            clock(minutes.clone()),
        )
    });
    let today = a.today();
    let yesterday = today.pred_opt().unwrap();
    a.record(call(today, "telegram:1", 300, 100)).await.unwrap();
    b.record(call(today, "telegram:2", 400, 100)).await.unwrap();
    b.record(call(yesterday, "telegram:1", 5, 5)).await.unwrap();
    // 900 used today across both: a call of 200 more passes the day's 1,000 on either.
    for ledger in [&a, &b] {
        let over = ledger
            .check(ask("telegram:3", 200, false))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(over.budget, "BUB_BUDGET_DAILY_TOKENS");
        assert_eq!(over.spent, "900 tokens");
        assert!(allowed(ledger, ask("telegram:3", 50, false)).await);
        assert_eq!(ledger.today_totals().await.unwrap().tokens(), 900);
    }
    let (day, month) = b.session_totals("telegram:1").await.unwrap();
    assert_eq!((day.tokens(), day.calls), (400, 1));
    assert_eq!(
        month.tokens(),
        if yesterday.month() == today.month() {
            410
        } else {
            400
        }
    );
    // Nothing in the homes: the ledger is the database's.
    assert!(!dirs[0].path().join(FILE).exists() && !dirs[1].path().join(FILE).exists());
}
