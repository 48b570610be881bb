//! A tape in PostgreSQL (`BUB_DATABASE_URL`): the same promises as the file ([`TapeStore`]),
//! kept by the database so every replica reads and appends the same tape.
//!
//! A tape is a row of `bub_tapes` (keyed by workspace and tape name, as a file's name is) and
//! its entries rows of `bub_tape_entries`, payload and meta kept as the JSON text written so an
//! entry reads back byte for byte. An append takes the next id by incrementing the tape row's
//! `last_id` in the same statement that inserts the entry: ids are unique and increasing with
//! any number of writers, and an append is whole or absent. Writes of several entries (a
//! handoff, a model step's records, the bootstrap, a reset) run in one transaction holding the
//! tape row's lock. Every operation is plain async work on the caller's runtime; what was
//! deferred is written first, on the operation's connection.
//! Reading the context is indexed: the last anchor comes from a partial index on anchors, then
//! only the entries after it (or after where the turn's cursor left off) are read.
//!
//! Tapes use the database's relaxed pool (commits do not wait for the server's disk: what an
//! append to a file without `fsync` promises — see [`Database::relaxed_pool`]).
//!
//! A reset bumps the row's `generation` (a cursor from before starts over); with `archive`,
//! the entries move to a new row named `<name>.<YYYYMMDDTHHMMSSZ>`, which is returned.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use deadpool_postgres::GenericClient;
use serde_json::{Value, json};
use tokio_postgres::Row;

use super::backend::{Build, Deferred, Pending, Record, TapeStore, Window};
use super::context::{CONTEXT_KINDS, ContextCursor, TapeInfo};
use super::entry::{Kind, TapeEntry, now_date};
use super::event::Event;
use super::search::{Search, Searched};
use super::shared::logged;
use super::store::{SESSION_START, handoff_entries, start_state, workspace_key};
use crate::db::{self, Cached, Client, Database};
use crate::llm::ChatMessage;

/// Rows read per round trip by a search.
const SEARCH_PAGE: i64 = 256;

const COLUMNS: &str = "id, kind, date, payload, meta";

/// One session's tape in the database.
pub(crate) struct PgTape {
    db: Arc<Database>,
    workspace: String,
    name: String,
    /// The session the tape belongs to, recorded in its `session/start` anchor (`None`: a tape
    /// opened by name, which records none).
    session: Option<String>,
    /// The tape's row, once looked up (it never changes: a reset keeps it).
    row: OnceLock<i64>,
    pending: Pending,
    /// Held while what was deferred is written: an operation starting meanwhile waits, so
    /// nothing comes before it.
    flushing: tokio::sync::Mutex<()>,
}

impl PgTape {
    /// The tape `name` of `workspace`, of `session` when known (its row is created by the first
    /// operation).
    pub(crate) fn open(
        db: Arc<Database>,
        workspace: &Path,
        name: String,
        session: Option<String>,
    ) -> PgTape {
        PgTape {
            db,
            workspace: workspace_key(workspace),
            name,
            session,
            row: OnceLock::new(),
            pending: Pending::default(),
            flushing: tokio::sync::Mutex::default(),
        }
    }

    /// A connection and the tape's row, with what was deferred done first (its failures
    /// logged).
    async fn client(&self) -> anyhow::Result<(Client, i64)> {
        let mut client = db::client(&self.db.relaxed_pool()).await?;
        let row = match self.row.get() {
            Some(row) => *row,
            None => {
                let row = tape_row(&client, &self.workspace, &self.name).await?;
                *self.row.get_or_init(|| row)
            }
        };
        let _flushing = self.flushing.lock().await;
        for work in self.pending.take() {
            match work {
                Deferred::Bootstrap => {
                    let done = bootstrap(&mut client, row, self.session.as_deref()).await;
                    logged(&Kind::Anchor, done);
                }
                Deferred::Records(records) => {
                    let kind = records.first().map_or(Kind::Event, |r| r.kind.clone());
                    logged(&kind, append(&mut client, row, records).await);
                }
                Deferred::Chore(chore) => {
                    let done = crate::storage::blocking(move || {
                        chore();
                        Ok(())
                    })
                    .await;
                    logged(&Kind::Event, done);
                }
            }
        }
        Ok((client, row))
    }
}

