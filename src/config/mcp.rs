//! `BUB_HOME/mcp.json`: the MCP servers, in the format other agents already use —
//! `{"mcpServers": {"NAME": {"command", "args", "env", "cwd", "sandbox"} | {"url", "headers"}}}`.
//!
//! Each entry is checked on its own: a bad one is kept with its reason (shown by `bub mcp
//! list`, returned by its tools) and the others still work; only a file that is not a JSON
//! object is an error. `bub mcp add/remove` edit the file under its lock and replace it
//! atomically, keeping every other entry (and fields Bub does not read) as they were.
//!
//! Invariant: a server name is `[A-Za-z0-9_-]+`, so `mcp.<server>.<tool>` splits at the
//! second dot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The file's name in `BUB_HOME`.
pub(crate) const FILE: &str = "mcp.json";

/// How Bub reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// The only variables the child gets besides a minimal base (`PATH`, `HOME`, …).
        env: BTreeMap<String, String>,
        /// Where it runs (default: the workspace).
        cwd: Option<PathBuf>,
        /// Runs under the Landlock rules of a guest's shell.
        sandbox: bool,
    },
    /// Streamable HTTP at `url`.
    Http {
        url: reqwest::Url,
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    /// One line for `bub mcp list`: the command or the URL (never the env or header values).
    pub(crate) fn describe(&self) -> String {
        match self {
            Transport::Stdio {
                command,
                args,
                sandbox,
                ..
            } => {
                let mut line = std::iter::once(command.as_str())
                    .chain(args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                if *sandbox {
                    line.push_str(" (sandboxed)");
                }
                line
            }
            Transport::Http { url, .. } => url.as_str().to_owned(),
        }
    }

    /// The values of its `env` and `headers`: the server's own secrets, redacted like Bub's.
    pub(crate) fn secret_values(&self) -> impl Iterator<Item = &str> {
        let values = match self {
            Transport::Stdio { env, .. } => env.values(),
            Transport::Http { headers, .. } => headers.values(),
        };
        values.map(String::as_str)
    }
}

/// One entry of the file: usable, or why not.
pub(crate) type Entry = Result<Transport, String>;

/// The servers of `mcp.json`, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Servers {
    pub(crate) entries: BTreeMap<String, Entry>,
}

impl Servers {
    /// Reads `home/mcp.json`; a missing file is no servers. Servers in a build without the
    /// `mcp` feature are an error.
    pub(crate) fn load(home: &Path) -> anyhow::Result<Self> {
        let path = home.join(FILE);
        let servers = match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&text)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if !cfg!(feature = "mcp") && !servers.entries.is_empty() {
            anyhow::bail!(
                "this build of Bub has no MCP client (built without the `mcp` feature): remove \
                 the servers or install with `--features mcp`"
            );
        }
        Ok(servers)
    }

    /// Parses the file's text; entries with `"disabled": true` are left out.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let servers = document(text)?;
        let entries = servers
            .iter()
            .filter(|(_, entry)| entry["disabled"] != Value::Bool(true))
            .map(|(name, entry)| {
                let parsed = check_name(name).and_then(|()| transport(entry));
                (name.clone(), parsed)
            })
            .collect();
        Ok(Self { entries })
    }

    /// The values of every entry's `env` and `headers` (see [`Transport::secret_values`]).
    pub(crate) fn secret_values(&self) -> impl Iterator<Item = &str> {
        self.entries
            .values()
            .flatten()
            .flat_map(Transport::secret_values)
    }

    /// Whether no server is configured.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The `mcpServers` object of the file's text (an empty or missing one is no servers).
fn document(text: &str) -> anyhow::Result<Map<String, Value>> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    let root: Value = serde_json::from_str(text).context("not valid JSON")?;
    match root.get("mcpServers") {
        None | Some(Value::Null) if root.is_object() => Ok(Map::new()),
        Some(Value::Object(servers)) => Ok(servers.clone()),
        _ => anyhow::bail!(r#"expected {{"mcpServers": {{"NAME": {{...}}}}}}"#),
    }
}

/// A server name usable in `mcp.<server>.<tool>`.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match ok {
        true => Ok(()),
        false => Err(format!(
            "server name `{name}`: use letters, digits, `_` and `-` (at most 64)"
        )),
    }
}

/// One entry as a transport, or what is wrong with it.
fn transport(entry: &Value) -> Result<Transport, String> {
    let Some(entry) = entry.as_object() else {
        return Err("expected an object with `command` or `url`".into());
    };
    let text = |key: &str| field::<Option<String>>(entry, key, "must be a string");
    let kind = text("type")?;
    match (text("command")?, text("url")?, kind.as_deref()) {
        (_, _, Some("sse")) => Err(
            "the old SSE transport is not supported; use the server's streamable HTTP URL".into(),
        ),
        (Some(_), Some(_), _) => Err("give `command` or `url`, not both".into()),
        (Some(command), None, None | Some("stdio")) if !command.trim().is_empty() => {
            Ok(Transport::Stdio {
                command,
                args: field(entry, "args", "must be a list of strings")?,
                env: pairs(entry, "env")?,
                cwd: text("cwd")?.map(PathBuf::from),
                sandbox: field(entry, "sandbox", "must be true or false")?,
            })
        }
        (None, Some(url), None | Some("http" | "streamable-http" | "streamableHttp")) => {
            let url = reqwest::Url::parse(&url).map_err(|e| format!("`url`: {e}"))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(format!(
                    "`url`: expected http or https, got {}",
                    url.scheme()
                ));
            }
            Ok(Transport::Http {
                url,
                headers: pairs(entry, "headers")?,
            })
        }
        (_, _, Some(other)) if !matches!(other, "stdio" | "http" | "streamable-http") => {
            Err(format!("`type` {other:?} is not supported (stdio or http)"))
        }
        _ => Err("expected a non-empty `command` (stdio) or a `url` (streamable HTTP)".into()),
    }
}

