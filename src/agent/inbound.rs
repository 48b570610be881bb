//! The model's prompt for a chat's batch of messages, rendered once, here, from the typed
//! messages ([`render`]); nothing else turns chat messages into prompt text.
//!
//! The model pays for every byte on every later turn, so a message is one short line that keeps
//! what it can act on:
//! * who spoke — `@username` (else the display name); in a group also the display name, the
//!   sender's id and the message id (`message.send reply_to=` needs it), since several people
//!   talk there: `[#17] Alice (@alice, id 42): text`;
//! * what they replied to (author and the quoted start);
//! * the text, with the transcript of any speech in it;
//! * the files as the platform described them and as saved for it (path, note), without
//!   platform file ids and URLs: Telegram's one file by itself (`{"width":10,"saved":…}`),
//!   Discord's attachments and stickers listed (`{"attachments":[{"filename":…}]}`).
//!
//! A line never passes for another message: names are kept on one line and a text of several
//! lines is quoted as one JSON string. The batch's first line names the channel
//! (`channel: $telegram`); notes follow when a restart interrupted its turn or older messages
//! of it were left out. The same messages always render to the same bytes (the prompt's
//! prefix is cached by providers, and the tape keeps what was rendered). Pure: no I/O.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::input::ChatBatch;
use crate::access::ChatKind;
use crate::chat::{Attachment, AttachmentKind, Content, Inbound};
use crate::tape::Event;

/// The prompt of `batch`: the channel line, the notes, one line per message.
pub(crate) fn render(batch: &ChatBatch) -> String {
    render_with(batch, line)
}

/// The prompt of `batch` with each message rendered by `line` (tests show raw texts).
pub(crate) fn render_with(batch: &ChatBatch, line: impl Fn(&Inbound) -> String) -> String {
    let mut prompt = format!("channel: ${}\n", batch.adapter.name());
    if batch.interrupted {
        prompt.push_str(
            "[Bub restarted while answering these messages; the previous attempt was \
             interrupted. Answer them now.]\n",
        );
    }
    if batch.left_out > 0 {
        prompt.push_str(&format!(
            "[{} earlier messages of this batch are not shown here; they are on the tape \
             (event `{}`): use tape.search to find them.]\n",
            batch.left_out,
            Event::MessagesLeftOut,
        ));
    }
    let lines: Vec<String> = batch.messages.iter().map(line).collect();
    prompt.push_str(&lines.join("\n"));
    prompt
}

/// One message as the model sees it (a command or a control as it was written).
pub(crate) fn line(m: &Inbound) -> String {
    let text = match &m.content {
        Content::Text(text) => text,
        Content::Command(_) | Content::Control(_) => return m.text().into_owned(),
    };
    let mut who = sender(m);
    if let Some(reply) = &m.reply_to {
        let author = match reply.username.as_deref() {
            Some(u) if !u.is_empty() => format!("@{}", one_line(u)),
            _ => match reply.sender_id.as_deref() {
                Some(id) if !id.is_empty() => format!("id {id}"),
                _ => "someone".to_owned(),
            },
        };
        let quoted = reply.text.as_deref().unwrap_or_default();
        who.push_str(&format!(" (replying to {author}: {quoted:?})"));
    }
    let mut out = format!("{who}: {}", quoted(&with_transcripts(text, &m.attachments)));
    if let Some(media) = media(&m.attachments).filter(|m| !m.is_empty()) {
        out.push(' ');
        out.push_str(&Value::Object(media).to_string());
    }
    out
}

/// `@alice`; in a group `[#17] Alice (@alice, id 42)`.
fn sender(m: &Inbound) -> String {
    let username = one_line(m.sender.username.as_deref().unwrap_or_default());
    let name = one_line(m.sender.name.as_deref().unwrap_or_default());
    let mut who = match (username.is_empty(), name.is_empty()) {
        (false, _) => format!("@{username}"),
        (true, false) => name.clone(),
        (true, true) => "someone".to_owned(),
    };
    if m.chat.kind == ChatKind::Group {
        let id = &m.sender.id;
        who = match (username.is_empty() || name.is_empty(), id.is_empty()) {
            (false, false) => format!("{name} ({who}, id {id})"),
            (true, false) => format!("{who} (id {id})"),
            (_, true) => who,
        };
        if !m.message_id.is_empty() {
            who = format!("[#{}] {who}", m.message_id);
        }
    }
    who
}

