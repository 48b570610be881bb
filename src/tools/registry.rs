//! The tool registry: named tools with a JSON schema, looked up by command name (`fs.read`) or
//! model name (`fs_read`), executed with a per-session [`ToolContext`].
//!
//! Invariants: names are unique after `.`→`_` conversion; tools are sorted by command name;
//! arguments arriving as strings (comma commands) are coerced to the schema's types before the
//! tool sees them; what a call reaches (paths, a chat, the global memory) is authorised on its
//! typed arguments ([`Reach`]), never on JSON key names.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::ToolContext;
use super::fs::PathUse;
use super::mcp::Mcp;
use crate::access::Policy;
use crate::llm::ToolSpecs;
use crate::tape::Event;

/// The future a tool handler returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send>>;

type Handler = Arc<dyn Fn(Value, ToolContext) -> ToolFuture + Send + Sync>;

/// Parses (coerced) arguments into the tool's argument struct and drops them: whether they fit.
type Check = Arc<dyn Fn(Value) -> Result<(), ToolError> + Send + Sync>;

/// A failed tool call. Its text reaches the user and the model verbatim, whatever the kind;
/// the kind says where the call stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// No tool has this name.
    #[error("{0}")]
    Unknown(String),
    /// The arguments do not fit the tool: one missing, of the wrong type, or out of range.
    #[error("{0}")]
    InvalidArguments(String),
    /// The turn's policy does not allow the call (recorded on the tape as `tool.refused`).
    #[error("{0}")]
    Refused(String),
    /// The tool ran and failed.
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    /// The tool ran and failed.
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        Self::Failed(msg.into())
    }

    /// The arguments do not fit the tool.
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::InvalidArguments(msg.into())
    }

    /// The text the user and the model get.
    pub fn message(&self) -> &str {
        match self {
            Self::Unknown(m) | Self::InvalidArguments(m) | Self::Refused(m) | Self::Failed(m) => m,
        }
    }

    fn message_mut(&mut self) -> &mut String {
        match self {
            Self::Unknown(m) | Self::InvalidArguments(m) | Self::Refused(m) | Self::Failed(m) => m,
        }
    }

    /// The same kind of error with `f` applied to its text.
    pub(crate) fn map_message(mut self, f: impl FnOnce(String) -> String) -> Self {
        let text = std::mem::take(self.message_mut());
        *self.message_mut() = f(text);
        self
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        Self::Failed(e.to_string())
    }
}

impl From<anyhow::Error> for ToolError {
    fn from(e: anyhow::Error) -> Self {
        Self::Failed(format!("{e:#}"))
    }
}

/// What one call reaches beyond its tool, as its typed arguments say ([`Tool::reaching`]): the turn's
/// policy bounds it before the tool runs ([`authorize`]).
#[derive(Debug, Default)]
pub(crate) struct Reach<'a> {
    /// The paths the call reads, writes or sends, or a shell's working directory (an absent
    /// one is the workspace).
    pub paths: Vec<(&'a str, PathUse)>,
    /// The call sends to a chat: its channel and chat id (absent: the session's own).
    pub chat: Option<(Option<&'a str>, Option<&'a str>)>,
    /// The call changes every session's memory (`scope=global`).
    pub global_memory: bool,
}

impl<'a> Reach<'a> {
    /// A call using the path `raw` (when given and not blank) as `usage`.
    pub(crate) fn path(raw: Option<&'a str>, usage: PathUse) -> Self {
        Self {
            paths: given(raw).map(|raw| (raw, usage)).into_iter().collect(),
            ..Self::default()
        }
    }
}

/// A text argument trimmed, when given and not blank.
fn given(text: Option<&str>) -> Option<&str> {
    text.map(str::trim).filter(|s| !s.is_empty())
}

/// One tool.
#[derive(Clone)]
pub struct Tool {
    /// Command name, e.g. `fs.read`.
    pub name: String,
    /// One line shown in the tool view and offered to the model.
    pub description: String,
    /// Longer help shown when the tool is expanded (`$fs.read`, `,tool.describe`).
    pub detail: String,
    /// JSON schema of the arguments (`{"type":"object","properties":{…},"required":[…]}`).
    pub schema: Value,
    /// Offered to the model as a function; `false` for commands only a person types
    /// (`help`, `tools`, `quit`): their specs would cost tokens on every call for nothing.
    pub offered: bool,
    handler: Handler,
    check: Check,
}

