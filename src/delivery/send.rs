//! Sending one [`Outbound`] through its channel's adapter: the path every send takes (the
//! session actors' answers and redeliveries, `message.send`, `bub send`, scheduled answers),
//! with one bound on its size, as a list of parts — one platform message each — so that a
//! recorded delivery can resume after a restart from the first part the platform did not accept.
//!
//! A text that fits one message is one part (with its file, which the adapter sends with it). A
//! longer one is split as the adapter would split it ([`text::split`] at
//! [`Channel::message_limit`]: Telegram 4096 characters, Discord 2000), each message a part, the
//! `Outbound`'s file alone after them. One that would take more than [`MAX_MESSAGES`] messages
//! is sent as its first part, ending with a note, and the whole text follows as a Markdown file,
//! [`ANSWER_FILE`]: a 2 MB answer is one message and one file, not 500 messages holding the chat
//! for minutes. Only the first part replies to the message answered and edits a live answer's
//! message.
//!
//! The parts are decided at every send from the text and the limit alone (`split` is a pure
//! function), so a delivery recorded in the inbox (the text, never the file) and sent again
//! after a restart is sent the same way, and its part k is the same message.
//!
//! The file is written under `BUB_HOME/outgoing/` (never the workspace, which the agent and
//! guests reach) in a folder of its own, before anything is sent, and removed after the send
//! whatever its outcome; one left by a process that died while sending is removed by a later
//! long send, an hour on.

use std::borrow::Cow;
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

/// One platform message of a send.
#[derive(Debug, PartialEq)]
enum Part<'a> {
    /// Sent by the adapter as it is (a text that fits one message, or a file alone).
    Message(Cow<'a, Outbound>),
    /// The whole text as [`ANSWER_FILE`].
    WholeText,
}

/// Told that the platform accepted the parts before part `n` (an `async` step: the caller
/// records it before the next part is sent).
pub(crate) type Accepted<'a> = dyn FnMut(usize) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>
    + Send
    + 'a;

/// Sends `out` through `channel`, all its parts (see the module docs).
pub(crate) async fn send(channel: &dyn Channel, home: &Path, out: &Outbound) -> anyhow::Result<()> {
    send_from(channel, home, out, 0, &mut |_| Box::pin(async {})).await
}

/// Sends the parts of `out` from part `from` on (the ones before it were accepted before a
/// restart), in order, stopping at the first that fails. After the platform accepted part
/// `n - 1` and more parts follow, awaits `accepted(n)`; the end of the send is the caller's to
/// record.
pub(crate) async fn send_from(
    channel: &dyn Channel,
    home: &Path,
    out: &Outbound,
    from: usize,
    accepted: &mut Accepted<'_>,
) -> anyhow::Result<()> {
    let parts = parts(out, channel.message_limit());
    let total = parts.len();
    // Written before anything is sent: a disk that cannot hold the file sends nothing.
    let folder = if parts[from.min(total)..].contains(&Part::WholeText) {
        let spool = home.join(SPOOL_DIR);
        let whole = out.text.clone();
        let folder = tokio::task::spawn_blocking(move || spool_file(&spool, &whole))
            .await?
            .context("could not write the long answer as a file")?;
        Some(folder)
    } else {
        None
    };
    let mut sent = Ok(());
    for (i, part) in parts.into_iter().enumerate().skip(from) {
        sent = match part {
            Part::Message(message) => channel.send(&message).await,
            Part::WholeText => match &folder {
                Some(folder) => {
                    channel
                        .send(&alone(out, folder.path().join(ANSWER_FILE)))
                        .await
                }
                None => Err(anyhow::anyhow!("the long answer's file was not written")),
            },
        };
        if sent.is_err() {
            break;
        }
        if i + 1 < total {
            accepted(i + 1).await;
        }
    }
    // Removing the folder is file work: on the blocking pool.
    if let Some(folder) = folder {
        let _ = tokio::task::spawn_blocking(move || drop(folder)).await;
    }
    sent
}

