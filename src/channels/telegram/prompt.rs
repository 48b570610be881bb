//! What the session sees of one Telegram message (its content and metadata JSON).
//!
//! [`describe`] turns a message into its content text (the text itself, or a line such as
//! `[Photo message] Caption: look`) plus the media metadata; [`build`] turns that content into
//! the session prompt: the content verbatim when it is a comma command (`,help`), otherwise the
//! metadata JSON `{"message", "chat_id", "message_id", "type", "username", "full_name",
//! "sender_id", "sender_is_bot", "date", "media"?, "caption"?, "reply_to_message"?}` with null
//! values dropped and non-ASCII text kept as is. Media is described, never downloaded.

use serde_json::{Map, Value, json};
use teloxide::types::{FileMeta, MediaKind, Message, MessageKind, PhotoSize};

/// Longest quoted text of a replied-to message, in characters.
const REPLY_TEXT_LIMIT: usize = 100;

/// The content and metadata of one message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Described {
    /// `text`, `photo`, `audio`, `sticker`, `video`, `voice`, `document`, `video_note` or
    /// `unknown`.
    pub kind: &'static str,
    /// The text, or the media line (`[Voice message: 3s]`).
    pub content: String,
    /// Media metadata (nulls dropped).
    pub media: Option<Value>,
    /// The media caption, if any.
    pub caption: Option<String>,
}

/// Describes `msg`: its type, content text and media metadata (of a photo, the largest size).
#[cfg(test)]
pub(crate) fn describe(msg: &Message) -> Described {
    describe_within(msg, u64::MAX)
}

/// Describes `msg`: its type, content text and media metadata; of a photo, the largest size
/// within `max_bytes` (else the smallest).
pub(crate) fn describe_within(msg: &Message, max_bytes: u64) -> Described {
    let media_kind = match &msg.kind {
        MessageKind::Common(common) => Some(&common.media_kind),
        _ => None,
    };
    let unknown = Described {
        kind: "unknown",
        content: "[Unknown message type]".to_owned(),
        media: None,
        caption: None,
    };
    let Some(media_kind) = media_kind else {
        return unknown;
    };
    let with_caption = |line: String, caption: &Option<String>| match caption {
        Some(c) => format!("{line} Caption: {c}"),
        None => line,
    };
    let (kind, content, media, caption) = match media_kind {
        MediaKind::Text(t) => return text(&t.text),
        MediaKind::Photo(p) => {
            let fits = |s: &&PhotoSize| size(&s.file).is_none_or(|n| u64::from(n) <= max_bytes);
            let Some(largest) = p.photo.iter().rev().find(fits).or(p.photo.first()) else {
                return unknown;
            };
            let media = json!({"file_id": largest.file.id.0, "file_size": size(&largest.file),
                "width": largest.width, "height": largest.height});
            let content = with_caption("[Photo message]".to_owned(), &p.caption);
            ("photo", content, media, p.caption.clone())
        }
        MediaKind::Audio(a) => {
            let audio = &a.audio;
            let title = audio.title.as_deref().unwrap_or("Unknown");
            let secs = audio.duration.seconds();
            let content = match &audio.performer {
                Some(performer) => format!("[Audio: {performer} - {title} ({secs}s)]"),
                None => format!("[Audio: {title} ({secs}s)]"),
            };
            let media = json!({"file_id": audio.file.id.0, "file_size": size(&audio.file),
                "duration": secs, "title": audio.title, "performer": audio.performer});
            ("audio", content, media, a.caption.clone())
        }
        MediaKind::Sticker(s) => {
            let sticker = &s.sticker;
            let set = sticker.set_name.as_deref().unwrap_or("unknown");
            let content = match &sticker.emoji {
                Some(emoji) => format!("[Sticker: {emoji} from {set}]"),
                None => format!("[Sticker from {set}]"),
            };
            let media = json!({"file_id": sticker.file.id.0, "width": sticker.width,
                "height": sticker.height, "emoji": sticker.emoji, "set_name": sticker.set_name,
                "is_animated": sticker.flags.is_animated, "is_video": sticker.flags.is_video});
            ("sticker", content, media, None)
        }
        MediaKind::Video(v) => {
            let video = &v.video;
            let secs = video.duration.seconds();
            let content = with_caption(format!("[Video: {secs}s]"), &v.caption);
            let media = json!({"file_id": video.file.id.0, "file_size": size(&video.file),
                "width": video.width, "height": video.height, "duration": secs});
            ("video", content, media, v.caption.clone())
        }
        MediaKind::Voice(v) => {
            let secs = v.voice.duration.seconds();
            let media = json!({"file_id": v.voice.file.id.0, "duration": secs});
            (
                "voice",
                format!("[Voice message: {secs}s]"),
                media,
                v.caption.clone(),
            )
        }
        MediaKind::Document(d) => {
            let doc = &d.document;
            let mime = doc.mime_type.as_ref().map(ToString::to_string);
            document(&doc.file, doc.file_name.clone(), mime, d.caption.clone())
        }
        // Telegram also sends an animation (GIF) as a `document`; describe it as one.
        MediaKind::Animation(a) => {
            let anim = &a.animation;
            let mime = anim.mime_type.as_ref().map(ToString::to_string);
            document(&anim.file, anim.file_name.clone(), mime, a.caption.clone())
        }
        MediaKind::VideoNote(v) => {
            let secs = v.video_note.duration.seconds();
            let media = json!({"file_id": v.video_note.file.id.0, "duration": secs});
            ("video_note", format!("[Video note: {secs}s]"), media, None)
        }
        _ => return unknown,
    };
    Described {
        kind,
        content,
        media: Some(drop_nulls(media)),
        caption,
    }
}

