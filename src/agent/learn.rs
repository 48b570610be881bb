//! Learned procedures (GenericAgent's SOPs): after a turn that succeeded with enough tool
//! steps, one extra model call decides whether the work is a reusable procedure; if so Bub
//! writes it as a workspace skill, `.agents/skills/<name>/SKILL.md`, marked as learned.
//!
//! Opt-in (`BUB_LEARN_SKILLS=true`), and only for turns run with the owner's rights: a learned
//! skill is shown in every later system prompt, so a guest's turn must not be able to write one.
//! The model proposes a name, a description and the steps; Bub writes the frontmatter itself
//! (`metadata: {learned, source-session, learned-at, updated-at, revision}`), redacts the text,
//! and keeps the file only when the skill parser accepts it. A proposal named like a learned
//! skill updates it (its revision goes up) instead of adding another; one named like a skill a
//! person wrote (or a global or built-in one) is refused, never overwritten. At most
//! [`MAX_LEARNED`] learned skills per workspace. Nothing is sent to a chat: the outcome is a
//! `skill.learn` event on the session's tape.

use serde_json::{Value, json};
use yaml_rust2::{Yaml, YamlEmitter, yaml};

use super::compact::cut;
use crate::llm::{ChatMessage, ChatRequest, ModelChain};
use crate::skills::{self, SkillRoots, Source};
use crate::tape::Event;
use crate::tools::ToolContext;

/// The system prompt of the learning call.
pub(crate) const LEARN_PROMPT: &str = "You review a task an AI agent has just finished and \
decide whether it is a reusable procedure worth saving as a skill: steps that would help the \
next time a similar task comes, not a one-off answer or small talk. When it is not, answer with \
the single word NONE. When it is, answer with one JSON object and nothing else: {\"name\": \
\"hyphen-case-name\", \"description\": \"one sentence: what the procedure does and when to use \
it\", \"steps\": \"Markdown: when to use it, the steps (commands, tools and their arguments), \
the pitfalls this task ran into\"}. When it is the same procedure as one of the learned skills \
listed, use that skill's name: it is updated, not duplicated. Never include secrets, tokens or \
personal data.";

/// The most learned skills a workspace keeps; a new one beyond is refused.
pub(crate) const MAX_LEARNED: usize = 32;

/// The longest body (the steps) a learned skill keeps, in characters.
const MAX_STEPS_CHARS: usize = 8_000;

/// One tool call of a turn, as the learning call is shown it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolStep {
    /// The tool's command name (`fs.read`).
    pub tool: String,
    pub arguments: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// The start of its output or error.
    pub output: String,
}

impl ToolStep {
    pub(crate) fn new(tool: &str, arguments: &str, result: &Result<String, String>) -> Self {
        let (ok, output) = match result {
            Ok(out) => (true, out),
            Err(error) => (false, error),
        };
        Self {
            tool: tool.to_owned(),
            arguments: cut(arguments, 300),
            ok,
            output: cut(output, 300),
        }
    }
}

/// The finished turn the learning call looks at.
pub(crate) struct Finished {
    /// What the model was asked (the user's input).
    pub task: String,
    pub steps: Vec<ToolStep>,
    pub answer: String,
}

/// What the model proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proposal {
    pub name: String,
    pub description: String,
    pub steps: String,
}

/// What a learning call ended with.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Learned {
    /// The model saw no reusable procedure.
    Nothing,
    /// Written: the skill's name, revision and SKILL.md path.
    Saved {
        name: String,
        revision: i64,
        path: String,
    },
    /// Not written, and why.
    Refused(String),
}

/// Whether a finished turn is worth a learning call: learning is on (`min_steps`, see
/// [`super::config::TurnConfig::learn_min_steps`]), the turn ran with the owner's rights, and
/// it made at least `min_steps` tool calls.
pub(crate) fn worth_learning(
    min_steps: Option<u32>,
    ctx: &ToolContext,
    steps: &[ToolStep],
) -> bool {
    min_steps.is_some_and(|min| {
        ctx.turn.policy.role == crate::access::Role::Owner && steps.len() >= min as usize
    })
}