impl Tool {
    /// Creates a tool whose arguments are the struct `A`, reaching nothing the policy bounds:
    /// the JSON schema offered to the model is derived from `A` ([`schema_of`]), and the handler
    /// receives the (coerced) arguments parsed into it — schema and parser cannot drift.
    pub(crate) fn new<A, F, Fut>(name: &str, description: &str, detail: &str, handler: F) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        Self::reaching(name, description, detail, |_| Reach::default(), handler)
    }

    /// [`Self::new`] for arguments some of whose fields reach beyond the tool: what `reach`
    /// reads of the parsed arguments is authorised by the turn's policy before `handler` runs.
    pub(crate) fn reaching<A, F, Fut>(
        name: &str,
        description: &str,
        detail: &str,
        reach: for<'a> fn(&'a A) -> Reach<'a>,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        let (handler, tool) = (Arc::new(handler), name.to_owned());
        Self {
            name: name.to_string(),
            description: description.to_string(),
            detail: detail.to_string(),
            schema: schema_of::<A>(),
            offered: true,
            handler: Arc::new(move |args, ctx| {
                let (handler, tool) = (handler.clone(), tool.clone());
                Box::pin(async move {
                    let args = parse_args::<A>(args)?;
                    authorize(&tool, reach(&args), &ctx).await?;
                    handler(args, ctx).await
                })
            }),
            check: Arc::new(|args| parse_args::<A>(args).map(drop)),
        }
    }

    /// A tool whose schema comes from elsewhere (an MCP server's): the handler receives the
    /// coerced JSON arguments; the server checks them against its schema.
    pub(crate) fn raw(
        name: &str,
        description: &str,
        detail: &str,
        schema: Value,
        handler: impl Fn(Value, ToolContext) -> ToolFuture + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.to_string(),
            description: description.to_string(),
            detail: detail.to_string(),
            schema,
            offered: false,
            handler: Arc::new(handler),
            check: Arc::new(|_| Ok(())),
        }
    }

    /// A comma command's `key=value` arguments parsed as this tool's, before it runs: no key
    /// it does not take, string values coerced to the schema's types, required ones present,
    /// and the argument struct parsed. An error is [`ToolError::InvalidArguments`] and says what
    /// is wrong; [`Self::usage`] says what is right.
    pub(crate) fn parse_command(&self, args: Map<String, Value>) -> Result<Value, ToolError> {
        let properties = self.schema["properties"].as_object();
        if let Some(key) = args
            .keys()
            .find(|k| properties.is_none_or(|p| !p.contains_key(*k)))
        {
            return Err(ToolError::invalid(format!("unknown argument: {key}")));
        }
        let args = coerce_args(&self.schema, Value::Object(args))?;
        (self.check)(args.clone())?;
        Ok(args)
    }

    /// The comma command's usage line, from the schema: `,fs.read path=PATH [offset=N]
    /// [limit=N]` (required arguments first, optional ones in brackets).
    pub(crate) fn usage(&self) -> String {
        let required: Vec<&str> = self.schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut words = vec![format!(",{}", self.name)];
        let properties = self.schema["properties"].as_object().into_iter().flatten();
        let (first, rest): (Vec<_>, Vec<_>) =
            properties.partition(|(key, _)| required.contains(&key.as_str()));
        for (key, property) in first.into_iter().chain(rest) {
            let value = match (property.get("enum"), property["type"].as_str()) {
                (Some(Value::Array(choices)), _) => choices
                    .iter()
                    .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join("|"),
                (_, Some("integer" | "number")) => "N".to_owned(),
                (_, Some("boolean")) => "true|false".to_owned(),
                _ => key.to_uppercase(),
            };
            words.push(match required.contains(&key.as_str()) {
                true => format!("{key}={value}"),
                false => format!("[{key}={value}]"),
            });
        }
        words.join(" ")
    }

    /// A comma command only, never offered to the model.
    pub(crate) fn command_only(mut self) -> Self {
        self.offered = false;
        self
    }

    /// The name offered to the model: `.` replaced by `_`.
    pub(crate) fn model_name(&self) -> String {
        model_name(&self.name)
    }

    /// The OpenAI `tools[]` entry for this tool.
    pub(crate) fn openai_spec(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.model_name(),
                "description": self.description,
                "parameters": self.schema,
            }
        })
    }
}

/// `fs.read` → `fs_read`.
pub(crate) fn model_name(name: &str) -> String {
    name.replace('.', "_")
}

