//! Skill tools: `skills.list` and `skills.describe` (the full SKILL.md body and the skill's
//! other files). Describing a skill also expands it in the system prompt (bounded). Both read
//! the skill folders on the blocking pool.

use schemars::JsonSchema;
use serde::Deserialize;

use super::registry::NoArgs;
use super::{Tool, ToolContext, ToolError};
use crate::skills::{self, Skill};

#[derive(Deserialize, JsonSchema)]
struct DescribeArgs {
    /// skill name, e.g. gh
    name: String,
}

/// Runs `f` on the blocking pool (skill discovery reads folders and files).
async fn blocking<F>(ctx: ToolContext, f: F) -> Result<String, ToolError>
where
    F: FnOnce(&ToolContext) -> Result<String, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || f(&ctx))
        .await
        .map_err(|e| ToolError::new(format!("skills task failed: {e}")))?
}

/// `skills.describe` output: metadata, body, and the folder's other files.
pub(crate) fn describe_text(skill: &Skill) -> String {
    let f = &skill.file;
    let mut out = format!(
        "name: {}\ndescription: {}\nsource: {}\nlocation: {}\n",
        f.name,
        f.description,
        skill.source.as_str(),
        skill.location
    );
    if let Some(license) = &f.license {
        out.push_str(&format!("license: {license}\n"));
    }
    if !f.allowed_tools.is_empty() {
        out.push_str(&format!("allowed-tools: {}\n", f.allowed_tools.join(", ")));
    }
    if !f.metadata.is_empty() {
        out.push_str(&format!(
            "metadata: {}\n",
            serde_json::Value::Object(f.metadata.clone())
        ));
    }
    out.push_str(&format!("\n{}\n", f.body));
    let files = skill.files();
    if !files.is_empty() {
        out.push_str("\nfiles (relative to the skill folder):\n");
        for file in files {
            out.push_str(&format!("  {file}\n"));
        }
    }
    out
}

/// The skill tools.
pub(crate) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "skills.list",
            "List available skills",
            "Lists the skills of this workspace (project), of ~/.agents/skills (global) and the \
             built-in ones: name, description, source and location; invalid SKILL.md files are \
             listed as skipped with the reason.",
            |_: NoArgs, ctx: ToolContext| async move {
                blocking(
                    ctx,
                    |ctx| Ok(skills::discover(&ctx.skill_roots()).listing()),
                )
                .await
            },
        ),
        Tool::new(
            "skills.describe",
            "Show one skill's instructions",
            "Shows a skill's full SKILL.md (frontmatter fields and body) and lists the other \
             files in its folder.",
            |DescribeArgs { name }, ctx: ToolContext| async move {
                blocking(ctx, move |ctx| {
                    let found = skills::discover(&ctx.skill_roots());
                    let skill = found.get(name.trim()).ok_or_else(|| {
                        ToolError::new(format!("unknown skill: {name} (see skills.list)"))
                    })?;
                    Ok(describe_text(skill))
                })
                .await
            },
        ),
    ]
}
