//! The fake MCP server (`mcp_server.py`, standard-library Python, as strict as the spec): its
//! `mcp.json` entries for stdio and streamable HTTP, and the log of every message it received
//! (what crossed the wire). Tools: `echo`, `env`, `add`, `sleep`, `crash`, `fail`, `image`,
//! `resource`, `cwd`, and `--tools N` more (`tool_0` …).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::wait::{WAIT, wait_for};

/// The server script.
pub fn script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support/mcp_server.py")
        .display()
        .to_string()
}

/// A stdio entry running the fake, logging to `log`, with `extra` arguments.
pub fn stdio(log: &Path, extra: &[&str]) -> Value {
    let mut args = vec![script(), "--log".into(), log.display().to_string()];
    args.extend(extra.iter().map(|a| a.to_string()));
    json!({"command": "python3", "args": args})
}

/// Writes `home/mcp.json` with these servers.
pub fn write_config(home: &Path, servers: Value) {
    std::fs::create_dir_all(home).unwrap();
    let text = json!({ "mcpServers": servers }).to_string();
    std::fs::write(home.join("mcp.json"), text).unwrap();
}

/// Every line of the fake's log: `{"event": "start", "pid"}` when a process starts, then
/// `{"transport", "message", "headers"?}` per message received.
pub fn log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `tools/call` requests the fake received: (tool, arguments).
pub fn calls(path: &Path) -> Vec<(String, Value)> {
    log(path)
        .iter()
        .filter(|l| l["message"]["method"] == "tools/call")
        .map(|l| {
            let params = &l["message"]["params"];
            (
                params["name"].as_str().unwrap_or_default().to_owned(),
                params["arguments"].clone(),
            )
        })
        .collect()
}

/// The pids of the fake's processes, in the order they started.
pub fn pids(path: &Path) -> Vec<i32> {
    pids_of(path, "start")
}

/// The pids logged with `event` (`start`: the servers; `escaped`: what `--escape` left).
pub fn pids_of(path: &Path, event: &str) -> Vec<i32> {
    log(path)
        .iter()
        .filter(|l| l["event"] == event)
        .filter_map(|l| l["pid"].as_i64())
        .map(|p| p as i32)
        .collect()
}

/// Whether process `pid` still exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')))
}

/// The fake serving streamable HTTP, stopped when dropped.
pub struct HttpServer {
    child: tokio::process::Child,
    pub url: String,
    pub log: PathBuf,
}

impl HttpServer {
    /// Starts the fake on 127.0.0.1 (a port of its choosing) with `extra` arguments, logging
    /// to `dir/http.log`.
    pub async fn start(dir: &Path, extra: &[&str]) -> Self {
        let (port_file, log) = (dir.join("http.port"), dir.join("http.log"));
        let child = tokio::process::Command::new("python3")
            .arg(script())
            .arg("--http")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .args(extra)
            .kill_on_drop(true)
            .spawn()
            .expect("python3 starts");
        let port = wait_for(WAIT, "the fake MCP server's port", || {
            std::fs::read_to_string(&port_file).ok()
        })
        .await;
        Self {
            child,
            url: format!("http://127.0.0.1:{}/mcp", port.trim()),
            log,
        }
    }

    /// Whether the server process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// A short bound for things that should be quick (a process gone after its parent stopped).
pub const SOON: Duration = Duration::from_secs(10);