/// The tools of the process, sorted by command name: the built-in ones, and those the MCP
/// servers offer now (looked up in the MCP catalog, `mcp.<server>.<tool>`).
pub struct Registry {
    tools: BTreeMap<String, Arc<Tool>>,
    /// Lowercased model name → command name: every spelling `get` accepts.
    by_model_name: BTreeMap<String, String>,
    /// The OpenAI `tools[]` entries of the offered tools, built once (every model call sends
    /// them).
    specs: ToolSpecs,
    /// The command name and the estimated tokens of each entry of `specs`, in the same order.
    spec_tokens: Vec<(String, u64)>,
    /// The MCP servers, when any is configured.
    mcp: Option<Arc<Mcp>>,
    /// `--tools`, lowercased (empty: every tool).
    allowed: Vec<String>,
}

impl Registry {
    /// Registers `tools`, keeping only those in `allowed` when it is non-empty.
    ///
    /// # Panics
    /// When two tools share a model name — a programming error in the built-in set.
    pub(crate) fn new(tools: Vec<Tool>, allowed: &[String]) -> Self {
        let allowed: Vec<String> = allowed
            .iter()
            .map(|a| a.trim().to_lowercase())
            .filter(|a| !a.is_empty())
            .collect();
        let mut reg = Self {
            tools: BTreeMap::new(),
            by_model_name: BTreeMap::new(),
            specs: ToolSpecs::default(),
            spec_tokens: Vec::new(),
            mcp: None,
            allowed,
        };
        for tool in tools {
            reg.insert(tool);
        }
        reg.build_specs();
        reg
    }

    /// Adds `tool` unless `--tools` leaves it out.
    fn insert(&mut self, tool: Tool) {
        let keep = self.allowed.is_empty()
            || self
                .allowed
                .iter()
                .any(|a| *a == tool.name.to_lowercase() || *a == tool.model_name().to_lowercase());
        if !keep {
            return;
        }
        let mn = tool.model_name().to_lowercase();
        assert!(
            !self.by_model_name.contains_key(&mn),
            "Duplicate model tool name after conversion: {mn}"
        );
        self.by_model_name.insert(mn, tool.name.clone());
        self.tools.insert(tool.name.clone(), Arc::new(tool));
    }

    /// The specs (and their estimated tokens) of the offered tools, built once.
    fn build_specs(&mut self) {
        let offered = || self.tools.values().filter(|t| t.offered);
        self.specs = offered().map(|t| t.openai_spec()).collect();
        self.spec_tokens = offered()
            .zip(self.specs.iter())
            .map(|(t, s)| (t.name.clone(), crate::llm::estimate_tokens(&s.to_string())))
            .collect();
    }

    /// The registry with the MCP servers' tools: `mcp.call` is offered when a server is
    /// configured (and `--tools` allows it), and `mcp.<server>.<tool>` names resolve through
    /// `mcp`'s catalog.
    pub(crate) fn with_mcp(mut self, mcp: Arc<Mcp>) -> Self {
        if mcp.is_configured() {
            self.insert(super::mcp::call_tool());
            self.build_specs();
            self.mcp = Some(mcp);
        }
        self
    }

    /// Whether MCP servers are configured (a `,mcp.…` command is a tool's, not the shell's).
    pub(crate) fn has_mcp(&self) -> bool {
        self.mcp.is_some()
    }

    /// The estimated tokens of the tool specs `policy` offers (see [`Self::openai_specs_for`]).
    pub(crate) fn spec_tokens_for(&self, policy: &Policy) -> u64 {
        self.spec_tokens
            .iter()
            .filter(|(name, _)| policy.allows(name))
            .map(|(_, tokens)| tokens)
            .sum()
    }

    /// All tools, sorted by command name: the built-in ones, then the MCP tools known now.
    pub(crate) fn tools(&self) -> Vec<Arc<Tool>> {
        let mut tools: Vec<Arc<Tool>> = self.tools.values().cloned().collect();
        if let Some(mcp) = &self.mcp {
            tools.extend(mcp.catalog().tools().cloned());
        }
        tools
    }

    /// Finds a tool by command name or model name (case-insensitive); an MCP tool by its
    /// command name, `mcp.<server>.<tool>`.
    pub fn get(&self, name: &str) -> Option<Arc<Tool>> {
        if let Some(t) = self.tools.get(name) {
            return Some(t.clone());
        }
        if let Some(mcp) = self.mcp.as_ref().filter(|_| name.starts_with("mcp."))
            && let Some(tool) = mcp.catalog().get(name)
        {
            return Some(tool);
        }
        let name = self.by_model_name.get(&model_name(&name.to_lowercase()))?;
        self.tools.get(name).cloned()
    }