/// `key` of `entry` as a `T` (missing or null: the default); else "`key` {wrong}".
fn field<T: DeserializeOwned + Default>(
    entry: &Map<String, Value>,
    key: &str,
    wrong: &str,
) -> Result<T, String> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(value) => T::deserialize(value).map_err(|_| format!("`{key}` {wrong}")),
    }
}

/// `key` of `entry` as an object of strings (missing: empty).
fn pairs(entry: &Map<String, Value>, key: &str) -> Result<BTreeMap<String, String>, String> {
    let wrong = match entry.get(key) {
        Some(Value::Object(_)) => "values must be strings",
        _ => "must be an object of strings",
    };
    field(entry, key, wrong)
}

/// Adds (or replaces) server `name` with `entry` in `home/mcp.json`, keeping the rest of
/// the file; the entry must be usable.
pub(crate) fn add(home: &Path, name: &str, entry: Value) -> anyhow::Result<()> {
    check_name(name).map_err(anyhow::Error::msg)?;
    transport(&entry).map_err(|e| anyhow::anyhow!("server {name}: {e}"))?;
    edit(home, |servers| {
        servers.insert(name.to_owned(), entry);
        Ok(())
    })
}

/// Removes server `name` from `home/mcp.json`; an error when there is none.
pub(crate) fn remove(home: &Path, name: &str) -> anyhow::Result<()> {
    edit(home, |servers| match servers.remove(name) {
        Some(_) => Ok(()),
        None => anyhow::bail!("no MCP server named {name} in {FILE}"),
    })
}

/// A locked read-modify-write of the file's `mcpServers` (other top-level keys kept).
fn edit(
    home: &Path,
    change: impl FnOnce(&mut Map<String, Value>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let path = home.join(FILE);
    let _lock = crate::storage::lock(&home.join(".mcp.json.lock"))?;
    let text = match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        other => other.with_context(|| format!("reading {}", path.display()))?,
    };
    let mut root: Value = match text.trim() {
        "" => Value::Object(Map::new()),
        text => serde_json::from_str(text).with_context(|| format!("{}", path.display()))?,
    };
    let Some(object) = root.as_object_mut() else {
        anyhow::bail!("{}: expected a JSON object", path.display());
    };
    let servers = object
        .entry("mcpServers")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(servers) = servers.as_object_mut() else {
        anyhow::bail!("{}: `mcpServers` must be an object", path.display());
    };
    change(servers)?;
    let body = serde_json::to_vec_pretty(&root)?;
    crate::storage::write_atomic(&path, &body, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_entry_is_checked_on_its_own() {
        let text = json!({"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "server-fs", "/tmp"], "env": {"K": "v"}},
            "web": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer t"}},
            "both": {"command": "x", "url": "http://a"},
            "badargs": {"command": "x", "args": "nope"},
            "old": {"type": "sse", "url": "http://a/sse"},
            "off": {"command": "x", "disabled": true},
            "bad.name": {"command": "x"},
        }})
        .to_string();
        let servers = Servers::parse(&text).unwrap();
        let names: Vec<_> = servers.entries.keys().map(String::as_str).collect();
        assert_eq!(names, ["bad.name", "badargs", "both", "fs", "old", "web"]);
        let fs = servers.entries["fs"].as_ref().unwrap();
        assert_eq!(fs.describe(), "npx -y server-fs /tmp");
        assert_eq!(fs.secret_values().collect::<Vec<_>>(), ["v"]);
        let web = servers.entries["web"].as_ref().unwrap();
        assert_eq!(web.describe(), "https://mcp.example.com/mcp");
        assert_eq!(web.secret_values().collect::<Vec<_>>(), ["Bearer t"]);
        let error = |name: &str| servers.entries[name].clone().unwrap_err();
        assert!(error("both").contains("not both"), "{}", error("both"));
        assert!(error("badargs").contains("`args`"));
        assert!(error("old").contains("SSE transport"));
        assert!(error("bad.name").contains("server name"));
    }

    #[test]
    fn a_file_that_is_not_a_json_object_is_an_error_and_none_is_no_servers() {
        assert!(Servers::parse("{nope").is_err());
        assert!(Servers::parse("[1]").is_err());
        assert!(Servers::parse("").unwrap().is_empty());
        assert!(Servers::parse("{}").unwrap().is_empty());
        let dir = tempfile::tempdir().unwrap();
        assert!(Servers::load(dir.path()).unwrap().is_empty());
        std::fs::write(dir.path().join(FILE), "{\"mcpServers\": 3}").unwrap();
        let err = Servers::load(dir.path()).unwrap_err();
        assert!(format!("{err:#}").contains("mcpServers"), "{err:#}");
    }

    #[test]
    fn add_and_remove_keep_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::write(
            &path,
            r#"{"mcpServers": {"keep": {"command": "a", "x-note": 1}}, "other": true}"#,
        )
        .unwrap();
        add(dir.path(), "web", json!({"url": "http://127.0.0.1:1/mcp"})).unwrap();
        let err = add(dir.path(), "bad", json!({"url": "ftp://x"})).unwrap_err();
        assert!(err.to_string().contains("server bad"), "{err}");
        remove(dir.path(), "keep").unwrap();
        assert!(remove(dir.path(), "keep").is_err());
        let root: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            root,
            json!({"mcpServers": {"web": {"url": "http://127.0.0.1:1/mcp"}}, "other": true})
        );
    }
}
