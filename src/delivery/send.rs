//! Sending one [`Outbound`] through its channel's adapter: the path every send takes (the
//! session actors' answers and redeliveries, `message.send`, `bub send`, scheduled answers),
//! with one bound on its size. A text that would take more than [`MAX_MESSAGES`] messages of
//! the platform (split as the adapter splits it: Telegram 4096 characters, Discord 2000) is
//! sent as its first part, ending with a note, and the whole text follows as a Markdown file,
//! [`ANSWER_FILE`]: a 2 MB answer is one message and one file, not 500 messages holding the
//! chat for minutes.
//!
//! The file is written under `BUB_HOME/outgoing/` (never the workspace, which the agent and
//! guests reach) in a folder of its own, and removed after the send whatever its outcome; one
//! left by a process that died while sending is removed by a later long send, an hour on.
//! The decision is made at every send from the text alone, so a delivery recorded in the inbox
//! (the text, never the file) and sent again after a restart is sent the same way.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use super::Outbound;
use crate::channels::{Channel, text};

/// The most messages one text is sent as; a longer one goes as its first part and a file.
pub(crate) const MAX_MESSAGES: usize = 4;

/// The name of the file a long text is sent as.
pub(crate) const ANSWER_FILE: &str = "answer.md";

/// Where long texts are written before they are sent, under `BUB_HOME`.
const SPOOL_DIR: &str = "outgoing";

/// How old a spooled file must be to count as left behind by a process that died sending it.
const LEFT_BEHIND: Duration = Duration::from_secs(3600);

/// Sends `out` through `channel`: as it is, or — when its text would take more than
/// [`MAX_MESSAGES`] messages — its first part with a note, then the whole text as
/// [`ANSWER_FILE`] (written under `home`), then `out`'s own file if it has one.
pub(crate) async fn send(channel: &dyn Channel, home: &Path, out: &Outbound) -> anyhow::Result<()> {
    let Some(first) = first_part(&out.text, channel.message_limit()) else {
        return channel.send(out).await;
    };
    let spool = home.join(SPOOL_DIR);
    let whole = out.text.clone();
    let folder = tokio::task::spawn_blocking(move || spool_file(&spool, &whole))
        .await?
        .context("could not write the long answer as a file")?;
    // The first part is a message of its own (a live answer's message becomes it), whatever
    // its length: never a caption. The files follow, each alone.
    let first = Outbound {
        chat_id: out.chat_id.clone(),
        text: first,
        reply_to: out.reply_to.clone(),
        file: None,
        edit: out.edit.clone(),
    };
    let mut sent = channel.send(&first).await;
    let files = [Some(folder.path().join(ANSWER_FILE)), out.file.clone()];
    for file in files.into_iter().flatten() {
        if sent.is_err() {
            break;
        }
        let alone = Outbound {
            chat_id: out.chat_id.clone(),
            text: String::new(),
            reply_to: None,
            file: Some(file),
            edit: None,
        };
        sent = channel.send(&alone).await;
    }
    // Removing the folder is file work: on the blocking pool.
    let _ = tokio::task::spawn_blocking(move || drop(folder)).await;
    sent
}

/// When `text` takes more than [`MAX_MESSAGES`] messages of `limit` characters: its first
/// part, cut so that the note saying where the rest is still fits in one message.
fn first_part(text: &str, limit: usize) -> Option<String> {
    if text.len() <= limit {
        return None; // one message (a byte is at most a character)
    }
    let parts = text::split(text, limit);
    if parts.len() <= MAX_MESSAGES {
        return None;
    }
    let note = format!(
        "\n\n… the whole answer ({} KB) is attached as {ANSWER_FILE}",
        text.len().div_ceil(1024)
    );
    let room = limit.saturating_sub(note.chars().count());
    let first = text::split(&parts[0], room).into_iter().next()?;
    Some(first + &note)
}

/// Writes `text` as [`ANSWER_FILE`] in a new folder of `spool` (removed when the returned
/// value is dropped); folders left behind for [`LEFT_BEHIND`] are removed first.
fn spool_file(spool: &Path, text: &str) -> anyhow::Result<tempfile::TempDir> {
    crate::storage::create_private_dir(spool)?;
    let now = SystemTime::now();
    for entry in std::fs::read_dir(spool)?.flatten() {
        let modified = entry.metadata().and_then(|m| m.modified());
        if modified.is_ok_and(|at| now.duration_since(at).unwrap_or_default() > LEFT_BEHIND) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let folder = tempfile::Builder::new()
        .prefix("answer-")
        .tempdir_in(spool)?;
    let mut file = crate::storage::private_file()
        .create_new(true)
        .write(true)
        .open(folder.path().join(ANSWER_FILE))?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    Ok(folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_past_four_messages_becomes_its_first_part_and_a_note() {
        let paragraph = "word ".repeat(150); // 750 characters
        let text = [paragraph.trim(); 12].join("\n\n"); // 9 KB
        // Four messages of 2500 characters hold it: sent as it is.
        assert_eq!(first_part(&text, 2500), None);
        assert_eq!(first_part("short", 10), None);
        // Five of 2000 do not.
        assert!(text::split(&text, 2000).len() > MAX_MESSAGES);
        let first = first_part(&text, 2000).unwrap();
        assert!(first.chars().count() <= 2000, "one message");
        assert!(first.starts_with(paragraph.trim()));
        assert!(
            first.ends_with("\n\n… the whole answer (9 KB) is attached as answer.md"),
            "{first}"
        );
    }

    #[test]
    fn the_spooled_file_is_removed_with_its_folder_and_old_ones_are_swept() {
        let home = tempfile::tempdir().unwrap();
        let spool = home.path().join(SPOOL_DIR);
        std::fs::create_dir_all(spool.join("answer-old")).unwrap();
        let old = SystemTime::now() - LEFT_BEHIND * 2;
        std::fs::File::open(spool.join("answer-old"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::fs::create_dir_all(spool.join("answer-recent")).unwrap();
        let folder = spool_file(&spool, "the whole answer").unwrap();
        let file = folder.path().join(ANSWER_FILE);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "the whole answer");
        assert!(!spool.join("answer-old").exists(), "left behind: removed");
        assert!(spool.join("answer-recent").exists(), "maybe being sent");
        drop(folder);
        assert!(!file.exists());
    }
}