/// The learning call for `turn` and what came of it, recorded as a `skill.learn` event.
pub(crate) async fn learn(llm: &ModelChain, ctx: &ToolContext, turn: Finished) {
    let roots = ctx.skill_roots();
    let listed = {
        let roots = roots.clone();
        tokio::task::spawn_blocking(move || learned_skills(&roots)).await
    };
    let request = ChatRequest {
        messages: vec![
            ChatMessage::system(LEARN_PROMPT),
            ChatMessage::user(transcript(&turn, &listed.unwrap_or_default())),
        ],
        tools: crate::llm::ToolSpecs::default(),
        max_tokens: ctx.process.models.max_tokens,
    };
    let answer = super::spend::call(ctx, crate::usage::Purpose::Learning, llm, &request).await;
    let learned = match answer {
        Ok(response) => match proposal(response.content.as_deref().unwrap_or_default()) {
            Ok(None) => Learned::Nothing,
            Ok(Some(proposal)) => {
                let (session, redactor) =
                    (ctx.session_id().to_owned(), ctx.process.redactor.clone());
                let today = chrono::Local::now().format("%Y-%m-%d").to_string();
                let saved = tokio::task::spawn_blocking(move || {
                    let proposal = Proposal {
                        steps: redactor.redact(&proposal.steps).into_owned(),
                        description: redactor.redact(&proposal.description).into_owned(),
                        ..proposal
                    };
                    save(&roots, &proposal, &session, &today)
                })
                .await;
                saved.unwrap_or_else(|e| Learned::Refused(format!("the write failed: {e}")))
            }
            Err(why) => Learned::Refused(why),
        },
        Err(e) => Learned::Refused(format!("the learning call failed: {e}")),
    };
    let data = match &learned {
        Learned::Nothing => json!({"outcome": "nothing"}),
        Learned::Saved {
            name,
            revision,
            path,
        } => json!({"outcome": "saved", "name": name, "revision": revision, "path": path}),
        Learned::Refused(why) => json!({"outcome": "refused", "why": why}),
    };
    tracing::info!(data = %data, "skill.learn");
    ctx.tape().event(Event::SkillLearn, data).await;
}

/// The learned skills of the workspace: `name: description` lines.
fn learned_skills(roots: &SkillRoots) -> Vec<String> {
    discover_all(roots)
        .skills
        .iter()
        .filter(|s| s.learned())
        .map(|s| format!("{}: {}", s.name(), s.file.description))
        .collect()
}

/// The skills of the workspace, whatever `--skills` allows (a name taken by a hidden skill is
/// still taken).
fn discover_all(roots: &SkillRoots) -> std::sync::Arc<skills::Discovery> {
    let mut all = roots.clone();
    all.allowed.clear();
    skills::discover(&all)
}

/// The finished turn as text for the learning call.
fn transcript(turn: &Finished, learned: &[String]) -> String {
    let mut text = format!("Task:\n{}\n\nSteps:\n", cut(turn.task.trim(), 2_000));
    for (n, step) in turn.steps.iter().enumerate() {
        let status = if step.ok { "ok" } else { "failed" };
        text.push_str(&format!(
            "{}. {} {} -> {status}: {}\n",
            n + 1,
            step.tool,
            step.arguments,
            step.output.trim()
        ));
    }
    text.push_str(&format!(
        "\nAnswer:\n{}\n\nLearned skills in this workspace:\n",
        cut(turn.answer.trim(), 1_000)
    ));
    if learned.is_empty() {
        text.push_str("(none)\n");
    }
    for skill in learned {
        text.push_str(&format!("- {skill}\n"));
    }
    text
}

/// The model's answer read: `None` for NONE, else the proposal (a JSON object, possibly in a
/// code fence or after a sentence).
pub(crate) fn proposal(answer: &str) -> Result<Option<Proposal>, String> {
    let answer = answer.trim();
    if answer
        .trim_matches(|c: char| !c.is_alphanumeric())
        .eq_ignore_ascii_case("none")
    {
        return Ok(None);
    }
    let json = match (answer.find('{'), answer.rfind('}')) {
        (Some(start), Some(end)) if start < end => &answer[start..=end],
        _ => {
            return Err(format!(
                "the answer is neither NONE nor a JSON object: {}",
                cut(answer, 200)
            ));
        }
    };
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("the proposal is not valid JSON: {e}"))?;
    let field = |key: &str| {
        value[key]
            .as_str()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("the proposal has no `{key}`"))
    };
    Ok(Some(Proposal {
        name: hyphen_case(&field("name")?),
        description: field("description")?
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        steps: field("steps")?,
    }))
}

/// `Deploy the Site!` → `deploy-the-site` (at most 64 characters).
fn hyphen_case(name: &str) -> String {
    let mut out = String::new();
    for c in name.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(64);
    out.trim_end_matches('-').to_owned()
}

