//! Skills: discovery across the project, global and built-in roots (precedence, invalid
//! SKILL.md files reported and skipped, `--skills` allow-list), the prompt's skill list and its
//! bounded expansion, the `skills.*` tools, and `bub skills check`.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bub::access::{Policy, Role};
use bub::agent::prompt::{activate_hints, details, skills_view};
use bub::config::Settings;
use bub::skills::{MAX_SKILL_BYTES, SkillRoots, Source, discover, parse_skill};
use bub::tools::builtin_registry;
use bub::tools::expansion::{Expanded, MAX_SKILL_DETAILS};
use support::bub_env::Env;

struct Roots {
    _dir: tempfile::TempDir,
    settings: Settings,
}

impl Roots {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut settings = Settings::with_defaults(dir.path().join("home"), workspace);
        settings.user_home = Some(dir.path().join("user"));
        Self {
            _dir: dir,
            settings,
        }
    }

    fn project(&self, root: &str) -> PathBuf {
        self.settings.workspace.join(root).join("skills")
    }

    /// The skill roots of the settings' workspace and user home.
    fn skills(&self) -> SkillRoots {
        SkillRoots::from_settings(&self.settings)
    }

    fn global(&self) -> PathBuf {
        self.settings
            .user_home
            .clone()
            .unwrap()
            .join(".agents/skills")
    }
}

