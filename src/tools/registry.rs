//! The tool registry: named tools with a JSON schema, looked up by command name (`fs.read`) or
//! model name (`fs_read`), executed with a per-session [`ToolContext`].
//!
//! Invariants: names are unique after `.`→`_` conversion; tools are sorted by command name;
//! arguments arriving as strings (comma commands) are coerced to the schema's types before the
//! tool sees them.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value};

use crate::agent::expansion::Expanded;
use crate::channels::outbox::Outbox;
use crate::config::Settings;
use crate::tape::Tape;

/// The future a tool handler returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send>>;

type Handler = Arc<dyn Fn(Value, ToolContext) -> ToolFuture + Send + Sync>;

/// A failed tool call: the message reaches the user / the model verbatim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        Self(e.to_string())
    }
}

impl From<anyhow::Error> for ToolError {
    fn from(e: anyhow::Error) -> Self {
        Self(format!("{e:#}"))
    }
}

/// What a tool call can see: its session, workspace, tape and settings.
#[derive(Clone)]
pub struct ToolContext {
    pub session_id: String,
    pub workspace: PathBuf,
    pub settings: Arc<Settings>,
    /// The session's tape (one turn at a time per session, so the lock is uncontended).
    pub tape: Arc<Mutex<Tape>>,
    /// The session's registry (for `tools`, `tool.describe`).
    pub registry: Arc<Registry>,
    /// Tools and skills whose details the system prompt shows (`$name` hints, use);
    /// bounded, `tape.reset` clears it.
    pub expanded: Arc<Mutex<Expanded>>,
    /// How the session reaches chats (`message.send`).
    pub delivery: Arc<Delivery>,
}

/// A session's way to chats: the process's outbox, and whether the running turn already
/// answered the session's own chat with `message.send` (then the framework does not post the
/// final answer again).
#[derive(Default)]
pub struct Delivery {
    pub outbox: Arc<Outbox>,
    pub answered: AtomicBool,
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
    handler: Handler,
}

impl Tool {
    /// Creates a tool whose handler receives the (coerced) argument object and the context.
    pub fn new<F, Fut>(
        name: &str,
        description: &str,
        detail: &str,
        schema: Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        Self {
            name: name.to_string(),
            description: description.to_string(),
            detail: detail.to_string(),
            schema,
            handler: Arc::new(move |args, ctx| Box::pin(handler(args, ctx))),
        }
    }

    /// The name offered to the model: `.` replaced by `_`.
    pub fn model_name(&self) -> String {
        model_name(&self.name)
    }