/// Writes `proposal` as a learned skill of the workspace, or updates the learned skill of that
/// name; refuses a name taken by any other skill, a new skill beyond [`MAX_LEARNED`], and a
/// file the skill parser does not accept.
pub(crate) fn save(roots: &SkillRoots, proposal: &Proposal, session: &str, today: &str) -> Learned {
    let found = discover_all(roots);
    let name = &proposal.name;
    let (path, learned_at, source, revision) = match found.get(name) {
        Some(skill) if skill.learned() && skill.source == Source::Project => {
            let meta = &skill.file.metadata;
            let text = |key: &str| meta.get(key).and_then(Value::as_str).map(str::to_owned);
            (
                std::path::PathBuf::from(&skill.location),
                text("learned-at").unwrap_or_else(|| today.to_owned()),
                text("source-session").unwrap_or_else(|| session.to_owned()),
                meta.get("revision").and_then(Value::as_i64).unwrap_or(1) + 1,
            )
        }
        Some(skill) => {
            return Learned::Refused(format!(
                "a {} skill named {name:?} exists that was not learned; it is not overwritten",
                skill.source.as_str()
            ));
        }
        None if found.skills.iter().filter(|s| s.learned()).count() >= MAX_LEARNED => {
            return Learned::Refused(format!(
                "the workspace has {MAX_LEARNED} learned skills already; remove some from .agents/skills/"
            ));
        }
        None => (
            roots
                .workspace
                .join(".agents/skills")
                .join(name)
                .join("SKILL.md"),
            today.to_owned(),
            session.to_owned(),
            1,
        ),
    };
    let text = skill_text(proposal, &source, &learned_at, today, revision);
    if let Err(problem) = skills::parse_skill(&text, name) {
        return Learned::Refused(format!("the proposed skill is not valid: {problem}"));
    }
    match crate::storage::write_atomic(&path, text.as_bytes(), None) {
        Ok(()) => Learned::Saved {
            name: name.clone(),
            revision,
            path: path.display().to_string(),
        },
        Err(e) => Learned::Refused(format!("the write failed: {e:#}")),
    }
}