/// The parts `out` is sent as on a channel whose messages hold `limit` characters.
fn parts(out: &Outbound, limit: usize) -> Vec<Part<'_>> {
    let chunks = if out.text.len() <= limit {
        Vec::new() // one message (a byte is at most a character)
    } else {
        text::split(&out.text, limit)
    };
    if chunks.len() <= 1 {
        return vec![Part::Message(Cow::Borrowed(out))];
    }
    // The first message replies and becomes the live answer's message; the others are new.
    let message = |first: bool, text: String| {
        Part::Message(Cow::Owned(Outbound {
            chat_id: out.chat_id.clone(),
            text,
            reply_to: out.reply_to.clone().filter(|_| first),
            file: None,
            edit: out.edit.clone().filter(|_| first),
        }))
    };
    let mut parts: Vec<Part> = if chunks.len() <= MAX_MESSAGES {
        let chunks = chunks.into_iter().enumerate();
        chunks.map(|(i, chunk)| message(i == 0, chunk)).collect()
    } else {
        let first = first_part(&out.text, &chunks[0], limit);
        vec![message(true, first), Part::WholeText]
    };
    let file = out.file.clone().map(|file| Cow::Owned(alone(out, file)));
    parts.extend(file.map(Part::Message));
    parts
}

/// `file` as a message of its own in `out`'s chat.
fn alone(out: &Outbound, file: std::path::PathBuf) -> Outbound {
    Outbound {
        chat_id: out.chat_id.clone(),
        text: String::new(),
        reply_to: None,
        file: Some(file),
        edit: None,
    }
}

/// The first message of `text` sent as a file: its first `chunk`, cut so that the note saying
/// where the rest is still fits in one message of `limit` characters.
fn first_part(text: &str, chunk: &str, limit: usize) -> String {
    let note = format!(
        "\n\n… the whole answer ({} KB) is attached as {ANSWER_FILE}",
        text.len().div_ceil(1024)
    );
    let room = limit.saturating_sub(note.chars().count());
    let first = text::split(chunk, room)
        .into_iter()
        .next()
        .unwrap_or_default();
    first + &note
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

    fn outbound(text: &str) -> Outbound {
        Outbound {
            chat_id: "42".into(),
            text: text.into(),
            reply_to: Some("7".into()),
            file: Some("report.pdf".into()),
            edit: Some("9".into()),
        }
    }

    /// The texts of the message parts, `WholeText` as `<answer.md>`.
    fn texts(parts: &[Part]) -> Vec<String> {
        parts
            .iter()
            .map(|p| match p {
                Part::Message(m) => m.text.clone(),
                Part::WholeText => "<answer.md>".into(),
            })
            .collect()
    }

    #[test]
    fn a_text_past_four_messages_becomes_its_first_part_and_a_note() {
        let paragraph = "word ".repeat(150); // 750 characters
        let text = [paragraph.trim(); 12].join("\n\n"); // 9 KB
        // Four messages of 2500 characters hold it: sent as they are, then the file alone.
        let out = outbound(&text);
        let four = parts(&out, 2500);
        assert_eq!(four.len(), 5);
        assert_eq!(texts(&four)[..4].join("\n\n"), text);
        // Five of 2000 do not.
        assert!(text::split(&text, 2000).len() > MAX_MESSAGES);
        let long = parts(&out, 2000);
        let [Part::Message(first), Part::WholeText, Part::Message(file)] = &long[..] else {
            panic!("{long:?}")
        };
        assert!(first.text.chars().count() <= 2000, "one message");
        assert!(first.text.starts_with(paragraph.trim()));
        assert!(
            first
                .text
                .ends_with("\n\n… the whole answer (9 KB) is attached as answer.md"),
            "{first:?}"
        );
        assert_eq!(**file, alone(&out, "report.pdf".into()));
        // A text that fits is one part, with its file.
        assert_eq!(
            parts(&outbound("short"), 10),
            [Part::Message(Cow::Owned(outbound("short")))]
        );
    }

    #[test]
    fn only_the_first_part_replies_and_edits_and_the_parts_are_the_same_every_time() {
        let text = ["a ".repeat(40), "b ".repeat(40), "c ".repeat(40)].join("\n\n");
        let out = outbound(&text);
        let split = parts(&out, 100);
        assert_eq!(texts(&split).len(), 4, "three messages and the file");
        let replies: Vec<_> = split
            .iter()
            .map(|p| match p {
                Part::Message(m) => (m.reply_to.as_deref(), m.edit.as_deref()),
                Part::WholeText => panic!("{split:?}"),
            })
            .collect();
        assert_eq!(replies[0], (Some("7"), Some("9")));
        assert!(
            replies[1..].iter().all(|r| *r == (None, None)),
            "{replies:?}"
        );
        // Part k is the same message after a restart.
        assert_eq!(parts(&out, 100), split);
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
