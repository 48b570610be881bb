//! The tool policy of a turn: which tools it may call and within which bounds, derived from the
//! turn's role and the settings. The registry enforces it on every call (one place); tools never
//! check roles themselves.
//!
//! Owners: every tool, unconfined; their `bash` runs in the sandbox only with `BUB_SANDBOX=all`.
//! Guests: the tools of `BUB_GUEST_TOOLS` (default [`GUEST_TOOLS`]: no `bash`, no `fs.write` or
//! `fs.edit`; never [`OWNER_ONLY`]), files within the guest file rule ([`super::files`]: read
//! the workspace but not secrets, `BUB_HOME` or other chats' folders; write only their chat's
//! folder), messages only to their own chat, and a sandboxed `bash` in their chat's folder if
//! they are given one (unless `BUB_SANDBOX=off`).
//!
//! Scheduled jobs are bounded by role ([`JobLimits`]: [`OWNER_JOBS`], [`GUEST_JOBS`]), and the
//! scheduled run of a guest's job ([`TurnOrigin::Scheduled`]) cannot schedule more jobs, so a
//! guest's job never multiplies itself.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use super::Role;
use crate::config::{ConfigError, SandboxMode, Settings};
use crate::llm::ToolSpecs;

/// The tools a guest gets by default: reading the workspace, the web, their own tape, skills,
/// messages to their own chat and their own schedules.
pub(crate) const GUEST_TOOLS: &[&str] = &[
    "fs.read",
    "fs.glob",
    "fs.grep",
    "web.fetch",
    "web.search",
    "tape.info",
    "usage",
    "tape.search",
    "tape.output",
    "tape.anchors",
    "tape.handoff",
    "skills.list",
    "skills.describe",
    "memory.remember",
    "memory.forget",
    "memory.list",
    "memory.search",
    "memory.checkpoint",
    "memory.lesson",
    "message.send",
    "schedule.add",
    "schedule.list",
    "schedule.remove",
    "help",
    "tools",
    "tool.describe",
];

/// Tools a guest never gets, whatever `BUB_GUEST_TOOLS` says: `tape.reset` wipes a chat's
/// history for everyone in it (a guest wanting a fresh start has `/new`, which keeps it);
/// `model` switches the model (and so the bill) of everyone in the chat.
pub(crate) const OWNER_ONLY: &[&str] = &["tape.reset", "model"];

/// The tool a subagent may not call: subagents do not start subagents.
const SUBAGENT: &str = "subagent";

/// The tool a guest's scheduled run may not call: a job must not schedule more jobs.
const SCHEDULING: &str = "schedule.add";

/// What started a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnOrigin {
    /// Someone asked: a chat message, the terminal, `bub run`.
    Asked,
    /// A scheduled job fired (it runs with its creator's rights).
    Scheduled,
}

/// What a turn may do with scheduled jobs; the `schedule.*` tools apply them. The numbers are
/// in docs/security.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobLimits {
    /// The most jobs one session keeps that were created with this role (a guest's jobs do
    /// not use up the owner's, nor the reverse).
    pub per_session: usize,
    /// The longest message of a job, in bytes.
    pub message_bytes: usize,
    /// The shortest time between two runs of a recurring job, in seconds (interval or cron).
    pub min_interval_seconds: u64,
    /// Only jobs that the turn's own senders created may be removed.
    pub own_jobs_only: bool,
}

/// Owners: 50 jobs per chat, 4 KB messages, intervals of 1 s and more.
pub(crate) const OWNER_JOBS: JobLimits = JobLimits {
    per_session: 50,
    message_bytes: 4096,
    min_interval_seconds: 1,
    own_jobs_only: false,
};

/// Guests: 5 jobs created by guests per chat, 1 KB messages, at most every 5 minutes, and they
/// remove only the jobs they created.
pub(crate) const GUEST_JOBS: JobLimits = JobLimits {
    per_session: 5,
    message_bytes: 1024,
    min_interval_seconds: 300,
    own_jobs_only: true,
};

