//! Tape behaviour through the public API: ids, reopening, torn lines, truncation, concurrent
//! appenders (threads, handles, processes), bootstrap, handoff context, reset, search, info.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use bub::llm::ChatMessage;
use bub::tape::{Event, FileTape, Kind, Searched, TapeEntry};
use serde_json::{Value, json};

fn tape_at(dir: &Path, name: &str) -> FileTape {
    FileTape::open_path(dir.join(format!("{name}.jsonl")), name.to_string()).unwrap()
}

/// The context as the tape records its messages.
fn context_of(tape: &mut FileTape) -> Vec<Value> {
    let messages = tape.context_messages().unwrap();
    messages.iter().map(ChatMessage::to_record).collect()
}

fn msg(tape: &mut FileTape, role: &str, content: &str) -> TapeEntry {
    tape.append(
        Kind::Message,
        json!({"role": role, "content": content}),
        json!({}),
    )
    .unwrap()
}

fn ids(tape: &mut FileTape) -> Vec<u64> {
    tape.entries().unwrap().iter().map(|e| e.id).collect()
}

fn raw_append(path: &Path, bytes: &[u8]) {
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn file_name_follows_workspace_hash_and_encoded_tape_name() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let tape = FileTape::open(home.path(), ws.path(), "bub", "telegram:42").unwrap();
    let session_hash = bub::tape::md5_hex("telegram:42");
    assert_eq!(tape.name(), format!("bub:{}", &session_hash[..16]));
    let ws_hash = bub::tape::md5_hex(&ws.path().canonicalize().unwrap().to_string_lossy());
    let expected = format!("{ws_hash}__bub%3A{}.jsonl", &session_hash[..16]);
    assert_eq!(tape.path(), home.path().join("tapes").join(expected));
    // Opening reads and makes nothing: the folder comes with the first append.
    assert!(!home.path().join("tapes").exists());
    let mut tape = tape;
    tape.event(Event::Run, json!(null)).unwrap();
    assert!(tape.path().is_file());
}

#[test]
fn ids_count_from_one_without_reads_and_continue_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "a");
    let got: Vec<u64> = (0..3)
        .map(|i| msg(&mut tape, "user", &format!("m{i}")).id)
        .collect();
    assert_eq!(got, vec![1, 2, 3]);
    let mut again = tape_at(dir.path(), "a");
    assert_eq!(msg(&mut again, "user", "m3").id, 4);
    assert_eq!(ids(&mut again), vec![1, 2, 3, 4]);
    // Lines are in the documented field order.
    let text = std::fs::read_to_string(again.path()).unwrap();
    assert!(text.starts_with(
        r#"{"id":1,"kind":"message","payload":{"role":"user","content":"m0"},"meta":{},"date":""#
    ));
}

#[test]
fn tapes_are_isolated_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = (tape_at(dir.path(), "a"), tape_at(dir.path(), "b"));
    msg(&mut a, "user", "for a");
    msg(&mut b, "user", "for b");
    msg(&mut b, "user", "for b again");
    assert_eq!(ids(&mut a), vec![1]);
    assert_eq!(ids(&mut b), vec![1, 2]);
}

#[test]
fn incremental_reads_see_lines_appended_by_others() {
    let dir = tempfile::tempdir().unwrap();
    let (mut writer, mut reader) = (tape_at(dir.path(), "t"), tape_at(dir.path(), "t"));
    msg(&mut writer, "user", "one");
    assert_eq!(reader.len().unwrap(), 1);
    msg(&mut writer, "user", "two");
    raw_append(
        writer.path(),
        b"{\"id\":3,\"kind\":\"event\",\"payload\":{\"name\":\"ext\"}}\n",
    );
    assert_eq!(ids(&mut reader), vec![1, 2, 3]);
    assert_eq!(msg(&mut reader, "user", "four").id, 4);
}

#[test]
fn truncated_file_is_re_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    for i in 0..3 {
        msg(&mut tape, "user", &format!("m{i}"));
    }
    assert_eq!(tape.len().unwrap(), 3);
    let text = std::fs::read_to_string(tape.path()).unwrap();
    let first = text.lines().next().unwrap();
    std::fs::write(tape.path(), format!("{first}\n")).unwrap();
    assert_eq!(ids(&mut tape), vec![1]);
    assert_eq!(msg(&mut tape, "user", "again").id, 2);
}

