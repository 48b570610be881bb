//! In-process tool tests: a temporary workspace and BUB_HOME with a tool context on them (the
//! built-in registry), for the tool, router, limits and web tests.

use std::path::PathBuf;

use bub::access::{Authority, Principal, Role};
use bub::config::Settings;
use bub::tools::{ToolContext, ToolError, builtin_registry};
use serde_json::Value;

use super::wait::WAIT;

/// A temporary directory holding the workspace `ws/` (created) and BUB_HOME `home/` (created
/// by whatever writes there first), and a tool context on them.
pub struct ToolEnv {
    /// The directory around both: a place outside the workspace.
    pub dir: tempfile::TempDir,
    pub ws: PathBuf,
    pub ctx: ToolContext,
}

impl ToolEnv {
    /// The context of `session` for `who`, on default settings changed by `adjust`.
    pub fn new(session: &str, who: Authority, adjust: impl FnOnce(&mut Settings)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let mut settings = Settings::with_defaults(dir.path().join("home"), ws.clone());
        adjust(&mut settings);
        let ctx = ToolContext::standalone(settings, builtin_registry(&[]), session, who).unwrap();
        Self { dir, ws, ctx }
    }

    /// Runs `tool` with `args` through the registry; fails the test after [`WAIT`].
    pub async fn call(&self, tool: &str, args: Value) -> Result<String, ToolError> {
        let run = self.ctx.registry().execute(tool, args, self.ctx.clone());
        tokio::time::timeout(WAIT, run)
            .await
            .unwrap_or_else(|_| panic!("{tool} did not return within {WAIT:?}"))
    }

    /// Runs `tool` with `args`, which must fail; returns the error text.
    pub async fn error(&self, tool: &str, args: Value) -> String {
        match self.call(tool, args).await {
            Ok(out) => panic!("{tool} succeeded: {out}"),
            Err(e) => e.to_string(),
        }
    }
}

/// A guest: Telegram user 77, neither owner nor paired.
pub fn guest() -> Authority {
    let sender = Principal {
        channel: "telegram".into(),
        id: "77".into(),
        name: None,
    };
    Authority::sender(Role::Guest, sender)
}
