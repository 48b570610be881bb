//! `SKILL.md`: YAML frontmatter (parsed with yaml-rust2) and a Markdown body, validated.
//!
//! Rules: the file starts with a `---` line and the frontmatter ends at the next `---` line;
//! keys are `name`, `description`, `license`, `allowed-tools`, `metadata` only; `name` is
//! hyphen-case (`[a-z0-9-]`, ≤ 64 chars, no leading/trailing/double hyphen) and equals the
//! folder name; `description` is a non-empty string ≤ 1024 chars without `<`/`>`.
//!
//! Hostile input is refused before it costs anything: a file is at most [`MAX_SKILL_BYTES`],
//! and the frontmatter is scanned event by event first, so YAML anchors and aliases (the
//! "billion laughs" expansion) and nesting deeper than [`MAX_YAML_DEPTH`] are errors before a
//! YAML tree is ever built.

use serde_json::{Map, Value};
use yaml_rust2::parser::Parser;
use yaml_rust2::{Event, Yaml, YamlLoader};

/// The largest SKILL.md read (256 KiB); a larger file is invalid and never read whole.
pub const MAX_SKILL_BYTES: u64 = 256 * 1024;

/// The deepest nesting of sequences and mappings accepted in the frontmatter.
pub(crate) const MAX_YAML_DEPTH: usize = 32;

/// The parsed contents of one SKILL.md.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillFile {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub allowed_tools: Vec<String>,
    pub metadata: Map<String, Value>,
    pub body: String,
}

const KEYS: [&str; 5] = [
    "name",
    "description",
    "license",
    "allowed-tools",
    "metadata",
];

/// Parses and validates a SKILL.md found in folder `folder`. The error says what is wrong.
pub fn parse_skill(text: &str, folder: &str) -> Result<SkillFile, String> {
    if text.len() as u64 > MAX_SKILL_BYTES {
        return Err(too_large(text.len() as u64));
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim) != Some("---") {
        return Err("no YAML frontmatter: the file must start with a `---` line".into());
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines.by_ref() {
        if line.trim() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err("the frontmatter is not closed by a `---` line".into());
    }
    let body: String = lines.collect();
    check_events(&yaml)?;
    let docs = YamlLoader::load_from_str(&yaml).map_err(|e| format!("invalid YAML: {e}"))?;
    let Some(Yaml::Hash(map)) = docs.into_iter().next() else {
        return Err("the frontmatter must be a YAML mapping (key: value lines)".into());
    };
    let mut fields = Map::new();
    for (key, value) in map {
        let Some(key) = key.as_str().map(str::to_lowercase) else {
            return Err("frontmatter keys must be strings".into());
        };
        if !KEYS.contains(&key.as_str()) {
            return Err(format!(
                "unknown frontmatter key `{key}` (allowed: {})",
                KEYS.join(", ")
            ));
        }
        fields.insert(key, to_json(value));
    }
    let name = string_field(&fields, "name")?.ok_or("missing `name`")?;
    check_name(&name)?;
    if name != folder {
        return Err(format!(
            "`name` is {name:?} but the folder is {folder:?}; they must match"
        ));
    }
    let description = string_field(&fields, "description")?
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
        .ok_or("missing `description`")?;
    if description.contains(['<', '>']) {
        return Err("`description` must not contain `<` or `>`".into());
    }
    if description.chars().count() > 1024 {
        return Err("`description` is longer than 1024 characters".into());
    }
    let license = string_field(&fields, "license")?;
    let allowed_tools = match fields.get("allowed-tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => s
            .split([',', ' '])
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("`allowed-tools` must be a list of tool names")?,
        Some(_) => return Err("`allowed-tools` must be a list of tool names".into()),
    };
    let metadata = match fields.remove("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return Err("`metadata` must be a mapping".into()),
    };
    Ok(SkillFile {
        name,
        description,
        license,
        allowed_tools,
        metadata,
        body: body.trim().to_owned(),
    })
}

/// The error for a SKILL.md of `len` bytes (more than [`MAX_SKILL_BYTES`]).
pub(crate) fn too_large(len: u64) -> String {
    format!(
        "the file is {len} bytes; a SKILL.md may be at most {} KiB",
        MAX_SKILL_BYTES / 1024
    )
}

/// Scans the frontmatter's events without building anything: refuses anchors, aliases and
/// nesting deeper than [`MAX_YAML_DEPTH`]. Linear in the input, whatever it contains.
fn check_events(yaml: &str) -> Result<(), String> {
    const ALIASES: &str = "YAML aliases/anchors are not allowed in the frontmatter";
    let mut parser = Parser::new_from_str(yaml);
    let mut depth = 0usize;
    loop {
        let (event, _) = parser
            .next_token()
            .map_err(|e| format!("invalid YAML: {e}"))?;
        match event {
            Event::StreamEnd => return Ok(()),
            Event::Alias(_) => return Err(ALIASES.into()),
            Event::Scalar(_, _, anchor, _) if anchor != 0 => return Err(ALIASES.into()),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if anchor != 0 {
                    return Err(ALIASES.into());
                }
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Err(format!(
                        "the frontmatter nests deeper than {MAX_YAML_DEPTH} levels"
                    ));
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
}

fn string_field(fields: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match fields.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`name` {name:?} must be hyphen-case: lowercase letters, digits and single hyphens, at most 64 characters"
        ))
    }
}