    /// The OpenAI `tools[]` entry for this tool.
    pub fn openai_spec(&self) -> Value {
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
pub fn model_name(name: &str) -> String {
    name.replace('.', "_")
}

/// The tools of one session, sorted by command name.
pub struct Registry {
    tools: BTreeMap<String, Tool>,
    by_model_name: BTreeMap<String, String>,
    /// The OpenAI `tools[]` entries, built once (every model call sends them).
    specs: Arc<[Value]>,
}

impl Registry {
    /// Registers `tools`, keeping only those in `allowed` when it is non-empty.
    ///
    /// # Panics
    /// When two tools share a model name — a programming error in the built-in set.
    pub fn new(tools: Vec<Tool>, allowed: &[String]) -> Self {
        let allowed: Vec<String> = allowed
            .iter()
            .map(|a| a.trim().to_lowercase())
            .filter(|a| !a.is_empty())
            .collect();
        let mut reg = Self {
            tools: BTreeMap::new(),
            by_model_name: BTreeMap::new(),
            specs: Arc::from(Vec::new()),
        };
        for tool in tools {
            let keep = allowed.is_empty()
                || allowed.iter().any(|a| {
                    *a == tool.name.to_lowercase() || *a == tool.model_name().to_lowercase()
                });
            if !keep {
                continue;
            }
            let mn = tool.model_name();
            assert!(
                !reg.by_model_name.contains_key(&mn),
                "Duplicate model tool name after conversion: {mn}"
            );
            reg.by_model_name.insert(mn, tool.name.clone());
            reg.tools.insert(tool.name.clone(), tool);
        }
        reg.specs = reg.tools.values().map(Tool::openai_spec).collect();
        reg
    }

    /// All tools, sorted by command name.
    pub fn tools(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }

    /// Finds a tool by command name or model name (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&Tool> {
        if let Some(t) = self.tools.get(name) {
            return Some(t);
        }
        let lower = name.to_lowercase();
        self.tools
            .values()
            .find(|t| t.name.to_lowercase() == lower || t.model_name().to_lowercase() == lower)
    }

    /// The OpenAI `tools` array.
    pub fn openai_specs(&self) -> Arc<[Value]> {
        self.specs.clone()
    }

    /// Runs a tool. `args` must be a JSON object (or null); string values are coerced to the
    /// schema's types and required arguments are checked before the handler runs.
    pub async fn execute(
        &self,
        name: &str,
        args: Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let tool = self
            .get(name)
            .ok_or_else(|| ToolError::new(format!("unknown tool: {name}")))?;
        let args = coerce_args(&tool.schema, args)?;
        let started = Instant::now();
        tracing::info!(tool = %tool.name, args = %summarize_args(&args), "tool.call.start");
        let result = (tool.handler)(args, ctx).await;
        let ms = started.elapsed().as_millis();
        match &result {
            Ok(_) => tracing::info!(tool = %tool.name, duration_ms = ms, "tool.call.end"),
            Err(e) => {
                tracing::warn!(tool = %tool.name, duration_ms = ms, error = %e, "tool.call.error")
            }
        }
        result
    }
}

/// `k=v …` for logs, each value cut to 60 characters.
fn summarize_args(args: &Value) -> String {
    let Some(map) = args.as_object() else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| {
            let s = v.to_string();
            let cut: String = s.chars().take(60).collect();
            format!("{k}={cut}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Coerces string values to the schema's declared types (`"5"` → 5 for integers, `"true"` →
/// true for booleans) and checks required arguments.
pub fn coerce_args(schema: &Value, args: Value) -> Result<Value, ToolError> {
    let mut map = match args {
        Value::Null => Map::new(),
        Value::Object(m) => m,
        other => {
            return Err(ToolError::new(format!(
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
                return Err(ToolError::new(format!("missing required argument: {r}")));
            }
        }
    }
    Ok(Value::Object(map))
}

fn coerce_value(key: &str, ty: &str, value: Value) -> Result<Value, ToolError> {
    let bad = |v: &Value| ToolError::new(format!("argument {key}: expected {ty}, got {v}"));
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

/// A tool's argument schema: an object with these `properties`, of which `required` must be set.
pub fn object_schema(properties: Value, required: &[&str]) -> Value {
    serde_json::json!({"type": "object", "properties": properties, "required": required})
}

/// Deserializes a tool's argument object into its typed argument struct.
pub fn parse_args<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::new(format!("invalid arguments: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn noop(name: &str) -> Tool {
        Tool::new(
            name,
            "d",
            "",
            json!({"type":"object","properties":{}}),
            |_, _| async { Ok("ok".to_string()) },
        )
    }

    #[test]
    fn allow_list_matches_command_or_model_name() {
        let reg = Registry::new(
            vec![noop("fs.read"), noop("web.search")],
            &["FS_READ".into()],
        );
        let names: Vec<_> = reg.tools().map(|t| t.name.clone()).collect();
        assert_eq!(names, vec!["fs.read"]);
        assert!(reg.get("fs_read").is_some());
    }

    #[test]
    #[should_panic(expected = "Duplicate model tool name after conversion: fs_read")]
    fn duplicate_model_names_are_rejected() {
        Registry::new(vec![noop("fs.read"), noop("fs_read")], &[]);
    }

    #[test]
    fn string_arguments_are_coerced_to_schema_types() {
        let schema = json!({"type":"object","properties":{
            "limit":{"type":"integer"},"archive":{"type":"boolean"},"q":{"type":"string"}},
            "required":["q"]});
        let out = coerce_args(&schema, json!({"limit":"5","archive":"true","q":"x"})).unwrap();
        assert_eq!(out, json!({"limit":5,"archive":true,"q":"x"}));
        let err = coerce_args(&schema, json!({"limit":"five","q":"x"})).unwrap_err();
        assert!(err.0.contains("argument limit: expected integer"), "{err}");
        let err = coerce_args(&schema, json!({})).unwrap_err();
        assert_eq!(err.0, "missing required argument: q");
    }
}
