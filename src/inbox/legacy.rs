//! The upgrade of a journal before version 3, once, at open (the rewrite that follows leaves
//! the current form). Its `recv` records carried the message as text (`prompt`): the raw text
//! of a comma command, otherwise the platform's metadata JSON — Telegram's `{"message",
//! "chat_id", "message_id", "type", "username", "full_name", "sender_id", "date", "media"?,
//! "reply_to_message"?}`, Discord's with `channel_id`, `guild_id` and `media.attachments` /
//! `media.stickers` lists. [`upgrade`] turns each into the typed [`Inbound`], so a message
//! journaled by an older Bub resumes after an upgrade and its prompt says what the older Bub's
//! said: the fields the model was shown are carried over one by one (who, the chat's kind, the
//! reply, each file with what its platform said of it).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::journal::{Record, VERSION};
use crate::access::Role;
use crate::chat::{
    Attachment, AttachmentKind, ChatInfo, Content, Inbound, Platform, Quoted, Sender, Sticker,
};

/// A `recv` record of versions 1 and 2.
#[derive(Deserialize)]
struct OldRecv {
    seq: u64,
    cursor: Option<u64>,
    msg: Old,
}

/// A message as versions 1 and 2 journaled it.
#[derive(Deserialize)]
struct Old {
    channel: String,
    chat_id: String,
    message_id: String,
    sender_id: String,
    sender_name: Option<String>,
    role: Role,
    prompt: String,
    mentioned: bool,
    reply: bool,
}

/// The journal `text` in the current form: unchanged when it starts with this version's
/// `version` line (every journal this Bub wrote does), else each old `recv` message typed.
/// Lines that do not parse are kept for the reader to skip.
pub(super) fn upgrade(text: Vec<u8>) -> Vec<u8> {
    let mut lines = text.split(|b| *b == b'\n');
    if let Some(Ok(Record::Version { v: VERSION.. })) = lines.next().map(serde_json::from_slice) {
        return text;
    }
    let line = |line: &[u8]| match serde_json::from_slice::<OldRecv>(line) {
        Ok(OldRecv { seq, cursor, msg }) => {
            let msg = typed(msg);
            serde_json::to_vec(&Record::Recv { seq, cursor, msg }).unwrap_or_default()
        }
        Err(_) => line.to_vec(),
    };
    let lines: Vec<Vec<u8>> = text.split(|b| *b == b'\n').map(line).collect();
    lines.join(&b'\n')
}

/// The typed message of an old record.
fn typed(old: Old) -> Inbound {
    let sender = Sender::new(&old.sender_id, old.sender_name.as_deref(), old.role);
    let mut m = Inbound::new(
        &old.channel,
        &old.chat_id,
        &old.message_id,
        sender,
        &old.prompt,
    );
    (m.mentioned, m.reply) = (old.mentioned, old.reply);
    if let Content::Text(_) = m.content
        && let Some(meta) = metadata(&old.prompt)
    {
        from_metadata(&mut m, &meta);
    }
    m
}

/// `prompt` as a metadata object (it has a `message`), if it is one.
fn metadata(prompt: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(prompt).ok()? {
        Value::Object(map) if map.get("message").is_some_and(Value::is_string) => Some(map),
        _ => None,
    }
}

/// Fills `m` from the metadata JSON `meta` an older adapter made of it.
fn from_metadata(m: &mut Inbound, meta: &Map<String, Value>) {
    m.content = Content::Text(text(meta, "message").unwrap_or_default());
    m.sender.username = text(meta, "username");
    m.sender.name = text(meta, "full_name");
    // Several people talk in a Discord server channel, or a Telegram chat that is not the
    // sender's private chat.
    let chat = id(meta.get("chat_id"));
    let group =
        meta.contains_key("guild_id") || (chat.is_some() && chat != id(meta.get("sender_id")));
    m.chat = match group {
        true => ChatInfo::group(None),
        false => ChatInfo::private(),
    };
    if let Some(Value::Object(reply)) = meta.get("reply_to_message") {
        m.reply_to = Some(Quoted {
            message_id: id(reply.get("message_id")).unwrap_or_default(),
            sender_id: id(reply.get("from_user_id")),
            username: text(reply, "from_username"),
            text: reply.get("text").and_then(Value::as_str).map(str::to_owned),
        });
    }
    if let Some(Value::Object(media)) = meta.get("media") {
        m.attachments = attachments(meta, media);
    }
    let platform: Map<String, Value> = ["type", "date", "guild_id"]
        .into_iter()
        .filter_map(|k| Some((k.to_owned(), meta.get(k)?.clone())))
        .collect();
    m.platform = Platform::new(platform);
}

