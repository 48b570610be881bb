//! The tapes of a workspace, for the console's session list ([`list`]): each tape's name, the
//! session its `session/start` anchor names, its number of entries and the date of its newest
//! entry — from the tape files under `BUB_HOME/tapes/`, or from the database's tape tables.
//!
//! Archived tapes (a file's `.bak` copy, a database tape `<name>.<YYYYMMDDTHHMMSSZ>`) are not
//! listed. Reading a file costs one pass (the index's count) plus the lines up to the first
//! anchor (normally the first line) and the last line; the database answers one query.

use std::cmp::Reverse;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use serde_json::Value;

use super::entry::{Kind, TapeEntry, parse_entry};
use super::index::{BackLines, Index, line_kind, lines, read_at};
use super::store::{FileTape, SESSION_START, workspace_key};
use crate::db::Database;
#[cfg(feature = "postgres")]
use crate::db::{self, Cached};

/// One tape of a workspace, as the console's session list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    /// The tape name (`bub:0123456789abcdef`).
    pub name: String,
    /// The session it belongs to, when its `session/start` anchor names it (tapes written before it did do not).
    pub session: Option<String>,
    /// Number of entries.
    pub entries: usize,
    /// The date of its newest entry, as stored (RFC 3339), when it has any.
    pub last: Option<String>,
}

/// What names an archived tape in the database: the reset's (or the import's) stamp after the
/// tape name.
const ARCHIVED: &str = r"\.[0-9]{8}T[0-9]{6}Z(-[0-9]+)?$";

/// The tapes of `workspace`, newest first (by the date of their newest entry, then by name): in
/// `database` when there is one, else the files under `home` (`BUB_HOME/tapes/`, read on the
/// blocking pool).
pub(crate) async fn list(
    home: &Path,
    database: Option<&Arc<Database>>,
    workspace: &Path,
) -> anyhow::Result<Vec<Listed>> {
    let mut listed = match database {
        #[cfg(feature = "postgres")]
        Some(db) => list_database(db, workspace).await?,
        #[cfg(not(feature = "postgres"))]
        Some(db) => match **db {},
        None => {
            let (home, workspace) = (home.to_path_buf(), workspace.to_path_buf());
            crate::storage::blocking(move || list_files(&home, &workspace)).await?
        }
    };
    // Newest first; dates compared as instants when they parse (other writers' offsets), a
    // tape without entries last.
    listed.sort_by_cached_key(|t| {
        let instant = t
            .last
            .as_deref()
            .and_then(|d| chrono::DateTime::parse_from_rfc3339(d).ok());
        (Reverse((instant, t.last.clone())), t.name.clone())
    });
    Ok(listed)
}

/// The `<workspace key>__<name>.jsonl` files of `home/tapes`.
fn list_files(home: &Path, workspace: &Path) -> anyhow::Result<Vec<Listed>> {
    let dir = home.join("tapes");
    let files = match std::fs::read_dir(&dir) {
        Ok(files) => files,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", dir.display()))),
    };
    let key = workspace_key(workspace);
    let mut listed = Vec::new();
    for file in files {
        let path = file?.path();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !file_name.ends_with(".jsonl") {
            continue;
        }
        let Some((_, name)) = key_of(file_name).filter(|(ws, _)| *ws == key) else {
            continue;
        };
        if let Some(tape) = list_file(FileTape::open_path(path, name)?)? {
            listed.push(tape);
        }
    }
    Ok(listed)
}

/// One tape file (`None`: it is gone).
fn list_file(mut tape: FileTape) -> anyhow::Result<Option<Listed>> {
    let name = tape.name().to_owned();
    tape.read(|index, file| {
        let Some(file) = file else { return Ok(None) };
        let session = first_anchor(file, index)?.and_then(|a| session_of(&a.payload));
        let mut back = BackLines::new(file, index.synced);
        let mut last = None;
        while let Some(line) = back.next_line()? {
            if let Some(entry) = parse_entry(line) {
                last = Some(entry.date).filter(|d| !d.is_empty());
                break;
            }
        }
        Ok(Some(Listed {
            name,
            session,
            entries: index.entries,
            last,
        }))
    })
}

/// The tape's first anchor: one the index keeps when it keeps them all, else the first anchor
/// line read from the start of the file.
fn first_anchor(file: &File, index: &Index) -> anyhow::Result<Option<TapeEntry>> {
    if index.anchor_count == 0 {
        return Ok(None);
    }
    let kept = index.kept_anchors();
    if kept.len() == index.anchor_count
        && let Some(first) = kept.front()
    {
        return Ok(parse_entry(&read_at(file, first.offset, first.len)?));
    }
    let mut reader = BufReader::new(file);
    reader.seek(SeekFrom::Start(0))?;
    let mut reader = reader.take(index.synced);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            return Ok(None);
        }
        if let Some(line) = lines(&buf).next()
            && line_kind(line) == Some(Kind::Anchor)
        {
            return Ok(parse_entry(line));
        }
    }
}