#[test]
fn torn_last_line_is_skipped_and_tape_stays_appendable() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    msg(&mut tape, "user", "one");
    msg(&mut tape, "user", "two");
    raw_append(
        tape.path(),
        br#"{"id":3,"kind":"message","payload":{"role":"user","con"#,
    );
    let mut fresh = tape_at(dir.path(), "t");
    assert_eq!(ids(&mut fresh), vec![1, 2]);
    assert_eq!(msg(&mut fresh, "user", "three").id, 3);
    assert_eq!(msg(&mut tape, "user", "four").id, 4);
    let mut reopened = tape_at(dir.path(), "t");
    assert_eq!(ids(&mut reopened), vec![1, 2, 3, 4]);
    let texts: Vec<String> = reopened
        .entries()
        .unwrap()
        .iter()
        .map(|e| e.payload["content"].to_string())
        .collect();
    assert_eq!(texts, vec!["\"one\"", "\"two\"", "\"three\"", "\"four\""]);
    // Every complete line but the repaired torn one is valid JSON.
    let text = std::fs::read_to_string(reopened.path()).unwrap();
    let invalid = text
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).is_err())
        .count();
    assert_eq!(invalid, 1);
}

#[test]
fn torn_line_that_looks_complete_does_not_duplicate_ids() {
    // A torn prefix ending in `}` passes the cheap prefix check; the entry appended after it
    // reuses its id, and the reader must keep only the valid one.
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    msg(&mut tape, "user", "one");
    raw_append(
        tape.path(),
        br#"{"id":2,"kind":"event","payload":{"name":"x","data":{}}"#,
    );
    assert_eq!(tape.event(Event::Run, json!(null)).unwrap().id, 2);
    assert_eq!(msg(&mut tape, "user", "three").id, 3);
    let mut reopened = tape_at(dir.path(), "t");
    assert_eq!(ids(&mut reopened), vec![1, 2, 3]);
    assert!(reopened.entries().unwrap()[1].is_event(Event::Run));
    // Same when the reader indexed the torn line in an earlier sync than its successor.
    let mut reader = tape_at(dir.path(), "t");
    reader.len().unwrap();
    raw_append(reader.path(), b"\n");
    raw_append(
        reader.path(),
        br#"{"id":4,"kind":"event","payload":{"name":"x","data":{}}"#,
    );
    raw_append(reader.path(), b"\n");
    assert_eq!(reader.len().unwrap(), 4, "not yet known to be torn");
    raw_append(
        reader.path(),
        b"{\"id\":4,\"kind\":\"event\",\"payload\":{\"name\":\"z\"}}\n",
    );
    assert_eq!(ids(&mut reader), vec![1, 2, 3, 4]);
    assert_eq!(reader.entries().unwrap()[3].payload["name"], "z");
    // Two valid lines with one id (a hand-edited file) are both kept; new ids continue after.
    raw_append(
        reader.path(),
        b"{\"id\":4,\"kind\":\"event\",\"payload\":{\"name\":\"w\"}}\n",
    );
    assert_eq!(ids(&mut reader), vec![1, 2, 3, 4, 4]);
    assert_eq!(reader.event(Event::Run, json!(null)).unwrap().id, 5);
}

#[test]
fn valid_entry_without_newline_is_completed_not_duplicated() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    tape.ensure_bootstrap().unwrap();
    raw_append(
        tape.path(),
        br#"{"id":3,"kind":"event","payload":{"name":"ext"}}"#,
    );
    assert_eq!(
        ids(&mut tape),
        vec![1, 2],
        "an unterminated line is not indexed by readers"
    );
    tape.ensure_bootstrap().unwrap();
    assert_eq!(ids(&mut tape), vec![1, 2, 3], "a writer terminates it");
    assert_eq!(msg(&mut tape, "user", "next").id, 4);
    assert_eq!(ids(&mut tape_at(dir.path(), "t")), vec![1, 2, 3, 4]);
}

