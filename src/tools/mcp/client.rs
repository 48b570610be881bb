//! One connection to an MCP server, behind Bub's small [`Connection`] trait: the only file that
//! names rmcp's client types (its major versions move fast; the rest of Bub speaks
//! [`RemoteTool`] and [`Reply`]). Built with the `mcp` feature.
//!
//! A stdio server is Bub's own child: started with `env_clear` and a minimal base environment
//! plus its entry's `env` (none of Bub's secrets), contained ([`crate::tools::contain`]: it and
//! every process it starts, `setsid` included, end on close or drop), under the guest shell's Landlock rules when its entry says `sandbox`, its
//! stderr kept as a short tail for error messages. A streamable HTTP server is reached with
//! Bub's reqwest client ([`super::http`]).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject,
};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;

use super::{Connection, Launch, RemoteTool, Reply};
use crate::config::mcp::Transport;
use crate::tools::contain::Keeper;
use crate::tools::sandbox::{self, Sandbox};

/// Variables a stdio server inherits from Bub's environment (the MCP SDKs' default set), before
/// its entry's `env`.
const INHERITED: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ",
];
/// Lines of a stdio server's stderr kept for error messages.
const STDERR_LINES: usize = 8;
/// How long a closed stdio server has to exit before its group is signalled.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Connects to the server of `launch` (starts it, for stdio) and completes the handshake.
pub(crate) async fn connect(launch: Launch<'_>) -> anyhow::Result<Arc<dyn Connection>> {
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("bub", env!("CARGO_PKG_VERSION")),
    );
    match launch.transport {
        Transport::Http { url, headers } => {
            let mut custom = std::collections::HashMap::new();
            for (name, value) in headers {
                let name = http::HeaderName::try_from(name.as_str())
                    .with_context(|| format!("header name {name:?}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .with_context(|| format!("the value of header {name}"))?;
                custom.insert(name, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let transport =
                StreamableHttpClientTransport::with_client(super::http::Http(launch.http), config);
            let service = info
                .serve(transport)
                .await
                .map_err(|e| anyhow::Error::new(e).context("initialize failed"))?;
            Ok(Arc::new(Session::new(service, None)))
        }
        Transport::Stdio { .. } => {
            let mut child = Child::spawn(&launch)?;
            let (stdout, stdin) = (child.stdout.take(), child.stdin.take());
            let (Some(stdout), Some(stdin)) = (stdout, stdin) else {
                anyhow::bail!("the server's stdin or stdout is not a pipe");
            };
            match info.serve((stdout, stdin)).await {
                Ok(service) => Ok(Arc::new(Session::new(service, Some(child)))),
                Err(e) => {
                    // Its stderr usually says why (a missing module, a bad flag).
                    let _ = tokio::time::timeout(EXIT_GRACE, child.process.wait()).await;
                    Err(anyhow::Error::new(e).context(format!("initialize failed{}", child.tail())))
                }
            }
        }
    }
}

/// A stdio server's process, contained: it and all it started end when this drops.
struct Child {
    process: tokio::process::Child,
    keeper: Keeper,
    stdout: Option<tokio::process::ChildStdout>,
    stdin: Option<tokio::process::ChildStdin>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Owns the sandbox's private temporary directory while the server runs.
    _sandbox: Option<Sandbox>,
}

impl Child {
    fn spawn(launch: &Launch<'_>) -> anyhow::Result<Self> {
        let Transport::Stdio {
            command,
            args,
            env,
            cwd,
            sandbox,
        } = launch.transport
        else {
            unreachable!("spawn is for stdio servers");
        };
        let cwd = match cwd {
            Some(dir) => launch.workspace.join(dir),
            None => launch.workspace.to_path_buf(),
        };
        let sandbox = match sandbox {
            true => Some(
                Sandbox::new(
                    sandbox::available(),
                    launch.workspace,
                    launch.home,
                    launch.user_home,
                )
                .map_err(|e| anyhow::anyhow!("{e}; the server was not started"))?,
            ),
            false => None,
        };
        let mut process = tokio::process::Command::new(command);
        process
            .args(args)
            .current_dir(&cwd)
            .env_clear()
            .envs(base_env(std::env::vars_os(), sandbox.as_ref()))
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        crate::tools::contain::keep(&mut process);
        if let Some(sandbox) = &sandbox {
            sandbox.confine(&mut process);
        }
        let mut process = process
            .spawn()
            .with_context(|| format!("starting `{command}` in {}", cwd.display()))?;
        let keeper = Keeper::of(&process);
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(pipe) = process.stderr.take() {
            tokio::spawn(keep_tail(pipe, stderr.clone()));
        }
        Ok(Self {
            stdout: process.stdout.take(),
            stdin: process.stdin.take(),
            process,
            keeper,
            stderr,
            _sandbox: sandbox,
        })
    }

    /// `; stderr: …` with the last lines the server wrote, or nothing.
    fn tail(&self) -> String {
        let lines = self.stderr.lock().expect("stderr tail");
        match lines.is_empty() {
            true => String::new(),
            false => format!(
                "; stderr: {}",
                lines.iter().cloned().collect::<Vec<_>>().join(" | ")
            ),
        }
    }

    /// Waits a little for the process to exit after its stdin closed, asks it to stop
    /// (`SIGTERM`), then ends it; whatever it started ends with it.
    async fn stop(&mut self) {
        let exited = async |child: &mut Self| {
            tokio::time::timeout(EXIT_GRACE, child.process.wait())
                .await
                .is_ok()
        };
        if !exited(self).await {
            self.keeper.ask();
            if !exited(self).await {
                self.keeper.end();
                let _ = self.process.wait().await;
            }
        }
        self.keeper.reaped();
    }
}

/// The environment a stdio server starts from: [`INHERITED`] and `LC_*` of `parent`, never one
/// of Bub's secrets; in the sandbox `HOME` and `TMPDIR` are its private directory.
fn base_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    sandbox: Option<&Sandbox>,
) -> Vec<(OsString, OsString)> {
    let secret = |key: &OsString| crate::config::secret_vars().any(|s| key == s);
    let mut env: Vec<(OsString, OsString)> = parent
        .into_iter()
        .filter(|(k, _)| {
            INHERITED.iter().any(|name| k == *name)
                || k.to_str().is_some_and(|k| k.starts_with("LC_"))
        })
        .filter(|(k, _)| !secret(k))
        .collect();
    if let Some(sandbox) = sandbox {
        env.retain(|(k, _)| k != "HOME");
        env.push(("HOME".into(), sandbox.tmp_dir().into()));
        env.push(("TMPDIR".into(), sandbox.tmp_dir().into()));
    }
    env
}

/// Keeps the last [`STDERR_LINES`] lines of `pipe` (each cut to 200 characters).
async fn keep_tail(pipe: tokio::process::ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut lines = tokio::io::BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(200).collect();
        let mut tail = tail.lock().expect("stderr tail");
        if tail.len() == STDERR_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

/// An rmcp client session (and its process, for stdio).
struct Session {
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, ClientConfig>>>,
    peer: Peer<RoleClient>,
    child: tokio::sync::Mutex<Option<Child>>,
}

impl Session {
    fn new(service: RunningService<RoleClient, ClientConfig>, child: Option<Child>) -> Self {
        Self {
            peer: service.peer().clone(),
            service: tokio::sync::Mutex::new(Some(service)),
            child: tokio::sync::Mutex::new(child),
        }
    }
}

#[async_trait::async_trait]
impl Connection for Session {
    async fn tools(&self) -> anyhow::Result<Vec<RemoteTool>> {
        let tools = self.peer.list_all_tools().await?;
        Ok(tools
            .into_iter()
            .map(|tool| RemoteTool {
                name: tool.name.into_owned(),
                description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                schema: Value::Object(JsonObject::clone(&tool.input_schema)),
            })
            .collect())
    }

    async fn call(&self, tool: &str, args: Map<String, Value>) -> anyhow::Result<Reply> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args);
        let result = self.peer.call_tool(params).await?;
        Ok(reply(&serde_json::to_value(&result)?))
    }

    fn is_closed(&self) -> bool {
        self.peer.is_transport_closed()
    }

    async fn close(&self) {
        if let Some(service) = self.service.lock().await.take() {
            let _ = service.cancel().await;
        }
        if let Some(mut child) = self.child.lock().await.take() {
            child.stop().await;
        }
    }
}

/// A `tools/call` result (its JSON) as text: text parts as they are, images and audio as a
/// line saying what they were, embedded resources' text with their URI, links as their URI;
/// the structured content when there is nothing else.
pub(crate) fn reply(result: &Value) -> Reply {
    let mut parts = Vec::new();
    for part in result["content"].as_array().into_iter().flatten() {
        let text = |key: &str| part[key].as_str().unwrap_or_default();
        let size = |key: &str| text(key).len() / 4 * 3;
        match text("type") {
            "text" => parts.push(text("text").to_owned()),
            kind @ ("image" | "audio") => parts.push(format!(
                "[{kind} {}, {} bytes: not shown]",
                text("mimeType"),
                size("data")
            )),
            "resource" => {
                let resource = &part["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                match resource["text"].as_str() {
                    Some(body) => parts.push(format!("[resource {uri}]\n{body}")),
                    None => parts.push(format!("[resource {uri}: binary, not shown]")),
                }
            }
            "resource_link" => parts.push(format!("[link {}]", text("uri"))),
            other => parts.push(format!("[{other} content: not shown]")),
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    Reply {
        text: parts.join("\n"),
        is_error: result["isError"] == Value::Bool(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_result_becomes_text_for_the_model() {
        let result = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.md", "text": "# A"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
        ], "isError": false});
        let reply = reply(&result);
        assert_eq!(
            reply.text,
            "hello\n[image image/png, 3 bytes: not shown]\n[resource file:///a.md]\n# A\n[link file:///b]"
        );
        assert!(!reply.is_error);
        let structured =
            super::reply(&json!({"content": [], "structuredContent": {"sum": 3}, "isError": true}));
        assert_eq!(structured.text, r#"{"sum":3}"#);
        assert!(structured.is_error);
    }

    #[test]
    fn a_stdio_server_gets_no_secret_and_only_the_base_variables() {
        let parent = [
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("BUB_TELEGRAM_TOKEN", "123:abc"),
            ("RANDOM_THING", "x"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = base_env(parent, None);
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["PATH", "HOME", "LC_ALL"]);
    }
}
