//! MCP servers as tools: the servers of `BUB_HOME/mcp.json` ([`crate::config::mcp`]), their
//! connections, and their tools as registry tools named `mcp.<server>.<tool>`.
//!
//! * **Start on first use.** No server runs until a turn that may use MCP tools is about to
//!   call the model (or a comma command names one): [`Mcp::refresh`] then starts the servers
//!   not running, each within `BUB_MCP_TIMEOUT_SECONDS`, and lists their tools into the
//!   [`Catalog`]. A server that fails to start is retried at a later use, no sooner than its
//!   backoff (1 s, doubling to 5 min); one that died is started again the same way.
//! * **Calls are bounded.** Every call has the same timeout; a hung or dead server fails the
//!   call (the model is told), never the turn or the daemon.
//! * **Cheap in the prompt.** The model is offered one function, `mcp_call` (name, arguments),
//!   whose schema never changes; each tool costs one line of [`prompt_block`] in the system
//!   prompt, and its argument schema is shown only when asked (`$mcp.x.y`, `tool.describe`).
//! * **Trust.** The registry checks each `mcp.<server>.<tool>` against the turn's policy like
//!   any tool (guests get only what `BUB_GUEST_TOOLS` lists, e.g. `mcp.notes.*`) and redacts
//!   what it returns; a stdio server gets none of Bub's secrets ([`client`]).
//!
//! Invariants: at most one start of a server runs at a time (its state's lock), and a turn
//! never waits for another's start or a background restart; the catalog is replaced whole,
//! never edited in place, so a turn reads one consistent snapshot.

#[cfg(feature = "mcp")]
mod client;
#[cfg(feature = "mcp")]
mod http;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

#[cfg(feature = "mcp")]
use self::client::connect;
use super::{Tool, ToolContext, ToolError};
use crate::access::Policy;
use crate::config::Settings;
use crate::config::mcp::{Entry, Servers, Transport};
use crate::redact::Redactor;

/// The command name of the one function the model is offered for every MCP tool.
pub(crate) const CALL: &str = "mcp.call";
/// A tool's description in the prompt is cut to this many characters.
const LINE_CHARS: usize = 90;
/// The first retry of a server that failed to start; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The most tools one server may add (a runaway list would flood the prompt).
const MAX_TOOLS_PER_SERVER: usize = 128;

/// The MCP servers of a process and what they offer now.
pub struct Mcp {
    servers: BTreeMap<String, Server>,
    workspace: PathBuf,
    home: PathBuf,
    user_home: Option<PathBuf>,
    timeout: Duration,
    /// Built on first use (no client, no TLS setup, for a process without servers).
    http: OnceLock<reqwest::Client>,
    catalog: RwLock<Arc<Catalog>>,
    /// A background restart is under way ([`Mcp::prepare`]).
    restarting: AtomicBool,
    redactor: Arc<Redactor>,
}

/// A running server and the tools it listed.
type Up = (Arc<dyn Connection>, Arc<[RemoteTool]>);

/// One server: its entry and its connection state.
struct Server {
    entry: Entry,
    state: tokio::sync::Mutex<State>,
}

enum State {
    /// Not started yet.
    Idle,
    /// Running, with the tools it listed when it started.
    Up(Arc<dyn Connection>, Arc<[RemoteTool]>),
    /// The last start failed (or it died): why, and when it may be tried again.
    Down {
        error: String,
        retry_at: Instant,
        failures: u32,
    },
}

/// The tools the servers offer now, and each server's state in one line.
#[derive(Default)]
pub(crate) struct Catalog {
    /// By command name, `mcp.<server>.<tool>`.
    tools: BTreeMap<String, Arc<Tool>>,
    /// Server → `None` when up, else why not (a server never started is not listed).
    down: BTreeMap<String, String>,
}

impl Catalog {
    /// The tool named `name` (`mcp.<server>.<tool>`).
    pub(crate) fn get(&self, name: &str) -> Option<Arc<Tool>> {
        self.tools.get(name).cloned()
    }

    /// Every tool, sorted by name.
    pub(crate) fn tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.tools.values()
    }
}

