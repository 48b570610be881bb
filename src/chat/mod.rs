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
    /// Every control with its description (the first rows of [`CHAT_COMMANDS`]).
    pub(crate) const ALL: [(Control, &'static str); 4] = [
        (Control::Stop, "Stop the running turn"),
        (Control::New, "Start a fresh context"),
        (Control::Status, "Show the session's state"),
        (Control::Usage, "Show this chat's token usage and cost"),
    ];

    /// The command word (`stop`).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Control::Stop => "stop",
            Control::New => "new",
            Control::Status => "status",
            Control::Usage => "usage",
        }
    }

    /// `,stop` / `,new` / `,status` (case-insensitive, surrounding blanks ignored).
    pub(crate) fn parse(text: &str) -> Option<Control> {
        Self::named(text.trim().strip_prefix(',')?.trim())
    }

    /// The control called `word` (`stop`, `STOP`), as a slash command names it.
    pub(crate) fn named(word: &str) -> Option<Control> {
        Self::ALL
            .iter()
            .map(|(c, _)| *c)
            .find(|c| word.eq_ignore_ascii_case(c.name()))
    }
}

/// The chat commands a person types in any chat — Telegram's command menu (`setMyCommands`),
/// `,help`, the terminal's `/` forms: the controls, then `model` (the `model` tool as a
/// command). Each is written `,name` or `/name`.
pub(crate) const CHAT_COMMANDS: [(&str, &str); 5] = [
    (Control::ALL[0].0.name(), Control::ALL[0].1),
    (Control::ALL[1].0.name(), Control::ALL[1].1),
    (Control::ALL[2].0.name(), Control::ALL[2].1),
    (Control::ALL[3].0.name(), Control::ALL[3].1),
    ("model", "Show or switch this chat's model"),
];

/// A chat command typed with a slash, as Telegram's menu offers it (`/stop`, `/model
/// openai:gpt-4o`, case-insensitive), as the content it stands for (the control, the comma
/// command `,model openai:gpt-4o`); `None` for any other text (`/usr/bin is full`, `/help`).
pub(crate) fn slash_command(text: &str) -> Option<Content> {
    let after = text.trim().strip_prefix('/')?;
    let (word, rest) = after.split_once(char::is_whitespace).unwrap_or((after, ""));
    let rest = rest.trim();
    // Only `model` takes an argument: `/stop now` is a sentence, not the control.
    match Control::named(word) {
        Some(control) => rest.is_empty().then_some(Content::Control(control)),
        None => word
            .eq_ignore_ascii_case("model")
            .then(|| Content::model(rest)),
    }
}

/// A chat on its platform, by the id the platform gave it (a Telegram chat id or `@channel`,
/// a Discord channel id): what an adapter sends to. Each adapter reads it into its platform's
/// type in one place.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChatId(pub String);

/// A message on its platform, by its id: what an answer replies to and a live answer edits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageId(pub String);

impl From<&str> for ChatId {
    fn from(id: &str) -> Self {
        Self(id.to_owned())
    }
}

/// One text to deliver to a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbound {
    pub chat_id: String,
    /// The answer as Markdown-ish text: delivery splits it at the platform's limit, the adapter
    /// renders each part.
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

#[cfg(test)]
mod tests {
    use super::{Content, Control, slash_command};

    #[test]
    fn slash_forms_of_the_chat_commands() {
        let control = |c| Some(Content::Control(c));
        assert_eq!(slash_command("/stop"), control(Control::Stop));
        assert_eq!(slash_command(" /STATUS "), control(Control::Status));
        assert_eq!(slash_command("/usage"), control(Control::Usage));
        assert_eq!(slash_command("/new"), control(Control::New));
        assert_eq!(
            slash_command("/model"),
            Some(Content::Command(",model".into()))
        );
        assert_eq!(
            slash_command("/model  openai:gpt-4o "),
            Some(Content::Command(",model openai:gpt-4o".into()))
        );
        for text in [
            "/usr/bin is full",
            "/help",
            "/stop now",
            "stop",
            ",stop",
            "/",
        ] {
            assert_eq!(slash_command(text), None, "{text}");
        }
    }
}
