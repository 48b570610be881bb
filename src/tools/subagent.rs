//! The `subagent` tool: hands a task to a subagent — a bounded turn of its own, on a tape of
//! its own, with a subset of the caller's tools — and returns its final answer; or, with
//! `background`, returns at once and the answer comes to the caller's session later, as a new
//! turn (in the daemon).
//!
//! The turn itself is the agent's business: it hands each turn its [`Delegate`]
//! ([`crate::tools::TurnCtx::subagents`]); this module only defines the call. A subagent
//! has its caller's sender and role, never more tools than its caller ([`Policy::for_subagent`]:
//! a guest's subagent is a guest, and no subagent starts another), and its model calls count
//! against its caller's session budget.
//!
//! [`Policy::for_subagent`]: crate::access::Policy::for_subagent

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError};

/// What a subagent is asked to do.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub(crate) struct Task {
    /// self-contained (it sees nothing else)
    pub task: String,
    /// a subset of your tools
    pub tools: Option<Vec<String>>,
    /// skills to follow
    pub skills: Option<Vec<String>>,
    /// provider:model
    pub model: Option<String>,
    /// answer later, as a new message
    pub background: Option<bool>,
}

/// Runs a subagent's turn for the turn in `parent`.
#[async_trait::async_trait]
pub(crate) trait Delegate: Send + Sync {
    /// The subagent's answer; for a background one, that it started.
    async fn delegate(&self, parent: &ToolContext, task: Task) -> Result<String, ToolError>;
}

const DETAIL: &str = "Gives a self-contained task to a subagent: a fresh context of its own (it \
does not see this conversation), at most BUB_MAX_STEPS steps, your rights or fewer (`tools`: a \
subset of yours), its final answer returned here. Use it for work that would fill this \
context: searching, reading many files, trying things. With `background`: returns at once; \
when it is done its answer comes to this chat as a new message for you to pass on (`,stop` \
stops it). At most 2 run per session and BUB_MAX_SUBAGENTS per process; a subagent cannot \
start another.";

/// `subagent`.
pub(crate) fn tools() -> Vec<Tool> {
    vec![Tool::new(
        "subagent",
        "Delegate a task",
        DETAIL,
        |task: Task, ctx: ToolContext| async move {
            if task.task.trim().is_empty() {
                return Err(ToolError::invalid("`task` is empty"));
            }
            let Some(delegate) = ctx.turn.subagents.clone() else {
                return Err(ToolError::new(
                    "subagents are not available in this process",
                ));
            };
            delegate.delegate(&ctx, task).await
        },
    )]
}