#[test]
fn two_handles_appending_alternately_get_consecutive_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b) = (tape_at(dir.path(), "t"), tape_at(dir.path(), "t"));
    let mut got = Vec::new();
    for i in 0..10 {
        let tape = if i % 2 == 0 { &mut a } else { &mut b };
        got.push(msg(tape, "user", &format!("m{i}")).id);
    }
    assert_eq!(got, (1..=10).collect::<Vec<_>>());
    assert_eq!(ids(&mut a), got);
}

fn check_unique_and_valid(path: &Path, expected: usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            seen.insert(v["id"].as_u64().unwrap()),
            "duplicate id in {line}"
        );
    }
    assert_eq!(seen.len(), expected);
    assert_eq!(
        seen.iter().copied().collect::<Vec<_>>(),
        (1..=expected as u64).collect::<Vec<_>>()
    );
}

#[test]
fn threads_with_separate_handles_never_duplicate_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::thread::scope(|s| {
        for t in 0..4 {
            let path = path.clone();
            s.spawn(move || {
                let mut tape = FileTape::open_path(path, "t".into()).unwrap();
                for i in 0..200 {
                    tape.append(Kind::Message, json!({"role": "user", "content": format!("t{t} m{i} {}", "x".repeat(150))}), json!({}))
                        .unwrap();
                }
            });
        }
    });
    check_unique_and_valid(&path, 800);
    let mut tape = FileTape::open_path(path, "t".into()).unwrap();
    assert_eq!(tape.len().unwrap(), 800);
}

/// Child half of `processes_appending_concurrently_never_duplicate_ids` (a helper, not a test:
/// that test starts this binary with `--ignored --exact tape::child_process_appender` and
/// `BUB_TAPE_CHILD_PATH` set; without it, it does nothing).
#[test]
#[ignore = "helper process of processes_appending_concurrently_never_duplicate_ids"]
fn child_process_appender() {
    let Some(path) = std::env::var_os("BUB_TAPE_CHILD_PATH") else {
        return;
    };
    let mut tape = FileTape::open_path(PathBuf::from(path), "t".into()).unwrap();
    for i in 0..200 {
        tape.event(Event::Command, json!({"i": i, "pid": std::process::id()}))
            .unwrap();
    }
}

#[test]
fn processes_appending_concurrently_never_duplicate_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "tape::child_process_appender",
                    "--test-threads",
                    "1",
                    "--quiet",
                ])
                .env("BUB_TAPE_CHILD_PATH", &path)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut tape = FileTape::open_path(path.clone(), "t".into()).unwrap();
    for i in 0..200 {
        tape.event(Event::Command, json!({"i": i})).unwrap();
    }
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    check_unique_and_valid(&path, 600);
}

#[test]
fn bootstrap_once_and_again_after_external_delete() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    tape.ensure_bootstrap().unwrap();
    tape.ensure_bootstrap().unwrap();
    let entries = tape.entries().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].kind, Kind::Anchor);
    assert_eq!(
        entries[0].payload,
        json!({"name": "session/start", "state": {"owner": "human"}})
    );
    assert_eq!(
        entries[1].payload,
        json!({"name": "handoff", "data": {"name": "session/start", "state": {"owner": "human"}}})
    );
    msg(&mut tape, "user", "hi");
    std::fs::remove_file(tape.path()).unwrap();
    tape.ensure_bootstrap().unwrap();
    assert_eq!(ids(&mut tape), vec![1, 2]);
    assert_eq!(tape.anchors(10).unwrap().len(), 1);
}