    /// The OpenAI `tools` array of the tools `policy` allows (the shared array when it allows
    /// them all; else built once and kept by the policy).
    pub(crate) fn openai_specs_for(&self, policy: &Policy) -> ToolSpecs {
        if self.spec_tokens.iter().all(|(name, _)| policy.allows(name)) {
            return self.specs.clone();
        }
        policy.specs(|| {
            self.spec_tokens
                .iter()
                .zip(self.specs.iter())
                .filter(|((name, _), _)| policy.allows(name))
                .map(|(_, spec)| spec.clone())
                .collect()
        })
    }

    /// Runs a tool for the turn in `ctx`. `args` must be a JSON object (or null); string values
    /// are coerced to the schema's types and required arguments are checked; the turn's policy
    /// must allow the tool, then the arguments are parsed into the tool's struct and what they
    /// reach is authorised ([`authorize`]); a refusal — by the policy, or by the tool applying
    /// one of the policy's bounds — is recorded on the session's tape. The result —
    /// output or error — has every known secret redacted before anyone sees it.
    pub async fn execute(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let tool = self
            .get(name)
            .ok_or_else(|| ToolError::Unknown(format!("unknown tool: {name}")))?;
        let args = coerce_args(&tool.schema, args)?;
        let tool = &*tool;
        let policy = &ctx.turn.policy;
        if !policy.allows(&tool.name) {
            let refusal = ToolError::Refused(policy.refusal(&tool.name));
            record_refusal(tool, &refusal, &ctx).await;
            return Err(refusal);
        }
        let redactor = ctx.process.redactor.clone();
        let started = Instant::now();
        tracing::info!(tool = %tool.name, args = %arg_shapes(&args), "tool.call.start");
        if tracing::enabled!(tracing::Level::DEBUG) {
            let full = redactor.redact(&args.to_string()).into_owned();
            tracing::debug!(tool = %tool.name, args = %full, "tool.call.args");
        }
        let mut result = (tool.handler)(args, ctx.clone()).await;
        match &mut result {
            Ok(out) => redactor.scrub(out),
            Err(e) => redactor.scrub(e.message_mut()),
        }
        if let Err(refusal @ ToolError::Refused(_)) = &result {
            // What the arguments reach was refused, or the tool applied a bound of the policy
            // (a guest's sixth job).
            record_refusal(tool, refusal, &ctx).await;
        }
        let ms = started.elapsed().as_millis();
        match &result {
            Ok(out) => {
                tracing::info!(tool = %tool.name, duration_ms = ms, output_chars = out.len(), "tool.call.end")
            }
            Err(e) => {
                tracing::warn!(tool = %tool.name, duration_ms = ms, error_chars = e.message().len(), "tool.call.error");
                tracing::debug!(tool = %tool.name, error = %e, "tool.call.error.detail");
            }
        }
        result
    }
}

/// A refused call, logged and recorded on the session's tape (`tool.refused`).
async fn record_refusal(tool: &Tool, refusal: &ToolError, ctx: &ToolContext) {
    let role = ctx.turn.policy.role;
    tracing::info!(tool = %tool.name, %role, "tool.call.refused");
    let event = json!({"tool": tool.name, "role": role, "reason": refusal.message()});
    ctx.tape().event(Event::ToolRefused, event).await;
}

/// The turn's policy, applied to what one call of `tool` reaches: for a confined turn every
/// path must stay inside the workspace (`..`, absolute paths and symlinks that leave it are
/// refused) and within the guest file rule (`access::files`: what it reads, writes or sends), a
/// chat must be the session's own, and the global memory is not changed. Paths are checked on
/// the blocking pool within `BUB_FS_TIMEOUT_SECONDS`: one that cannot be checked in time (a
/// hung mount) is refused.
async fn authorize(tool: &str, reach: Reach<'_>, ctx: &ToolContext) -> Result<(), ToolError> {
    let policy = &ctx.turn.policy;
    if policy.confines_files() && !reach.paths.is_empty() {
        let raws = reach
            .paths
            .iter()
            .map(|(raw, usage)| (raw.to_string(), *usage));
        super::fs::check_guest_paths(ctx, raws.collect())
            .await
            .map_err(|e| ToolError::Refused(e.message().to_owned()))?;
    }
    if !policy.own_chat_only() {
        return Ok(());
    }
    if let Some((channel, chat_id)) = reach.chat {
        let own = ctx.session_chat();
        let channel = given(channel).map(str::to_lowercase);
        let same_channel = channel
            .as_deref()
            .is_none_or(|c| Some(c) == own.map(|o| o.0));
        let same_chat = given(chat_id).is_none_or(|c| Some(c) == own.map(|o| o.1));
        if own.is_none() || !same_channel || !same_chat {
            return Err(ToolError::Refused(format!(
                "`{tool}`: {}s may only send to their own chat",
                policy.role
            )));
        }
    }
    if reach.global_memory {
        return Err(ToolError::Refused(format!(
            "`{tool}`: {}s may only change their own chat's memory",
            policy.role
        )));
    }
    Ok(())
}