/// The SKILL.md of a learned skill: frontmatter written by Bub, the proposed steps as the body.
fn skill_text(
    proposal: &Proposal,
    session: &str,
    learned_at: &str,
    today: &str,
    revision: i64,
) -> String {
    let s = |text: &str| Yaml::String(text.to_owned());
    let mut metadata = yaml::Hash::new();
    metadata.insert(s("learned"), Yaml::Boolean(true));
    metadata.insert(s("source-session"), s(session));
    metadata.insert(s("learned-at"), s(learned_at));
    metadata.insert(s("updated-at"), s(today));
    metadata.insert(s("revision"), Yaml::Integer(revision));
    let mut front = yaml::Hash::new();
    front.insert(s("name"), s(&proposal.name));
    front.insert(s("description"), s(&proposal.description));
    front.insert(s("metadata"), Yaml::Hash(metadata));
    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = YamlEmitter::new(&mut text).dump(&Yaml::Hash(front));
    let steps: String = proposal
        .steps
        .trim()
        .chars()
        .take(MAX_STEPS_CHARS)
        .collect();
    format!("{text}\n---\n\n{steps}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::agent::config::TurnConfig;
    use crate::config::{ModelConfig, Settings};

    /// The skill roots of workspace `dir/ws`.
    fn roots(dir: &std::path::Path) -> SkillRoots {
        SkillRoots {
            workspace: dir.join("ws"),
            user_home: None,
            allowed: Vec::new(),
        }
    }

    fn proposal(name: &str, steps: &str) -> Proposal {
        Proposal {
            name: name.to_owned(),
            description: "Release the crate: test, tag, publish".to_owned(),
            steps: steps.to_owned(),
        }
    }

    #[test]
    fn the_answer_is_none_or_a_json_proposal() {
        assert_eq!(super::proposal("NONE"), Ok(None));
        assert_eq!(super::proposal("  none. "), Ok(None));
        let fenced = "Here it is:\n```json\n{\"name\": \"Release Crate!\", \"description\": \"Test,\\n tag\", \"steps\": \"1. test\"}\n```";
        assert_eq!(
            super::proposal(fenced),
            Ok(Some(Proposal {
                name: "release-crate".into(),
                description: "Test, tag".into(),
                steps: "1. test".into()
            }))
        );
        assert!(
            super::proposal("maybe later")
                .unwrap_err()
                .contains("neither NONE")
        );
        assert!(
            super::proposal(r#"{"name": "x"}"#)
                .unwrap_err()
                .contains("`description`")
        );
    }

    #[test]
    fn a_learned_skill_is_written_then_updated_never_duplicated_and_others_are_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let s = roots(dir.path());
        let first = save(
            &s,
            &proposal("release-crate", "1. cargo test"),
            "cli",
            "2026-11-25",
        );
        let path = s.workspace.join(".agents/skills/release-crate/SKILL.md");
        assert_eq!(
            first,
            Learned::Saved {
                name: "release-crate".into(),
                revision: 1,
                path: path.display().to_string()
            }
        );
        let parsed =
            skills::parse_skill(&std::fs::read_to_string(&path).unwrap(), "release-crate").unwrap();
        assert_eq!(parsed.metadata["learned"], json!(true));
        assert_eq!(parsed.metadata["source-session"], json!("cli"));
        assert_eq!(parsed.body, "1. cargo test");

        let again = save(
            &s,
            &proposal("release-crate", "1. cargo test\n2. cargo publish"),
            "telegram:1",
            "2026-11-26",
        );
        assert!(
            matches!(again, Learned::Saved { revision: 2, .. }),
            "{again:?}"
        );
        let parsed =
            skills::parse_skill(&std::fs::read_to_string(&path).unwrap(), "release-crate").unwrap();
        assert_eq!(parsed.metadata["learned-at"], json!("2026-11-25"));
        assert_eq!(parsed.metadata["updated-at"], json!("2026-11-26"));
        assert_eq!(parsed.metadata["source-session"], json!("cli"));
        assert!(parsed.body.ends_with("cargo publish"));
        let folders = std::fs::read_dir(s.workspace.join(".agents/skills"))
            .unwrap()
            .count();
        assert_eq!(folders, 1);

        // A skill a person wrote keeps its text.
        let mine = s.workspace.join(".agents/skills/deploy/SKILL.md");
        std::fs::create_dir_all(mine.parent().unwrap()).unwrap();
        std::fs::write(&mine, "---\nname: deploy\ndescription: mine\n---\nbody\n").unwrap();
        let refused = save(&s, &proposal("deploy", "rm -rf"), "cli", "2026-11-26");
        assert!(
            matches!(&refused, Learned::Refused(why) if why.contains("not learned")),
            "{refused:?}"
        );
        assert!(std::fs::read_to_string(&mine).unwrap().ends_with("body\n"));

        // A description the parser refuses is not written.
        let bad = Proposal {
            description: "uses <html>".into(),
            ..proposal("html-thing", "x")
        };
        assert!(
            matches!(save(&s, &bad, "cli", "2026-11-26"), Learned::Refused(why) if why.contains("not valid"))
        );
        assert!(!s.workspace.join(".agents/skills/html-thing").exists());
    }

    #[test]
    fn learned_skills_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let s = roots(dir.path());
        for n in 0..MAX_LEARNED {
            let saved = save(
                &s,
                &proposal(&format!("task-{n}"), "1. step"),
                "cli",
                "2026-11-25",
            );
            assert!(matches!(saved, Learned::Saved { .. }), "{saved:?}");
        }
        let full = save(&s, &proposal("one-more", "1. step"), "cli", "2026-11-25");
        assert!(matches!(full, Learned::Refused(why) if why.contains("32 learned skills")));
        // An update of a learned skill is still allowed.
        let update = save(
            &s,
            &proposal("task-0", "1. better step"),
            "cli",
            "2026-11-25",
        );
        assert!(matches!(update, Learned::Saved { revision: 2, .. }));
    }

    #[test]
    fn the_transcript_shows_the_steps_and_the_learned_skills() {
        let turn = Finished {
            task: "ship it".into(),
            steps: vec![
                ToolStep::new(
                    "bash",
                    r#"{"cmd":"cargo tset"}"#,
                    &Err("error: no such command".into()),
                ),
                ToolStep::new("bash", r#"{"cmd":"cargo test"}"#, &Ok("ok".into())),
            ],
            answer: "Shipped.".into(),
        };
        let text = transcript(&turn, &["release-crate: Release the crate".into()]);
        assert!(
            text.contains("1. bash {\"cmd\":\"cargo tset\"} -> failed: error: no such command")
        );
        assert!(text.contains("2. bash {\"cmd\":\"cargo test\"} -> ok: ok"));
        assert!(text.contains("Answer:\nShipped."));
        assert!(text.contains("- release-crate: Release the crate"));
    }

    #[test]
    fn only_an_owner_s_turn_with_enough_tool_calls_is_looked_at() {
        use crate::access::{Authority, Role};
        let dir = tempfile::tempdir().unwrap();
        let mut s = Settings::with_defaults(dir.path().join("home"), dir.path().join("ws"));
        s.learn_min_steps = 2;
        let ctx = |s: &Settings, role: Role| {
            let mut who = Authority::terminal();
            who.role = role;
            let registry = crate::tools::builtin_registry(&[]);
            ToolContext::standalone(s.clone(), registry, "telegram:7", who).unwrap()
        };
        let learn = |s: &Settings| {
            TurnConfig::from_settings(s, &ModelConfig::from_settings(s)).learn_min_steps
        };
        let step = ToolStep::new("fs.read", "{}", &Ok("x".into()));
        let two = vec![step.clone(), step.clone()];
        assert!(
            !worth_learning(learn(&s), &ctx(&s, Role::Owner), &two),
            "off by default"
        );
        s.learn_skills = true;
        assert!(worth_learning(learn(&s), &ctx(&s, Role::Owner), &two));
        assert!(!worth_learning(learn(&s), &ctx(&s, Role::Owner), &two[..1]));
        assert!(!worth_learning(learn(&s), &ctx(&s, Role::Guest), &two));
    }
}