#[test]
fn context_starts_after_last_anchor_with_its_handoff_note() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    tape.ensure_bootstrap().unwrap();
    msg(&mut tape, "user", "old");
    assert_eq!(
        context_of(&mut tape),
        vec![json!({"role": "user", "content": "old"})]
    );
    tape.handoff("phase-2", Some("built the parser"), Some("write tests"))
        .unwrap();
    msg(&mut tape, "user", "new");
    let calls = json!([
        {"id": "call-1", "type": "function", "function": {"name": "fs.write", "arguments": "{}"}},
        {"id": "call-2", "type": "function", "function": {"name": "fs.read", "arguments": "{}"}}
    ]);
    tape.append(Kind::System, json!({"content": "sys"}), json!({}))
        .unwrap();
    tape.append(Kind::ToolCall, json!({"calls": calls}), json!({}))
        .unwrap();
    tape.append(
        Kind::ToolResult,
        json!({"results": ["ok", {"content": "hi"}]}),
        json!({}),
    )
    .unwrap();
    tape.event(Event::Run, json!({"status": "ok"})).unwrap();
    msg(&mut tape, "assistant", "done");
    let context = context_of(&mut tape);
    assert_eq!(
        context,
        vec![
            json!({"role": "user", "content": "[context from handoff 'phase-2']\nsummary: built the parser\nnext steps: write tests"}),
            json!({"role": "user", "content": "new"}),
            json!({"role": "assistant", "content": "", "tool_calls": calls}),
            json!({"role": "tool", "content": "ok", "tool_call_id": "call-1", "name": "fs.write"}),
            json!({"role": "tool", "content": "{\"content\": \"hi\"}", "tool_call_id": "call-2", "name": "fs.read"}),
            json!({"role": "assistant", "content": "done"}),
        ]
    );
    // A handoff without summary or next steps has no state and no note.
    tape.handoff("bare", None, Some("  ")).unwrap();
    let anchors = tape.anchors(1).unwrap();
    assert_eq!(anchors[0].payload, json!({"name": "bare"}));
    assert!(context_of(&mut tape).is_empty());
}

#[test]
fn orphan_tool_result_context() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    tape.append(
        Kind::ToolResult,
        json!({"results": [{"status": "ok"}]}),
        json!({}),
    )
    .unwrap();
    assert_eq!(
        context_of(&mut tape),
        vec![json!({"role": "tool", "content": "{\"status\": \"ok\"}"})]
    );
}

#[test]
fn reset_without_file_gives_one_session_start_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    assert_eq!(tape.reset(false).unwrap(), None);
    let anchors = tape.anchors(50).unwrap();
    assert_eq!(anchors.len(), 1);
    assert_eq!(anchors[0].name(), Some("session/start"));
}

#[test]
fn reset_with_archive_keeps_the_old_tape() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    let mut other = tape_at(dir.path(), "t");
    tape.ensure_bootstrap().unwrap();
    msg(&mut tape, "user", "before");
    other.len().unwrap();
    let archived = tape.reset(true).unwrap().expect("archive path");
    let name = archived.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("t.jsonl.") && name.ends_with("Z.bak"),
        "{name}"
    );
    assert_eq!(
        std::fs::read_to_string(&archived).unwrap().lines().count(),
        3
    );
    let entries = tape.entries().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[0].payload,
        json!({"name": "session/start", "state": {"owner": "human", "archived": archived.to_string_lossy()}})
    );
    // Another handle notices the replaced file and continues its ids.
    assert_eq!(msg(&mut other, "user", "after").id, 3);
    assert!(context_of(&mut tape) == vec![json!({"role": "user", "content": "after"})]);
    // A second archive in the same second gets a distinct name.
    let second = tape.reset(true).unwrap().unwrap();
    assert_ne!(second, archived);
    assert!(archived.exists() && second.exists());
}

#[test]
fn search_examples_from_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    msg(
        &mut tape,
        "user",
        "Please review the database migration plan.",
    );
    msg(&mut tape, "user", "unrelated chatter");
    let found = tape
        .search("databse migrtion", 20, Searched::Everything)
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].payload["content"],
        "Please review the database migration plan."
    );

    let old = msg(&mut tape, "user", "alpha one");
    let new = msg(&mut tape, "assistant", "alpha two");
    let found = tape.search("alpha", 1, Searched::Everything).unwrap();
    assert_eq!(found.iter().map(|e| e.id).collect::<Vec<_>>(), vec![new.id]);
    let found = tape.search("ALPHA", 20, Searched::Everything).unwrap();
    assert_eq!(
        found.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![new.id, old.id]
    );
    assert!(
        tape.search("  ", 20, Searched::Everything)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn search_covers_messages_and_tool_results_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    tape.append(
        Kind::ToolResult,
        json!({"results": ["kubernetes manifest applied"]}),
        json!({}),
    )
    .unwrap();
    tape.event(Event::Command, json!("kubernetes manifest applied"))
        .unwrap();
    tape.append(
        Kind::System,
        json!({"content": "kubernetes manifest applied"}),
        json!({}),
    )
    .unwrap();
    tape.append(
        Kind::Message,
        json!({"role": "user", "content": "x"}),
        json!({"run_id": "kubernetes"}),
    )
    .unwrap();
    let found = tape.search("kubernetes", 20, Searched::Everything).unwrap();
    assert_eq!(
        found.iter().map(|e| &e.kind).collect::<Vec<_>>(),
        [&Kind::Message, &Kind::ToolResult]
    );
}