impl Mcp {
    /// The servers of `settings` (none running yet); `redactor` cleans what their failures say
    /// (a server's stderr may quote its own token) before it is logged or shown.
    pub(crate) fn new(settings: &Settings, redactor: Arc<Redactor>) -> Self {
        Self::with_servers(settings, settings.mcp_servers.clone(), redactor)
    }

    fn with_servers(settings: &Settings, servers: Servers, redactor: Arc<Redactor>) -> Self {
        Self {
            redactor,
            servers: servers
                .entries
                .into_iter()
                .map(|(name, entry)| {
                    let state = tokio::sync::Mutex::new(State::Idle);
                    (name, Server { entry, state })
                })
                .collect(),
            workspace: settings.workspace.clone(),
            home: settings.home.clone(),
            user_home: settings.user_home.clone(),
            timeout: settings.mcp_timeout,
            http: OnceLock::new(),
            catalog: RwLock::default(),
            restarting: AtomicBool::new(false),
        }
    }

    /// Whether any server is configured.
    pub(crate) fn is_configured(&self) -> bool {
        !self.servers.is_empty()
    }

    /// The tools known now.
    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().expect("mcp catalog").clone()
    }

    /// Before a turn's model call: servers never started are started (first use) and waited
    /// for; a server that died, or whose backoff is over, is started again in the background,
    /// so the turn does not wait for it (the next turn sees its tools).
    pub(crate) async fn prepare(self: &Arc<Self>) {
        let mut first = Vec::new();
        let mut due = false;
        for (name, server) in &self.servers {
            // A server being started elsewhere is not waited for.
            let Ok(state) = server.state.try_lock() else {
                continue;
            };
            match &*state {
                State::Idle => first.push((name, server)),
                State::Up(conn, _) => due |= conn.is_closed(),
                State::Down { retry_at, .. } => due |= Instant::now() >= *retry_at,
            }
        }
        let started = first
            .into_iter()
            .map(|(name, server)| self.ensure(name, server));
        futures_util::future::join_all(started).await;
        if due && !self.restarting.swap(true, Ordering::AcqRel) {
            let this = self.clone();
            tokio::spawn(async move {
                this.refresh(None).await;
                this.restarting.store(false, Ordering::Release);
            });
        }
    }

    /// Starts the servers (all, or `only`) that are not running and may be tried now, and
    /// lists their tools. Servers start concurrently, each within the timeout.
    pub(crate) async fn refresh(&self, only: Option<&str>) {
        let starts = self
            .servers
            .iter()
            .filter(|(name, _)| only.is_none_or(|o| o == name.as_str()))
            .map(|(name, server)| self.ensure(name, server));
        futures_util::future::join_all(starts).await;
    }

    /// Makes sure `server` is up (unless in backoff); a change is published in the catalog.
    async fn ensure(&self, name: &str, server: &Server) {
        let mut state = server.state.lock().await;
        match &*state {
            State::Up(conn, _) if !conn.is_closed() => return,
            State::Down { retry_at, .. } if Instant::now() < *retry_at => return,
            _ => {}
        }
        let failures = match &*state {
            State::Down { failures, .. } => *failures,
            State::Up(..) => {
                tracing::warn!(server = name, "mcp.server.exited");
                0
            }
            State::Idle => 0,
        };
        *state = match self.start(name, server).await {
            Ok((conn, tools)) => State::Up(conn, tools),
            Err(error) => {
                let error = self.redactor.redact(&error).into_owned();
                tracing::warn!(server = name, %error, "mcp.server.failed");
                let backoff = FIRST_BACKOFF.saturating_mul(1 << failures.min(16));
                State::Down {
                    error,
                    retry_at: Instant::now() + backoff.min(MAX_BACKOFF),
                    failures: failures + 1,
                }
            }
        };
        self.publish(name, &state);
    }

    /// Connects to the server (starting its process), within the timeout.
    async fn start(&self, name: &str, server: &Server) -> Result<Up, String> {
        let transport = server
            .entry
            .as_ref()
            .map_err(|e| format!("mcp.json: {e}"))?;
        let launch = Launch {
            transport,
            workspace: &self.workspace,
            home: &self.home,
            user_home: self.user_home.as_deref(),
            http: self.http().clone(),
        };
        let started = Instant::now();
        let connect = async {
            let conn = connect(launch).await?;
            let mut tools = conn.tools().await?;
            // A name goes into the prompt and a command: no spaces, no markup, bounded.
            tools.retain(|t| usable_name(&t.name));
            tools.truncate(MAX_TOOLS_PER_SERVER);
            anyhow::Ok((conn, tools.into()))
        };
        match tokio::time::timeout(self.timeout, connect).await {
            Ok(Ok(up)) => {
                let ms = started.elapsed().as_millis();
                tracing::info!(server = name, duration_ms = ms, "mcp.server.started");
                Ok(up)
            }
            Ok(Err(e)) => Err(short(&e)),
            Err(_) => Err(format!(
                "did not answer within {}s",
                self.timeout.as_secs_f64()
            )),
        }
    }

    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        })
    }

    /// A new catalog with server `name`'s part as `state` says: its tools when it is up, its
    /// error when it is down (the other servers' parts as they were).
    fn publish(&self, name: &str, state: &State) {
        let mut catalog = self.catalog.write().expect("mcp catalog");
        let prefix = format!("mcp.{name}.");
        let mut next = Catalog {
            tools: catalog
                .tools
                .iter()
                .filter(|(tool, _)| !tool.starts_with(&prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            down: catalog.down.clone(),
        };
        next.down.remove(name);
        match state {
            State::Up(_, tools) => {
                for tool in tools.iter() {
                    let tool = registry_tool(name, tool);
                    next.tools.insert(tool.name.clone(), Arc::new(tool));
                }
            }
            State::Down { error, .. } => {
                next.down.insert(name.to_owned(), error.clone());
            }
            State::Idle => {}
        }
        *catalog = Arc::new(next);
    }

    /// Calls `tool` of `server` with `args`, within the timeout; a server that is not running
    /// is started first (unless in backoff).
    pub(crate) async fn call(
        &self,
        server: &str,
        tool: &str,
        args: Map<String, Value>,
    ) -> Result<String, ToolError> {
        let entry = self
            .servers
            .get(server)
            .ok_or_else(|| ToolError::Unknown(format!("no MCP server named {server}")))?;
        self.ensure(server, entry).await;
        let conn = match &*entry.state.lock().await {
            State::Up(conn, _) => conn.clone(),
            State::Down {
                error, retry_at, ..
            } => {
                let wait = retry_at.saturating_duration_since(Instant::now()).as_secs();
                return Err(ToolError::new(format!(
                    "MCP server {server} is not available ({error}); retried in {wait}s"
                )));
            }
            State::Idle => return Err(ToolError::new(format!("MCP server {server} not started"))),
        };
        let secs = self.timeout.as_secs_f64();
        match tokio::time::timeout(self.timeout, conn.call(tool, args)).await {
            Err(_) => Err(ToolError::new(format!(
                "mcp.{server}.{tool}: no answer within {secs}s (BUB_MCP_TIMEOUT_SECONDS)"
            ))),
            Ok(Err(_)) if conn.is_closed() => Err(ToolError::new(format!(
                "mcp.{server}.{tool}: the server stopped; it is started again at the next call"
            ))),
            Ok(Err(e)) => Err(ToolError::new(format!(
                "mcp.{server}.{tool}: {}",
                short(&e)
            ))),
            Ok(Ok(reply)) if reply.is_error => Err(ToolError::new(reply.text)),
            Ok(Ok(reply)) => Ok(reply.text),
        }
    }

    /// Each server: its name, what it runs or reaches, and its state (connecting to those not
    /// running) with its tools — `bub mcp list` and `bub mcp test`.
    pub async fn report(&self, only: Option<&str>) -> Vec<ServerReport> {
        self.refresh(only).await;
        let catalog = self.catalog();
        let mut out = Vec::new();
        for (name, server) in &self.servers {
            if only.is_some_and(|o| o != name) {
                continue;
            }
            let prefix = format!("mcp.{name}.");
            let tools: Vec<String> = catalog
                .tools
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix).map(str::to_owned))
                .collect();
            let error = match &server.entry {
                Err(e) => Some(format!("mcp.json: {e}")),
                Ok(_) => catalog.down.get(name).cloned(),
            };
            out.push(ServerReport {
                name: name.clone(),
                target: server
                    .entry
                    .as_ref()
                    .map(|t| t.describe())
                    .unwrap_or_default(),
                error,
                tools,
            });
        }
        out
    }

    /// Stops every server (a stdio server's process group with it).
    pub async fn shutdown(&self) {
        for server in self.servers.values() {
            let mut state = server.state.lock().await;
            if let State::Up(conn, _) = std::mem::replace(&mut *state, State::Idle) {
                conn.close().await;
            }
        }
    }
}

