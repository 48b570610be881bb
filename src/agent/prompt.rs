//! The system prompt: base prompt, workspace `AGENTS.md`, the progressive tool view, the skills
//! view, the runtime contract and the current date/time (as Bub v0.2.3 builds it, fixed).
//!
//! Rebuilt every model step, so edits to `AGENTS.md` and newly expanded tools take effect at once.

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
1. Perform actions with tool calls: files, shell, tape, and any other tool listed above.
2. Do not write comma commands (`,cmd`) in normal replies; they are only a compatibility fallback.
3. Never write `<command ...>` blocks yourself; they are produced by the runtime.
4. When you have gathered enough evidence, answer in plain natural language.
5. Mention `$name` (a tool or skill name) to see its full details in the next step.
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

/// The compact tool list plus details of the expanded tools — only the tools `policy` allows.
pub(crate) fn tool_view(registry: &Registry, expanded: &Expanded, policy: &Policy) -> String {
    let mut out = String::from("<tool_view>\n");
    for tool in registry.tools().filter(|t| policy.allows(&t.name)) {
        let model = tool.model_name();
        if model == tool.name {
            out.push_str(&format!("  - {}: {}\n", tool.name, tool.description));
        } else {
            out.push_str(&format!(
                "  - {model} (command: {}): {}\n",
                tool.name, tool.description
            ));
        }
    }
    out.push_str("</tool_view>");
    let details: Vec<_> = registry
        .tools()
        .filter(|t| expanded.has_tool(&t.name) && policy.allows(&t.name))
        .collect();
    if !details.is_empty() {
        out.push_str("\n\n<tool_details>\n");
        for tool in details {
            out.push_str(&format!(
                "  <tool name=\"{}\">\n    name: {}\n    command_name: {}\n    description: {}\n    detail: {}\n    schema: {}\n  </tool>\n",
                tool.model_name(),
                tool.model_name(),
                tool.name,
                tool.description,
                tool.detail,
                tool.schema
            ));
        }
        out.push_str("</tool_details>");
    }
    out
}

/// The compact skill list (name, description, location) plus the bodies of expanded skills.
/// Empty when there are no skills.
pub fn skills_view(skills: &Discovery, expanded: &Expanded) -> String {
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
    let shown: Vec<_> = expanded
        .skills()
        .filter_map(|name| skills.get(name))
        .collect();
    if !shown.is_empty() {
        out.push_str("\n\n<skill_details>\n");
        for skill in shown {
            let body = &skill.file.body;
            let cut = body
                .char_indices()
                .nth(MAX_SKILL_BODY_CHARS)
                .map_or(body.as_str(), |(i, _)| &body[..i]);
            out.push_str(&format!(
                "<skill name=\"{}\" location=\"{}\">\n{cut}\n",
                skill.name(),
                skill.location
            ));
            if cut.len() < body.len() {
                out.push_str("(cut here; `skills.describe` shows the whole skill)\n");
            }
            out.push_str("</skill>\n");
        }
        out.push_str("</skill_details>");
    }
    out
}

/// For a guest turn: what the model cannot do, so it says so instead of trying.
fn guest_note(policy: &Policy) -> String {
    if policy.role != Role::Guest {
        return String::new();
    }
    "This turn was asked by a guest of this chat, not the owner. Only the tools listed above \
     are available: no shell, files only inside the workspace, messages only to this chat. \
     When a request needs more, say that only the owner can do it."
        .to_owned()
}

/// Inputs of [`system_prompt`].
pub(crate) struct PromptParts<'a> {
    pub base: &'a str,
    pub workspace: &'a Path,
    pub registry: &'a Registry,
    /// The turn's policy: the prompt lists only the tools it allows.
    pub policy: &'a Policy,
    pub expanded: &'a Expanded,
    pub skills: &'a Discovery,
    /// The `<memory>` block (empty when nothing is remembered).
    pub memory: &'a str,
    pub now: chrono::DateTime<chrono::Local>,
}

/// Assembles the system prompt; empty blocks are dropped, blocks joined by a blank line.
pub(crate) fn system_prompt(parts: &PromptParts<'_>) -> String {
    let agents = std::fs::read_to_string(parts.workspace.join("AGENTS.md")).unwrap_or_default();
    let date = format!(
        "Current date and time: {}",
        parts.now.format("%Y-%m-%d %H:%M:%S %:z (%A)")
    );
    let blocks = [
        parts.base.trim().to_string(),
        agents.trim().to_string(),
        tool_view(parts.registry, parts.expanded, parts.policy),
        skills_view(parts.skills, parts.expanded),
        RUNTIME_CONTRACT.to_string(),
        guest_note(parts.policy),
        parts.memory.to_string(),
        date,
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

    #[test]
    fn hint_expands_tool_details() {
        let reg = registry();
        let mut expanded = Expanded::default();
        activate_hints(
            "please look at $fs_read",
            &reg,
            &Discovery::default(),
            &mut expanded,
        );
        let view = tool_view(&reg, &expanded, &policy(Role::Owner));
        assert!(
            view.contains("  - fs_read (command: fs.read): short"),
            "{view}"
        );
        assert!(view.contains("<tool name=\"fs_read\">"), "{view}");
        assert!(view.contains("detail: long detail"));
        assert!(!view.contains("<tool name=\"bash\">"));
    }

    #[test]
    fn a_guest_prompt_lists_only_the_guest_tools() {
        let reg = registry();
        let mut expanded = Expanded::default();
        expanded.tool("bash");
        let view = tool_view(&reg, &expanded, &policy(Role::Guest));
        assert!(view.contains("fs_read") && !view.contains("bash"), "{view}");
        assert!(guest_note(&policy(Role::Guest)).contains("guest"));
        assert!(guest_note(&policy(Role::Owner)).is_empty());
    }

    #[test]
    fn system_prompt_has_agents_md_and_date() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "  Be terse.  \n").unwrap();
        let reg = registry();
        let expanded = Expanded::default();
        let now = chrono::Local::now();
        let prompt = system_prompt(&PromptParts {
            base: "You are Bub.",
            workspace: dir.path(),
            registry: &reg,
            policy: &policy(Role::Owner),
            expanded: &expanded,
            skills: &Discovery::default(),
            memory: "<memory>\n- likes tea\n</memory>",
            now,
        });
        assert!(prompt.contains("<memory>\n- likes tea\n</memory>\n\nCurrent date"));
        assert!(
            prompt.starts_with("You are Bub.\n\nBe terse.\n\n<tool_view>"),
            "{prompt}"
        );
        assert!(prompt.contains("<runtime_contract>"));
        assert!(prompt.contains(&now.format("%Y-%m-%d").to_string()));
        assert!(!prompt.contains("{channel}"));
    }
}