fn write_skill(root: &Path, folder: &str, text: &str) {
    let dir = root.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

fn skill_md(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n")
}

#[test]
fn frontmatter_is_parsed_and_validated() {
    let ok = parse_skill(
        "---\nname: deploy\ndescription: Deploy the site.\nlicense: MIT\nallowed-tools: [bash, fs.read]\nmetadata:\n  channel: telegram\n  version: 2\n---\n# Deploy\n\nRun it.\n",
        "deploy",
    )
    .unwrap();
    assert_eq!(ok.name, "deploy");
    assert_eq!(ok.license.as_deref(), Some("MIT"));
    assert_eq!(ok.allowed_tools, ["bash", "fs.read"]);
    assert_eq!(ok.metadata["channel"], "telegram");
    assert_eq!(ok.metadata["version"], 2);
    assert_eq!(ok.body, "# Deploy\n\nRun it.");

    let err = |text: &str| parse_skill(text, "deploy").unwrap_err();
    assert!(err("# no frontmatter").contains("no YAML frontmatter"));
    assert!(err("---\nname: deploy\n").contains("not closed"));
    assert!(err("---\nname: [deploy\n---\n").contains("invalid YAML"));
    assert!(
        err("---\nname: deploy\ndescription: d\nauthor: me\n---\n")
            .contains("unknown frontmatter key `author`")
    );
    assert!(err("---\nname: other\ndescription: d\n---\n").contains("must match"));
    assert!(err("---\nname: Deploy\ndescription: d\n---\n").contains("hyphen-case"));
    assert!(err("---\nname: deploy\n---\n").contains("missing `description`"));
    assert!(err("---\nname: deploy\ndescription: use <b>\n---\n").contains("`<` or `>`"));
    assert!(err("---\n- a list\n---\n").contains("mapping"));
}

#[test]
fn project_beats_global_beats_builtin_and_invalid_skills_are_skipped() {
    let roots = Roots::new();
    write_skill(
        &roots.project(".agents"),
        "gh",
        &skill_md("gh", "Project gh.", "project body"),
    );
    write_skill(
        &roots.global(),
        "gh",
        &skill_md("gh", "Global gh.", "global body"),
    );
    write_skill(
        &roots.global(),
        "notes",
        &skill_md("notes", "Global notes.", "notes body"),
    );
    write_skill(
        &roots.project(".agent"),
        "legacy",
        &skill_md("legacy", "Old root.", "legacy"),
    );
    write_skill(
        &roots.project(".agents"),
        "broken",
        "---\nname: broken\n---\nno description\n",
    );
    let found = discover(&roots.skills());
    let names: Vec<&str> = found.skills.iter().map(|s| s.name()).collect();
    for expected in [
        "gh",
        "notes",
        "legacy",
        "telegram",
        "discord",
        "schedule",
        "skill-creator",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    assert!(!names.contains(&"broken"));
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted by name");
    let gh = found.get("GH").unwrap();
    assert_eq!(
        (gh.source, gh.file.body.as_str()),
        (Source::Project, "project body")
    );
    assert_eq!(found.get("notes").unwrap().source, Source::Global);
    assert_eq!(found.get("telegram").unwrap().source, Source::Builtin);
    assert_eq!(
        found.get("telegram").unwrap().location,
        "builtin:skills/telegram/SKILL.md"
    );
    assert_eq!(found.issues.len(), 1);
    assert!(found.issues[0].location.ends_with("broken/SKILL.md"));
    assert!(found.issues[0].problem.contains("description"));

    let mut only = roots.skills();
    only.allowed = vec!["notes".into(), " Telegram ".into()];
    let names: Vec<String> = discover(&only)
        .skills
        .iter()
        .map(|s| s.name().to_owned())
        .collect();
    assert_eq!(names, ["notes", "telegram"]);
}

#[test]
fn every_builtin_skill_is_valid() {
    let roots = Roots::new();
    let found = discover(&roots.skills());
    assert!(found.issues.is_empty(), "{:?}", found.issues);
    let builtin: Vec<&str> = found
        .skills
        .iter()
        .filter(|s| s.source == Source::Builtin)
        .map(|s| s.name())
        .collect();
    assert_eq!(
        builtin,
        ["discord", "gh", "schedule", "skill-creator", "telegram"]
    );
}

#[test]
fn the_prompt_lists_skills_and_shows_a_bounded_set_of_bodies() {
    let roots = Roots::new();
    for i in 0..5 {
        let name = format!("s{i}");
        write_skill(
            &roots.project(".agents"),
            &name,
            &skill_md(&name, &format!("Skill {i}."), &format!("BODY-{i}")),
        );
    }
    let found = discover(&roots.skills());
    let registry = builtin_registry(&[]);
    let owner = Policy::for_role(Role::Owner, &roots.settings);
    let mut expanded = Expanded::default();
    let view = skills_view(&found);
    assert!(view.contains("  - s0: Skill 0. ("), "{view}");
    assert!(view.contains("  - telegram: "), "{view}");
    assert!(!view.contains("BODY-"), "the list only");
    let note = |text: &str, expanded: &mut Expanded| {
        activate_hints(text, &registry, &found, expanded);
        let (tools, skills) = expanded.take_pending();
        details(&registry, &found, &owner, &tools, &skills).join("\n")
    };

    // A channel header expands the channel skill; `$name` hints expand others.
    let shown = note("channel: $telegram\n{}", &mut expanded);
    assert!(
        shown.contains("<skill name=\"telegram\" location=\"builtin:skills/telegram/SKILL.md\">")
    );
    let shown = note("use $s0 and $s1, then $s2, $s3", &mut expanded);
    assert_eq!(MAX_SKILL_DETAILS, 3);
    assert!(
        !shown.contains("BODY-0"),
        "the least recently hinted dropped out"
    );
    for i in 1..4 {
        assert!(shown.contains(&format!("BODY-{i}")), "{shown}");
    }
}

#[test]
fn a_huge_skill_body_is_cut_in_the_prompt() {
    let roots = Roots::new();
    let body = "x".repeat(50_000);
    write_skill(
        &roots.project(".agents"),
        "big",
        &skill_md("big", "Big.", &body),
    );
    let found = discover(&roots.skills());
    let registry = builtin_registry(&[]);
    let owner = Policy::for_role(Role::Owner, &roots.settings);
    let view = details(&registry, &found, &owner, &[], &["big".to_owned()]).join("\n");
    assert!(view.len() < 12_000, "{}", view.len());
    assert!(view.contains("skills.describe` shows the whole skill"));
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_tools_and_check_command() {
    let env = Env::new().await;
    let project = env.workspace.join(".agents/skills");
    write_skill(
        &project,
        "deploy",
        &skill_md("deploy", "Deploy the site.", "Run `make deploy`."),
    );
    std::fs::write(project.join("deploy/deploy.sh"), "#!/bin/sh\n").unwrap();
    let out = env.run(&["run", ",skills.list"]).await;
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        listed.contains("deploy: Deploy the site. (project, "),
        "{listed}"
    );
    assert!(listed.contains("gh: "), "{listed}");
    let out = env.run(&["run", ",skills.describe name=deploy"]).await;
    let described = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        described.contains("name: deploy\ndescription: Deploy the site.\nsource: project"),
        "{described}"
    );
    assert!(described.contains("Run `make deploy`."));
    assert!(
        described.contains("files (relative to the skill folder):\n  deploy.sh"),
        "{described}"
    );
    let out = env.run(&["run", "--skills", "gh", ",skills.list"]).await;
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(listed.lines().count(), 1, "{listed}");

    let out = env.run(&["skills", "check"]).await;
    assert!(out.status.success());
    write_skill(&project, "Bad", "---\nname: Bad\ndescription: x\n---\n");
    let out = env.run(&["skills", "check"]).await;
    assert_eq!(out.status.code(), Some(1));
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        report.contains("invalid  ") && report.contains("hyphen-case"),
        "{report}"
    );
    assert!(report.contains("ok       deploy"), "{report}");
}

