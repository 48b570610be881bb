//! One test suite for every [`TapeStore`]: the file and PostgreSQL pass the same checks, and
//! the same operations give both the same context, byte for byte.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::backend::{Deferred, Record, TapeStore, Window, open, open_name};
use super::context::{ContextCursor, View};
use super::listing::Listed;
use super::{Event, Kind, Searched, TapeEntry, list, tape_name_for};
use crate::db::Database;
#[cfg(feature = "postgres")]
use crate::db::cluster;

/// Opens tape `session` (a second call opens a second handle on the same tape).
type Open<'a> = &'a (dyn Fn(&str) -> Arc<dyn TapeStore> + Sync);

async fn message(tape: &dyn TapeStore, role: &str, text: &str) -> u64 {
    let payload = json!({"role": role, "content": text});
    let record = Record::new(Kind::Message, payload, json!({"time": "Mon 09:00"}));
    append(tape, record).await.id
}

/// Appends one record.
async fn append(tape: &dyn TapeStore, record: Record) -> TapeEntry {
    tape.append(vec![record]).await.unwrap().remove(0)
}

/// The messages as the tape records them.
fn records(messages: Vec<crate::llm::ChatMessage>) -> Vec<Value> {
    messages
        .iter()
        .map(crate::llm::ChatMessage::to_record)
        .collect()
}

/// The ids of window `w`.
async fn ids(w: Window, tape: &dyn TapeStore) -> Vec<u64> {
    tape.window(w).await.unwrap().iter().map(|e| e.id).collect()
}