fn text(text: &str) -> Described {
    Described {
        kind: "text",
        content: text.to_owned(),
        media: None,
        caption: None,
    }
}

fn document(
    file: &FileMeta,
    name: Option<String>,
    mime: Option<String>,
    caption: Option<String>,
) -> (&'static str, String, Value, Option<String>) {
    let line = format!(
        "[Document: {} ({})]",
        name.as_deref().unwrap_or("unknown"),
        mime.as_deref().unwrap_or("unknown")
    );
    let content = match &caption {
        Some(c) => format!("{line} Caption: {c}"),
        None => line,
    };
    let media = json!({"file_id": file.id.0, "file_name": name, "file_size": size(file),
        "mime_type": mime});
    ("document", content, media, caption)
}

/// The file size, unless Telegram left it out (teloxide then fills in `u32::MAX`).
fn size(file: &FileMeta) -> Option<u32> {
    (file.size != u32::MAX).then_some(file.size)
}

fn drop_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .collect::<Map<_, _>>(),
        ),
        other => other,
    }
}

/// The session prompt for `msg` whose content (after stripping a `/bub` command) is
/// `content`: the content verbatim for a comma command, else the metadata JSON.
pub(crate) fn build(msg: &Message, described: &Described, content: &str) -> String {
    if content.trim_start().starts_with(',') {
        return content.to_owned();
    }
    metadata(msg, described, content).to_string()
}

