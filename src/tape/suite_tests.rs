//! One test suite for every [`TapeStore`]: the file and PostgreSQL pass the same checks, and
//! the same operations give both the same context, byte for byte.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::backend::{TapeStore, Window, open, open_name};
use super::context::{ContextCursor, View};
use super::listing::Listed;
use super::{Event, Kind, Searched, list, tape_name_for};
use crate::db::{Database, cluster};

/// Opens tape `session` (a second call opens a second handle on the same tape).
type Open<'a> = &'a (dyn Fn(&str) -> Box<dyn TapeStore> + Sync);

fn message(tape: &mut dyn TapeStore, role: &str, text: &str) -> u64 {
    let payload = json!({"role": role, "content": text});
    tape.append(Kind::Message, payload, json!({"time": "Mon 09:00"}))
        .unwrap()
        .id
}

/// The messages as the tape records them.
fn records(messages: Vec<crate::llm::ChatMessage>) -> Vec<Value> {
    messages
        .iter()
        .map(crate::llm::ChatMessage::to_record)
        .collect()
}

/// The operations every store must get right, checked as they go.
fn suite(open: Open) {
    let mut tape = open("suite");
    let tape = tape.as_mut();

    // Empty.
    assert_eq!(tape.len().unwrap(), 0);
    assert!(tape.entries().unwrap().is_empty());
    assert!(tape.anchors(5).unwrap().is_empty());
    assert!(
        tape.context(&mut ContextCursor::default())
            .unwrap()
            .is_empty()
    );
    assert!(
        tape.search("hello", 5, Searched::Everything)
            .unwrap()
            .is_empty()
    );
    assert_eq!(tape.output("call_1").unwrap(), None);
    assert_eq!(tape.info().unwrap().entries, 0);

    // Bootstrap once: the start anchor and its handoff event.
    tape.ensure_bootstrap().unwrap();
    tape.ensure_bootstrap().unwrap();
    let entries = tape.entries().unwrap();
    assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(entries[0].kind, Kind::Anchor);
    assert_eq!(entries[0].name(), Some("session/start"));
    assert!(entries[1].is_event(Event::Handoff));

    // Messages, a tool call and its result; what was appended reads back the same.
    let mut cursor = ContextCursor::new(View::default());
    assert_eq!(message(tape, "user", "hello there, tape"), 3);
    let calls = json!([{"id": "call_1", "type": "function",
                        "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]);
    let call = tape
        .append(Kind::ToolCall, json!({"calls": calls}), json!({}))
        .unwrap();
    let result = tape
        .append(
            Kind::ToolResult,
            json!({"results": ["a.txt\nb.txt"]}),
            json!({"role": "owner"}),
        )
        .unwrap();
    assert_eq!((call.id, result.id), (4, 5));
    assert_eq!(tape.entries().unwrap()[4], result);
    let first = records(tape.context(&mut cursor).unwrap());
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(first[0]["content"], "Mon 09:00\nhello there, tape");
    assert_eq!(first[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(
        first[2],
        json!({"role": "tool", "content": "a.txt\nb.txt", "tool_call_id": "call_1", "name": "bash"})
    );
    assert_eq!(
        tape.output("call_1").unwrap(),
        Some(("a.txt\nb.txt".to_owned(), json!({"role": "owner"})))
    );
    assert_eq!(tape.output("call_9").unwrap(), None);

    // The cursor reads only what was appended since; a fresh one reads the same bytes.
    message(tape, "assistant", "two files");
    let second = records(tape.context(&mut cursor).unwrap());
    assert_eq!(second.len(), 4);
    assert!(cursor.last_read > 0);
    let again = records(tape.context(&mut cursor).unwrap());
    assert_eq!(again, second);
    let fresh = records(tape.context(&mut ContextCursor::default()).unwrap());
    assert_eq!(
        serde_json::to_string(&fresh).unwrap(),
        serde_json::to_string(&second).unwrap()
    );

    // A handoff: the context starts after it, with its summary.
    tape.handoff("phase-2", Some("listed the files"), Some("read them"))
        .unwrap();
    message(tape, "user", "next please");
    let after = records(tape.context(&mut cursor).unwrap());
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(
        after[0]["content"],
        "[context from handoff 'phase-2']\nsummary: listed the files\nnext steps: read them"
    );
    let anchors = tape.anchors(10).unwrap();
    assert_eq!(
        anchors.iter().map(|a| a.name()).collect::<Vec<_>>(),
        [Some("session/start"), Some("phase-2")]
    );
    assert_eq!(tape.anchors(1).unwrap()[0].name(), Some("phase-2"));

    // Search: newest first, tool results only when asked, fuzzy.
    let found = tape.search("hello", 5, Searched::Everything).unwrap();
    assert_eq!(found.iter().map(|e| e.id).collect::<Vec<_>>(), [3]);
    assert_eq!(
        tape.search("b.txt", 5, Searched::Everything).unwrap().len(),
        1
    );
    assert!(
        tape.search("b.txt", 5, Searched::Conversation)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        tape.search("helo there", 5, Searched::Conversation)
            .unwrap()
            .len(),
        1
    );
    let left_out =
        json!({"name": Event::MessagesLeftOut.as_str(), "data": {"text": "zebra crossing"}});
    tape.append(Kind::Event, left_out, json!({})).unwrap();
    assert_eq!(
        tape.search("zebra", 5, Searched::Conversation)
            .unwrap()
            .len(),
        1
    );
    message(tape, "user", "hello again");
    let newest = tape.search("hello", 1, Searched::Conversation).unwrap();
    assert_eq!(newest[0].payload["content"], "hello again");

    // The summary.
    tape.event(Event::Run, json!({"usage": {"total_tokens": 1234}}))
        .unwrap();
    tape.event(Event::Run, json!({"elapsed_ms": 3})).unwrap();
    let info = tape.info().unwrap();
    assert_eq!(info.entries, tape.len().unwrap());
    assert_eq!(info.entries, 13);
    assert_eq!(
        (info.anchors, info.last_anchor.as_deref()),
        (2, Some("phase-2"))
    );
    assert_eq!(info.entries_since_last_anchor, 6);
    assert_eq!(info.last_token_usage, Some(1234));

    // Windows: the newest of the kinds asked, from an id and before one, oldest first.
    let ids = |w: Window<'_>, tape: &mut dyn TapeStore| -> Vec<u64> {
        tape.window(&w).unwrap().iter().map(|e| e.id).collect()
    };
    let talk = [Kind::Anchor, Kind::Message];
    let all = Window {
        from: 0,
        before: None,
        kinds: &talk,
        limit: 100,
    };
    assert_eq!(ids(all, tape), [1, 3, 6, 7, 9, 11]);
    assert_eq!(ids(Window { limit: 2, ..all }, tape), [9, 11]);
    assert_eq!(ids(Window { from: 7, ..all }, tape), [7, 9, 11]);
    assert_eq!(
        ids(
            Window {
                before: Some(7),
                limit: 2,
                ..all
            },
            tape
        ),
        [3, 6]
    );
    let work = [Kind::ToolCall, Kind::ToolResult];
    assert_eq!(
        ids(
            Window {
                kinds: &work,
                ..all
            },
            tape
        ),
        [4, 5]
    );
    assert_eq!(
        tape.window(&Window { from: 5, ..all }).unwrap()[0].payload["content"],
        "two files"
    );

    // A reset starts afresh; the archive keeps the old entries somewhere it names.
    let archived = tape.reset(true).unwrap().expect("archived");
    assert!(!archived.is_empty());
    let entries = tape.entries().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].name(), Some("session/start"));
    assert_eq!(entries[0].state().unwrap()["archived"], json!(archived));
    assert!(
        tape.context(&mut cursor).unwrap().is_empty(),
        "an old cursor starts over"
    );
    message(tape, "user", "after the reset");
    assert_eq!(tape.entries().unwrap().last().unwrap().id, 3);
    assert_eq!(tape.reset(false).unwrap(), None);
    assert_eq!(tape.len().unwrap(), 2);

    // A batch runs its operations in order.
    let mut ids = Vec::new();
    tape.batch(true, &mut |t| ids.push(message(t, "user", "in a batch")))
        .unwrap();
    assert_eq!(ids, [3]);

    // Several writers (other handles, other threads): unique, increasing ids, nothing lost.
    std::thread::scope(|s| {
        for w in 0..4 {
            s.spawn(move || {
                let mut tape = open("suite");
                for i in 0..25 {
                    message(tape.as_mut(), "user", &format!("writer {w} line {i}"));
                }
            });
        }
    });
    let ids: Vec<u64> = tape.entries().unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=103).collect::<Vec<_>>());
    let mut other = open("another session");
    assert_eq!(other.len().unwrap(), 0, "tapes of other sessions are apart");
}