/// The operations every store must get right, checked as they go.
async fn suite(open: Open<'_>) {
    let tape = open("suite");
    let tape = tape.as_ref();

    // Empty.
    assert_eq!(tape.len().await.unwrap(), 0);
    assert!(tape.entries().await.unwrap().is_empty());
    assert!(tape.anchors(5).await.unwrap().is_empty());
    let mut fresh = ContextCursor::default();
    assert!(tape.context(&mut fresh).await.unwrap().is_empty());
    let found = tape.search("hello", 5, Searched::Everything).await;
    assert!(found.unwrap().is_empty());
    assert_eq!(tape.output("call_1").await.unwrap(), None);
    assert_eq!(tape.info().await.unwrap().entries, 0);

    // Bootstrap once: the start anchor and its handoff event.
    tape.ensure_bootstrap().await.unwrap();
    tape.ensure_bootstrap().await.unwrap();
    let entries = tape.entries().await.unwrap();
    assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(entries[0].kind, Kind::Anchor);
    assert_eq!(entries[0].name(), Some("session/start"));
    assert!(entries[1].is_event(Event::Handoff));

    // Messages, a tool call and its result; what was appended reads back the same.
    let mut cursor = ContextCursor::new(View::default());
    assert_eq!(message(tape, "user", "hello there, tape").await, 3);
    let calls = json!([{"id": "call_1", "type": "function",
                        "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]);
    let call = Record::new(Kind::ToolCall, json!({"calls": calls}), json!({}));
    let call = append(tape, call).await;
    let result = json!({"results": ["a.txt\nb.txt"]});
    let result = append(
        tape,
        Record::new(Kind::ToolResult, result, json!({"role": "owner"})),
    );
    let result = result.await;
    assert_eq!((call.id, result.id), (4, 5));
    assert_eq!(tape.entries().await.unwrap()[4], result);
    let first = records(tape.context(&mut cursor).await.unwrap());
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(first[0]["content"], "Mon 09:00\nhello there, tape");
    assert_eq!(first[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        first[2],
        json!({"role": "tool", "content": "a.txt\nb.txt", "tool_call_id": "call_1", "name": "bash"})
    );
    assert_eq!(
        tape.output("call_1").await.unwrap(),
        Some(("a.txt\nb.txt".to_owned(), json!({"role": "owner"})))
    );
    assert_eq!(tape.output("call_9").await.unwrap(), None);

    // The cursor reads only what was appended since; a fresh one reads the same bytes.
    message(tape, "assistant", "two files").await;
    let second = records(tape.context(&mut cursor).await.unwrap());
    assert_eq!(second.len(), 4);
    assert!(cursor.last_read > 0);
    let again = records(tape.context(&mut cursor).await.unwrap());
    assert_eq!(again, second);
    let fresh = records(tape.context(&mut ContextCursor::default()).await.unwrap());
    assert_eq!(
        serde_json::to_string(&fresh).unwrap(),
        serde_json::to_string(&second).unwrap()
    );

    // A handoff: the context starts after it, with its summary.
    let handoff = tape.handoff("phase-2", Some("listed the files"), Some("read them"));
    handoff.await.unwrap();
    message(tape, "user", "next please").await;
    let after = records(tape.context(&mut cursor).await.unwrap());
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        after[0]["content"],
        "[context from handoff 'phase-2']\nsummary: listed the files\nnext steps: read them"
    );
    let anchors = tape.anchors(10).await.unwrap();
    assert_eq!(
        anchors.iter().map(|a| a.name()).collect::<Vec<_>>(),
        [Some("session/start"), Some("phase-2")]
    );
    assert_eq!(tape.anchors(1).await.unwrap()[0].name(), Some("phase-2"));

    // Search: newest first, tool results only when asked, fuzzy.
    let search = async |query, what| tape.search(query, 5, what).await.unwrap();
    let found = search("hello", Searched::Everything).await;
    assert_eq!(found.iter().map(|e| e.id).collect::<Vec<_>>(), [3]);
    assert_eq!(search("b.txt", Searched::Everything).await.len(), 1);
    assert!(search("b.txt", Searched::Conversation).await.is_empty());
    assert_eq!(search("helo there", Searched::Conversation).await.len(), 1);
    let left_out =
        json!({"name": Event::MessagesLeftOut.as_str(), "data": {"text": "zebra crossing"}});
    append(tape, Record::new(Kind::Event, left_out, json!({}))).await;
    assert_eq!(search("zebra", Searched::Conversation).await.len(), 1);
    message(tape, "user", "hello again").await;
    let newest = tape.search("hello", 1, Searched::Conversation).await;
    assert_eq!(newest.unwrap()[0].payload["content"], "hello again");

    // The summary.
    let run = |data| Record::event(Event::Run, data);
    append(tape, run(json!({"usage": {"total_tokens": 1234}}))).await;
    append(tape, run(json!({"elapsed_ms": 3}))).await;
    let info = tape.info().await.unwrap();
    assert_eq!(info.entries, tape.len().await.unwrap());
    assert_eq!(info.entries, 13);
    assert_eq!(
        (info.anchors, info.last_anchor.as_deref()),
        (2, Some("phase-2"))
    );
    assert_eq!(info.entries_since_last_anchor, 6);
    assert_eq!(info.last_token_usage, Some(1234));

    // Windows: the newest of the kinds asked, from an id and before one, oldest first.
    let all = Window {
        from: 0,
        before: None,
        kinds: &[Kind::Anchor, Kind::Message],
        limit: 100,
    };
    assert_eq!(ids(all, tape).await, [1, 3, 6, 7, 9, 11]);
    assert_eq!(ids(Window { limit: 2, ..all }, tape).await, [9, 11]);
    assert_eq!(ids(Window { from: 7, ..all }, tape).await, [7, 9, 11]);
    let older = Window {
        before: Some(7),
        limit: 2,
        ..all
    };
    assert_eq!(ids(older, tape).await, [3, 6]);
    let work = Window {
        kinds: &[Kind::ToolCall, Kind::ToolResult],
        ..all
    };
    assert_eq!(ids(work, tape).await, [4, 5]);
    let page = tape.window(Window { from: 5, ..all }).await.unwrap();
    assert_eq!(page[0].payload["content"], "two files");

    // A reset starts afresh; the archive keeps the old entries somewhere it names.
    let archived = tape.reset(true).await.unwrap().expect("archived");
    assert!(!archived.is_empty());
    let entries = tape.entries().await.unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].name(), Some("session/start"));
    assert_eq!(entries[0].state().unwrap()["archived"], json!(archived));
    assert!(
        tape.context(&mut cursor).await.unwrap().is_empty(),
        "an old cursor starts over"
    );
    message(tape, "user", "after the reset").await;
    assert_eq!(tape.entries().await.unwrap().last().unwrap().id, 3);
    assert_eq!(tape.reset(false).await.unwrap(), None);
    assert_eq!(tape.len().await.unwrap(), 2);

    // Deferred work is done first by the next operation, in order.
    let deferred = json!({"role": "user", "content": "in a batch"});
    tape.defer(Deferred::Bootstrap);
    tape.defer(Deferred::Records(vec![Record::new(
        Kind::Message,
        deferred,
        json!({}),
    )]));
    let entries = tape.entries().await.unwrap();
    let ids: Vec<u64> = entries[2..].iter().map(|e| e.id).collect();
    assert_eq!(ids, [3]);

    // Several writers (other handles, other tasks): unique, increasing ids, nothing lost.
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4 {
        let tape = open("suite");
        writers.spawn(async move {
            for i in 0..25 {
                message(tape.as_ref(), "user", &format!("writer {w} line {i}")).await;
            }
        });
    }
    writers.join_all().await;
    let ids: Vec<u64> = tape.entries().await.unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=103).collect::<Vec<_>>());
    let other = open("another session");
    assert_eq!(
        other.len().await.unwrap(),
        0,
        "tapes of other sessions are apart"
    );
}