/// A non-empty string field.
fn text(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A number or a non-empty string, as text.
fn id(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(map: &Map<String, Value>, key: &str) -> Option<u32> {
    map.get(key)?.as_u64()?.try_into().ok()
}

/// The files of `media`: Discord's lists, else Telegram's one file of the message's `type`.
fn attachments(meta: &Map<String, Value>, media: &Map<String, Value>) -> Vec<Attachment> {
    let list = |key: &str| {
        media
            .get(key)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_object)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    if media.contains_key("attachments") || media.contains_key("stickers") {
        let files = list("attachments").into_iter().map(|a| Attachment {
            name: text(a, "filename"),
            mime: text(a, "content_type"),
            size: a.get("size").and_then(Value::as_u64),
            ..Attachment::new(AttachmentKind::File, text(a, "url"))
        });
        let stickers = list("stickers").into_iter().map(|s| Attachment {
            name: text(s, "name"),
            ..Attachment::new(AttachmentKind::Sticker(Box::default()), None)
        });
        return files.chain(stickers).collect();
    }
    let seconds = number(media, "duration").unwrap_or_default();
    let (width, height) = (
        number(media, "width").unwrap_or_default(),
        number(media, "height").unwrap_or_default(),
    );
    let kind = match meta.get("type").and_then(Value::as_str).unwrap_or_default() {
        "photo" => AttachmentKind::Photo { width, height },
        "audio" => AttachmentKind::Audio {
            seconds,
            title: text(media, "title"),
            performer: text(media, "performer"),
        },
        "video" => AttachmentKind::Video {
            width,
            height,
            seconds,
        },
        "voice" => AttachmentKind::Voice { seconds },
        "video_note" => AttachmentKind::VideoNote { seconds },
        "document" => AttachmentKind::Document,
        "sticker" => AttachmentKind::Sticker(Box::new(Sticker {
            width: number(media, "width"),
            height: number(media, "height"),
            emoji: text(media, "emoji"),
            set_name: text(media, "set_name"),
            animated: media.get("is_animated").and_then(Value::as_bool),
            video: media.get("is_video").and_then(Value::as_bool),
        })),
        _ => return Vec::new(),
    };
    let source = match kind {
        AttachmentKind::Sticker(_) => None,
        _ => text(media, "file_id"),
    };
    vec![Attachment {
        name: text(media, "file_name"),
        mime: text(media, "mime_type"),
        size: media.get("file_size").and_then(Value::as_u64),
        ..Attachment::new(kind, source)
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_message_reads_as_the_typed_one() {
        let line = r#"{"op":"recv","seq":1,"msg":{"channel":"telegram","chat_id":"-5","message_id":"7","sender_id":"8","sender_name":"bob","role":"guest","prompt":"{\"message\":\"look\",\"chat_id\":\"-5\",\"message_id\":7,\"type\":\"photo\",\"username\":\"bob\",\"full_name\":\"Bob B\",\"sender_id\":\"8\",\"sender_is_bot\":false,\"date\":1.0,\"media\":{\"file_id\":\"AgAD\",\"file_size\":5,\"width\":10,\"height\":20},\"reply_to_message\":{\"message_id\":6,\"from_user_id\":1,\"text\":\"what?\"}}","mentioned":true,"reply":true}}"#;
        let m = upgraded(line);
        assert_eq!(
            m.sender,
            Sender {
                id: "8".into(),
                username: Some("bob".into()),
                name: Some("Bob B".into()),
                role: Role::Guest,
            }
        );
        assert_eq!(m.content, Content::Text("look".into()));
        assert_eq!(
            (m.chat, m.mentioned, m.reply),
            (ChatInfo::group(None), true, true)
        );
        assert_eq!(
            m.attachments,
            [Attachment {
                size: Some(5),
                ..Attachment::new(
                    AttachmentKind::Photo {
                        width: 10,
                        height: 20
                    },
                    Some("AgAD".into())
                )
            }]
        );
        assert_eq!(
            m.reply_to,
            Some(Quoted {
                message_id: "6".into(),
                sender_id: Some("1".into()),
                username: None,
                text: Some("what?".into()),
            })
        );
        let command = r#"{"op":"recv","seq":2,"msg":{"channel":"discord","chat_id":"5","message_id":"9","sender_id":"42","sender_name":null,"role":"owner","prompt":",stop","mentioned":true,"reply":true}}"#;
        let m = upgraded(command);
        assert_eq!(m.content, Content::Control(crate::chat::Control::Stop));
        // A typed message reads as itself.
        let typed = serde_json::to_string(&Record::Recv {
            seq: 2,
            cursor: None,
            msg: m.clone(),
        })
        .unwrap();
        assert_eq!(upgraded(&typed), m);
    }

    /// The message of the one `recv` line of an (older) journal, upgraded.
    fn upgraded(line: &str) -> Inbound {
        let text = upgrade(line.as_bytes().to_vec());
        match super::super::journal::parse(&text).next() {
            Some(Record::Recv { msg, .. }) => msg,
            _ => panic!("not a recv: {}", String::from_utf8_lossy(&text)),
        }
    }
}
