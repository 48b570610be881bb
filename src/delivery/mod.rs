//! Delivery: how Bub reaches a chat, on top of the channel adapters.
//!
//! * [`PLATFORMS`] — the one place that knows the platforms and builds their adapters (for the
//!   daemon, for `bub idle`, and send-only for everything else). A third platform is one new
//!   module under `channels/` implementing [`Channel`] plus one line here; the builders of
//!   what `bub message` serves ([`served_channels`]) and what `bub idle` sends through
//!   ([`send_only_channels`]) take the list.
//! * [`Outbox`] — sending to any chat outside a turn's own delivery (`message.send`, `bub send`,
//!   scheduled runs), always through the adapter and its chat allow-list; [`SendLedger`] records
//!   a turn's sends in the inbox, so a turn run again after a restart does not repeat them.
//! * [`render_output`] — what the framework posts for a finished turn.
//! * [`send()`] — how every send reaches its adapter: the one decision of the parts a text is
//!   sent as (split at the channel's limit, the file with the right part, the reply on the
//!   first; past [`send::MAX_MESSAGES`] messages its first part and a file), each sent with
//!   [`Channel::send_part`].
//!
//! [`Outbound`] (a text for one chat) is spoken by the adapters and the journal too, so it
//! lives below them ([`crate::chat`]); it is re-exported here.

pub(crate) mod ledger;
pub mod once;
pub(crate) mod outbox;
pub(crate) mod send;

use std::sync::Arc;

use crate::access::Access;
use crate::channels::Channel;
pub use crate::chat::Outbound;
use crate::config::{ConfigError, Field, Settings, var_name};
pub use ledger::{SendLedger, Sent};
pub use outbox::Outbox;
pub(crate) use send::{Accepted, send_from};
pub use send::{edit_live, post_live, send};

/// Builds a platform's adapter from the settings; its messages are admitted by the access's
/// gate ([`crate::access::Gate`]).
pub type Build = fn(&Settings, Arc<Access>) -> anyhow::Result<Arc<dyn Channel>>;

/// A platform: its name (the session prefix, and its entry in the settings' channel table,
/// whose `enabled` turns it on) and how its adapter is built.
#[derive(Clone, Copy)]
pub struct Platform {
    pub name: &'static str,
    pub build: Build,
}

impl Platform {
    pub const fn new(name: &'static str, build: Build) -> Self {
        Self { name, build }
    }

    /// `BUB_<NAME>_ENABLED`: the settings turn the platform on.
    pub(crate) fn enabled(&self, settings: &Settings) -> bool {
        settings.channels.get(self.name).is_some_and(|c| c.enabled)
    }
}

/// Every platform Bub serves: the one line a platform adds (see ARCHITECTURE.md, "Adding a
/// platform"). The daemon and `bub idle` are given this list; the settings, the access rules and
/// the gate need nothing per platform.
/// A platform whose cargo feature this build lacks is not in the list.
pub const PLATFORMS: &[Platform] = &[
    #[cfg(feature = "telegram")]
    Platform::new("telegram", |s, a| {
        Ok(Arc::new(crate::channels::telegram::Telegram::new(s, a)?))
    }),
    #[cfg(feature = "discord")]
    Platform::new("discord", |s, a| {
        Ok(Arc::new(crate::channels::discord::Discord::new(s, a)?))
    }),
];

/// The platform called `name`, or a configuration error naming the known ones (or the feature
/// this build lacks, for a platform Bub has but this build does not).
pub(crate) fn platform(name: &str) -> anyhow::Result<&'static Platform> {
    PLATFORMS.iter().find(|p| p.name == name).ok_or_else(|| {
        match crate::config::is_platform(name) {
            true => not_built(name, "CHANNEL"),
            false => ConfigError::new(
                "CHANNEL",
                format!("unknown channel {name:?} (use {})", platform_names()),
            ),
        }
        .into()
    })
}

/// The error for platform `name`, set by `var`, in a build without its cargo feature.
fn not_built(name: &str, var: &str) -> ConfigError {
    ConfigError::new(
        var,
        format!(
            "this build of Bub has no {name} channel (built without the `{name}` feature; \
             install with `--features {name}`)"
        ),
    )
}

/// `telegram or discord`, for messages.
pub(crate) fn platform_names() -> String {
    let known: Vec<&str> = PLATFORMS.iter().map(|p| p.name).collect();
    known.join(" or ")
}