#[test]
fn info_counts_by_position_and_reports_last_usage() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    let info = tape.info().unwrap();
    assert_eq!(
        info.to_string(),
        "tape=t\nentries=0\nanchors=0\nlast_anchor=-\nentries_since_last_anchor=0\nlast_token_usage=unknown"
    );
    tape.ensure_bootstrap().unwrap();
    tape.event(
        Event::Run,
        json!({"status": "ok", "usage": {"total_tokens": 120}}),
    )
    .unwrap();
    tape.handoff("phase-2", Some("s"), None).unwrap();
    tape.event(Event::Run, json!({"status": "error"})).unwrap();
    msg(&mut tape, "user", "hi");
    let info = tape.info().unwrap();
    assert_eq!(
        info.to_string(),
        "tape=t\nentries=7\nanchors=2\nlast_anchor=phase-2\nentries_since_last_anchor=3\nlast_token_usage=120"
    );
}

/// A foreign line with id `id` (another writer, or a hand-edited file).
fn foreign_line(id: u64) -> String {
    format!(
        "{{\"id\":{id},\"kind\":\"message\",\"payload\":{{\"role\":\"user\",\"content\":\"x\"}},\"meta\":{{}},\"date\":\"2026-01-01T00:00:00.000Z\"}}\n"
    )
}

#[test]
fn ids_never_wrap_around() {
    assert_eq!(bub::tape::MAX_ID, i64::MAX as u64);
    for last in [u64::MAX, i64::MAX as u64, u64::MAX - 1, i64::MAX as u64 + 7] {
        let dir = tempfile::tempdir().unwrap();
        let mut tape = tape_at(dir.path(), "full");
        msg(&mut tape, "user", "first");
        raw_append(tape.path(), foreign_line(last).as_bytes());
        let before = std::fs::read(tape.path()).unwrap();
        let err = tape
            .append(
                Kind::Message,
                json!({"role": "user", "content": "y"}),
                json!({}),
            )
            .unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("tape id space exhausted")
                && text.contains(&format!("the largest entry id is {last}")),
            "{text}"
        );
        // A handoff (two entries) writes nothing either, not half of itself.
        assert!(tape.handoff("later", Some("s"), None).is_err());
        assert_eq!(
            std::fs::read(tape.path()).unwrap(),
            before,
            "nothing written"
        );
        assert_eq!(ids(&mut tape), vec![1, last]);
        // The way out: a reset starts the ids afresh.
        tape.reset(false).unwrap();
        assert_eq!(ids(&mut tape), vec![1, 2]);
        assert_eq!(msg(&mut tape, "user", "again").id, 3);
    }
    // The largest id itself is still given out, once.
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "almost");
    raw_append(tape.path(), foreign_line(i64::MAX as u64 - 1).as_bytes());
    assert_eq!(msg(&mut tape, "user", "last").id, i64::MAX as u64);
    assert!(tape.append(Kind::Message, json!({}), json!({})).is_err());
}

#[test]
fn torn_anchor_line_is_dropped_from_the_counts() {
    // A torn anchor (completed by a repairing append's `\n`) is indexed as an anchor until its
    // successor reuses its id; then it no longer counts, and a bootstrap anchor is written.
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    msg(&mut tape, "user", "one");
    raw_append(
        tape.path(),
        br#"{"id":2,"kind":"anchor","payload":{"name":"torn"}"#,
    );
    assert_eq!(tape.event(Event::Run, json!(null)).unwrap().id, 2);
    let mut fresh = tape_at(dir.path(), "t");
    let info = fresh.info().unwrap();
    assert_eq!(
        (
            info.entries,
            info.anchors,
            info.last_anchor,
            info.entries_since_last_anchor
        ),
        (2, 0, None, 2)
    );
    assert!(fresh.anchors(10).unwrap().is_empty());
    fresh.ensure_bootstrap().unwrap();
    assert_eq!(ids(&mut fresh), vec![1, 2, 3, 4]);
    assert_eq!(fresh.anchors(10).unwrap()[0].name(), Some("session/start"));
    assert_eq!(fresh.info().unwrap().entries_since_last_anchor, 1);
}

