//! `fs.glob` and `fs.grep`: find files by glob pattern and search their contents by regex,
//! walking with ripgrep's `ignore` walker (honours `.gitignore`/`.ignore`, skips hidden files
//! and directories such as `.git`).
//!
//! Invariants: output order is deterministic (sorted paths; grep walks directories in name
//! order); output size is bounded ([`GLOB_CAP`] paths, [`GREP_CAP`] matches, lines cut to
//! [`GREP_LINE_CHARS`] characters) with a visible note when capped. Paths are shown as the
//! `path` argument joined with the path relative to it (relative to the workspace by default).
//! A walk is bounded in time like every fs call ([`Files::timeout`]); it also stops by itself
//! at that deadline, so an abandoned walk does not go on reading the tree.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use regex::RegexBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{BINARY_SNIFF, Files, PathUse, blocking, resolve_path, timed_out};
use crate::access::files::GuestFiles;
use crate::redact::Redactor;
use crate::tools::registry::Reach;
use crate::tools::{Tool, ToolContext, ToolError};

/// Maximum paths `fs.glob` lists.
pub(crate) const GLOB_CAP: usize = 500;
/// Maximum matches `fs.grep` lists.
pub(crate) const GREP_CAP: usize = 200;
/// Matched lines are cut to this many characters.
pub(crate) const GREP_LINE_CHARS: usize = 300;

/// Arguments of `fs.glob`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct GlobArgs {
    /// glob, e.g. src/**/*.rs
    pub pattern: String,
    /// base directory (default: workspace)
    pub path: Option<String>,
}

/// Arguments of `fs.grep`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct GrepArgs {
    /// regular expression
    pub pattern: String,
    /// file or directory (default: workspace)
    pub path: Option<String>,
    /// file name glob
    pub glob: Option<String>,
    // Its name says it all (each word of a spec is paid for in every request).
    pub ignore_case: Option<bool>,
}

const GLOB_DETAIL: &str =
    "Lists files matching a glob pattern, one path per line, sorted (at most 500).
Args: pattern, e.g. `src/**/*.rs` (matched against the path relative to `path`; a pattern
without `/` such as `*.rs` matches file names at any depth); path: base directory (default: the
workspace). Files ignored by .gitignore and hidden files/directories are skipped.";

const GREP_DETAIL: &str = "Searches file contents with a regular expression (Rust regex syntax).
Args: pattern; path: file or directory (default: the workspace); glob: only files matching it
(e.g. `*.rs`); ignore_case (default false). Output lines are `path:line: text` (1-based line
numbers, text cut to 300 characters), at most 200 matches. Binary files, files ignored by
.gitignore and hidden files are skipped.";

pub(super) fn tools() -> Vec<Tool> {
    vec![
        Tool::reaching(
            "fs.glob",
            "Find files by glob pattern",
            GLOB_DETAIL,
            |a: &GlobArgs| Reach::path(a.path.as_deref(), PathUse::Read),
            |args, ctx: ToolContext| async move { glob(args, Files::of(&ctx)).await },
        ),
        Tool::reaching(
            "fs.grep",
            "Search file contents by regex",
            GREP_DETAIL,
            |a: &GrepArgs| Reach::path(a.path.as_deref(), PathUse::Read),
            |args, ctx: ToolContext| async move { grep(args, Files::of(&ctx)).await },
        ),
    ]
}

/// A glob matched against the relative path, or against the file name when it has no `/`.
struct PathGlob {
    matcher: GlobMatcher,
    by_name: bool,
}