/// One server in `bub mcp list`.
#[derive(Debug, Clone)]
pub struct ServerReport {
    pub name: String,
    /// The command or the URL.
    pub target: String,
    /// Why it is not usable; `None` when it answered.
    pub error: Option<String>,
    /// Its tools' names.
    pub tools: Vec<String>,
}

/// A tool a server offers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RemoteTool {
    pub name: String,
    pub description: String,
    /// The JSON schema of its arguments.
    pub schema: Value,
}

/// What a call returned, as text for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub text: String,
    /// The server says the call failed.
    pub is_error: bool,
}

/// A connected server.
#[async_trait::async_trait]
pub(crate) trait Connection: Send + Sync {
    /// Every tool the server lists (all pages).
    async fn tools(&self) -> anyhow::Result<Vec<RemoteTool>>;
    /// Calls `tool` with `args`.
    async fn call(&self, tool: &str, args: Map<String, Value>) -> anyhow::Result<Reply>;
    /// The connection is gone (the process exited, the session ended).
    fn is_closed(&self) -> bool;
    /// Ends the session; a stdio server's process group is stopped.
    async fn close(&self);
}

/// Where a server runs and how Bub reaches it (read by the client, built with the `mcp` feature).
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) struct Launch<'a> {
    pub transport: &'a Transport,
    pub workspace: &'a Path,
    /// `BUB_HOME` and the user's home: what a sandboxed server must not read.
    pub home: &'a Path,
    pub user_home: Option<&'a Path>,
    pub http: reqwest::Client,
}