/// `name(len) …` for logs: argument names and value sizes, never the values.
fn arg_shapes(args: &Value) -> String {
    let Some(map) = args.as_object() else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| {
            let len = match v {
                Value::String(s) => s.chars().count(),
                other => other.to_string().len(),
            };
            format!("{k}({len})")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Coerces string values to the schema's declared types (`"5"` → 5 for integers, `"true"` →
/// true for booleans) and checks required arguments.
pub(crate) fn coerce_args(schema: &Value, args: Value) -> Result<Value, ToolError> {
    let mut map = match args {
        Value::Null => Map::new(),
        Value::Object(m) => m,
        other => {
            return Err(ToolError::invalid(format!(
                "arguments must be an object, got {other}"
            )));
        }
    };
    let props = schema.get("properties").and_then(Value::as_object);
    if let Some(props) = props {
        for (key, value) in map.iter_mut() {
            let Some(ty) = props
                .get(key)
                .and_then(|p| p.get("type"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            *value = coerce_value(key, ty, std::mem::take(value))?;
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if map.get(r).is_none_or(Value::is_null) {
                return Err(ToolError::invalid(format!(
                    "missing required argument: {r}"
                )));
            }
        }
    }
    Ok(Value::Object(map))
}

fn coerce_value(key: &str, ty: &str, value: Value) -> Result<Value, ToolError> {
    let bad = |v: &Value| ToolError::invalid(format!("argument {key}: expected {ty}, got {v}"));
    match (ty, value) {
        ("integer", Value::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| bad(&Value::String(s))),
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| bad(&Value::String(s))),
        ("boolean", Value::String(s)) => match s.trim().to_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::Bool(true)),
            "false" | "0" | "no" | "off" => Ok(Value::Bool(false)),
            _ => Err(bad(&Value::String(s))),
        },
        ("string", Value::Bool(b)) => Ok(Value::String(b.to_string())),
        ("string", Value::Number(n)) => Ok(Value::String(n.to_string())),
        (_, v) => Ok(v),
    }
}

/// The arguments of a tool that takes none.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize, JsonSchema)]
pub(crate) struct NoArgs {}

/// The JSON schema of an argument struct as offered to the model: an object with `properties`
/// (described by the fields' doc comments) and `required` (the fields that are neither `Option`
/// nor defaulted). Optional fields keep their plain type (never `[T, "null"]`, which some
/// providers refuse), numbers carry no Rust `format`, and nothing is referenced out of line.
pub(crate) fn schema_of<A: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    if let Some(map) = schema.as_object_mut() {
        map.remove("title");
        map.remove("description");
        let properties = map.entry("properties").or_insert_with(|| json!({}));
        for property in properties
            .as_object_mut()
            .into_iter()
            .flat_map(|p| p.values_mut())
        {
            // `Option<T>`: `"type": ["integer", "null"]` → `"type": "integer"`, and no
            // `"default": null`; no Rust number `format` (`int64`, `double`: tokens the model
            // cannot use, sent every call, and formats some providers refuse).
            if let Some(p) = property.as_object_mut() {
                if p.get("default") == Some(&Value::Null) {
                    p.remove("default");
                }
                p.remove("format");
            }
            if let Some(Value::Array(types)) = property.get_mut("type") {
                types.retain(|t| t != "null");
                if let [only] = types.as_slice() {
                    property["type"] = only.clone();
                }
            }
        }
    }
    schema
}

/// Deserializes a tool's argument object into its typed argument struct.
fn parse_args<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::invalid(format!("invalid arguments: {e}")))
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
