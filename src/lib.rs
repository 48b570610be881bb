//! Bub: a tape-first, multi-channel AI agent.
//!
//! The binary (`src/main.rs`) is a thin CLI over this library; ARCHITECTURE.md is the map of
//! its modules. Items are private by default, and `unreachable_pub` keeps a `pub` that nothing
//! outside its module tree can reach from passing for an API: the compiler then reports what
//! nothing uses.
#![warn(unreachable_pub)]
// A build without any chat platform (`--no-default-features`: `bub chat`, `bub run`) keeps what
// the platforms share — rendering, the webhook route, the inbox's cursors — unused.
#![cfg_attr(
    not(any(feature = "telegram", feature = "discord")),
    allow(dead_code, unused_imports)
)]

pub mod access;
pub mod agent;
pub mod channels;
pub(crate) mod chat;
pub mod cli;
pub mod config;
#[cfg(feature = "console")]
pub mod console;
pub mod daemon;
#[cfg(feature = "postgres")]
pub mod db;
#[cfg(not(feature = "postgres"))]
#[path = "db/absent.rs"]
pub mod db;
pub mod delivery;
pub(crate) mod document;
pub mod heap;
pub mod inbox;
pub mod llm;
pub mod logging;
pub(crate) mod media;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod redact;
pub mod scheduler;
pub mod skills;
pub mod status;
pub mod storage;
pub mod tape;
pub mod terminal;
pub(crate) mod time;
pub mod tools;
pub mod usage;

/// Idle keep-alive connections each HTTP client keeps per host. A burst of concurrent turns may
/// open hundreds of connections; keeping them all would pin their buffers in memory long after
/// the burst, so only some stay warm, and only for [`HTTP_IDLE_TIMEOUT`].
pub(crate) const HTTP_IDLE_CONNECTIONS: usize = 64;

/// How long an idle keep-alive connection stays open: well below the session idle TTL, so by
/// the time sessions are evicted (and the heap trimmed) their connections are gone too.
pub const HTTP_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether the URL's host is this machine (`localhost`, 127.0.0.0/8, `::1`): such requests never
/// go through a proxy from the environment.
pub(crate) fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
