//! Tests of the registry: schemas, coercion, policy errors, names.

use super::*;
use serde_json::json;

/// Settings whose home and workspace are inside `dir` (the tape is written there).
fn settings_in(dir: &std::path::Path) -> crate::config::Settings {
    crate::config::Settings::with_defaults(dir.join("home"), dir.join("ws"))
}

fn noop(name: &str) -> Tool {
    Tool::new(name, "d", "", |_: NoArgs, _| async { Ok("ok".to_string()) })
}

/// Arguments of a test tool.
#[derive(serde::Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Args {
    /// where to look
    path: String,
    /// how many
    #[serde(default)]
    #[schemars(range(min = 1))]
    limit: Option<i64>,
    #[serde(default)]
    all: bool,
}

#[test]
fn the_schema_is_derived_from_the_argument_struct() {
    let schema = schema_of::<Args>();
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "where to look"},
                "limit": {"type": "integer", "minimum": 1, "description": "how many"},
                "all": {"type": "boolean", "default": false},
            },
            "required": ["path"],
        })
    );
    assert_eq!(
        schema_of::<NoArgs>(),
        json!({"type": "object", "properties": {}})
    );
}

#[tokio::test]
async fn arguments_reach_the_handler_typed_or_fail_with_a_clear_error() {
    let tool = Tool::new("t", "d", "", |a: Args, _| async move {
        Ok(format!("{} {:?} {}", a.path, a.limit, a.all))
    });
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::standalone(
        settings_in(dir.path()),
        Registry::new(Vec::new(), &[]),
        "cli",
        crate::access::Authority::terminal(),
    );
    let ctx = ctx.unwrap();
    let args = coerce_args(&tool.schema, json!({"path": "x", "limit": "3"})).unwrap();
    assert_eq!(
        (tool.handler)(args, ctx.clone()).await.unwrap(),
        "x Some(3) false"
    );
    let err = (tool.handler)(json!({"path": 5}), ctx).await.unwrap_err();
    assert!(
        err.message()
            .starts_with("invalid arguments: invalid type: integer `5`"),
        "{err}"
    );
}

/// Where a call stopped is its error's kind; the text is what the model is told.
#[tokio::test]
async fn a_failed_call_says_whether_the_name_the_arguments_or_the_policy_stopped_it() {
    let dir = tempfile::tempdir().unwrap();
    let settings = settings_in(dir.path());
    let registry = Registry::new(vec![noop("fs.read"), noop("bash")], &[]);
    let mut guest = crate::access::Authority::terminal();
    guest.role = crate::access::Role::Guest;
    let ctx = ToolContext::standalone(settings, registry, "cli", guest).unwrap();
    let registry = ctx.registry().clone();
    let unknown = registry.execute("nope", json!({}), ctx.clone()).await;
    assert_eq!(
        unknown.unwrap_err(),
        ToolError::Unknown("unknown tool: nope".into())
    );
    let invalid = registry.execute("fs.read", json!(5), ctx.clone()).await;
    assert!(
        matches!(invalid, Err(ToolError::InvalidArguments(_))),
        "{invalid:?}"
    );
    let refused = registry.execute("bash", json!({}), ctx).await.unwrap_err();
    assert!(matches!(refused, ToolError::Refused(_)), "{refused:?}");
    assert_eq!(refused.to_string(), refused.message());
}

#[test]
fn allow_list_matches_command_or_model_name() {
    let reg = Registry::new(
        vec![noop("fs.read"), noop("web.search")],
        &["FS_READ".into()],
    );
    let names: Vec<_> = reg.tools().iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, vec!["fs.read"]);
    for spelling in ["fs.read", "fs_read", "FS.Read", "Fs_READ"] {
        assert_eq!(reg.get(spelling).unwrap().name, "fs.read", "{spelling}");
    }
    assert!(reg.get("web.search").is_none(), "not allowed");
    assert!(reg.get("fs").is_none());
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
    assert!(
        err.message().contains("argument limit: expected integer"),
        "{err}"
    );
    let err = coerce_args(&schema, json!({})).unwrap_err();
    assert_eq!(err.message(), "missing required argument: q");
}

/// What each tool's typed arguments reach is what a guest's policy bounds: paths read, written
/// or sent, a shell's working directory, another chat, the global memory — each refused (and
/// recorded as a refusal) before the tool runs.
#[tokio::test]
async fn a_guests_paths_chats_and_global_memory_are_bounded_from_the_typed_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = settings_in(dir.path());
    std::fs::create_dir_all(&settings.workspace).unwrap();
    let tools = [
        "fs.read", "fs.write", "fs.edit", "fs.glob", "fs.grep", "bash",
    ];
    let more = ["message.send", "memory.remember", "memory.forget"];
    let tools: Vec<String> = tools.iter().chain(&more).map(|t| t.to_string()).collect();
    settings.guest_tools = Some(tools);
    let registry = crate::tools::builtin_registry(&[]);
    let mut guest = crate::access::Authority::terminal();
    guest.role = crate::access::Role::Guest;
    let ctx = ToolContext::standalone(settings, registry, "telegram:5", guest).unwrap();
    let registry = ctx.registry().clone();
    let outside = "outside the workspace";
    let refused = [
        ("fs.read", json!({"path": "/etc/hostname"}), outside),
        ("fs.write", json!({"path": "../x", "content": "x"}), outside),
        (
            "fs.edit",
            json!({"path": "../x", "old": "a", "new": "b"}),
            outside,
        ),
        ("fs.glob", json!({"pattern": "*", "path": " ../ "}), outside),
        ("fs.grep", json!({"pattern": "x", "path": "/etc"}), outside),
        ("bash", json!({"cmd": "true", "cwd": "/tmp"}), outside),
        (
            "message.send",
            json!({"text": "hi", "file": "../x"}),
            outside,
        ),
        (
            "message.send",
            json!({"text": "hi", "chat_id": 6}),
            "own chat",
        ),
        (
            "message.send",
            json!({"text": "hi", "channel": "discord"}),
            "own chat",
        ),
        (
            "memory.remember",
            json!({"text": "x", "scope": " global"}),
            "own chat's memory",
        ),
        (
            "memory.forget",
            json!({"text": "x", "scope": "global"}),
            "own chat's memory",
        ),
    ];
    for (tool, args, why) in refused {
        let result = registry.execute(tool, args.clone(), ctx.clone()).await;
        match result {
            Err(ToolError::Refused(message)) if message.contains(why) => {}
            other => panic!("{tool} {args}: {other:?}"),
        }
    }
    let entries = ctx.tape().entries().await.unwrap();
    let refusals = entries
        .iter()
        .filter(|e| e.is_event(crate::tape::Event::ToolRefused));
    assert_eq!(refusals.count(), 11);
}