/// What one turn may do. A process builds one per role and origin and shares it with every
/// turn.
#[derive(Debug, Clone)]
pub struct Policy {
    pub role: Role,
    /// What started the turns of this policy.
    origin: TurnOrigin,
    /// The allowed tools by command name; `None` = all.
    tools: Option<BTreeSet<String>>,
    /// Allowed name prefixes, from `BUB_GUEST_TOOLS` entries such as `mcp.notes.*`
    /// (`mcp.notes.`).
    prefixes: Vec<String>,
    /// Tools refused whatever the lists say (a subagent's: `subagent`).
    without: BTreeSet<String>,
    /// `bash` runs in the Landlock sandbox.
    pub sandbox: bool,
    /// The OpenAI tool specs this policy offers, built by the process's registry on first use.
    specs: OnceLock<ToolSpecs>,
}

impl Policy {
    /// The policy of a turn someone asked for with `role`.
    pub fn for_role(role: Role, settings: &Settings) -> Self {
        Self::for_turn(role, TurnOrigin::Asked, settings)
    }

    /// The policy of a turn run with `role`, started by `origin`: a guest's scheduled run gets
    /// the guest's tools without [`SCHEDULING`].
    pub(crate) fn for_turn(role: Role, origin: TurnOrigin, settings: &Settings) -> Self {
        let sandbox = match settings.sandbox {
            SandboxMode::All => true,
            SandboxMode::Guests => role == Role::Guest,
            SandboxMode::Off => false,
        };
        let tools = (role == Role::Guest).then(|| {
            let names: Vec<&str> = match &settings.guest_tools {
                Some(list) => list.iter().map(String::as_str).collect(),
                None => GUEST_TOOLS.to_vec(),
            };
            let mut tools: BTreeSet<String> = names
                .into_iter()
                .map(command_name)
                .filter(|name| !OWNER_ONLY.contains(&name.as_str()))
                .collect();
            if origin == TurnOrigin::Scheduled {
                tools.remove(SCHEDULING);
            }
            if tools.iter().any(|t| t.starts_with(MCP)) {
                tools.insert(MCP_CALL.to_owned());
            }
            if tools.contains("bash") {
                // A guest given a shell may also run it in the background (their session's).
                tools.extend(["bash.output", "bash.kill"].map(str::to_owned));
            }
            tools
        });
        let prefixes = tools
            .iter()
            .flatten()
            .filter_map(|t| t.strip_suffix('*').filter(|p| p.ends_with('.')))
            .map(str::to_owned)
            .collect();
        Self {
            role,
            origin,
            tools,
            prefixes,
            without: BTreeSet::new(),
            sandbox,
            specs: OnceLock::new(),
        }
    }

    /// The tool specs of the allowed tools, built by `build` once per policy (a policy belongs
    /// to one process, so to one registry).
    pub(crate) fn specs(&self, build: impl FnOnce() -> ToolSpecs) -> ToolSpecs {
        self.specs.get_or_init(build).clone()
    }

    /// The policy of a subagent this turn starts: the same role and bounds, only `tools` when
    /// given (those this policy allows; an MCP tool brings `mcp.call`), and never `subagent`
    /// (depth 1).
    pub(crate) fn for_subagent(&self, tools: Option<&[String]>) -> Self {
        let mut child = Self {
            specs: OnceLock::new(),
            ..self.clone()
        };
        if let Some(tools) = tools {
            let mut kept: BTreeSet<String> = tools
                .iter()
                .map(|t| command_name(t))
                .filter(|t| self.allows(t))
                .collect();
            if kept.iter().any(|t| t.starts_with(MCP)) && self.allows(MCP_CALL) {
                kept.insert(MCP_CALL.to_owned());
            }
            child.tools = Some(kept);
            child.prefixes.clear();
        }
        child.without.insert(SUBAGENT.to_owned());
        child
    }

    /// The tool (by command name) may be called.
    pub(crate) fn allows(&self, tool: &str) -> bool {
        !self.without.contains(tool)
            && (self.tools.as_ref().is_none_or(|t| t.contains(tool))
                || self.prefixes.iter().any(|p| tool.starts_with(p.as_str())))
    }

    /// File paths must stay inside the workspace.
    pub(crate) fn confines_files(&self) -> bool {
        self.role == Role::Guest
    }

    /// Messages may only go to the session's own chat.
    pub(crate) fn own_chat_only(&self) -> bool {
        self.role == Role::Guest
    }

    /// What `tape.search` covers: guests search the conversation only, never tool results
    /// (in a shared chat those may be the output of an owner's commands).
    pub(crate) fn searched(&self) -> crate::tape::Searched {
        match self.role {
            Role::Owner => crate::tape::Searched::Everything,
            Role::Guest => crate::tape::Searched::Conversation,
        }
    }