#[test]
fn dropping_a_torn_line_keeps_the_valid_line_before_it() {
    // Two torn lines after a valid one: the first is dropped when the second reuses its id,
    // the second is invalid too; a later line with the valid line's id re-checks that line
    // itself (not the dropped one) and keeps it.
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    msg(&mut tape, "user", "one");
    raw_append(
        tape.path(),
        b"{\"id\":2,\"kind\":\"event\",\"payload\":{\"name\":\"x\"}\n{\"id\":2,\"kind\":\"event\",\"payload\":{\"name\":\"x\"}\n",
    );
    raw_append(tape.path(), foreign_line(1).as_bytes());
    let mut fresh = tape_at(dir.path(), "t");
    assert_eq!(fresh.len().unwrap(), 2);
    assert_eq!(ids(&mut fresh), vec![1, 1]);
    assert_eq!(msg(&mut fresh, "user", "next").id, 2);
}

#[test]
fn anchors_older_than_those_the_index_keeps_come_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut tape = tape_at(dir.path(), "t");
    tape.ensure_bootstrap().unwrap();
    for i in 1..=120 {
        msg(&mut tape, "user", &format!("m{i}"));
        tape.handoff(&format!("phase-{i}"), Some("s"), None)
            .unwrap();
    }
    let names = |anchors: Vec<TapeEntry>| -> Vec<String> {
        anchors
            .iter()
            .map(|a| a.name().unwrap().to_string())
            .collect()
    };
    let expected: Vec<String> = std::iter::once("session/start".to_string())
        .chain((1..=120).map(|i| format!("phase-{i}")))
        .collect();
    let mut fresh = tape_at(dir.path(), "t");
    for limit in [1, 50, 64, 65, 100, 121, 500] {
        let want = &expected[expected.len().saturating_sub(limit)..];
        assert_eq!(names(fresh.anchors(limit).unwrap()), want, "limit {limit}");
        assert_eq!(names(tape.anchors(limit).unwrap()), want, "limit {limit}");
    }
    let info = fresh.info().unwrap();
    assert_eq!((info.entries, info.anchors), (2 + 120 * 3, 121));
    assert_eq!(info.last_anchor.as_deref(), Some("phase-120"));
    assert_eq!(info.entries_since_last_anchor, 1);
}

/// A batch holds the file locked for all its operations: another handle (another thread)
/// appends only after it, and ids stay unique and increasing; a tape without a file is not
/// created by a batch that only reads.
#[test]
fn a_batch_holds_the_tape_for_its_operations() {
    let dir = tempfile::tempdir().unwrap();
    let mut unread = tape_at(dir.path(), "none");
    assert_eq!(unread.batch(false, |t| t.len().unwrap()).unwrap(), 0);
    assert!(!unread.path().exists(), "a reading batch creates no file");

    let mut tape = tape_at(dir.path(), "t");
    msg(&mut tape, "user", "first");
    let (tx, rx) = std::sync::mpsc::channel();
    let path = tape.path().to_path_buf();
    let other = std::thread::spawn(move || {
        let mut other = FileTape::open_path(path, "t".into()).unwrap();
        rx.recv().unwrap();
        msg(&mut other, "user", "other").id
    });
    let inside = tape
        .batch(true, |t| {
            tx.send(()).unwrap();
            let a = msg(t, "assistant", "a").id;
            // Held between operations: no other handle can lock the file now.
            let probe = std::fs::File::open(t.path()).unwrap();
            assert!(
                matches!(probe.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
                "the file stays locked between a batch's operations"
            );
            let b = msg(t, "assistant", "b").id;
            (a, b, t.entries().unwrap().len())
        })
        .unwrap();
    assert_eq!(inside, (2, 3, 3));
    assert_eq!(
        other.join().unwrap(),
        4,
        "the other handle appended after the batch"
    );
    assert_eq!(ids(&mut tape), [1, 2, 3, 4]);
}
