//! What the model is told besides the conversation: the system prompt (base prompt, workspace
//! `AGENTS.md`, the skills list, the runtime contract, the memory block), and the notes a
//! turn's prompt carries (the time, the details `$hints` asked for).
//!
//! The system prompt is rebuilt every model step, so edits to `AGENTS.md` take effect at once,
//! but it holds nothing that changes with the clock or per turn: the time and the details go
//! into the conversation, after everything a provider's prompt cache already holds.

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::access::{Policy, Role};
use crate::skills::Discovery;
use crate::tools::Registry;
use crate::tools::expansion::Expanded;

/// A skill body longer than this is cut in the prompt (the rest via `skills.describe`).
const MAX_SKILL_BODY_CHARS: usize = 8_000;

static HINT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$([A-Za-z0-9_.-]+)").expect("hint regex"));

/// The fixed contract every model step sees.
const RUNTIME_CONTRACT: &str = "<runtime_contract>
1. Perform actions with tool calls: files, shell, tape, and any other tool you are given.
2. Do not write comma commands (`,cmd`) in normal replies; they are only a compatibility fallback.
3. Never write `<command ...>` blocks yourself; they are produced by the runtime.
4. When you have gathered enough evidence, answer in plain natural language.
5. Mention `$name` (a tool or skill name) to see its full details in the next step.
6. A user message may begin with the current time in brackets; it is not part of what they wrote.
</runtime_contract>
<context_contract>
Your context is the tape since its last anchor. If it grows long or calls fail because the
context is too large, call `tape.handoff` with a short `summary` and `next_steps`: the summary
is carried forward and older entries leave the context.
</context_contract>
<autonomy_contract>
For anything later than now, use `schedule.add` (never `sleep`): the job runs as a turn in this
session and your answer reaches this chat. To resume long work after the machine or container
restarts, write the steps to a file and an executable `startup.sh` in the workspace root that
continues them (e.g. `bub run \"Resume the task in NOTES.md\"`); the container runs it at start,
with the scheduler alongside.
</autonomy_contract>";

/// Names referenced as `$name` in `text` (trailing dots and dashes dropped, so `$fs.read.` at
/// the end of a sentence still matches `fs.read`).
pub(crate) fn hints(text: &str) -> Vec<String> {
    HINT.captures_iter(text)
        .map(|c| c[1].trim_end_matches(['.', '-']).to_string())
        .filter(|h| !h.is_empty())
        .collect()
}

/// Expands the tools and skills named by `$hints` in `text`.
pub fn activate_hints(
    text: &str,
    registry: &Registry,
    skills: &Discovery,
    expanded: &mut Expanded,
) {
    for hint in hints(text) {
        if let Some(tool) = registry.get(&hint) {
            expanded.tool(&tool.name);
        }
        if let Some(skill) = skills.get(&hint) {
            expanded.skill(skill.name());
        }
    }
}

/// The details of the tools and skills `$hints` asked for (`tools`, `skills`: names), one
/// block each, as notes for the prompt after the hint — only the tools `policy` allows.
pub fn details(
    registry: &Registry,
    found: &Discovery,
    policy: &Policy,
    tools: &[String],
    skills: &[String],
) -> Vec<String> {
    let mut out = Vec::new();
    for tool in tools
        .iter()
        .filter_map(|name| registry.get(name))
        .filter(|t| policy.allows(&t.name))
    {
        out.push(format!(
            "<tool name=\"{}\" command=\"{}\">\n{}\n{}\n</tool>",
            tool.model_name(),
            tool.name,
            tool.description,
            tool.detail,
        ));
    }
    for skill in skills.iter().filter_map(|name| found.get(name)) {
        let body = &skill.file.body;
        let cut = body
            .char_indices()
            .nth(MAX_SKILL_BODY_CHARS)
            .map_or(body.as_str(), |(i, _)| &body[..i]);
        let mut block = format!(
            "<skill name=\"{}\" location=\"{}\">\n{cut}\n",
            skill.name(),
            skill.location
        );
        if cut.len() < body.len() {
            block.push_str("(cut here; `skills.describe` shows the whole skill)\n");
        }
        block.push_str("</skill>");
        out.push(block);
    }
    out
}

/// The compact skill list (name, description, location). Empty when there are no skills.
pub fn skills_view(skills: &Discovery) -> String {
    if skills.skills.is_empty() {
        return String::new();
    }
    let mut out = String::from("<skills>\n");
    for skill in &skills.skills {
        out.push_str(&format!(
            "  - {}: {} ({})\n",
            skill.name(),
            skill.file.description,
            skill.location
        ));
    }
    out.push_str("</skills>");
    out
}

/// The time a turn's prompt carries, to the minute: `[2026-11-25 12:45 +00:00, Wednesday]`.
pub(crate) fn time_note(now: chrono::DateTime<chrono::Local>) -> String {
    now.format("[%Y-%m-%d %H:%M %:z, %A]").to_string()
}

