//! The messages of a chat, as every layer sees them: [`Inbound`] (one platform message from an
//! admitted sender), [`Control`] (the chat controls a session answers itself) and [`Outbound`]
//! (one text for a chat). They sit below the adapters (`channels`) and the journal (`inbox`),
//! which both speak them.

mod session;

use serde::{Deserialize, Serialize};

use crate::access::{Authority, Principal, Role};
pub use session::SessionId;

/// One inbound platform message from an admitted sender in an allowed chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inbound {
    /// The adapter's name (`telegram`, `discord`).
    pub channel: String,
    /// The platform chat (Telegram chat id, Discord channel id); the session is
    /// `"<channel>:<chat_id>"`.
    pub chat_id: String,
    /// The platform message id (answers reply to it when [`Inbound::reply`] is set).
    pub message_id: String,
    /// The sender's platform id (for logs; never the message text).
    pub sender_id: String,
    /// The sender's username, if they have one (never a display name).
    pub sender_name: Option<String>,
    /// The sender's role: the turn runs with the least trusted role of its batch.
    pub role: Role,
    /// What the session sees: the raw text for a comma command (`,help`), otherwise the
    /// platform's metadata JSON (message, chat, sender, reply context, media).
    pub prompt: String,
    /// The bot was addressed: private chat, mention, reply to the bot, keyword, ...
    pub mentioned: bool,
    /// Answers to this message should be sent as a reply to it (groups).
    pub reply: bool,
    /// The inbox's sequence number (0: not journaled, e.g. in tests).
    #[serde(skip)]
    pub seq: u64,
    /// A restart interrupted the turn that was answering this message: it runs again once,
    /// and the prompt says so.
    #[serde(skip)]
    pub interrupted: bool,
}

impl Inbound {
    /// The session of its chat (`<channel>:<chat_id>`).
    pub fn session_id(&self) -> SessionId {
        SessionId::chat_of(&self.channel, &self.chat_id)
    }

    /// Who sent this message, with their role.
    pub(crate) fn authority(&self) -> Authority {
        Authority::sender(
            self.role,
            Principal {
                channel: self.channel.clone(),
                id: self.sender_id.clone(),
                name: self.sender_name.clone(),
            },
        )
    }

    /// A comma command (`,help`): runs at once, without debounce or batching.
    pub fn is_command(&self) -> bool {
        self.prompt.trim_start().starts_with(',')
    }

    /// A chat control (`,stop`, `,new`, `,status`; Telegram's `/stop` arrives as `,stop`).
    pub(crate) fn control(&self) -> Option<Control> {
        Control::parse(&self.prompt)
    }
}

/// A chat control: handled by the session itself, never by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Cancel the running turn (queued messages stay queued).
    Stop,
    /// Start a fresh context (a handoff anchor).
    New,
    /// Show the session's state.
    Status,
    /// Show the session's token usage (runs the `usage` tool as a command).
    Usage,
}

impl Control {
    /// Every control with its description (Telegram's command menu).
    pub(crate) const ALL: [(Control, &'static str); 4] = [
        (Control::Stop, "Stop the running turn"),
        (Control::New, "Start a fresh context"),
        (Control::Status, "Show the session's state"),
        (Control::Usage, "Show this chat's token usage and cost"),
    ];

    /// The command word (`stop`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Control::Stop => "stop",
            Control::New => "new",
            Control::Status => "status",
            Control::Usage => "usage",
        }
    }

    /// `,stop` / `,new` / `,status` (case-insensitive, surrounding blanks ignored).
    pub(crate) fn parse(text: &str) -> Option<Control> {
        let word = text.trim().strip_prefix(',')?.trim();
        Self::ALL
            .iter()
            .map(|(c, _)| *c)
            .find(|c| word.eq_ignore_ascii_case(c.name()))
    }
}

/// One text to deliver to a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbound {
    pub chat_id: String,
    /// The answer as Markdown-ish text; the adapter renders and splits it for its platform.
    pub text: String,
    /// Reply to this platform message id.
    pub reply_to: Option<String>,
    /// A file to send with the text (then its caption): a photo, voice note, audio or
    /// document by its type. Checked by whoever builds the value (it exists, the sender may
    /// read it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<std::path::PathBuf>,
    /// The id of a message already showing this answer as it was written (`BUB_STREAM=edits`):
    /// its text is replaced by the first part of `text`, the rest follows as new messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edit: Option<String>,
}

/// A running turn's answer as it is written, for a chat that shows it live (`BUB_STREAM=edits`):
/// the text so far and what the agent is doing. One value that the turn updates and the chat's
/// live message shows, at its own pace (a `watch` channel keeps only the newest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// The answer so far.
    pub text: String,
    /// What runs now (`running `cargo test`…`), shown under the text.
    pub status: Option<String>,
}

/// Where a turn writes its [`Live`] answer.
pub type LiveSender = tokio::sync::watch::Sender<Live>;

/// A file a chat message carries, as its adapter found it in the message's metadata
/// ([`crate::channels::Channel::files`]); the adapter downloads it by `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaFile {
    /// `photo`, `voice`, `audio`, `video`, `video_note`, `document` or `attachment`.
    pub kind: String,
    /// What the adapter downloads it by: Telegram's `file_id`, a Discord attachment's URL.
    pub source: String,
    /// The file name the sender gave it, if any.
    pub name: Option<String>,
    /// Its MIME type, if the platform said.
    pub mime: Option<String>,
    /// Its size in bytes, if the platform said.
    pub size: Option<u64>,
    /// Where in the message's metadata JSON its entry is (a JSON pointer, `/media` or
    /// `/media/attachments/0`): what Bub learns about it (saved path, transcript) is added there.
    pub pointer: String,
}

impl MediaFile {
    /// An image a vision model can look at.
    pub fn is_image(&self) -> bool {
        self.kind == "photo"
            || self
                .mime
                .as_deref()
                .is_some_and(|m| m.starts_with("image/"))
    }

    /// Speech to transcribe: a voice note or an audio file.
    pub fn is_audio(&self) -> bool {
        matches!(self.kind.as_str(), "voice" | "audio")
            || self
                .mime
                .as_deref()
                .is_some_and(|m| m.starts_with("audio/"))
    }
}