/// The text with a line per transcribed file after it.
fn with_transcripts<'a>(text: &'a str, attachments: &[Attachment]) -> Cow<'a, str> {
    let mut text = Cow::Borrowed(text);
    for a in attachments {
        if let Some(transcript) = &a.transcript {
            let label = a.name.as_deref().unwrap_or(a.kind.name());
            let line = format!("[Voice message transcript ({label}): {transcript}]");
            text = Cow::Owned(format!("{text}\n{line}").trim_start().to_owned());
        }
    }
    text
}

/// A name on one line: control characters (a newline, say) become spaces.
fn one_line(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A message's text on one line: as it is, or — when it has several lines — as a JSON string,
/// so that no line of it can pass for another message (`[#1] Owner (@owner, id 1): …`).
fn quoted(text: &str) -> Cow<'_, str> {
    match text.contains(['\n', '\r']) {
        true => Value::String(text.to_owned()).to_string().into(),
        false => text.into(),
    }
}

/// The files of a message as shown: Discord's attachments and (named) stickers listed by
/// kind; otherwise the message's one file by itself (Telegram).
fn media(attachments: &[Attachment]) -> Option<Map<String, Value>> {
    let listed = |a: &&Attachment| match &a.kind {
        AttachmentKind::File => true,
        AttachmentKind::Sticker(_) => a.name.is_some(),
        _ => false,
    };
    if !attachments.iter().any(|a| listed(&a)) {
        return attachments.first().map(shown);
    }
    let mut media = Map::new();
    let files: Vec<Value> = attachments
        .iter()
        .filter(|a| a.kind == AttachmentKind::File)
        .map(|a| Value::Object(shown(a)))
        .collect();
    if !files.is_empty() {
        media.insert("attachments".into(), Value::Array(files));
    }
    let stickers: Vec<Value> = attachments
        .iter()
        .filter(listed)
        .filter(|a| a.kind != AttachmentKind::File)
        .map(|a| Value::Object(shown(a)))
        .collect();
    if !stickers.is_empty() {
        media.insert("stickers".into(), Value::Array(stickers));
    }
    Some(media)
}

/// One file: what its platform says of it (no handles: ids, URLs), then where it was saved
/// and why not, if so.
fn shown(a: &Attachment) -> Map<String, Value> {
    let mut map = Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            map.insert(key.to_owned(), value);
        }
    };
    let (name, size, mime) = (
        a.name.as_ref().map(|n| json!(n)),
        a.size.map(|s| json!(s)),
        a.mime.as_ref().map(|m| json!(m)),
    );
    match &a.kind {
        AttachmentKind::File => {
            put("filename", name);
            put("content_type", mime);
            put("size", size);
        }
        AttachmentKind::Photo { width, height } => {
            put("file_size", size);
            put("width", Some(json!(width)));
            put("height", Some(json!(height)));
        }
        AttachmentKind::Audio {
            seconds,
            title,
            performer,
        } => {
            put("file_size", size);
            put("duration", Some(json!(seconds)));
            put("title", title.as_ref().map(|t| json!(t)));
            put("performer", performer.as_ref().map(|p| json!(p)));
        }
        AttachmentKind::Video {
            width,
            height,
            seconds,
        } => {
            put("file_size", size);
            put("width", Some(json!(width)));
            put("height", Some(json!(height)));
            put("duration", Some(json!(seconds)));
        }
        AttachmentKind::Voice { seconds } | AttachmentKind::VideoNote { seconds } => {
            put("duration", Some(json!(seconds)));
        }
        AttachmentKind::Document => {
            put("file_name", name);
            put("file_size", size);
            put("mime_type", mime);
        }
        AttachmentKind::Sticker(s) => {
            put("name", name);
            put("width", s.width.map(|w| json!(w)));
            put("height", s.height.map(|h| json!(h)));
            put("emoji", s.emoji.as_ref().map(|e| json!(e)));
            put("set_name", s.set_name.as_ref().map(|n| json!(n)));
            put("is_animated", s.animated.map(|b| json!(b)));
            put("is_video", s.video.map(|b| json!(b)));
        }
    }
    put("saved", a.saved.as_ref().map(|s| json!(s)));
    put("note", a.note.as_ref().map(|n| json!(n)));
    map
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