    /// What the turn may do with scheduled jobs.
    pub(crate) fn jobs(&self) -> JobLimits {
        match self.role {
            Role::Owner => OWNER_JOBS,
            Role::Guest => GUEST_JOBS,
        }
    }

    /// The error a refused call returns.
    pub(crate) fn refusal(&self, tool: &str) -> String {
        if tool == SCHEDULING && self.origin == TurnOrigin::Scheduled {
            return format!(
                "`{tool}` is not allowed in the scheduled run of a {}'s job (a job cannot \
                 schedule more jobs)",
                self.role
            );
        }
        format!("`{tool}` is not allowed for {}s in this chat", self.role)
    }

    /// The allowed tools among `all` (command names), for `bub access explain`.
    pub(crate) fn allowed<'a>(&self, all: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        all.into_iter().filter(|t| self.allows(t)).collect()
    }
}

/// The prefix of MCP tool names, and the function the model calls them through.
const MCP: &str = "mcp.";
const MCP_CALL: &str = "mcp.call";

/// `fs_read` / `FS.Read` → `fs.read` (the command names have no `_`); an MCP tool's name
/// (`mcp.github.list_issues`) is the server's and is kept as it is.
fn command_name(name: &str) -> String {
    let name = name.trim();
    match name.starts_with(MCP) {
        true => name.to_owned(),
        false => name.to_lowercase().replace('_', "."),
    }
}

