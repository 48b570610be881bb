//! What Bub keeps of one Telegram message: who sent it, its content — the text itself, or a
//! line such as `[Photo message] Caption: look` — the file it carries (its size, duration, ...),
//! the message it replies to, and the chat ([`inbound`]). Media is described, never
//! downloaded here (`media` downloads it by its `file_id`).

use serde_json::{Map, json};
use teloxide::types::{FileMeta, MediaKind, Message, MessageKind, PhotoSize};

use crate::access::Role;
use crate::channels::{
    Attachment, AttachmentKind, ChatInfo, Content, Inbound, Platform, Quoted, Sender, Sticker,
};

/// Longest quoted text of a replied-to message, in characters.
const REPLY_TEXT_LIMIT: usize = 100;

/// The content and file of one message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Described {
    /// `text`, `photo`, `audio`, `sticker`, `video`, `voice`, `document`, `video_note` or
    /// `unknown`.
    pub kind: &'static str,
    /// The text, or the media line (`[Voice message: 3s]`).
    pub content: String,
    /// The file it carries.
    pub attachment: Option<Attachment>,
}

/// Describes `msg`: its type, content text and file (of a photo, the largest size).
#[cfg(test)]
pub(crate) fn describe(msg: &Message) -> Described {
    describe_within(msg, u64::MAX)
}

/// Describes `msg`: its type, content text and file; of a photo, the largest size within
/// `max_bytes` (else the smallest).
pub(crate) fn describe_within(msg: &Message, max_bytes: u64) -> Described {
    let media_kind = match &msg.kind {
        MessageKind::Common(common) => Some(&common.media_kind),
        _ => None,
    };
    let unknown = Described {
        kind: "unknown",
        content: "[Unknown message type]".to_owned(),
        attachment: None,
    };
    let Some(media_kind) = media_kind else {
        return unknown;
    };
    let with_caption = |line: String, caption: &Option<String>| match caption {
        Some(c) => format!("{line} Caption: {c}"),
        None => line,
    };
    let (kind, content, attachment) = match media_kind {
        MediaKind::Text(t) => {
            return Described {
                kind: "text",
                content: t.text.clone(),
                attachment: None,
            };
        }
        MediaKind::Photo(p) => {
            let fits = |s: &&PhotoSize| size(&s.file).is_none_or(|n| n <= max_bytes);
            let Some(largest) = p.photo.iter().rev().find(fits).or(p.photo.first()) else {
                return unknown;
            };
            let kind = AttachmentKind::Photo {
                width: largest.width,
                height: largest.height,
            };
            let content = with_caption("[Photo message]".to_owned(), &p.caption);
            ("photo", content, file(kind, &largest.file))
        }
        MediaKind::Audio(a) => {
            let audio = &a.audio;
            let title = audio.title.as_deref().unwrap_or("Unknown");
            let secs = audio.duration.seconds();
            let content = match &audio.performer {
                Some(performer) => format!("[Audio: {performer} - {title} ({secs}s)]"),
                None => format!("[Audio: {title} ({secs}s)]"),
            };
            let kind = AttachmentKind::Audio {
                seconds: secs,
                title: audio.title.clone(),
                performer: audio.performer.clone(),
            };
            ("audio", content, file(kind, &audio.file))
        }
        MediaKind::Sticker(s) => {
            let sticker = &s.sticker;
            let set = sticker.set_name.as_deref().unwrap_or("unknown");
            let content = match &sticker.emoji {
                Some(emoji) => format!("[Sticker: {emoji} from {set}]"),
                None => format!("[Sticker from {set}]"),
            };
            // Described only: a sticker is not downloaded.
            let kind = AttachmentKind::Sticker(Box::new(Sticker {
                width: Some(sticker.width.into()),
                height: Some(sticker.height.into()),
                emoji: sticker.emoji.clone(),
                set_name: sticker.set_name.clone(),
                animated: Some(sticker.flags.is_animated),
                video: Some(sticker.flags.is_video),
            }));
            ("sticker", content, Attachment::new(kind, None))
        }
        MediaKind::Video(v) => {
            let video = &v.video;
            let secs = video.duration.seconds();
            let content = with_caption(format!("[Video: {secs}s]"), &v.caption);
            let kind = AttachmentKind::Video {
                width: video.width,
                height: video.height,
                seconds: secs,
            };
            ("video", content, file(kind, &video.file))
        }
        MediaKind::Voice(v) => {
            let secs = v.voice.duration.seconds();
            let kind = AttachmentKind::Voice { seconds: secs };
            let voice = Attachment::new(kind, Some(v.voice.file.id.0.clone()));
            ("voice", format!("[Voice message: {secs}s]"), voice)
        }
        MediaKind::Document(d) => {
            let doc = &d.document;
            let mime = doc.mime_type.as_ref().map(ToString::to_string);
            document(&doc.file, doc.file_name.clone(), mime, &d.caption)
        }
        // Telegram also sends an animation (GIF) as a `document`; describe it as one.
        MediaKind::Animation(a) => {
            let anim = &a.animation;
            let mime = anim.mime_type.as_ref().map(ToString::to_string);
            document(&anim.file, anim.file_name.clone(), mime, &a.caption)
        }
        MediaKind::VideoNote(v) => {
            let secs = v.video_note.duration.seconds();
            let kind = AttachmentKind::VideoNote { seconds: secs };
            let note = Attachment::new(kind, Some(v.video_note.file.id.0.clone()));
            ("video_note", format!("[Video note: {secs}s]"), note)
        }
        _ => return unknown,
    };
    Described {
        kind,
        content,
        attachment: Some(attachment),
    }
}