/// A 408-byte "billion laughs" SKILL.md: nine levels of nine-fold aliases, 9⁹ strings expanded.
fn alias_bomb(name: &str) -> String {
    let mut text = format!("---\nname: {name}\ndescription: Boom.\nmetadata:\n");
    text.push_str(
        "  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (prev, key) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip("bcdefghi".chars())
    {
        let refs = vec![format!("*{prev}"); 9].join(",");
        text.push_str(&format!("  {key}: &{key} [{refs}]\n"));
    }
    text.push_str("---\n");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn an_alias_bomb_is_invalid_and_check_still_lists_the_valid_skills() {
    let env = Env::new().await;
    let project = env.workspace.join(".agents/skills");
    write_skill(&project, "bomb", &alias_bomb("bomb"));
    write_skill(
        &project,
        "deploy",
        &skill_md("deploy", "Deploy.", "Run it."),
    );
    let mut cmd = env.command(&["skills", "check"]);
    // Without the check the loader expands the aliases into ~21 GB: cap the child's address
    // space so a regression fails here instead of exhausting the machine.
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = std::time::Instant::now();
    let out = tokio::time::timeout(support::bub_env::WAIT, cmd.output())
        .await
        .expect("bub skills check finished in time")
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let bomb_line = report
        .lines()
        .find(|l| l.contains("bomb/SKILL.md"))
        .unwrap_or_else(|| panic!("the bomb is listed: {report}"));
    assert!(
        bomb_line.starts_with("invalid  ")
            && report.contains("YAML aliases/anchors are not allowed"),
        "{report}"
    );
    assert!(report.contains("ok       deploy"), "{report}");
    assert!(report.contains("ok       telegram"), "{report}");
}

#[test]
fn an_oversized_skill_md_is_invalid() {
    let roots = Roots::new();
    let body = "x".repeat(MAX_SKILL_BYTES as usize + 1);
    write_skill(
        &roots.project(".agents"),
        "huge",
        &skill_md("huge", "Huge.", &body),
    );
    let found = discover(&roots.skills());
    assert!(found.get("huge").is_none());
    assert_eq!(found.issues.len(), 1, "{:?}", found.issues);
    assert!(found.issues[0].location.ends_with("huge/SKILL.md"));
    assert!(
        found.issues[0].problem.contains("may be at most 256 KiB"),
        "{:?}",
        found.issues
    );
}

/// Sets the modification time of a file or folder.
fn set_mtime(path: &Path, time: std::time::SystemTime) {
    std::fs::File::open(path)
        .unwrap()
        .set_modified(time)
        .unwrap();
}

#[test]
fn a_skill_md_is_parsed_again_only_when_its_mtime_or_length_changes() {
    let roots = Roots::new();
    let root = roots.project(".agents");
    let md = root.join("notes/SKILL.md");
    let body = |found: &bub::skills::Discovery| found.get("notes").unwrap().file.body.clone();
    write_skill(&root, "notes", &skill_md("notes", "Notes.", "first"));
    let t0 = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    set_mtime(&md, t0);
    assert_eq!(body(&discover(&roots.skills())), "first");

    // Same length, same modification time: the cached parse is used (the file is not re-read).
    std::fs::write(&md, skill_md("notes", "Notes.", "FIRST")).unwrap();
    set_mtime(&md, t0);
    assert_eq!(body(&discover(&roots.skills())), "first");

    // Same length, new modification time: read again.
    set_mtime(&md, t0 + std::time::Duration::from_secs(1));
    assert_eq!(body(&discover(&roots.skills())), "FIRST");

    // New length, same modification time: read again.
    std::fs::write(&md, skill_md("notes", "Notes.", "second, longer")).unwrap();
    set_mtime(&md, t0 + std::time::Duration::from_secs(1));
    assert_eq!(body(&discover(&roots.skills())), "second, longer");

    // An edit that breaks the skill is noticed too, and so is the repair.
    std::fs::write(&md, "---\nname: notes\n---\n").unwrap();
    let found = discover(&roots.skills());
    assert!(found.get("notes").is_none());
    assert!(found.issues[0].problem.contains("description"));
    std::fs::write(&md, skill_md("notes", "Notes.", "third")).unwrap();
    assert_eq!(body(&discover(&roots.skills())), "third");
}

#[test]
fn a_discovery_is_kept_until_a_folder_or_skill_md_changes() {
    let roots = Roots::new();
    let root = roots.project(".agents");
    write_skill(&root, "notes", &skill_md("notes", "Notes.", "first"));
    let past = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    let settle = || {
        for path in [
            root.clone(),
            root.join("notes"),
            root.join("notes/SKILL.md"),
        ] {
            set_mtime(&path, past);
        }
    };
    settle();
    let first = discover(&roots.skills());
    let again = discover(&roots.skills());
    assert!(
        Arc::ptr_eq(&first, &again),
        "nothing changed: the same discovery"
    );

    // A new folder, then its SKILL.md a moment later (the same timestamp tick, possibly):
    // both are seen, because a discovery that saw a recent change is not kept.
    std::fs::create_dir(root.join("later")).unwrap();
    let found = discover(&roots.skills());
    assert!(!Arc::ptr_eq(&first, &found), "the root changed");
    assert!(found.get("later").is_none());
    std::fs::write(
        root.join("later/SKILL.md"),
        skill_md("later", "Later.", "x"),
    )
    .unwrap();
    assert!(discover(&roots.skills()).get("later").is_some());

    // An edit in place (settled again, another length) is seen.
    std::fs::write(
        root.join("notes/SKILL.md"),
        skill_md("notes", "Notes.", "edited"),
    )
    .unwrap();
    settle();
    for path in [root.join("later"), root.join("later/SKILL.md")] {
        set_mtime(&path, past);
    }
    let edited = discover(&roots.skills());
    assert_eq!(edited.get("notes").unwrap().file.body, "edited");
    assert!(
        Arc::ptr_eq(&edited, &discover(&roots.skills())),
        "kept again"
    );

    // A root that did not exist appears.
    write_skill(
        &roots.global(),
        "global-one",
        &skill_md("global-one", "G.", "g"),
    );
    assert!(discover(&roots.skills()).get("global-one").is_some());
}