impl PathGlob {
    fn new(pattern: &str) -> Result<Self, ToolError> {
        let pattern = pattern.trim();
        let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
        if pattern.is_empty() {
            return Err(ToolError::invalid("glob pattern must not be empty"));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| ToolError::invalid(format!("invalid glob pattern: {e}")))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            by_name: !pattern.contains('/'),
        })
    }

    fn is_match(&self, rel: &Path) -> bool {
        if self.by_name {
            rel.file_name().is_some_and(|n| self.matcher.is_match(n))
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// The base a `path` argument names, and the prefix shown before relative paths.
struct Base {
    dir: PathBuf,
    shown: Option<String>,
    /// Where symlinked files may point: the canonical base and workspace.
    roots: Vec<PathBuf>,
}

impl Base {
    fn new(workspace: &Path, path: Option<&str>) -> Result<Self, ToolError> {
        let raw = path
            .map(str::trim)
            .filter(|p| !p.is_empty() && *p != "." && *p != "./");
        let dir = match raw {
            Some(p) => resolve_path(workspace, p),
            None => workspace.to_path_buf(),
        };
        if !dir.exists() {
            return Err(ToolError::new(format!("path not found: {}", dir.display())));
        }
        let shown = raw.map(|p| p.trim_end_matches('/').to_string());
        let roots = [dir.as_path(), workspace]
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        Ok(Self { dir, shown, roots })
    }

    /// A regular file, or a symlink to a regular file inside the base or the workspace (the
    /// walker does not follow links; a link out of them is skipped, so a search never reads
    /// what a planted link points at elsewhere).
    fn is_file(&self, entry: &ignore::DirEntry) -> bool {
        let Some(t) = entry.file_type() else {
            return false;
        };
        if !t.is_symlink() {
            return t.is_file();
        }
        entry.path().canonicalize().is_ok_and(|real| {
            real.is_file() && self.roots.iter().any(|root| real.starts_with(root))
        })
    }

    /// `rel` (relative to the base) as shown to the model.
    fn show(&self, rel: &Path) -> String {
        let rel = rel.to_string_lossy();
        match (&self.shown, rel.is_empty()) {
            (Some(p), true) => p.clone(),
            (Some(p), false) => format!("{p}/{rel}"),
            (None, _) => rel.into_owned(),
        }
    }

    /// The walk of the base; for a guest's turn (`rule`) without what the guest file rule
    /// closes (other chats' folders, `BUB_HOME`, secret names), pruned before it is entered.
    fn walker(&self, rule: Option<GuestFiles>) -> ignore::Walk {
        let mut walk = WalkBuilder::new(&self.dir);
        walk.standard_filters(true)
            .require_git(false)
            .sort_by_file_name(|a, b| a.cmp(b));
        if let Some(rule) = rule {
            let (dir, real_dir) = (self.dir.clone(), self.dir.canonicalize().ok());
            walk.filter_entry(move |entry| {
                let real = match entry.path_is_symlink() {
                    true => entry.path().canonicalize().ok(),
                    false => real_dir
                        .as_ref()
                        .zip(entry.path().strip_prefix(&dir).ok())
                        .map(|(real_dir, rel)| real_dir.join(rel)),
                };
                real.is_some_and(|real| rule.read(&real).is_ok())
            });
        }
        walk.build()
    }
}

/// When a walk started with `timeout` must stop.
struct Deadline {
    at: Option<Instant>,
    timeout: Duration,
}

impl Deadline {
    /// `timeout` from now (none when that instant cannot be represented).
    fn after(timeout: Duration) -> Self {
        Self {
            at: Instant::now().checked_add(timeout),
            timeout,
        }
    }

    /// The timeout error for a walk of `dir` once the deadline has passed.
    fn check(&self, dir: &Path) -> Result<(), ToolError> {
        match self.at {
            Some(at) if Instant::now() >= at => Err(timed_out(dir, self.timeout)),
            _ => Ok(()),
        }
    }
}

/// A walk's surroundings: the workspace, its deadline, and a guest's rule and Bub's secrets.
struct Walk {
    workspace: PathBuf,
    deadline: Deadline,
    guest: Option<(GuestFiles, Arc<Redactor>)>,
}

/// Runs a walk of `args_path` (the `path` argument) on the blocking pool within the deadline.
async fn walk<T: Send + 'static>(
    files: Files<'_>,
    args_path: Option<&str>,
    f: impl FnOnce(Walk) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let workspace = files.workspace.to_path_buf();
    let shown = match args_path.map(str::trim).filter(|p| !p.is_empty()) {
        Some(p) => resolve_path(&workspace, p),
        None => workspace.clone(),
    };
    let timeout = files.timeout;
    let guest = files.guest;
    blocking(&shown, timeout, move || {
        let deadline = Deadline::after(timeout);
        let guest = guest.map(|g| (g.rule(&workspace), g.redactor));
        f(Walk {
            workspace,
            deadline,
            guest,
        })
    })
    .await
}

/// `fs.glob`.
pub async fn glob(args: GlobArgs, files: impl Into<Files<'_>>) -> Result<String, ToolError> {
    let path = args.path.clone();
    walk(files.into(), path.as_deref(), move |walk| {
        glob_sync(&args, walk)
    })
    .await
}

fn glob_sync(args: &GlobArgs, walk: Walk) -> Result<String, ToolError> {
    let matcher = PathGlob::new(&args.pattern)?;
    let base = Base::new(&walk.workspace, args.path.as_deref())?;
    let deadline = walk.deadline;
    if !base.dir.is_dir() {
        return Err(ToolError::new(format!(
            "not a directory: {}",
            base.dir.display()
        )));
    }
    let mut found: Vec<String> = Vec::new();
    for entry in base.walker(walk.guest.map(|g| g.0)).filter_map(Result::ok) {
        deadline.check(&base.dir)?;
        if entry.depth() == 0 || !base.is_file(&entry) {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(&base.dir)
            && matcher.is_match(rel)
        {
            found.push(base.show(rel));
        }
    }
    if found.is_empty() {
        return Ok("(no matches)".to_string());
    }
    found.sort();
    let total = found.len();
    found.truncate(GLOB_CAP);
    let mut out = found.join("\n");
    if total > GLOB_CAP {
        out.push_str(&format!(
            "\n… [{} more matches not shown ({total} in all); narrow the pattern or path]",
            total - GLOB_CAP
        ));
    }
    Ok(out)
}

/// `fs.grep`.
pub async fn grep(args: GrepArgs, files: impl Into<Files<'_>>) -> Result<String, ToolError> {
    let path = args.path.clone();
    walk(files.into(), path.as_deref(), move |walk| {
        grep_sync(&args, walk)
    })
    .await
}

fn grep_sync(args: &GrepArgs, walk: Walk) -> Result<String, ToolError> {
    let re = RegexBuilder::new(&args.pattern)
        .case_insensitive(args.ignore_case.unwrap_or(false))
        .build()
        .map_err(|e| ToolError::invalid(format!("invalid regex: {e}")))?;
    let glob = args.glob.as_deref().map(str::trim);
    let filter = glob
        .filter(|g| !g.is_empty())
        .map(PathGlob::new)
        .transpose()?;
    let base = Base::new(&walk.workspace, args.path.as_deref())?;
    let deadline = walk.deadline;
    let (rule, secrets) = walk.guest.unzip();
    let mut out: Vec<String> = Vec::new();
    let mut capped = false;
    'files: for entry in base.walker(rule).filter_map(Result::ok) {
        deadline.check(&base.dir)?;
        if !base.is_file(&entry) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(&base.dir) else {
            continue;
        };
        // An explicitly named file is searched even when the glob would not select it.
        if entry.depth() > 0 && filter.as_ref().is_some_and(|f| !f.is_match(rel)) {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        if bytes[..bytes.len().min(BINARY_SNIFF)].contains(&0) {
            continue;
        }
        // A guest learns nothing about a secret's content, not even whether a pattern matches.
        if secrets.as_ref().is_some_and(|r| r.found(&bytes)) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        let shown = base.show(rel);
        for (i, line) in text.lines().enumerate() {
            if !re.is_match(line) {
                continue;
            }
            if out.len() == GREP_CAP {
                capped = true;
                break 'files;
            }
            out.push(format!("{shown}:{}: {}", i + 1, cut(line)));
        }
    }
    if out.is_empty() {
        return Ok("(no matches)".to_string());
    }
    let mut out = out.join("\n");
    if capped {
        out.push_str(&format!(
            "\n… [stopped after {GREP_CAP} matches; narrow the pattern, path or glob]"
        ));
    }
    Ok(out)
}

/// `line` cut to [`GREP_LINE_CHARS`] characters.
fn cut(line: &str) -> String {
    match line.char_indices().nth(GREP_LINE_CHARS) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_without_slash_matches_names_at_any_depth() {
        let g = PathGlob::new("*.rs").unwrap();
        assert!(g.is_match(Path::new("src/a/b.rs")));
        let g = PathGlob::new("src/*.rs").unwrap();
        assert!(g.is_match(Path::new("src/b.rs")));
        assert!(!g.is_match(Path::new("src/a/b.rs")));
        let g = PathGlob::new("./src/**/*.rs").unwrap();
        assert!(g.is_match(Path::new("src/a/b.rs")));
        assert!(g.is_match(Path::new("src/b.rs")));
        assert!(PathGlob::new("a[").is_err());
    }

    #[test]
    fn long_lines_are_cut() {
        let long = "é".repeat(400);
        let c = cut(&long);
        assert_eq!(c.chars().count(), GREP_LINE_CHARS + 1);
        assert!(c.ends_with('…'));
        assert_eq!(cut("short"), "short");
    }
}