/// Makes sure tape `row` has an anchor (see [`TapeStore::ensure_bootstrap`]).
async fn bootstrap(client: &mut Client, row: i64, session: Option<&str>) -> anyhow::Result<()> {
    // Every turn asks; all but the first find an anchor without a transaction.
    if anchored(&*client, row).await? {
        return Ok(());
    }
    let tx = client.transaction().await?;
    lock(&tx, row).await?;
    if !anchored(&tx, row).await? {
        let state = start_state(session, None);
        for (kind, payload) in handoff_entries(SESSION_START, Some(state)) {
            insert(&tx, row, &kind, &payload, &json!({})).await?;
        }
    }
    Ok(tx.commit().await?)
}

/// Appends `records` to tape `row`: one statement, or one transaction holding the tape row's
/// lock (nothing of another writer comes between them).
async fn append(
    client: &mut Client,
    row: i64,
    records: Vec<Record>,
) -> anyhow::Result<Vec<TapeEntry>> {
    if let [r] = records.as_slice() {
        return Ok(vec![
            insert(&*client, row, &r.kind, &r.payload, &r.meta).await?,
        ]);
    }
    let tx = client.transaction().await?;
    lock(&tx, row).await?;
    let mut out = Vec::with_capacity(records.len());
    for r in &records {
        out.push(insert(&tx, row, &r.kind, &r.payload, &r.meta).await?);
    }
    tx.commit().await?;
    Ok(out)
}

/// The row of tape `name` in `workspace`, created when missing.
pub(super) async fn tape_row(
    client: &impl GenericClient,
    workspace: &str,
    name: &str,
) -> anyhow::Result<i64> {
    let row = client
        .one(
            "INSERT INTO bub_tapes (workspace, name) VALUES ($1, $2) \
             ON CONFLICT (workspace, name) DO UPDATE SET name = EXCLUDED.name RETURNING id",
            &[&workspace, &name],
        )
        .await?;
    Ok(row.get(0))
}

/// Whether the tape has an anchor.
async fn anchored(client: &impl GenericClient, row: i64) -> anyhow::Result<bool> {
    let sql = "SELECT EXISTS (SELECT 1 FROM bub_tape_entries WHERE tape = $1 AND kind = 'anchor')";
    Ok(client.one(sql, &[&row]).await?.get(0))
}

/// Locks the tape's row until the transaction ends (other appends wait); returns its largest id.
async fn lock(tx: &impl GenericClient, row: i64) -> anyhow::Result<i64> {
    let r = tx
        .one(
            "SELECT last_id FROM bub_tapes WHERE id = $1 FOR UPDATE",
            &[&row],
        )
        .await?;
    Ok(r.get(0))
}

/// Appends one entry with the next id (one statement: the id and the row are one change).
async fn insert(
    client: &impl GenericClient,
    row: i64,
    kind: &Kind,
    payload: &Value,
    meta: &Value,
) -> anyhow::Result<TapeEntry> {
    let meta = if meta.is_object() {
        meta.clone()
    } else {
        json!({})
    };
    let date = now_date();
    let text = payload.to_string();
    let id: i64 = client
        .one(
            "WITH t AS (UPDATE bub_tapes SET last_id = last_id + 1 WHERE id = $1 RETURNING last_id) \
             INSERT INTO bub_tape_entries (tape, id, kind, date, payload, meta, event) \
             SELECT $1, last_id, $2, $3, $4, $5, $6 FROM t RETURNING id",
            &[
                &row,
                &kind.as_str(),
                &date,
                &text,
                &meta.to_string(),
                &event_name(kind, &text),
            ],
        )
        .await?
        .get(0);
    Ok(TapeEntry {
        id: id as u64,
        kind: kind.clone(),
        payload: payload.clone(),
        meta,
        date,
    })
}