/// The adapters `bub idle` sends through (a job's answer to its chat; nothing is received):
/// those of `platforms` (normally [`PLATFORMS`]) enabled in `settings`
/// (`BUB_TELEGRAM_ENABLED`, `BUB_DISCORD_ENABLED`), possibly none, each with its start-up
/// warnings. A platform enabled there but not in `platforms` (its feature not built) is a
/// configuration error naming its `BUB_<NAME>_ENABLED`.
pub fn send_only_channels(
    platforms: &[Platform],
    settings: &Settings,
    access: &Arc<Access>,
) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    let built = |name: &str| platforms.iter().any(|p| p.name == name);
    if let Some((name, _)) = settings
        .channels
        .iter()
        .find(|(n, c)| c.enabled && !built(n))
    {
        let var = var_name(name, Field::Enabled).unwrap_or("CHANNEL");
        return Err(not_built(name, var).into());
    }
    let mut channels = Vec::new();
    for platform in platforms.iter().filter(|p| p.enabled(settings)) {
        let channel = (platform.build)(settings, access.clone())?;
        access.warn_at_start(channel.name());
        channels.push(channel);
    }
    Ok(channels)
}

/// The adapters `bub message` serves (receives from and answers through): those of
/// `platforms` enabled in `settings`. None enabled is a configuration error: the daemon would
/// have nothing to serve.
pub fn served_channels(
    platforms: &[Platform],
    settings: &Settings,
    access: &Arc<Access>,
) -> anyhow::Result<Vec<Arc<dyn Channel>>> {
    let channels = send_only_channels(platforms, settings, access)?;
    if channels.is_empty() {
        let vars: Vec<&str> = platforms
            .iter()
            .filter_map(|p| var_name(p.name, Field::Enabled))
            .collect();
        let sets: Vec<String> = vars.iter().map(|v| format!("{v}=true")).collect();
        return Err(ConfigError::new(
            vars.first().copied().unwrap_or("CHANNEL"),
            format!("no channel is enabled: set {}", sets.join(" and/or ")),
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
    /// What the chat is told, as the turn's `render_outbound` stage rendered it (empty: nothing
    /// to send).
    pub replies: Vec<Reply>,
}

/// One message a turn sends to its chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
}

impl TurnResult {
    /// The replies as one message (blank lines between them); empty: nothing to send.
    pub(crate) fn reply_text(&self) -> String {
        let texts: Vec<&str> = self.replies.iter().map(|r| r.text.as_str()).collect();
        texts.join("\n\n")
    }
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
    /// Tool calls kept returning the same result (the stagnation guard): the message for the
    /// chat, naming what was repeated.
    Stagnant(String),
}

impl TurnError {
    /// The kind, as metrics name it.
    pub fn kind(&self) -> &'static str {
        match self {
            TurnError::Model(_) => "model",
            TurnError::Tape(_) => "tape",
            TurnError::MaxSteps(_) => "max_steps",
            TurnError::Budget(_) => "budget",
            TurnError::Stagnant(_) => "stagnant",
        }
    }

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
            TurnError::Model(e)
            | TurnError::Tape(e)
            | TurnError::Budget(e)
            | TurnError::Stagnant(e) => f.write_str(e),
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
        TurnError::Budget(message) | TurnError::Stagnant(message) => message.clone(),
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
            assert!(
                crate::chat::SessionId::chat_of(p.name, "1")
                    .chat()
                    .is_some(),
                "{}: its sessions are chats (it has variables)",
                p.name
            );
        }
        let every_feature = cfg!(all(feature = "telegram", feature = "discord"));
        for name in crate::config::platforms() {
            if let Err(e) = platform(name) {
                assert!(!every_feature, "{name} has variables but no platform");
                assert!(e.to_string().contains(&format!("`{name}` feature")), "{e}");
            }
        }
        if every_feature {
            assert_eq!(platform_names(), "telegram or discord");
        }
        let err = platform("matrix").err().unwrap();
        assert!(
            err.to_string().contains("unknown channel \"matrix\""),
            "{err}"
        );
    }

    #[test]
    fn an_enabled_platform_this_build_lacks_is_a_configuration_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_defaults(dir.path().into(), dir.path().into());
        settings.channels.get_mut("discord").enabled = true;
        let access = Arc::new(Access::new(&settings));
        // A build without `discord`: the platform table lacks it.
        let err = served_channels(&[], &settings, &access).err().unwrap();
        let err = err.downcast::<ConfigError>().unwrap();
        assert_eq!(err.var, "BUB_DISCORD_ENABLED");
        assert!(err.message.contains("`discord` feature"), "{}", err.message);
        assert!(send_only_channels(&[], &settings, &access).is_err());
    }
}