/// A file of `kind` downloaded by its `file_id`, with its size when Telegram said.
fn file(kind: AttachmentKind, meta: &FileMeta) -> Attachment {
    Attachment {
        size: size(meta),
        ..Attachment::new(kind, Some(meta.id.0.clone()))
    }
}

fn document(
    meta: &FileMeta,
    name: Option<String>,
    mime: Option<String>,
    caption: &Option<String>,
) -> (&'static str, String, Attachment) {
    let line = format!(
        "[Document: {} ({})]",
        name.as_deref().unwrap_or("unknown"),
        mime.as_deref().unwrap_or("unknown")
    );
    let content = match caption {
        Some(c) => format!("{line} Caption: {c}"),
        None => line,
    };
    let attachment = Attachment {
        name,
        mime,
        ..file(AttachmentKind::Document, meta)
    };
    ("document", content, attachment)
}

/// The file size, unless Telegram left it out (teloxide then fills in `u32::MAX`).
fn size(file: &FileMeta) -> Option<u64> {
    (file.size != u32::MAX).then_some(u64::from(file.size))
}

/// The message `msg` of a sender with `role`, saying `content` (the adapter typed it: a slash
/// command as its control or comma command, other text by [`Content::of`]). Not addressed yet;
/// answered with a reply in groups.
pub(crate) fn inbound(
    msg: &Message,
    described: Described,
    content: Content,
    role: Role,
) -> Inbound {
    let from = msg.from.as_ref();
    let sender = Sender {
        id: from.map(|u| u.id.0.to_string()).unwrap_or_default(),
        username: from.and_then(|u| u.username.clone()),
        name: from.map(|u| u.full_name()).filter(|n| !n.is_empty()),
        role,
    };
    let mut platform = Map::new();
    platform.insert("type".into(), json!(described.kind));
    platform.insert("date".into(), json!(msg.date.timestamp()));
    let private = msg.chat.is_private();
    Inbound {
        content,
        attachments: described.attachment.into_iter().collect(),
        reply_to: msg.reply_to_message().map(quoted),
        chat: match private {
            true => ChatInfo::private(),
            false => ChatInfo::group(msg.chat.title().map(str::to_owned)),
        },
        reply: !private,
        platform: Platform::new(platform),
        ..Inbound::new(
            "telegram",
            &msg.chat.id.0.to_string(),
            &msg.id.0.to_string(),
            sender,
            "",
        )
    }
}