/// The sessions of a workspace: each tape listed with the session its `session/start` anchor
/// records (also after a reset), its entry count and newest date, newest first; archives and
/// other workspaces' tapes left out; a listed tape opened by name reads as its session's.
fn listing(home: &Path, db: Option<&Arc<Database>>) {
    let (ws, elsewhere) = (home.join("ws"), home.join("elsewhere"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let tape = |ws: &Path, session: &str| open(home, db, ws, "bub", session).unwrap();
    let tick = || std::thread::sleep(std::time::Duration::from_millis(5));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let list = |home, db, ws| runtime.block_on(list(home, db, ws));
    assert_eq!(list(home, db, &ws).unwrap(), []);

    let mut first = tape(&ws, "telegram:1");
    first.ensure_bootstrap().unwrap();
    message(first.as_mut(), "user", "one");
    first.reset(true).unwrap().expect("archived");
    message(first.as_mut(), "user", "two");
    tick();
    let mut second = tape(&ws, "cli");
    second.ensure_bootstrap().unwrap();
    message(second.as_mut(), "user", "three");
    message(second.as_mut(), "assistant", "four");
    tape(&elsewhere, "telegram:9").ensure_bootstrap().unwrap();
    let start = &second.entries().unwrap()[0];
    assert_eq!(start.state().unwrap()["session"], "cli");

    let newest =
        |tape: &mut Box<dyn TapeStore>| tape.entries().unwrap().last().unwrap().date.clone();
    let row = |tape: &mut Box<dyn TapeStore>, session: &str| Listed {
        name: tape_name_for("bub", session),
        session: Some(session.to_owned()),
        entries: tape.len().unwrap(),
        last: Some(newest(tape)),
    };
    let (a, b) = (row(&mut first, "telegram:1"), row(&mut second, "cli"));
    assert_eq!((a.entries, b.entries), (3, 4));
    assert_eq!(list(home, db, &ws).unwrap(), [b.clone(), a]);
    tick();
    message(first.as_mut(), "user", "five");
    let a = row(&mut first, "telegram:1");
    assert_eq!(list(home, db, &ws).unwrap(), [a.clone(), b]);
    let others = list(home, db, &elsewhere).unwrap();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].session.as_deref(), Some("telegram:9"));

    let mut by_name = open_name(home, db, &ws, &a.name).unwrap();
    assert_eq!(by_name.name(), a.name);
    assert_eq!(by_name.entries().unwrap(), first.entries().unwrap());
    // What one handle appends, the other reads.
    message(by_name.as_mut(), "user", "six");
    assert_eq!(first.len().unwrap(), 5);
}

