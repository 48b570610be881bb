//! Skills: knowledge packs (`<name>/SKILL.md` plus optional files) the agent reads on demand.
//!
//! Roots, in precedence order (the first skill of a name wins): the workspace's
//! `.agents/skills` and `.agent/skills` (project), `~/.agents/skills` and `~/.agent/skills`
//! (global), and the built-in skills of the top-level `skills/` folder, embedded in the binary.
//! A discovery is kept while nothing it was made from changed: each root folder, each folder in
//! a root and each SKILL.md is remembered with its modification time, length and inode (a
//! `stat` each), so skills written by the agent appear at once and an unchanged set costs no
//! listing and no parse. A skill that does not validate is reported and skipped, never fatal.
//! A SKILL.md is parsed again only when its modification time or length changed (a bounded
//! process-wide cache), and one larger than [`parse::MAX_SKILL_BYTES`] is reported without
//! being read. Discovery is file I/O: async code runs it on the blocking pool.

pub(crate) mod parse;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

use include_dir::{Dir, include_dir};

use crate::config::Settings;
use crate::storage::Stamp;
pub use parse::{MAX_SKILL_BYTES, SkillFile, parse_skill};

/// The built-in skills (`skills/` at the repository root).
static BUILTIN: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/skills");

/// A built-in skill: its parse result, location and embedded folder.
type BuiltinSkill = (Result<SkillFile, String>, String, &'static Dir<'static>);

/// The built-in skills, parsed once (they are part of the binary).
static BUILTIN_PARSED: LazyLock<Vec<BuiltinSkill>> = LazyLock::new(|| {
    BUILTIN
        .dirs()
        .filter_map(|dir| {
            let md = dir.get_file(dir.path().join("SKILL.md"))?;
            let folder_name = dir.path().to_string_lossy();
            let location = format!("builtin:skills/{folder_name}/SKILL.md");
            let parsed = md
                .contents_utf8()
                .ok_or_else(|| "not UTF-8".to_owned())
                .and_then(|text| parse_skill(text, &folder_name));
            Some((parsed, location, dir))
        })
        .collect()
});

/// A SKILL.md's parse result, remembered with the modification time and length it was read at.
type Cached = (Option<SystemTime>, u64, Result<SkillFile, String>);

/// Parsed SKILL.md files by path, at most [`CACHE_CAPACITY`] of them.
static CACHE: LazyLock<Mutex<HashMap<PathBuf, Cached>>> = LazyLock::new(Default::default);

/// The most SKILL.md files the cache remembers; when full, an arbitrary entry makes room.
pub(crate) const CACHE_CAPACITY: usize = 256;

/// A discovery and the version of every path it was made from (taken before reading each).
struct Snapshot {
    stamps: Vec<(PathBuf, Option<Stamp>)>,
    found: Arc<Discovery>,
}

impl Snapshot {
    /// Whether every path it was made from is older than [`SETTLED`] (one with an unknown
    /// modification time never is).
    fn settled(&self) -> bool {
        let Some(limit) = SystemTime::now().checked_sub(SETTLED) else {
            return false;
        };
        self.stamps
            .iter()
            .all(|(_, stamp)| stamp.is_none_or(|s| s.modified().is_some_and(|m| m <= limit)))
    }
}

/// The last discovery per set of roots and allow-list, at most [`SNAPSHOTS_KEPT`].
static SNAPSHOTS: LazyLock<Mutex<HashMap<String, Arc<Snapshot>>>> = LazyLock::new(Default::default);

/// Discoveries kept (one per workspace and allow-list in use); when full, an arbitrary one
/// makes room.
const SNAPSHOTS_KEPT: usize = 16;

/// How old every path of a discovery must be for it to be kept. A change within the file
/// system's timestamp granularity (a few milliseconds, up to 2 s on some) may leave the same
/// modification time, so a discovery that saw a path this recent is made again next time.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

/// Files listed per skill by `skills.describe`.
const MAX_LISTED_FILES: usize = 50;

/// Where a skill comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Project,
    Global,
    Builtin,
}

impl Source {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Project => "project",
            Source::Global => "global",
            Source::Builtin => "builtin",
        }
    }
}

/// A skill's folder: on disk, or embedded.
#[derive(Debug, Clone)]
enum Folder {
    Disk(PathBuf),
    Embedded(&'static Dir<'static>),
}

