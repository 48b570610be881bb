//! [`Inbound`]: one message from an admitted sender, as its adapter made it of the platform's
//! event — who sent it ([`Sender`]), what it says ([`Content`]: text, a comma command or a
//! chat control), the files it carries ([`Attachment`]), the message it replies to
//! ([`Quoted`]), the chat it is in ([`ChatInfo`]), and the platform's own fields that only
//! its adapter reads ([`Platform`]).
//!
//! Values, not text: the session actor batches them, the journal stores them (serde at that
//! edge), `media` writes what it learned about a file into its attachment, and the agent
//! renders the model's prompt from them, once.

use serde::{Deserialize, Serialize};

use super::Control;
use crate::access::{Authority, ChatKind, Principal, Role};

/// One inbound platform message from an admitted sender in an allowed chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inbound {
    /// The adapter's name (`telegram`, `discord`).
    pub channel: String,
    /// The platform chat (Telegram chat id, Discord channel id); the session is
    /// [`Inbound::session_id`].
    pub chat_id: String,
    /// The platform message id (answers reply to it when [`Inbound::reply`] is set).
    pub message_id: String,
    pub sender: Sender,
    pub content: Content,
    /// The files the message carries, in the platform's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// The message this one replies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<Quoted>,
    pub chat: ChatInfo,
    /// The bot was addressed: private chat, mention, reply to the bot, keyword, ...
    pub mentioned: bool,
    /// Answers to this message should be sent as a reply to it (groups).
    pub reply: bool,
    #[serde(default, skip_serializing_if = "Platform::is_empty")]
    pub platform: Platform,
    /// The inbox's sequence number (0: not journaled, e.g. in tests).
    #[serde(skip)]
    pub seq: u64,
    /// A restart interrupted the turn that was answering this message: it runs again once,
    /// and the prompt says so.
    #[serde(skip)]
    pub interrupted: bool,
}

/// Who sent a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// The platform's user id.
    pub id: String,
    /// The username (Telegram's `@name`, Discord's user name), if they have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// The display name (Telegram's first and last name, a Discord nickname).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The sender's role: the turn runs with the least trusted role of its batch.
    pub role: Role,
}

impl Sender {
    /// Sender `id` with `username` and `role`, no display name.
    pub fn new(id: &str, username: Option<&str>, role: Role) -> Self {
        Self {
            id: id.to_owned(),
            username: username.map(str::to_owned),
            name: None,
            role,
        }
    }
}

/// What a message says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// Words for the agent: the text, or a line describing what was sent
    /// (`[Photo message] Caption: look`, `[Voice message: 3s]`).
    Text(String),
    /// A comma command (`,help`), trimmed: runs at once, without debounce or batching.
    Command(String),
    /// A chat control (`,stop`; Telegram's `/stop`): the session answers it itself.
    Control(Control),
}

impl Content {
    /// `text` as a message says it: a control (`,stop`), a comma command (`,help`, trimmed) or
    /// text (as it is).
    pub fn of(text: &str) -> Self {
        if !text.trim_start().starts_with(',') {
            return Content::Text(text.to_owned());
        }
        match Control::parse(text) {
            Some(control) => Content::Control(control),
            None => Content::Command(text.trim().to_owned()),
        }
    }

    /// The comma command `,model` with `rest` (a model name, or nothing: show the model).
    pub(crate) fn model(rest: &str) -> Self {
        Content::Command(format!(",model {}", rest.trim()).trim_end().to_owned())
    }

    /// The comma command this content runs as a turn: a command as typed, `,usage` for its
    /// control; `None` for words and for the controls a session answers itself.
    pub(crate) fn command(&self) -> Option<&str> {
        match self {
            Content::Command(line) => Some(line),
            // `,usage` runs the `usage` tool; the other controls the session answers itself.
            Content::Control(Control::Usage) => Some(",usage"),
            Content::Control(_) | Content::Text(_) => None,
        }
    }
}

/// The chat a message was written in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatInfo {
    pub kind: ChatKind,
    /// A group's title, if the platform said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

impl ChatInfo {
    pub fn private() -> Self {
        Self {
            kind: ChatKind::Private,
            title: None,
        }
    }

    pub fn group(title: Option<String>) -> Self {
        Self {
            kind: ChatKind::Group,
            title,
        }
    }
}

/// The message a message replies to: who wrote it and how it begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quoted {
    pub message_id: String,
    /// Its author's user id, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
    /// Its author's username, if they have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Its first characters (the adapter cuts it), if it has text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// A file a message carries: what the platform said about it, and what Bub learned (filled in
/// by `media` before the turn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub kind: AttachmentKind,
    /// What the adapter downloads it by (Telegram's `file_id`, a Discord attachment's URL);
    /// `None`: it is not downloaded (a sticker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The file name the sender gave it (a Discord sticker's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its MIME type, if the platform said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Its size in bytes, if the platform said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Where it was saved, relative to the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<String>,
    /// What the speech in it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<String>,
    /// Why it was not downloaded or transcribed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What kind of file an attachment is, with what its platform says of that kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    Photo {
        width: u32,
        height: u32,
    },
    Voice {
        seconds: u32,
    },
    Audio {
        seconds: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        performer: Option<String>,
    },
    Video {
        width: u32,
        height: u32,
        seconds: u32,
    },
    VideoNote {
        seconds: u32,
    },
    /// A document (also a GIF animation, as Telegram sends one).
    Document,
    /// A sticker: Telegram's has an emoji, a set and a size; Discord's only its name
    /// ([`Attachment::name`]).
    Sticker(Box<Sticker>),
    /// A file attached to a message, of any type (Discord's attachments).
    File,
}

