//! [`TurnInput`]: what a turn is asked — text a person typed (`bub run`, `bub chat`, a
//! scheduled job's prompt), a chat's comma command, or a chat's batch of messages
//! ([`ChatBatch`]), or a subagent's task. Text and commands are routed (a comma command runs,
//! anything else goes to the model); a batch goes to the model as the prompt
//! [`super::inbound::render`] makes of it — a message's own lines never become comma commands —
//! and a task as it is.

use std::sync::Arc;

use crate::channels::{Channel, Inbound};

/// What one turn is asked (see the module docs).
#[derive(Debug)]
pub enum TurnInput {
    /// Text typed by a person or scheduled: a comma command, or words for the model.
    Text(String),
    /// A chat's comma command (`,help`).
    Command(String),
    /// A chat's messages, answered together.
    Chat(ChatBatch),
    /// A subagent's task: the model's prompt as it is (never a command).
    Task(String),
}

impl TurnInput {
    /// Plain text (`bub run`, `bub chat`, a scheduled job).
    pub fn text(text: impl Into<String>) -> Self {
        TurnInput::Text(text.into())
    }
}

/// The messages of a chat that one turn answers, in the order they arrived, and the adapter of
/// their chat (their files are downloaded through it).
pub struct ChatBatch {
    pub adapter: Arc<dyn Channel>,
    pub messages: Vec<Inbound>,
    /// A restart interrupted the turn that answered them before: the prompt says so.
    pub interrupted: bool,
    /// How many older messages of the batch were left out of the prompt (recorded on the tape
    /// as `messages.left_out`): the prompt says so.
    pub left_out: usize,
}

impl std::fmt::Debug for ChatBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatBatch")
            .field("channel", &self.adapter.name())
            .field("messages", &self.messages)
            .field("interrupted", &self.interrupted)
            .field("left_out", &self.left_out)
            .finish()
    }
}