/// For a guest turn: what the model cannot do, so it says so instead of trying.
fn guest_note(policy: &Policy) -> String {
    if policy.role != Role::Guest {
        return String::new();
    }
    "This turn was asked by a guest of this chat, not the owner. Only the tools you are given \
     are available: no shell, files only inside the workspace, messages only to this chat. \
     When a request needs more, say that only the owner can do it."
        .to_owned()
}

/// Inputs of [`system_prompt`].
pub(crate) struct PromptParts<'a> {
    pub base: &'a str,
    pub workspace: &'a Path,
    /// The turn's policy (a guest's turn is told what it cannot do).
    pub policy: &'a Policy,
    pub skills: &'a Discovery,
    /// The `<mcp_tools>` block: one line per MCP tool (empty without MCP servers).
    pub mcp: &'a str,
    /// The `<memory>` block (empty when nothing is remembered).
    pub memory: &'a str,
}

/// Assembles the system prompt; empty blocks are dropped, blocks joined by a blank line.
///
/// It changes only when its sources change (the base prompt, `AGENTS.md`, the skills, the
/// role, the memory): nothing in it depends on the clock or the turn, so providers serve it —
/// and the conversation after it — from their prompt caches. The tools are not listed here;
/// the request's tool specs carry their names and descriptions.
pub(crate) fn system_prompt(parts: &PromptParts<'_>) -> String {
    let agents = std::fs::read_to_string(parts.workspace.join("AGENTS.md")).unwrap_or_default();
    let blocks = [
        parts.base.trim().to_string(),
        agents.trim().to_string(),
        skills_view(parts.skills),
        RUNTIME_CONTRACT.to_string(),
        parts.mcp.to_string(),
        guest_note(parts.policy),
        parts.memory.to_string(),
    ];
    blocks
        .into_iter()
        .filter(|b| !b.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::tools::Tool;

    fn policy(role: Role) -> Policy {
        Policy::for_role(role, &Settings::with_defaults("/h".into(), "/w".into()))
    }

    fn registry() -> Registry {
        let t = |n: &str| {
            Tool::new(
                n,
                "short",
                "long detail",
                |_: crate::tools::registry::NoArgs, _| async { Ok(String::new()) },
            )
        };
        Registry::new(vec![t("fs.read"), t("bash")], &[])
    }

    #[test]
    fn hints_drop_trailing_punctuation() {
        assert_eq!(
            hints("use $fs.read. or $bash, not $"),
            vec!["fs.read", "bash"]
        );
    }

    fn shown(reg: &Registry, expanded: &mut Expanded, role: Role) -> String {
        let (tools, skills) = expanded.take_pending();
        details(reg, &Discovery::default(), &policy(role), &tools, &skills).join("\n")
    }

    #[test]
    fn a_hint_shows_tool_details() {
        let reg = registry();
        let mut expanded = Expanded::default();
        activate_hints(
            "please look at $fs_read",
            &reg,
            &Discovery::default(),
            &mut expanded,
        );
        let note = shown(&reg, &mut expanded, Role::Owner);
        assert!(
            note == "<tool name=\"fs_read\" command=\"fs.read\">\nshort\nlong detail\n</tool>",
            "{note}"
        );
        assert_eq!(shown(&reg, &mut expanded, Role::Owner), "", "taken");
    }

    #[test]
    fn a_guest_is_shown_only_the_guest_tools() {
        let reg = registry();
        let mut expanded = Expanded::default();
        expanded.tool("bash");
        expanded.tool("fs.read");
        let note = shown(&reg, &mut expanded, Role::Guest);
        assert!(note.contains("fs_read") && !note.contains("bash"), "{note}");
        assert!(guest_note(&policy(Role::Guest)).contains("guest"));
        assert!(guest_note(&policy(Role::Owner)).is_empty());
    }

    #[test]
    fn the_system_prompt_has_agents_md_and_no_clock() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "  Be terse.  \n").unwrap();
        let parts = PromptParts {
            base: "You are Bub.",
            workspace: dir.path(),
            policy: &policy(Role::Owner),
            skills: &Discovery::default(),
            mcp: "",
            memory: "<memory>\n- likes tea\n</memory>",
        };
        let prompt = system_prompt(&parts);
        assert!(
            prompt.ends_with("<memory>\n- likes tea\n</memory>"),
            "{prompt}"
        );
        assert!(
            prompt.starts_with("You are Bub.\n\nBe terse.\n\n<runtime_contract>"),
            "{prompt}"
        );
        assert!(!prompt.contains("{channel}"));
        assert_eq!(
            system_prompt(&parts),
            prompt,
            "the same sources, the same bytes"
        );
        let noon =
            chrono::TimeZone::with_ymd_and_hms(&chrono::Local, 2026, 11, 25, 12, 45, 59).unwrap();
        let note = time_note(noon);
        assert!(
            note.starts_with("[2026-11-25 12:45 ") && note.ends_with(", Wednesday]"),
            "{note}"
        );
        assert!(!prompt.contains("2026"));
    }
}