/// One valid skill.
#[derive(Debug, Clone)]
pub struct Skill {
    pub file: SkillFile,
    pub source: Source,
    /// The SKILL.md path (`builtin:skills/<name>/SKILL.md` for built-in skills).
    pub location: String,
    folder: Folder,
}

impl Skill {
    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// Whether Bub wrote it from a finished turn (`metadata: {learned: true}`).
    pub(crate) fn learned(&self) -> bool {
        self.file.metadata.get("learned") == Some(&serde_json::Value::Bool(true))
    }

    /// The other files of the skill's folder, relative to it, sorted (at most 50).
    pub(crate) fn files(&self) -> Vec<String> {
        let mut files = Vec::new();
        match &self.folder {
            Folder::Disk(dir) => {
                for entry in ignore::WalkBuilder::new(dir).hidden(true).build().flatten() {
                    if entry.file_type().is_some_and(|t| t.is_file())
                        && let Ok(rel) = entry.path().strip_prefix(dir)
                    {
                        files.push(rel.to_string_lossy().into_owned());
                    }
                }
            }
            Folder::Embedded(dir) => embedded_files(dir, dir.path(), &mut files),
        }
        files.retain(|f| f != "SKILL.md");
        files.sort();
        files.truncate(MAX_LISTED_FILES);
        files
    }
}

fn embedded_files(dir: &Dir<'_>, base: &Path, out: &mut Vec<String>) {
    for file in dir.files() {
        if let Ok(rel) = file.path().strip_prefix(base) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
    for sub in dir.dirs() {
        embedded_files(sub, base, out);
    }
}

/// A skill folder that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillIssue {
    pub location: String,
    pub problem: String,
}

/// The skills available to a session, and the folders that were skipped.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// Sorted by name.
    pub skills: Vec<Skill>,
    pub issues: Vec<SkillIssue>,
}

impl Discovery {
    /// `skills.list` and `bub skills list`: `name: description (source, location)` per skill
    /// (`source, learned` for a learned one), then the skipped ones.
    pub fn listing(&self) -> String {
        let mut rows: Vec<String> = self
            .skills
            .iter()
            .map(|s| {
                let learned = if s.learned() { ", learned" } else { "" };
                format!(
                    "{}: {} ({}{learned}, {})",
                    s.name(),
                    s.file.description,
                    s.source.as_str(),
                    s.location
                )
            })
            .collect();
        if rows.is_empty() {
            rows.push("(no skills)".to_owned());
        }
        for issue in &self.issues {
            rows.push(format!("skipped {}: {}", issue.location, issue.problem));
        }
        rows.join("\n")
    }

    /// The skill named `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Skill> {
        let name = name.to_lowercase();
        self.skills.iter().find(|s| s.file.name == name)
    }
}

/// Where a session's skills are found, and which of them it sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRoots {
    /// The session's workspace: its `.agents/skills` and `.agent/skills` (project).
    pub workspace: PathBuf,
    /// The user's home directory (`HOME`): `~/.agents/skills` and `~/.agent/skills` (global).
    pub user_home: Option<PathBuf>,
    /// `--skills`: only these (empty = all).
    pub allowed: Vec<String>,
}

impl SkillRoots {
    /// The roots of the settings' workspace.
    pub fn from_settings(settings: &Settings) -> Self {
        Self {
            workspace: settings.workspace.clone(),
            user_home: settings.user_home.clone(),
            allowed: settings.allowed_skills.clone(),
        }
    }

    /// (root, source), in precedence order.
    fn dirs(&self) -> Vec<(PathBuf, Source)> {
        let ws = &self.workspace;
        let mut roots = vec![
            (ws.join(".agents/skills"), Source::Project),
            (ws.join(".agent/skills"), Source::Project),
        ];
        if let Some(home) = &self.user_home {
            roots.push((home.join(".agents/skills"), Source::Global));
            roots.push((home.join(".agent/skills"), Source::Global));
        }
        roots
    }
}

