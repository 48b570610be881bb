//! Sending one [`Outbound`] through its channel's adapter: the path every send takes (the
//! session actors' answers and redeliveries, `message.send`, `bub send`, scheduled answers),
//! and the one place that decides which platform messages a text becomes — its parts — so that
//! a recorded delivery can resume after a restart from the first part the platform did not
//! accept. The adapter sends one part at a time ([`Channel::send_part`]).
//!
//! The text is split at [`Channel::message_limit`] ([`text::split`]: Telegram 4096 characters,
//! Discord 2000), each message a part. A file goes with a text that is one message of at most
//! [`Channel::caption_limit`] characters (Telegram's caption, 1024; Discord's message), else
//! alone after the text. A text that would take more than [`MAX_MESSAGES`] messages is sent as
//! its first part, ending with a note, and the whole text follows as a Markdown file,
//! [`ANSWER_FILE`]: a 2 MB answer is one message and one file, not 500 messages holding the chat
//! for minutes. Only the first part replies to the message answered and replaces a live
//! answer's message (sent anew when that edit fails).
//!
//! The parts are decided at every send from the text and the limits alone (`split` is a pure
//! function), so a delivery recorded in the inbox (the text, never the file) and sent again
//! after a restart is sent the same way, and its part k is the same message.
//!
//! The file is written under `BUB_HOME/outgoing/` (never the workspace, which the agent and
//! guests reach) in a folder of its own, before anything is sent, and removed after the send
//! whatever its outcome; one left by a process that died while sending is removed by a later
//! long send, an hour on.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use super::Outbound;
use crate::channels::{Channel, ChatId, MessageId, Part, text};

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
enum Step {
    /// Sent as it is.
    Send(Part),
    /// Put in place of the text of the live answer's message, or sent when that fails.
    Edit(MessageId, Part),
    /// The whole text as [`ANSWER_FILE`], alone.
    WholeText,
}

/// Told that the platform accepted the parts before part `n` (an `async` step: the caller
/// records it before the next part is sent).
pub(crate) type Accepted<'a> = dyn FnMut(usize) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>
    + Send
    + 'a;