/// The sessions of a workspace: each tape listed with the session its `session/start` anchor
/// records (also after a reset), its entry count and newest date, newest first; archives and
/// other workspaces' tapes left out; a listed tape opened by name reads as its session's.
async fn listing(home: &Path, db: Option<&Arc<Database>>) {
    let (ws, elsewhere) = (home.join("ws"), home.join("elsewhere"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let tape = |ws: &Path, session: &str| open(home, db, ws, "bub", session).unwrap();
    let tick = || std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(list(home, db, &ws).await.unwrap(), []);

    let first = tape(&ws, "telegram:1");
    first.ensure_bootstrap().await.unwrap();
    message(first.as_ref(), "user", "one").await;
    first.reset(true).await.unwrap().expect("archived");
    message(first.as_ref(), "user", "two").await;
    tick();
    let second = tape(&ws, "cli");
    second.ensure_bootstrap().await.unwrap();
    message(second.as_ref(), "user", "three").await;
    message(second.as_ref(), "assistant", "four").await;
    let elsewhere_tape = tape(&elsewhere, "telegram:9");
    elsewhere_tape.ensure_bootstrap().await.unwrap();
    let start = &second.entries().await.unwrap()[0];
    assert_eq!(start.state().unwrap()["session"], "cli");

    let row = async |tape: &Arc<dyn TapeStore>, session: &str| Listed {
        name: tape_name_for("bub", session),
        session: Some(session.to_owned()),
        entries: tape.len().await.unwrap(),
        last: Some(tape.entries().await.unwrap().last().unwrap().date.clone()),
    };
    let (a, b) = (row(&first, "telegram:1").await, row(&second, "cli").await);
    assert_eq!((a.entries, b.entries), (3, 4));
    assert_eq!(list(home, db, &ws).await.unwrap(), [b.clone(), a]);
    tick();
    message(first.as_ref(), "user", "five").await;
    let a = row(&first, "telegram:1").await;
    assert_eq!(list(home, db, &ws).await.unwrap(), [a.clone(), b]);
    let others = list(home, db, &elsewhere).await.unwrap();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].session.as_deref(), Some("telegram:9"));

    let by_name = open_name(home, db, &ws, &a.name).unwrap();
    assert_eq!(by_name.name(), a.name);
    assert_eq!(
        by_name.entries().await.unwrap(),
        first.entries().await.unwrap()
    );
    // What one handle appends, the other reads.
    message(by_name.as_ref(), "user", "six").await;
    assert_eq!(first.len().await.unwrap(), 5);
}

/// The context after the same operations, as the model would be sent it.
#[cfg(feature = "postgres")]
async fn script(tape: &dyn TapeStore) -> String {
    tape.ensure_bootstrap().await.unwrap();
    message(tape, "user", "ünïcödé and \"quotes\"").await;
    let calls = json!([{"id": "c", "type": "function", "function": {"name": "fs.read", "arguments": "{}"}}]);
    append(
        tape,
        Record::new(Kind::ToolCall, json!({"calls": calls}), json!({})),
    )
    .await;
    let result = json!({"results": [{"z": 1, "a": [1.5, null]}]});
    append(tape, Record::new(Kind::ToolResult, result, json!({}))).await;
    tape.handoff("h", Some("s"), None).await.unwrap();
    message(tape, "assistant", "done").await;
    let calls =
        json!([{"id": "d", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]);
    append(
        tape,
        Record::new(Kind::ToolCall, json!({"calls": calls}), json!({})),
    )
    .await;
    let context = tape.context(&mut ContextCursor::default()).await.unwrap();
    serde_json::to_string(&records(context)).unwrap()
}

#[tokio::test]
async fn file_tapes_pass_the_suite() {
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("ws");
    let open_file = |session: &str| open(home.path(), None, &workspace, "bub", session).unwrap();
    suite(&open_file).await;
    let home = tempfile::tempdir().unwrap();
    listing(home.path(), None).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_tapes_pass_the_suite_and_render_as_files_do() {
    let db = Database::shared(&cluster::database()).unwrap();
    db.migrate().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("ws");
    let open_pg = |session: &str| open(home.path(), Some(&db), &workspace, "bub", session).unwrap();
    suite(&open_pg).await;
    // Each event is written with its name in the `event` column.
    let client = crate::db::client(&db.pool()).await.unwrap();
    let sql = "SELECT count(*), count(event) FROM bub_tape_entries WHERE kind = 'event'";
    let row = client.query_one(sql, &[]).await.unwrap();
    let (events, named) = (row.get::<_, i64>(0), row.get::<_, i64>(1));
    assert!(
        events > 0 && named == events,
        "{named} of {events} events named"
    );

    let from_pg = script(open_pg("script").as_ref()).await;
    let file_home = tempfile::tempdir().unwrap();
    let file = open(file_home.path(), None, &workspace, "bub", "script").unwrap();
    let from_file = script(file.as_ref()).await;
    assert_eq!(from_pg, from_file);
    assert!(from_pg.contains("error: no result recorded"), "{from_pg}");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_lists_the_tapes_of_a_workspace_as_files_do() {
    let db = Database::shared(&cluster::database()).unwrap();
    db.migrate().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    listing(home.path(), Some(&db)).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_same_workspace_and_session_is_the_same_tape_on_postgres() {
    let db: Arc<Database> = Database::shared(&cluster::database()).unwrap();
    db.migrate().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let a = |ws: &Path| open(home.path(), Some(&db), ws, "bub", "telegram:1").unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    message(a(&ws).as_ref(), "user", "one").await;
    // The same workspace by another path, and another workspace.
    assert_eq!(a(&ws.join("../ws")).len().await.unwrap(), 1);
    assert_eq!(a(home.path()).len().await.unwrap(), 0);
}