/// The skills of `roots` (restricted to `roots.allowed` when non-empty): the last discovery
/// when none of the paths it was made from changed, else a new one.
pub fn discover(roots: &SkillRoots) -> Arc<Discovery> {
    let dirs = roots.dirs();
    let key = format!("{dirs:?} {:?}", roots.allowed);
    let snapshots = || SNAPSHOTS.lock().unwrap_or_else(|e| e.into_inner());
    let last = snapshots().get(&key).cloned();
    if let Some(last) = last
        && last.stamps.iter().all(|(path, at)| Stamp::of(path) == *at)
    {
        return last.found.clone();
    }
    let snapshot = Arc::new(discover_now(&roots.allowed, dirs));
    let found = snapshot.found.clone();
    let mut snapshots = snapshots();
    if !snapshot.settled() {
        snapshots.remove(&key);
        return found;
    }
    insert_bounded(&mut snapshots, SNAPSHOTS_KEPT, key, snapshot);
    found
}

/// Inserts `key` into `map`, first evicting an arbitrary other entry when `map` holds `cap`.
fn insert_bounded<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    cap: usize,
    key: K,
    value: V,
) {
    if map.len() >= cap
        && !map.contains_key(&key)
        && let Some(evicted) = map.keys().next().cloned()
    {
        map.remove(&evicted);
    }
    map.insert(key, value);
}

/// Lists the roots and loads their skills, stamping each path before it is read (so a change
/// during the discovery makes the next call discover again, never keeps a stale one).
fn discover_now(allowed: &[String], roots: Vec<(PathBuf, Source)>) -> Snapshot {
    let mut found = Discovery::default();
    let mut stamps = Vec::new();
    for (root, source) in roots {
        stamps.push((root.clone(), Stamp::of(&root)));
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        for dir in dirs {
            // Every folder is stamped: a SKILL.md created in it later changes its mtime.
            stamps.push((dir.clone(), Stamp::of(&dir)));
            let md = dir.join("SKILL.md");
            let stamp = Stamp::of(&md);
            if !md.is_file() {
                continue;
            }
            stamps.push((md.clone(), stamp));
            let location = md.display().to_string();
            let folder_name = dir.file_name().unwrap_or_default().to_string_lossy();
            let parsed = load_skill(&md, &folder_name);
            add(
                &mut found,
                parsed,
                source,
                location,
                Folder::Disk(dir.clone()),
            );
        }
    }
    for (parsed, location, dir) in BUILTIN_PARSED.iter() {
        let folder = Folder::Embedded(dir);
        add(
            &mut found,
            parsed.clone(),
            Source::Builtin,
            location.clone(),
            folder,
        );
    }
    let allowed: Vec<String> = allowed.iter().map(|s| s.trim().to_lowercase()).collect();
    if !allowed.is_empty() {
        found.skills.retain(|s| allowed.contains(&s.file.name));
    }
    found.skills.sort_by(|a, b| a.file.name.cmp(&b.file.name));
    Snapshot {
        stamps,
        found: Arc::new(found),
    }
}

/// The parse result of the SKILL.md at `path` in folder `folder`: from the cache when the file's
/// modification time and length are unchanged, else read (at most [`MAX_SKILL_BYTES`]) and
/// parsed.
fn load_skill(path: &Path, folder: &str) -> Result<SkillFile, String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    let (modified, len) = (meta.modified().ok(), meta.len());
    let cache = || CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((m, l, parsed)) = cache().get(path)
        && (*m, *l) == (modified, len)
        && modified.is_some()
    {
        return parsed.clone();
    }
    let parsed = if len > MAX_SKILL_BYTES {
        Err(parse::too_large(len))
    } else {
        // `take`: a file that grows after the `stat` is still read only up to the cap (+1, so
        // the growth is noticed).
        let mut text = String::new();
        match (&mut file)
            .take(MAX_SKILL_BYTES + 1)
            .read_to_string(&mut text)
        {
            Ok(_) => parse_skill(&text, folder),
            Err(e) => Err(format!("cannot read: {e}")),
        }
    };
    let entry = (modified, len, parsed.clone());
    insert_bounded(&mut cache(), CACHE_CAPACITY, path.to_owned(), entry);
    parsed
}

fn add(
    found: &mut Discovery,
    parsed: Result<SkillFile, String>,
    source: Source,
    location: String,
    folder: Folder,
) {
    match parsed {
        Ok(file) if found.get(&file.name).is_none() => found.skills.push(Skill {
            file,
            source,
            location,
            folder,
        }),
        Ok(_) => {} // shadowed by a skill of higher precedence
        Err(problem) => {
            tracing::warn!(location = %location, problem = %problem, "skills.invalid");
            found.issues.push(SkillIssue { location, problem });
        }
    }
}