/// Sends `out` through `channel`, all its parts (see the module docs); a long text's file is
/// written under `home`.
pub async fn send(channel: &dyn Channel, home: &Path, out: &Outbound) -> anyhow::Result<()> {
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
    let steps = steps(out, channel.message_limit(), channel.caption_limit());
    let total = steps.len();
    // Written before anything is sent: a disk that cannot hold the file sends nothing.
    let folder = if steps[from.min(total)..].contains(&Step::WholeText) {
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
    for (i, step) in steps.into_iter().enumerate().skip(from) {
        sent = match step {
            Step::Send(part) => channel.send_part(&part).await.map(drop),
            Step::Edit(message, part) => {
                match channel.edit(&part.chat, &message, &part.text).await {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        tracing::warn!(channel = channel.name(), chat_id = %part.chat.0,
                            error = %format!("{e:#}"), "delivery.edit.failed: sent anew");
                        channel.send_part(&part).await.map(drop)
                    }
                }
            }
            Step::WholeText => match &folder {
                Some(folder) => {
                    let mut part = Part::text(out.chat_id.as_str(), "");
                    part.file = Some(folder.path().join(ANSWER_FILE));
                    channel.send_part(&part).await.map(drop)
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

/// Posts `text` as a live answer's first version, cut to one message, replying to `reply_to`;
/// returns its message's id — `None` when the channel cannot edit messages (then answers are
/// not shown live, and nothing is posted).
pub async fn post_live(
    channel: &dyn Channel,
    chat: &ChatId,
    text: &str,
    reply_to: Option<MessageId>,
) -> anyhow::Result<Option<MessageId>> {
    if !channel.can_edit() {
        return Ok(None);
    }
    let part = Part {
        reply_to,
        ..Part::text(chat.clone(), text::cut(text, channel.message_limit()))
    };
    channel.send_part(&part).await
}

/// Replaces the text of a live answer's message with `text`, cut to one message.
pub async fn edit_live(
    channel: &dyn Channel,
    chat: &ChatId,
    message: &MessageId,
    text: &str,
) -> anyhow::Result<()> {
    let text = text::cut(text, channel.message_limit());
    channel.edit(chat, message, &text).await
}

/// The one decision of what `out` is sent as on a channel whose messages hold `limit`
/// characters and whose files carry `caption` characters of text (see the module docs).
fn steps(out: &Outbound, limit: usize, caption: usize) -> Vec<Step> {
    let mut chunks = text::split(&out.text, limit);
    let whole_text = chunks.len() > MAX_MESSAGES;
    if whole_text {
        chunks = vec![first_part(&out.text, &chunks[0], limit)];
    }
    let chat = ChatId::from(out.chat_id.as_str());
    let reply_to = out.reply_to.clone().map(MessageId);
    let edit = out.edit.clone().map(MessageId);
    // The file goes with a text that is one message short enough to be its caption, and never
    // in place of a live message (an edit carries no file).
    let with_text =
        chunks.len() == 1 && !whole_text && edit.is_none() && chunks[0].chars().count() <= caption;
    let mut steps: Vec<Step> = chunks
        .into_iter()
        .enumerate()
        .map(|(i, text)| {
            let first = i == 0;
            let part = Part {
                chat: chat.clone(),
                text,
                reply_to: reply_to.clone().filter(|_| first),
                file: out.file.clone().filter(|_| with_text),
            };
            match edit.clone().filter(|_| first) {
                Some(message) => Step::Edit(message, part),
                None => Step::Send(part),
            }
        })
        .collect();
    if whole_text {
        steps.push(Step::WholeText);
    }
    if let Some(file) = out.file.clone().filter(|_| !with_text) {
        // Alone: it replies only when it is all there is.
        steps.push(Step::Send(Part {
            reply_to: reply_to.filter(|_| steps.is_empty()),
            file: Some(file),
            ..Part::text(chat, "")
        }));
    }
    steps
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

    /// The texts of the steps, `WholeText` as `<answer.md>`.
    fn texts(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|p| match p {
                Step::Send(part) | Step::Edit(_, part) => part.text.clone(),
                Step::WholeText => "<answer.md>".into(),
            })
            .collect()
    }

    /// `file` alone in `out`'s chat.
    fn alone(file: &str, reply_to: Option<&str>) -> Step {
        Step::Send(Part {
            reply_to: reply_to.map(|id| MessageId(id.into())),
            file: Some(file.into()),
            ..Part::text("42", "")
        })
    }

    #[test]
    fn a_text_past_four_messages_becomes_its_first_part_and_a_note() {
        let paragraph = "word ".repeat(150); // 750 characters
        let text = [paragraph.trim(); 12].join("\n\n"); // 9 KB
        // Four messages of 2500 characters hold it: sent as they are, then the file alone.
        let out = outbound(&text);
        let four = steps(&out, 2500, 2500);
        assert_eq!(four.len(), 5);
        assert_eq!(texts(&four)[..4].join("\n\n"), text);
        // Five of 2000 do not.
        assert!(text::split(&text, 2000).len() > MAX_MESSAGES);
        let long = steps(&out, 2000, 2000);
        let [Step::Edit(_, first), Step::WholeText, file] = &long[..] else {
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
        assert_eq!(*file, alone("report.pdf", None));
    }

    /// The one split and attach decision: a file goes with a one-message text that fits the
    /// caption, else alone after it; the reply goes on the first part; an edit carries no file.
    #[test]
    fn the_file_goes_with_a_text_that_fits_its_caption_else_alone_after_it() {
        let short = Outbound {
            edit: None,
            ..outbound("the chart")
        };
        let captioned = Step::Send(Part {
            reply_to: Some(MessageId("7".into())),
            file: Some("report.pdf".into()),
            ..Part::text("42", "the chart")
        });
        assert_eq!(steps(&short, 4096, 1024), [captioned]);
        // Longer than a caption (Telegram's 1024), shorter than a message: the text, then the
        // file alone; on a channel whose files carry a message's text (Discord), one message.
        let text = "x".repeat(1500);
        let long = Outbound {
            text: text.clone(),
            ..short.clone()
        };
        let [Step::Send(first), file] = &steps(&long, 4096, 1024)[..] else {
            panic!()
        };
        assert_eq!((first.text.as_str(), first.file.as_ref()), (&*text, None));
        assert_eq!(first.reply_to, Some(MessageId("7".into())));
        assert_eq!(*file, alone("report.pdf", None));
        let [Step::Send(one)] = &steps(&long, 2000, 2000)[..] else {
            panic!()
        };
        assert_eq!(one.file, Some("report.pdf".into()));
        // Two messages: the file alone after them, whatever the caption limit.
        let two = steps(&long, 1000, 1000);
        assert_eq!(texts(&two), [&text[..1000], &text[1000..], ""]);
        assert_eq!(two[2], alone("report.pdf", None));
        // No text: the file alone, replying. A live message: edited, the file after it.
        let bare = Outbound {
            text: " \n".into(),
            ..short.clone()
        };
        assert_eq!(steps(&bare, 4096, 1024), [alone("report.pdf", Some("7"))]);
        let live = steps(&outbound("the chart"), 4096, 1024);
        let [Step::Edit(message, edited), file] = &live[..] else {
            panic!("{live:?}")
        };
        assert_eq!((message.0.as_str(), edited.file.as_ref()), ("9", None));
        assert_eq!(*file, alone("report.pdf", None));
        // No file, nothing to say: nothing is sent.
        let nothing = Outbound { file: None, ..bare };
        assert!(steps(&nothing, 4096, 1024).is_empty());
    }

    #[test]
    fn only_the_first_part_replies_and_edits_and_the_parts_are_the_same_every_time() {
        let text = ["a ".repeat(40), "b ".repeat(40), "c ".repeat(40)].join("\n\n");
        let out = outbound(&text);
        let split = steps(&out, 100, 100);
        assert_eq!(texts(&split).len(), 4, "three messages and the file");
        let replies: Vec<_> = split
            .iter()
            .map(|p| match p {
                Step::Edit(id, m) => (m.reply_to.clone(), Some(id.clone())),
                Step::Send(m) => (m.reply_to.clone(), None),
                Step::WholeText => panic!("{split:?}"),
            })
            .collect();
        let (seven, nine) = (MessageId("7".into()), MessageId("9".into()));
        assert_eq!(replies[0], (Some(seven), Some(nine)));
        assert!(
            replies[1..].iter().all(|r| *r == (None, None)),
            "{replies:?}"
        );
        // Part k is the same message after a restart.
        assert_eq!(steps(&out, 100, 100), split);
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
