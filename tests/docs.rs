//! The documentation holds together: the README stays a front door (at most 300 lines) and
//! ARCHITECTURE.md a short code map (at most 150), and
//! every relative link in the Markdown files names a file that exists and, with `#anchor`, a
//! heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces as `-`).

use std::path::PathBuf;

const README_MAX_LINES: usize = 300;
const ARCHITECTURE_MAX_LINES: usize = 150;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files a reader follows links between.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "docker/README.md",
    ]
    .iter()
    .map(|f| root.join(f))
    .collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

/// GitHub's anchor of a heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// The targets of `](target)` links that are not URLs, outside code.
fn relative_links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let prose: String = text
        .lines()
        .filter(|line| {
            fenced ^= line.starts_with("```");
            !fenced && !line.starts_with("```")
        })
        .flat_map(|line| line.split('`').step_by(2).chain(["\n"]))
        .collect();
    prose
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .map(|target| target.split_whitespace().next().unwrap_or("").to_owned())
        .filter(|t| !t.is_empty() && !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

#[test]
fn the_readme_is_a_front_door_and_the_code_map_is_short() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; move details to docs/"
    );
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let lines = map.lines().count();
    assert!(
        lines <= ARCHITECTURE_MAX_LINES,
        "ARCHITECTURE.md has {lines} lines; details belong in the modules' doc comments"
    );
}

#[test]
fn every_relative_link_reaches_its_file_and_heading() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        for link in relative_links(&text) {
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            let shown = doc
                .strip_prefix(root())
                .unwrap_or(&doc)
                .display()
                .to_string();
            if !target.exists() {
                broken.push(format!("{shown}: {link} (no such file)"));
                continue;
            }
            if !fragment.is_empty() && target.extension().is_some_and(|e| e == "md") {
                let headings = anchors(&std::fs::read_to_string(&target).unwrap());
                if !headings.iter().any(|h| h == fragment) {
                    broken.push(format!("{shown}: {link} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_are_githubs_and_links_in_code_are_not_links() {
    assert_eq!(anchor(" Scaling out"), "scaling-out");
    assert_eq!(anchor(" MCP servers"), "mcp-servers");
    assert_eq!(
        anchor(" What Bub promises: one answer"),
        "what-bub-promises-one-answer"
    );
    assert_eq!(
        relative_links("[a](x.md) `[b](url)` [c](https://e.x)\n```\n[d](y.md)\n```\n"),
        ["x.md"]
    );
}