/// The metadata JSON object (the field names every tape and journal has).
pub(crate) fn metadata(msg: &Message, described: &Described, content: &str) -> Value {
    let from = msg.from.as_ref();
    let mut out = Map::new();
    out.insert("message".into(), json!(content));
    out.insert("chat_id".into(), json!(msg.chat.id.0.to_string()));
    out.insert("message_id".into(), json!(msg.id.0));
    out.insert("type".into(), json!(described.kind));
    out.insert(
        "username".into(),
        json!(from.and_then(|u| u.username.clone()).unwrap_or_default()),
    );
    out.insert(
        "full_name".into(),
        json!(from.map(|u| u.full_name()).unwrap_or_default()),
    );
    out.insert(
        "sender_id".into(),
        json!(from.map(|u| u.id.0.to_string()).unwrap_or_default()),
    );
    out.insert("sender_is_bot".into(), json!(from.map(|u| u.is_bot)));
    out.insert("date".into(), json!(msg.date.timestamp() as f64));
    if let Some(media) = &described.media {
        out.insert("media".into(), media.clone());
        if let Some(caption) = &described.caption {
            out.insert("caption".into(), json!(caption));
        }
    }
    if let Some(reply) = msg.reply_to_message() {
        let author = reply.from.as_ref();
        let text: Option<String> = reply
            .text()
            .or(reply.caption())
            .map(|t| t.chars().take(REPLY_TEXT_LIMIT).collect());
        let reply = json!({
            "message_id": reply.id.0,
            // A number, unlike sender ids (strings): the format tapes already hold.
            "from_user_id": author.map(|u| u.id.0),
            "from_username": author.and_then(|u| u.username.clone()),
            "from_is_bot": author.map(|u| u.is_bot),
            "text": text,
        });
        out.insert("reply_to_message".into(), drop_nulls(reply));
    }
    drop_nulls(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn prompt_of(extra: Value) -> Value {
        let m = msg(extra);
        let d = describe(&m);
        let p = build(&m, &d, &d.content);
        serde_json::from_str(&p).expect("json prompt")
    }

    #[test]
    fn text_message_metadata() {
        let p = prompt_of(json!({"text": "héllo wörld ✓"}));
        assert_eq!(
            p,
            json!({"message": "héllo wörld ✓", "chat_id": "42", "message_id": 11,
                "type": "text", "username": "alice", "full_name": "Alice Liddell",
                "sender_id": "42", "sender_is_bot": false, "date": 1700000000.0})
        );
        let m = msg(json!({"text": "héllo"}));
        let d = describe(&m);
        assert!(
            build(&m, &d, &d.content).contains("héllo"),
            "non-ASCII kept"
        );
    }

    #[test]
    fn comma_command_is_verbatim() {
        let m = msg(json!({"text": "  ,tape.info"}));
        let d = describe(&m);
        assert_eq!(build(&m, &d, &d.content), "  ,tape.info");
    }

    #[test]
    fn photo_uses_largest_size_and_caption() {
        let p = prompt_of(json!({"caption": "look",
            "photo": [{"file_id": "small", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 10},
                      {"file_id": "big", "file_unique_id": "u2", "width": 800, "height": 600, "file_size": 5000}]}));
        assert_eq!(p["type"], "photo");
        assert_eq!(p["message"], "[Photo message] Caption: look");
        assert_eq!(
            p["media"],
            json!({"file_id": "big", "file_size": 5000, "width": 800, "height": 600})
        );
        assert_eq!(p["caption"], "look");
        let p = prompt_of(
            json!({"photo": [{"file_id": "a", "file_unique_id": "u", "width": 1, "height": 1}]}),
        );
        assert_eq!(p["message"], "[Photo message]");
        assert_eq!(p["media"], json!({"file_id": "a", "width": 1, "height": 1}));
        assert!(p.get("caption").is_none());
    }

    #[test]
    fn a_photo_is_described_by_its_largest_size_within_the_download_cap() {
        let m = msg(json!({"photo": [
            {"file_id": "s", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 10},
            {"file_id": "m", "file_unique_id": "u2", "width": 320, "height": 320, "file_size": 500},
            {"file_id": "l", "file_unique_id": "u3", "width": 1280, "height": 1280, "file_size": 9000}]}));
        assert_eq!(describe_within(&m, 1000).media.unwrap()["file_id"], "m");
        assert_eq!(describe_within(&m, 9000).media.unwrap()["file_id"], "l");
        // None fits: the smallest is described (and its note will say it is too large).
        assert_eq!(describe_within(&m, 5).media.unwrap()["file_id"], "s");
    }

    #[test]
    fn audio_sticker_video_voice_document_video_note() {
        // teloxide needs `mime_type` on audio, video and voice (a message without it parses as
        // an unknown type); Telegram always sends it.
        let p = prompt_of(json!({"audio": {"file_id": "au", "file_unique_id": "u",
            "duration": 61, "performer": "Band", "title": "Song", "file_size": 7,
            "mime_type": "audio/mpeg"}}));
        assert_eq!(p["message"], "[Audio: Band - Song (61s)]");
        assert_eq!(
            p["media"],
            json!({"file_id": "au", "file_size": 7, "duration": 61, "title": "Song", "performer": "Band"})
        );
        let p = prompt_of(
            json!({"audio": {"file_id": "au", "file_unique_id": "u", "duration": 3, "mime_type": "audio/mpeg"}}),
        );
        assert_eq!(p["message"], "[Audio: Unknown (3s)]");

        let p = prompt_of(json!({"sticker": {"file_id": "st", "file_unique_id": "u",
            "type": "regular", "width": 512, "height": 512, "is_animated": false,
            "is_video": true, "emoji": "😀", "set_name": "Pack"}}));
        assert_eq!(p["type"], "sticker");
        assert_eq!(p["message"], "[Sticker: 😀 from Pack]");
        assert_eq!(
            p["media"],
            json!({"file_id": "st", "width": 512, "height": 512, "emoji": "😀",
                "set_name": "Pack", "is_animated": false, "is_video": true})
        );

        let p = prompt_of(json!({"caption": "clip", "video": {"file_id": "v",
            "file_unique_id": "u", "width": 640, "height": 480, "duration": 12,
            "mime_type": "video/mp4"}}));
        assert_eq!(p["message"], "[Video: 12s] Caption: clip");
        assert_eq!(
            p["media"],
            json!({"file_id": "v", "width": 640, "height": 480, "duration": 12})
        );

        let p = prompt_of(
            json!({"voice": {"file_id": "vo", "file_unique_id": "u", "duration": 4, "mime_type": "audio/ogg"}}),
        );
        assert_eq!(p["type"], "voice");
        assert_eq!(p["message"], "[Voice message: 4s]");
        assert_eq!(p["media"], json!({"file_id": "vo", "duration": 4}));

        let p = prompt_of(json!({"caption": "the report", "document": {"file_id": "d",
            "file_unique_id": "u", "file_name": "r.pdf", "mime_type": "application/pdf",
            "file_size": 99}}));
        assert_eq!(p["type"], "document");
        assert_eq!(
            p["message"],
            "[Document: r.pdf (application/pdf)] Caption: the report"
        );
        assert_eq!(
            p["media"],
            json!({"file_id": "d", "file_name": "r.pdf", "file_size": 99, "mime_type": "application/pdf"})
        );
        let p = prompt_of(json!({"document": {"file_id": "d", "file_unique_id": "u"}}));
        assert_eq!(p["message"], "[Document: unknown (unknown)]");

        let p = prompt_of(
            json!({"video_note": {"file_id": "vn", "file_unique_id": "u",
            "length": 240, "duration": 9}}),
        );
        assert_eq!(p["type"], "video_note");
        assert_eq!(p["message"], "[Video note: 9s]");
        assert_eq!(p["media"], json!({"file_id": "vn", "duration": 9}));
    }

    #[test]
    fn unknown_type() {
        let p = prompt_of(json!({"location": {"latitude": 1.0, "longitude": 2.0}}));
        assert_eq!(p["type"], "unknown");
        assert_eq!(p["message"], "[Unknown message type]");
        assert!(p.get("media").is_none());
    }

    #[test]
    fn reply_context_truncated_and_nulls_dropped() {
        let long = "x".repeat(150);
        let p = prompt_of(json!({"text": "yes",
            "reply_to_message": {"message_id": 7, "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "Alice"},
                "from": {"id": 777, "is_bot": true, "first_name": "Bub", "username": "bub_test_bot"},
                "text": long}}));
        assert_eq!(
            p["reply_to_message"],
            json!({"message_id": 7, "from_user_id": 777, "from_username": "bub_test_bot",
                "from_is_bot": true, "text": "x".repeat(100)})
        );
        let p = prompt_of(json!({"text": "yes",
            "reply_to_message": {"message_id": 8, "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "Alice"},
                "from": {"id": 9, "is_bot": false, "first_name": "Eve"},
                "photo": [{"file_id": "a", "file_unique_id": "u", "width": 1, "height": 1}]}}));
        assert_eq!(
            p["reply_to_message"],
            json!({"message_id": 8, "from_user_id": 9, "from_is_bot": false})
        );
    }

    #[test]
    fn bub_command_content_replaces_text() {
        let m = msg(json!({"text": "/bub what time is it"}));
        let d = describe(&m);
        let p: Value = serde_json::from_str(&build(&m, &d, "what time is it")).unwrap();
        assert_eq!(p["message"], "what time is it");
        assert_eq!(build(&m, &d, ",help"), ",help");
    }
}