/// The `event` column of an entry of `kind` whose payload is `payload`: an event's name, as
/// Bub writes it first (`{"name":"run",…`); migration 7 filled older rows by the same rule.
pub(super) fn event_name<'a>(kind: &Kind, payload: &'a str) -> Option<&'a str> {
    if *kind != Kind::Event {
        return None;
    }
    let rest = payload.strip_prefix(r#"{"name":""#)?;
    let name = &rest[..rest.find('"')?];
    (!name.contains('\\')).then_some(name)
}

/// An entry from a row of [`COLUMNS`]; `None` when its JSON does not parse.
fn entry(row: &Row) -> Option<TapeEntry> {
    let id: i64 = row.get(0);
    let kind: &str = row.get(1);
    Some(TapeEntry {
        id: id as u64,
        kind: Kind::from_bytes(kind.as_bytes()),
        date: row.get(2),
        payload: serde_json::from_str(row.get(3)).ok()?,
        meta: serde_json::from_str(row.get(4)).ok()?,
    })
}

#[async_trait::async_trait]
impl TapeStore for PgTape {
    fn name(&self) -> &str {
        &self.name
    }

    fn defer(&self, work: Deferred) {
        self.pending.push(work);
    }

    async fn append(&self, records: Vec<Record>) -> anyhow::Result<Vec<TapeEntry>> {
        let (mut client, row) = self.client().await?;
        append(&mut client, row, records).await
    }

    async fn ensure_bootstrap(&self) -> anyhow::Result<()> {
        let (mut client, row) = self.client().await?;
        bootstrap(&mut client, row, self.session.as_deref()).await
    }

    async fn reset(&self, archive: bool) -> anyhow::Result<Option<String>> {
        let (workspace, name, session) = (&self.workspace, &self.name, self.session.as_deref());
        let (mut client, row) = self.client().await?;
        let tx = client.transaction().await?;
        let last = lock(&tx, row).await?;
        let mut archived = None;
        if archive && last > 0 {
            let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
            let mut archive_name = format!("{name}.{stamp}");
            for n in 1.. {
                let taken: bool = tx
                        .one(
                            "SELECT EXISTS (SELECT 1 FROM bub_tapes WHERE workspace = $1 AND name = $2)",
                            &[&workspace, &archive_name],
                        )
                        .await?
                        .get(0);
                if !taken {
                    break;
                }
                archive_name = format!("{name}.{stamp}-{n}");
            }
            let to: i64 = tx
                    .one(
                        "INSERT INTO bub_tapes (workspace, name, last_id) VALUES ($1, $2, $3) RETURNING id",
                        &[&workspace, &archive_name, &last],
                    )
                    .await?
                    .get(0);
            tx.run(
                "UPDATE bub_tape_entries SET tape = $2 WHERE tape = $1",
                &[&row, &to],
            )
            .await?;
            archived = Some(archive_name);
        } else {
            tx.run("DELETE FROM bub_tape_entries WHERE tape = $1", &[&row])
                .await?;
        }
        tx.run(
            "UPDATE bub_tapes SET last_id = 0, generation = generation + 1 WHERE id = $1",
            &[&row],
        )
        .await?;
        let state = start_state(session, archived.clone());
        for (kind, payload) in handoff_entries(SESSION_START, Some(state)) {
            insert(&tx, row, &kind, &payload, &json!({})).await?;
        }
        tx.commit().await?;
        Ok(archived)
    }

    async fn len(&self) -> anyhow::Result<usize> {
        let (client, row) = self.client().await?;
        let n: i64 = client
            .one(
                "SELECT count(*) FROM bub_tape_entries WHERE tape = $1",
                &[&row],
            )
            .await?
            .get(0);
        Ok(n as usize)
    }

    async fn entries(&self) -> anyhow::Result<Vec<TapeEntry>> {
        let (client, row) = self.client().await?;
        let sql = format!("SELECT {COLUMNS} FROM bub_tape_entries WHERE tape = $1 ORDER BY id");
        Ok(client
            .rows(&sql, &[&row])
            .await?
            .iter()
            .filter_map(entry)
            .collect())
    }

    async fn anchors(&self, limit: usize) -> anyhow::Result<Vec<TapeEntry>> {
        self.window(Window {
            from: 0,
            before: None,
            kinds: &[Kind::Anchor],
            limit,
        })
        .await
    }

