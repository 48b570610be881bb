//! The inbox on PostgreSQL, shared by replicas: a row of `bub_inbox` per received message or
//! scheduled run (its `recv` or `job` record), a row of `bub_inbox_progress` per progress
//! record (started, answered, sent, what the turn sent), the platforms' cursors and each chat's
//! newest message id. The records are the journal's own, so what the file inbox decides from
//! its journal the shared one decides from these rows, by the same code (`State::apply`,
//! `super::plan`).
//!
//! Who works on what: a session's items are handed to the replica holding its lease
//! ([`crate::db::Leases`]). Storing an item notifies every replica (`pg_notify`, delivered at
//! commit); the holder claims the items not yet taken ([`Ledger::claim`]), a replica taking a
//! lease claims all the session's pending items with their progress — a dead holder's work
//! resumes by the restart rule.
//!
//! Invariants: a message is stored once (its key is unique; a copy is a duplicate, for a day
//! after it was done); an item's row is written — durably, the server's commit waited for —
//! before the platform is told it was received; progress rows are kept only while one of their
//! items is pending; an item is handed to an actor only by a claim under the session's lease,
//! and claimed again only by the next holder of the lease.

use std::sync::Arc;

use anyhow::Context as _;
use tokio_postgres::types::ToSql;

use super::journal::Record;
use crate::chat::Inbound;
use crate::db::{Cached, Database, Leases};

/// Done items are kept this long (seconds) to recognise a late copy of a message.
const KEEP_DONE_SECONDS: f64 = 86_400.0;

/// The inbox's rows in the database, and this replica's leases.
pub(super) struct Ledger {
    pub(super) db: Arc<Database>,
    pub(super) leases: Leases,
}

/// Items claimed for a session: each with its record (numbered) and whether a replica had
/// taken it before (its turn may have started), then the session's progress records.
pub(super) struct Claimed {
    pub(super) items: Vec<(Record, bool)>,
    pub(super) progress: Vec<Record>,
}

impl Ledger {
    /// Stores a received message (and the platform's cursor, or the chat's newest id), then
    /// notifies the replicas; its number, `None` for a copy of a message stored before.
    pub(super) async fn receive(
        &self,
        msg: &Inbound,
        cursor: Option<u64>,
    ) -> anyhow::Result<Option<u64>> {
        let session = msg.session_id().as_str().to_owned();
        let key = format!(
            "{}\u{1f}{}\u{1f}{}",
            msg.channel, msg.chat_id, msg.message_id
        );
        let record = serde_json::to_string(&Record::Recv {
            seq: 0,
            cursor,
            msg: msg.clone(),
        })?;
        let (channel, chat) = (msg.channel.clone(), msg.chat_id.clone());
        let notice = self.leases.notice(&session);
        // The platform's cursor, else the chat's newest message id.
        let cursor = cursor.map(|at| at as i64);
        let seen = msg
            .message_id
            .parse::<i64>()
            .ok()
            .filter(|_| cursor.is_none());
        let pool = self.db.pool();
        async move {
            let client = crate::db::client(&pool).await?;
            // One statement, one round trip: it commits (and notifies) as a whole.
            let row = client
                .opt(
                    "WITH ins AS (INSERT INTO bub_inbox (session, key, record) \
                             VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING RETURNING seq), \
                         cur AS (INSERT INTO bub_inbox_cursors (channel, at) \
                             SELECT $4, $5 FROM ins WHERE $5::bigint IS NOT NULL \
                             ON CONFLICT (channel) DO UPDATE \
                             SET at = GREATEST(bub_inbox_cursors.at, EXCLUDED.at)), \
                         seen AS (INSERT INTO bub_inbox_seen (channel, chat, id) \
                             SELECT $4, $6, $7 FROM ins WHERE $7::bigint IS NOT NULL \
                             ON CONFLICT (channel, chat) DO UPDATE \
                             SET id = GREATEST(bub_inbox_seen.id, EXCLUDED.id), at = now()) \
                         SELECT ins.seq FROM ins CROSS JOIN LATERAL pg_notify($8, $9)",
                    &[
                        &session,
                        &key,
                        &record,
                        &channel,
                        &cursor,
                        &chat,
                        &seen,
                        &crate::db::NOTICES,
                        &notice,
                    ],
                )
                .await?;
            anyhow::Ok(row.map(|row| row.get::<_, i64>(0) as u64))
        }
        .await
        .context("storing in the shared inbox")
    }

