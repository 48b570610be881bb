//! Tools: everything the agent can do, callable by the model (function calling) and by humans
//! (comma commands). [`registry`] holds them; the other files are the built-in tools by domain.

pub mod contain;
pub(crate) mod context;
pub mod expansion;
pub mod fs;
pub(crate) mod mcp;
pub(crate) mod memory;
pub(crate) mod message;
pub(crate) mod meta;
pub(crate) mod model;
pub(crate) mod registry;
pub mod sandbox;
pub(crate) mod schedule;
pub mod shell;
pub(crate) mod skills;
pub(crate) mod subagent;
pub(crate) mod tape;
pub mod web;

pub use context::{
    ProcessCtx, SessionCtx, ToolContext, ToolEvent, ToolObserver, TurnCtx, TurnOutput,
};
pub use registry::{Registry, Tool, ToolError, ToolFuture};

/// The command names of every built-in tool.
pub fn builtin_names() -> Vec<String> {
    builtin_registry(&[])
        .tools()
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

/// Builds the registry of built-in tools, restricted to `allowed` when non-empty
/// (names match the command name `fs.read` or the model name `fs_read`, case-insensitively).
pub fn builtin_registry(allowed: &[String]) -> Registry {
    let mut tools = Vec::new();
    tools.extend(shell::tools());
    tools.extend(fs::tools());
    tools.extend(tape::tools());
    tools.extend(schedule::tools());
    tools.extend(skills::tools());
    tools.extend(message::tools());
    tools.extend(memory::tools());
    tools.extend(web::tools());
    tools.extend(meta::tools());
    tools.extend(model::tools());
    tools.extend(subagent::tools());
    Registry::new(tools, allowed)
}