/// The context after the same operations, as the model would be sent it.
fn script(tape: &mut dyn TapeStore) -> String {
    tape.ensure_bootstrap().unwrap();
    message(tape, "user", "ünïcödé and \"quotes\"");
    let calls = json!([{"id": "c", "type": "function", "function": {"name": "fs.read", "arguments": "{}"}}]);
    tape.append(Kind::ToolCall, json!({"calls": calls}), json!({}))
        .unwrap();
    tape.append(
        Kind::ToolResult,
        json!({"results": [{"z": 1, "a": [1.5, null]}]}),
        json!({}),
    )
    .unwrap();
    tape.handoff("h", Some("s"), None).unwrap();
    message(tape, "assistant", "done");
    let calls =
        json!([{"id": "d", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]);
    tape.append(Kind::ToolCall, json!({"calls": calls}), json!({}))
        .unwrap();
    let context = records(tape.context(&mut ContextCursor::default()).unwrap());
    serde_json::to_string(&context).unwrap()
}

#[test]
fn file_tapes_pass_the_suite() {
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("ws");
    let open_file = |session: &str| open(home.path(), None, &workspace, "bub", session).unwrap();
    suite(&open_file);
    let home = tempfile::tempdir().unwrap();
    listing(home.path(), None);
}

#[test]
fn postgres_tapes_pass_the_suite_and_render_as_files_do() {
    let db = Database::shared(&cluster::database()).unwrap();
    db.migrate_in_test();
    let home = tempfile::tempdir().unwrap();
    let workspace = home.path().join("ws");
    let open_pg = |session: &str| open(home.path(), Some(&db), &workspace, "bub", session).unwrap();
    suite(&open_pg);
    // Each event is written with its name in the `event` column.
    let pool = db.pool();
    let named = db.run(async move {
        let client = crate::db::client(&pool).await?;
        let sql = "SELECT count(*), count(event) FROM bub_tape_entries WHERE kind = 'event'";
        let row = client.query_one(sql, &[]).await?;
        Ok((row.get::<_, i64>(0), row.get::<_, i64>(1)))
    });
    let (events, named) = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(named)
        .unwrap();
    assert!(
        events > 0 && named == events,
        "{named} of {events} events named"
    );

    let from_pg = script(open_pg("script").as_mut());
    let file_home = tempfile::tempdir().unwrap();
    let from_file = script(
        open(file_home.path(), None, &workspace, "bub", "script")
            .unwrap()
            .as_mut(),
    );
    assert_eq!(from_pg, from_file);
    assert!(from_pg.contains("error: no result recorded"), "{from_pg}");
}

#[test]
fn postgres_lists_the_tapes_of_a_workspace_as_files_do() {
    let db = Database::shared(&cluster::database()).unwrap();
    db.migrate_in_test();
    let home = tempfile::tempdir().unwrap();
    listing(home.path(), Some(&db));
}

#[test]
fn the_same_workspace_and_session_is_the_same_tape_on_postgres() {
    let db: Arc<Database> = Database::shared(&cluster::database()).unwrap();
    db.migrate_in_test();
    let home = tempfile::tempdir().unwrap();
    let a = |ws: &Path| open(home.path(), Some(&db), ws, "bub", "telegram:1").unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    message(a(&ws).as_mut(), "user", "one");
    // The same workspace by another path, and another workspace.
    assert_eq!(a(&ws.join("../ws")).len().unwrap(), 1);
    assert_eq!(a(home.path()).len().unwrap(), 0);
}