    /// Stores a scheduled run (closing the subagent run it reports, if any) and notifies the
    /// replicas; its number.
    pub(super) async fn scheduled(&self, run: &super::JobRun) -> anyhow::Result<u64> {
        let session = run.session.as_str().to_owned();
        let notice = self.leases.notice(&session);
        let reports = run.reports.map(|s| s as i64);
        let record = serde_json::to_string(&Record::Job {
            seq: 0,
            run: run.clone(),
        })?;
        let pool = self.db.pool();
        async move {
            let mut client = crate::db::client(&pool).await?;
            let tx = client.transaction().await?;
            let row = tx
                .one(
                    "INSERT INTO bub_inbox (session, record) VALUES ($1, $2) RETURNING seq",
                    &[&session, &record],
                )
                .await?;
            if let Some(child) = reports {
                done(&tx, &[child]).await?;
            }
            tx.run("SELECT pg_notify($1, $2)", &[&crate::db::NOTICES, &notice])
                .await?;
            tx.commit().await?;
            anyhow::Ok(row.get::<_, i64>(0) as u64)
        }
        .await
        .context("storing in the shared inbox")
    }

    /// Stores a progress record (a `done` marks its items done and drops the progress they
    /// no longer need). A record about items no longer pending changes nothing.
    pub(super) async fn record(&self, record: &Record) -> anyhow::Result<()> {
        let seqs: Vec<i64> = record.seqs().iter().map(|s| *s as i64).collect();
        let text = match record {
            Record::Done { .. } => None,
            _ => Some(serde_json::to_string(record)?),
        };
        let pool = self.db.relaxed_pool();
        async move {
            let client = crate::db::client(&pool).await?;
            match text {
                None => done(&client, &seqs).await?,
                Some(text) => {
                    client
                        .run(
                            "INSERT INTO bub_inbox_progress (session, seqs, record) \
                                 SELECT session, $1, $2 FROM bub_inbox \
                                 WHERE seq = ($1::bigint[])[1] AND done_at IS NULL",
                            &[&seqs, &text],
                        )
                        .await?;
                }
            }
            anyhow::Ok(())
        }
        .await
        .context("recording progress in the shared inbox")
    }

