//! What drives the agent in the background: for `bub message`, the session actors that decide
//! when a turn runs and deliver its answer ([`session`]) and the manager that runs the
//! adapters, routes what they receive to the actors and shuts everything down ([`manager`]);
//! for `bub message` and `bub idle`, scheduled jobs run as turns ([`jobs`]).
//!
//! Layering: the daemon drives the agent's turns and sits on top of delivery and the channel
//! adapters; nothing below depends on it.

pub mod jobs;
pub(crate) mod live;
pub(crate) mod mailbox;
pub(crate) mod manager;
pub(crate) mod session;

pub use manager::ChannelManager;
pub use session::{SessionConfig, TurnRunner};