/// `BUB_GUEST_TOOLS` names tools that exist (`known`: the registry's command names).
pub fn check_guest_tools<'a>(
    settings: &Settings,
    known: impl IntoIterator<Item = &'a str> + Clone,
) -> Result<(), ConfigError> {
    let Some(list) = &settings.guest_tools else {
        return Ok(());
    };
    for name in list {
        let wanted = command_name(name);
        if OWNER_ONLY.contains(&wanted.as_str()) {
            return Err(ConfigError::new(
                "BUB_GUEST_TOOLS",
                format!("{name:?} is for owners only (it changes what everyone in a chat sees)"),
            ));
        }
        if let Some(rest) = wanted.strip_prefix(MCP) {
            let server = rest.split('.').next().unwrap_or_default();
            if !settings.mcp_servers.entries.contains_key(server) {
                return Err(ConfigError::new(
                    "BUB_GUEST_TOOLS",
                    format!("{name:?}: no MCP server named {server:?} in mcp.json"),
                ));
            }
            continue;
        }
        let matches = |k: &str| match wanted.strip_suffix('*') {
            Some(prefix) => prefix.ends_with('.') && k.starts_with(prefix),
            None => k == wanted,
        };
        if !known.clone().into_iter().any(matches) {
            let all: Vec<&str> = known.into_iter().collect();
            return Err(ConfigError::new(
                "BUB_GUEST_TOOLS",
                format!("unknown tool {name:?} (known: {})", all.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(f: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = Settings::with_defaults("/h".into(), "/w".into());
        f(&mut s);
        s
    }

    #[test]
    fn owners_get_everything_guests_the_guest_set() {
        let s = settings(|_| {});
        let owner = Policy::for_role(Role::Owner, &s);
        assert!(owner.allows("bash") && owner.allows("fs.write"));
        assert!(!owner.sandbox && !owner.confines_files() && !owner.own_chat_only());
        let guest = Policy::for_role(Role::Guest, &s);
        for denied in ["bash", "fs.write", "fs.edit", "quit", "tape.reset"] {
            assert!(!guest.allows(denied), "{denied}");
        }
        for allowed in ["fs.read", "web.fetch", "tape.search", "message.send"] {
            assert!(guest.allows(allowed), "{allowed}");
        }
        assert!(guest.sandbox && guest.confines_files() && guest.own_chat_only());
        assert_eq!(
            guest.refusal("bash"),
            "`bash` is not allowed for guests in this chat"
        );
    }

    #[test]
    fn a_guest_s_scheduled_run_cannot_schedule_and_jobs_are_bounded_by_role() {
        let s = settings(|_| {});
        let run = Policy::for_turn(Role::Guest, TurnOrigin::Scheduled, &s);
        assert!(!run.allows("schedule.add"));
        assert!(run.allows("schedule.list") && run.allows("schedule.remove"));
        assert_eq!(
            run.refusal("schedule.add"),
            "`schedule.add` is not allowed in the scheduled run of a guest's job (a job cannot \
             schedule more jobs)"
        );
        assert!(Policy::for_role(Role::Guest, &s).allows("schedule.add"));
        let owner = Policy::for_turn(Role::Owner, TurnOrigin::Scheduled, &s);
        assert!(
            owner.allows("schedule.add"),
            "owners' jobs keep today's rules"
        );
        assert_eq!(owner.jobs(), OWNER_JOBS);
        assert_eq!(run.jobs(), GUEST_JOBS);
        let (g, o) = (GUEST_JOBS, OWNER_JOBS);
        assert!(g.per_session < o.per_session && g.message_bytes < o.message_bytes);
        assert!(g.min_interval_seconds >= 300 && g.own_jobs_only && !o.own_jobs_only);
    }

    #[test]
    fn guest_tools_and_sandbox_mode_override_the_defaults() {
        let s = settings(|s| {
            s.guest_tools = Some(vec!["BASH".into(), "fs_read".into()]);
            s.sandbox = SandboxMode::Off;
        });
        let guest = Policy::for_role(Role::Guest, &s);
        assert!(guest.allows("bash") && guest.allows("fs.read"));
        assert!(!guest.allows("web.fetch"));
        assert!(!guest.sandbox);
        let s = settings(|s| s.sandbox = SandboxMode::All);
        assert!(Policy::for_role(Role::Owner, &s).sandbox);
        let s = settings(|s| s.guest_tools = Some(Vec::new()));
        assert!(!Policy::for_role(Role::Guest, &s).allows("fs.read"));
    }

    #[test]
    fn unknown_guest_tools_are_a_configuration_error() {
        let known = ["bash", "fs.read"];
        let s = settings(|s| s.guest_tools = Some(vec!["fs_read".into()]));
        assert!(check_guest_tools(&s, known).is_ok());
        let s = settings(|s| s.guest_tools = Some(vec!["tape_reset".into()]));
        let err = check_guest_tools(&s, ["tape.reset"]).unwrap_err();
        assert!(err.message.contains("owners only"), "{err}");
        assert!(!Policy::for_role(Role::Guest, &s).allows("tape.reset"));
        // Switching the model changes it (and the bill) for everyone in the chat.
        let s = settings(|s| s.guest_tools = Some(vec!["model".into()]));
        assert!(check_guest_tools(&s, ["model"]).is_err());
        assert!(!Policy::for_role(Role::Guest, &s).allows("model"));
        let s = settings(|s| s.guest_tools = Some(vec!["rm".into()]));
        let err = check_guest_tools(&s, known).unwrap_err();
        assert_eq!(err.var, "BUB_GUEST_TOOLS");
        assert!(err.message.contains("\"rm\""), "{err}");
    }

    #[test]
    fn guests_get_the_mcp_tools_listed_by_name_or_server_and_no_other() {
        let mut s = settings(|s| {
            s.guest_tools = Some(vec!["fs.read".into(), "mcp.notes.*".into()]);
        });
        s.mcp_servers = crate::config::mcp::Servers::parse(
            r#"{"mcpServers": {"notes": {"command": "n"}, "github": {"url": "http://x/mcp"}}}"#,
        )
        .unwrap();
        let guest = Policy::for_role(Role::Guest, &s);
        assert!(guest.allows("mcp.call"), "the function of every MCP tool");
        assert!(
            guest.allows("mcp.notes.search_notes"),
            "names kept as they are"
        );
        assert!(!guest.allows("mcp.github.create_issue"));
        assert!(!Policy::for_role(Role::Guest, &settings(|_| {})).allows("mcp.call"));
        assert!(Policy::for_role(Role::Owner, &s).allows("mcp.github.create_issue"));
        assert!(check_guest_tools(&s, ["fs.read"]).is_ok());
        s.guest_tools = Some(vec!["mcp.jira.*".into()]);
        let err = check_guest_tools(&s, ["fs.read"]).unwrap_err();
        assert!(
            err.message.contains("no MCP server named \"jira\""),
            "{err}"
        );
        s.guest_tools = Some(vec!["fs.*".into()]);
        assert!(check_guest_tools(&s, ["fs.read"]).is_ok());
        assert!(Policy::for_role(Role::Guest, &s).allows("fs.write"));
    }
}
