//! `bub db import` for tapes: the tape files of a `BUB_HOME` copied into the database, so a
//! one-box Bub moves to PostgreSQL with its history.
//!
//! A file's name says whose tape it is (`<md5 of the workspace>__<percent-encoded tape
//! name>.jsonl`); an archive (`….jsonl.<YYYYMMDDTHHMMSSZ>.bak`) becomes the tape
//! `<name>.<stamp>`, as a reset on the database names its archives. Entries keep their ids and
//! their JSON text, so the context renders to the same bytes; an entry whose id the database
//! already has is left as it is, so importing again adds nothing.

use std::path::Path;
use std::sync::Arc;

use super::listing::key_of;
use super::pg::tape_row;
use super::store::FileTape;
use crate::db::{self, Cached, Database};

/// What importing one file did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The tape's name in the database.
    pub name: String,
    /// Entries in the file.
    pub entries: usize,
    /// Entries the database did not have.
    pub added: usize,
}

/// A file's entries, column by column (one multi-row insert).
#[derive(Default)]
struct Columns {
    ids: Vec<i64>,
    kinds: Vec<String>,
    dates: Vec<String>,
    payloads: Vec<String>,
    metas: Vec<String>,
    /// The `event` column ([`super::pg::event_name`]).
    events: Vec<Option<String>>,
}

/// Copies every tape file of `home` (`BUB_HOME/tapes/`) into `db`, oldest name first.
pub(crate) async fn import_home(db: &Arc<Database>, home: &Path) -> anyhow::Result<Vec<Imported>> {
    let dir = home.join("tapes");
    let mut files: Vec<_> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", dir.display()))),
    };
    files.sort();
    let mut imported = Vec::new();
    for path in files {
        let Some((workspace, name)) = path.file_name().and_then(|n| n.to_str()).and_then(key_of)
        else {
            continue;
        };
        let tape = (path.clone(), name.clone());
        let entries =
            crate::storage::blocking(move || FileTape::open_path(tape.0, tape.1)?.entries())
                .await?;
        let total = entries.len();
        let mut columns = Columns::default();
        for e in entries {
            columns.ids.push(i64::try_from(e.id).unwrap_or(i64::MAX));
            columns.kinds.push(e.kind.as_str().to_owned());
            columns.dates.push(e.date);
            let payload = e.payload.to_string();
            columns
                .events
                .push(super::pg::event_name(&e.kind, &payload).map(str::to_owned));
            columns.payloads.push(payload);
            columns.metas.push(e.meta.to_string());
        }
        let mut client = db::client(&db.relaxed_pool()).await?;
        let tx = client.transaction().await?;
        let row = tape_row(&tx, &workspace, &name).await?;
        let c = &columns;
        let added = tx
            .run(
                "INSERT INTO bub_tape_entries (tape, id, kind, date, payload, meta, event) \
                     SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], \
                     $6::text[], $7::text[]) ON CONFLICT (tape, id) DO NOTHING",
                &[
                    &row,
                    &c.ids,
                    &c.kinds,
                    &c.dates,
                    &c.payloads,
                    &c.metas,
                    &c.events,
                ],
            )
            .await?;
        let last = c.ids.iter().copied().max().unwrap_or(0);
        tx.run(
            "UPDATE bub_tapes SET last_id = greatest(last_id, $2) WHERE id = $1",
            &[&row, &last],
        )
        .await?;
        tx.commit().await?;
        let added = added as usize;
        imported.push(Imported {
            name,
            entries: total,
            added,
        });
    }
    Ok(imported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_says_whose_tape_it_is() {
        assert_eq!(
            key_of("0123abcd__bub%3A00ff.jsonl"),
            Some(("0123abcd".into(), "bub:00ff".into()))
        );
        assert_eq!(
            key_of("0123abcd__bub%3A00ff.jsonl.20261127T101500Z.bak"),
            Some(("0123abcd".into(), "bub:00ff.20261127T101500Z".into()))
        );
        assert_eq!(key_of("notes.txt"), None);
        assert_eq!(key_of("0123abcd__bub%3A00ff.jsonl.tmp-42"), None);
    }
}