    async fn window(&self, w: Window) -> anyhow::Result<Vec<TapeEntry>> {
        let kinds: Vec<String> = w.kinds.iter().map(|k| k.as_str().to_owned()).collect();
        let bound = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let (from, limit) = (bound(w.from), bound(w.limit as u64));
        let before = w.before.map_or(i64::MAX, bound);
        let (client, row) = self.client().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM bub_tape_entries WHERE tape = $1 AND id >= $2 \
                 AND id < $3 AND kind = ANY($4) ORDER BY id DESC LIMIT $5"
        );
        let mut out: Vec<_> = client
            .rows(&sql, &[&row, &from, &before, &kinds, &limit])
            .await?
            .iter()
            .filter_map(entry)
            .collect();
        out.reverse();
        Ok(out)
    }

    async fn search(
        &self,
        query: &str,
        limit: usize,
        what: Searched,
    ) -> anyhow::Result<Vec<TapeEntry>> {
        let Some(mut search) = Search::new(query, what) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut kinds = vec![
            Kind::Message.as_str().to_owned(),
            Kind::Event.as_str().to_owned(),
        ];
        if what == Searched::Everything {
            kinds.push(Kind::ToolResult.as_str().to_owned());
        }
        let (client, row) = self.client().await?;
        // Newest first, a page at a time; events only when they are left-out messages.
        let sql = format!(
            "SELECT {COLUMNS} FROM bub_tape_entries WHERE tape = $1 AND id < $2 \
                 AND kind = ANY($3) AND (kind <> 'event' OR event = $4) \
                 ORDER BY id DESC LIMIT $5"
        );
        let left_out = Event::MessagesLeftOut.as_str();
        let (mut before, mut out) = (i64::MAX, Vec::new());
        loop {
            let rows = client
                .rows(&sql, &[&row, &before, &kinds, &left_out, &SEARCH_PAGE])
                .await?;
            for r in &rows {
                before = r.get(0);
                if search.matches(
                    &Kind::from_bytes(r.get::<_, &str>(1).as_bytes()),
                    r.get(3),
                    r.get(4),
                ) && let Some(e) = entry(r)
                {
                    out.push(e);
                    if out.len() >= limit {
                        return Ok(out);
                    }
                }
            }
            if (rows.len() as i64) < SEARCH_PAGE {
                return Ok(out);
            }
        }
    }

    async fn info(&self) -> anyhow::Result<TapeInfo> {
        let (client, row) = self.client().await?;
        let r = client
                .one(
                    "WITH a AS (SELECT id, payload FROM bub_tape_entries \
                                WHERE tape = $1 AND kind = 'anchor' ORDER BY id DESC LIMIT 1) \
                     SELECT (SELECT count(*) FROM bub_tape_entries WHERE tape = $1), \
                            (SELECT count(*) FROM bub_tape_entries WHERE tape = $1 AND kind = 'anchor'), \
                            (SELECT payload FROM a), \
                            (SELECT count(*) FROM bub_tape_entries \
                             WHERE tape = $1 AND id > coalesce((SELECT id FROM a), 0))",
                    &[&row],
                )
                .await?;
        let anchor: Option<String> = r.get(2);
        let last_anchor = anchor
            .and_then(|p| serde_json::from_str::<Value>(&p).ok())
            .and_then(|p| p.get("name").and_then(Value::as_str).map(str::to_owned));
        // The newest `run` event that recorded a token usage.
        let runs = client
            .rows(
                "SELECT payload FROM bub_tape_entries WHERE tape = $1 AND kind = 'event' \
                     AND event = $2 AND strpos(payload, 'total_tokens') > 0 \
                     ORDER BY id DESC LIMIT 16",
                &[&row, &Event::Run.as_str()],
            )
            .await?;
        let last_token_usage = runs.iter().find_map(|r| {
            let payload: Value = serde_json::from_str(r.get(0)).ok()?;
            payload
                .pointer("/data/usage/total_tokens")
                .and_then(Value::as_u64)
        });
        Ok(TapeInfo {
            name: self.name.clone(),
            entries: r.get::<_, i64>(0) as usize,
            anchors: r.get::<_, i64>(1) as usize,
            last_anchor,
            entries_since_last_anchor: r.get::<_, i64>(3) as usize,
            last_token_usage,
        })
    }

    async fn output(&self, call_id: &str) -> anyhow::Result<Option<(String, Value)>> {
        if call_id.is_empty() {
            return Ok(None);
        }
        let (client, row) = self.client().await?;
        // The newest call with that id; its result is the first result after it, unless
        // another call comes first.
        let calls = client
            .rows(
                "SELECT id, payload FROM bub_tape_entries WHERE tape = $1 AND kind = 'tool_call' \
                     AND strpos(payload, $2) > 0 ORDER BY id DESC",
                &[&row, &call_id],
            )
            .await?;
        for call in &calls {
            let payload: Value = serde_json::from_str(call.get(1)).unwrap_or_default();
            let calls = payload["calls"].as_array().cloned().unwrap_or_default();
            let Some(at) = calls.iter().position(|c| c["id"] == *call_id) else {
                continue;
            };
            let next = client
                .opt(
                    &format!(
                        "SELECT {COLUMNS} FROM bub_tape_entries WHERE tape = $1 AND id > $2 \
                             AND kind IN ('tool_call', 'tool_result') ORDER BY id LIMIT 1"
                    ),
                    &[&row, &call.get::<_, i64>(0)],
                )
                .await?;
            let Some(result) = next
                .as_ref()
                .and_then(entry)
                .filter(|e| e.kind == Kind::ToolResult)
            else {
                return Ok(None);
            };
            let text = match &result.payload["results"][at] {
                Value::Null => return Ok(None),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return Ok(Some((text, result.meta)));
        }
        Ok(None)
    }

    async fn context(&self, cursor: &mut ContextCursor) -> anyhow::Result<Vec<ChatMessage>> {
        let (client, row) = self.client().await?;
        context(&client, row, cursor).await
    }

    async fn step(
        &self,
        build: Build,
        cursor: &mut ContextCursor,
    ) -> anyhow::Result<anyhow::Result<Vec<ChatMessage>>> {
        let (mut client, row) = self.client().await?;
        let shown = context(&client, row, cursor).await.unwrap_or_default();
        // `build` may do blocking file work.
        let records = crate::storage::blocking(move || Ok(build(shown))).await?;
        append(&mut client, row, records).await?;
        Ok(context(&client, row, cursor).await)
    }
}