/// A build without the `mcp` feature has no client; `mcp.json` with servers is a configuration
/// error there ([`crate::config::mcp`]), so no server is ever started.
#[cfg(not(feature = "mcp"))]
async fn connect(_: Launch<'_>) -> anyhow::Result<Arc<dyn Connection>> {
    anyhow::bail!("this build of Bub has no MCP client (built without the `mcp` feature)")
}

/// An error in a line: rmcp's errors name their transport's types and nest their causes, so
/// this is the outermost message without type paths, and the innermost cause when it differs
/// (`initialize failed: Connection refused (os error 111)`).
pub(crate) fn short(error: &anyhow::Error) -> String {
    let (outer, root) = (error.to_string(), error.root_cause().to_string());
    let text = match outer.contains(&root) {
        true => outer,
        false => format!("{outer}: {root}"),
    };
    TYPE_PATH.replace_all(&text, "").into_owned()
}

/// ` [rmcp::transport::…<…>]` in an error's text.
static TYPE_PATH: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r" \[[A-Za-z_]+::[^\]]*\]").expect("regex"));

/// A server's tool as a registry tool `mcp.<server>.<tool>`: its schema is the server's, and
/// its details (shown when asked) carry that schema, since no function spec does.
fn registry_tool(server: &str, remote: &RemoteTool) -> Tool {
    let name = format!("mcp.{server}.{}", remote.name);
    let line = one_line(&remote.description);
    let detail = format!(
        "{}\narguments: {}",
        remote.description.trim(),
        remote.schema
    );
    let (server, tool) = (server.to_owned(), remote.name.clone());
    Tool::raw(
        &name,
        &line,
        &detail,
        remote.schema.clone(),
        move |args, ctx| {
            let (server, tool) = (server.clone(), tool.clone());
            Box::pin(async move {
                let args = match args {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                ctx.process.mcp.call(&server, &tool, args).await
            })
        },
    )
}

/// A tool name of the MCP spec's alphabet (`[A-Za-z0-9_.-]`, 1 to 128 characters).
fn usable_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The first line of a description, cut to [`LINE_CHARS`] characters.
fn one_line(description: &str) -> String {
    let first = description.trim().lines().next().unwrap_or_default().trim();
    match first.char_indices().nth(LINE_CHARS) {
        Some((cut, _)) => format!("{}…", first[..cut].trim_end()),
        None => first.to_owned(),
    }
}

/// Whether `policy` allows any MCP tool (so a turn under it has a reason to start servers).
pub(crate) fn allowed_by(policy: &Policy) -> bool {
    policy.allows(CALL)
}

/// The system prompt's MCP block: one line per tool `policy` allows, and the servers that are
/// down. Empty without MCP tools. It changes only when a server's tools or state change.
pub(crate) fn prompt_block(catalog: &Catalog, policy: &Policy) -> String {
    let lines: Vec<String> = catalog
        .tools()
        .filter(|t| policy.allows(&t.name))
        .map(|t| format!("- {}: {}", t.name, t.description))
        .collect();
    let down = catalog.down.keys().filter(|_| policy.allows(CALL));
    let down: Vec<String> = down
        .map(|s| format!("- mcp.{s}.*: not available now"))
        .collect();
    if lines.is_empty() && down.is_empty() {
        return String::new();
    }
    format!(
        "<mcp_tools>\nCall these with `mcp_call` (name, arguments). Mention $name (e.g. \
         $mcp.server.tool) to see a tool's arguments first.\n{}\n</mcp_tools>",
        lines.into_iter().chain(down).collect::<Vec<_>>().join("\n")
    )
}

#[derive(Deserialize, JsonSchema)]
struct CallArgs {
    /// the tool, e.g. mcp.github.list_issues
    name: String,
    /// the tool's arguments
    #[serde(default)]
    arguments: Map<String, Value>,
}

/// `mcp.call`: the one function through which the model calls any MCP tool (offered only when
/// servers are configured). The named tool is run by the registry — its own policy check,
/// redaction and timeout.
pub(crate) fn call_tool() -> Tool {
    Tool::new(
        CALL,
        "Call an MCP tool listed in <mcp_tools>",
        "Runs the MCP tool `name` (mcp.<server>.<tool>) with `arguments` (an object; mention \
         $name first to see which arguments it takes).",
        |CallArgs { name, arguments }, ctx: ToolContext| async move {
            if !name.starts_with("mcp.") || name == CALL {
                return Err(ToolError::invalid(format!(
                    "`{name}` is not an MCP tool: use a name of <mcp_tools>, mcp.<server>.<tool>"
                )));
            }
            let registry = ctx.registry().clone();
            if registry.get(&name).is_none() {
                ctx.process.mcp.prepare().await;
            }
            registry.execute(&name, Value::Object(arguments), ctx).await
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_name_with_spaces_or_markup_is_left_out() {
        assert!(usable_name("list_issues") && usable_name("a.b-c"));
        for bad in ["", "x y", "x\n- mcp.evil", "</mcp_tools>", &"x".repeat(129)] {
            assert!(!usable_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_description_is_one_short_line() {
        assert_eq!(one_line("  Echo it.\nMore text."), "Echo it.");
        let long = "x".repeat(200);
        let cut = one_line(&long);
        assert_eq!(cut.chars().count(), LINE_CHARS + 1);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn an_error_is_one_line_without_type_paths() {
        let error = anyhow::anyhow!(
            "Send message error Transport [rmcp::transport::worker::WorkerTransport<X<Y>>] error: \
             connection refused"
        )
        .context("initialize failed");
        assert_eq!(
            short(&error),
            "initialize failed: Send message error Transport error: connection refused"
        );
    }
}