    /// Claims `session`'s pending items for this replica: those no replica took yet, or with
    /// `all` (the lease was just taken) every one of them, with the session's progress.
    pub(super) async fn claim(&self, session: &str, all: bool) -> anyhow::Result<Claimed> {
        let session = session.to_owned();
        // A claim lost to a crash of the server is only claimed again (as new work).
        let pool = self.db.relaxed_pool();
        async move {
            let mut client = crate::db::client(&pool).await?;
            if !all {
                // Under the lease nobody else claims: one statement.
                let rows = client
                    .rows(
                        "UPDATE bub_inbox SET taken = true WHERE session = $1 \
                             AND done_at IS NULL AND NOT taken RETURNING seq, record",
                        &[&session],
                    )
                    .await?;
                let items = numbered_items(rows.iter().map(|r| (r.get(0), r.get(1), false)));
                return anyhow::Ok(Claimed {
                    items,
                    progress: Vec::new(),
                });
            }
            let tx = client.transaction().await?;
            let rows = tx
                .rows(
                    "UPDATE bub_inbox i SET taken = true \
                         FROM (SELECT seq, taken FROM bub_inbox \
                               WHERE session = $1 AND done_at IS NULL AND ($2 OR NOT taken) \
                               FOR UPDATE) old \
                         WHERE i.seq = old.seq RETURNING i.seq, i.record, old.taken",
                    &[&session, &all],
                )
                .await?;
            let items = numbered_items(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))));
            let progress = tx
                .rows(
                    "SELECT record FROM bub_inbox_progress WHERE session = $1 ORDER BY id",
                    &[&session],
                )
                .await?
                .iter()
                .filter_map(|row| serde_json::from_str(row.get(0)).ok())
                .collect();
            tx.commit().await?;
            Ok(Claimed { items, progress })
        }
        .await
        .context("claiming work from the shared inbox")
    }

    /// The sessions with pending items (for the sweep that finds work no notice announced,
    /// and the work of replicas that died); done items past their day are removed meanwhile.
    pub(super) async fn pending_sessions(&self) -> anyhow::Result<Vec<String>> {
        let pool = self.db.pool();
        async move {
            let client = crate::db::client(&pool).await?;
            client
                .run(
                    "DELETE FROM bub_inbox WHERE done_at < now() - make_interval(secs => $1)",
                    &[&KEEP_DONE_SECONDS],
                )
                .await?;
            let rows = client
                .rows(
                    "SELECT DISTINCT session FROM bub_inbox WHERE done_at IS NULL",
                    &[],
                )
                .await?;
            anyhow::Ok(rows.iter().map(|r| r.get(0)).collect())
        }
        .await
        .context("reading the shared inbox")
    }

    /// Whether `session` has pending items.
    pub(super) async fn has_pending(&self, session: &str) -> anyhow::Result<bool> {
        let session = session.to_owned();
        let pool = self.db.pool();
        async move {
            let client = crate::db::client(&pool).await?;
            let row = client
                .one(
                    "SELECT EXISTS (SELECT 1 FROM bub_inbox \
                         WHERE session = $1 AND done_at IS NULL)",
                    &[&session],
                )
                .await?;
            anyhow::Ok(row.get(0))
        }
        .await
        .context("reading the shared inbox")
    }

    /// The platforms' cursors and the chats' newest message ids, as records to apply.
    pub(super) async fn positions(&self) -> anyhow::Result<Vec<Record>> {
        let pool = self.db.pool();
        async move {
            let client = crate::db::client(&pool).await?;
            let mut records = Vec::new();
            for row in client
                .rows("SELECT channel, at FROM bub_inbox_cursors", &[])
                .await?
            {
                records.push(Record::Cursor {
                    channel: row.get(0),
                    at: row.get::<_, i64>(1) as u64,
                });
            }
            for row in client
                .rows(
                    // The most recently active, applied oldest first (the newest last).
                    "SELECT channel, chat, id FROM (SELECT * FROM bub_inbox_seen \
                         ORDER BY at DESC LIMIT $1) s ORDER BY at",
                    &[&(super::SEEN_CHATS as i64)],
                )
                .await?
            {
                records.push(Record::Seen {
                    channel: row.get(0),
                    chat: row.get(1),
                    id: row.get::<_, i64>(2) as u64,
                });
            }
            anyhow::Ok(records)
        }
        .await
        .context("reading the shared inbox")
    }
}

/// Marks items done and drops the progress rows none of whose items is still pending.
async fn done(client: &impl Cached, seqs: &[i64]) -> Result<(), tokio_postgres::Error> {
    let params: [&(dyn ToSql + Sync); 1] = [&seqs];
    client
        .run(
            "WITH d AS (UPDATE bub_inbox SET done_at = now() \
                        WHERE seq = ANY($1) AND done_at IS NULL RETURNING session) \
             DELETE FROM bub_inbox_progress p WHERE p.session IN (SELECT session FROM d) \
             AND NOT EXISTS (SELECT 1 FROM bub_inbox i WHERE i.seq = ANY(p.seqs) \
                             AND i.done_at IS NULL AND i.seq <> ALL($1))",
            &params,
        )
        .await
        .map(drop)
}

/// Claimed rows (number, record, taken before) as numbered records in order; an unreadable
/// one is logged and left out.
fn numbered_items<'a>(rows: impl Iterator<Item = (i64, &'a str, bool)>) -> Vec<(Record, bool)> {
    let mut items: Vec<(Record, bool)> = rows
        .filter_map(|(seq, text, taken)| match numbered(text, seq as u64) {
            Some(record) => Some((record, taken)),
            None => {
                tracing::warn!(seq, "inbox.shared.unreadable");
                None
            }
        })
        .collect();
    items.sort_unstable_by_key(|(record, _)| seq_of(record));
    items
}

/// The record stored for item `seq`, numbered (`None`: unreadable).
fn numbered(text: &str, seq: u64) -> Option<Record> {
    let mut record: Record = serde_json::from_str(text).ok()?;
    match &mut record {
        Record::Recv { seq: s, msg, .. } => {
            *s = seq;
            msg.seq = seq;
        }
        Record::Job { seq: s, run } => {
            *s = seq;
            run.seq = seq;
        }
        _ => return None,
    }
    Some(record)
}

fn seq_of(record: &Record) -> u64 {
    match record {
        Record::Recv { seq, .. } | Record::Job { seq, .. } => *seq,
        _ => 0,
    }
}