/// The replied-to message: its author and its first [`REPLY_TEXT_LIMIT`] characters.
fn quoted(reply: &Message) -> Quoted {
    let author = reply.from.as_ref();
    Quoted {
        message_id: reply.id.0.to_string(),
        sender_id: author.map(|u| u.id.0.to_string()),
        username: author.and_then(|u| u.username.clone()),
        text: reply
            .text()
            .or(reply.caption())
            .map(|t| t.chars().take(REPLY_TEXT_LIMIT).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn msg(extra: Value) -> Message {
        let mut m = json!({"message_id": 11, "date": 1700000000,
            "chat": {"id": 42, "type": "private", "first_name": "Alice"},
            "from": {"id": 42, "is_bot": false, "first_name": "Alice", "last_name": "Liddell",
                "username": "alice"}});
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        serde_json::from_str(&m.to_string()).expect("valid message")
    }

    fn inbound_of(extra: Value) -> Inbound {
        let m = msg(extra);
        let d = describe(&m);
        let content = Content::of(&d.content);
        inbound(&m, d, content, Role::Owner)
    }

    fn file_of(extra: Value) -> Attachment {
        let mut files = inbound_of(extra).attachments;
        assert_eq!(files.len(), 1, "{files:?}");
        files.remove(0)
    }

    #[test]
    fn a_text_message_is_its_sender_chat_and_text() {
        let m = inbound_of(json!({"text": "héllo wörld ✓"}));
        assert_eq!(
            (
                m.channel.as_str(),
                m.chat_id.as_str(),
                m.message_id.as_str()
            ),
            ("telegram", "42", "11")
        );
        assert_eq!(
            m.sender,
            Sender {
                id: "42".into(),
                username: Some("alice".into()),
                name: Some("Alice Liddell".into()),
                role: Role::Owner,
            }
        );
        assert_eq!(
            m.content,
            Content::Text("héllo wörld ✓".into()),
            "non-ASCII kept"
        );
        assert_eq!(
            (m.chat, m.reply, m.mentioned),
            (ChatInfo::private(), false, false)
        );
        assert!(m.attachments.is_empty() && m.reply_to.is_none());
        assert_eq!(m.platform.fields()["type"], "text");
        assert_eq!(m.platform.fields()["date"], 1700000000);
        let group = inbound_of(json!({"text": "hi",
            "chat": {"id": -5, "type": "group", "title": "Friends"}}));
        assert_eq!(group.chat, ChatInfo::group(Some("Friends".into())));
        assert!(group.reply, "answers reply in groups");
    }

    #[test]
    fn a_comma_command_is_a_command_and_a_control_a_control() {
        let m = msg(json!({"text": "  ,tape.info"}));
        let d = describe(&m);
        let got = inbound(&m, d.clone(), Content::of(&d.content), Role::Owner);
        assert_eq!(got.content, Content::Command(",tape.info".into()));
    }

    #[test]
    fn photo_uses_largest_size_and_caption() {
        let m = inbound_of(json!({"caption": "look",
            "photo": [{"file_id": "small", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 10},
                      {"file_id": "big", "file_unique_id": "u2", "width": 800, "height": 600, "file_size": 5000}]}));
        assert_eq!(m.platform.fields()["type"], "photo");
        assert_eq!(
            m.content,
            Content::Text("[Photo message] Caption: look".into())
        );
        assert_eq!(
            m.attachments,
            [Attachment {
                size: Some(5000),
                ..Attachment::new(
                    AttachmentKind::Photo {
                        width: 800,
                        height: 600
                    },
                    Some("big".into())
                )
            }]
        );
        assert!(m.attachments[0].is_image());
        let m = inbound_of(
            json!({"photo": [{"file_id": "a", "file_unique_id": "u", "width": 1, "height": 1}]}),
        );
        assert_eq!(m.content, Content::Text("[Photo message]".into()));
        assert_eq!(m.attachments[0].size, None);
    }

    #[test]
    fn a_photo_is_described_by_its_largest_size_within_the_download_cap() {
        let m = msg(json!({"photo": [
            {"file_id": "s", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 10},
            {"file_id": "m", "file_unique_id": "u2", "width": 320, "height": 320, "file_size": 500},
            {"file_id": "l", "file_unique_id": "u3", "width": 1280, "height": 1280, "file_size": 9000}]}));
        let source = |max| describe_within(&m, max).attachment.unwrap().source.unwrap();
        assert_eq!(source(1000), "m");
        assert_eq!(source(9000), "l");
        // None fits: the smallest is described (and its note will say it is too large).
        assert_eq!(source(5), "s");
    }

    #[test]
    fn audio_sticker_video_voice_document_video_note() {
        // teloxide needs `mime_type` on audio, video and voice (a message without it parses as
        // an unknown type); Telegram always sends it.
        let audio = json!({"audio": {"file_id": "au", "file_unique_id": "u",
            "duration": 61, "performer": "Band", "title": "Song", "file_size": 7,
            "mime_type": "audio/mpeg"}});
        assert_eq!(
            inbound_of(audio.clone()).content,
            Content::Text("[Audio: Band - Song (61s)]".into())
        );
        let a = file_of(audio);
        assert_eq!(
            (a.kind, a.source.as_deref(), a.size),
            (
                AttachmentKind::Audio {
                    seconds: 61,
                    title: Some("Song".into()),
                    performer: Some("Band".into())
                },
                Some("au"),
                Some(7)
            )
        );
        let m = inbound_of(
            json!({"audio": {"file_id": "au", "file_unique_id": "u", "duration": 3, "mime_type": "audio/mpeg"}}),
        );
        assert_eq!(m.content, Content::Text("[Audio: Unknown (3s)]".into()));

        let sticker = json!({"sticker": {"file_id": "st", "file_unique_id": "u",
            "type": "regular", "width": 512, "height": 512, "is_animated": false,
            "is_video": true, "emoji": "😀", "set_name": "Pack"}});
        let m = inbound_of(sticker);
        assert_eq!(m.platform.fields()["type"], "sticker");
        assert_eq!(m.content, Content::Text("[Sticker: 😀 from Pack]".into()));
        assert_eq!(
            m.attachments,
            [Attachment::new(
                AttachmentKind::Sticker(Box::new(Sticker {
                    width: Some(512),
                    height: Some(512),
                    emoji: Some("😀".into()),
                    set_name: Some("Pack".into()),
                    animated: Some(false),
                    video: Some(true),
                })),
                None
            )],
            "described, not downloaded"
        );

        let video = json!({"caption": "clip", "video": {"file_id": "v",
            "file_unique_id": "u", "width": 640, "height": 480, "duration": 12,
            "mime_type": "video/mp4"}});
        assert_eq!(
            inbound_of(video.clone()).content,
            Content::Text("[Video: 12s] Caption: clip".into())
        );
        assert_eq!(
            file_of(video).kind,
            AttachmentKind::Video {
                width: 640,
                height: 480,
                seconds: 12
            }
        );

        let voice = json!({"voice": {"file_id": "vo", "file_unique_id": "u", "duration": 4,
            "mime_type": "audio/ogg"}});
        let m = inbound_of(voice);
        assert_eq!(m.platform.fields()["type"], "voice");
        assert_eq!(m.content, Content::Text("[Voice message: 4s]".into()));
        assert_eq!(
            m.attachments,
            [Attachment::new(
                AttachmentKind::Voice { seconds: 4 },
                Some("vo".into())
            )]
        );
        assert!(m.attachments[0].is_audio());

        let doc = json!({"caption": "the report", "document": {"file_id": "d",
            "file_unique_id": "u", "file_name": "r.pdf", "mime_type": "application/pdf",
            "file_size": 99}});
        assert_eq!(
            inbound_of(doc.clone()).content,
            Content::Text("[Document: r.pdf (application/pdf)] Caption: the report".into())
        );
        let d = file_of(doc);
        assert!(!d.is_image());
        assert_eq!(
            (d.kind, d.name.as_deref(), d.mime.as_deref(), d.size),
            (
                AttachmentKind::Document,
                Some("r.pdf"),
                Some("application/pdf"),
                Some(99)
            )
        );
        let m = inbound_of(json!({"document": {"file_id": "d", "file_unique_id": "u"}}));
        assert_eq!(
            m.content,
            Content::Text("[Document: unknown (unknown)]".into())
        );

        let note = json!({"video_note": {"file_id": "vn", "file_unique_id": "u",
            "length": 240, "duration": 9}});
        assert_eq!(
            inbound_of(note.clone()).content,
            Content::Text("[Video note: 9s]".into())
        );
        assert_eq!(file_of(note).kind, AttachmentKind::VideoNote { seconds: 9 });
    }

    #[test]
    fn unknown_type() {
        let m = inbound_of(json!({"location": {"latitude": 1.0, "longitude": 2.0}}));
        assert_eq!(m.platform.fields()["type"], "unknown");
        assert_eq!(m.content, Content::Text("[Unknown message type]".into()));
        assert!(m.attachments.is_empty());
    }

    #[test]
    fn reply_context_truncated() {
        let long = "x".repeat(150);
        let m = inbound_of(json!({"text": "yes",
            "reply_to_message": {"message_id": 7, "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "Alice"},
                "from": {"id": 777, "is_bot": true, "first_name": "Bub", "username": "bub_test_bot"},
                "text": long}}));
        assert_eq!(
            m.reply_to,
            Some(Quoted {
                message_id: "7".into(),
                sender_id: Some("777".into()),
                username: Some("bub_test_bot".into()),
                text: Some("x".repeat(100)),
            })
        );
        let m = inbound_of(json!({"text": "yes",
            "reply_to_message": {"message_id": 8, "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "Alice"},
                "from": {"id": 9, "is_bot": false, "first_name": "Eve"},
                "photo": [{"file_id": "a", "file_unique_id": "u", "width": 1, "height": 1}]}}));
        assert_eq!(
            m.reply_to,
            Some(Quoted {
                message_id: "8".into(),
                sender_id: Some("9".into()),
                username: None,
                text: None,
            })
        );
    }

    #[test]
    fn bub_command_content_replaces_text() {
        let m = msg(json!({"text": "/bub what time is it"}));
        let d = describe(&m);
        let got = inbound(&m, d.clone(), Content::of("what time is it"), Role::Owner);
        assert_eq!(got.content, Content::Text("what time is it".into()));
        assert_eq!(
            inbound(&m, d, Content::of(",help"), Role::Owner).content,
            Content::Command(",help".into())
        );
    }
}