/// The session an anchor's payload names, when it is a `session/start` anchor that names one.
fn session_of(payload: &Value) -> Option<String> {
    if payload.get("name").and_then(Value::as_str) != Some(SESSION_START) {
        return None;
    }
    Some(payload.pointer("/state/session")?.as_str()?.to_owned())
}

/// The tapes of `workspace` in the database: one query, each tape's count, newest entry (the
/// largest id: read by the primary key) and first anchor (by the anchors' index).
#[cfg(feature = "postgres")]
async fn list_database(db: &Database, workspace: &Path) -> anyhow::Result<Vec<Listed>> {
    let workspace = workspace_key(workspace);
    let client = db::client(&db.relaxed_pool()).await?;
    let rows = client
            .rows(
                "SELECT t.name, \
                        (SELECT count(*) FROM bub_tape_entries WHERE tape = t.id), \
                        (SELECT date FROM bub_tape_entries WHERE tape = t.id \
                         ORDER BY id DESC LIMIT 1), \
                        (SELECT payload FROM bub_tape_entries WHERE tape = t.id AND kind = 'anchor' \
                         ORDER BY id LIMIT 1) \
                 FROM bub_tapes t WHERE t.workspace = $1 AND t.name !~ $2",
                &[&workspace, &ARCHIVED],
            )
            .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let anchor: Option<String> = r.get(3);
            let session = anchor
                .and_then(|p| serde_json::from_str::<Value>(&p).ok())
                .and_then(|p| session_of(&p));
            Listed {
                name: r.get(0),
                session,
                entries: r.get::<_, i64>(1) as usize,
                last: r.get::<_, Option<String>>(2).filter(|d| !d.is_empty()),
            }
        })
        .collect())
}

/// The workspace key and tape name of a tape file (`None`: not a tape file).
pub(super) fn key_of(file_name: &str) -> Option<(String, String)> {
    let (base, archive) = match file_name.strip_suffix(".jsonl") {
        Some(base) => (base, None),
        None => {
            let stem = file_name.strip_suffix(".bak")?;
            let (base, stamp) = stem.rsplit_once(".jsonl.")?;
            (base, Some(stamp))
        }
    };
    let (workspace, encoded) = base.split_once("__")?;
    let name = percent_decode_str(encoded).decode_utf8().ok()?;
    let name = match archive {
        Some(stamp) => format!("{name}.{stamp}"),
        None => name.into_owned(),
    };
    Some((workspace.to_owned(), name))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tape::{Event, tape_path};

    #[tokio::test]
    async fn a_tape_whose_anchor_names_no_session_is_listed_without_one() {
        let home = tempfile::tempdir().unwrap();
        let ws = home.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        // Written before anchors named their session, by hand.
        let old = tape_path(home.path(), &ws, "bub:0123456789abcdef");
        std::fs::create_dir_all(old.parent().unwrap()).unwrap();
        let line = r#"{"id":1,"kind":"anchor","payload":{"name":"session/start","state":{"owner":"human"}},"meta":{},"date":"2025-01-02T03:04:05.678Z"}"#;
        std::fs::write(&old, format!("{line}\n")).unwrap();
        // Not tapes of the workspace: an archive, a reset's temporary file, another file.
        for suffix in [".20250101T000000Z.bak", ".tmp-42"] {
            let mut other = old.clone().into_os_string();
            other.push(suffix);
            std::fs::write(other, format!("{line}\n")).unwrap();
        }
        std::fs::write(old.with_file_name("notes.txt"), "").unwrap();
        assert_eq!(
            list(home.path(), None, &ws).await.unwrap(),
            [Listed {
                name: "bub:0123456789abcdef".into(),
                session: None,
                entries: 1,
                last: Some("2025-01-02T03:04:05.678Z".into()),
            }]
        );
    }

    /// The first anchor is found past an event and beyond the anchors the index keeps.
    #[tokio::test]
    async fn the_session_is_read_from_the_first_anchor_of_a_long_tape() {
        let home = tempfile::tempdir().unwrap();
        let ws = home.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut tape = FileTape::open(home.path(), &ws, "bub", "discord:7").unwrap();
        tape.event(Event::Command, json!({})).unwrap();
        tape.ensure_bootstrap().unwrap();
        for i in 0..super::super::index::ANCHORS_KEPT {
            tape.handoff(&format!("h{i}"), Some("s"), None).unwrap();
        }
        let listed = list(home.path(), None, &ws).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].session.as_deref(), Some("discord:7"));
        assert_eq!(listed[0].entries, tape.len().unwrap());
        assert_eq!(
            listed[0].last.as_deref(),
            tape.entries().unwrap().last().map(|e| e.date.as_str())
        );
    }
}
