//! Logging setup: `tracing` to stderr (or to a file for the interactive chat), text or JSON,
//! level from `BUB_LOG_LEVEL` (`info` when not set). Message contents and secrets are never
//! logged by Bub itself.

use std::io::IsTerminal;
use std::path::Path;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, Settings};

/// Where log lines go.
pub enum LogTarget<'a> {
    Stderr,
    /// Appends to this file (used by `bub chat`, so logs don't mix with the conversation).
    File(&'a Path),
}

/// Installs the global subscriber once; later calls are ignored.
pub fn init(settings: &Settings, target: LogTarget<'_>) {
    // Dependencies (hyper, reqwest, rustyline) stay at warn unless asked for explicitly; rmcp
    // is silent (Bub logs what an MCP server did itself, shorter: `mcp.server.*`).
    let level = settings.log_level.as_deref().unwrap_or("info");
    let filter = EnvFilter::try_new(format!("warn,rmcp=off,bub={level}"))
        .unwrap_or_else(|_| EnvFilter::new("warn,bub=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let result = match (target, settings.log_format) {
        (LogTarget::Stderr, LogFormat::Text) => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .try_init(),
        (LogTarget::Stderr, LogFormat::Json) => {
            builder.json().with_writer(std::io::stderr).try_init()
        }
        (LogTarget::File(path), format) => {
            if let Some(dir) = path.parent() {
                let _ = crate::storage::create_private_dir(dir);
            }
            match crate::storage::private_file()
                .create(true)
                .append(true)
                .open(path)
            {
                Ok(file) => {
                    let builder = builder
                        .with_ansi(false)
                        .with_writer(std::sync::Mutex::new(file));
                    match format {
                        LogFormat::Text => builder.try_init(),
                        LogFormat::Json => builder.json().try_init(),
                    }
                }
                Err(_) => builder.with_writer(std::io::sink).try_init(),
            }
        }
    };
    let _ = result;
}
