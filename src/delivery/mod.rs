//! Delivery: how Bub reaches a chat, on top of the channel adapters.
//!
//! * [`PLATFORMS`] — the one place that knows the platforms and builds their adapters (for the
//!   daemon, for `bub idle`, and send-only for everything else). A third platform is one new
//!   module under `channels/` implementing [`Channel`] plus one line here.
//! * [`Outbox`] — sending to any chat outside a turn's own delivery (`message.send`, `bub send`,
//!   scheduled runs), always through the adapter and its chat allow-list.
//! * [`render_output`] — what the framework posts for a finished turn.
//! * [`send()`] — how every send reaches its adapter: a text past [`send::MAX_MESSAGES`]
//!   messages goes as its first part and a file.
//!
//! [`Outbound`] (a text for one chat) is spoken by the adapters and the journal too, so it
//! lives below them ([`crate::chat`]); it is re-exported here.

pub(crate) mod outbox;
pub(crate) mod send;

use std::sync::Arc;

use crate::access::Access;
use crate::channels::{Channel, discord, telegram};
pub use crate::chat::Outbound;
use crate::config::{ConfigError, Settings};
pub use outbox::Outbox;
pub(crate) use send::{Accepted, send, send_from};

/// Builds a platform's adapter from the settings.
pub(crate) type Build = fn(&Settings, Arc<Access>) -> anyhow::Result<Arc<dyn Channel>>;

/// A platform: its name, whether the settings enable it, and how its adapter is built.
pub(crate) struct Platform {
    pub name: &'static str,
    pub enabled: fn(&Settings) -> bool,
    pub build: Build,
}

/// Every platform Bub serves. Their names are also [`crate::access::CHANNELS`] (the access
/// rules sit below delivery and tell a chat session id from a terminal one by them); a test
/// keeps the two lists equal.
pub(crate) const PLATFORMS: &[Platform] = &[
    Platform {
        name: "telegram",
        enabled: |s| s.telegram.enabled,
        build: |s, access| Ok(Arc::new(telegram::Telegram::new(s, access)?)),
    },
    Platform {
        name: "discord",
        enabled: |s| s.discord.enabled,
        build: |s, access| Ok(Arc::new(discord::Discord::new(s, access)?)),
    },
];

/// The platform called `name`, or a configuration error naming the known ones.
pub(crate) fn platform(name: &str) -> anyhow::Result<&'static Platform> {
    PLATFORMS.iter().find(|p| p.name == name).ok_or_else(|| {
        let known: Vec<&str> = PLATFORMS.iter().map(|p| p.name).collect();
        ConfigError::new(
            "CHANNEL",
            format!("unknown channel {name:?} (use {})", known.join(" or ")),
        )
        .into()
    })
}

/// The adapters enabled in `settings` (`BUB_TELEGRAM_ENABLED`, `BUB_DISCORD_ENABLED`), possibly
/// none.
pub fn configured_channels(
    settings: &Settings,
    access: &Arc<Access>,
) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    let mut channels = Vec::new();
    for platform in PLATFORMS.iter().filter(|p| (p.enabled)(settings)) {
        let channel = (platform.build)(settings, access.clone())?;
        access.warn_at_start(channel.name());
        channels.push(channel);
    }
    Ok(channels)
}

/// The adapters enabled in `settings`. None enabled is a configuration error: the daemon would
/// have nothing to serve.
pub fn enabled_channels(
    settings: &Settings,
    access: &Arc<Access>,
) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    let channels = configured_channels(settings, access)?;
    if channels.is_empty() {
        return Err(ConfigError::new(
            "BUB_TELEGRAM_ENABLED",
            "no channel is enabled: set BUB_TELEGRAM_ENABLED=true and/or BUB_DISCORD_ENABLED=true",
        )
        .into());
    }
    Ok(channels)
}

/// What one turn produced: what delivery posts (command output, answer, error, whether the
/// agent already answered) and the loop's figures. The agent builds it; it lives here, below
/// the agent, so delivery needs nothing from above.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnResult {
    /// Output of a comma command typed by the human.
    pub immediate_output: String,
    /// The model's visible answer.
    pub assistant_output: String,
    /// Why the turn failed, if it did.
    pub error: Option<TurnError>,
    /// `,quit` was executed.
    pub exit_requested: bool,
    /// Model steps taken.
    pub steps: u32,
    /// The agent already answered the session's own chat with `message.send` during the turn:
    /// the framework does not post `assistant_output` again.
    pub answered: bool,
}

/// Why a turn failed. Its text is what the chat is told (`Error: <text>`) and what the tape
/// records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnError {
    /// No model client (no API key, say), or the model call failed after its retries.
    Model(String),
    /// The session's tape could not be opened, or could not record the prompt.
    Tape(String),
    /// The model was still calling tools when the step bound was reached.
    MaxSteps(u32),
    /// The call would pass a daily budget, so it was not made: the message for the chat.
    Budget(String),
}

impl TurnError {
    /// A tape failure: the chat is told the cause only (the full error, with the tape's path
    /// under `BUB_HOME`, goes to the log).
    pub(crate) fn tape(what: &str, e: &anyhow::Error) -> Self {
        tracing::error!(error = %format!("{e:#}"), what, "turn.tape.error");
        TurnError::Tape(format!("{what}: {}", e.root_cause()))
    }
}

impl std::fmt::Display for TurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnError::Model(e) | TurnError::Tape(e) | TurnError::Budget(e) => f.write_str(e),
            TurnError::MaxSteps(n) => write!(f, "max_steps_reached={n}"),
        }
    }
}

impl serde::Serialize for TurnError {
    /// As its text (tape events, `schedule.run` records).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What the framework posts for a finished turn: command output, the answer (unless the agent
/// answers proactively, or already sent it with `message.send`) and the error, separated by
/// blank lines. Empty = nothing to send.
pub(crate) fn render_output(result: &TurnResult, proactive_response: bool) -> String {
    let error = result.error.as_ref().map(|e| match e {
        TurnError::Budget(message) => message.clone(),
        e => format!("Error: {e}"),
    });
    let mut parts = vec![result.immediate_output.as_str()];
    if !proactive_response && !result.answered {
        parts.push(&result.assistant_output);
    }
    parts.extend(error.as_deref());
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_parts_are_joined_by_blank_lines() {
        let result = TurnResult {
            immediate_output: "cmd out\n".into(),
            assistant_output: "answer".into(),
            error: Some(TurnError::Model("boom".into())),
            ..Default::default()
        };
        assert_eq!(
            render_output(&result, false),
            "cmd out\n\nanswer\n\nError: boom"
        );
        assert_eq!(render_output(&result, true), "cmd out\n\nError: boom");
        assert_eq!(render_output(&TurnResult::default(), false), "");
    }

    #[test]
    fn every_platform_is_known_by_name() {
        for p in PLATFORMS {
            assert_eq!(platform(p.name).unwrap().name, p.name);
        }
        let names: Vec<&str> = PLATFORMS.iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            crate::access::CHANNELS,
            "access knows the same platforms"
        );
        let err = platform("matrix").err().unwrap();
        assert!(
            err.to_string().contains("unknown channel \"matrix\""),
            "{err}"
        );
    }
}