/// A YAML value as JSON (for `metadata`).
fn to_json(value: Yaml) -> Value {
    match value {
        Yaml::String(s) => Value::String(s),
        Yaml::Real(s) => s.parse::<f64>().map_or(Value::String(s), Value::from),
        Yaml::Integer(i) => Value::from(i),
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Yaml::Hash(map) => Value::Object(
            map.into_iter()
                .filter_map(|(k, v)| Some((yaml_key(k)?, to_json(v))))
                .collect(),
        ),
        Yaml::Null | Yaml::Alias(_) | Yaml::BadValue => Value::Null,
    }
}

fn yaml_key(key: Yaml) -> Option<String> {
    match key {
        Yaml::String(s) | Yaml::Real(s) => Some(s),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frontmatter(yaml: &str) -> String {
        format!("---\n{yaml}---\nbody\n")
    }

    #[test]
    fn anchors_and_aliases_are_refused() {
        let refused = |yaml: &str| parse_skill(&frontmatter(yaml), "deploy").unwrap_err();
        // Without the check this one is a valid skill (the alias copies the name).
        let err = refused("name: &n deploy\ndescription: *n\n");
        assert!(
            err.contains("YAML aliases/anchors are not allowed"),
            "{err}"
        );
        let err = refused(
            "name: deploy\ndescription: d\nmetadata:\n  a: &a [x, x, x]\n  b: &b [*a, *a, *a]\n  c: [*b, *b, *b]\n",
        );
        assert!(
            err.contains("YAML aliases/anchors are not allowed"),
            "{err}"
        );
        // An anchor alone (no alias) is refused too.
        let err = refused("name: deploy\ndescription: d\nmetadata: &m {a: 1}\n");
        assert!(
            err.contains("YAML aliases/anchors are not allowed"),
            "{err}"
        );
        // `&` and `*` inside quoted strings are text, not YAML syntax.
        let ok = parse_skill(
            &frontmatter("name: deploy\ndescription: \"a &b *c\"\n"),
            "deploy",
        );
        assert_eq!(ok.unwrap().description, "a &b *c");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!(
            "name: deploy\ndescription: d\nmetadata:\n  a: {}x{}\n",
            "[".repeat(MAX_YAML_DEPTH + 1),
            "]".repeat(MAX_YAML_DEPTH + 1)
        );
        let err = parse_skill(&frontmatter(&deep), "deploy").unwrap_err();
        assert!(err.contains("nests deeper than 32 levels"), "{err}");
        let indented: String = (0..=MAX_YAML_DEPTH)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect();
        let err = parse_skill(
            &frontmatter(&format!(
                "name: deploy\ndescription: d\nmetadata:\n{indented}"
            )),
            "deploy",
        )
        .unwrap_err();
        assert!(err.contains("nests deeper"), "{err}");
        // Compact block sequences nest two bytes a level: within the size cap, deep enough to
        // overflow the stack of a recursive tree walk.
        let compact = format!(
            "name: deploy\ndescription: d\nmetadata:\n  a:\n    {}x\n",
            "- ".repeat(100_000)
        );
        let err = parse_skill(&frontmatter(&compact), "deploy").unwrap_err();
        assert!(err.contains("nests deeper"), "{err}");
        let shallow = "name: deploy\ndescription: d\nmetadata:\n  a: [[1, 2], {b: [3]}]\n";
        let ok = parse_skill(&frontmatter(shallow), "deploy").unwrap();
        assert_eq!(ok.metadata["a"], serde_json::json!([[1, 2], {"b": [3]}]));
    }

    #[test]
    fn an_oversized_text_is_refused() {
        let body = "x".repeat(MAX_SKILL_BYTES as usize);
        let text = format!("---\nname: deploy\ndescription: d\n---\n{body}");
        let err = parse_skill(&text, "deploy").unwrap_err();
        assert!(err.contains("may be at most 256 KiB"), "{err}");
    }
}