/// What Telegram says of a sticker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sticker {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emoji: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub animated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<bool>,
}

impl AttachmentKind {
    /// The kind's name (`photo`, `video_note`; a [`AttachmentKind::File`] is an `attachment`):
    /// a saved file without a name is called after it.
    pub fn name(&self) -> &'static str {
        match self {
            AttachmentKind::Photo { .. } => "photo",
            AttachmentKind::Voice { .. } => "voice",
            AttachmentKind::Audio { .. } => "audio",
            AttachmentKind::Video { .. } => "video",
            AttachmentKind::VideoNote { .. } => "video_note",
            AttachmentKind::Document => "document",
            AttachmentKind::Sticker(_) => "sticker",
            AttachmentKind::File => "attachment",
        }
    }
}

impl Attachment {
    /// An attachment of `kind` downloaded by `source`, nothing else known yet.
    pub fn new(kind: AttachmentKind, source: Option<String>) -> Self {
        Self {
            kind,
            source,
            name: None,
            mime: None,
            size: None,
            saved: None,
            transcript: None,
            note: None,
        }
    }

    /// An image a vision model can look at.
    pub(crate) fn is_image(&self) -> bool {
        matches!(self.kind, AttachmentKind::Photo { .. })
            || self
                .mime
                .as_deref()
                .is_some_and(|m| m.starts_with("image/"))
    }

    /// Speech to transcribe: a voice note or an audio file.
    pub fn is_audio(&self) -> bool {
        matches!(
            self.kind,
            AttachmentKind::Voice { .. } | AttachmentKind::Audio { .. }
        ) || self
            .mime
            .as_deref()
            .is_some_and(|m| m.starts_with("audio/"))
    }
}

/// The platform's own fields of a message that no other layer reads (Telegram's message type
/// and date, a Discord guild): kept for its adapter, and journaled with the message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Platform(serde_json::Map<String, serde_json::Value>);

impl Platform {
    /// Made by an adapter from its fields.
    pub fn new(fields: serde_json::Map<String, serde_json::Value>) -> Self {
        Self(fields)
    }

    /// The fields, for the adapter that made them.
    pub fn fields(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.0
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Inbound {
    /// Message `message_id` of `sender` in chat `chat_id` of `channel` saying `text` (a comma
    /// command or a control when it is one, see [`Content::of`]), in a private chat, not
    /// addressed, nothing else known: an adapter fills in the rest.
    pub fn new(channel: &str, chat_id: &str, message_id: &str, sender: Sender, text: &str) -> Self {
        Self {
            channel: channel.to_owned(),
            chat_id: chat_id.to_owned(),
            message_id: message_id.to_owned(),
            sender,
            content: Content::of(text),
            attachments: Vec::new(),
            reply_to: None,
            chat: ChatInfo::private(),
            mentioned: false,
            reply: false,
            platform: Platform::default(),
            seq: 0,
            interrupted: false,
        }
    }

    /// The session of its chat (`<channel>:<chat_id>`).
    pub fn session_id(&self) -> super::SessionId {
        super::SessionId::chat_of(&self.channel, &self.chat_id)
    }

    /// Who sent this message, with their role.
    pub(crate) fn authority(&self) -> Authority {
        Authority::sender(
            self.sender.role,
            Principal {
                channel: self.channel.clone(),
                id: self.sender.id.clone(),
                name: self.sender.username.clone(),
            },
        )
    }

    /// A comma command (`,help`) or a control: runs at once, without debounce or batching.
    pub fn is_command(&self) -> bool {
        !matches!(self.content, Content::Text(_))
    }

    /// A chat control (`,stop`, `,new`, `,status`; Telegram's `/stop` arrives as one).
    pub(crate) fn control(&self) -> Option<Control> {
        match self.content {
            Content::Control(control) => Some(control),
            _ => None,
        }
    }

    /// What the message says as text: the text, the command (`,help`), the control (`,stop`).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match &self.content {
            Content::Text(text) | Content::Command(text) => text.as_str().into(),
            Content::Control(control) => format!(",{}", control.name()).into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_is_a_control_a_command_or_words() {
        assert_eq!(Content::of(" ,STOP "), Content::Control(Control::Stop));
        assert_eq!(
            Content::of("  ,tape.info "),
            Content::Command(",tape.info".into())
        );
        assert_eq!(
            Content::of(" hi, there "),
            Content::Text(" hi, there ".into())
        );
        let mut m = Inbound::new(
            "telegram",
            "42",
            "7",
            Sender::new("42", None, Role::Owner),
            ",stop",
        );
        assert!(m.is_command());
        assert_eq!(
            (m.control(), m.text().as_ref()),
            (Some(Control::Stop), ",stop")
        );
        m.content = Content::of("hello");
        assert!(!m.is_command() && m.control().is_none());
        assert_eq!(m.session_id(), "telegram:42");
    }
}
