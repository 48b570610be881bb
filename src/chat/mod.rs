//! The messages of a chat, as every layer sees them: [`SessionId`] (whose conversation),
//! [`Inbound`] (one platform message from an admitted sender, typed: sender, content,
//! attachments, the quoted message), [`Control`] (the chat controls a session answers itself)
//! and [`Outbound`] (one text for a chat). They sit below the adapters (`channels`) and the
//! journal (`inbox`), which both speak them.

mod inbound;
mod session;

use serde::{Deserialize, Serialize};

pub use inbound::{
    Attachment, AttachmentKind, ChatInfo, Content, Inbound, Platform, Quoted, Sender, Sticker,
};
pub use session::SessionId;

/// A chat control: handled by the session itself, never by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