/// The context of tape `row` through `cursor`: where it starts (the tape's generation and its
/// last anchor), then the entries after where the cursor left off.
async fn context(
    client: &Client,
    row: i64,
    cursor: &mut ContextCursor,
) -> anyhow::Result<Vec<ChatMessage>> {
    let r = client
        .one(
            &format!(
                "SELECT t.generation, a.* FROM bub_tapes t LEFT JOIN LATERAL \
                 (SELECT {COLUMNS} FROM bub_tape_entries WHERE tape = t.id AND kind = 'anchor' \
                  ORDER BY id DESC LIMIT 1) a ON true WHERE t.id = $1"
            ),
            &[&row],
        )
        .await?;
    let generation: i64 = r.get(0);
    let anchor = r.get::<_, Option<i64>>(1).and_then(|_| {
        let id: i64 = r.get(1);
        Some(TapeEntry {
            id: id as u64,
            kind: Kind::Anchor,
            date: r.get(3),
            payload: serde_json::from_str(r.get(4)).ok()?,
            meta: serde_json::from_str(r.get(5)).ok()?,
        })
    });
    let origin = [
        row as u64,
        generation as u64,
        anchor.as_ref().map_or(0, |a| a.id),
    ];
    let after = cursor.read_from(origin, anchor);
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let kinds: Vec<&str> = CONTEXT_KINDS.iter().map(Kind::as_str).collect();
    let sql = format!(
        "SELECT {COLUMNS} FROM bub_tape_entries WHERE tape = $1 AND id > $2 \
         AND kind = ANY($3) ORDER BY id"
    );
    let rows = client.rows(&sql, &[&row, &after, &kinds]).await?;
    Ok(cursor.read_entries(rows.iter().filter_map(entry).collect()))
}
