//! What drives the agent in the background (`bub message`, `bub idle`): the session actors that
//! decide when a turn runs and deliver its answer ([`session`]; what they ask of the agent:
//! [`runner`]), the manager that runs the adapters, routes what they receive and the scheduled
//! runs to the actors and shuts everything down ([`manager`]), and scheduled jobs and the
//! heartbeat as mail for the actors ([`jobs`], [`heartbeat`]), the HTTP listener of health
//! and metrics ([`http`]), and what it tells its owner: the start line on stdout and the
//! notices of strangers asking to come in ([`owner`]).
//!
//! Layering: the daemon drives the agent's turns and sits on top of delivery and the channel
//! adapters; nothing below depends on it.

mod courier;
pub mod heartbeat;
pub mod http;
pub(crate) mod jobs;
pub(crate) mod live;
pub(crate) mod mailbox;
pub(crate) mod manager;
pub mod owner;
pub(crate) mod runner;
pub(crate) mod session;

/// The daemon's lock file in `BUB_HOME`: one `bub message` or `bub idle` per data directory,
/// the only process that writes its inbox.
pub const DAEMON_LOCK: &str = "daemon.lock";

/// One warning line for each risk to guests' file rule (`access::files::startup_warnings`),
/// and one when commands cannot be fully contained (guests then get no background commands):
/// what `bub message` and `bub idle` say at start.
pub fn warn_about_guests(settings: &crate::config::Settings) {
    for warning in crate::access::files::startup_warnings(settings) {
        tracing::warn!(%warning, "access.files");
    }
    if let Err(missing) = crate::tools::contain::support() {
        tracing::warn!(
            %missing,
            "contain.partial: a process that leaves its command's group may outlive it; guests get no background commands"
        );
    } else if settings.sandbox != crate::config::SandboxMode::Off
        && crate::tools::sandbox::available().is_available()
        && !crate::tools::sandbox::scopes_signals()
    {
        tracing::warn!(
            "contain.unscoped: this kernel's Landlock does not scope signals (Linux 6.12+), so a sandboxed command could kill its keeper and leave processes behind; guests get no background commands"
        );
    }
}

pub use heartbeat::Heartbeat;
pub use jobs::JobQueue;
pub use manager::ChannelManager;
pub use runner::{Stopped, TurnRunner};
pub use session::SessionConfig;
